// Attention of one new token per row over that row's cached keys and values, for the distillation's batched
// greedy loop on a CPU (docs/training.md). torch's CPU SDPA spends most of a decode step on call overhead:
// every (row, key/value head) pair is two tiny GEMMs, and the step reads the cache far below the cores' memory
// bandwidth (measured: docs/benchmarks.md#measurements-behind-design-choices). Here each pair is one pass over
// its keys and one over its values, in float32 registers, the query heads that share a key/value head
// (grouped-query attention) done together, so the cache is read once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dart {

// A strided 4-D view [batch, heads, positions, dim] (strides in elements; the last dimension contiguous).
template <class T>
struct Tensor4 {
  T* data = nullptr;
  int64_t stride[3] = {0, 0, 0};  // batch, head, position
};

struct DecodeAttentionShape {
  int64_t batch = 0;
  int64_t kv_heads = 0;
  int64_t group = 0;   // query heads per key/value head
  int64_t length = 0;  // cached positions attended to
  int64_t dim = 0;     // head width, at most kMaxHeadDim
};

inline constexpr int64_t kMaxHeadDim = 256;
inline constexpr int64_t kMaxGroup = 16;

// The kernel is compiled once per instruction set: "avx512" (AVX-512 F/BW/VL/DQ and FMA) on x86-64, "baseline"
// (what the compiler targets by default) everywhere. `automatic` runs the widest this processor has; naming one
// (the tests do, to check each copy) runs that one.
enum class AttentionIsa { automatic, baseline, avx512 };
const char* attention_isa_name(AttentionIsa isa);
// The copies this processor can run, the widest first (never `automatic`; always ending with `baseline`).
std::vector<AttentionIsa> decode_attention_isas();

// out[b, h, g, :] = softmax(scale * q[b, h, g, :] . k[b, h, l, :] over the l with keep[b * keep_stride + l])
// weighted sum of v[b, h, l, :]. keep == nullptr keeps every position; a row that keeps none gets zeros.
// Accumulates in float32; bfloat16 values are stored as their 16 bits (round to nearest even on output).
// Shapes are checked by the caller (the binding); `threads` >= 1 workers split the (row, head) pairs; `isa` is
// `automatic` or one of decode_attention_isas() (the caller checks).
void decode_attention(const DecodeAttentionShape& shape, Tensor4<const float> q, Tensor4<const float> k,
                      Tensor4<const float> v, const uint8_t* keep, int64_t keep_stride, float scale,
                      Tensor4<float> out, int threads, AttentionIsa isa = AttentionIsa::automatic);
void decode_attention(const DecodeAttentionShape& shape, Tensor4<const uint16_t> q, Tensor4<const uint16_t> k,
                      Tensor4<const uint16_t> v, const uint8_t* keep, int64_t keep_stride, float scale,
                      Tensor4<uint16_t> out, int threads, AttentionIsa isa = AttentionIsa::automatic);

}  // namespace dart
