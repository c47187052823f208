#pragma once

// openreg's communication backend: a c10d::Backend that torch.distributed
// routes openreg tensors to (openreg_lab/device/_distributed.py registers it
// as "ogloo" for the device type "openreg").
//
// It owns no transport of its own. Python builds a Gloo group
// (torch.distributed.ProcessGroupGloo, shipped with torch) and hands it over
// as a c10d::Backend; every collective here checks its tensors, takes their
// host views (Note [Collectives on host views]), calls the same collective of
// the transport, and wraps the transport's Work (Work.h). This is the file a
// vendor rewrites to call their own collective library.
//
// Each collective is one short method: `make` says what it is (CallInfo,
// for its errors), `run` refuses what Gloo cannot run (Refusal.h: one line
// naming the call and the fix) and issues it. Beyond Gloo: ReduceOp::AVG (a
// sum, then a division when the sum completes; for float16 and bfloat16 a
// division first: Note [Averaging half-precision tensors]).
//
// openreg-lab wraps this backend in its checked collectives
// (csrc/checked/CheckedBackend.h), which compare each call across the ranks
// before it runs and record it; the backend itself knows nothing of them.

#include "distributed/Refusal.h"
#include "distributed/Work.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace openreg::distributed {

class Backend final : public c10d::Backend {
 public:
  static constexpr const char* kName = "ogloo";

  // `transport` is a group of the same rank and size (Gloo's, from Python).
  // With a `refusal`, every collective raises it instead (a group whose
  // backend serves no openreg tensor: openreg_lab/device/_distributed.py).
  Backend(c10::intrusive_ptr<c10d::Backend> transport, std::string group_name,
          std::string refusal = "");

  const std::string getBackendName() const override {
    return kName;
  }
  const c10::intrusive_ptr<c10d::Backend>& transport() const {
    return transport_;
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

 private:
  // One collective: what its errors say, the tensors the caller keeps (the
  // future's value) and those it only sends, and how it finishes.
  struct Call {
    c10d::OpType type = c10d::OpType::UNKNOWN;
    CallInfo info;
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> inputs;  // kept alive until the Work completes
    std::string refusal;             // the first reason Gloo cannot run it (Refusal.h)
    // AVG of float16/bfloat16: the inputs are divided by the group size
    // before the sum (Note [Averaging half-precision tensors]).
    bool divide_first = false;
    Work::Finish finish;
  };

  // `in` is sent (its bytes and dtype are recorded), `out` receives.
  Call make(const char* name, c10d::OpType type, const std::vector<at::Tensor>& in,
            const std::vector<at::Tensor>& out) const;

  // Refuses `call` (a ValueError naming it) or issues it: `issue` runs the
  // transport's collective on host views and returns its Work.
  c10::intrusive_ptr<c10d::Work> run(Call call,
                                     const std::function<c10::intrusive_ptr<c10d::Work>()>& issue);

  // Notes the reduce op's refusal in `call`; for AVG, Gloo sums and the
  // finishing step divides `outputs` by the group size, or for half types
  // the inputs are divided first (Note [Averaging half-precision tensors]).
  template <typename Opts>
  Opts with_sum_for_avg(const Opts& opts, const std::vector<at::Tensor>& outputs, Call& call) const;

  // The inputs Gloo sums: `views` divided by the group size when the call
  // divides first (in place when the caller's tensors are the outputs too,
  // else copies), else `views`.
  std::vector<at::Tensor> summed(bool divide_first, std::vector<at::Tensor> views,
                                 bool in_place) const;

  c10::intrusive_ptr<c10d::Backend> transport_;
  std::string group_name_;
  std::string refusal_;
};

}  // namespace openreg::distributed
