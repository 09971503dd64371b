// The AVX2 (and FMA) copy of the few-row linear layer (row_linear_kernel.hpp), chosen at run time by
// row_linear.cpp when the processor has it. Only the entry functions and the kernel they call carry the target
// attribute, all of internal linkage but the entry functions, so no AVX2 code can reach a processor without it.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define DART_LINEAR_TARGET DART_TARGET_AVX2
#endif
#include "row_linear_kernel.hpp"

namespace dart {

#if DART_LINEAR_X86
DART_TARGET_AVX2 void linear_range_avx2(const RowLinearCall<float>& call, int64_t first, int64_t last) {
  linear_range<float>(call, first, last);
}
DART_TARGET_AVX2 void linear_range_avx2(const RowLinearCall<uint16_t>& call, int64_t first, int64_t last) {
  linear_range<uint16_t>(call, first, last);
}
#endif

}  // namespace dart
