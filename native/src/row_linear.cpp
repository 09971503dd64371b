// The few-row linear layer (row_linear.hpp): the baseline copy of the kernel (row_linear_kernel.hpp), the choice
// of copy and the threads. The AVX2 copy is a file of its own (row_linear_avx2.cpp).
#include "row_linear.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>

#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#endif

#include "row_linear_kernel.hpp"

namespace dart {

void linear_range_baseline(const RowLinearCall<float>& call, int64_t first, int64_t last) {
  linear_range<float>(call, first, last);
}
void linear_range_baseline(const RowLinearCall<uint16_t>& call, int64_t first, int64_t last) {
  linear_range<uint16_t>(call, first, last);
}

const char* linear_isa_name(LinearIsa isa) {
  switch (isa) {
    case LinearIsa::automatic: return "auto";
    case LinearIsa::baseline: return "baseline";
    case LinearIsa::avx2: return "avx2";
  }
  return "?";
}

std::vector<LinearIsa> row_linear_isas() {
  std::vector<LinearIsa> isas;
#if DART_LINEAR_X86
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) isas.push_back(LinearIsa::avx2);
#endif
  isas.push_back(LinearIsa::baseline);
  return isas;
}

namespace {

template <class T>
using RangeFn = void (*)(const RowLinearCall<T>&, int64_t, int64_t);

template <class T>
RangeFn<T> range_fn(LinearIsa isa) {
  if (isa == LinearIsa::automatic) {
    static const LinearIsa widest = row_linear_isas().front();
    isa = widest;
  }
#if DART_LINEAR_X86
  if (isa == LinearIsa::avx2) return static_cast<RangeFn<T>>(&linear_range_avx2);
#endif
  return static_cast<RangeFn<T>>(&linear_range_baseline);
}

// The OpenMP runtime's entry points (libgomp's ABI, which LLVM's and Intel's runtimes also export).
using ParallelFn = void (*)(void (*)(void*), void*, unsigned, unsigned);
using IntFn = int (*)();
struct Runtime {
  ParallelFn parallel = nullptr;
  IntFn thread_num = nullptr;
  IntFn num_threads = nullptr;
  std::string path;
};
std::atomic<const Runtime*> runtime{nullptr};  // set once per path; never freed (a call may be using it)
std::mutex runtime_mutex;

template <class T>
struct Region {
  const RowLinearCall<T>* call;
  RangeFn<T> range;
  int64_t blocks;
  const Runtime* rt;
};

template <class T>
void range_part(const Region<T>& r, int part, int parts) {
  const int64_t first = r.blocks * part / parts * kBlock;
  const int64_t last = std::min(r.call->out, r.blocks * (part + 1) / parts * kBlock);
  if (first < last) r.range(*r.call, first, last);
}

template <class T>
void region_body(void* data) {  // run by every thread of the team: its own share of the weight rows
  const auto& r = *static_cast<const Region<T>*>(data);
  range_part(r, r.rt->thread_num(), r.rt->num_threads());
}

template <class T>
void run(const RowLinearCall<T>& call, int threads, LinearIsa isa) {
  if (call.rows <= 0 || call.out <= 0) return;
  // a part never gets less than 8 blocks of weight rows: a smaller layer runs on the caller's thread alone
  const int64_t blocks = (call.out + kBlock - 1) / kBlock;
  const int parts = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(threads, blocks / 8), 1, 1024));
  const Runtime* rt = runtime.load(std::memory_order_acquire);
  const Region<T> region{&call, range_fn<T>(isa), blocks, rt};
  if (parts > 1 && rt != nullptr)
    rt->parallel(&region_body<T>, const_cast<Region<T>*>(&region), static_cast<unsigned>(parts), 0);
  else
    range_part(region, 0, 1);
}

}  // namespace

bool use_openmp_runtime(const char* path, const char** why) {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  const Runtime* now = runtime.load();
  if (now != nullptr && now->path == path) return true;
#ifdef RTLD_NOLOAD
  void* handle = dlopen(path, RTLD_NOLOAD | RTLD_LAZY);  // only a runtime already loaded
  if (handle == nullptr) {
    *why = "the process has not loaded this OpenMP runtime";
    return false;
  }
  auto* rt = new Runtime;
  rt->parallel = reinterpret_cast<ParallelFn>(dlsym(handle, "GOMP_parallel"));
  rt->thread_num = reinterpret_cast<IntFn>(dlsym(handle, "omp_get_thread_num"));
  rt->num_threads = reinterpret_cast<IntFn>(dlsym(handle, "omp_get_num_threads"));
  rt->path = path;
  dlclose(handle);  // the runtime stays loaded: the process loaded it before us
  if (!rt->parallel || !rt->thread_num || !rt->num_threads) {
    delete rt;
    *why = "this library has no GOMP_parallel, omp_get_thread_num or omp_get_num_threads";
    return false;
  }
  runtime.store(rt, std::memory_order_release);
  return true;
#else
  (void)path;
  *why = "this platform cannot look up a loaded library";
  return false;
#endif
}

const char* openmp_runtime() {
  const Runtime* rt = runtime.load();
  return rt ? rt->path.c_str() : "";
}

void row_linear(const RowLinearCall<float>& call, int threads, LinearIsa isa) { run<float>(call, threads, isa); }
void row_linear(const RowLinearCall<uint16_t>& call, int threads, LinearIsa isa) {
  run<uint16_t>(call, threads, isa);
}

}  // namespace dart
