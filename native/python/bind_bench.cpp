// Timing loops for `python -m dart_core.bench native`: each call is timed in
// C++ so the figures are the native latency the tree search sees, without the
// Python call overhead (the benchmark reports that separately).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <vector>

#include "ngram_store.hpp"
#include "tree_search.hpp"

namespace py = pybind11;
using Clock = std::chrono::steady_clock;

const dart::NgramStore* store_from_object(const py::object& obj);

namespace {

int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

}  // namespace

void register_bench(py::module_& m) {
  m.def(
      "time_probability",
      [](const py::object& store_obj, const py::array_t<int32_t, py::array::c_style>& contexts,
         const py::array_t<int32_t, py::array::c_style>& candidates) {
        const dart::NgramStore* store = store_from_object(store_obj);
        if (!store) throw std::invalid_argument("time_probability needs a store");
        if (contexts.ndim() != 2 || candidates.ndim() != 2 || contexts.shape(0) != candidates.shape(0))
          throw std::invalid_argument("contexts [n, m] and candidates [n, k] must have the same n");
        const auto n = contexts.shape(0), m = contexts.shape(1), k = candidates.shape(1);
        py::array_t<int64_t> out(n);
        std::vector<float> probs(static_cast<size_t>(k));
        std::vector<int32_t> lens(static_cast<size_t>(k));
        {
          py::gil_scoped_release nogil;
          for (py::ssize_t i = 0; i < n; ++i) {
            const auto t0 = Clock::now();
            store->probability(contexts.data(i, 0), static_cast<size_t>(m), candidates.data(i, 0),
                               static_cast<size_t>(k), probs.data(), lens.data());
            out.mutable_data()[i] = ns_since(t0);
          }
        }
        return out;
      },
      py::arg("store"), py::arg("contexts"), py::arg("candidates"));

  m.def(
      "time_search",
      [](const py::object& store_obj, const py::array_t<int32_t, py::array::c_style>& tokens,
         const py::array_t<float, py::array::c_style>& probs, const py::array_t<int32_t, py::array::c_style>& contexts,
         size_t beam_width, size_t max_nodes) {
        // tokens/probs: [n, levels, k]; contexts: [n, m]. Returns ns per search and nodes per tree.
        const dart::NgramStore* store = store_from_object(store_obj);
        if (tokens.ndim() != 3 || probs.ndim() != 3 || contexts.ndim() != 2 || tokens.shape(0) != probs.shape(0) ||
            tokens.shape(1) != probs.shape(1) || tokens.shape(2) != probs.shape(2) ||
            contexts.shape(0) != tokens.shape(0))
          throw std::invalid_argument("time_search: shapes must be tokens/probs [n, L, k] and contexts [n, m]");
        const auto n = tokens.shape(0), L = tokens.shape(1), k = tokens.shape(2), m = contexts.shape(1);
        py::array_t<int64_t> ns(n), nodes(n);
        dart::TreeSearcher searcher;
        dart::DraftTreeOut tree;
        dart::TreeSearchParams params;
        params.beam_width = beam_width;
        params.max_nodes = max_nodes;
        {
          py::gil_scoped_release nogil;
          for (py::ssize_t i = 0; i < n; ++i) {
            const auto t0 = Clock::now();
            searcher.search(tokens.data(i, 0, 0), probs.data(i, 0, 0), static_cast<size_t>(L), static_cast<size_t>(k),
                            contexts.data(i, 0), static_cast<size_t>(m), store, params, tree);
            ns.mutable_data()[i] = ns_since(t0);
            nodes.mutable_data()[i] = static_cast<int64_t>(tree.tokens.size());
          }
        }
        return py::make_tuple(ns, nodes);
      },
      py::arg("store"), py::arg("tokens"), py::arg("probs"), py::arg("contexts"), py::arg("beam_width") = 20,
      py::arg("max_nodes") = 60);
}
