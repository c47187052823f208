#include "distributed/Refusal.h"

#include <c10/core/ScalarType.h>

#include <sstream>

namespace openreg::distributed {

namespace {

using Tensors = std::vector<at::Tensor>;

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

// A host view of a strided view (x[::2]) would let Gloo read and write the
// elements between those of the view.
bool dense(const Tensors& tensors) {
  for (const at::Tensor& t : tensors) {
    if (t.defined() && !t.is_contiguous(t.suggest_memory_format())) {
      return false;
    }
  }
  return true;
}

bool floating(at::ScalarType t) {
  return at::isFloatingType(t) || at::isComplexType(t);
}

}  // namespace

at::ScalarType dtype_of(const Tensors& tensors) {
  for (const at::Tensor& t : tensors) {
    if (t.defined()) {
      return t.scalar_type();
    }
  }
  return at::ScalarType::Undefined;
}

std::string reduce_refusal(const c10d::ReduceOp& reduce, at::ScalarType dtype,
                           const Tensors& outputs) {
  using R = c10d::ReduceOp;
  const R::RedOpType op = reduce.op_;
  if (op == R::PREMUL_SUM) {
    return "ReduceOp.PREMUL_SUM is not supported by this backend; multiply the tensor by the "
           "factor first and use ReduceOp.SUM";
  }
  if ((op == R::BAND || op == R::BOR || op == R::BXOR) && floating(dtype)) {
    return "ReduceOp." +
           std::string(op == R::BAND  ? "BAND"
                       : op == R::BOR ? "BOR"
                                      : "BXOR") +
           " needs integer or bool tensors, got " + c10::toString(dtype) + "; use an integer dtype";
  }
  if (op != R::SUM && op != R::AVG && op != R::PRODUCT && op != R::MIN && op != R::MAX &&
      op != R::BAND && op != R::BOR && op != R::BXOR) {
    return "reduce op " + std::to_string(static_cast<int>(op)) +
           " is not supported; use ReduceOp.SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR or BXOR";
  }
  if (op == R::AVG) {
    for (const at::Tensor& t : outputs) {
      if (!floating(t.scalar_type())) {
        return "ReduceOp.AVG needs floating-point tensors, got " +
               std::string(c10::toString(t.scalar_type())) +
               "; use ReduceOp.SUM and divide by the group size";
      }
    }
  }
  return "";
}

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

Refusal refusal_of(std::string first, std::initializer_list<const Tensors*> lists) {
  if (!first.empty()) {
    return {std::move(first), false};
  }
  for (const Tensors* list : lists) {
    for (const at::Tensor& t : *list) {
      if (t.defined() && !gloo_has(t.scalar_type())) {
        return {std::string("Gloo moves no ") + c10::toString(t.scalar_type()) +
                    " tensors; pass float32, float64, float16, bfloat16, int8, uint8, int32, "
                    "int64, bool or complex ones (e.g. x.to(torch.int32)) and convert back",
                false};
      }
    }
  }
  for (const Tensors* list : lists) {
    if (!dense(*list)) {
      return {
          "a tensor is not dense (a strided view such as x[::2]); collectives take contiguous "
          "tensors, as with NCCL: pass x.contiguous() (and copy an output back into the view)",
          true};
    }
  }
  return {};
}

}  // namespace openreg::distributed
