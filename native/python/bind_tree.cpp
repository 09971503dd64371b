// Binding of the N-gram-guided tree search (filled in with tree_search.cpp).
#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_tree(py::module_&) {}
