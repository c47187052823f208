// openreg_lab._C, the lab's extension module: the device's functions
// (python/device/Bindings.cpp), the lab's own, and the lab's table of hooks
// attached to the template (Note [The lab's seam] in runtime/Seam.h).

#include "coverage/CoverageHooks.h"
#include "python/Trace.h"
#include "python/device/Bindings.h"
#include "runtime/Seam.h"
#include "trace/SeamHooks.h"

#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_profiles(py::module_& m);          // Profiles.cpp
void bind_checked(py::module_& m);           // CheckedCollectives.cpp
void bind_alloc_stacks(py::module_& m);      // AllocStacks.cpp
void bind_torch_tracebacks(py::module_& m);  // TorchTracebacks.cpp
void bind_host_times(py::module_& m);        // HostTimes.cpp
void bind_host_stacks(py::module_& m);       // HostStacks.cpp
void bind_param_watch(py::module_& m);       // ParamWatch.cpp

namespace {

// Filled once, then published: it lives as long as the process.
void attach_the_lab() {
  static const openreg::seam::Hooks table = [] {
    openreg::seam::Hooks t;
    openreg::trace::fill_hooks(t);
    openreg::fill_coverage_hooks(t);
    return t;
  }();
  openreg::seam::attach(&table);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "C++ core of openreg_lab: the simulated `openreg` PrivateUse1 device and its lab.";
  attach_the_lab();
  openreg::python::bind_device(m);
  openreg::python::bind_trace(m);
  openreg::python::install_profiler_work();
  bind_profiles(m);
  bind_checked(m);
  bind_alloc_stacks(m);
  bind_torch_tracebacks(m);
  bind_host_times(m);
  bind_host_stacks(m);
  bind_param_watch(m);
}
