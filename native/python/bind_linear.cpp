// Binding of the few-row linear layer (src/row_linear.hpp). Arrays cross as numpy views of the caller's tensors
// (no copy): float32, or bfloat16 as its 16 bits (uint16 or int16), all of one kind, C-contiguous. Every shape,
// dtype and layout is checked here, so a wrong call is a ValueError, never a read out of bounds; so is a copy of
// the kernel (`isa`) this processor cannot run. The GIL is released while the product runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "row_linear.hpp"
#include "float_arrays.hpp"

namespace py = pybind11;

namespace {

using dart_bind::FloatKind;
using dart_bind::float_kind;

void check_2d(const py::array& a, const char* what, py::ssize_t rows, py::ssize_t cols) {
  if (a.ndim() != 2 || a.shape(0) != rows || a.shape(1) != cols)
    throw py::value_error(std::string(what) + " must have shape [" + std::to_string(rows) + ", " +
                          std::to_string(cols) + "]");
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(what) + " must be C-contiguous");
}

dart::LinearIsa isa_of(const std::string& name) {
  if (name == "auto") return dart::LinearIsa::automatic;
  std::string runnable;
  for (const dart::LinearIsa isa : dart::row_linear_isas()) {
    if (name == dart::linear_isa_name(isa)) return isa;
    runnable += std::string(", ") + dart::linear_isa_name(isa);
  }
  throw py::value_error("isa must be auto" + runnable + " on this processor, not " + name);
}

template <class T>
void run(const py::array& x, const py::array& weight, const py::array* bias, py::array& out, int threads,
         dart::LinearIsa isa) {
  dart::RowLinearCall<T> call;
  call.x = static_cast<const T*>(x.data());
  call.weight = static_cast<const T*>(weight.data());
  call.bias = bias ? static_cast<const T*>(bias->data()) : nullptr;
  call.y = static_cast<T*>(out.mutable_data());
  call.rows = x.shape(0);
  call.in = x.shape(1);
  call.out = weight.shape(0);
  py::gil_scoped_release release;
  dart::row_linear(call, threads, isa);
}

void row_linear(const py::array& x, const py::array& weight, const py::object& bias_obj, py::array out,
                int threads, const std::string& isa_name) {
  const dart::LinearIsa isa = isa_of(isa_name);
  if (threads < 1) throw py::value_error("threads must be at least 1");
  const FloatKind kind = float_kind(x, "x");
  if (float_kind(weight, "weight") != kind || float_kind(out, "out") != kind)
    throw py::value_error("x, weight and out must be of one dtype");
  if (x.ndim() != 2) throw py::value_error("x must be 2-D [rows, in]");
  if (weight.ndim() != 2) throw py::value_error("weight must be 2-D [out, in]");
  check_2d(x, "x", x.shape(0), x.shape(1));
  check_2d(weight, "weight", weight.shape(0), x.shape(1));
  check_2d(out, "out", x.shape(0), weight.shape(0));
  if (!out.writeable()) throw py::value_error("out must be writeable");
  py::array bias;
  if (!bias_obj.is_none()) {
    bias = bias_obj.cast<py::array>();
    if (float_kind(bias, "bias") != kind) throw py::value_error("bias must be of x's dtype");
    const bool contiguous = bias.ndim() == 1 && (bias.shape(0) <= 1 || bias.strides(0) == bias.itemsize());
    if (!contiguous || bias.shape(0) != weight.shape(0))
      throw py::value_error("bias must be contiguous with shape [" + std::to_string(weight.shape(0)) + "]");
  }
  const py::array* b = bias_obj.is_none() ? nullptr : &bias;
  if (kind == FloatKind::f32)
    run<float>(x, weight, b, out, threads, isa);
  else
    run<uint16_t>(x, weight, b, out, threads, isa);
}

}  // namespace

std::string use_openmp_runtime(const std::string& path) {
  const char* why = "";
  return dart::use_openmp_runtime(path.c_str(), &why) ? std::string() : std::string(why);
}

void register_linear(py::module_& m) {
  m.def("use_openmp_runtime", &use_openmp_runtime, py::arg("path"),
        "Run row_linear's threads on the OpenMP runtime at `path`, which the process must have loaded already "
        "(PyTorch's: the same team as its own ops). Returns '' when in use, else why not.");
  m.def("openmp_runtime", [] { return std::string(dart::openmp_runtime()); },
        "The path of the OpenMP runtime row_linear's threads run on ('' without one: the caller's thread alone).");
  m.def("row_linear", &row_linear, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("out"),
        py::arg("threads") = 1, py::arg("isa") = "auto",
        "out = x weight^T + bias for a few rows: x [rows, in], weight [out, in], bias None or [out], out "
        "[rows, out], all C-contiguous, float32 or bfloat16 as 16-bit integers; up to `threads` threads of the "
        "runtime named by use_openmp_runtime split the weight rows. isa: 'auto' (the widest copy this processor "
        "runs) or one of ROW_LINEAR_ISAS.");
  py::list isas;
  for (const dart::LinearIsa isa : dart::row_linear_isas()) isas.append(dart::linear_isa_name(isa));
  m.attr("ROW_LINEAR_ISAS") = py::tuple(isas);
}
