#pragma once

// Bindings of the recorder (Trace.cpp), added to openreg_lab._C by Module.cpp.

#include <torch/csrc/utils/pybind.h>

namespace openreg::python {

void bind_trace(pybind11::module_& m);

}  // namespace openreg::python
