#include "aten/fallback/FallbackPolicy.h"

#include "runtime/Seam.h"  // Note [The lab's seam]

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_set>

namespace openreg {
namespace {

FallbackPolicy initial_policy() {
  const char* env = std::getenv("OPENREG_FALLBACK");
  if (env == nullptr || *env == '\0') {
    return FallbackPolicy::Allow;
  }
  try {
    return parse_fallback_policy(env);
  } catch (const c10::Error& e) {
    TORCH_CHECK_VALUE(false, "OPENREG_FALLBACK='", env,
                      "' is not a fallback policy: use allow, warn or error");
  }
}

std::atomic<FallbackPolicy>& policy_slot() {
  static std::atomic<FallbackPolicy> slot{initial_policy()};
  return slot;
}

// Operators already warned about under the current "warn" policy.
struct Warned {
  std::mutex mutex;
  std::unordered_set<std::string> ops;
};

Warned& warned() {
  static Warned* w = new Warned();
  return *w;
}

thread_local bool tls_exempt = false;  // Note [Printing is exempt from the fallback policy]

}  // namespace

FallbackPolicy fallback_policy() {
  return policy_slot().load(std::memory_order_relaxed);
}

void set_fallback_policy(FallbackPolicy policy) {
  {
    // Each switch to "warn" warns afresh, once per operator.
    std::lock_guard<std::mutex> lock(warned().mutex);
    warned().ops.clear();
  }
  policy_slot().store(policy, std::memory_order_relaxed);
}

FallbackPolicy parse_fallback_policy(const std::string& name) {
  if (name == "allow") {
    return FallbackPolicy::Allow;
  }
  if (name == "warn") {
    return FallbackPolicy::Warn;
  }
  if (name == "error") {
    return FallbackPolicy::Error;
  }
  TORCH_CHECK_VALUE(false, "unknown fallback policy '", name,
                    "': choose 'allow', 'warn' or 'error'");
}

std::string to_string(FallbackPolicy policy) {
  switch (policy) {
    case FallbackPolicy::Allow:
      return "allow";
    case FallbackPolicy::Warn:
      return "warn";
    case FallbackPolicy::Error:
      return "error";
  }
  return "allow";
}

bool set_policy_exempt(bool exempt) {
  const bool previous = tls_exempt;
  tls_exempt = exempt;
  return previous;
}

void check_fallback_allowed(const c10::OperatorName& op, const std::string& subject) {
  const FallbackPolicy policy = fallback_policy();
  if (policy == FallbackPolicy::Allow || tls_exempt) {
    return;
  }
  const std::string name = c10::toString(op);
  const std::string& what = subject.empty() ? name : subject;
  // Under the lab's backend profile the kernel may be openreg's, switched off
  // by the profile (the lab's Note [Profiles]): say where it is missing.
  const seam::Hooks* lab = seam::hooks();
  const std::string profile = lab != nullptr ? lab->profile_name() : "";
  const std::string where = profile.empty() ? "" : " in the backend profile '" + profile + "'";
  TORCH_CHECK_NOT_IMPLEMENTED(
      policy != FallbackPolicy::Error, what, " has no openreg kernel", where,
      " and the fallback policy is 'error', so it was not run on the CPU. Allow it with "
      "openreg_lab.set_fallback_policy('allow') or 'warn', inside `with "
      "openreg_lab.fallback_policy('allow'):`, or with OPENREG_FALLBACK=allow.");
  std::lock_guard<std::mutex> lock(warned().mutex);
  if (warned().ops.insert(name).second) {
    TORCH_WARN(what, " has no openreg kernel", where,
               ": it ran on the CPU, copying its tensors to the host and back (this warning is "
               "shown once per operator).");
  }
}

}  // namespace openreg
