// Python face of Note [Sharing device memory across processes]
// (runtime/DeviceAllocator.cpp): openreg_lab/device/_sharing.py pickles and
// unpickles storages with these two calls.

#include "runtime/DeviceAllocator.h"

#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Storage.h>

#include <tuple>

namespace py = pybind11;

void bind_sharing(py::module_& m) {
  m.def(
      "_share_storage",
      [](const py::object& storage) {
        TORCH_CHECK_TYPE(THPStorage_Check(storage.ptr()),
                         "_share_storage expects a torch.UntypedStorage");
        const c10::Storage& s = THPStorage_Unpack(storage.ptr());
        const auto handle = openreg::device_allocator().share(*s.unsafeGetStorageImpl());
        return std::make_tuple(handle.fd, handle.nbytes, static_cast<int>(handle.device));
      },
      "(fd, nbytes, device) of an openreg storage's shared segment, moving it into one first. "
      "The fd stays owned by the storage: duplicate it to send it.");
  m.def(
      "_import_storage",
      [](int fd, size_t nbytes, int device) {
        c10::Storage s = openreg::device_allocator().import_shared(
            fd, nbytes, static_cast<c10::DeviceIndex>(device));
        return py::reinterpret_steal<py::object>(THPStorage_Wrap(std::move(s)));
      },
      "A torch.UntypedStorage over a shared segment received from another process; takes "
      "ownership of `fd`.");
}
