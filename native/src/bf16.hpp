// bfloat16 stored as its 16 bits, to and from float32, one value at a time: shared by the CPU kernels
// (decode_attention_kernel.hpp, row_linear_kernel.hpp, rms_norm.cpp). Internal linkage, like the kernels, so each
// file's copy is compiled for that file's instruction set.
#pragma once

#include <bit>
#include <cstdint>

namespace dart {
namespace {

#if defined(__GNUC__) || defined(__clang__)
#define DART_BF16_INLINE [[gnu::always_inline]] inline
#else
#define DART_BF16_INLINE inline
#endif

DART_BF16_INLINE float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

DART_BF16_INLINE uint16_t f32_to_bf16(float f) {  // round to nearest even, as torch does; NaN stays NaN
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

DART_BF16_INLINE float load1(const float* p) { return *p; }
DART_BF16_INLINE float load1(const uint16_t* p) { return bf16_to_f32(*p); }
DART_BF16_INLINE void store1(float* p, float x) { *p = x; }
DART_BF16_INLINE void store1(uint16_t* p, float x) { *p = f32_to_bf16(x); }

}  // namespace
}  // namespace dart
