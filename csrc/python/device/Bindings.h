#pragma once

// The device's Python functions, bound into an extension module: the
// template's (Module.cpp here) or the lab's (csrc/python/Module.cpp).

#include <pybind11/pybind11.h>

namespace openreg::python {

// Defines the device's functions on `m` (what openreg_lab/device calls).
void bind_device(pybind11::module_& m);

}  // namespace openreg::python
