// The one Python extension module, dart_core._native: each bind_*.cpp adds its part.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_ngram(py::module_& m);
void register_tree(py::module_& m);
void register_overlay(py::module_& m);
void register_suffix(py::module_& m);
void register_bench(py::module_& m);
void register_linear(py::module_& m);
void register_norm(py::module_& m);
#ifdef DART_CPU_ATTENTION
void register_attention(py::module_& m);
#endif

PYBIND11_MODULE(_native, m) {
  m.doc() = "DART Arena native core: N-gram store and overlay, N-gram-guided tree search, suffix tree, few-row linear layers, RMSNorm, one-token attention over a cache";
  register_ngram(m);
  register_tree(m);
  register_overlay(m);
  register_suffix(m);
  register_bench(m);
  register_linear(m);
  register_norm(m);
#ifdef DART_CPU_ATTENTION
  register_attention(m);
#endif
}
