// openreg's c10d backend seen from Python: the class torch.distributed
// registers (openreg_lab/device/_distributed.py builds it around a Gloo group).

#include "distributed/Backend.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

void bind_distributed(py::module_& m) {
  using openreg::distributed::Backend;
  // The base class is torch's own binding of c10d::Backend (torch._C._distributed_c10d),
  // so torch.distributed accepts this object wherever it takes a backend.
  py::class_<Backend, c10d::Backend, c10::intrusive_ptr<Backend>>(m, "_DistributedBackend")
      .def(py::init<c10::intrusive_ptr<c10d::Backend>, std::string, c10::intrusive_ptr<c10d::Store>,
                    std::string>(),
           py::arg("transport"), py::arg("group_name"), py::arg("store"), py::arg("refusal") = "",
           "openreg's backend over `transport`, a group of the same rank and size "
           "(torch.distributed.ProcessGroupGloo); the ranks compare their calls in `store`, "
           "the group's. With a `refusal`, every collective raises it (a ValueError) instead.")
      .def_property_readonly("transport", &Backend::transport,
                             "The group that moves the bytes (Gloo's).");
  m.def("_leave_groups_at_exit", &openreg::distributed::leave_all_groups_at_exit,
        py::call_guard<py::gil_scoped_release>(),
        "Tell the other ranks of every ogloo group of this process that it exits, so that none "
        "waits for it (Note [A rank that left] in csrc/distributed/Agreement.h).");
}
