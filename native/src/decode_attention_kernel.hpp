// The body of the one-token attention (decode_attention.hpp), compiled once per instruction set: included by
// decode_attention.cpp (the baseline copy, with the threads and the choice of copy) and by
// decode_attention_avx512.cpp (the AVX-512 copy, chosen at run time when the processor has it). The two files
// compile in parallel. Everything below the entry functions has internal linkage, so each file's copy is compiled
// for its own instruction set and the linker can never hand one file's copy to the other.
//
// Written with the compilers' portable vector types (16 floats), so the same source becomes SSE, NEON or AVX-512
// code. The common head widths (64, 128) and parts of a group (1 to 4 query heads) are fixed at compile time, each
// such kernel a function of its own: compiled separately, a kernel is a few hundred instructions to allocate
// registers for, not one function holding them all (which took minutes of the build; docs/developers.md).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "bf16.hpp"
#include "decode_attention.hpp"

namespace dart {

// The arguments of one call, as every copy of the kernel receives them.
template <class T>
struct AttentionCall {
  DecodeAttentionShape shape;
  Tensor4<const T> q, k, v;
  const uint8_t* keep = nullptr;
  int64_t keep_stride = 0;
  float scale = 1.0f;
  Tensor4<T> out;
};

// The (row, key/value head) pairs [first, last) of a call; `scores` holds group * max(length, 1) floats. One
// entry function per copy of the kernel: decode_attention.cpp calls the widest the processor has (or the one asked).
void attend_range_baseline(const AttentionCall<float>& call, int64_t first, int64_t last, float* scores);
void attend_range_baseline(const AttentionCall<uint16_t>& call, int64_t first, int64_t last, float* scores);
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define DART_ATTENTION_X86 1
void attend_range_avx512(const AttentionCall<float>& call, int64_t first, int64_t last, float* scores);
void attend_range_avx512(const AttentionCall<uint16_t>& call, int64_t first, int64_t last, float* scores);
#define DART_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#else
#define DART_ATTENTION_X86 0
#endif

namespace {

// The instruction set of the including file's copy (decode_attention_avx512.cpp defines it as DART_TARGET_AVX512
// before including this header), given to the per-pair kernels and to the entry functions; the small helpers are
// inlined into them.
#ifndef DART_ATTENTION_TARGET
#define DART_ATTENTION_TARGET
#endif

#if defined(__GNUC__) || defined(__clang__)
#define DART_VECTORS 1
#define DART_INLINE [[gnu::always_inline]] inline
#define DART_KERNEL [[gnu::noinline]] DART_ATTENTION_TARGET
typedef float F16 __attribute__((vector_size(64)));
typedef float F8 __attribute__((vector_size(32)));
typedef float F4 __attribute__((vector_size(16)));
typedef uint32_t U16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));
typedef uint16_t H16 __attribute__((vector_size(32)));
#else
#define DART_VECTORS 0
#define DART_INLINE inline
#define DART_KERNEL
#endif

constexpr int64_t kLanes = 16;


#if DART_VECTORS
DART_INLINE F16 load16(const float* p) {
  F16 x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
DART_INLINE F16 load16(const uint16_t* p) {
  H16 h;
  std::memcpy(&h, p, sizeof h);
  const U16 wide = __builtin_convertvector(h, U16) << 16;
  F16 x;
  std::memcpy(&x, &wide, sizeof x);
  return x;
}
DART_INLINE float hsum(F16 x) {
  const F8 h = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
               __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
  const F4 f = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
  return (f[0] + f[1]) + (f[2] + f[3]);
}
// exp on 16 lanes for x <= 0 (scores minus their maximum): 2^n * p(r), n = round(x / ln2), r = x - n ln2 in
// [-ln2/2, ln2/2], a degree-6 Taylor polynomial (relative error about 3e-7, as expf); x below -87 gives 0 (only
// masked or negligible scores get there).
DART_INLINE F16 exp16(F16 x) {
  const I16 under = x < -87.0f;
  x = under ? F16{} - 87.0f : x;
  // for y <= 0, converting y - 0.5 to an integer (toward zero) rounds y to the nearest
  const I16 n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, I16);
  const F16 nf = __builtin_convertvector(n, F16);
  const F16 r = (x - nf * 0.693145751953125f) - nf * 1.42860682030941723e-6f;
  F16 p = F16{} + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const I16 bits = (n + 127) << 23;
  F16 two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return under ? F16{} : p * two_n;
}
#endif

DART_INLINE float exp1(float x) { return x < -87.0f ? 0.0f : std::exp(x); }

// Rows are read one after another: ask for the one this many positions ahead while working on this one (a
// single thread otherwise waits on memory; measured: docs/benchmarks.md#measurements-behind-design-choices).
// Prefetching past the end of a buffer is never asked for (a row past the end is not a valid address).
constexpr int64_t kAhead = 16;
template <class T>
DART_INLINE void prefetch_row(const T* row, int64_t dim) {
#if DART_VECTORS
  for (int64_t i = 0; i < dim * static_cast<int64_t>(sizeof(T)); i += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(row) + i);
#else
  (void)row;
  (void)dim;
#endif
}

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// Pointers to one (row, key/value head) pair: its `group` queries, `length` keys and values, `group` outputs.
template <class T>
struct Pair {
  const T* q;
  int64_t q_stride;  // between query heads
  const T* k;
  int64_t k_stride;  // between positions
  const T* v;
  int64_t v_stride;
  const uint8_t* keep;
  T* out;
  int64_t out_stride;
};

// Softmax numerators in place (scores - max, exponentiated) and each group's denominator; false if every
// position is masked.
DART_INLINE bool exponentiate(float* scores, int64_t groups, int64_t length, const float* best, float* total) {
  if (best[0] == kMinusInf) return false;
  for (int64_t g = 0; g < groups; ++g) {
    float* row = scores + g * length;
    int64_t l = 0;
    total[g] = 0.f;
#if DART_VECTORS
    F16 sum{};
    for (; l + kLanes <= length; l += kLanes) {
      const F16 e = exp16(load16(row + l) - best[g]);
      std::memcpy(row + l, &e, sizeof e);
      sum += e;
    }
    total[g] = hsum(sum);
#endif
    for (; l < length; ++l) {
      row[l] = exp1(row[l] - best[g]);
      total[g] += row[l];
    }
  }
  return true;
}

// Any head width and group, one float at a time: compilers without vector types, and widths not a multiple of 16.
template <class T>
DART_KERNEL void attend_pair_scalar(const DecodeAttentionShape& s, const Pair<T>& p, float scale, float* scores) {
  const int64_t G = s.group, L = s.length, D = s.dim;
  float best[kMaxGroup], total[kMaxGroup], acc[kMaxHeadDim];
  std::fill(best, best + G, kMinusInf);
  for (int64_t l = 0; l < L; ++l) {
    const T* kr = p.k + l * p.k_stride;
    for (int64_t g = 0; g < G; ++g) {
      float dot = 0.f;
      for (int64_t d = 0; d < D; ++d) dot += load1(p.q + g * p.q_stride + d) * load1(kr + d);
      scores[g * L + l] = (p.keep && !p.keep[l]) ? kMinusInf : dot * scale;
      best[g] = std::max(best[g], scores[g * L + l]);
    }
  }
  const bool any = exponentiate(scores, G, L, best, total);
  for (int64_t g = 0; g < G; ++g) {
    std::fill(acc, acc + D, 0.0f);
    if (any)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t d = 0; d < D; ++d) acc[d] += scores[g * L + l] * load1(p.v + l * p.v_stride + d);
    for (int64_t d = 0; d < D; ++d) store1(p.out + g * p.out_stride + d, any ? acc[d] / total[g] : 0.0f);
  }
}

#if DART_VECTORS
// The sums of four vectors' lanes, {sum a, sum b, sum c, sum d}: halves added pairwise across the four, so that
// the four reductions share their shuffles (about a third of the instructions of four separate sums).
DART_INLINE F4 hsum4(F16 a, F16 b, F16 c, F16 d) {
  const F16 ab = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
                 __builtin_shufflevector(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  const F16 cd = __builtin_shufflevector(c, d, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
                 __builtin_shufflevector(c, d, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  // lanes 4j..4j+3: four partial sums of a, b, c, d for j = 0, 1, 2, 3
  const F16 q = __builtin_shufflevector(ab, cd, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
                __builtin_shufflevector(ab, cd, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  const F16 h = q + __builtin_shufflevector(q, q, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  const F16 t = h + __builtin_shufflevector(h, h, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  return __builtin_shufflevector(t, t, 0, 4, 8, 12);
}

// Head widths a multiple of 16, for GT = 1 to 4 queries of a group at a time (attend_pair_parts runs a larger
// group in parts). CT > 0 fixes the head's 16-wide slices at compile time (64 and 128 wide: the queries and their
// sums then live in registers); CT = 0 reads them (`slices`) from the shape. Keys: four rows at a time, each loaded
// and widened once for all GT queries, their dot products summed together (hsum4). Values: each row once, its
// weight for every query applied to all of its slices.
template <class T, int64_t GT, int64_t CT>
DART_KERNEL void attend_pair_fixed(const Pair<T>& pair, int64_t g0, int64_t L, int64_t slices, float scale,
                                   float* scores) {
  Pair<T> p = pair;  // a copy of its own (kept in registers), moved to this part's queries
  p.q += g0 * p.q_stride;
  p.out += g0 * p.out_stride;
  constexpr int64_t G = GT, kC = CT > 0 ? CT : kMaxHeadDim / kLanes;
  const int64_t C = CT > 0 ? CT : slices, D = C * kLanes;
  F16 qv[G * kC];
  for (int64_t g = 0; g < G; ++g)
    for (int64_t c = 0; c < C; ++c) qv[g * C + c] = load16(p.q + g * p.q_stride + c * kLanes) * scale;
  float best[G], total[G];
  std::fill(best, best + G, kMinusInf);
  auto kept = [&](int64_t l) { return !p.keep || p.keep[l]; };
  int64_t l = 0;
  for (; l + 4 <= L; l += 4) {
    if (!kept(l) && !kept(l + 1) && !kept(l + 2) && !kept(l + 3)) {  // padding: not even read
      for (int64_t g = 0; g < G; ++g)
        for (int64_t j = 0; j < 4; ++j) scores[g * L + l + j] = kMinusInf;
      continue;
    }
    F16 part[G * 4];
    for (int64_t i = 0; i < G * 4; ++i) part[i] = F16{};
    for (int64_t j = 0; j < 4; ++j) {
      const T* kr = p.k + (l + j) * p.k_stride;
      if (l + j + kAhead < L) prefetch_row(kr + kAhead * p.k_stride, D);
      for (int64_t c = 0; c < C; ++c) {
        const F16 x = load16(kr + c * kLanes);
        for (int64_t g = 0; g < G; ++g) part[g * 4 + j] += qv[g * C + c] * x;
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      const F4 dots = hsum4(part[g * 4], part[g * 4 + 1], part[g * 4 + 2], part[g * 4 + 3]);
      for (int64_t j = 0; j < 4; ++j) {  // a masked row's dot is dropped, whatever it is (even NaN)
        const float dot = kept(l + j) ? dots[j] : kMinusInf;
        scores[g * L + l + j] = dot;
        best[g] = std::max(best[g], dot);
      }
    }
  }
  for (; l < L; ++l) {
    const T* kr = p.k + l * p.k_stride;
    for (int64_t g = 0; g < G; ++g) {
      F16 part{};
      if (kept(l))
        for (int64_t c = 0; c < C; ++c) part += qv[g * C + c] * load16(kr + c * kLanes);
      const float dot = kept(l) ? hsum(part) : kMinusInf;
      scores[g * L + l] = dot;
      best[g] = std::max(best[g], dot);
    }
  }
  const bool any = exponentiate(scores, G, L, best, total);
  F16 acc[G * kC];
  for (int64_t i = 0; i < G * C; ++i) acc[i] = F16{};
  for (l = 0; any && l < L; ++l) {
    if (!kept(l)) continue;  // skipped, not weighted by 0: a masked row may hold anything
    const T* vr = p.v + l * p.v_stride;
    if (l + kAhead < L) prefetch_row(vr + kAhead * p.v_stride, D);
    F16 x[kC];
    for (int64_t c = 0; c < C; ++c) x[c] = load16(vr + c * kLanes);
    for (int64_t g = 0; g < G; ++g) {
      const float w = scores[g * L + l];
      for (int64_t c = 0; c < C; ++c) acc[g * C + c] += w * x[c];
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    const float inv = any ? 1.0f / total[g] : 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      const F16 o = acc[g * C + c] * inv;
      T* dst = p.out + g * p.out_stride + c * kLanes;
      for (int64_t i = 0; i < kLanes; ++i) store1(dst + i, o[i]);
    }
  }
}

// A group of any size in parts of up to 4 queries (parts of 4, then what is left): each part after the first reads
// the pair's keys and values again, from the processor's caches.
template <class T, int64_t CT>
DART_INLINE void attend_pair_parts(const DecodeAttentionShape& s, const Pair<T>& p, float scale, float* scores) {
  const int64_t slices = s.dim / kLanes;
  for (int64_t g0 = 0; g0 < s.group; g0 += 4) {
    switch (std::min<int64_t>(s.group - g0, 4)) {
      case 1: attend_pair_fixed<T, 1, CT>(p, g0, s.length, slices, scale, scores); break;
      case 2: attend_pair_fixed<T, 2, CT>(p, g0, s.length, slices, scale, scores); break;
      case 3: attend_pair_fixed<T, 3, CT>(p, g0, s.length, slices, scale, scores); break;
      default: attend_pair_fixed<T, 4, CT>(p, g0, s.length, slices, scale, scores); break;
    }
  }
}
#endif

template <class T>
DART_INLINE void attend_pair(const DecodeAttentionShape& s, const Pair<T>& p, float scale, float* scores) {
#if DART_VECTORS
  if (s.dim == 64) return attend_pair_parts<T, 4>(s, p, scale, scores);
  if (s.dim == 128) return attend_pair_parts<T, 8>(s, p, scale, scores);
  if (s.dim % kLanes == 0) return attend_pair_parts<T, 0>(s, p, scale, scores);
#endif
  attend_pair_scalar<T>(s, p, scale, scores);
}

// What every entry function does: the pairs [first, last) one after another.
template <class T>
DART_INLINE void attend_range(const AttentionCall<T>& call, int64_t first, int64_t last, float* scores) {
  const DecodeAttentionShape& s = call.shape;
  const auto &q = call.q, &k = call.k, &v = call.v;
  const auto& out = call.out;
  for (int64_t task = first; task < last; ++task) {
    const int64_t b = task / s.kv_heads, h = task % s.kv_heads;
    const Pair<T> p{q.data + b * q.stride[0] + h * q.stride[1],
                    q.stride[2],
                    k.data + b * k.stride[0] + h * k.stride[1],
                    k.stride[2],
                    v.data + b * v.stride[0] + h * v.stride[1],
                    v.stride[2],
                    call.keep ? call.keep + b * call.keep_stride : nullptr,
                    out.data + b * out.stride[0] + h * out.stride[1],
                    out.stride[2]};
    attend_pair<T>(s, p, call.scale, scores);
  }
}

}  // namespace
}  // namespace dart
