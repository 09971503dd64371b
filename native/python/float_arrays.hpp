// The float arrays the CPU kernels' bindings take (bind_attention.cpp, bind_linear.cpp): float32, or bfloat16
// viewed as 16-bit integers (numpy has no bfloat16), told apart here so each binding refuses anything else by name.
#pragma once

#include <pybind11/numpy.h>

#include <stdexcept>
#include <string>

namespace dart_bind {

enum class FloatKind { f32, bf16 };

inline FloatKind float_kind(const pybind11::array& a, const char* what) {
  const pybind11::dtype dt = a.dtype();
  if (dt.kind() == 'f' && dt.itemsize() == 4) return FloatKind::f32;
  if ((dt.kind() == 'u' || dt.kind() == 'i') && dt.itemsize() == 2) return FloatKind::bf16;
  throw std::invalid_argument(std::string(what) + " must be float32, or bfloat16 viewed as 16-bit integers");
}

}  // namespace dart_bind
