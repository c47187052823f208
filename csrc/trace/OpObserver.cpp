#include "trace/OpObserver.h"

#include "trace/Clock.h"
#include "trace/DispatchPath.h"
#include "trace/Hooks.h"
#include "trace/Intern.h"
#include "trace/OpLookup.h"
#include "trace/Recorder.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace openreg::trace {
namespace {

std::atomic<SourceProvider> g_source{nullptr};
at::CallbackHandle g_callback = 0;
std::atomic<bool> g_empty_callbacks{false};  // for benchmarks: set_empty_callbacks
std::atomic<bool> g_no_observer{false};      // for benchmarks: set_no_op_observer
std::atomic<bool> g_no_inputs{false};        // for benchmarks: set_callbacks_without_inputs

// Note [Recorder time is not op time]
// The first time a thread meets an operator the recorder reads its dispatch
// table. That time stays inside the enclosing ops' durations: taking it out of
// a parent's duration but not out of its children's start times would let a
// child end after its parent (the timeline would draw it outside its frame).
// Events are real time; making first sight cheap is the way to shrink it.

// Note [The op observer's hot path]
// The observer runs for every operator call of every thread while a trace is
// open, so its steady state is kept to two thread-local lookups (this file's
// and the operator table's, OpLookup.h), a few loads and the 64-byte append:
// - RecordFunction gives each call a globally unique id only when asked
//   (needsIds: an atomic increment per call, recorded or not); the observer
//   does not ask. A start and its end see the same RecordFunction object, and
//   two calls alive at once on one thread never share an address, so the
//   address is the handle.
// - Each thread remembers which of its calls were recorded (ThreadState). An
//   end that is not the innermost recorded call returns without taking the
//   buffer's lock, without even reading the clock.
// - Operators are looked up by the address of their schema's name in a small
//   direct-mapped table before the thread's map; names that are not operators
//   (user scopes, the autograd engine's "evaluate_function: ...") are not
//   cached at all, so their fresh heap strings do not grow the map.
// - A backward node's name is interned once per thread, not under the shared
//   lock at every node (Intern.h).
// What remains is RecordFunction's own cost: once any global callback is
// installed, every operator call of every thread takes the dispatcher's slow
// path and builds a RecordFunction, recorded or not. benchmarks/bench_trace.py
// (`ops 100`) measures that floor (an empty callback) beside the recorder and
// beside a trace with no op events at all (its allocations, steps, opening
// and closing): on the MLP step the trace alone is 1.04x, the floor 1.16x
// with the call's inputs boxed (needsInputs, as here) and 1.12x without. So
// of the default trace's 1.26x, RecordFunction is about 7%, boxing the inputs
// about 4% and this observer's own work about 8%. The inputs give each op its
// device, dispatch path and shapes (composites' included), so they are asked
// for. trace(ops="kernels") installs no callback (Note [Op events from
// openreg's kernels]).

// Note [A backward node ends with its hooks]
// The autograd engine evaluates a node inside a RecordFunction of its own,
// "autograd::engine::evaluate_function: <node>" (FUNCTION scope, engine.cpp's
// thread_main), which holds the node's pre-hooks, the node itself (inside it
// Node::operator()'s BACKWARD_FUNCTION record, where a Backward event starts)
// and then its post-hooks and the hand-off of its gradients to the next
// nodes (summing a broadcast gradient back to its input's shape, adding two
// gradients of one input). DDP all-reduces a bucket from a post-hook of an
// AccumulateGrad node: had the Backward event ended with BACKWARD_FUNCTION,
// the all-reduce would belong to no node. So a Backward event ends when its
// evaluate_function record ends, and what the node's post-hooks and hand-off
// do (ops, copies, collectives) are its children; the node's own computation
// is where it was, and the event still starts at BACKWARD_FUNCTION, so
// pre-hooks (Tensor.register_hook, Node.register_prehook) stay outside it.
// (Tensor.register_post_accumulate_grad_hook runs inside AccumulateGrad
// itself, so it was inside already.) A Backward event's duration therefore
// includes its post-hooks' time.
// - evaluate_function makes no event: its start is one entry in the thread's
//   `recorded` calls (found on the path of names that are not operators, so
//   operators pay nothing for it), its end pops it.
// - When the BACKWARD_FUNCTION directly inside it ends, its Backward event
//   stays open and the evaluate_function entry takes its handle (the dead
//   RecordFunction's address): that entry's end closes it. The handle stays
//   in the buffer's open events; a hook's RecordFunction may reuse the
//   address, but whatever it opens is innermost and closes first, and the
//   thread's `recorded` calls know the evaluate_function by its own address,
//   alive until its end.
// - A node not run (torch.autograd.grad's inputs= capture a gradient without
//   running its AccumulateGrad) leaves an entry with no event: nothing to end.
// - A trace opened after an evaluate_function started missed its start
//   (RecordFunction calls back only the callbacks it had at its start): its
//   node's Backward event ends with BACKWARD_FUNCTION, as before. (Were one
//   to open inside a pre-hook that runs a reentrant backward, the inner
//   node's event would be taken for the outer node's and end with it: the
//   nesting stays consistent.) A trace that ends in between leaves the event
//   open (-1, as any event running at the end); end_open finds nothing to
//   close in a later recording.
// - Reentrant backward (a node or hook calling backward on its thread) nests
//   its own evaluate_function records inside: the entries stack like calls.
// - trace(ops="kernels") records no Backward events (no RecordFunction), and
//   a hook's ops are recorded where they run, as every other op there.

constexpr std::string_view kEvaluatePrefix = "autograd::engine::evaluate_function: ";

// Per thread: which calls were recorded, and the backward names interned.
struct ThreadState {
  enum class Role : uint8_t { Op, Backward, Evaluate };
  struct Call {
    const void* fn;  // the RecordFunction (Note [The op observer's hot path])
    Role role;
    // Evaluate: the handle of its node's Backward event once that node
    // returned (0 before), ended with this call (Note [A backward node ends
    // with its hooks]).
    uint64_t backward = 0;
  };
  // The RecordFunctions whose start was recorded, and the autograd engine's
  // evaluate_function records, innermost last.
  std::vector<Call> recorded;
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> backward_names;
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

OpInfo* op_info(const at::RecordFunction& fn) {
  // Names that are not operators (user scopes, the autograd engine's
  // "evaluate_function: ...") are fresh heap strings: find_op does not cache them.
  return find_op(fn.name(), [&] { return fn.operator_name(); });
}

// Calls fn(tensor) for every tensor argument, tensor lists included.
template <class Fn>
void for_each_tensor(c10::ArrayRef<const c10::IValue> inputs, Fn fn) {
  for (const c10::IValue& v : inputs) {
    if (v.isTensor()) {
      fn(v.toTensor());
    } else if (v.isList() && v.isTensorList()) {  // isList is inline, isTensorList is not
      for (const at::Tensor& t : v.toTensorList()) {
        fn(t);
      }
    }
  }
}

// The key set the dispatcher computed for this call (Note [Reading the
// dispatch path]); empty when no argument is an openreg tensor or device.
// `device` becomes the first openreg device among the arguments.
c10::DispatchKeySet openreg_keys(c10::ArrayRef<const c10::IValue> inputs, int8_t* device) {
  c10::DispatchKeySet keys;
  auto note = [&](c10::Device d) {
    if (*device == kNoDevice) {
      *device = static_cast<int8_t>(std::max<c10::DeviceIndex>(d.index(), 0));
    }
  };
  for_each_tensor(inputs, [&](const at::Tensor& t) {
    keys = keys | t.key_set();
    if (is_openreg(t)) {
      note(t.device());
    }
  });
  for (const c10::IValue& v : inputs) {
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      // A factory (empty(..., device="openreg")): BackendSelect picks the backend.
      keys = keys | c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
      note(v.toDevice());
    }
  }
  if (*device == kNoDevice) {
    return {};
  }
  return with_thread_keys(keys);
}

// Shapes and dtypes of the tensor arguments, appended to the thread's pool as
// [count, (dtype, ndim, sizes...) per tensor]; returns 1 + the offset.
uint32_t write_shapes(std::vector<int64_t>& pool, c10::ArrayRef<const c10::IValue> inputs) {
  const size_t offset = begin_shapes(pool);
  for_each_tensor(inputs, [&](const at::Tensor& t) { append_shape(pool, offset, t); });
  return static_cast<uint32_t>(offset + 1);
}

uint32_t backward_name(ThreadState& ts, const at::RecordFunction& fn) {
  std::string_view name = fn.name();
  if (name.starts_with(kEvaluatePrefix)) {
    name.remove_prefix(kEvaluatePrefix.size());
  }
  auto it = ts.backward_names.find(name);
  if (it == ts.backward_names.end()) {
    it = ts.backward_names.emplace(std::string(name), intern(name)).first;
  }
  return it->second;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (g_empty_callbacks.load(std::memory_order_relaxed)) {
    return nullptr;
  }
  if (InternalScope::inside()) {  // Note [The backend's own dispatcher calls]
    return nullptr;
  }
  ThreadState& ts = thread_state();
  Event e{};
  e.device = e.src = e.dst = kNoDevice;
  e.from_dtype = e.to_dtype = -1;
  e.seq = fn.seqNr();
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    e.kind = static_cast<int8_t>(Kind::Backward);
    e.name = backward_name(ts, fn);
  } else {
    OpInfo* info = op_info(fn);
    if (info == nullptr) {
      if (std::string_view(fn.name()).starts_with(kEvaluatePrefix)) {
        // Note [A backward node ends with its hooks]
        ts.recorded.push_back({&fn, ThreadState::Role::Evaluate});
      }
      return nullptr;
    }
    const c10::DispatchKeySet keys = openreg_keys(fn.inputs(), &e.device);
    if (keys.empty()) {
      return nullptr;  // no openreg argument: not ours
    }
    const Resolution r = info->table->resolve(keys, info->resolutions);
    e.kind = static_cast<int8_t>(Kind::Op);
    e.name = info->name;
    e.dispatch = r.path;
    e.kernel = r.kernel;
  }
  Writer w;
  if (!w) {
    return nullptr;
  }
  const Options options = w.options();
  if (e.kind == static_cast<int8_t>(Kind::Op)) {
    if (options.record_shapes) {
      e.shapes = write_shapes(w->pool, fn.inputs());
    }
    SourceProvider source = g_source.load(std::memory_order_relaxed);
    if (options.stack && source != nullptr && w.innermost() < 0) {
      e.source = source();
    }
  }
  e.dur_ns = -1;  // until it ends: still -1 if the trace ends first
  e.start_ns = now_ns();
  w->open.push_back({w.append(e), reinterpret_cast<uint64_t>(&fn)});
  ts.recorded.push_back({&fn, e.kind == static_cast<int8_t>(Kind::Backward)
                                  ? ThreadState::Role::Backward
                                  : ThreadState::Role::Op});
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*unused*/) {
  if (g_empty_callbacks.load(std::memory_order_relaxed)) {
    return;
  }
  // Only the innermost recorded call can be ending (calls nest); any other
  // was not recorded (see Note [The op observer's hot path]).
  ThreadState& ts = thread_state();
  if (ts.recorded.empty() || ts.recorded.back().fn != &fn) {
    return;
  }
  const ThreadState::Call call = ts.recorded.back();
  ts.recorded.pop_back();
  uint64_t handle = reinterpret_cast<uint64_t>(&fn);
  // Note [A backward node ends with its hooks]
  if (call.role == ThreadState::Role::Evaluate) {
    if (call.backward == 0) {
      return;  // its node did not run, or was not recorded
    }
    handle = call.backward;
  } else if (call.role == ThreadState::Role::Backward && !ts.recorded.empty() &&
             ts.recorded.back().role == ThreadState::Role::Evaluate &&
             ts.recorded.back().backward == 0) {
    ts.recorded.back().backward = handle;  // open until the hooks have run
    return;
  }
  const int64_t end = now_ns();
  Writer w;
  if (w) {  // the recording may have ended and another begun since this call started
    w.end_open(handle, end);
  }
}

void add_callback() {
  if (g_no_observer.load()) {
    return;
  }
  g_callback = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_start, &on_end)
          .needsInputs(!g_no_inputs.load())
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

void remove_callback() {
  if (g_callback != 0) {
    at::removeCallback(g_callback);
    g_callback = 0;
  }
}

}  // namespace

void install_op_observer() {
  set_lifecycle_hooks(&add_callback, &remove_callback);
}

void set_empty_callbacks(bool empty) {
  g_empty_callbacks = empty;
}

void set_callbacks_without_inputs(bool without) {
  g_no_inputs = without;
}

void set_no_op_observer(bool off) {
  g_no_observer = off;
}

void set_source_provider(SourceProvider provider) {
  g_source.store(provider);
}

bool op_observer_installed() {
  return g_callback != 0;
}

SourceProvider source_provider() {
  return g_source.load(std::memory_order_relaxed);
}

}  // namespace openreg::trace
