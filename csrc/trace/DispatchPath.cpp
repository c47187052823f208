#include "trace/DispatchPath.h"

#include "trace/Event.h"
#include "trace/Intern.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <pthread.h>

#include <mutex>
#include <sstream>
#include <string>

namespace openreg::trace {

namespace {
constexpr size_t kNumKeys = static_cast<size_t>(c10::DispatchKey::EndOfAliasKeys) + 1;
std::atomic<uint64_t> g_epoch{0};

// Note [Classifying a table entry]
// The dispatcher's computed table is not public, but how it is computed is:
// for a runtime key, a kernel registered for that key wins; then, in order,
// the CompositeExplicitAutogradNonFunctional and CompositeExplicitAutograd
// alias kernels ("default backend"), the CompositeImplicitAutograd kernels
// ("math": for an autograd key, only if the matching backend has no kernel of
// its own), the Autograd and FuncTorchBatchedDecomposition alias kernels, and
// last the key's backend fallback (torch/_ops.py resolve_key spells out the
// same order). Each step is one structured query on the operator
// (hasKernelForDispatchKey, isIncludedInAlias), so an entry costs a few hash
// lookups, and only the keys a call carries are ever classified.
//
// One fact has no structured query: whether a backend fallback is a
// fallthrough (autocast, ADInplaceOrView and BackendSelect register theirs
// so). It is per key, not per operator, so it is read once per table epoch
// from the computed table of a probe operator that has no kernels at all,
// whose every entry therefore is a backend fallback.
class FallbackFallthroughs {
 public:
  bool contains(c10::DispatchKey key) {
    const uint64_t epoch = dispatch_tables_epoch();
    std::lock_guard<std::mutex> lock(mutex_);
    if (!read_ || epoch_ != epoch) {
      read(epoch);
    }
    const auto i = static_cast<size_t>(key);
    return i < kNumKeys && keys_[i];
  }

  FallbackFallthroughs* parent = nullptr;  // abandoned at a fork (see below)

  // False if another thread held the lock (for the fork handler).
  bool unlocked() {
    if (!mutex_.try_lock()) {
      return false;
    }
    mutex_.unlock();
    return true;
  }

 private:
  void read(uint64_t epoch) {
    keys_.assign(kNumKeys, false);
    auto& dispatcher = c10::Dispatcher::singleton();
    auto registration = dispatcher.registerDef(
        torch::jit::parseSchema("openreg_trace::fallback_probe() -> ()"),
        "openreg: reads which backend fallbacks are fallthroughs (csrc/trace/DispatchPath.cpp)");
    auto probe = dispatcher.findOp({"openreg_trace::fallback_probe", ""});
    // One line per key with a fallback: "Key: [fallthrough ]registered at ..."
    std::istringstream lines(probe->dumpComputedTable());
    std::string line;
    while (std::getline(lines, line)) {
      const size_t colon = line.find(": fallthrough ");
      if (colon == std::string::npos) {
        continue;
      }
      try {
        keys_[static_cast<size_t>(c10::parseDispatchKey(line.substr(0, colon)))] = true;
      } catch (const c10::Error&) {
      }
    }
    read_ = true;
    epoch_ = epoch;
  }

  std::mutex mutex_;
  std::vector<bool> keys_;
  bool read_ = false;
  uint64_t epoch_ = 0;
};

void fresh_fallthroughs_in_child();

FallbackFallthroughs* g_fallthroughs = [] {
  pthread_atfork(nullptr, nullptr, &fresh_fallthroughs_in_child);
  return new FallbackFallthroughs();
}();

// Note [The recorder across fork] (Recorder.cpp): if a thread of the parent
// was reading the fallthroughs when it forked, the child reads them again.
void fresh_fallthroughs_in_child() {
  if (!g_fallthroughs->unlocked()) {
    auto* fresh = new FallbackFallthroughs();
    fresh->parent = g_fallthroughs;  // kept reachable, not freed
    g_fallthroughs = fresh;
  }
}

FallbackFallthroughs& fallback_fallthroughs() {
  return *g_fallthroughs;
}

const char* kind_name(int kind) {
  static const char* const names[] = {
      "missing",          "fallthrough", "kernel", "math kernel", "default backend kernel",
      "backend fallback", "unknown"};
  return names[kind];
}
}  // namespace

void invalidate_dispatch_tables() {
  g_epoch.fetch_add(1);
}

uint64_t dispatch_tables_epoch() noexcept {
  return g_epoch.load(std::memory_order_relaxed);
}

bool OperatorTable::stale() const {
  return handle_->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) != privateuse1_kernel_;
}

std::unique_ptr<OperatorTable> OperatorTable::read(const c10::OperatorName& name) {
  auto handle = c10::Dispatcher::singleton().findOp(name);
  if (!handle.has_value()) {
    return nullptr;
  }
  auto table = std::make_unique<OperatorTable>();
  table->entries_ = std::make_unique<std::atomic<Entry>[]>(kNumKeys);
  for (size_t i = 0; i < kNumKeys; ++i) {
    table->entries_[i].store(Entry::Unknown, std::memory_order_relaxed);
  }
  table->handle_ = handle;
  table->privateuse1_kernel_ = handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1);
  return table;
}

OperatorTable::Entry OperatorTable::classify(c10::DispatchKey key) const {
  using K = c10::DispatchKey;
  const c10::OperatorHandle& op = *handle_;
  if (c10::isAliasDispatchKey(key) || key == K::Undefined ||
      !op.hasComputedKernelForDispatchKey(key)) {
    return Entry::Missing;
  }
  if (op.hasKernelForDispatchKey(key)) {
    return op.isKernelFallthroughKernel(key) ? Entry::Fallthrough : Entry::Kernel;
  }
  // The alias kernel `alias` applies to `key` (Note [Classifying a table entry]).
  auto from = [&](K alias, Entry kind) -> std::optional<Entry> {
    if (!c10::isIncludedInAlias(key, alias) || !op.hasKernelForDispatchKey(alias)) {
      return std::nullopt;
    }
    return op.isKernelFallthroughKernel(alias) ? Entry::Fallthrough : kind;
  };
  if (auto e = from(K::CompositeExplicitAutogradNonFunctional, Entry::DefaultBackend)) {
    return *e;
  }
  if (auto e = from(K::CompositeExplicitAutograd, Entry::DefaultBackend)) {
    return *e;
  }
  const bool backend_kernel =
      op.hasKernelForAnyDispatchKey(c10::getBackendKeySetFromAutograd(key)) ||
      op.hasKernelForDispatchKey(K::CompositeExplicitAutograd);
  // A "nested kernel" decomposes for nested tensors; unlike math kernels it
  // applies whatever else the operator registers.
  if (auto e = from(K::CompositeImplicitAutogradNestedTensor, Entry::Math)) {
    return *e;
  }
  if (c10::isIncludedInAlias(key, K::CompositeImplicitAutograd) &&
      op.hasKernelForDispatchKey(K::CompositeImplicitAutograd)) {
    if (key == K::AutogradOther && op.hasKernelForAnyDispatchKey(c10::autogradother_backends)) {
      return Entry::Kernel;  // the "ambiguous autogradother" kernel, which raises
    }
    if (!backend_kernel) {
      return op.isKernelFallthroughKernel(K::CompositeImplicitAutograd) ? Entry::Fallthrough
                                                                        : Entry::Math;
    }
  }
  if (auto e = from(K::Autograd, Entry::Kernel)) {
    return *e;
  }
  if (auto e = from(K::FuncTorchBatchedDecomposition, Entry::Kernel)) {
    return *e;
  }
  if (c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(key)) {
    return fallback_fallthroughs().contains(key) ? Entry::Fallthrough : Entry::Fallback;
  }
  return Entry::Kernel;  // a kernel the rules above do not explain: run, not skipped
}

OperatorTable::Entry OperatorTable::entry(c10::DispatchKey key) const {
  const auto i = static_cast<size_t>(key);
  if (i >= kNumKeys) {
    return Entry::Missing;
  }
  Entry e = entries_[i].load(std::memory_order_acquire);
  if (e == Entry::Unknown) {
    e = classify(key);  // threads racing here compute the same value
    entries_[i].store(e, std::memory_order_release);
  }
  return e;
}

Resolution OperatorTable::resolve(c10::DispatchKeySet keys, ResolutionCache& cache) const {
  for (int i = 0; i < cache.size; ++i) {
    if (cache.entries[i].keys == keys) {
      return cache.entries[i].resolution;
    }
  }
  std::string path;
  Kernel kernel = Kernel::None;
  for (c10::DispatchKeySet rest = keys;;) {
    const c10::DispatchKey key = rest.highestPriorityTypeId();
    if (key == c10::DispatchKey::Undefined) {
      break;
    }
    rest = rest.remove(key);
    const Entry e = entry(key);
    if (e == Entry::Missing || e == Entry::Fallthrough) {
      continue;
    }
    path += path.empty() ? "" : " > ";
    path += c10::toString(key);
    if (e == Entry::Math || e == Entry::DefaultBackend) {
      kernel = Kernel::Composite;
      break;
    }
    if (key == c10::DispatchKey::PrivateUse1) {
      kernel = e == Entry::Fallback ? Kernel::Fallback : Kernel::Native;
      break;
    }
  }
  const Resolution r{intern(path), static_cast<int8_t>(kernel)};
  cache.entries[cache.size < 4 ? cache.size++ : 3] = {keys, r};
  return r;
}

std::string describe_dispatch_table(const c10::OperatorName& name) {
  auto table = OperatorTable::read(name);
  if (!table) {
    return "";
  }
  std::string out;
  for (c10::DispatchKey key : c10::DispatchKeySet(c10::DispatchKeySet::FULL)) {
    const auto kind = static_cast<int>(table->entry(key));
    if (kind != static_cast<int>(OperatorTable::Entry::Missing)) {
      out += c10::toString(key);
      out += ": ";
      out += kind_name(kind);
      out += '\n';
    }
  }
  return out;
}

}  // namespace openreg::trace
