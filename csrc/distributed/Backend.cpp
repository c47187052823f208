#include "distributed/Backend.h"

#include "distributed/HostTensors.h"
#include "trace/Clock.h"

#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

namespace openreg::distributed {

namespace {

using c10d::OpType;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

Tensors flatten(const TensorLists& lists) {
  Tensors out;
  for (const auto& list : lists) {
    out.insert(out.end(), list.begin(), list.end());
  }
  return out;
}

at::ScalarType dtype_of(const Tensors& tensors) {
  for (const at::Tensor& t : tensors) {
    if (t.defined()) {
      return t.scalar_type();
    }
  }
  return at::ScalarType::Undefined;
}

// A decoy (Note [Ranks agree before Gloo runs]) for a call on one tensor:
// `issue` runs the same collective on a list holding zeros of its shape and
// dtype. Calls on several tensors never run ahead (null).
template <typename Issue>
Decoy one_tensor_decoy(const Tensors& tensors, Issue issue) {
  if (tensors.size() != 1) {
    return nullptr;
  }
  return [sizes = tensors[0].sizes().vec(), dtype = tensors[0].scalar_type(),
          issue](c10d::Backend& transport) {
    Tensors zeros{at::zeros(sizes, at::TensorOptions().dtype(dtype))};
    return issue(transport, zeros);
  };
}

}  // namespace

Backend::Backend(c10::intrusive_ptr<c10d::Backend> transport, std::string group_name,
                 c10::intrusive_ptr<c10d::Store> store)
    : c10d::Backend(transport->getRank(), transport->getSize()),
      transport_(std::move(transport)),
      group_name_(std::move(group_name)),
      agreement_(std::make_shared<Agreement>(transport_, std::move(store))) {}

c10::intrusive_ptr<c10d::Work> Backend::run(
    Call call, const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  std::lock_guard<std::mutex> issuing(issue_mutex_);
  trace::CollectiveInfo info;
  info.name = call.name;
  info.group = group_name_;
  info.seq = next_seq(call.type, call.peer);
  info.bytes = call.bytes;
  info.dtype = call.dtype;
  info.device = call.device;
  info.rank = getRank();
  info.size = getSize();
  info.peer = call.peer;
  const trace::CollectiveHandle event = trace::begin_collective(info);
  std::shared_ptr<AheadCall> ahead;
  c10::intrusive_ptr<c10d::Work> transport_work;
  try {
    if (call.checked) {
      ahead =
          agreement_->start(call.name, Signature(call.name, call.agree, call.peer, call.reduce_op),
                            info.seq, std::move(call.decoy));
    }
    transport_work = issue();
  } catch (const c10::ValueError&) {
    trace::end_collective(event, trace::now_ns());
    throw;  // the ranks disagree (Agreement.h): already says so on every rank
  } catch (const std::exception& e) {
    trace::end_collective(event, trace::now_ns());
    TORCH_CHECK_WITH(DistBackendError, false, describe(info), " failed: ", e.what());
  }
  auto work = c10::make_intrusive<Work>(
      std::move(transport_work), std::move(ahead), agreement_, call.type, getRank(),
      std::move(call.outputs), std::move(call.inputs), std::move(call.finish), info, event);
  work->watch_transport();
  return work;
}

int64_t Backend::next_seq(c10d::OpType type, int peer) {
  if (type == OpType::RECVANYSOURCE) {
    return -1;
  }
  if (type != OpType::SEND && type != OpType::RECV) {
    return seq_.fetch_add(1);
  }
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  return p2p_seq_[{type == OpType::SEND, peer}]++;
}

template <typename Opts>
Opts Backend::with_sum_for_avg(const Opts& opts, const Tensors& outputs, const char* op,
                               Call& call) const {
  call.reduce_op = static_cast<int64_t>(opts.reduceOp.op_);
  if (!(opts.reduceOp == c10d::ReduceOp::AVG)) {
    return opts;
  }
  for (const at::Tensor& t : outputs) {
    TORCH_CHECK(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()),
                "openreg ", op, ": ReduceOp.AVG needs floating-point tensors, got ",
                t.scalar_type(), "; use ReduceOp.SUM and divide by the group size");
  }
  Opts sum = opts;
  sum.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
  const int size = getSize();
  call.finish = [views = host_views(outputs), size] {
    for (const at::Tensor& v : views) {
      v.div_(size);
    }
  };
  return sum;
}

c10::intrusive_ptr<c10d::Work> Backend::broadcast(Tensors& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  Call call{"broadcast", OpType::BROADCAST, tensors};
  call.device = common_device(call.name, {&tensors});
  call.bytes = nbytes(tensors);
  call.dtype = dtype_of(tensors);
  call.agree = tensors;
  call.peer = static_cast<int>(opts.rootRank);
  call.decoy = one_tensor_decoy(tensors, [opts](c10d::Backend& transport, Tensors& zeros) {
    return transport.broadcast(zeros, opts);
  });
  return run(std::move(call), [&] {
    Tensors views = host_views(tensors);
    return transport_->broadcast(views, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce(Tensors& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  Call call{"allreduce", OpType::ALLREDUCE, tensors};
  call.device = common_device(call.name, {&tensors});
  call.bytes = nbytes(tensors);
  call.dtype = dtype_of(tensors);
  call.agree = tensors;
  const auto o = with_sum_for_avg(opts, tensors, call.name, call);
  call.decoy = one_tensor_decoy(tensors, [o](c10d::Backend& transport, Tensors& zeros) {
    return transport.allreduce(zeros, o);
  });
  return run(std::move(call), [&] {
    Tensors views = host_views(tensors);
    return transport_->allreduce(views, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(
    Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  Call call{"allreduce_coalesced", OpType::ALLREDUCE_COALESCED, tensors};
  call.device = common_device(call.name, {&tensors});
  call.bytes = nbytes(tensors);
  call.dtype = dtype_of(tensors);
  call.agree = tensors;
  const auto o = with_sum_for_avg(opts, tensors, call.name, call);
  return run(std::move(call), [&] {
    Tensors views = host_views(tensors);
    return transport_->allreduce_coalesced(views, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  Call call{"reduce", OpType::REDUCE, tensors};
  call.device = common_device(call.name, {&tensors});
  call.bytes = nbytes(tensors);
  call.dtype = dtype_of(tensors);
  call.agree = tensors;
  call.peer = static_cast<int>(opts.rootRank);
  const auto o = with_sum_for_avg(opts, tensors, call.name, call);
  call.decoy = one_tensor_decoy(tensors, [o](c10d::Backend& transport, Tensors& zeros) {
    return transport.reduce(zeros, o);
  });
  return run(std::move(call), [&] {
    Tensors views = host_views(tensors);
    return transport_->reduce(views, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(TensorLists& outputs, Tensors& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  Tensors flat = flatten(outputs);
  Call call{"allgather", OpType::ALLGATHER, flat};
  call.device = common_device(call.name, {&inputs, &flat});
  call.bytes = nbytes(inputs);
  call.inputs = inputs;
  call.dtype = dtype_of(inputs);
  call.agree = inputs;
  return run(std::move(call), [&] {
    TensorLists out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->allgather(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  Tensors out{output};
  Tensors in{input};
  Call call{"allgather_into_tensor", OpType::_ALLGATHER_BASE, out};
  call.device = common_device(call.name, {&in, &out});
  call.bytes = nbytes(in);
  call.inputs = in;
  call.dtype = dtype_of(in);
  call.agree = in;
  call.decoy =
      one_tensor_decoy(in, [opts, n = output.numel()](c10d::Backend& transport, Tensors& zeros) {
        at::Tensor gathered = at::zeros({n}, zeros[0].options());
        return transport._allgather_base(gathered, zeros[0], opts);
      });
  return run(std::move(call), [&] {
    at::Tensor out_view = host_views(out)[0];
    at::Tensor in_view = host_views(in)[0];
    return transport_->_allgather_base(out_view, in_view, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(TensorLists& outputs, Tensors& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  Tensors flat = flatten(outputs);
  Call call{"allgather_coalesced", OpType::ALLGATHER_COALESCED, flat};
  call.device = common_device(call.name, {&inputs, &flat});
  call.bytes = nbytes(inputs);
  call.inputs = inputs;
  call.dtype = dtype_of(inputs);
  call.agree = inputs;
  return run(std::move(call), [&] {
    TensorLists out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->allgather_coalesced(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) {
  Call call{"allgather_into_tensor_coalesced", OpType::COALESCED, outputs};
  call.device = common_device(call.name, {&inputs, &outputs});
  call.bytes = nbytes(inputs);
  call.inputs = inputs;
  call.dtype = dtype_of(inputs);
  call.agree = inputs;
  return run(std::move(call), [&] {
    Tensors out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->allgather_into_tensor_coalesced(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::gather(TensorLists& outputs, Tensors& inputs,
                                               const c10d::GatherOptions& opts) {
  Tensors flat = flatten(outputs);
  Call call{"gather", OpType::GATHER, flat};
  call.device = common_device(call.name, {&inputs, &flat});
  call.bytes = nbytes(inputs);
  call.inputs = inputs;
  call.dtype = dtype_of(inputs);
  call.agree = inputs;
  call.peer = static_cast<int>(opts.rootRank);
  return run(std::move(call), [&] {
    TensorLists out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->gather(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(Tensors& outputs, TensorLists& inputs,
                                                const c10d::ScatterOptions& opts) {
  Tensors flat = flatten(inputs);
  Call call{"scatter", OpType::SCATTER, outputs};
  call.device = common_device(call.name, {&outputs, &flat});
  call.bytes = nbytes(outputs);
  call.inputs = flat;
  call.dtype = dtype_of(outputs);
  call.agree = outputs;
  call.peer = static_cast<int>(opts.rootRank);
  return run(std::move(call), [&] {
    Tensors out = host_views(outputs);
    TensorLists in = host_views(inputs);
    return transport_->scatter(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(Tensors& outputs, TensorLists& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  Tensors flat = flatten(inputs);
  Call call{"reduce_scatter", OpType::REDUCE_SCATTER, outputs};
  call.device = common_device(call.name, {&outputs, &flat});
  call.bytes = nbytes(flat);
  call.inputs = flat;
  call.dtype = dtype_of(outputs);
  call.agree = outputs;
  const auto o = with_sum_for_avg(opts, outputs, call.name, call);
  return run(std::move(call), [&] {
    Tensors out = host_views(outputs);
    TensorLists in = host_views(inputs);
    return transport_->reduce_scatter(out, in, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  Tensors out{output};
  Tensors in{input};
  Call call{"reduce_scatter_tensor", OpType::_REDUCE_SCATTER_BASE, out};
  call.device = common_device(call.name, {&in, &out});
  call.bytes = nbytes(in);
  call.inputs = in;
  call.dtype = dtype_of(in);
  call.agree = out;
  const auto o = with_sum_for_avg(opts, out, call.name, call);
  call.decoy =
      one_tensor_decoy(out, [o, n = input.numel()](c10d::Backend& transport, Tensors& zeros) {
        at::Tensor scattered = at::zeros({n}, zeros[0].options());
        return transport._reduce_scatter_base(zeros[0], scattered, o);
      });
  return run(std::move(call), [&] {
    at::Tensor out_view = host_views(out)[0];
    at::Tensor in_view = host_views(in)[0];
    return transport_->_reduce_scatter_base(out_view, in_view, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  Call call{"reduce_scatter_tensor_coalesced", OpType::COALESCED, outputs};
  call.device = common_device(call.name, {&inputs, &outputs});
  call.bytes = nbytes(inputs);
  call.inputs = inputs;
  call.dtype = dtype_of(inputs);
  call.agree = outputs;
  const auto o = with_sum_for_avg(opts, outputs, call.name, call);
  return run(std::move(call), [&] {
    Tensors out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->reduce_scatter_tensor_coalesced(out, in, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& output_splits,
                                                      std::vector<int64_t>& input_splits,
                                                      const c10d::AllToAllOptions& opts) {
  Tensors out{output};
  Tensors in{input};
  Call call{"alltoall_base", OpType::ALLTOALL_BASE, out};
  call.device = common_device(call.name, {&in, &out});
  call.bytes = nbytes(in);
  call.inputs = in;
  call.dtype = dtype_of(in);
  if (output_splits.empty() && input_splits.empty()) {
    call.agree = in;  // with splits, sizes differ by design
  }
  return run(std::move(call), [&] {
    at::Tensor out_view = host_views(out)[0];
    at::Tensor in_view = host_views(in)[0];
    return transport_->alltoall_base(out_view, in_view, output_splits, input_splits, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall(Tensors& outputs, Tensors& inputs,
                                                 const c10d::AllToAllOptions& opts) {
  Call call{"alltoall", OpType::ALLTOALL, outputs};
  call.device = common_device(call.name, {&inputs, &outputs});
  call.bytes = nbytes(inputs);
  call.inputs = inputs;
  call.dtype = dtype_of(inputs);
  call.agree = {};  // each rank's sizes may differ
  return run(std::move(call), [&] {
    Tensors out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->alltoall(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::send(Tensors& tensors, int dst, int tag) {
  Call call{"send", OpType::SEND, tensors};
  call.device = common_device(call.name, {&tensors});
  call.bytes = nbytes(tensors);
  call.dtype = dtype_of(tensors);
  call.checked = false;  // between two ranks, not the group
  call.peer = dst;
  return run(std::move(call), [&] {
    Tensors views = host_views(tensors);
    return transport_->send(views, dst, tag);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::recv(Tensors& tensors, int src, int tag) {
  Call call{"recv", OpType::RECV, tensors};
  call.device = common_device(call.name, {&tensors});
  call.bytes = nbytes(tensors);
  call.dtype = dtype_of(tensors);
  call.checked = false;
  call.peer = src;
  return run(std::move(call), [&] {
    Tensors views = host_views(tensors);
    return transport_->recv(views, src, tag);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(Tensors& tensors, int tag) {
  Call call{"recv", OpType::RECVANYSOURCE, tensors};
  call.device = common_device(call.name, {&tensors});
  call.bytes = nbytes(tensors);
  call.dtype = dtype_of(tensors);
  call.checked = false;
  return run(std::move(call), [&] {
    Tensors views = host_views(tensors);
    return transport_->recvAnysource(views, tag);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  Call call{"barrier", OpType::BARRIER, Tensors{}};
  call.checked = false;  // a barrier is its own check
  if (opts.device.has_value()) {
    call.device = *opts.device;
  }
  c10d::BarrierOptions o = opts;
  o.device = std::nullopt;  // Gloo's barrier moves no tensor
  return run(std::move(call), [&] { return transport_->barrier(o); });
}

void Backend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  transport_->monitoredBarrier(opts, wait_all_ranks);
}

void Backend::setSequenceNumberForGroup() {
  transport_->setSequenceNumberForGroup();
}

uint64_t Backend::getSequenceNumberForGroup() {
  return transport_->getSequenceNumberForGroup();
}

void Backend::setTimeout(std::chrono::milliseconds timeout) {
  transport_->setTimeout(timeout);
}

void Backend::abort() {
  agreement_->stop();
  transport_->abort();
}

void Backend::shutdown() {
  agreement_->stop();
  transport_->shutdown();
}

}  // namespace openreg::distributed
