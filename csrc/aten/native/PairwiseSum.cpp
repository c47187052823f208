// The float and double row sums of PairwiseSum.h, with their block sums
// compiled for AVX-512, AVX2 and baseline x86-64 (Note [SIMD clones] in
// Common.h). The tree above the blocks stays in plain code: it adds one
// number per block.

#include "aten/native/PairwiseSum.h"

#include "aten/native/Common.h"

namespace openreg::native {
namespace {

OPENREG_SIMD_CLONES void block_sums_f32(const float* p, int64_t n, float* out) {
  pairwise::blocks<float>(p, n, [](float v) OPENREG_INLINE_LAMBDA { return v; }, out);
}

OPENREG_SIMD_CLONES void block_sums_f64(const double* p, int64_t n, double* out) {
  pairwise::blocks<double>(p, n, [](double v) OPENREG_INLINE_LAMBDA { return v; }, out);
}

}  // namespace

float sum_row(const float* p, int64_t n) {
  return pairwise::sum<float>(p, n, &block_sums_f32);
}

double sum_row(const double* p, int64_t n) {
  return pairwise::sum<double>(p, n, &block_sums_f64);
}

}  // namespace openreg::native
