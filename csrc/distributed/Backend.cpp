#include "distributed/Backend.h"

#include "distributed/HostTensors.h"
#include "runtime/Seam.h"  // Note [The lab's seam]

#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>

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

// The dtypes Gloo reduces and moves (others raise "Invalid scalar type").
bool gloo_has(at::ScalarType t) {
  switch (t) {
    case at::ScalarType::Float:
    case at::ScalarType::Double:
    case at::ScalarType::Half:
    case at::ScalarType::BFloat16:
    case at::ScalarType::Char:
    case at::ScalarType::Byte:
    case at::ScalarType::Int:
    case at::ScalarType::Long:
    case at::ScalarType::Bool:
    case at::ScalarType::ComplexFloat:
    case at::ScalarType::ComplexDouble:
      return true;
    default:
      return false;
  }
}

// NCCL's rule: a collective takes dense tensors (contiguous in their memory
// format). A host view of a strided view (x[::2]) would let Gloo read and
// write the elements between those of the view.
bool dense(const Tensors& tensors) {
  for (const at::Tensor& t : tensors) {
    if (t.defined() && !t.is_contiguous(t.suggest_memory_format())) {
      return false;
    }
  }
  return true;
}

// The message of `e` without the C++ backtrace (TORCH_SHOW_CPP_STACKTRACES
// shows the backtrace of the error that carries it).
std::string message_of(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

// Refuses a list of `n` tensors per rank unless each matches `like`'s
// elements and dtype; "" when the list is right.
std::string list_refusal(const char* what, const Tensors& list, int n, const at::Tensor& like) {
  std::ostringstream out;
  if (static_cast<int>(list.size()) != n) {
    out << "the " << what << " list holds " << list.size() << " tensors for a group of " << n
        << " ranks; pass one tensor per rank";
  } else {
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].defined() || list[i].numel() != like.numel() ||
          list[i].scalar_type() != like.scalar_type()) {
        out << "the " << what << " list's tensor " << i << " is "
            << (list[i].defined() ? c10::toString(list[i].scalar_type()) : "undefined") << " of "
            << (list[i].defined() ? list[i].numel() : 0) << " elements";
        break;
      }
    }
  }
  if (out.tellp() > 0) {
    out << "; each must hold " << like.numel() << " " << like.scalar_type()
        << " elements, as the single tensor does";
  }
  return out.str();
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
  std::set<Backend*> live;
};

Groups& groups() {
  static auto* all = new Groups();
  return *all;
}

}  // namespace

Backend::Call& Backend::Call::on(const Tensors& tensors) {
  outputs = tensors;
  device = common_device(name, {&tensors});
  terms.agree = tensors;
  return count(tensors);
}

Backend::Call& Backend::Call::from_to(const Tensors& in, const Tensors& out) {
  inputs = in;
  outputs = out;
  device = common_device(name, {&in, &out});
  terms.agree = in;
  return count(in);
}

Backend::Call& Backend::Call::compare(const Tensors& tensors) {
  terms.agree = tensors;
  return *this;
}

Backend::Call& Backend::Call::count(const Tensors& tensors) {
  bytes = nbytes(tensors);
  return dtype_from(tensors);
}

Backend::Call& Backend::Call::dtype_from(const Tensors& tensors) {
  dtype = dtype_of(tensors);
  return *this;
}

Backend::Call& Backend::Call::with_peer(int rank) {
  peer = rank;
  terms.root = rank;
  return *this;
}

Backend::Call& Backend::Call::unchecked() {
  terms.checked = false;
  return *this;
}

Backend::Backend(c10::intrusive_ptr<c10d::Backend> transport, std::string group_name,
                 c10::intrusive_ptr<c10d::Store> store, std::string refusal)
    : c10d::Backend(transport->getRank(), transport->getSize()),
      transport_(std::move(transport)),
      group_name_(std::move(group_name)),
      refusal_(std::move(refusal)),
      // a refusing backend compares nothing: no agreement, no store connection
      checks_(transport_, store, group_name_, refusal_.empty()),
      pid_(getpid()) {
  if (refusal_.empty()) {
    std::lock_guard<std::mutex> lock(groups().mutex);
    groups().live.insert(this);
  }
}

Backend::~Backend() {
  {
    std::lock_guard<std::mutex> lock(groups().mutex);
    groups().live.erase(this);
  }
  leave(Leaving::kReleased);
}

void Backend::leave(Leaving how) noexcept {
  if (refusal_.empty() && getpid() == pid_ && !left_.exchange(true)) {
    checks_.leave(seq_.load(), how);
  }
}

void leave_all_groups_at_exit() {
  std::lock_guard<std::mutex> lock(groups().mutex);
  for (Backend* backend : groups().live) {
    backend->leave(Leaving::kExited);
  }
}

c10::intrusive_ptr<c10d::Work> Backend::run(
    Call call, const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  std::lock_guard<std::mutex> issuing(issue_mutex_);
  seam::CollectiveInfo info;
  info.name = call.name;
  info.group = group_name_;
  info.seq = next_seq(call.type, call.peer);
  info.bytes = call.bytes;
  info.dtype = call.dtype;
  info.device = call.device;
  info.rank = getRank();
  info.size = getSize();
  info.peer = call.peer;
  TORCH_CHECK_VALUE(refusal_.empty(), describe(info), ": ", refusal_);
  Terms& terms = call.terms;
  for (const Tensors* list : {&call.outputs, &call.inputs, &terms.agree}) {
    for (const at::Tensor& t : *list) {
      if (terms.refusal.empty() && t.defined() && !gloo_has(t.scalar_type())) {
        terms.refusal = std::string("Gloo moves no ") + c10::toString(t.scalar_type()) +
                        " tensors; pass float32, float64, float16, bfloat16, int8, uint8, int32, "
                        "int64, bool or complex ones (e.g. x.to(torch.int32)) and convert back";
      }
    }
  }
  if (terms.refusal.empty() && !(dense(call.outputs) && dense(call.inputs) && dense(terms.agree))) {
    terms.not_dense = true;
    terms.refusal =
        "a tensor is not dense (a strided view such as x[::2]); collectives take contiguous "
        "tensors, as with NCCL: pass x.contiguous() (and copy an output back into the view)";
  }
  const seam::CollectiveEvent event = lab_begin_collective(info);
  std::shared_ptr<AheadCall> ahead;
  c10::intrusive_ptr<c10d::Work> transport_work;
  try {
    ahead =
        checks_.before(call.name, std::move(terms), call.device.type(), info.seq, describe(info));
    transport_work = issue();
  } catch (const c10::ValueError&) {
    lab_end_collective(event);
    throw;  // the ranks disagree (Agreement.h), or refuse alike: one line on every rank
  } catch (const std::exception& e) {
    lab_end_collective(event);
    TORCH_CHECK_WITH(DistBackendError, false, describe(info), " failed: ", message_of(e));
  }
  auto work = c10::make_intrusive<Work>(
      std::move(transport_work), std::move(ahead), checks_.agreement(), call.type, getRank(),
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
Opts Backend::with_sum_for_avg(const Opts& opts, const Tensors& outputs, Call& call) const {
  call.terms.reduce_op = static_cast<int64_t>(opts.reduceOp.op_);
  const at::ScalarType dtype = dtype_of(outputs);
  const c10d::ReduceOp::RedOpType op = opts.reduceOp.op_;
  if (op == c10d::ReduceOp::PREMUL_SUM) {
    call.terms.refusal =
        "ReduceOp.PREMUL_SUM is not supported by this backend; multiply the tensor by the factor "
        "first and use ReduceOp.SUM";
  } else if ((op == c10d::ReduceOp::BAND || op == c10d::ReduceOp::BOR ||
              op == c10d::ReduceOp::BXOR) &&
             (at::isFloatingType(dtype) || at::isComplexType(dtype))) {
    call.terms.refusal = "ReduceOp." +
                         std::string(op == c10d::ReduceOp::BAND  ? "BAND"
                                     : op == c10d::ReduceOp::BOR ? "BOR"
                                                                 : "BXOR") +
                         " needs integer or bool tensors, got " + c10::toString(dtype) +
                         "; use an integer dtype";
  } else if (op != c10d::ReduceOp::SUM && op != c10d::ReduceOp::AVG &&
             op != c10d::ReduceOp::PRODUCT && op != c10d::ReduceOp::MIN &&
             op != c10d::ReduceOp::MAX && op != c10d::ReduceOp::BAND && op != c10d::ReduceOp::BOR &&
             op != c10d::ReduceOp::BXOR) {
    call.terms.refusal =
        "reduce op " + std::to_string(static_cast<int>(op)) +
        " is not supported; use ReduceOp.SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR or BXOR";
  }
  if (!(opts.reduceOp == c10d::ReduceOp::AVG)) {
    return opts;
  }
  for (const at::Tensor& t : outputs) {
    if (!(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()))) {
      call.terms.refusal = "ReduceOp.AVG needs floating-point tensors, got " +
                           std::string(c10::toString(t.scalar_type())) +
                           "; use ReduceOp.SUM and divide by the group size";
      return opts;
    }
  }
  Opts sum = opts;
  sum.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
  if (is_half(dtype)) {
    call.divide_first = true;  // Note [Averaging half-precision tensors]
    return sum;
  }
  const int size = getSize();
  call.finish = [views = host_views(outputs), size] {
    for (const at::Tensor& v : views) {
      v.div_(size);
    }
  };
  return sum;
}

Tensors Backend::summed(bool divide_first, Tensors views, bool in_place) const {
  if (!divide_first) {
    return views;
  }
  for (at::Tensor& v : views) {
    if (in_place) {
      v.div_(getSize());
    } else {
      v = v.div(getSize());
    }
  }
  return views;
}

c10::intrusive_ptr<c10d::Work> Backend::broadcast(Tensors& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  Call call = Call("broadcast", OpType::BROADCAST).on(tensors).with_peer(opts.rootRank);
  call.terms.decoy = one_tensor_decoy(tensors, [opts](c10d::Backend& transport, Tensors& zeros) {
    return transport.broadcast(zeros, opts);
  });
  return run(std::move(call), [&] {
    Tensors views = host_views(tensors);
    return transport_->broadcast(views, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce(Tensors& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  if (!tensors.empty() && tensors[0].is_sparse() && tensors[0].is_cpu()) {
    return transport_->allreduce(tensors, opts);  // Note [One group for openreg and CPU tensors]
  }
  Call call = Call("allreduce", OpType::ALLREDUCE).on(tensors);
  const auto o = with_sum_for_avg(opts, tensors, call);
  call.terms.decoy = one_tensor_decoy(tensors, [o](c10d::Backend& transport, Tensors& zeros) {
    return transport.allreduce(zeros, o);
  });
  return run(std::move(call), [&, divide = call.divide_first] {
    Tensors views = summed(divide, host_views(tensors), /*in_place=*/true);
    return transport_->allreduce(views, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(
    Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  Call call = Call("allreduce_coalesced", OpType::ALLREDUCE_COALESCED).on(tensors);
  const auto o = with_sum_for_avg(opts, tensors, call);
  return run(std::move(call), [&, divide = call.divide_first] {
    Tensors views = summed(divide, host_views(tensors), /*in_place=*/true);
    return transport_->allreduce_coalesced(views, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  Call call = Call("reduce", OpType::REDUCE).on(tensors).with_peer(opts.rootRank);
  const auto o = with_sum_for_avg(opts, tensors, call);
  call.terms.decoy = one_tensor_decoy(tensors, [o](c10d::Backend& transport, Tensors& zeros) {
    return transport.reduce(zeros, o);
  });
  return run(std::move(call), [&, divide = call.divide_first] {
    Tensors views = summed(divide, host_views(tensors), /*in_place=*/true);
    return transport_->reduce(views, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(TensorLists& outputs, Tensors& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  Call call = Call("allgather", OpType::ALLGATHER).from_to(inputs, flatten(outputs));
  if (outputs.size() != 1 || inputs.size() != 1) {
    call.terms.refusal = "pass one input tensor and one list of outputs";
  } else {
    call.terms.refusal = list_refusal("output", outputs[0], getSize(), inputs[0]);
  }
  return run(std::move(call), [&] {
    TensorLists out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->allgather(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  Call call = Call("allgather_into_tensor", OpType::_ALLGATHER_BASE).from_to({input}, {output});
  call.terms.decoy = one_tensor_decoy(
      {input}, [opts, n = output.numel()](c10d::Backend& transport, Tensors& zeros) {
        at::Tensor gathered = at::zeros({n}, zeros[0].options());
        return transport._allgather_base(gathered, zeros[0], opts);
      });
  return run(std::move(call), [&] {
    at::Tensor out_view = host_views({output})[0];
    at::Tensor in_view = host_views({input})[0];
    return transport_->_allgather_base(out_view, in_view, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(TensorLists& outputs, Tensors& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  Call call =
      Call("allgather_coalesced", OpType::ALLGATHER_COALESCED).from_to(inputs, flatten(outputs));
  return run(std::move(call), [&] {
    TensorLists out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->allgather_coalesced(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) {
  Call call = Call("allgather_into_tensor_coalesced", OpType::COALESCED).from_to(inputs, outputs);
  return run(std::move(call), [&] {
    Tensors out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->allgather_into_tensor_coalesced(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::gather(TensorLists& outputs, Tensors& inputs,
                                               const c10d::GatherOptions& opts) {
  Call call =
      Call("gather", OpType::GATHER).from_to(inputs, flatten(outputs)).with_peer(opts.rootRank);
  if (getRank() == opts.rootRank && outputs.size() == 1 && inputs.size() == 1) {
    call.terms.refusal = list_refusal("output", outputs[0], getSize(), inputs[0]);
  }
  return run(std::move(call), [&] {
    TensorLists out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->gather(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(Tensors& outputs, TensorLists& inputs,
                                                const c10d::ScatterOptions& opts) {
  Call call = Call("scatter", OpType::SCATTER).from_to(flatten(inputs), outputs);
  call.compare(outputs).count(outputs).with_peer(opts.rootRank);
  if (getRank() == opts.rootRank && inputs.size() == 1 && outputs.size() == 1) {
    call.terms.refusal = list_refusal("input", inputs[0], getSize(), outputs[0]);
  }
  return run(std::move(call), [&] {
    Tensors out = host_views(outputs);
    TensorLists in = host_views(inputs);
    return transport_->scatter(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(Tensors& outputs, TensorLists& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  Call call = Call("reduce_scatter", OpType::REDUCE_SCATTER).from_to(flatten(inputs), outputs);
  call.compare(outputs).dtype_from(outputs);
  const auto o = with_sum_for_avg(opts, outputs, call);
  if (call.terms.refusal.empty() && inputs.size() == 1 && outputs.size() == 1) {
    call.terms.refusal = list_refusal("input", inputs[0], getSize(), outputs[0]);
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
  Call call =
      Call("reduce_scatter_tensor", OpType::_REDUCE_SCATTER_BASE).from_to({input}, {output});
  call.compare({output});
  const auto o = with_sum_for_avg(opts, {output}, call);
  call.terms.decoy =
      one_tensor_decoy({output}, [o, n = input.numel()](c10d::Backend& transport, Tensors& zeros) {
        at::Tensor scattered = at::zeros({n}, zeros[0].options());
        return transport._reduce_scatter_base(zeros[0], scattered, o);
      });
  return run(std::move(call), [&, divide = call.divide_first] {
    at::Tensor out_view = host_views({output})[0];
    at::Tensor in_view = summed(divide, host_views({input}), /*in_place=*/false)[0];
    return transport_->_reduce_scatter_base(out_view, in_view, o);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  Call call = Call("reduce_scatter_tensor_coalesced", OpType::COALESCED).from_to(inputs, outputs);
  call.compare(outputs);
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
  Call call = Call("alltoall_base", OpType::ALLTOALL_BASE).from_to({input}, {output});
  call.terms.sizes_differ = true;  // compared through the splits (Note [Split sizes agree])
  const auto per_row = [](const at::Tensor& t) {
    return t.dim() > 0 && t.size(0) > 0 ? t.numel() / t.size(0) : 0;
  };
  call.terms.splits = split_row(input.numel(), output.numel(), input_splits, output_splits,
                                getSize(), per_row(input), per_row(output));
  return run(std::move(call), [&] {
    at::Tensor out_view = host_views({output})[0];
    at::Tensor in_view = host_views({input})[0];
    return transport_->alltoall_base(out_view, in_view, output_splits, input_splits, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall(Tensors& outputs, Tensors& inputs,
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
    call.terms.splits = split_row(nbytes(inputs) / std::max<int64_t>(1, inputs[0].element_size()),
                                  nbytes(outputs) / std::max<int64_t>(1, outputs[0].element_size()),
                                  to, from, size, 1, 1);
  }
  return run(std::move(call), [&] {
    Tensors out = host_views(outputs);
    Tensors in = host_views(inputs);
    return transport_->alltoall(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::send(Tensors& tensors, int dst, int tag) {
  // between two ranks, not the group: Note [A send meets its recv]
  Call call = Call("send", OpType::SEND).on(tensors).with_peer(dst).unchecked();
  auto check = std::make_shared<std::function<void()>>();
  call.finish = [check] {
    if (*check) {
      (*check)();
    }
  };
  return run(std::move(call), [&] {
    Tensors views = host_views(tensors);
    *check = checks_.send(dst, tensors);
    return transport_->send(views, dst, tag);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::recv(Tensors& tensors, int src, int tag) {
  Call call = Call("recv", OpType::RECV).on(tensors).with_peer(src).unchecked();
  return run(std::move(call), [&] {
    return checks_.recv(src, tensors, host_views(tensors),
                        [transport = transport_, src, tag](Tensors& into) {
                          return transport->recv(into, src, tag);
                        });
  });
}

c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(Tensors& tensors, int tag) {
  Call call = Call("recv", OpType::RECVANYSOURCE).on(tensors).unchecked();
  return run(std::move(call), [&] {
    Tensors views = host_views(tensors);
    return transport_->recvAnysource(views, tag);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  Call call = Call("barrier", OpType::BARRIER).unchecked();  // a barrier is its own check
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
  leave(Leaving::kAborted);
  checks_.stop();
  transport_->abort();
}

void Backend::shutdown() {
  leave(Leaving::kDestroyed);
  checks_.stop();
  transport_->shutdown();
}

}  // namespace openreg::distributed
