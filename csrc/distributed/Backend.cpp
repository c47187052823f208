#include "distributed/Backend.h"

#include "distributed/HostTensors.h"

#include <c10/util/Exception.h>

namespace openreg::distributed {

namespace {

using c10d::OpType;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

// Note [Averaging half-precision tensors]
// Gloo's AVG is a sum, then a division: in float16 the sum of [1.5, 60000]
// over two ranks overflows to inf although the mean, 30000.75, is a float16.
// For float16 and bfloat16, each rank divides its input by the group size
// before the sum instead (as NCCL's AVG premultiplies floating-point inputs
// by 1/size), so the sum stays within the range of the mean; float32 and
// float64 keep the sum then the division, which rounds once.
bool is_half(at::ScalarType t) {
  return t == at::ScalarType::Half || t == at::ScalarType::BFloat16;
}

}  // namespace

Backend::Backend(c10::intrusive_ptr<c10d::Backend> transport, std::string group_name,
                 std::string refusal)
    : c10d::Backend(transport->getRank(), transport->getSize()),
      transport_(std::move(transport)),
      group_name_(std::move(group_name)),
      refusal_(std::move(refusal)) {}

Backend::Call Backend::make(const char* name, OpType type, const Tensors& in,
                            const Tensors& out) const {
  Call call;
  call.type = type;
  call.info =
      CallInfo{name,      group_name_, nbytes(in), dtype_of(in), common_device(name, {&in, &out}),
               getRank(), getSize()};
  call.outputs = out;
  call.inputs = in;
  return call;
}

c10::intrusive_ptr<c10d::Work> Backend::run(
    Call call, const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  TORCH_CHECK_VALUE(refusal_.empty(), describe(call.info), ": ", refusal_);
  const Refusal refused = refusal_of(call.refusal, {&call.outputs, &call.inputs});
  TORCH_CHECK_VALUE(refused.why.empty(), describe(call.info), ": ", refused.why);
  auto work = c10::make_intrusive<Work>(issue_named(call.info, issue), call.type, getRank(),
                                        std::move(call.outputs), std::move(call.inputs),
                                        std::move(call.finish), std::move(call.info));
  work->watch_transport();
  return work;
}

template <typename Opts>
Opts Backend::with_sum_for_avg(const Opts& opts, const Tensors& outputs, Call& call) const {
  const at::ScalarType dtype = dtype_of(outputs);
  call.refusal = reduce_refusal(opts.reduceOp, dtype, outputs);
  if (!(opts.reduceOp == c10d::ReduceOp::AVG) || !call.refusal.empty()) {
    return opts;
  }
  Opts sum = opts;
  sum.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
  if (is_half(dtype)) {
    call.divide_first = true;  // Note [Averaging half-precision tensors]
    return sum;
  }
  call.finish = [views = host_views(outputs), size = getSize()] {
    for (const at::Tensor& v : views) {
      v.div_(size);
    }
  };
  return sum;
}

Tensors Backend::summed(bool divide_first, Tensors views, bool in_place) const {
  for (at::Tensor& v : views) {
    if (divide_first) {
      v = in_place ? v.div_(getSize()) : v.div(getSize());
    }
  }
  return views;
}

c10::intrusive_ptr<c10d::Work> Backend::broadcast(Tensors& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  return run(make("broadcast", OpType::BROADCAST, tensors, tensors), [&] {
    Tensors views = host_views(tensors);
    return transport_->broadcast(views, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce(Tensors& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  if (!tensors.empty() && tensors[0].is_sparse() && tensors[0].is_cpu()) {
    return transport_->allreduce(tensors, opts);  // Note [One group for openreg and CPU tensors]
  }
  Call call = make("allreduce", OpType::ALLREDUCE, tensors, tensors);
  const auto o = with_sum_for_avg(opts, tensors, call);
  return run(std::move(call), [&, divide = call.divide_first] {
    Tensors views = summed(divide, host_views(tensors), /*in_place=*/true);
    return transport_->allreduce(views, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(
    Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  Call call = make("allreduce_coalesced", OpType::ALLREDUCE_COALESCED, tensors, tensors);
  const auto o = with_sum_for_avg(opts, tensors, call);
  return run(std::move(call), [&, divide = call.divide_first] {
    Tensors views = summed(divide, host_views(tensors), /*in_place=*/true);
    return transport_->allreduce_coalesced(views, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  Call call = make("reduce", OpType::REDUCE, tensors, tensors);
  const auto o = with_sum_for_avg(opts, tensors, call);
  return run(std::move(call), [&, divide = call.divide_first] {
    Tensors views = summed(divide, host_views(tensors), /*in_place=*/true);
    return transport_->reduce(views, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(TensorLists& outputs, Tensors& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  Call call = make("allgather", OpType::ALLGATHER, inputs, flatten(outputs));
  call.refusal = outputs.size() != 1 || inputs.size() != 1
                     ? "pass one input tensor and one list of outputs"
                     : list_refusal("output", outputs[0], getSize(), inputs[0]);
  return run(std::move(call), [&] {
    TensorLists out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->allgather(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  return run(make("allgather_into_tensor", OpType::_ALLGATHER_BASE, {input}, {output}), [&] {
    at::Tensor out = host_views({output})[0];
    at::Tensor in = host_views({input})[0];
    return transport_->_allgather_base(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(TensorLists& outputs, Tensors& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  Call call = make("allgather_coalesced", OpType::ALLGATHER_COALESCED, inputs, flatten(outputs));
  return run(std::move(call), [&] {
    TensorLists out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->allgather_coalesced(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) {
  return run(make("allgather_into_tensor_coalesced", OpType::COALESCED, inputs, outputs), [&] {
    Tensors out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->allgather_into_tensor_coalesced(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::gather(TensorLists& outputs, Tensors& inputs,
                                               const c10d::GatherOptions& opts) {
  Call call = make("gather", OpType::GATHER, inputs, flatten(outputs));
  if (getRank() == opts.rootRank && outputs.size() == 1 && inputs.size() == 1) {
    call.refusal = list_refusal("output", outputs[0], getSize(), inputs[0]);
  }
  return run(std::move(call), [&] {
    TensorLists out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->gather(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(Tensors& outputs, TensorLists& inputs,
                                                const c10d::ScatterOptions& opts) {
  Call call = make("scatter", OpType::SCATTER, flatten(inputs), outputs);
  call.info.bytes = nbytes(outputs);  // what this rank receives
  call.info.dtype = dtype_of(outputs);
  if (getRank() == opts.rootRank && inputs.size() == 1 && outputs.size() == 1) {
    call.refusal = list_refusal("input", inputs[0], getSize(), outputs[0]);
  }
  return run(std::move(call), [&] {
    Tensors out = host_views(outputs);
    TensorLists in = host_views(inputs);
    return transport_->scatter(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(Tensors& outputs, TensorLists& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  Call call = make("reduce_scatter", OpType::REDUCE_SCATTER, flatten(inputs), outputs);
  call.info.dtype = dtype_of(outputs);
  const auto o = with_sum_for_avg(opts, outputs, call);
  if (call.refusal.empty() && inputs.size() == 1 && outputs.size() == 1) {
    call.refusal = list_refusal("input", inputs[0], getSize(), outputs[0]);
  }
  return run(std::move(call), [&, divide = call.divide_first] {
    Tensors out = host_views(outputs);
    TensorLists in;
    for (const Tensors& list : inputs) {
      in.push_back(summed(divide, host_views(list), /*in_place=*/false));
    }
    return transport_->reduce_scatter(out, in, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  Call call = make("reduce_scatter_tensor", OpType::_REDUCE_SCATTER_BASE, {input}, {output});
  const auto o = with_sum_for_avg(opts, {output}, call);
  return run(std::move(call), [&, divide = call.divide_first] {
    at::Tensor out = host_views({output})[0];
    at::Tensor in = summed(divide, host_views({input}), /*in_place=*/false)[0];
    return transport_->_reduce_scatter_base(out, in, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  Call call = make("reduce_scatter_tensor_coalesced", OpType::COALESCED, inputs, outputs);
  const auto o = with_sum_for_avg(opts, outputs, call);
  return run(std::move(call), [&, divide = call.divide_first] {
    Tensors out = host_views(outputs);
    Tensors in = summed(divide, host_views(inputs), /*in_place=*/false);
    return transport_->reduce_scatter_tensor_coalesced(out, in, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& output_splits,
                                                      std::vector<int64_t>& input_splits,
                                                      const c10d::AllToAllOptions& opts) {
  return run(make("alltoall_base", OpType::ALLTOALL_BASE, {input}, {output}), [&] {
    at::Tensor out = host_views({output})[0];
    at::Tensor in = host_views({input})[0];
    return transport_->alltoall_base(out, in, output_splits, input_splits, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall(Tensors& outputs, Tensors& inputs,
                                                 const c10d::AllToAllOptions& opts) {
  Call call = make("alltoall", OpType::ALLTOALL, inputs, outputs);
  const int size = getSize();
  if (static_cast<int>(inputs.size()) != size || static_cast<int>(outputs.size()) != size) {
    call.refusal = "the input and output lists hold " + std::to_string(inputs.size()) + " and " +
                   std::to_string(outputs.size()) + " tensors for a group of " +
                   std::to_string(size) + " ranks; pass one tensor per rank in each";
  }
  return run(std::move(call), [&] {
    Tensors out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->alltoall(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::send(Tensors& tensors, int dst, int tag) {
  return run(make("send", OpType::SEND, tensors, tensors), [&] {
    Tensors views = host_views(tensors);
    return transport_->send(views, dst, tag);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::recv(Tensors& tensors, int src, int tag) {
  return run(make("recv", OpType::RECV, tensors, tensors), [&] {
    Tensors views = host_views(tensors);
    return transport_->recv(views, src, tag);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(Tensors& tensors, int tag) {
  return run(make("recv", OpType::RECVANYSOURCE, tensors, tensors), [&] {
    Tensors views = host_views(tensors);
    return transport_->recvAnysource(views, tag);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  Call call = make("barrier", OpType::BARRIER, {}, {});
  if (opts.device.has_value()) {
    call.info.device = *opts.device;
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
  transport_->abort();
}

void Backend::shutdown() {
  transport_->shutdown();
}

}  // namespace openreg::distributed
