#include "trace/DispatchPath.h"

#include "trace/Event.h"
#include "trace/Intern.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <sstream>
#include <string>

namespace openreg::trace {

namespace {
constexpr size_t kNumKeys = static_cast<size_t>(c10::DispatchKey::EndOfAliasKeys) + 1;
std::atomic<uint64_t> g_epoch{0};
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
  table->entries_ = std::make_unique<Entry[]>(kNumKeys);
  table->handle_ = handle;
  table->privateuse1_kernel_ = handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1);
  // One line per key: "AutogradPrivateUse1: [fallthrough ]registered at ... [autograd kernel]"
  std::istringstream lines(handle->dumpComputedTable());
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(':');
    const size_t open = line.rfind('[');
    if (colon == std::string::npos || open == std::string::npos) {
      continue;
    }
    c10::DispatchKey key;
    try {
      key = c10::parseDispatchKey(line.substr(0, colon));
    } catch (const c10::Error&) {
      continue;
    }
    const std::string kind = line.substr(open + 1, line.size() - open - 2);
    Entry e = Entry::Kernel;
    if (line.compare(colon + 2, 11, "fallthrough") == 0) {
      e = Entry::Fallthrough;
    } else if (kind == "math kernel") {
      e = Entry::Math;
    } else if (kind == "default backend kernel") {
      e = Entry::DefaultBackend;
    } else if (kind == "backend fallback") {
      e = Entry::Fallback;
    }
    table->entries_[static_cast<size_t>(key)] = e;
  }
  return table;
}

OperatorTable::Entry OperatorTable::entry(c10::DispatchKey key) const {
  const auto i = static_cast<size_t>(key);
  return i < kNumKeys ? entries_[i] : Entry::Missing;
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

}  // namespace openreg::trace
