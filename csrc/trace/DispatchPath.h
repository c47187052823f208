#pragma once

// Note [Reading the dispatch path]
// The path of a call (the dispatch keys whose kernels handle it, outermost
// first) is what the dispatcher itself computes: the key set of the tensor
// arguments, plus the thread's included keys, minus its excluded keys, walked
// from the highest priority key down, skipping keys whose kernel for this
// operator is a fallthrough. Autograd, autocast, ADInplaceOrView and
// BackendSelect kernels pass the call on to the next key; a composite
// (CompositeImplicitAutograd "math", CompositeExplicitAutograd "default
// backend") kernel or the backend's own kernel ends it. The kernels come from
// the operator's computed dispatch table (Note [Classifying a table entry]).

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/operator_name.h>
#include <c10/core/DispatchKeySet.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace openreg::trace {

struct Resolution {
  uint32_t path;  // interned "AutogradPrivateUse1 > PrivateUse1"
  int8_t kernel;  // Kernel: what the last key runs for openreg
};

// The last few key sets one thread resolved for one operator.
struct ResolutionCache {
  struct Entry {
    c10::DispatchKeySet keys;
    Resolution resolution;
  };
  Entry entries[4] = {};
  int size = 0;
};

// The dispatch decisions of one operator, computed from its table. Threads
// share it: each entry is classified the first time any thread needs it
// (a call's key set has a handful of keys; the table has over a hundred) and
// never changes after that.
//
// Note [Stale dispatch tables]
// Kernels can be registered and removed at runtime (torch.library, coverage
// profiles). A table read earlier is re-read when the operator gains or loses
// a PrivateUse1 kernel (checked on every recorded call: one hash lookup) and
// after invalidate_dispatch_tables(), which whoever swaps kernels in bulk
// calls.
class OperatorTable {
 public:
  static std::unique_ptr<OperatorTable> read(const c10::OperatorName& name);
  Resolution resolve(c10::DispatchKeySet keys, ResolutionCache& cache) const;
  bool stale() const;

  // What the computed table holds for one runtime key.
  enum class Entry : uint8_t {
    Missing,
    Fallthrough,
    Kernel,
    Math,
    DefaultBackend,
    Fallback,
    Unknown
  };
  Entry entry(c10::DispatchKey key) const;

 private:
  Entry classify(c10::DispatchKey key) const;

  std::unique_ptr<std::atomic<Entry>[]> entries_;  // by DispatchKey value; Unknown until needed
  std::optional<c10::OperatorHandle> handle_;
  bool privateuse1_kernel_ = false;  // registered directly when read
};

// The kinds of an operator's computed table, one "Key: kind" line per key that
// has a kernel, read through the dispatcher's structured API (the same kinds
// as dumpComputedTable's brackets: kernel, fallthrough, math, default backend,
// backend fallback). For tests and explain().
std::string describe_dispatch_table(const c10::OperatorName& name);

// Marks every table read so far as stale (Note [Stale dispatch tables]).
void invalidate_dispatch_tables();
uint64_t dispatch_tables_epoch() noexcept;

}  // namespace openreg::trace
