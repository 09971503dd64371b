// Token ids from any Python value, validated here rather than in Python: a query
// through NgramStore.probability then costs one binding call, not a handful of
// numpy round trips. Accepts what np.asarray accepts and keeps its meaning: a 1-D
// sequence of integers that fit int32 (docs/formats.md: any int32 is a legal id).
// Lists/tuples of plain ints and int32 arrays take fast paths (no numpy call).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace dart_py {

namespace py = pybind11;

class TokenIds {
 public:
  // `what` names the argument in error messages ("context", "tokens", ...).
  TokenIds(const py::handle& obj, const char* what) : what_(what) {
    PyObject* p = obj.ptr();
    if ((PyList_Check(p) || PyTuple_Check(p)) && from_ints(p)) return;
    if (py::isinstance<py::array>(obj)) {
      from_array(py::reinterpret_borrow<py::array>(obj));
    } else {
      // Anything else (numpy scalars in a list, torch tensors, ranges, ...): numpy decides, as before.
      py::object arr = py::module_::import("numpy").attr("asarray")(obj);
      from_array(py::reinterpret_borrow<py::array>(arr));
    }
  }

  const int32_t* data() const { return ptr_; }
  size_t size() const { return n_; }

  // The ids as a contiguous int32 numpy array: the input itself when it already is one.
  py::array_t<int32_t> array() const {
    if (keep_) return py::reinterpret_borrow<py::array_t<int32_t>>(keep_);
    py::array_t<int32_t> out(static_cast<py::ssize_t>(n_));
    if (n_) std::memcpy(out.mutable_data(), ptr_, n_ * sizeof(int32_t));
    return out;
  }

 private:
  static constexpr int32_t kEmpty[1] = {0};

  // A list/tuple whose items are all plain ints; false (nothing converted) when one is not.
  bool from_ints(PyObject* seq) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject** items = PySequence_Fast_ITEMS(seq);
    own_.resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!PyLong_CheckExact(items[i])) return false;  // bool, float, numpy scalar, nested list, ...
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(items[i], &overflow);
      if (overflow || v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        out_of_range(i, std::string(py::str(py::handle(items[i]))));
      }
      own_[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    }
    set_owned();
    return true;
  }

  void from_array(const py::array& a) {
    if (a.ndim() != 1) {
      throw py::value_error(std::string(what_) + " must be a 1-D sequence of token ids, got shape " +
                            std::string(py::str(a.attr("shape"))));
    }
    n_ = static_cast<size_t>(a.shape(0));
    if (n_ == 0) {  // an empty sequence of any dtype is no ids (np.asarray([]) is float64)
      ptr_ = kEmpty;
      return;
    }
    const py::dtype dt = a.dtype();
    const char kind = dt.kind();
    if (kind != 'i' && kind != 'u') {
      throw py::value_error(std::string(what_) + " must hold integer token ids, got dtype " +
                            std::string(py::str(dt)));
    }
    const char bo = dt.byteorder();
    const bool native = bo == '=' || bo == '|' || (bo == '<') == (std::endian::native == std::endian::little);
    if (!native) {
      py::object swapped = a.attr("astype")(dt.attr("newbyteorder")("="));
      from_array(py::reinterpret_borrow<py::array>(swapped));
      return;
    }
    const auto* base = static_cast<const char*>(a.data());
    const py::ssize_t stride = a.strides(0);
    const bool aligned = (a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_) != 0;
    if (kind == 'i' && dt.itemsize() == 4 && stride == 4 && aligned) {
      keep_ = a;
      ptr_ = reinterpret_cast<const int32_t*>(base);
      return;
    }
    own_.resize(n_);
    switch (dt.itemsize() * (kind == 'i' ? 1 : -1)) {
      case 1: convert<int8_t>(base, stride); break;
      case 2: convert<int16_t>(base, stride); break;
      case 4: convert<int32_t>(base, stride); break;
      case 8: convert<int64_t>(base, stride); break;
      case -1: convert<uint8_t>(base, stride); break;
      case -2: convert<uint16_t>(base, stride); break;
      case -4: convert<uint32_t>(base, stride); break;
      case -8: convert<uint64_t>(base, stride); break;
      default:
        throw py::value_error(std::string(what_) + " must hold integer token ids of at most 64 bits, got dtype " +
                              std::string(py::str(dt)));
    }
    set_owned();
  }

  template <class T>
  void convert(const char* base, py::ssize_t stride) {
    for (size_t i = 0; i < n_; ++i) {
      T v;
      std::memcpy(&v, base + static_cast<py::ssize_t>(i) * stride, sizeof(T));  // strided, maybe unaligned
      bool bad = false;
      if constexpr (std::is_signed_v<T>) {
        bad = static_cast<int64_t>(v) < std::numeric_limits<int32_t>::min() ||
              static_cast<int64_t>(v) > std::numeric_limits<int32_t>::max();
      } else {
        bad = static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
      }
      if (bad) out_of_range(static_cast<Py_ssize_t>(i), std::to_string(v));
      own_[i] = static_cast<int32_t>(v);
    }
  }

  [[noreturn]] void out_of_range(Py_ssize_t i, const std::string& value) const {
    throw py::value_error(std::string(what_) + " hold ids outside the int32 range: " + what_ + "[" +
                          std::to_string(i) + "] = " + value);
  }

  void set_owned() {
    n_ = own_.size();
    ptr_ = n_ ? own_.data() : kEmpty;
  }

  const char* what_;
  py::object keep_;  // the caller's int32 array that ptr_ points into, if any
  std::vector<int32_t> own_;
  const int32_t* ptr_ = kEmpty;
  size_t n_ = 0;
};

}  // namespace dart_py
