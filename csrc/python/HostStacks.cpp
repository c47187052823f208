// The host sampler's stack walk (Note [Host samples] in
// openreg_lab/recording/host.py): the Python stacks of the threads asked for,
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

// One thread's stack, innermost frame first: (id of the frame, its last
// instruction, its code object) each.
py::list walk(PyFrameObject* top) {
  py::list out;
  Py_XINCREF(top);
  PyFrameObject* frame = top;
  while (frame != nullptr) {
    PyObject* code = reinterpret_cast<PyObject*>(PyFrame_GetCode(frame));  // new reference
    out.append(py::make_tuple(reinterpret_cast<std::intptr_t>(frame), PyFrame_GetLasti(frame),
                              py::reinterpret_steal<py::object>(code)));
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference, or null at the root
    Py_DECREF(frame);
    frame = back;
  }
  return out;
}

py::dict thread_stacks(const std::vector<unsigned long>& idents) {
  GcPaused paused;
  py::dict frames = py::module_::import("sys").attr("_current_frames")();
  py::dict out;
  for (const unsigned long ident : idents) {
    py::int_ key(ident);
    if (!frames.contains(key)) {
      continue;  // no Python frame (ending, or not started)
    }
    out[key] = walk(reinterpret_cast<PyFrameObject*>(frames[key].ptr()));
  }
  return out;
}

}  // namespace

void bind_host_stacks(py::module_& m) {
  m.def("_host_thread_stacks", &thread_stacks, py::arg("idents"),
        "{ident: [(id of the frame, last instruction, code), ...] innermost first} of the threads "
        "asked for that run Python, read without giving up the GIL.");
}
