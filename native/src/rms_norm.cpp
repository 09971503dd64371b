// RMSNorm (rms_norm.hpp): one row at a time, the sum of squares over eight partial sums so the compiler can keep
// them in one vector register.
#include "rms_norm.hpp"

#include <cmath>

#include "bf16.hpp"

namespace dart {
namespace {

float round_to(const float*, float v) { return v; }
float round_to(const uint16_t*, float v) { return bf16_to_f32(f32_to_bf16(v)); }

template <class T>
void run(const RmsNormCall<T>& call) {
  constexpr int kLanes = 8;
  for (int64_t r = 0; r < call.rows; ++r) {
    const T* x = call.x + r * call.dim;
    T* y = call.y + r * call.dim;
    float partial[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= call.dim; i += kLanes)
      for (int k = 0; k < kLanes; ++k) {
        const float v = load1(x + i + k);
        partial[k] += v * v;
      }
    float sum = 0.0f;
    for (; i < call.dim; ++i) {
      const float v = load1(x + i);
      sum += v * v;
    }
    for (int k = 0; k < kLanes; ++k) sum += partial[k];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(call.dim) + call.eps);
    for (int64_t j = 0; j < call.dim; ++j)
      store1(y + j, load1(call.weight + j) * round_to(x, load1(x + j) * scale));
  }
}

}  // namespace

void rms_norm(const RmsNormCall<float>& call) { run(call); }
void rms_norm(const RmsNormCall<uint16_t>& call) { run(call); }

}  // namespace dart
