// Binding of the N-gram overlay (ngram_overlay.hpp): a racer's session memory next to the read-only store. Token ids
// cross through TokenIds. The tree search reads an overlay without the GIL, so every overlay carries a lock:
// readers (the search, queries) share it, add / remove take it alone.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngram_overlay.hpp"
#include "overlay_handle.hpp"
#include "token_ids.hpp"

namespace py = pybind11;
using dart_py::OverlayHandle;
using dart_py::TokenIds;

const dart::NgramStore* store_from_object(const py::object& obj);  // bind_ngram.cpp

const OverlayHandle* overlay_from_object(const py::object& obj);

const OverlayHandle* overlay_from_object(const py::object& obj) {
  if (obj.is_none()) return nullptr;
  return &obj.cast<const OverlayHandle&>();
}

void register_overlay(py::module_& m) {
  py::class_<OverlayHandle>(m, "NgramOverlay")
      .def(py::init<uint32_t>(), py::arg("order"))
      .def_property_readonly("order", [](const OverlayHandle& h) { return h.overlay.order(); })
      .def_property_readonly("sequences",
                             [](const OverlayHandle& h) {
                               std::shared_lock lock(h.mutex);
                               return h.overlay.sequences();
                             })
      .def_property_readonly("tokens",
                             [](const OverlayHandle& h) {
                               std::shared_lock lock(h.mutex);
                               return h.overlay.tokens();
                             })
      .def_property_readonly("nodes",
                             [](const OverlayHandle& h) {
                               std::shared_lock lock(h.mutex);
                               return h.overlay.nodes();
                             })
      .def(
          "add",
          [](OverlayHandle& h, int64_t id, const py::handle& tokens) {
            const TokenIds ids(tokens, "tokens");
            py::gil_scoped_release nogil;
            std::unique_lock lock(h.mutex);
            h.overlay.add(id, ids.data(), ids.size());
          },
          py::arg("id"), py::arg("tokens"), "count a sequence under a new id (ValueError when the id is held)")
      .def(
          "remove",
          [](OverlayHandle& h, int64_t id) {
            py::gil_scoped_release nogil;
            std::unique_lock lock(h.mutex);
            return h.overlay.remove(id);
          },
          py::arg("id"), "uncount a sequence; False when the id is not held")
      .def(
          "contains",
          [](const OverlayHandle& h, int64_t id) {
            std::shared_lock lock(h.mutex);
            return h.overlay.contains(id);
          },
          py::arg("id"))
      .def(
          "count",
          [](const OverlayHandle& h, const py::handle& ngram) {
            const TokenIds ids(ngram, "ngram");
            std::shared_lock lock(h.mutex);
            return h.overlay.count(ids.data(), ids.size());
          },
          py::arg("ngram"))
      .def(
          "probability",
          [](const OverlayHandle& h, const py::object& store, const py::handle& context, const py::handle& tokens) {
            const TokenIds ctx(context, "context");
            const TokenIds toks(tokens, "tokens");
            const dart::NgramStore* s = store_from_object(store);
            const auto k = toks.size();
            py::array_t<float> probs(static_cast<py::ssize_t>(k));
            py::array_t<int32_t> lens(static_cast<py::ssize_t>(k));
            std::shared_lock lock(h.mutex);
            dart::summed_probability(s, h.overlay, ctx.data(), ctx.size(), toks.data(), k, probs.mutable_data(),
                                     lens.mutable_data());
            return py::make_tuple(std::move(probs), std::move(lens));
          },
          py::arg("store"), py::arg("context"), py::arg("tokens"),
          "the store's probability rule over the store's counts plus these (store None: these alone)")
      .def(
          "continuations",
          [](const OverlayHandle& h, const py::object& store, const py::handle& context, int64_t k) {
            if (k < 0) throw std::invalid_argument("k must be >= 0, got " + std::to_string(k));
            const TokenIds ctx(context, "context");
            const dart::NgramStore* s = store_from_object(store);
            const auto cap = static_cast<size_t>(k);
            std::vector<int32_t> toks(cap);
            std::vector<float> probs(cap);
            size_t n;
            {
              std::shared_lock lock(h.mutex);
              n = dart::summed_continuations(s, h.overlay, ctx.data(), ctx.size(), cap, toks.data(), probs.data());
            }
            py::array_t<int32_t> out_tokens(static_cast<py::ssize_t>(n));
            py::array_t<float> out_probs(static_cast<py::ssize_t>(n));
            std::copy_n(toks.data(), n, out_tokens.mutable_data());
            std::copy_n(probs.data(), n, out_probs.mutable_data());
            return py::make_tuple(std::move(out_tokens), std::move(out_probs));
          },
          py::arg("store"), py::arg("context"), py::arg("k"),
          "the store's continuations rule over the store's counts plus these (store None: these alone)")
      .def("check", [](const OverlayHandle& h) {
        std::shared_lock lock(h.mutex);
        h.overlay.check();
      }, "recount every sequence and compare with the counts (tests)");
}
