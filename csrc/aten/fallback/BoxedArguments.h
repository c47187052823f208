#pragma once

// Reading and rebuilding the arguments of a boxed call: which are openreg
// tensors, generators, written or aliased (from the schema), and the same
// value with each tensor replaced. The boxed fallback and the generic native
// path both move whole stacks between device and host this way.

#include <ATen/core/List.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <optional>

namespace openreg {

inline bool on_openreg(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// A dense tensor with a storage of plain elements: not sparse (no storage;
// indices and values instead), not quantized (its storage needs its
// quantizer to mean anything) and not nested (one buffer for tensors of
// several shapes). Only plain tensors have host views.
inline bool is_plain(const at::Tensor& t) {
  return t.layout() == c10::kStrided && !t.is_quantized() && !t.is_nested();
}

// The CPU dispatch key that runs an operator on the host copy of `t`, when
// `t`'s layout needs more than the CPU key: SparseCPU, SparseCsrCPU,
// QuantizedCPU or NestedTensorCPU. Empty for plain and undefined tensors.
inline c10::DispatchKeySet host_layout_key(const at::Tensor& t) {
  if (!t.defined() || is_plain(t)) {
    return {};
  }
  if (t.is_quantized()) {
    return c10::DispatchKeySet(c10::DispatchKey::QuantizedCPU);
  }
  if (t.is_nested()) {
    return c10::DispatchKeySet(c10::DispatchKey::NestedTensorCPU);
  }
  if (t.layout() == c10::kSparse) {
    return c10::DispatchKeySet(c10::DispatchKey::SparseCPU);
  }
  return c10::DispatchKeySet(c10::DispatchKey::SparseCsrCPU);  // CSR, CSC, BSR, BSC
}

// A `Generator?` argument.
inline bool is_optional_generator(const c10::Argument& arg) {
  const auto* opt = arg.type()->castRaw<c10::OptionalType>();
  return opt != nullptr && opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// An argument the op writes (`Tensor(a!)`).
inline bool is_written(const c10::Argument& arg) {
  return arg.alias_info() != nullptr && arg.alias_info()->isWrite();
}

// Index of the argument a return value aliases, or -1.
inline int aliased_argument(const c10::FunctionSchema& schema, const c10::Argument& ret) {
  const c10::AliasInfo* info = ret.alias_info();
  if (info == nullptr) {
    return -1;
  }
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::AliasInfo* a = schema.arguments()[i].alias_info();
    if (a != nullptr && a->beforeSets() == info->beforeSets()) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// True for Tensor[] and Tensor?[] values.
inline bool is_tensor_list(const c10::IValue& v) {
  return v.isTensorList() || v.isOptionalTensorList();
}

// Calls f on `v`'s tensor, or on each tensor of its Tensor[] or Tensor?[]
// list (None entries skipped).
template <class F>
void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (is_tensor_list(v)) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) {
        f(e.toTensor());
      }
    }
  }
}

// `v` with `f` applied to its tensor, or to each tensor of its Tensor[] or
// Tensor?[] list (None entries stay None); any other value is returned as is.
template <class F>
c10::IValue map_tensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    return f(v.toTensor());
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    out.reserve(v.toTensorList().size());
    for (const at::Tensor& t : v.toTensorList()) {
      out.push_back(f(t));
    }
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& e : v.toListRef()) {
      out.push_back(e.isTensor() ? std::optional<at::Tensor>(f(e.toTensor())) : std::nullopt);
    }
    return out;
  }
  return v;
}

// Calls f(a_tensor, b_tensor) pairwise over two values of the same shape: two
// Tensors, or two Tensor[] lists of one length (e.g. an argument and its host
// copy); other values are skipped.
template <class F>
void for_each_tensor_pair(const c10::IValue& a, const c10::IValue& b, F&& f) {
  if (a.isTensor()) {
    f(a.toTensor(), b.toTensor());
  } else if (a.isTensorList()) {
    const c10::List<at::Tensor> x = a.toTensorList();
    const c10::List<at::Tensor> y = b.toTensorList();
    for (size_t k = 0; k < x.size(); ++k) {
      f(x.get(k), y.get(k));
    }
  }
}

}  // namespace openreg
