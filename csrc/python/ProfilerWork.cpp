// The lab's Python computes openreg's device work for torch.profiler's trace
// (trace/ProfilerWork.h, Note [openreg's work in torch.profiler's trace] in
// trace/KinetoProfiler.cpp): the Kineto session calls
// openreg_lab/recording/profiler_work.py's for_profiler when a profile stops,
// on the thread that stops it. The module is imported then, not when
// openreg_lab loads (Note [The package loads its API on first use]).

#include "python/Trace.h"

#include "trace/ProfilerWork.h"

#include <pybind11/numpy.h>

#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace openreg::python {
namespace {

using Column = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

trace::DeviceWork from_python(const py::dict& d) {
  trace::DeviceWork out;
  const auto names = d["name"].cast<std::vector<std::string>>();
  const auto kernels = d["kernel"].cast<std::vector<std::string>>();
  const auto dispatches = d["dispatch"].cast<std::vector<std::string>>();
  if (kernels.size() != names.size() || dispatches.size() != names.size()) {
    out.error =
        "recording/profiler_work.py gave 'kernel' or 'dispatch' of another length than 'name'";
    return out;
  }
  const char* const keys[] = {"memcpy", "device", "stream", "start_ns",
                              "end_ns", "bytes",  "thread", "position"};
  std::vector<Column> columns;
  for (const char* key : keys) {
    columns.push_back(d[key].cast<Column>());
    if (static_cast<size_t>(columns.back().size()) != names.size()) {
      out.error = std::string("recording/profiler_work.py gave a column '") + key +
                  "' of another length than 'name'";
      return out;
    }
  }
  out.items.resize(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    trace::WorkItem& w = out.items[i];
    const auto at = [&](size_t column) { return columns[column].at(static_cast<py::ssize_t>(i)); };
    w.name = names[i];
    w.kernel = kernels[i];
    w.dispatch = dispatches[i];
    w.memcpy = at(0) != 0;
    w.device = static_cast<int32_t>(at(1));
    w.stream = static_cast<int32_t>(at(2));
    w.start_ns = at(3);
    w.end_ns = at(4);
    w.bytes = at(5);
    w.thread = static_cast<int32_t>(at(6));
    w.position = at(7);
  }
  out.device_properties = d["device_properties"].cast<std::vector<std::string>>();
  for (const auto& [key, value] : d["metadata"].cast<py::dict>()) {
    out.metadata.emplace(key.cast<std::string>(), value.cast<std::string>());
  }
  return out;
}

trace::DeviceWork python_work(const trace::SessionResult& session) {
  trace::DeviceWork out;
  if (Py_IsInitialized() == 0 || finalizing()) {
    out.error = "Python is not running: no device work";
    return out;
  }
  py::gil_scoped_acquire gil;
  try {
    py::object for_profiler =
        py::module_::import("openreg_lab.recording.profiler_work").attr("for_profiler");
    out = from_python(for_profiler(session_dict(session)).cast<py::dict>());
  } catch (py::error_already_set& e) {
    out = {};
    out.error = e.what();
  } catch (const py::cast_error& e) {
    out = {};
    out.error = std::string("recording/profiler_work.py gave what it should not: ") + e.what();
  }
  if (!out.error.empty()) {
    // Said where the user looks, not only in Kineto's log: the trace lacks openreg's work.
    const std::string message =
        "openreg's device work is missing from torch.profiler's trace: " + out.error;
    if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) < 0) {
      PyErr_WriteUnraisable(nullptr);  // a filter made the warning an error: nowhere to raise it
    }
  }
  return out;
}

}  // namespace

void install_profiler_work() {
  trace::set_device_work_provider(&python_work);
}

}  // namespace openreg::python
