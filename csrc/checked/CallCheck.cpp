#include "checked/CallCheck.h"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <algorithm>

namespace openreg::checked {

CallCheck::CallCheck(const c10::intrusive_ptr<c10d::Backend>& transport,
                     const c10::intrusive_ptr<c10d::Store>& store, const std::string& group_name)
    : agreement_(std::make_shared<Agreement>(transport, store, group_name)),
      peers_(agreement_checked() && transport->getSize() > 1
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

c10::intrusive_ptr<c10d::Work> CallCheck::recv(int src, std::vector<at::Tensor> tensors,
                                               PeerCheck::Receive receive) {
  if (!peers_ || tensors.size() != 1) {
    return receive(tensors);
  }
  const at::Tensor tensor = tensors[0];
  return peers_->recv(src, tensor, std::move(tensors), std::move(receive));
}

namespace {

// c10's log level above warnings while it lives. A rank may leave after the
// store's host did (rank 0 under init_method tcp:// often exits first), and
// TCPStore logs each send to a closed store with a C++ backtrace before it
// raises: a rank that leaves has nothing to report about that.
class NoStoreWarnings {
 public:
  NoStoreWarnings() : saved_(FLAGS_caffe2_log_level) {
    FLAGS_caffe2_log_level = std::max(saved_, kErrorsOnly);
  }
  ~NoStoreWarnings() {
    FLAGS_caffe2_log_level = saved_;
  }
  NoStoreWarnings(const NoStoreWarnings&) = delete;
  NoStoreWarnings& operator=(const NoStoreWarnings&) = delete;

 private:
  static constexpr int kErrorsOnly = 2;  // c10: 0 info, 1 warning, 2 error
  int saved_;
};

}  // namespace

void CallCheck::leave(int64_t next_seq, Leaving how) noexcept {
  NoStoreWarnings quiet;
  if (agreement_) {
    agreement_->leave(next_seq, how);
  }
  if (peers_) {
    peers_->leave(static_cast<int64_t>(how));
  }
}

void CallCheck::stop() {
  if (agreement_) {
    agreement_->stop();
  }
}

}  // namespace openreg::checked
