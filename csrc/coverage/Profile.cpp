// Switching profiles: see Note [Profiles].

#include "coverage/Profile.h"

#include "aten/fallback/Fallback.h"
#include "coverage/GenericNative.h"
#include "trace/DispatchPath.h"
#include "trace/Hooks.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>

namespace openreg {
namespace {

using Covered = std::unordered_set<c10::OperatorName>;

struct Active {
  std::string name;
  std::map<std::string, std::unique_ptr<torch::Library>> libraries;  // per namespace
};

std::mutex g_mutex;
std::unique_ptr<Active> g_active;  // guarded by g_mutex
std::atomic<bool> g_on{false};
std::atomic<std::shared_ptr<const Covered>> g_covered;

// "aten::add.Tensor" -> {"aten", "add.Tensor"} and its OperatorName.
struct QualifiedName {
  std::string ns;
  std::string name;
  c10::OperatorName op;
};

QualifiedName parse(const std::string& qualified) {
  const auto sep = qualified.find("::");
  TORCH_CHECK_VALUE(sep != std::string::npos && sep > 0,
                    "set_profile: operator names are qualified, like 'aten::add.Tensor'; got '",
                    qualified, "'");
  std::string rest = qualified.substr(sep + 2);
  const auto dot = rest.find('.');
  std::string base =
      qualified.substr(0, dot == std::string::npos ? std::string::npos : sep + 2 + dot);
  std::string overload = dot == std::string::npos ? "" : rest.substr(dot + 1);
  c10::OperatorName op(std::move(base), std::move(overload));
  TORCH_CHECK_VALUE(c10::Dispatcher::singleton().findOp(op).has_value(), "set_profile: '",
                    qualified, "' is not a registered operator");
  return {qualified.substr(0, sep), std::move(rest), std::move(op)};
}

std::vector<QualifiedName> parse_all(const std::vector<std::string>& names) {
  std::vector<QualifiedName> out;
  out.reserve(names.size());
  for (const std::string& n : names) {
    out.push_back(parse(n));
  }
  return out;
}

// What the dispatcher would run for openreg without a kernel of its own: the
// operator's composite, as computed for the (unused) PrivateUse3 key.
void run_composite(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  trace::mark_kernel(trace::Kernel::Composite);
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse3), stack);
}

// Overriding a kernel is the point here: the dispatcher's "Overriding a
// previously registered kernel" warning would only be noise.
class Quiet final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& /*warning*/) override {}
};

// Kernels changed: the recorder re-reads dispatch tables (Note [Stale dispatch
// tables]) and open traces get a mark event.
void switched(const std::string& what) {
  trace::invalidate_dispatch_tables();
  trace::record_mark(what);
}

torch::Library& library_for(Active& active, const std::string& ns) {
  auto& lib = active.libraries[ns];
  if (!lib) {
    lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1,
                                           __FILE__, __LINE__);
  }
  return *lib;
}

void deactivate_locked() {
  g_on.store(false, std::memory_order_relaxed);
  g_covered.store(nullptr);
  g_active.reset();  // the libraries' destructors restore the static kernels
  divert_cpu_allocations(false);
}

}  // namespace

void set_profile(const std::string& name, const ProfileOps& ops) {
  const auto fallback = parse_all(ops.fallback);
  const auto composite = parse_all(ops.composite);
  const auto generic = parse_all(ops.generic);
  const auto covered = parse_all(ops.covered);
  std::lock_guard<std::mutex> lock(g_mutex);
  deactivate_locked();
  auto active = std::make_unique<Active>();
  active->name = name;
  {
    Quiet quiet;
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    for (const QualifiedName& q : fallback) {
      library_for(*active, q.ns)
          .impl(q.name.c_str(), torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    }
    for (const QualifiedName& q : composite) {
      library_for(*active, q.ns)
          .impl(q.name.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_composite>());
    }
    for (const QualifiedName& q : generic) {
      library_for(*active, q.ns)
          .impl(q.name.c_str(), torch::CppFunction::makeFromBoxedFunction<&generic_native>());
    }
  }
  auto set = std::make_shared<Covered>();
  for (const QualifiedName& q : covered) {
    set->insert(q.op);
  }
  divert_cpu_allocations(!generic.empty() || !set->empty());
  g_covered.store(std::move(set));
  g_active = std::move(active);
  g_on.store(true, std::memory_order_relaxed);
  switched("profile: " + name);
}

void clear_profile() {
  std::lock_guard<std::mutex> lock(g_mutex);
  deactivate_locked();
  switched("profile: none");
}

std::optional<std::string> profile_name() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_active) {
    return std::nullopt;
  }
  return g_active->name;
}

bool profile_active() noexcept {
  return g_on.load(std::memory_order_relaxed);
}

bool profile_covers(const c10::OperatorName& op) noexcept {
  if (!g_on.load(std::memory_order_relaxed)) {
    return false;
  }
  const auto covered = g_covered.load();
  return covered != nullptr && covered->count(op) > 0;
}

}  // namespace openreg
