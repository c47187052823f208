#include "trace/OpLookup.h"

#include "trace/Intern.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#include <pthread.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace openreg::trace {
namespace {

// The dispatch tables read so far, shared by all threads; a table is replaced
// when stale (Note [Stale dispatch tables]). Replaced tables are kept, as
// other threads may still hold them: they are few and small.
struct SharedTables {
  struct Entry {
    std::unique_ptr<OperatorTable> table;
    uint64_t epoch = 0;
  };
  std::mutex mutex;
  std::unordered_map<c10::OperatorName, Entry> tables;
  std::vector<std::unique_ptr<OperatorTable>> replaced;
  SharedTables* parent = nullptr;  // abandoned at a fork: kept reachable, not freed
};

void fresh_tables_in_child();

// Leaked: per-thread caches keep pointers to the tables.
SharedTables* g_shared = [] {
  pthread_atfork(nullptr, nullptr, &fresh_tables_in_child);
  return new SharedTables();
}();

// Note [The recorder across fork] (Recorder.cpp): a thread of the parent may
// have held the mutex (reading a table from the dispatcher) when it forked.
// The tables are a cache, so the child then starts a new one; the old one is
// leaked, as pointers into it may be cached.
void fresh_tables_in_child() {
  if (g_shared->mutex.try_lock()) {
    g_shared->mutex.unlock();
  } else {
    auto* fresh = new SharedTables();
    fresh->parent = g_shared;
    g_shared = fresh;
  }
}

const OperatorTable* shared_table(const c10::OperatorName& name, uint64_t epoch) {
  SharedTables& shared = *g_shared;
  std::lock_guard<std::mutex> lock(shared.mutex);
  auto* tables = &shared.tables;
  auto* replaced = &shared.replaced;
  auto [it, inserted] = tables->try_emplace(name);
  SharedTables::Entry& e = it->second;
  if (inserted || e.epoch != epoch || (e.table && e.table->stale())) {
    if (e.table) {
      replaced->push_back(std::move(e.table));
    }
    e.table = OperatorTable::read(name);
    e.epoch = epoch;
  }
  return e.table.get();
}

// Per thread: operators keyed by their stable address, behind a small
// direct-mapped table (Note [The op observer's hot path]).
struct Operators {
  struct Slot {
    const void* key = nullptr;
    OpInfo* info = nullptr;
  };
  static constexpr size_t kSlots = 128;
  Slot slots[kSlots];
  std::unordered_map<const void*, OpInfo> ops;
};

Operators& operators() {
  thread_local Operators state;
  return state;
}

}  // namespace

OpInfo* find_op(const void* key, c10::function_ref<std::optional<c10::OperatorName>()> name) {
  Operators& ts = operators();
  const auto bits = reinterpret_cast<uintptr_t>(key);
  Operators::Slot& slot = ts.slots[((bits >> 4) ^ (bits >> 11)) & (Operators::kSlots - 1)];
  OpInfo* info = slot.key == key ? slot.info : nullptr;
  if (info == nullptr) {
    auto it = ts.ops.find(key);
    if (it == ts.ops.end()) {
      std::optional<c10::OperatorName> op = name();
      if (!op) {
        return nullptr;  // not an operator: not cached
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

c10::DispatchKeySet with_thread_keys(c10::DispatchKeySet keys) {
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  return (keys | tls.included_) - tls.excluded_;
}

size_t begin_shapes(std::vector<int64_t>& pool) {
  pool.push_back(0);
  return pool.size() - 1;
}

void append_shape(std::vector<int64_t>& pool, size_t offset, const at::Tensor& t) {
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
}

}  // namespace openreg::trace
