// The host sampler's stack walk (Note [Host samples] in
// openreg_lab/recording/sampler.py): the Python stacks of the threads asked for,
// read in one call that keeps the GIL from sys._current_frames() to the last
// frame. A walk in Python could lose the GIL to the switch interval halfway;
// the sampled thread then ran on, and following f_back or reading f_lasti of
// a frame it had meanwhile left crashed CPython 3.11 (seen once in the suite:
// a segmentation fault inside the walk; CPython issues 99110, 111363). Here
// no bytecode runs: the garbage collector, which could run finalizers while
// frame objects are allocated, is off for the walk.

#include <Python.h>
#include <frameobject.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// Re-enables the garbage collector when the walk ends, if it was on.
class GcPaused {
 public:
  GcPaused() : was_enabled_(PyGC_Disable()) {}
  ~GcPaused() {
    if (was_enabled_) {
      PyGC_Enable();
    }
  }
  GcPaused(const GcPaused&) = delete;
  GcPaused& operator=(const GcPaused&) = delete;

 private:
  int was_enabled_;
};

// The frames of one thread's stack that its last sample did not see,
// innermost first, as (id of the frame, its last instruction, its code
// object), and the depth that `known` gives the first frame it holds (-1 if
// none). `known` maps (id of a frame, instruction) to its depth in the last
// sample: a frame still running is the same object, and its callers have not
// moved, so the walk stops there. Looking up a tuple of ints runs no bytecode.
py::tuple walk(PyFrameObject* top, const py::dict& known) {
  py::list fresh;
  py::object base = py::int_(-1);
  const bool any_known = !known.empty();
  Py_XINCREF(top);
  PyFrameObject* frame = top;
  while (frame != nullptr) {
    const auto id = reinterpret_cast<std::intptr_t>(frame);
    const int lasti = PyFrame_GetLasti(frame);
    if (any_known) {
      PyObject* depth = PyDict_GetItemWithError(known.ptr(), py::make_tuple(id, lasti).ptr());
      if (depth != nullptr) {
        base = py::reinterpret_borrow<py::object>(depth);
        Py_DECREF(frame);
        break;
      }
      if (PyErr_Occurred()) {
        Py_DECREF(frame);
        throw py::error_already_set();
      }
    }
    PyObject* code = reinterpret_cast<PyObject*>(PyFrame_GetCode(frame));  // new reference
    fresh.append(py::make_tuple(id, lasti, py::reinterpret_steal<py::object>(code)));
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference, or null at the root
    Py_DECREF(frame);
    frame = back;
  }
  return py::make_tuple(fresh, base);
}

py::dict thread_stacks(const std::vector<std::pair<unsigned long, py::dict>>& asks) {
  GcPaused paused;
  py::dict frames = py::module_::import("sys").attr("_current_frames")();
  py::dict out;
  for (const auto& [ident, known] : asks) {
    py::int_ key(ident);
    if (!frames.contains(key)) {
      continue;  // no Python frame (ending, or not started)
    }
    out[key] = walk(reinterpret_cast<PyFrameObject*>(frames[key].ptr()), known);
  }
  return out;
}

}  // namespace

void bind_host_stacks(py::module_& m) {
  m.def("_host_thread_stacks", &thread_stacks, py::arg("asks"),
        "For each (ident, known) asked for whose thread runs Python: {ident: ([(id of the frame, "
        "last instruction, code), ...] innermost first, up to the first frame that known maps "
        "(id of the frame, instruction) -> depth; that depth, or -1)}, read without giving up the "
        "GIL.");
}
