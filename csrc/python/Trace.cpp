// Python face of the recorder (csrc/trace/): open and close sessions, hand the
// events over as bytes (numpy reads them in place, see
// openreg_lab/recording/events.py), and tell the recorder where user code called from.

#include "python/Trace.h"

#include "python/ParamWatch.h"
#include "python/Text.h"

#include "trace/Compiled.h"
#include "trace/DispatchPath.h"

#include "trace/Hooks.h"
#include "trace/Intern.h"
#include "trace/OpObserver.h"
#include "trace/PerfettoWriter.h"
#include "trace/Recorder.h"

#include <frameobject.h>
#include <pybind11/numpy.h>
#include <torch/csrc/Exceptions.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace openreg::python {
namespace {

// `text` for the string table (Note [Strings the recorder keeps]).
std::string text_of(const py::str& text) {
  std::string out;
  table_bytes(text.ptr(), &out);
  return out;
}

// Files whose frames are not "the user's code" (torch, the standard
// library); and per code object, whether it is one of them. Guarded by the
// GIL: only read with the GIL held.
std::vector<std::string> g_skip_prefixes;

// Note [Warnings from compiled code]
// In eager mode torch's bindings run each call under a PyWarningHandler, which
// turns the C++ warnings raised inside (TORCH_WARN, such as the fallback
// policy's "warn") into Python warnings when the call returns. The code
// Inductor generates calls ops through torch.ops, whose binding installs none,
// so the same warning went to stderr and `warnings` never saw it. Each
// compiled graph's call (recording/compiled_runtime.py: region) runs under one, as an eager
// call would.
py::object call_with_python_warnings(const py::object& call, const py::object& args) {
  py::object result;
  try {
    torch::PyWarningHandler handler;
    try {
      result = call(args);
    } catch (...) {
      handler.set_in_exception();
      throw;
    }
  } catch (python_error& e) {  // a warning the filters turned into an error
    e.restore();
    throw py::error_already_set();
  }
  return result;
}
std::unordered_map<PyCodeObject*, bool> g_skip_code;
std::unordered_map<PyCodeObject*, std::unordered_map<int, uint32_t>> g_lines;

bool skipped(PyCodeObject* code) {
  auto [it, inserted] = g_skip_code.try_emplace(code, false);
  if (inserted) {
    std::string file;  // Note [Strings the recorder keeps]
    if (!table_bytes(code->co_filename, &file)) {
      it->second = true;
    } else {
      const std::string_view f(file);
      for (const std::string& prefix : g_skip_prefixes) {
        it->second |= f.substr(0, prefix.size()) == prefix;
      }
      it->second |= !f.empty() && f.front() == '<' && f.substr(0, 7) != "<ipytho";
    }
  }
  return it->second;
}

uint32_t source_of(PyCodeObject* code, int line) {
  auto [it, inserted] = g_lines[code].try_emplace(line, 0);
  if (inserted) {
    std::string file;  // Note [Strings the recorder keeps]
    if (!table_bytes(code->co_filename, &file)) {
      file = "?";
    }
    it->second = trace::intern(file + ":" + std::to_string(line));
  }
  return it->second;
}

// The innermost frame of the calling thread outside torch and the standard
// library, as "file:line". torch releases the GIL while an op runs, so this
// takes it back; threads without a Python thread state (the autograd
// engine's) have no user frame to report.
//
// Deadlock freedom: the recorder calls this with the thread's buffer locked.
// Nothing that holds the GIL waits for another thread's buffer: opening and
// closing a session release the GIL first (below).
uint32_t python_source() {
  if (Py_IsInitialized() == 0 || PyGILState_GetThisThreadState() == nullptr) {
    return 0;
  }
  const PyGILState_STATE gil = PyGILState_Ensure();
  uint32_t found = 0;
  PyFrameObject* frame = PyThreadState_GetFrame(PyThreadState_Get());
  while (frame != nullptr && found == 0) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    if (!skipped(code)) {
      found = source_of(code, PyFrame_GetLineNumber(frame));
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  PyGILState_Release(gil);
  return found;
}

py::dict close(uint64_t id) {
  trace::SessionResult r;
  {
    py::gil_scoped_release no_gil;  // see python_source()
    r = trace::close_session(id);
  }
  return session_dict(r);
}

using Column = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// perfetto.py's packets (csrc/trace/PerfettoWriter.h): one int64 column per
// field, `arguments` a list of (name iid, is an interned string, values per
// event row, the row of the first value).
py::bytes perfetto_packets(const Column& timestamp, const Column& type, const Column& track,
                           const Column& name_iid, const Column& category_iid,
                           const Column& counter, const Column& event, const py::list& arguments,
                           uint64_t sequence_id) {
  const auto count = static_cast<size_t>(timestamp.size());
  for (const Column* c : {&type, &track, &name_iid, &category_iid, &counter, &event}) {
    TORCH_CHECK(static_cast<size_t>(c->size()) == count,
                "_trace_perfetto_packets: every packet column needs one value a packet");
  }
  std::vector<Column> keep;  // the argument columns, alive while the writer reads them
  std::vector<trace::PerfettoArgument> args;
  for (const auto& item : arguments) {
    auto t = item.cast<py::tuple>();
    keep.push_back(t[2].cast<Column>());
    args.push_back({t[0].cast<uint64_t>(), t[1].cast<bool>(), keep.back().data(),
                    t[3].cast<int64_t>(), static_cast<int64_t>(keep.back().size())});
  }
  const int64_t* rows = event.data();
  const trace::PerfettoPackets packets{
      count,           timestamp.data(),    type.data(),    track.data(),
      name_iid.data(), category_iid.data(), counter.data(), rows};
  std::string out;
  {
    py::gil_scoped_release no_gil;
    out = trace::perfetto_packets(packets, args, sequence_id);
  }
  return py::bytes(out);
}

}  // namespace

py::dict session_dict(const trace::SessionResult& r) {
  py::list threads;
  for (const trace::ThreadEvents& t : r.threads) {
    py::dict d;
    d["thread"] = t.thread;
    d["os_thread"] = t.os_thread;
    d["first"] = t.first;
    d["pool_first"] = t.pool_first;
    d["events"] = py::bytes(reinterpret_cast<const char*>(t.events.data()),
                            t.events.size() * sizeof(trace::Event));
    d["pool"] =
        py::bytes(reinterpret_cast<const char*>(t.pool.data()), t.pool.size() * sizeof(int64_t));
    threads.append(d);
  }
  py::dict out;
  out["threads"] = threads;
  out["dropped"] = r.dropped;
  out["capacity"] = r.capacity;
  out["inherited"] = r.inherited;
  return out;
}

void bind_trace(py::module_& m) {
  trace::install_op_observer();
  trace::set_source_provider(&python_source);

  m.def(
      "_trace_open",
      [](uint64_t capacity, bool record_shapes, bool stack, std::vector<std::string> skip,
         bool kernel_ops) {
        g_skip_prefixes = std::move(skip);
        g_skip_code.clear();  // code objects may have been freed and reused
        g_lines.clear();
        py::gil_scoped_release no_gil;  // see python_source()
        return trace::open_session(capacity, {record_shapes, stack, kernel_ops});
      },
      py::arg("capacity"), py::arg("record_shapes"), py::arg("stack"), py::arg("skip_prefixes"),
      py::arg("kernel_ops") = false);
  m.def("_trace_close", &close, py::arg("id"));
  m.def("_trace_enabled", &trace::enabled);
  m.def(
      "_trace_strings", [](size_t first) { return table_strings(trace::interned_strings(first)); },
      py::arg("first") = 0);
  m.def("_trace_events_so_far", &trace::events_so_far);
  m.def(
      "_dispatch_table_kinds",
      [](const std::string& name, const std::string& overload) {
        return trace::describe_dispatch_table({name, overload});
      },
      py::arg("name"), py::arg("overload") = "");
  m.def(
      "_trace_mark", [](const py::str& name) { trace::record_mark(text_of(name)); },
      py::arg("name"));
  m.def(
      "_trace_step",
      [](int64_t number) {
        trace::record_step(number);
        sweep_param_watches();  // Note [Gradients seen at each step]
      },
      py::arg("number"));
  // Note [Module spans]: called by recording/modules.py when a forward returns.
  m.def("_trace_module", &trace::record_module, py::arg("name"), py::arg("start_ns"));
  // Note [Compiled code in the trace]: called by the code Inductor generates.
  m.def(
      "_trace_intern", [](const py::str& text) { return trace::intern(text_of(text)); },
      py::arg("text"));
  m.def("_trace_compiled_begin", &trace::compiled_begin, py::arg("name"), py::arg("fused"),
        py::arg("device"));
  m.def("_trace_compile_begin", &trace::compile_begin, py::arg("name"));
  m.def("_call_with_python_warnings", &call_with_python_warnings, py::arg("call"), py::arg("args"));
  m.def("_trace_scope_end", &trace::scope_end, py::arg("token"), py::arg("reason") = 0);
  m.def("_trace_compile", &trace::record_compile, py::arg("name"), py::arg("reason"),
        py::arg("start_ns"));
  m.def("_trace_now_ns", &trace::now_ns);
  m.def("_trace_perfetto_packets", &perfetto_packets, py::arg("timestamp"), py::arg("type"),
        py::arg("track"), py::arg("name_iid"), py::arg("category_iid"), py::arg("counter"),
        py::arg("event"), py::arg("arguments"), py::arg("sequence_id"));
  m.def("_trace_bench_empty_callbacks", &trace::set_empty_callbacks, py::arg("empty"));
  m.def("_trace_bench_no_op_observer", &trace::set_no_op_observer, py::arg("off"));
  m.def("_trace_bench_callbacks_without_inputs", &trace::set_callbacks_without_inputs,
        py::arg("without"));
  m.def("_trace_op_observer_installed", &trace::op_observer_installed);
  m.def("_trace_event_size", [] { return sizeof(trace::Event); });
  // For tests of Note [The recorder across fork] (tests/recording/test_trace_fork.py).
  m.def(
      "_trace_test_hold_locks",
      [](bool recording_mutex, int64_t timeout_ms) {
        py::gil_scoped_release no_gil;
        return trace::hold_locks_for_test(recording_mutex, timeout_ms);
      },
      py::arg("recording_mutex"), py::arg("timeout_ms"));
  m.def("_trace_test_holding", &trace::test_holding);
  m.def("_trace_test_release", &trace::release_test_hold);
  // For benchmarks/bench_trace.py: records `n` alloc events through the same
  // hook the allocator uses (with no allocation), returns the nanoseconds taken.
  m.def(
      "_trace_bench_hook",
      [](int64_t n) {
        py::gil_scoped_release no_gil;
        const int64_t start = trace::now_ns();
        for (int64_t i = 0; i < n; ++i) {
          trace::record_memory(trace::Kind::Alloc, 0, 64, nullptr, i);
        }
        return trace::now_ns() - start;
      },
      py::arg("n"));
}

}  // namespace openreg::python
