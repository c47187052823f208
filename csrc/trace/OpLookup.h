#pragma once

// What both sources of op events (OpObserver.cpp: RecordFunction;
// KernelEvents.cpp: openreg's own kernels) look up about an operator, once per
// thread, and the pieces of an Op event they compute the same way.

#include "trace/DispatchPath.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/operator_name.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace openreg::trace {

// One operator as one thread knows it.
struct OpInfo {
  uint32_t name = 0;                     // interned "aten::add.Tensor"
  const OperatorTable* table = nullptr;  // null: unknown to the dispatcher
  uint64_t epoch = 0;
  std::optional<c10::OperatorName> op;
  ResolutionCache resolutions;  // this thread's, see DispatchPath.h
};

// This thread's entry for the operator known by `key`, an address that stays
// the operator's for its life (its schema's name, a kernel's registration).
// `name` is asked only the first time; when it returns nullopt the key is not
// an operator and is not cached. Null when not an operator or when the
// dispatcher does not know it; the table is re-read when stale
// (Note [Stale dispatch tables]).
OpInfo* find_op(const void* key, c10::function_ref<std::optional<c10::OperatorName>()> name);

// The key set the dispatcher computes from the arguments' `keys`: plus the
// thread's included keys, minus its excluded keys.
c10::DispatchKeySet with_thread_keys(c10::DispatchKeySet keys);

// The shapes of an Op's tensor arguments in the thread's pool:
// [count, (dtype, ndim, sizes...) per tensor]. begin_shapes returns the
// count's offset; append_shape adds one tensor and counts it.
size_t begin_shapes(std::vector<int64_t>& pool);
void append_shape(std::vector<int64_t>& pool, size_t offset, const at::Tensor& t);

inline bool is_openreg(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

}  // namespace openreg::trace
