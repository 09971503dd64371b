// The AVX-512 (F, BW, VL, DQ; FMA) copy of the one-token attention (decode_attention_kernel.hpp), chosen at run
// time by decode_attention.cpp when the processor has it. Compiled with the file's default flags: only these entry
// functions and the kernels they call carry the target attribute (DART_ATTENTION_TARGET), all of internal linkage
// but the entry functions, so no code for AVX-512 can reach a processor without it.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define DART_ATTENTION_TARGET DART_TARGET_AVX512
#endif
#include "decode_attention_kernel.hpp"

namespace dart {

#if DART_ATTENTION_X86
DART_TARGET_AVX512 void attend_range_avx512(const AttentionCall<float>& call, int64_t first, int64_t last,
                                            float* scores) {
  attend_range<float>(call, first, last, scores);
}
DART_TARGET_AVX512 void attend_range_avx512(const AttentionCall<uint16_t>& call, int64_t first, int64_t last,
                                            float* scores) {
  attend_range<uint16_t>(call, first, last, scores);
}
#endif

}  // namespace dart
