// Binding of the N-gram store, builder and .trie converter. Arrays cross as
// numpy buffers; long work runs without the GIL.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common.hpp"
#include "ngram_builder.hpp"
#include "ngram_store.hpp"
#include "ngram_writer.hpp"
#include "token_ids.hpp"
#include "trie_convert.hpp"

namespace py = pybind11;
using dart_py::TokenIds;

namespace {

// Bytes owned by C++ (a freshly built store), exposed through the buffer protocol.
struct Blob {
  std::vector<uint8_t> bytes;
};

// A store over a Python buffer (bytes, mmap, Blob) that it keeps alive and pinned.
class StoreView {
 public:
  explicit StoreView(const py::buffer& buf) : owner_(buf), info_(buf.request()) {
    if (info_.itemsize != 1 || info_.ndim != 1) throw std::invalid_argument("store buffer must be 1-D bytes");
    store_ = std::make_unique<dart::NgramStore>(static_cast<const uint8_t*>(info_.ptr),
                                                static_cast<uint64_t>(info_.size));
  }
  const dart::NgramStore& store() const { return *store_; }

 private:
  py::object owner_;
  py::buffer_info info_;
  std::unique_ptr<dart::NgramStore> store_;
};

}  // namespace

const dart::NgramStore* store_from_object(const py::object& obj);

const dart::NgramStore* store_from_object(const py::object& obj) {
  if (obj.is_none()) return nullptr;
  return &obj.cast<const StoreView&>().store();
}

void register_ngram(py::module_& m) {
  py::register_exception<dart::FormatError>(m, "NgramFormatError", PyExc_ValueError);

  py::class_<Blob>(m, "Blob", py::buffer_protocol())
      .def_buffer([](Blob& b) {
        return py::buffer_info(b.bytes.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.bytes.size())}, {1}, /*readonly=*/true);
      })
      .def("__len__", [](const Blob& b) { return b.bytes.size(); });

  py::class_<StoreView>(m, "StoreView")
      .def(py::init<const py::buffer&>(), py::arg("buffer"))
      .def_property_readonly("order", [](const StoreView& s) { return s.store().order(); })
      .def_property_readonly("num_nodes", [](const StoreView& s) { return s.store().info().num_nodes(); })
      .def_property_readonly("root_count", [](const StoreView& s) { return s.store().info().root_count; })
      .def_property_readonly("vocab_size", [](const StoreView& s) { return s.store().info().vocab_size; })
      .def_property_readonly("file_size", [](const StoreView& s) { return s.store().info().file_size; })
      .def_property_readonly("level_sizes",
                             [](const StoreView& s) {
                               const auto& i = s.store().info();
                               return std::vector<uint64_t>(i.level_nodes, i.level_nodes + i.order);
                             })
      .def_property_readonly("layout",
                             [](const StoreView& s) {
                               const auto& i = s.store().info();
                               py::dict d;
                               d["token_bits"] = i.token_bits;
                               d["count_bits"] = std::vector<uint32_t>(i.count_bits, i.count_bits + i.order);
                               d["offset_bits"] = std::vector<uint32_t>(i.offset_bits, i.offset_bits + i.order);
                               d["rank_map_len"] = i.map_len;
                               return d;
                             })
      .def("rank_of", [](const StoreView& s, int32_t t) { return s.store().rank_of(t); })
      .def(
          "probability",
          [](const StoreView& s, const py::handle& context, const py::handle& tokens) {
            // Validation and conversion happen here (TokenIds), not in Python: see token_ids.hpp.
            const TokenIds ctx(context, "context");
            const TokenIds toks(tokens, "tokens");
            const auto k = toks.size();
            py::array_t<float> probs(static_cast<py::ssize_t>(k));
            py::array_t<int32_t> lens(static_cast<py::ssize_t>(k));
            s.store().probability(ctx.data(), ctx.size(), toks.data(), k, probs.mutable_data(), lens.mutable_data());
            return py::make_tuple(std::move(probs), std::move(lens));
          },
          py::arg("context"), py::arg("tokens"))
      .def(
          "continuations",
          [](const StoreView& s, const py::handle& context, int64_t k) {
            if (k < 0) throw std::invalid_argument("k must be >= 0, got " + std::to_string(k));
            const TokenIds ctx(context, "context");
            const auto cap = static_cast<size_t>(k);
            std::vector<int32_t> toks(cap);
            std::vector<float> probs(cap);
            const size_t n = s.store().continuations(ctx.data(), ctx.size(), cap, toks.data(), probs.data());
            py::array_t<int32_t> out_tokens(static_cast<py::ssize_t>(n));
            py::array_t<float> out_probs(static_cast<py::ssize_t>(n));
            std::copy_n(toks.data(), n, out_tokens.mutable_data());
            std::copy_n(probs.data(), n, out_probs.mutable_data());
            return py::make_tuple(std::move(out_tokens), std::move(out_probs));
          },
          py::arg("context"), py::arg("k"))
      .def(
          "count",
          [](const StoreView& s, const py::handle& ngram) {
            const TokenIds ids(ngram, "ngram");
            return s.store().count(ids.data(), ids.size());
          },
          py::arg("ngram"))
      .def(
          "verify",
          [](const StoreView& s) {
            py::gil_scoped_release nogil;
            s.store().verify();
          })
      .def(
          "level_arrays",
          [](const StoreView& s, uint32_t d) {
            // (counts, ranks) of every node of level d, for tests and debugging.
            const auto& i = s.store().info();
            if (d < 1 || d > i.order) throw std::out_of_range("level out of range");
            const auto n = static_cast<py::ssize_t>(i.level_nodes[d - 1]);
            py::array_t<uint64_t> counts(n);
            py::array_t<uint32_t> ranks(n);
            for (py::ssize_t j = 0; j < n; ++j) {
              counts.mutable_data()[j] = s.store().node_count_at(d, static_cast<uint64_t>(j));
              ranks.mutable_data()[j] = s.store().node_rank_at(d, static_cast<uint64_t>(j));
            }
            return py::make_tuple(counts, ranks);
          },
          py::arg("level"))
      .def("vocab", [](const StoreView& s) {
        const auto& i = s.store().info();
        py::array_t<int32_t> v(static_cast<py::ssize_t>(i.vocab_size));
        for (uint64_t r = 0; r < i.vocab_size; ++r) v.mutable_data()[r] = s.store().vocab_at(r);
        return v;
      });

  m.def(
      "as_token_array",
      [](const py::handle& values, const std::string& what) { return TokenIds(values, what.c_str()).array(); },
      py::arg("values"), py::arg("what") = "tokens",
      "Validate a 1-D sequence of token ids and return it as contiguous int32 (no silent wrap-around).");

  m.def("has_store_magic", [](const py::bytes& head) {
    const std::string s = head;
    return dart::has_store_magic(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  });

  py::class_<dart::NgramBuilder>(m, "NgramBuilder")
      .def(py::init<uint32_t, uint64_t>(), py::arg("order"), py::arg("min_count") = 1)
      .def(
          "add",
          [](dart::NgramBuilder& b, const py::handle& tokens, const std::string& what) {
            const TokenIds ids(tokens, what.c_str());
            b.add(ids.data(), ids.size());
          },
          py::arg("tokens"), py::arg("what") = "tokens")
      .def_property_readonly("num_tokens", &dart::NgramBuilder::num_tokens)
      .def("to_blob",
           [](const dart::NgramBuilder& b) {
             auto blob = std::make_unique<Blob>();
             {
               py::gil_scoped_release nogil;
               dart::MemorySink sink;
               b.write(sink);
               blob->bytes = std::move(sink.bytes);
             }
             return blob;
           })
      .def(
          "write_file",
          [](const dart::NgramBuilder& b, const std::string& path) {
            py::gil_scoped_release nogil;
            dart::FileSink sink(path);
            b.write(sink);
            sink.close();
          },
          py::arg("path"));

  m.def(
      "convert_trie",
      [](const std::string& trie_path, const std::string& out_path, const std::string& tmp_dir, uint64_t memory_budget,
         const py::object& progress) {
        dart::ConvertOptions opts;
        opts.tmp_dir = tmp_dir;
        opts.memory_budget = memory_budget;
        if (!progress.is_none()) {
          auto fn = progress.cast<py::function>();
          opts.progress = [fn](uint64_t done, uint64_t total, const char* phase) {
            py::gil_scoped_acquire gil;
            fn(done, total, phase);
          };
        }
        dart::ConvertStats st;
        {
          py::gil_scoped_release nogil;
          st = dart::convert_trie(trie_path, out_path, opts);
        }
        py::dict d;
        d["order"] = st.order;
        d["input_nodes"] = st.input_nodes;
        d["vocab_size"] = st.vocab_size;
        d["output_bytes"] = st.output_bytes;
        return d;
      },
      py::arg("trie_path"), py::arg("out_path"), py::arg("tmp_dir") = "",
      py::arg("memory_budget") = uint64_t{512} << 20, py::arg("progress") = py::none());
}
