#pragma once

// Bindings of the recorder (Trace.cpp), added to openreg_lab._C by Module.cpp.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace openreg::python {

void bind_trace(pybind11::module_& m);

}  // namespace openreg::python
