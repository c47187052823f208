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

// Per thread: operator entries keyed by the address of their schema's name
// (stable for the operator's life); filled the first time an op is seen.
OpInfo* op_info(const at::RecordFunction& fn) {
  thread_local std::unordered_map<const char*, OpInfo> cache;
  auto [it, inserted] = cache.try_emplace(fn.name());
  OpInfo& info = it->second;
  const uint64_t epoch = dispatch_tables_epoch();
  if (inserted) {
    info.op = fn.operator_name();
    if (info.op) {
      std::string full = info.op->name;
      if (!info.op->overload_name.empty()) {
        full += "." + info.op->overload_name;
      }
      info.name = intern(full);
      info.table = shared_table(*info.op, epoch);
      info.epoch = epoch;
    }
  } else if (info.table != nullptr && (info.epoch != epoch || info.table->stale())) {
    info.table = shared_table(*info.op, epoch);
    info.epoch = epoch;
    info.resolutions = {};
  }
  return info.table != nullptr ? &info : nullptr;
}

// Calls fn(tensor) for every tensor argument, tensor lists included.
template <class Fn>
void for_each_tensor(c10::ArrayRef<const c10::IValue> inputs, Fn fn) {
  for (const c10::IValue& v : inputs) {
    if (v.isTensor()) {
      fn(v.toTensor());
    } else if (v.isTensorList()) {
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

// The RecordFunction handles of this thread's recorded calls that have not
// ended, innermost last: on_end of any other call (most calls: ops without an
// openreg argument, the backend's own calls) returns after one comparison,
// without taking the thread's buffer lock. The buffer's own list (`open`)
// stays the authority: a recording that ended meanwhile has cleared it.
std::vector<uint64_t>& open_handles() {
  thread_local std::vector<uint64_t> handles;
  return handles;
}

uint32_t backward_name(const at::RecordFunction& fn) {
  std::string_view name = fn.name();
  constexpr std::string_view prefix = "autograd::engine::evaluate_function: ";
  if (name.substr(0, prefix.size()) == prefix) {
    name.remove_prefix(prefix.size());
  }
  return intern(name);
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (InternalScope::inside()) {  // Note [The backend's own dispatcher calls]
    return nullptr;
  }
  Event e{};
  e.device = e.src = e.dst = kNoDevice;
  e.from_dtype = e.to_dtype = -1;
  e.seq = fn.seqNr();
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    e.kind = static_cast<int8_t>(Kind::Backward);
    e.name = backward_name(fn);
  } else {
    OpInfo* info = op_info(fn);
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
  w->open.push_back({w.append(e), fn.handle()});
  open_handles().push_back(fn.handle());
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*unused*/) {
  std::vector<uint64_t>& handles = open_handles();
  if (handles.empty() || handles.back() != fn.handle()) {
    return;  // not a recorded call
  }
  handles.pop_back();
  const int64_t end = now_ns();
  Writer w;
  if (!w || w->open.empty() || w->open.back().handle != fn.handle()) {
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
          .needsIds(true)
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

void set_source_provider(SourceProvider provider) {
  g_source.store(provider);
}

}  // namespace openreg::trace
