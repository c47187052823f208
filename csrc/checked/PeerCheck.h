#pragma once

// Note [A send meets its recv]
// Gloo trusts a send and its recv to move the same bytes: float32 sent into
// an int32 recv of the same size is read as bit patterns, and a recv of
// another size aborts the receiver inside Gloo's transport thread. So the two
// ranks of each send/recv compare what they pass (dtype and number of
// elements; shapes may differ, as with NCCL) in the group's store, without
// ever blocking the caller (a ring that posts its irecv before its send must
// not wait at the irecv):
// - the sender pushes its row on the pair's queue in the store
//   ("openreg/p2p/<src>/<dst>") and issues its send at once;
// - the receiver returns at once; a thread of its own waits for the sender's
//   row (popping the queue, in the order the caller posted its recvs from
//   that peer), then issues the recv, or on a mismatch posts its own row
//   ("openreg/p2p/<src>/<dst>/<n>/refused", n the exchange's number between
//   the two), waits until the store holds it (a set has no reply, so a
//   check on the same connection follows it), receives the sender's bytes
//   into a scratch tensor (so the sender's send completes) and fails;
// - when the send completes (Gloo completes a send only once its recv is
//   posted, so after any refusal), the sender looks for the refusal and fails
//   with the same mismatch.
// Both ranks raise the same ValueError (the caller's tensor is untouched),
// and the group lives on. Rows are popped or deleted once read, so the store
// holds no key per exchange. The cost is two store round trips for the sender
// (its push, the look for a refusal) and the receiver's pop (polled: a
// blocking pop would hold the connection other sends and recvs post
// through). A recv from any source has no known sender and is not compared
// (its sender's row stays queued, and is read by the next recv from that
// sender: do not mix the two between one pair of ranks); OPENREG_DIST_CHECK=0
// skips the check.

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace openreg::checked {

class PeerCheck : public std::enable_shared_from_this<PeerCheck> {
 public:
  // Issues a recv into `tensors` on the transport (the backend the checked
  // collectives wrap).
  using Receive = std::function<c10::intrusive_ptr<c10d::Work>(std::vector<at::Tensor>& tensors)>;

  // `store` is the group's (its own connection is cloned from it).
  PeerCheck(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
            std::string group_name);

  // The sender's side of a send of `tensor` to `dst`: posts its row and
  // returns the step its Work finishes with (it raises the mismatch).
  std::function<void()> send(int dst, const at::Tensor& tensor);

  // The receiver's side of a recv from `src` into `tensor` (`views`: the
  // list holding it, as `receive` takes it): returns the Work of the recv
  // that `receive` issues once the sender's row is read.
  c10::intrusive_ptr<c10d::Work> recv(int src, const at::Tensor& tensor,
                                      std::vector<at::Tensor> views, Receive receive);

  // Tells every peer's recvs that this rank left, after the sends it made
  // (Note [A rank that left]; `how` a Leaving). Never raises.
  void leave(int64_t how) noexcept;

 private:
  std::string key(int src, int dst, int64_t n, const char* side) const;
  std::string mismatch(int src, const std::vector<int64_t>& sent, int dst,
                       const std::vector<int64_t>& received, const char* op) const;

  c10::intrusive_ptr<c10d::Store> store_;  // its own connection
  int rank_;
  int size_;
  std::string group_name_;
  std::mutex mutex_;
  // The exchanges with each peer so far: the k-th send to a peer meets its
  // k-th recv from this rank.
  std::map<int, int64_t> sends_;
  std::map<int, int64_t> recvs_;
  // Per source: set once the last recv from it was issued on the transport
  // (the next waits for it, so Gloo matches them in the caller's order).
  std::map<int, std::shared_future<void>> issued_;
};

}  // namespace openreg::checked
