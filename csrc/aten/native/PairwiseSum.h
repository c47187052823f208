#pragma once

// The pairwise sum of a contiguous row, as the reductions compute it
// (Reduction.cpp): sum, mean and the passes of var and std.
//
// Note [Deterministic vector sums]
// A row of n elements is cut into blocks of kBlock = 8 * kLanes elements
// (256 floats, 128 doubles). Within a block, kLanes independent sums take
// every kLanes-th element, in order, and are then added as a binary tree
// (lane j += lane j + w, for w = kLanes / 2, ..., 1); a last block shorter
// than kLanes is one plain running sum. The block sums are added as a binary
// tree, the left half holding floor(blocks / 2) blocks, so the rounding
// error grows with log(n).
//
// Every addition in that scheme is fixed by the source: the lanes are
// separate scalar sums, and C++ never reassociates floating-point additions
// (no -ffast-math; a sum has no product that could be contracted into an
// fma). Compilers vectorise the lanes by putting kLanes / width of them in
// each vector register, which changes how many instructions run but not one
// rounding. So the float and double row sums, compiled for AVX-512, AVX2 and
// baseline x86-64 (Note [SIMD clones] in Common.h, sum_row below), return
// the same bits whichever of them the loader picks, and the same bits as the
// generic template for other input types. tests/operators/test_native_simd.py checks
// them against the scheme written out in NumPy.
//
// Threads never change the result: a row is summed by one thread, and a long
// full reduction is cut into chunks of a fixed size whose sums are combined
// in chunk order (Reduction.cpp's reduce_long_row).

#include <c10/macros/Macros.h>

#include <algorithm>
#include <cstdint>

namespace openreg::native {

// Independent sums in a block: 128 bytes of them, i.e. eight SSE registers,
// four AVX2 or two AVX-512 ones.
template <typename T>
constexpr int kLanesOf = static_cast<int>(128 / sizeof(T));

template <typename acc_t>
constexpr int64_t kPairwiseBlock = 8 * kLanesOf<acc_t>;

// Block sums are computed this many at a time before they are added up.
constexpr int64_t kMaxBlocks = 256;

namespace pairwise {

// The sum of the lanes, as a binary tree.
template <typename acc_t, int kLanes>
C10_ALWAYS_INLINE acc_t add_lanes(acc_t* lane) {
#pragma GCC unroll 8
  for (int w = kLanes / 2; w > 0; w /= 2) {
#pragma GCC unroll 32
    for (int j = 0; j < w; ++j) {
      lane[j] += lane[j + w];
    }
  }
  return lane[0];
}

// block() for a whole block: every trip count a constant, so that the
// compiler keeps the lanes in registers and unrolls the loops. The same
// additions in the same order as block().
template <typename acc_t, typename in_t, typename F>
C10_ALWAYS_INLINE acc_t full_block(const in_t* p, const F& f) {
  constexpr int kLanes = kLanesOf<acc_t>;
  acc_t lane[kLanes] = {};
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
#pragma GCC unroll 32
    for (int j = 0; j < kLanes; ++j) {
      lane[j] += f(p[i * kLanes + j]);
    }
  }
  return add_lanes<acc_t, kLanes>(lane);
}

// The sum of f(p[i]) over one block, n <= kPairwiseBlock<acc_t>.
template <typename acc_t, typename in_t, typename F>
C10_ALWAYS_INLINE acc_t block(const in_t* p, int64_t n, const F& f) {
  constexpr int kLanes = kLanesOf<acc_t>;
  if (n == kPairwiseBlock<acc_t>) {
    return full_block<acc_t>(p, f);
  }
  if (n < kLanes) {
    acc_t s = acc_t(0);
    for (int64_t i = 0; i < n; ++i) {
      s += f(p[i]);
    }
    return s;
  }
  acc_t lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      lane[j] += f(p[i + j]);
    }
  }
  for (; i < n; ++i) {
    lane[0] += f(p[i]);
  }
  return add_lanes<acc_t, kLanes>(lane);
}

// out[b] = the sum of block b of p[0, n), for at most kMaxBlocks blocks.
template <typename acc_t, typename in_t, typename F>
C10_ALWAYS_INLINE void blocks(const in_t* p, int64_t n, const F& f, acc_t* out) {
  constexpr int64_t kBlock = kPairwiseBlock<acc_t>;
  const int64_t full = n / kBlock;
  for (int64_t b = 0; b < full; ++b) {
    out[b] = full_block<acc_t>(p + b * kBlock, f);
  }
  if (full * kBlock < n) {
    out[full] = block<acc_t>(p + full * kBlock, n - full * kBlock, f);
  }
}

// Block sums s[0, nb) added as a binary tree, the left half holding
// floor(nb / 2) of them. Overwrites s.
template <typename acc_t>
acc_t tree(acc_t* s, int64_t nb) {
  if ((nb & (nb - 1)) == 0) {
    // A power of two: the same tree, level by level (s[i] = s[2i] + s[2i+1]),
    // without a call per node.
    for (int64_t m = nb; m > 1; m /= 2) {
      for (int64_t i = 0; i < m / 2; ++i) {
        s[i] = s[2 * i] + s[2 * i + 1];
      }
    }
    return s[0];
  }
  const int64_t half = nb / 2;
  return tree(s, half) + tree(s + half, nb - half);
}

// The pairwise sum of p[0, n), with leaves(p, n, out) writing the block sums
// of at most kMaxBlocks blocks.
template <typename acc_t, typename in_t, typename Leaves>
acc_t sum(const in_t* p, int64_t n, const Leaves& leaves) {
  constexpr int64_t kBlock = kPairwiseBlock<acc_t>;
  if (n <= 0) {
    return acc_t(0);
  }
  const int64_t nb = (n + kBlock - 1) / kBlock;
  if (nb <= kMaxBlocks) {
    acc_t s[kMaxBlocks];
    leaves(p, n, s);
    return tree(s, nb);
  }
  const int64_t half = (nb / 2) * kBlock;
  return sum<acc_t>(p, half, leaves) + sum<acc_t>(p + half, n - half, leaves);
}

}  // namespace pairwise

// The pairwise sum of f(p[i]) over a contiguous row, compiled for baseline
// x86-64 with the file that uses it.
template <typename acc_t, typename in_t, typename F>
acc_t pairwise_sum(const in_t* p, int64_t n, const F& f) {
  return pairwise::sum<acc_t>(
      p, n, [&](const in_t* q, int64_t m, acc_t* out) { pairwise::blocks<acc_t>(q, m, f, out); });
}

// The same sum of p[0, n), with the block sums compiled for AVX-512, AVX2
// and baseline x86-64: bit for bit the result of pairwise_sum (Note
// [Deterministic vector sums]).
float sum_row(const float* p, int64_t n);
double sum_row(const double* p, int64_t n);

}  // namespace openreg::native
