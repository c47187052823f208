// Python face of the allocator's state for memory snapshots: the blocks a
// device holds now, and the observer of Note [Out of memory, observed]
// (runtime/DeviceAllocator.h). openreg_lab/recording builds PyTorch's snapshot
// format from these and from the trace's memory events.

#include "runtime/DeviceAllocator.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

namespace py = pybind11;

namespace {

// The Python callable the observer calls; leaked on purpose, so that nothing
// is destroyed after the interpreter is gone.
py::object* g_observer = nullptr;

std::string call_observer(c10::DeviceIndex device, size_t requested) {
  if (Py_IsInitialized() == 0) {
    return "";
  }
  const PyGILState_STATE gil = PyGILState_Ensure();
  std::string out;
  if (g_observer != nullptr) {
    PyObject* result = PyObject_CallFunction(g_observer->ptr(), "in", static_cast<int>(device),
                                             static_cast<Py_ssize_t>(requested));
    if (result == nullptr) {
      PyErr_WriteUnraisable(g_observer->ptr());  // the OutOfMemoryError still raises
    } else {
      if (PyUnicode_Check(result) != 0) {
        Py_ssize_t size = 0;
        if (const char* text = PyUnicode_AsUTF8AndSize(result, &size)) {
          out.assign(text, static_cast<size_t>(size));
        } else {
          PyErr_Clear();
        }
      }
      Py_DECREF(result);
    }
  }
  PyGILState_Release(gil);
  return out;
}

}  // namespace

void bind_memory(py::module_& m) {
  m.attr("_memory_round_bytes") = openreg::kRoundBytes;
  m.def(
      "_memory_blocks",
      [](int device) {
        std::vector<std::tuple<uint64_t, size_t, size_t, bool>> out;
        for (const auto& b :
             openreg::device_allocator().blocks(static_cast<c10::DeviceIndex>(device))) {
          out.emplace_back(b.address, b.size, b.requested, b.allocated);
        }
        return out;
      },
      py::arg("device"),
      "(address, size, requested, allocated) of every block `device` holds now, in use or "
      "cached, by address.");
  m.def(
      "_memory_block_rows",
      [] {
        std::vector<int64_t> rows;
        for (c10::DeviceIndex d = 0; d < openreg::device_count(); ++d) {
          for (const auto& b : openreg::device_allocator().blocks(d)) {
            rows.insert(rows.end(),
                        {d, static_cast<int64_t>(b.address), static_cast<int64_t>(b.size),
                         static_cast<int64_t>(b.requested), b.allocated ? 1 : 0});
          }
        }
        return py::bytes(reinterpret_cast<const char*>(rows.data()), rows.size() * sizeof(int64_t));
      },
      "Every device's blocks now, in use or cached, as int64 rows of (device, address, size, "
      "requested, allocated), by device and address: _memory_blocks of each device in one call "
      "that makes no Python object a block (a trace takes them as it opens).");
  m.def(
      "_memory_state",
      [](int device) {
        std::vector<std::tuple<uint64_t, size_t, size_t, bool, uint32_t>> blocks;
        uint64_t appended = 0;
        {
          py::gil_scoped_release no_gil;  // the device's lock: an allocating thread may hold it
          for (const auto& b : openreg::device_allocator().blocks(
                   static_cast<c10::DeviceIndex>(device), &appended)) {
            blocks.emplace_back(b.address, b.size, b.requested, b.allocated, b.stack);
          }
        }
        return py::make_tuple(blocks, appended);
      },
      py::arg("device"),
      "What a memory snapshot reads of `device`: its blocks as _memory_blocks lists them, each "
      "with the memory history's stack of its allocation (0: none), and the number of history "
      "entries appended when they were read (Note [The memory history]).");
  m.def(
      "_set_oom_observer",
      [](const py::object& observer) {
        if (observer.is_none()) {
          openreg::set_oom_observer(nullptr);
          return;
        }
        if (g_observer == nullptr) {
          g_observer = new py::object();
        }
        *g_observer = observer;
        openreg::set_oom_observer(&call_observer);
      },
      py::arg("observer"),
      "Call observer(device, requested) -> str before an OutOfMemoryError is raised and append "
      "what it returns to the message (Note [Out of memory, observed]); None removes it.");
}
