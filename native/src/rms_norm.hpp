// RMSNorm over the rows of a CPU decode step, y = w * (x / sqrt(mean(x^2) + eps)), as Llama, Qwen and most chat
// models normalize before each attention and MLP. At a decode step's few rows the model's own norm is eight eager
// tensor ops of a few microseconds each, twice a layer; here it is one pass over each row.
//
// The arithmetic follows the models' own code: the mean of squares and the scaling in float32, the scaled row
// rounded to the input's dtype before the weight multiplies it (bfloat16 stored as its 16 bits, rounded to nearest
// even), so the result is the model's own up to the order of the float32 sum.
#pragma once

#include <cstdint>

namespace dart {

// x and y [rows, dim], weight [dim], row-major and contiguous (y may not overlap x).
template <class T>
struct RmsNormCall {
  const T* x = nullptr;
  const T* weight = nullptr;
  T* y = nullptr;
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 0.0f;
};

// Shapes are checked by the caller (the binding).
void rms_norm(const RmsNormCall<float>& call);
void rms_norm(const RmsNormCall<uint16_t>& call);

}  // namespace dart
