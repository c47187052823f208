#include "checked/CheckedBackend.h"

#include "checked/CheckedWork.h"
#include "distributed/HostTensors.h"
#include "distributed/Refusal.h"
#include "trace/Clock.h"

#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <unistd.h>

#include <algorithm>
#include <set>

namespace openreg::checked {

namespace {

using c10d::OpType;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

// A decoy (Note [Ranks agree before Gloo runs]) for a call on one tensor:
// `issue` runs the same collective on a list holding zeros of its shape and
// dtype. Calls on several tensors never run ahead (null).
template <typename Issue>
Decoy one_tensor_decoy(const Tensors& tensors, Issue issue) {
  if (tensors.size() != 1) {
    return nullptr;
  }
  return [sizes = tensors[0].sizes().vec(), dtype = tensors[0].scalar_type(),
          issue](c10d::Backend& inner) {
    Tensors zeros{at::zeros(sizes, at::TensorOptions().dtype(dtype))};
    return issue(inner, zeros);
  };
}

// all_to_all's split sizes for the agreement (Note [Split sizes agree]):
// elements sent and received in all, then per rank (empty splits: equal
// parts, -1 when the tensor does not divide).
std::vector<int64_t> split_row(int64_t sent, int64_t received, const std::vector<int64_t>& to,
                               const std::vector<int64_t>& from, int size, int64_t per_row_sent,
                               int64_t per_row_received) {
  std::vector<int64_t> row{sent, received};
  auto add = [&](const std::vector<int64_t>& splits, int64_t total, int64_t per_row) {
    for (int q = 0; q < size; ++q) {
      if (!splits.empty()) {
        row.push_back(q < static_cast<int>(splits.size()) ? splits[q] * per_row : -1);
      } else {
        row.push_back(total % size == 0 ? total / size : -1);
      }
    }
  };
  add(to, sent, per_row_sent);
  add(from, received, per_row_received);
  return row;
}

// The groups of this process that may have to leave at exit (Note [A rank
// that left]). Leaked on purpose: the exit hook may run after static
// destructors would have.
struct Groups {
  std::mutex mutex;
  std::set<CheckedBackend*> live;
};

Groups& groups() {
  static auto* all = new Groups();
  return *all;
}

}  // namespace

CheckedBackend::Call& CheckedBackend::Call::on(const Tensors& tensors) {
  outputs = tensors;
  device = distributed::common_device(name, {&tensors});
  terms.agree = tensors;
  return count(tensors);
}

CheckedBackend::Call& CheckedBackend::Call::from_to(const Tensors& in, const Tensors& out) {
  inputs = in;
  outputs = out;
  device = distributed::common_device(name, {&in, &out});
  terms.agree = in;
  return count(in);
}

CheckedBackend::Call& CheckedBackend::Call::compare(const Tensors& tensors) {
  terms.agree = tensors;
  return *this;
}

CheckedBackend::Call& CheckedBackend::Call::count(const Tensors& tensors) {
  bytes = distributed::nbytes(tensors);
  return dtype_from(tensors);
}

CheckedBackend::Call& CheckedBackend::Call::dtype_from(const Tensors& tensors) {
  dtype = distributed::dtype_of(tensors);
  return *this;
}

CheckedBackend::Call& CheckedBackend::Call::with_peer(int rank) {
  peer = rank;
  terms.root = rank;
  return *this;
}

CheckedBackend::Call& CheckedBackend::Call::reducing(const c10d::ReduceOp& op,
                                                     const Tensors& outputs) {
  terms.reduce_op = static_cast<int64_t>(op.op_);
  if (terms.refusal.empty()) {
    terms.refusal = distributed::reduce_refusal(op, distributed::dtype_of(outputs), outputs);
  }
  return *this;
}

CheckedBackend::Call& CheckedBackend::Call::unchecked() {
  terms.checked = false;
  return *this;
}

CheckedBackend::CheckedBackend(c10::intrusive_ptr<c10d::Backend> inner, std::string group_name,
                               c10::intrusive_ptr<c10d::Store> store)
    : c10d::Backend(inner->getRank(), inner->getSize()),
      inner_(std::move(inner)),
      group_name_(std::move(group_name)),
      checks_(inner_, store, group_name_),
      pid_(getpid()) {
  std::lock_guard<std::mutex> lock(groups().mutex);
  groups().live.insert(this);
}

CheckedBackend::~CheckedBackend() {
  {
    std::lock_guard<std::mutex> lock(groups().mutex);
    groups().live.erase(this);
  }
  leave(Leaving::kReleased);
}

void CheckedBackend::leave(Leaving how) noexcept {
  if (getpid() == pid_ && !left_.exchange(true)) {
    checks_.leave(seq_.load(), how);
  }
}

void leave_all_groups_at_exit() {
  std::lock_guard<std::mutex> lock(groups().mutex);
  for (CheckedBackend* backend : groups().live) {
    backend->leave(Leaving::kExited);
  }
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::run(
    Call call, const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  std::lock_guard<std::mutex> issuing(issue_mutex_);
  const distributed::CallInfo info{call.name,   group_name_, call.bytes, call.dtype,
                                   call.device, getRank(),   getSize()};
  const int64_t seq = next_seq(call.type, call.peer);
  Terms& terms = call.terms;
  // What the inner backend would refuse, in its order (Refusal.h).
  distributed::Refusal refused = distributed::refusal_of(
      std::move(terms.refusal), {&call.outputs, &call.inputs, &terms.agree});
  terms.refusal = std::move(refused.why);
  terms.not_dense = refused.not_dense;
  const trace::CollectiveHandle event = trace::begin_collective(traced(info, seq, call.peer));
  std::shared_ptr<AheadCall> ahead;
  c10::intrusive_ptr<c10d::Work> inner_work;
  try {
    ahead = checks_.before(call.name, std::move(terms), call.device.type(), seq,
                           distributed::describe(info));
    inner_work = issue();
  } catch (...) {
    trace::end_collective(event, trace::now_ns());
    // the ranks disagree (Agreement.h), or refuse alike: one line on every rank
    std::rethrow_exception(failure(info, std::current_exception(), ""));
  }
  auto work = c10::make_intrusive<CheckedWork>(
      std::move(inner_work), std::move(ahead), checks_.agreement(), call.type, getRank(),
      std::move(call.outputs), std::move(call.finish), info, seq, call.peer, event);
  work->watch_inner();
  return work;
}

int64_t CheckedBackend::next_seq(c10d::OpType type, int peer) {
  if (type == OpType::RECVANYSOURCE) {
    return -1;
  }
  if (type != OpType::SEND && type != OpType::RECV) {
    return seq_.fetch_add(1);
  }
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  return p2p_seq_[{type == OpType::SEND, peer}]++;
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::broadcast(Tensors& tensors,
                                                         const c10d::BroadcastOptions& opts) {
  Call call = Call("broadcast", OpType::BROADCAST).on(tensors).with_peer(opts.rootRank);
  call.terms.decoy = one_tensor_decoy(tensors, [opts](c10d::Backend& inner, Tensors& zeros) {
    return inner.broadcast(zeros, opts);
  });
  return run(std::move(call), [&] { return inner_->broadcast(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::allreduce(Tensors& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  if (!tensors.empty() && tensors[0].is_sparse() && tensors[0].is_cpu()) {
    return inner_->allreduce(tensors, opts);  // Note [One group for openreg and CPU tensors]
  }
  Call call = Call("allreduce", OpType::ALLREDUCE).on(tensors).reducing(opts.reduceOp, tensors);
  call.terms.decoy = one_tensor_decoy(tensors, [opts](c10d::Backend& inner, Tensors& zeros) {
    return inner.allreduce(zeros, opts);
  });
  return run(std::move(call), [&] { return inner_->allreduce(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::allreduce_coalesced(
    Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  Call call = Call("allreduce_coalesced", OpType::ALLREDUCE_COALESCED).on(tensors);
  call.reducing(opts.reduceOp, tensors);
  return run(std::move(call), [&] { return inner_->allreduce_coalesced(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::reduce(Tensors& tensors,
                                                      const c10d::ReduceOptions& opts) {
  Call call = Call("reduce", OpType::REDUCE).on(tensors).with_peer(opts.rootRank);
  call.reducing(opts.reduceOp, tensors);
  call.terms.decoy = one_tensor_decoy(
      tensors, [opts](c10d::Backend& inner, Tensors& zeros) { return inner.reduce(zeros, opts); });
  return run(std::move(call), [&] { return inner_->reduce(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::allgather(TensorLists& outputs, Tensors& inputs,
                                                         const c10d::AllgatherOptions& opts) {
  Call call = Call("allgather", OpType::ALLGATHER).from_to(inputs, distributed::flatten(outputs));
  if (outputs.size() != 1 || inputs.size() != 1) {
    call.terms.refusal = "pass one input tensor and one list of outputs";
  } else {
    call.terms.refusal = distributed::list_refusal("output", outputs[0], getSize(), inputs[0]);
  }
  return run(std::move(call), [&] { return inner_->allgather(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::_allgather_base(at::Tensor& output,
                                                               at::Tensor& input,
                                                               const c10d::AllgatherOptions& opts) {
  Call call = Call("allgather_into_tensor", OpType::_ALLGATHER_BASE).from_to({input}, {output});
  call.terms.decoy =
      one_tensor_decoy({input}, [opts, n = output.numel()](c10d::Backend& inner, Tensors& zeros) {
        at::Tensor gathered = at::zeros({n}, zeros[0].options());
        return inner._allgather_base(gathered, zeros[0], opts);
      });
  return run(std::move(call), [&] { return inner_->_allgather_base(output, input, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::allgather_coalesced(
    TensorLists& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) {
  Call call = Call("allgather_coalesced", OpType::ALLGATHER_COALESCED)
                  .from_to(inputs, distributed::flatten(outputs));
  return run(std::move(call), [&] { return inner_->allgather_coalesced(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) {
  Call call = Call("allgather_into_tensor_coalesced", OpType::COALESCED).from_to(inputs, outputs);
  return run(std::move(call),
             [&] { return inner_->allgather_into_tensor_coalesced(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::gather(TensorLists& outputs, Tensors& inputs,
                                                      const c10d::GatherOptions& opts) {
  Call call = Call("gather", OpType::GATHER)
                  .from_to(inputs, distributed::flatten(outputs))
                  .with_peer(opts.rootRank);
  if (getRank() == opts.rootRank && outputs.size() == 1 && inputs.size() == 1) {
    call.terms.refusal = distributed::list_refusal("output", outputs[0], getSize(), inputs[0]);
  }
  return run(std::move(call), [&] { return inner_->gather(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::scatter(Tensors& outputs, TensorLists& inputs,
                                                       const c10d::ScatterOptions& opts) {
  Call call = Call("scatter", OpType::SCATTER).from_to(distributed::flatten(inputs), outputs);
  call.compare(outputs).count(outputs).with_peer(opts.rootRank);
  if (getRank() == opts.rootRank && inputs.size() == 1 && outputs.size() == 1) {
    call.terms.refusal = distributed::list_refusal("input", inputs[0], getSize(), outputs[0]);
  }
  return run(std::move(call), [&] { return inner_->scatter(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::reduce_scatter(
    Tensors& outputs, TensorLists& inputs, const c10d::ReduceScatterOptions& opts) {
  Call call =
      Call("reduce_scatter", OpType::REDUCE_SCATTER).from_to(distributed::flatten(inputs), outputs);
  call.compare(outputs).dtype_from(outputs).reducing(opts.reduceOp, outputs);
  if (call.terms.refusal.empty() && inputs.size() == 1 && outputs.size() == 1) {
    call.terms.refusal = distributed::list_refusal("input", inputs[0], getSize(), outputs[0]);
  }
  return run(std::move(call), [&] { return inner_->reduce_scatter(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  Call call =
      Call("reduce_scatter_tensor", OpType::_REDUCE_SCATTER_BASE).from_to({input}, {output});
  call.compare({output}).reducing(opts.reduceOp, {output});
  call.terms.decoy =
      one_tensor_decoy({output}, [opts, n = input.numel()](c10d::Backend& inner, Tensors& zeros) {
        at::Tensor scattered = at::zeros({n}, zeros[0].options());
        return inner._reduce_scatter_base(zeros[0], scattered, opts);
      });
  return run(std::move(call), [&] { return inner_->_reduce_scatter_base(output, input, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  Call call = Call("reduce_scatter_tensor_coalesced", OpType::COALESCED).from_to(inputs, outputs);
  call.compare(outputs).reducing(opts.reduceOp, outputs);
  return run(std::move(call),
             [&] { return inner_->reduce_scatter_tensor_coalesced(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                             std::vector<int64_t>& output_splits,
                                                             std::vector<int64_t>& input_splits,
                                                             const c10d::AllToAllOptions& opts) {
  Call call = Call("alltoall_base", OpType::ALLTOALL_BASE).from_to({input}, {output});
  call.terms.sizes_differ = true;  // compared through the splits (Note [Split sizes agree])
  const auto per_row = [](const at::Tensor& t) {
    return t.dim() > 0 && t.size(0) > 0 ? t.numel() / t.size(0) : 0;
  };
  call.terms.splits = split_row(input.numel(), output.numel(), input_splits, output_splits,
                                getSize(), per_row(input), per_row(output));
  return run(std::move(call), [&] {
    return inner_->alltoall_base(output, input, output_splits, input_splits, opts);
  });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::alltoall(Tensors& outputs, Tensors& inputs,
                                                        const c10d::AllToAllOptions& opts) {
  Call call = Call("alltoall", OpType::ALLTOALL).from_to(inputs, outputs);
  call.terms.sizes_differ = true;  // compared through the splits (Note [Split sizes agree])
  const int size = getSize();
  if (static_cast<int>(inputs.size()) != size || static_cast<int>(outputs.size()) != size) {
    call.terms.refusal = "the input and output lists hold " + std::to_string(inputs.size()) +
                         " and " + std::to_string(outputs.size()) + " tensors for a group of " +
                         std::to_string(size) + " ranks; pass one tensor per rank in each";
  } else {
    std::vector<int64_t> to;
    std::vector<int64_t> from;
    for (int q = 0; q < size; ++q) {
      to.push_back(inputs[q].numel());
      from.push_back(outputs[q].numel());
    }
    const auto elements = [](const Tensors& t) {
      return distributed::nbytes(t) / std::max<int64_t>(1, t[0].element_size());
    };
    call.terms.splits = split_row(elements(inputs), elements(outputs), to, from, size, 1, 1);
  }
  return run(std::move(call), [&] { return inner_->alltoall(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::send(Tensors& tensors, int dst, int tag) {
  // between two ranks, not the group: Note [A send meets its recv]
  Call call = Call("send", OpType::SEND).on(tensors).with_peer(dst).unchecked();
  auto check = std::make_shared<std::function<void()>>();
  call.finish = [check] {
    if (*check) {
      (*check)();
    }
  };
  return run(std::move(call), [&] {
    *check = checks_.send(dst, tensors);
    return inner_->send(tensors, dst, tag);
  });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::recv(Tensors& tensors, int src, int tag) {
  Call call = Call("recv", OpType::RECV).on(tensors).with_peer(src).unchecked();
  return run(std::move(call), [&] {
    return checks_.recv(src, tensors, [inner = inner_, src, tag](Tensors& into) {
      return inner->recv(into, src, tag);
    });
  });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::recvAnysource(Tensors& tensors, int tag) {
  Call call = Call("recv", OpType::RECVANYSOURCE).on(tensors).unchecked();
  return run(std::move(call), [&] { return inner_->recvAnysource(tensors, tag); });
}

c10::intrusive_ptr<c10d::Work> CheckedBackend::barrier(const c10d::BarrierOptions& opts) {
  Call call = Call("barrier", OpType::BARRIER).unchecked();  // a barrier is its own check
  if (opts.device.has_value()) {
    call.device = *opts.device;
  }
  return run(std::move(call), [&] { return inner_->barrier(opts); });
}

void CheckedBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  inner_->monitoredBarrier(opts, wait_all_ranks);
}

void CheckedBackend::setSequenceNumberForGroup() {
  inner_->setSequenceNumberForGroup();
}

uint64_t CheckedBackend::getSequenceNumberForGroup() {
  return inner_->getSequenceNumberForGroup();
}

void CheckedBackend::setTimeout(std::chrono::milliseconds timeout) {
  inner_->setTimeout(timeout);
}

void CheckedBackend::abort() {
  leave(Leaving::kAborted);
  checks_.stop();
  inner_->abort();
}

void CheckedBackend::shutdown() {
  leave(Leaving::kDestroyed);
  checks_.stop();
  inner_->shutdown();
}

}  // namespace openreg::checked
