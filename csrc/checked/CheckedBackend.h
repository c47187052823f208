#pragma once

// Note [Checked collectives]
// openreg-lab's layer around a communication backend: a c10d::Backend that
// wraps any other (`inner`) and, for each collective, numbers it in its group,
// records it (Note [Collective events], csrc/trace/Collective.h), has every
// rank compare the call before the inner backend runs it (CallCheck.h:
// Note [Ranks agree before Gloo runs], Note [A send meets its recv], the
// watchdog, Note [A rank that left]), then calls the inner backend's same
// collective with the caller's own tensors and wraps its Work
// (CheckedWork.h). The inner backend moves the bytes and knows nothing of
// this layer.
//
// openreg_lab/device/_distributed.py wraps two backends in it: openreg's
// own, ogloo (csrc/distributed/Backend.h, over a Gloo group), for openreg and
// CPU tensors, and PyTorch's Gloo, registered as "checked_gloo" for CPU
// tensors, so a CPU job gets the same one-line errors. Before comparing, the
// layer works out what the inner backend would refuse (Refusal.h, Gloo's
// rules: both wrapped backends run on Gloo): a rank that refuses alone must
// say so in its row, or the others would wait for it. When the ranks agree,
// each raises the refusal the inner backend would (the same line).
//
// Dropping the layer is registering the inner backend itself; keeping it
// costs what benchmarks/bench_distributed.py measures (a lock, a number, an
// event and, when a call is not the predicted one, a round trip to the store).

#include "checked/CallCheck.h"
#include "distributed/Work.h"
#include "trace/Collective.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace openreg::checked {

class CheckedBackend final : public c10d::Backend {
 public:
  // `inner` runs the collectives (a group of the same rank and size);
  // `store` is the group's, where the ranks compare their calls.
  CheckedBackend(c10::intrusive_ptr<c10d::Backend> inner, std::string group_name,
                 c10::intrusive_ptr<c10d::Store> store);
  ~CheckedBackend() override;

  const std::string getBackendName() const override {
    return inner_->getBackendName();
  }
  const c10::intrusive_ptr<c10d::Backend>& inner() const {
    return inner_;
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void abort() override;
  void shutdown() override;

  // Tells the group's other ranks that this one left (Note [A rank that
  // left]), once, and only from the process that made the group (not a
  // forked child). Never raises.
  void leave(Leaving how) noexcept;

 private:
  // What one collective is, built by the call builder below: its name and
  // type, the tensors the caller keeps (the future's value) and those it only
  // sends, the bytes, dtype, device and peer recorded, and the terms the
  // ranks agree on (CallCheck.h).
  struct Call {
    Call(const char* name, c10d::OpType type) : name(name), type(type) {}
    // The call builder. `on`: the tensors are read and written in place
    // (broadcast, all-reduce), recorded and compared.
    Call& on(const std::vector<at::Tensor>& tensors);
    // `in` is sent, `out` receives: bytes and dtype are those of `in`, which
    // the ranks compare.
    Call& from_to(const std::vector<at::Tensor>& in, const std::vector<at::Tensor>& out);
    Call& compare(const std::vector<at::Tensor>& tensors);  // instead of the sent ones
    Call& count(const std::vector<at::Tensor>& tensors);    // bytes and dtype recorded
    Call& dtype_from(const std::vector<at::Tensor>& tensors);
    Call& with_peer(int rank);  // the root, or the peer of a send or recv
    // The reduce op as the caller asked, and what the inner backend refuses of it.
    Call& reducing(const c10d::ReduceOp& op, const std::vector<at::Tensor>& outputs);
    Call& unchecked();  // not compared across the group (Terms::checked)

    const char* name;
    c10d::OpType type;
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> inputs;
    int64_t bytes = 0;
    at::ScalarType dtype = at::ScalarType::Undefined;
    c10::Device device = c10::Device(c10::DeviceType::CPU);
    int peer = -1;
    Terms terms;
    std::function<void()> finish;  // after the inner Work succeeds (a send's check)
  };

  // Numbers, records, checks and issues `call`: `issue` runs the inner
  // backend's collective and returns its Work.
  c10::intrusive_ptr<c10d::Work> run(Call call,
                                     const std::function<c10::intrusive_ptr<c10d::Work>()>& issue);

  // The event's seq (Note [Collective events]): group collectives are
  // numbered in issue order, which every rank shares; sends and recvs per
  // peer and direction, so that the k-th send to a peer meets its k-th recv.
  int64_t next_seq(c10d::OpType type, int peer);

  c10::intrusive_ptr<c10d::Backend> inner_;
  std::string group_name_;
  CallCheck checks_;  // Note [The agreement layer]
  // Collectives of the group are issued one at a time: each one's number,
  // comparison and collective follow the same order on every rank
  // (Note [Ranks agree before Gloo runs]).
  std::mutex issue_mutex_;
  std::atomic<int64_t> seq_{0};
  std::mutex p2p_mutex_;
  std::map<std::pair<bool, int>, int64_t> p2p_seq_;
  std::atomic<bool> left_{false};
  pid_t pid_;  // the process that made the group
};

// Every checked group of this process leaves (Note [A rank that left]): the
// process exits. Called by an atexit hook (openreg_lab/device/_distributed.py).
void leave_all_groups_at_exit();

}  // namespace openreg::checked
