// Binding of the N-gram-guided tree search. Arrays cross as C-contiguous numpy
// buffers of the exact dtype (the Python wrapper validates and converts); the
// search itself runs without the GIL, with one reusable TreeSearcher per thread.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "overlay_handle.hpp"
#include "tree_search.hpp"

namespace py = pybind11;

const dart::NgramStore* store_from_object(const py::object& obj);  // bind_ngram.cpp
const dart_py::OverlayHandle* overlay_from_object(const py::object& obj);  // bind_overlay.cpp

namespace {

using I32Array = py::array_t<int32_t, py::array::c_style>;
using F32Array = py::array_t<float, py::array::c_style>;

template <class T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

const float* optional_weights(const py::object& obj, F32Array& holder, size_t levels, const char* what) {
  if (obj.is_none()) return nullptr;
  holder = obj.cast<F32Array>();
  if (holder.ndim() != 1 || static_cast<size_t>(holder.shape(0)) != levels)
    throw std::invalid_argument(std::string(what) + " must be a 1-D array with one weight per level (" +
                                std::to_string(levels) + ")");
  return holder.data();
}

py::tuple search_tree(const I32Array& tokens, const F32Array& probs, const I32Array& context, const py::object& store,
                      size_t beam_width, size_t max_nodes, const py::object& level_weights,
                      const py::object& logit_weights, float ngram_weight, const py::object& eos_token_id,
                      const py::object& overlay) {
  if (tokens.ndim() != 2 || probs.ndim() != 2)
    throw std::invalid_argument("topk_tokens and topk_probs must be 2-D [levels, k]");
  if (tokens.shape(0) != probs.shape(0) || tokens.shape(1) != probs.shape(1))
    throw std::invalid_argument("topk_tokens and topk_probs must have the same shape");
  if (context.ndim() != 1) throw std::invalid_argument("context must be 1-D");
  const auto levels = static_cast<size_t>(tokens.shape(0));
  const auto k = static_cast<size_t>(tokens.shape(1));
  const dart::NgramStore* s = store_from_object(store);

  dart::TreeSearchParams params;
  params.beam_width = beam_width;
  params.max_nodes = max_nodes;
  params.ngram_weight = ngram_weight;
  std::vector<int32_t> eos_ids;  // one id or a 1-D array of ids, searched sorted (a copy: the caller's stays)
  if (!eos_token_id.is_none()) {
    if (py::isinstance<py::int_>(eos_token_id)) {
      eos_ids.push_back(eos_token_id.cast<int32_t>());
    } else {
      const auto ids = eos_token_id.cast<I32Array>();
      if (ids.ndim() != 1) throw std::invalid_argument("eos_token_id must be an id or a 1-D array of ids");
      eos_ids.assign(ids.data(), ids.data() + ids.size());
    }
    std::sort(eos_ids.begin(), eos_ids.end());
    params.eos_ids = eos_ids.data();
    params.n_eos = eos_ids.size();
  }
  F32Array lw_holder, logw_holder;
  params.level_weights = optional_weights(level_weights, lw_holder, levels, "level_weights");
  params.logit_weights = optional_weights(logit_weights, logw_holder, levels, "logit_weights");

  const dart_py::OverlayHandle* o = overlay_from_object(overlay);
  params.overlay = o != nullptr ? &o->overlay : nullptr;

  thread_local dart::TreeSearcher searcher;
  thread_local dart::DraftTreeOut out;
  {
    py::gil_scoped_release nogil;
    std::shared_lock<std::shared_mutex> lock;
    if (o != nullptr) lock = std::shared_lock(o->mutex);
    searcher.search(tokens.data(), probs.data(), levels, k, context.data(), static_cast<size_t>(context.size()), s,
                    params, out);
  }
  return py::make_tuple(to_numpy(out.tokens), to_numpy(out.parents), to_numpy(out.scores));
}

}  // namespace

void register_tree(py::module_& m) {
  m.def("search_tree", &search_tree, py::arg("topk_tokens"), py::arg("topk_probs"), py::arg("context"),
        py::arg("store"), py::arg("beam_width") = 20, py::arg("max_nodes") = 60, py::arg("level_weights") = py::none(),
        py::arg("logit_weights") = py::none(), py::arg("ngram_weight") = 0.5f, py::arg("eos_token_id") = py::none(),
        py::arg("overlay") = py::none(),
        "N-gram-guided draft-tree search (docs/tree-search.md) -> (tokens int32, parents int32, scores float32).");
  m.def(
      "default_tree_weights",
      [](size_t levels) {
        py::array_t<float> lw(static_cast<py::ssize_t>(levels)), logw(static_cast<py::ssize_t>(levels));
        for (size_t l = 0; l < levels; ++l) {
          lw.mutable_data()[l] = dart::default_level_weight(l);
          logw.mutable_data()[l] = dart::default_logit_weight(l);
        }
        return py::make_tuple(lw, logw);
      },
      py::arg("levels"), "The spec's default (level_weights, logit_weights), computed in float32 like the search.");
}
