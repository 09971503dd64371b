// One-token attention over a cache (decode_attention.hpp). Written with the compilers' portable vector types
// (16 floats), so the same source becomes SSE, AVX2 or AVX-512 code; on x86-64 an AVX-512 copy is compiled
// alongside the baseline one and chosen at run time when the processor has it.
#include "decode_attention.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

namespace dart {
namespace {

#if defined(__GNUC__) || defined(__clang__)
#define DART_VECTORS 1
#define DART_INLINE [[gnu::always_inline]] inline
typedef float F16 __attribute__((vector_size(64)));
typedef float F8 __attribute__((vector_size(32)));
typedef float F4 __attribute__((vector_size(16)));
typedef uint32_t U16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));
typedef uint16_t H16 __attribute__((vector_size(32)));
#else
#define DART_VECTORS 0
#define DART_INLINE inline
#endif

constexpr int64_t kLanes = 16;

DART_INLINE float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

DART_INLINE uint16_t f32_to_bf16(float f) {  // round to nearest even, as torch does; NaN stays NaN
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

DART_INLINE float load1(const float* p) { return *p; }
DART_INLINE float load1(const uint16_t* p) { return bf16_to_f32(*p); }
DART_INLINE void store1(float* p, float x) { *p = x; }
DART_INLINE void store1(uint16_t* p, float x) { *p = f32_to_bf16(x); }

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

float exp1(float x) { return x < -87.0f ? 0.0f : std::exp(x); }

// Rows are read one after another: ask for the one this many positions ahead while working on this one (a
// single thread otherwise waits on memory: 9 GB/s without, measured on a 2-core EPYC). Prefetching past the end
// of a buffer is never asked for (a row past the end is not a valid address).
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
DART_INLINE void attend_pair_scalar(const DecodeAttentionShape& s, const Pair<T>& p, float scale, float* scores) {
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

// Head widths a multiple of 16. GT > 0 / CT > 0 fix the group / the head's 16-wide slices at compile time (the
// query and the sums then live in registers); 0 reads them from the shape. Keys: four rows at a time, each
// loaded and widened once for all the group's queries, their dot products summed together (hsum4). Values:
// each row once, its weight for every query of the group applied to all of its slices.
template <class T, int64_t GT, int64_t CT>
DART_INLINE void attend_pair_vec(const DecodeAttentionShape& s, const Pair<T>& p, float scale, float* scores) {
  constexpr int64_t kG = GT > 0 ? GT : kMaxGroup, kC = CT > 0 ? CT : kMaxHeadDim / kLanes;
  const int64_t G = GT > 0 ? GT : s.group, C = CT > 0 ? CT : s.dim / kLanes, L = s.length, D = C * kLanes;
  F16 qv[kG * kC];
  for (int64_t g = 0; g < G; ++g)
    for (int64_t c = 0; c < C; ++c) qv[g * C + c] = load16(p.q + g * p.q_stride + c * kLanes) * scale;
  float best[kMaxGroup], total[kMaxGroup];
  std::fill(best, best + G, kMinusInf);
  auto kept = [&](int64_t l) { return !p.keep || p.keep[l]; };
  int64_t l = 0;
  for (; l + 4 <= L; l += 4) {
    if (!kept(l) && !kept(l + 1) && !kept(l + 2) && !kept(l + 3)) {  // padding: not even read
      for (int64_t g = 0; g < G; ++g)
        for (int64_t j = 0; j < 4; ++j) scores[g * L + l + j] = kMinusInf;
      continue;
    }
    F16 part[kG * 4];
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
  F16 acc[kG * kC];
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

template <class T, int64_t CT>
DART_INLINE void attend_pair_group(const DecodeAttentionShape& s, const Pair<T>& p, float scale, float* scores) {
  switch (s.group) {
    case 1: return attend_pair_vec<T, 1, CT>(s, p, scale, scores);
    case 2: return attend_pair_vec<T, 2, CT>(s, p, scale, scores);
    case 3: return attend_pair_vec<T, 3, CT>(s, p, scale, scores);
    case 4: return attend_pair_vec<T, 4, CT>(s, p, scale, scores);
    case 8: return attend_pair_vec<T, 8, CT>(s, p, scale, scores);
    default: return attend_pair_vec<T, 0, CT>(s, p, scale, scores);
  }
}
#endif

template <class T>
DART_INLINE void attend_pair(const DecodeAttentionShape& s, const Pair<T>& p, float scale, float* scores) {
#if DART_VECTORS
  if (s.dim == 64) return attend_pair_group<T, 4>(s, p, scale, scores);
  if (s.dim == 128) return attend_pair_group<T, 8>(s, p, scale, scores);
  if (s.dim % kLanes == 0) return attend_pair_group<T, 0>(s, p, scale, scores);
#endif
  attend_pair_scalar<T>(s, p, scale, scores);
}

template <class T>
DART_INLINE void attend_range(const DecodeAttentionShape& s, Tensor4<const T> q, Tensor4<const T> k,
                              Tensor4<const T> v, const uint8_t* keep, int64_t keep_stride, float scale,
                              Tensor4<T> out, int64_t first, int64_t last, float* scores) {
  for (int64_t task = first; task < last; ++task) {
    const int64_t b = task / s.kv_heads, h = task % s.kv_heads;
    const Pair<T> p{q.data + b * q.stride[0] + h * q.stride[1], q.stride[2],
                    k.data + b * k.stride[0] + h * k.stride[1], k.stride[2],
                    v.data + b * v.stride[0] + h * v.stride[1], v.stride[2], keep ? keep + b * keep_stride : nullptr,
                    out.data + b * out.stride[0] + h * out.stride[1], out.stride[2]};
    attend_pair<T>(s, p, scale, scores);
  }
}

template <class T>
void attend_range_baseline(const DecodeAttentionShape& s, Tensor4<const T> q, Tensor4<const T> k,
                           Tensor4<const T> v, const uint8_t* keep, int64_t keep_stride, float scale, Tensor4<T> out,
                           int64_t first, int64_t last, float* scores) {
  attend_range<T>(s, q, k, v, keep, keep_stride, scale, out, first, last, scores);
}

#if DART_VECTORS && defined(__x86_64__)
#define DART_AVX512 1
template <class T>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"))) void attend_range_avx512(
    const DecodeAttentionShape& s, Tensor4<const T> q, Tensor4<const T> k, Tensor4<const T> v,
    const uint8_t* keep, int64_t keep_stride, float scale, Tensor4<T> out, int64_t first, int64_t last,
    float* scores) {
  attend_range<T>(s, q, k, v, keep, keep_stride, scale, out, first, last, scores);
}
bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return yes;
}
#else
#define DART_AVX512 0
#endif

template <class T>
void run(const DecodeAttentionShape& s, Tensor4<const T> q, Tensor4<const T> k, Tensor4<const T> v,
         const uint8_t* keep, int64_t keep_stride, float scale, Tensor4<T> out, int threads) {
  const int64_t tasks = s.batch * s.kv_heads;
  if (tasks == 0) return;
  // a thread costs tens of microseconds to start: small calls run on the caller's alone
  const int64_t work_items = tasks * s.group * std::max<int64_t>(s.length, 1) * s.dim;
  const int64_t workers = work_items < (int64_t{1} << 18) ? 1 : std::clamp<int64_t>(threads, 1, tasks);
  auto work = [&](int64_t w) {
    std::vector<float> scores(static_cast<size_t>(s.group * std::max<int64_t>(s.length, 1)));
    const int64_t first = tasks * w / workers, last = tasks * (w + 1) / workers;
#if DART_AVX512
    if (has_avx512()) {
      attend_range_avx512<T>(s, q, k, v, keep, keep_stride, scale, out, first, last, scores.data());
      return;
    }
#endif
    attend_range_baseline<T>(s, q, k, v, keep, keep_stride, scale, out, first, last, scores.data());
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers - 1));
  for (int64_t w = 1; w < workers; ++w) pool.emplace_back(work, w);
  work(0);
  for (auto& t : pool) t.join();
}

}  // namespace

void decode_attention(const DecodeAttentionShape& shape, Tensor4<const float> q, Tensor4<const float> k,
                      Tensor4<const float> v, const uint8_t* keep, int64_t keep_stride, float scale,
                      Tensor4<float> out, int threads) {
  run<float>(shape, q, k, v, keep, keep_stride, scale, out, threads);
}

void decode_attention(const DecodeAttentionShape& shape, Tensor4<const uint16_t> q, Tensor4<const uint16_t> k,
                      Tensor4<const uint16_t> v, const uint8_t* keep, int64_t keep_stride, float scale,
                      Tensor4<uint16_t> out, int threads) {
  run<uint16_t>(shape, q, k, v, keep, keep_stride, scale, out, threads);
}

}  // namespace dart
