// Binding of the suffix tree (suffix decoding's counts and speculation). Token ids cross through TokenIds (any
// 1-D integer sequence that fits int32); a speculation returns numpy arrays and runs without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "suffix_tree.hpp"
#include "token_ids.hpp"

namespace py = pybind11;
using dart_py::TokenIds;

namespace {

template <class T>
py::array_t<T> as_array(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

}  // namespace

void register_suffix(py::module_& m) {
  py::class_<dart::SuffixTree>(m, "SuffixTree")
      .def(py::init<int32_t>(), py::arg("max_depth"))
      .def_property_readonly("max_depth", &dart::SuffixTree::max_depth)
      .def_property_readonly("sequences", &dart::SuffixTree::sequences)
      .def_property_readonly("tokens", &dart::SuffixTree::tokens)
      .def_property_readonly("nodes", &dart::SuffixTree::nodes)
      .def(
          "extend",
          [](dart::SuffixTree& t, int64_t seq, const py::handle& tokens) {
            const TokenIds ids(tokens, "tokens");
            t.extend(seq, ids.data(), ids.size());
          },
          py::arg("seq"), py::arg("tokens"))
      .def("remove", &dart::SuffixTree::remove, py::arg("seq"))
      .def("contains", &dart::SuffixTree::contains, py::arg("seq"))
      .def("sequence_length", &dart::SuffixTree::sequence_length, py::arg("seq"))
      .def(
          "sequence",
          [](const dart::SuffixTree& t, int64_t seq) {
            const std::vector<int32_t>* toks = t.sequence(seq);
            if (toks == nullptr) throw py::key_error("no sequence " + std::to_string(seq) + " in the suffix tree");
            return as_array(*toks);
          },
          py::arg("seq"))
      .def(
          "count",
          [](const dart::SuffixTree& t, const py::handle& path) {
            const TokenIds ids(path, "path");
            return t.count(ids.data(), ids.size());
          },
          py::arg("path"))
      .def(
          "speculate",
          [](const dart::SuffixTree& t, const py::handle& context, int32_t max_spec_tokens, float max_spec_factor,
             float max_spec_offset, float min_token_prob, bool tree) {
            const TokenIds ctx(context, "context");
            dart::SuffixSpecParams p;
            p.max_spec_tokens = max_spec_tokens;
            p.max_spec_factor = max_spec_factor;
            p.max_spec_offset = max_spec_offset;
            p.min_token_prob = min_token_prob;
            p.tree = tree;
            dart::SuffixDraft d;
            {
              py::gil_scoped_release nogil;
              d = t.speculate(ctx.data(), ctx.size(), p);
            }
            return py::make_tuple(as_array(d.tokens), as_array(d.parents), as_array(d.probs), d.score, d.match_len);
          },
          py::arg("context"), py::arg("max_spec_tokens"), py::arg("max_spec_factor"), py::arg("max_spec_offset"),
          py::arg("min_token_prob"), py::arg("tree"),
          "the reference's speculate (docs/drafters.md) -> (tokens int32, parents int32, probs float32, score, match_len)")
      .def("check", &dart::SuffixTree::check, "recount every suffix and compare with the nodes (tests)");
}
