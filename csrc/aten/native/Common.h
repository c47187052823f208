#pragma once

// Small helpers shared by openreg's hand-written kernels (csrc/aten/native/):
// allocation and out= handling without ATen's heavy headers, the threading
// grain, the floating dtypes most kernels compute natively, and the SIMD
// clone attribute (Note [SIMD clones]).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_ops.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace openreg::native {

// --- dtypes ------------------------------------------------------------------

inline bool is_floating(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kDouble || t == c10::kHalf || t == c10::kBFloat16;
}

// --- allocation and out= -------------------------------------------------------

// at::empty without <ATen/ops/empty.h> (which pulls in ATen/Context.h): the
// same dispatcher call, reaching openreg's empty.memory_format.
inline at::Tensor empty(c10::IntArrayRef sizes, const c10::TensorOptions& options) {
  return at::_ops::empty_memory_format::call(
      c10::fromIntArrayRefSlow(sizes), c10::optTypeMetaToScalarType(options.dtype_opt()),
      options.layout_opt(), options.device_opt(), options.pinned_memory_opt(),
      options.memory_format_opt());
}

// at::native::resize_output without <ATen/native/Resize.h> (which pulls in
// all of ATen/NativeFunctions.h): resizes an out= tensor of the wrong shape,
// with PyTorch's deprecation warning when it held elements. Returns whether
// it resized.
inline bool resize_output(const at::Tensor& out, c10::IntArrayRef shape) {
  if (out.sizes().equals(shape)) {
    return false;
  }
  if (out.numel() != 0) {
    TORCH_WARN("An output with one or more elements was resized since it had shape ", out.sizes(),
               ", which does not match the required output shape ", shape,
               ". This behavior is deprecated, and in a future PyTorch release outputs will not "
               "be resized unless they have zero elements. You can explicitly reuse an out "
               "tensor t by resizing it, inplace, to zero elements with t.resize_(0).");
  }
  out.resize_(shape);
  return true;
}

// The dtype and device checks ATen's structured kernels make on an out=
// tensor, with their messages.
inline void check_out(const at::Tensor& out, c10::ScalarType dtype, c10::Device device) {
  TORCH_CHECK(out.scalar_type() == dtype, "Expected out tensor to have dtype ",
              c10::scalarTypeToTypeMeta(dtype), ", but got ", out.dtype(), " instead");
  TORCH_CHECK(out.device() == device, "Expected out tensor to have device ", device, ", but got ",
              out.device(), " instead");
}

// Runs `kernel(dst)` on `out` when it is contiguous, else on a contiguous
// temporary copied into `out` afterwards.
template <class Kernel>
void into_out(const at::Tensor& out, const Kernel& kernel) {
  if (out.is_contiguous()) {
    kernel(out);
  } else {
    at::Tensor tmp = empty(out.sizes(), out.options());
    kernel(tmp);
    out.copy_(tmp);
  }
}

// --- threading -----------------------------------------------------------------

// Elements per parallel task: ATen's at::internal::GRAIN_SIZE, which is
// declared in the heavy <ATen/TensorIterator.h> (Loops.h checks they agree).
constexpr int64_t kGrainSize = 32768;

// Rows (or blocks) of `row_len` elements per parallel task: about
// kGrainSize elements, at least one row.
inline int64_t grain_rows(int64_t row_len) {
  return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, row_len));
}

}  // namespace openreg::native

// --- SIMD clones ------------------------------------------------------------------
// Note [SIMD clones]
// The extension is compiled for baseline x86-64 (SSE2), while ATen's CPU
// kernels run AVX2 or AVX-512 code. The compute-bound float loops (exp,
// sigmoid, gelu, softmax, layer norm, ...) are compiled three times, for
// x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) and baseline, and the loader
// picks the best one for the machine (GCC's target_clones, an ifunc). GCC
// contracts a * b + c into an fma where the target has one, in C++ even
// under -std=c++20: the x86-64-v3 and v4 clones may therefore differ from
// the baseline one in the last bit, and the tests compare with tolerances.
// Loops in the clones must be plain arithmetic to vectorise: branch-free
// inline helpers, and functors marked OPENREG_INLINE_LAMBDA. The float rows
// of the plain arithmetic kernels are cloned too (Loop::run_vec in Loops.h),
// and so are the block sums of float reductions (Note [Deterministic vector
// sums] in PairwiseSum.h, where no product can be contracted: every clone
// gives the same bits).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define OPENREG_SIMD_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OPENREG_SIMD_CLONES
#endif

// Functors called inside a SIMD clone must be inlined into every clone to
// vectorise: `[](float x) OPENREG_INLINE_LAMBDA { ... }`.
#if defined(__GNUC__)
#define OPENREG_INLINE_LAMBDA __attribute__((always_inline))
#else
#define OPENREG_INLINE_LAMBDA
#endif
