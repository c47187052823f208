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
      .def(py::init<c10::intrusive_ptr<c10d::Backend>, std::string, std::string>(),
           py::arg("transport"), py::arg("group_name"), py::arg("refusal") = "",
           "openreg's backend over `transport`, a group of the same rank and size "
           "(torch.distributed.ProcessGroupGloo). With a `refusal`, every collective raises it "
           "(a ValueError) instead.")
      .def_property_readonly("transport", &Backend::transport,
                             "The group that moves the bytes (Gloo's).");
}
