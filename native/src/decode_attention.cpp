// One-token attention over a cache (decode_attention.hpp): the baseline copy of the kernel
// (decode_attention_kernel.hpp), the choice of copy and the threads. The AVX-512 copy is a file of its own
// (decode_attention_avx512.cpp), so that a build compiles the two copies in parallel.
#include "decode_attention.hpp"

#include <algorithm>
#include <thread>
#include <vector>

#include "decode_attention_kernel.hpp"

namespace dart {

void attend_range_baseline(const AttentionCall<float>& call, int64_t first, int64_t last, float* scores) {
  attend_range<float>(call, first, last, scores);
}
void attend_range_baseline(const AttentionCall<uint16_t>& call, int64_t first, int64_t last, float* scores) {
  attend_range<uint16_t>(call, first, last, scores);
}

const char* attention_isa_name(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::automatic: return "auto";
    case AttentionIsa::baseline: return "baseline";
    case AttentionIsa::avx512: return "avx512";
  }
  return "?";
}

std::vector<AttentionIsa> decode_attention_isas() {
  std::vector<AttentionIsa> isas;
#if DART_ATTENTION_X86
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                             __builtin_cpu_supports("fma");
  if (avx512) isas.push_back(AttentionIsa::avx512);
#endif
  isas.push_back(AttentionIsa::baseline);
  return isas;
}

namespace {

template <class T>
using RangeFn = void (*)(const AttentionCall<T>&, int64_t, int64_t, float*);

template <class T>
RangeFn<T> range_fn(AttentionIsa isa) {
  if (isa == AttentionIsa::automatic) {
    static const AttentionIsa widest = decode_attention_isas().front();
    isa = widest;
  }
  switch (isa) {
#if DART_ATTENTION_X86
    case AttentionIsa::avx512: return static_cast<RangeFn<T>>(&attend_range_avx512);
#endif
    default: return static_cast<RangeFn<T>>(&attend_range_baseline);
  }
}

template <class T>
void run(const AttentionCall<T>& call, int threads, AttentionIsa isa) {
  const DecodeAttentionShape& s = call.shape;
  const int64_t tasks = s.batch * s.kv_heads;
  if (tasks == 0) return;
  const RangeFn<T> range = range_fn<T>(isa);
  // a thread costs tens of microseconds to start: small calls run on the caller's alone
  const int64_t work_items = tasks * s.group * std::max<int64_t>(s.length, 1) * s.dim;
  const int64_t workers = work_items < (int64_t{1} << 18) ? 1 : std::clamp<int64_t>(threads, 1, tasks);
  auto work = [&](int64_t w) {
    std::vector<float> scores(static_cast<size_t>(s.group * std::max<int64_t>(s.length, 1)));
    range(call, tasks * w / workers, tasks * (w + 1) / workers, scores.data());
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
                      Tensor4<float> out, int threads, AttentionIsa isa) {
  run<float>({shape, q, k, v, keep, keep_stride, scale, out}, threads, isa);
}

void decode_attention(const DecodeAttentionShape& shape, Tensor4<const uint16_t> q, Tensor4<const uint16_t> k,
                      Tensor4<const uint16_t> v, const uint8_t* keep, int64_t keep_stride, float scale,
                      Tensor4<uint16_t> out, int threads, AttentionIsa isa) {
  run<uint16_t>({shape, q, k, v, keep, keep_stride, scale, out}, threads, isa);
}

}  // namespace dart
