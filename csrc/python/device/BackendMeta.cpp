// Python access to openreg's per-tensor format tag (Note [Backend metadata]
// in runtime/BackendMeta.h): torch.openreg._backend_format and
// torch.openreg._set_backend_format.

#include "runtime/BackendMeta.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <string>

namespace py = pybind11;

void bind_backend_meta(py::module_& m) {
  m.def("backend_formats", [] { return openreg::backend_formats(); });
  m.def("backend_format", [](const at::Tensor& t) { return openreg::backend_format(t); });
  m.def("set_backend_format", [](const at::Tensor& t, const std::string& format) {
    openreg::set_backend_format(t, format);
  });
}
