#pragma once

// Bindings of the recorder (Trace.cpp), added to openreg_lab._C by Module.cpp.

#include "trace/Recorder.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace openreg::python {

void bind_trace(pybind11::module_& m);

// A closed session's events as _C._trace_close hands them to Python
// (openreg_lab/recording/events.py reads them). Needs the GIL.
pybind11::dict session_dict(const trace::SessionResult& r);

// Makes the lab's Python the provider of openreg's device work for
// torch.profiler's trace (ProfilerWork.cpp, trace/ProfilerWork.h).
void install_profiler_work();

}  // namespace openreg::python
