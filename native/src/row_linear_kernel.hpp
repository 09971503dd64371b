// The body of the few-row linear layer (row_linear.hpp), compiled once per instruction set: included by
// row_linear.cpp (the baseline copy, with the threads and the choice of copy) and by row_linear_avx2.cpp (the
// AVX2 copy, chosen at run time when the processor has it). Everything below the entry functions has internal
// linkage, so each file's copy is compiled for its own instruction set.
//
// Written with the compilers' portable vector types (8 floats): SSE, NEON or AVX2 code from the same source. A
// block of 4 weight rows is read from memory once and kept in the L1 cache while every input row (two at a time:
// 8 accumulators) multiplies it.
#pragma once

#include <cstring>

#include "bf16.hpp"
#include "row_linear.hpp"

namespace dart {

// The weight rows [first, last) of a call. One entry function per copy of the kernel.
void linear_range_baseline(const RowLinearCall<float>& call, int64_t first, int64_t last);
void linear_range_baseline(const RowLinearCall<uint16_t>& call, int64_t first, int64_t last);
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define DART_LINEAR_X86 1
void linear_range_avx2(const RowLinearCall<float>& call, int64_t first, int64_t last);
void linear_range_avx2(const RowLinearCall<uint16_t>& call, int64_t first, int64_t last);
#define DART_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define DART_LINEAR_X86 0
#endif

namespace {

// The including file's instruction set (row_linear_avx2.cpp defines it before including this header).
#ifndef DART_LINEAR_TARGET
#define DART_LINEAR_TARGET
#endif

#if defined(__GNUC__) || defined(__clang__)
#define DART_LINEAR_VECTORS 1
#define DART_LINEAR_INLINE [[gnu::always_inline]] inline
typedef float LF8 __attribute__((vector_size(32)));
typedef float LF4 __attribute__((vector_size(16)));
typedef uint32_t LU8 __attribute__((vector_size(32)));
typedef uint16_t LH8 __attribute__((vector_size(16)));
#else
#define DART_LINEAR_VECTORS 0
#define DART_LINEAR_INLINE inline
#endif

constexpr int64_t kBlock = 4;  // weight rows per block

#if DART_LINEAR_VECTORS
DART_LINEAR_INLINE LF8 load8(const float* p) {
  LF8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
DART_LINEAR_INLINE LF8 load8(const uint16_t* p) {
  LH8 h;
  std::memcpy(&h, p, sizeof h);
  const LU8 wide = __builtin_convertvector(h, LU8) << 16;
  LF8 v;
  std::memcpy(&v, &wide, sizeof v);
  return v;
}
DART_LINEAR_INLINE float hsum8(LF8 v) {
  const LF4 f = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  return (f[0] + f[1]) + (f[2] + f[3]);
}
#endif

// R input rows (1 or 2) times one block of B weight rows (`nw` of them real: the last block of a range may be
// short, its missing rows repeat the last real one and are not stored). Every output sums in the same order
// whatever B and R are, so the block shape never changes a result.
template <int R, int64_t B, class T>
DART_LINEAR_INLINE void block_times_rows(const RowLinearCall<T>& c, int64_t w0, int64_t nw, int64_t r0) {
  const int64_t n = c.in;
  const T* w[B];
  for (int64_t i = 0; i < B; ++i) w[i] = c.weight + (w0 + (i < nw ? i : nw - 1)) * n;
  const T* x[R];
  for (int r = 0; r < R; ++r) x[r] = c.x + (r0 + r) * n;
  float sum[R][B] = {};
  int64_t k = 0;
#if DART_LINEAR_VECTORS
  LF8 acc[R][B] = {};
  for (; k + 8 <= n; k += 8) {
    LF8 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = load8(x[r] + k);
    for (int64_t i = 0; i < B; ++i) {
      const LF8 wv = load8(w[i] + k);
      for (int r = 0; r < R; ++r) acc[r][i] += wv * xv[r];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int64_t i = 0; i < B; ++i) sum[r][i] = hsum8(acc[r][i]);
#endif
  for (; k < n; ++k)
    for (int r = 0; r < R; ++r)
      for (int64_t i = 0; i < B; ++i) sum[r][i] += load1(w[i] + k) * load1(x[r] + k);
  for (int r = 0; r < R; ++r)
    for (int64_t i = 0; i < nw; ++i) {
      const float b = c.bias ? load1(c.bias + w0 + i) : 0.0f;
      store1(c.y + (r0 + r) * c.out + w0 + i, sum[r][i] + b);
    }
}

template <class T>
DART_LINEAR_TARGET void linear_range(const RowLinearCall<T>& c, int64_t first, int64_t last) {
  int64_t w0 = first;
  if (c.rows == 1)  // one input row leaves registers for twice the weight rows: more reads in flight
    for (; w0 + 2 * kBlock <= last; w0 += 2 * kBlock) block_times_rows<1, 2 * kBlock>(c, w0, 2 * kBlock, 0);
  for (; w0 < last; w0 += kBlock) {
    const int64_t nw = last - w0 < kBlock ? last - w0 : kBlock;
    int64_t r = 0;
    for (; r + 2 <= c.rows; r += 2) block_times_rows<2, kBlock>(c, w0, nw, r);
    if (r < c.rows) block_times_rows<1, kBlock>(c, w0, nw, r);
  }
}

}  // namespace
}  // namespace dart
