// Binding of the one-token attention over a cache (src/decode_attention.hpp). Arrays cross as strided numpy
// views of the caller's tensors (no copy): float32, or bfloat16 as its 16 bits (uint16 or int16). Every shape,
// stride and dtype is checked here, so a wrong call is a ValueError, never a read out of bounds; so is a copy of
// the kernel (`isa`) this processor cannot run.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "decode_attention.hpp"
#include "float_arrays.hpp"

namespace py = pybind11;

namespace {

using dart_bind::FloatKind;
using dart_bind::float_kind;

// A 4-D view with non-negative strides that are whole elements and a contiguous last dimension.
template <class T>
dart::Tensor4<T> view4(const py::array& a, const char* what, T* data) {
  if (a.ndim() != 4) throw std::invalid_argument(std::string(what) + " must be 4-D");
  const auto item = static_cast<py::ssize_t>(sizeof(T));
  if (a.shape(3) > 1 && a.strides(3) != item)
    throw std::invalid_argument(std::string(what) + "'s last dimension must be contiguous");
  dart::Tensor4<T> t;
  t.data = data;
  for (int i = 0; i < 3; ++i) {
    if (a.strides(i) < 0 || a.strides(i) % item != 0)
      throw std::invalid_argument(std::string(what) + " has a negative or unaligned stride");
    t.stride[i] = a.strides(i) / item;
  }
  return t;
}

void check_shape(const py::array& a, const char* what, py::ssize_t b, py::ssize_t h, py::ssize_t n, py::ssize_t d) {
  if (a.ndim() != 4 || a.shape(0) != b || a.shape(1) != h || a.shape(2) != n || a.shape(3) != d)
    throw std::invalid_argument(std::string(what) + " must have shape [" + std::to_string(b) + ", " +
                                std::to_string(h) + ", " + std::to_string(n) + ", " + std::to_string(d) + "]");
}

// "auto", or a copy of the kernel this processor runs (decode_attention_isas()).
dart::AttentionIsa isa_of(const std::string& name) {
  if (name == "auto") return dart::AttentionIsa::automatic;
  std::string runnable;
  for (const dart::AttentionIsa isa : dart::decode_attention_isas()) {
    if (name == dart::attention_isa_name(isa)) return isa;
    runnable += std::string(", ") + dart::attention_isa_name(isa);
  }
  throw std::invalid_argument("isa must be auto" + runnable + " on this processor, not " + name);
}

// The checked arrays as element type T (float, or uint16_t for bfloat16's bits), then the kernel without the GIL.
template <class T>
void run(const dart::DecodeAttentionShape& s, const py::array& q, const py::array& k, const py::array& v,
         const uint8_t* keep, int64_t keep_stride, float scale, py::array& out, int threads, dart::AttentionIsa isa) {
  const auto qv = view4(q, "query", static_cast<const T*>(q.data()));
  const auto kv = view4(k, "keys", static_cast<const T*>(k.data()));
  const auto vv = view4(v, "values", static_cast<const T*>(v.data()));
  const auto ov = view4(out, "out", static_cast<T*>(out.mutable_data()));
  py::gil_scoped_release nogil;
  dart::decode_attention(s, qv, kv, vv, keep, keep_stride, scale, ov, threads, isa);
}

void decode_attention(const py::array& q, const py::array& k, const py::array& v, const py::object& keep_obj,
                      float scale, py::array& out, int threads, const std::string& isa_name) {
  if (q.ndim() != 4) throw std::invalid_argument("query must be 4-D [batch, kv_heads, group, dim]");
  dart::DecodeAttentionShape s;
  s.batch = q.shape(0);
  s.kv_heads = q.shape(1);
  s.group = q.shape(2);
  s.dim = q.shape(3);
  if (k.ndim() != 4) throw std::invalid_argument("keys must be 4-D [batch, kv_heads, length, dim]");
  s.length = k.shape(2);
  check_shape(k, "keys", s.batch, s.kv_heads, s.length, s.dim);
  check_shape(v, "values", s.batch, s.kv_heads, s.length, s.dim);
  check_shape(out, "out", s.batch, s.kv_heads, s.group, s.dim);
  if (s.group < 1 || s.group > dart::kMaxGroup)
    throw std::invalid_argument("query heads per key/value head must be 1.." + std::to_string(dart::kMaxGroup));
  if (s.dim < 1 || s.dim > dart::kMaxHeadDim)
    throw std::invalid_argument("head width must be 1.." + std::to_string(dart::kMaxHeadDim));
  if (threads < 1) throw std::invalid_argument("threads must be at least 1");
  const dart::AttentionIsa isa = isa_of(isa_name);
  if (!out.writeable()) throw std::invalid_argument("out must be writeable");
  const FloatKind kind = float_kind(q, "query");
  if (float_kind(k, "keys") != kind || float_kind(v, "values") != kind || float_kind(out, "out") != kind)
    throw std::invalid_argument("query, keys, values and out must have one dtype");

  const uint8_t* keep = nullptr;
  int64_t keep_stride = 0;
  py::array keep_arr;
  if (!keep_obj.is_none()) {
    keep_arr = keep_obj.cast<py::array>();
    const py::dtype dt = keep_arr.dtype();
    if (dt.itemsize() != 1 || !(dt.kind() == 'b' || dt.kind() == 'u'))
      throw std::invalid_argument("keep must be bool or uint8");
    if (keep_arr.ndim() != 2 || keep_arr.shape(0) != s.batch || keep_arr.shape(1) != s.length)
      throw std::invalid_argument("keep must have shape [batch, length] = [" + std::to_string(s.batch) + ", " +
                                  std::to_string(s.length) + "]");
    if ((s.length > 1 && keep_arr.strides(1) != 1) || keep_arr.strides(0) < 0)
      throw std::invalid_argument("keep's rows must be contiguous");
    keep = static_cast<const uint8_t*>(keep_arr.data());
    keep_stride = keep_arr.strides(0);
  }

  if (kind == FloatKind::f32)
    run<float>(s, q, k, v, keep, keep_stride, scale, out, threads, isa);
  else
    run<uint16_t>(s, q, k, v, keep, keep_stride, scale, out, threads, isa);
}

}  // namespace

void register_attention(py::module_& m) {
  m.def("decode_attention", &decode_attention, py::arg("query"), py::arg("keys"), py::arg("values"),
        py::arg("keep"), py::arg("scale"), py::arg("out"), py::arg("threads") = 1, py::arg("isa") = "auto",
        "One new token's attention per row over its cached keys and values, grouped-query heads together: "
        "query/out [batch, kv_heads, group, dim], keys/values [batch, kv_heads, length, dim], keep None or "
        "[batch, length] (False = masked). float32, or bfloat16 as 16-bit integers; writes out. isa: 'auto' (the "
        "widest copy of the kernel this processor runs) or one of DECODE_ATTENTION_ISAS.");
  m.attr("DECODE_ATTENTION_MAX_GROUP") = dart::kMaxGroup;
  m.attr("DECODE_ATTENTION_MAX_HEAD_DIM") = dart::kMaxHeadDim;
  // the copies of the kernel this processor runs, the widest first ("auto" runs that one)
  py::list isas;
  for (const dart::AttentionIsa isa : dart::decode_attention_isas()) isas.append(dart::attention_isa_name(isa));
  m.attr("DECODE_ATTENTION_ISAS") = py::tuple(isas);
}
