// Binding of RMSNorm (src/rms_norm.hpp). Arrays cross as numpy views of the caller's tensors (no copy): float32, or
// bfloat16 as its 16 bits, all of one kind, C-contiguous; every shape is checked here, so a wrong call is a
// ValueError, never a read out of bounds. The GIL stays held: a call is a few microseconds.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <string>

#include "float_arrays.hpp"
#include "rms_norm.hpp"

namespace py = pybind11;

namespace {

using dart_bind::FloatKind;
using dart_bind::float_kind;

template <class T>
void run(const py::array& x, const py::array& weight, py::array& out, float eps) {
  dart::RmsNormCall<T> call;
  call.x = static_cast<const T*>(x.data());
  call.weight = static_cast<const T*>(weight.data());
  call.y = static_cast<T*>(out.mutable_data());
  call.rows = x.shape(0);
  call.dim = x.shape(1);
  call.eps = eps;
  dart::rms_norm(call);
}

void rms_norm(const py::array& x, const py::array& weight, py::array out, double eps) {
  const FloatKind kind = float_kind(x, "x");
  if (float_kind(weight, "weight") != kind || float_kind(out, "out") != kind)
    throw py::value_error("x, weight and out must be of one dtype");
  if (x.ndim() != 2 || !(x.flags() & py::array::c_style)) throw py::value_error("x must be C-contiguous [rows, dim]");
  const py::ssize_t dim = x.shape(1);
  if (weight.ndim() != 1 || weight.shape(0) != dim || !(weight.flags() & py::array::c_style))
    throw py::value_error("weight must be contiguous with shape [" + std::to_string(dim) + "]");
  if (out.ndim() != 2 || out.shape(0) != x.shape(0) || out.shape(1) != dim || !(out.flags() & py::array::c_style))
    throw py::value_error("out must be C-contiguous with x's shape");
  if (!out.writeable()) throw py::value_error("out must be writeable");
  if (out.size() && x.size() && out.data() == x.data()) throw py::value_error("out must not be x");
  if (!(std::isfinite(eps) && eps >= 0.0)) throw py::value_error("eps must be a finite number >= 0");
  if (kind == FloatKind::f32)
    run<float>(x, weight, out, static_cast<float>(eps));
  else
    run<uint16_t>(x, weight, out, static_cast<float>(eps));
}

}  // namespace

void register_norm(py::module_& m) {
  m.def("rms_norm", &rms_norm, py::arg("x"), py::arg("weight"), py::arg("out"), py::arg("eps"),
        "out = weight * (x / sqrt(mean(x^2) + eps)) per row, as the Llama-style RMSNorm computes it (float32 sums; "
        "bfloat16 rounded before the weight multiplies): x and out [rows, dim], weight [dim], C-contiguous, "
        "float32 or bfloat16 as 16-bit integers.");
}
