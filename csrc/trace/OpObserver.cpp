#include "trace/OpObserver.h"

#include "trace/Clock.h"
#include "trace/DispatchPath.h"
#include "trace/Hooks.h"
#include "trace/Intern.h"
#include "trace/Recorder.h"

#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace openreg::trace {
namespace {

std::atomic<SourceProvider> g_source{nullptr};
at::CallbackHandle g_callback = 0;
std::atomic<bool> g_empty_callbacks{false};  // for benchmarks: set_empty_callbacks

// The dispatch tables read so far, shared by all threads; a table is replaced
// when stale (Note [Stale dispatch tables]). Replaced tables are kept, as
// other threads may still hold them: they are few and small.
const OperatorTable* shared_table(const c10::OperatorName& name, uint64_t epoch) {
  struct Entry {
    std::unique_ptr<OperatorTable> table;
    uint64_t epoch = 0;
  };
  static std::mutex mutex;
  static auto* tables = new std::unordered_map<c10::OperatorName, Entry>();
  static auto* replaced = new std::vector<std::unique_ptr<OperatorTable>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = tables->try_emplace(name);
  Entry& e = it->second;
  if (inserted || e.epoch != epoch || (e.table && e.table->stale())) {
    if (e.table) {
      replaced->push_back(std::move(e.table));
    }
    e.table = OperatorTable::read(name);
    e.epoch = epoch;
  }
  return e.table.get();
}

struct OpInfo {
  uint32_t name = 0;
  const OperatorTable* table = nullptr;  // null: not an operator
  uint64_t epoch = 0;
  std::optional<c10::OperatorName> op;
  ResolutionCache resolutions;  // this thread's, see DispatchPath.h
};

// Note [Recorder time is not op time]
// The first time a thread meets an operator the recorder reads its dispatch
// table. That time stays inside the enclosing ops' durations: taking it out of
// a parent's duration but not out of its children's start times would let a
// child end after its parent (the timeline would draw it outside its frame).
// Events are real time; making first sight cheap is the way to shrink it.

// Note [The op observer's hot path]
// The observer runs for every operator call of every thread while a trace is
// open, so its steady state is kept to one thread-local lookup, a few loads
// and the 64-byte append:
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
// What remains is RecordFunction's own cost: it exists for every call once
// any global callback is installed, and with needsInputs it boxes every
// argument. benchmarks/bench_trace.py measures that floor (an empty callback)
// beside the recorder.

// Per thread: operator entries keyed by the address of their schema's name
// (stable for the operator's life); filled the first time an op is seen.
struct ThreadState {
  struct Slot {
    const char* key = nullptr;
    OpInfo* info = nullptr;
  };
  static constexpr size_t kSlots = 128;
  Slot slots[kSlots];
  std::unordered_map<const char*, OpInfo> ops;
  // The RecordFunctions whose start was recorded, innermost last (their
  // addresses; see the Note above).
  std::vector<const void*> recorded;
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

OpInfo* op_info(ThreadState& ts, const at::RecordFunction& fn) {
  const char* key = fn.name();
  const auto bits = reinterpret_cast<uintptr_t>(key);
  ThreadState::Slot& slot = ts.slots[((bits >> 4) ^ (bits >> 11)) & (ThreadState::kSlots - 1)];
  OpInfo* info = slot.key == key ? slot.info : nullptr;
  if (info == nullptr) {
    auto it = ts.ops.find(key);
    if (it == ts.ops.end()) {
      std::optional<c10::OperatorName> op = fn.operator_name();
      if (!op) {
        return nullptr;  // not an operator: not cached (see the Note)
      }
      it = ts.ops.try_emplace(key).first;
      OpInfo& fresh = it->second;
      fresh.op = std::move(op);
      std::string full = fresh.op->name;
      if (!fresh.op->overload_name.empty()) {
        full += "." + fresh.op->overload_name;
      }
      fresh.name = intern(full);
      fresh.epoch = dispatch_tables_epoch();
      fresh.table = shared_table(*fresh.op, fresh.epoch);
    }
    info = &it->second;
    slot = {key, info};
  }
  if (info->table == nullptr) {
    return nullptr;  // an operator name the dispatcher does not know
  }
  const uint64_t epoch = dispatch_tables_epoch();
  if (info->epoch != epoch || info->table->stale()) {
    info->table = shared_table(*info->op, epoch);
    info->epoch = epoch;
    info->resolutions = {};
    if (info->table == nullptr) {
      return nullptr;
    }
  }
  return info;
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

bool is_openreg(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
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
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  return (keys | tls.included_) - tls.excluded_;
}

// Shapes and dtypes of the tensor arguments, appended to the thread's pool as
// [count, (dtype, ndim, sizes...) per tensor]; returns 1 + the offset.
uint32_t write_shapes(std::vector<int64_t>& pool, c10::ArrayRef<const c10::IValue> inputs) {
  const size_t offset = pool.size();
  pool.push_back(0);
  for_each_tensor(inputs, [&](const at::Tensor& t) {
    ++pool[offset];
    if (!t.defined()) {
      pool.push_back(-1);
      pool.push_back(0);
      return;
    }
    pool.push_back(static_cast<int64_t>(t.scalar_type()));
    pool.push_back(t.dim());
    // A nested or symbolic tensor has no single size per dimension (sizes()
    // throws): each is recorded as -1, and the op event is kept.
    const bool plain = !t.is_nested() && !t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
    for (int64_t d = 0; d < t.dim(); ++d) {
      pool.push_back(plain ? t.sizes()[d] : -1);
    }
  });
  return static_cast<uint32_t>(offset + 1);
}

uint32_t backward_name(ThreadState& ts, const at::RecordFunction& fn) {
  std::string_view name = fn.name();
  constexpr std::string_view prefix = "autograd::engine::evaluate_function: ";
  if (name.substr(0, prefix.size()) == prefix) {
    name.remove_prefix(prefix.size());
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
    OpInfo* info = op_info(ts, fn);
    if (info == nullptr) {
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
  ts.recorded.push_back(&fn);
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*unused*/) {
  if (g_empty_callbacks.load(std::memory_order_relaxed)) {
    return;
  }
  // Only the innermost recorded call can be ending (calls nest); any other
  // was not recorded (see Note [The op observer's hot path]).
  ThreadState& ts = thread_state();
  if (ts.recorded.empty() || ts.recorded.back() != &fn) {
    return;
  }
  ts.recorded.pop_back();
  const int64_t end = now_ns();
  Writer w;
  // The recording may have ended and another begun since this call started.
  const auto handle = reinterpret_cast<uint64_t>(&fn);
  if (!w || w->open.empty() || w->open.back().handle != handle) {
    return;
  }
  const OpenEvent open = w->open.back();
  w->open.pop_back();
  if (open.index >= 0) {
    Event& e = w->events[open.index];
    e.dur_ns = end - e.start_ns;
  }
}

void add_callback() {
  g_callback = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_start, &on_end)
          .needsInputs(true)
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

void set_source_provider(SourceProvider provider) {
  g_source.store(provider);
}

}  // namespace openreg::trace
