// The Python stacks of the memory history (Note [The memory history] in
// csrc/trace/MemoryHistory.h), and its Python face.
//
// Note [Interned stacks]
// A stack is walked at each allocation the history wants one for, on the
// allocating thread, with the GIL taken back (torch releases it while an op
// runs), before the allocator locks. It is interned twice over:
// * a frame is (code object, last instruction): the first time one is seen
//   its file, line and function name go to the recorder's string table
//   (Note [Strings the recorder keeps]) and it gets an id; the code object is
//   kept alive, so that its address is never another's;
// * a stack is the list of its frame ids, innermost first: a list seen before
//   is a hash lookup, and gets the same id.
// An entry of the history is then 4 bytes of stack, and the snapshot turns
// each id into its frames once. torch's own CapturedTraceback (what CUDA's
// history keeps) stores each entry's frames on the heap and symbolizes every
// traceback when a snapshot is taken: benchmarks/bench_memory.py measures
// both. The tables are guarded by the GIL, and only grow; the garbage
// collector is paused while a stack is walked (materializing a frame object
// allocates, and a collection could run a finalizer that frees a tensor
// inside the walk).
// Code that torch.compile generates may name the source line of the FX node a
// buffer is allocated for (openreg_lab/recording/compiled.py): that line is an
// extra, innermost frame (Note [The node an allocation is for] in
// trace/Compiled.h).

#include "python/Text.h"

#include "trace/Clock.h"
#include "trace/Compiled.h"
#include "trace/Intern.h"
#include "trace/MemoryHistory.h"

#include <Python.h>
#include <frameobject.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;
using openreg::python::table_bytes;

namespace {

struct StackFrame {
  uint32_t file;  // interned
  int32_t line;
  uint32_t name;  // interned
};
static_assert(sizeof(StackFrame) == 12, "see openreg_lab/recording/history.py");

struct CodeAt {
  PyCodeObject* code;
  int lasti;
  bool operator==(const CodeAt& o) const {
    return code == o.code && lasti == o.lasti;
  }
};

struct CodeAtHash {
  size_t operator()(const CodeAt& k) const {
    return std::hash<uintptr_t>()(reinterpret_cast<uintptr_t>(k.code) * 31 +
                                  static_cast<uintptr_t>(k.lasti));
  }
};

// Guarded by the GIL (Note [Interned stacks]).
std::vector<StackFrame> g_stack_frames;  // by frame id
std::unordered_map<CodeAt, uint32_t, CodeAtHash> g_frame_ids;
std::vector<uint32_t> g_stack_offsets{0, 0};  // stack s: g_stack_members[offsets[s], offsets[s+1])
std::vector<uint32_t> g_stack_members;
std::unordered_multimap<uint64_t, uint32_t> g_stack_ids;  // hash of the frame ids -> stack

uint32_t text_id(PyObject* text) {
  std::string bytes;
  return table_bytes(text, &bytes) ? openreg::trace::intern(bytes) : openreg::trace::intern("?");
}

uint32_t frame_id(PyFrameObject* frame, PyCodeObject* code) {
  const CodeAt key{code, PyFrame_GetLasti(frame)};
  auto it = g_frame_ids.find(key);
  if (it != g_frame_ids.end()) {
    return it->second;
  }
  Py_INCREF(code);  // kept: its address stays its own
  const auto id = static_cast<uint32_t>(g_stack_frames.size());
  g_stack_frames.push_back(
      {text_id(code->co_filename), PyFrame_GetLineNumber(frame), text_id(code->co_name)});
  g_frame_ids.emplace(key, id);
  return id;
}

uint32_t stack_id(const std::vector<uint32_t>& ids) {
  uint64_t hash = 1469598103934665603ULL;  // FNV-1a over the ids
  for (uint32_t id : ids) {
    hash = (hash ^ id) * 1099511628211ULL;
  }
  auto [first, last] = g_stack_ids.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    const uint32_t s = it->second;
    const uint32_t begin = g_stack_offsets[s];
    const uint32_t end = g_stack_offsets[s + 1];
    if (end - begin == ids.size() &&
        std::equal(ids.begin(), ids.end(), g_stack_members.begin() + begin)) {
      return s;
    }
  }
  const auto s = static_cast<uint32_t>(g_stack_offsets.size() - 1);
  g_stack_members.insert(g_stack_members.end(), ids.begin(), ids.end());
  g_stack_offsets.push_back(static_cast<uint32_t>(g_stack_members.size()));
  g_stack_ids.emplace(hash, s);
  return s;
}

bool python_is_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// The calling thread's Python stack, interned; 0 when it has none.
uint32_t python_stack() {
  thread_local bool walking = false;  // a finalizer freeing a tensor inside the walk
  if (walking || Py_IsInitialized() == 0 || python_is_finalizing() ||
      PyGILState_GetThisThreadState() == nullptr) {
    return 0;
  }
  const PyGILState_STATE gil = PyGILState_Ensure();
  walking = true;
  const int gc_was_on = PyGC_Disable();
  thread_local std::vector<uint32_t> ids;
  ids.clear();
  if (const uint32_t node = openreg::trace::node_frame(); node != 0) {
    ids.push_back(node);
  }
  PyFrameObject* frame = PyThreadState_GetFrame(PyThreadState_Get());
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    ids.push_back(frame_id(frame, code));
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  const uint32_t id = ids.empty() ? 0 : stack_id(ids);
  if (gc_was_on != 0) {
    PyGC_Enable();
  }
  walking = false;
  PyGILState_Release(gil);
  return id;
}

template <typename T>
py::bytes as_bytes(const std::vector<T>& v, size_t first) {
  first = std::min(first, v.size());
  return py::bytes(reinterpret_cast<const char*>(v.data() + first), (v.size() - first) * sizeof(T));
}

}  // namespace

void bind_alloc_stacks(py::module_& m) {
  openreg::trace::set_stack_provider(&python_stack);
  g_stack_frames.push_back({0, 0, 0});  // frame 0: none
  m.def(
      "_memory_history_configure",
      [](bool enabled, bool entries, uint64_t max_entries, int context, uint32_t skip, bool clear) {
        openreg::trace::HistoryOptions o;
        o.enabled = enabled;
        o.entries = entries;
        o.max_entries = max_entries;
        o.context = static_cast<openreg::trace::StackContext>(context);
        o.skip = skip;
        o.clear = clear;
        py::gil_scoped_release no_gil;  // an allocating thread may hold the history's lock
        openreg::trace::configure_history(o);
      },
      py::arg("enabled"), py::arg("entries"), py::arg("max_entries"), py::arg("context"),
      py::arg("skip"), py::arg("clear"),
      "Start (or reconfigure) or stop the memory history (Note [The memory history]); context: "
      "0 none, 1 state, 2 alloc, 3 all; skip: a bit per action not to keep.");
  m.def("_memory_history_on", &openreg::trace::history_on,
        "Whether a memory history is recorded (one relaxed load).");
  m.def(
      "_memory_history_read",
      [] {
        openreg::trace::HistoryCopy h;
        {
          py::gil_scoped_release no_gil;
          h = openreg::trace::read_history();
        }
        py::dict out;
        out["entries"] = as_bytes(h.entries, 0);
        out["appended"] = h.appended;
        out["max_entries"] = h.max_entries;
        out["enabled"] = h.options.enabled;
        out["entries_kept"] = h.options.entries;
        out["context"] = static_cast<int>(h.options.context);
        return out;
      },
      "The history's entries (32 bytes each, oldest first), how many were appended, its options.");
  m.def(
      "_memory_stacks",
      [] {
        py::dict out;
        out["frames"] = as_bytes(g_stack_frames, 0);
        out["offsets"] = as_bytes(g_stack_offsets, 0);
        out["members"] = as_bytes(g_stack_members, 0);
        return out;
      },
      "The interned frames (file, line, name: 12 bytes each; frame 0 is none) and stacks: stack s "
      "is members[offsets[s]:offsets[s + 1]] (uint32 frame ids, innermost first; stack 0 is "
      "none).");
  m.def(
      "_memory_node_frame",
      [](const py::str& file, int line, const py::str& name) {
        const auto id = static_cast<uint32_t>(g_stack_frames.size());
        g_stack_frames.push_back({text_id(file.ptr()), line, text_id(name.ptr())});
        std::string source;
        table_bytes(file.ptr(), &source);
        return py::make_tuple(id, openreg::trace::intern(source + ":" + std::to_string(line)));
      },
      py::arg("file"), py::arg("line"), py::arg("name"),
      "A frame for the source line of a compiled node (Note [The node an allocation is for]): "
      "(its frame id, its interned 'file:line').");
  m.def("_memory_node", &openreg::trace::set_node, py::arg("frame"), py::arg("source"),
        "Allocations of this thread are for the node (frame, source) until set_node(0, 0).");
  // For benchmarks/bench_memory.py: `n` stack walks from a thread that has
  // released the GIL, as the allocator's are; the nanoseconds they took.
  m.def(
      "_memory_bench_stacks",
      [](int64_t n) {
        py::gil_scoped_release no_gil;
        const int64_t start = openreg::trace::now_ns();
        for (int64_t i = 0; i < n; ++i) {
          python_stack();
        }
        return openreg::trace::now_ns() - start;
      },
      py::arg("n"));
}
