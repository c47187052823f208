// The lab's checked collectives seen from Python (Note [Checked collectives]
// in csrc/checked/CheckedBackend.h): openreg_lab/device/_distributed.py wraps
// openreg's backend and PyTorch's Gloo in it.

#include "checked/CheckedBackend.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

void bind_checked(py::module_& m) {
  using openreg::checked::CheckedBackend;
  py::class_<CheckedBackend, c10d::Backend, c10::intrusive_ptr<CheckedBackend>>(m,
                                                                                "_CheckedBackend")
      .def(py::init<c10::intrusive_ptr<c10d::Backend>, std::string,
                    c10::intrusive_ptr<c10d::Store>>(),
           py::arg("inner"), py::arg("group_name"), py::arg("store"),
           "The lab's checked collectives around `inner`, a backend of the same rank and size: "
           "the ranks compare each call in `store` (the group's) before `inner` runs it, and the "
           "lab records it.")
      .def_property_readonly("inner", &CheckedBackend::inner, "The backend that runs the calls.");
  m.def("_leave_groups_at_exit", &openreg::checked::leave_all_groups_at_exit,
        py::call_guard<py::gil_scoped_release>(),
        "Tell the other ranks of every checked group of this process that it exits, so that none "
        "waits for it (Note [A rank that left] in csrc/checked/Agreement.h).");
}
