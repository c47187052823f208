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
// Each collective is one short method: the call builder says what it is,
// then `run` hands it to the lab (Note [The lab's seam] in runtime/Seam.h,
// the lab's Note [Collective events]), passes it through the agreement layer
// (CallCheck.h: every rank compares its call first, Note [The agreement
// layer]) and issues it.
// Beyond Gloo: ReduceOp::AVG (a sum, then a division when the sum completes;
// for float16 and bfloat16 a division first: Note [Averaging half-precision
// tensors]) and one-line refusals of what Gloo cannot run.

#include "distributed/CallCheck.h"
#include "distributed/Work.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace openreg::distributed {

class Backend final : public c10d::Backend {
 public:
  static constexpr const char* kName = "ogloo";

  // `transport` is a group of the same rank and size (Gloo's, from Python);
  // `store` is the group's, where the ranks compare their calls
  // (Note [Ranks agree before Gloo runs]).
  // With a `refusal`, every collective raises it instead (a group whose
  // backend serves no openreg tensor: openreg_lab/device/_distributed.py).
  Backend(c10::intrusive_ptr<c10d::Backend> transport, std::string group_name,
          c10::intrusive_ptr<c10d::Store> store, std::string refusal = "");
  ~Backend() override;

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
    Call& unchecked();          // not compared across the group (Terms::checked)

    const char* name;
    c10d::OpType type;
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> inputs;  // kept alive until the Work completes
    int64_t bytes = 0;
    at::ScalarType dtype = at::ScalarType::Undefined;
    c10::Device device = c10::Device(c10::DeviceType::CPU);
    int peer = -1;
    // AVG of float16/bfloat16: the inputs are divided by the group size
    // before the sum (Note [Averaging half-precision tensors]).
    bool divide_first = false;
    Terms terms;
    Work::Finish finish;
  };

  // Records and issues `call`: `issue` runs the transport's collective on
  // host views and returns its Work.
  c10::intrusive_ptr<c10d::Work> run(Call call,
                                     const std::function<c10::intrusive_ptr<c10d::Work>()>& issue);

  // Notes the reduce op in `call` (and refuses those Gloo lacks); for AVG,
  // Gloo sums and the finishing step divides `outputs` by the group size, or
  // for half types the inputs are divided first
  // (Note [Averaging half-precision tensors]).
  template <typename Opts>
  Opts with_sum_for_avg(const Opts& opts, const std::vector<at::Tensor>& outputs, Call& call) const;

  // The inputs Gloo sums for `call`: `views` divided by the group size when
  // the call divides first (in place when the caller's tensors are the
  // outputs too, else copies), else `views`.
  std::vector<at::Tensor> summed(bool divide_first, std::vector<at::Tensor> views,
                                 bool in_place) const;

  // The event's seq (Note [Collective events]): group collectives are
  // numbered in issue order, which every rank shares; sends and recvs per
  // peer and direction, so that the k-th send to a peer meets its k-th recv.
  int64_t next_seq(c10d::OpType type, int peer);

  c10::intrusive_ptr<c10d::Backend> transport_;
  std::string group_name_;
  std::string refusal_;
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

// Every group of this process leaves (Note [A rank that left]): the process
// exits. Called by an atexit hook (openreg_lab/device/_distributed.py).
void leave_all_groups_at_exit();

}  // namespace openreg::distributed
