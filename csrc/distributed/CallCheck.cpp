#include "distributed/CallCheck.h"

#include <c10/util/Exception.h>

namespace openreg::distributed {

CallCheck::CallCheck(const c10::intrusive_ptr<c10d::Backend>& transport,
                     const c10::intrusive_ptr<c10d::Store>& store, const std::string& group_name,
                     bool on)
    : agreement_(on ? std::make_shared<Agreement>(transport, store, group_name) : nullptr),
      peers_(on && agreement_checked() && transport->getSize() > 1
                 ? std::make_shared<PeerCheck>(store, transport->getRank(), transport->getSize(),
                                               group_name)
                 : nullptr) {}

std::shared_ptr<AheadCall> CallCheck::before(const char* op, Terms terms, c10::DeviceType device,
                                             int64_t seq, const std::string& who) {
  int64_t flags = 0;
  if (terms.not_dense) {
    flags |= Signature::kNotDense;
  } else if (!terms.refusal.empty()) {
    flags |= Signature::kRefused;
  }
  if (!terms.refusal.empty()) {
    terms.decoy = nullptr;  // a refused call never runs ahead (Note [Ranks agree before Gloo runs])
  }
  std::shared_ptr<AheadCall> ahead;
  if (terms.checked && agreement_) {
    Signature sig(op, terms.agree, terms.root, terms.reduce_op, device, flags);
    if (terms.sizes_differ) {
      sig.without_sizes();
    }
    sig.splits = std::move(terms.splits);
    try {
      ahead = agreement_->start(op, sig, seq, std::move(terms.decoy));
    } catch (const c10::ValueError&) {
      // the ranks disagree; a rank that refuses its call for a reason the
      // others cannot name says why
      TORCH_CHECK_VALUE(!(flags & Signature::kRefused), who, ": ", terms.refusal);
      throw;
    }
  }
  TORCH_CHECK_VALUE(terms.refusal.empty(), who, ": ", terms.refusal);
  return ahead;
}

std::function<void()> CallCheck::send(int dst, const std::vector<at::Tensor>& tensors) {
  if (!peers_ || tensors.size() != 1) {
    return nullptr;
  }
  return peers_->send(dst, tensors[0]);
}

c10::intrusive_ptr<c10d::Work> CallCheck::recv(int src, const std::vector<at::Tensor>& tensors,
                                               std::vector<at::Tensor> views,
                                               PeerCheck::Receive receive) {
  if (!peers_ || tensors.size() != 1) {
    return receive(views);
  }
  return peers_->recv(src, tensors[0], std::move(views), std::move(receive));
}

void CallCheck::stop() {
  if (agreement_) {
    agreement_->stop();
  }
}

}  // namespace openreg::distributed
