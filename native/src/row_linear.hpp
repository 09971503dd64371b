// A linear layer on a few rows (plain decoding: one; a verify or a drafter's block: a dozen), y = x W^T + b, on a
// CPU. At so few rows the product is a pass over the weights, and its speed is the speed they are read at:
// PyTorch's CPU kernels read them at about half what two cores can (MKL's one-row kernel barely gains from a
// second thread), where llama.cpp reads them at the memory's speed (measured: docs/benchmarks.md, "llama.cpp on
// the same weights"). Here each block of weight rows is read once, for every input row.
//
// Threads: starting one costs more than a small layer's whole product, and a second set of threads beside the
// caller's own OpenMP team (PyTorch's, which spins a while after each op) fights it for the cores: that more
// than doubled a decode step. So the product runs on the OpenMP runtime the process has already loaded, named
// by the caller (use_openmp_runtime), through the runtime's own entry point for a parallel region (GOMP_parallel,
// which GNU, LLVM and Intel runtimes all provide): the same team and threads as the caller's other work.
// Without one it runs on the caller's thread alone.
#pragma once

#include <cstdint>
#include <vector>

namespace dart {

// One call's arrays (row-major, contiguous): x [rows, in], weight [out, in], bias [out] or null, y [rows, out].
// float32, or bfloat16 stored as its 16 bits (accumulated in float32, rounded to nearest even on output).
template <class T>
struct RowLinearCall {
  const T* x = nullptr;
  const T* weight = nullptr;
  const T* bias = nullptr;
  T* y = nullptr;
  int64_t rows = 0;
  int64_t in = 0;
  int64_t out = 0;
};

// The kernel is compiled once per instruction set: "avx2" (AVX2 and FMA) on x86-64, "baseline" (what the
// compiler targets by default) everywhere; `automatic` runs the widest this processor has.
enum class LinearIsa { automatic, baseline, avx2 };
const char* linear_isa_name(LinearIsa isa);
// The copies this processor can run, the widest first (never `automatic`; always ending with `baseline`).
std::vector<LinearIsa> row_linear_isas();

// Uses the OpenMP runtime at `path` for the threads, if the process has already loaded it (it is never loaded
// here: a second runtime is what this avoids). Returns whether it is in use; on false, `why` says why.
bool use_openmp_runtime(const char* path, const char** why);
// The path of the runtime in use ("" without one).
const char* openmp_runtime();

// y = x W^T + b with up to `threads` >= 1 of the runtime's threads splitting the weight rows (the caller's alone
// without a runtime, or for a layer too small to split). Shapes are checked by the caller (the binding); `isa` is
// `automatic` or one of row_linear_isas().
void row_linear(const RowLinearCall<float>& call, int threads, LinearIsa isa = LinearIsa::automatic);
void row_linear(const RowLinearCall<uint16_t>& call, int threads, LinearIsa isa = LinearIsa::automatic);

}  // namespace dart
