#include "coverage/CoverageHooks.h"

#include "coverage/GenericNative.h"
#include "coverage/Profile.h"

#include <optional>
#include <string>

namespace openreg {
namespace {

// A profile is active and does not run `op` natively: openreg's kernel of
// the operator is switched off (the convolution hooks, fused attention).
bool kernel_taken(const c10::OperatorName& op) {
  return profile_active() && !profile_covers(op);
}

// The fallback's question: does the active profile run `op` on the generic
// native path instead (Note [Generic native path])? Then it ran there.
bool run_generic(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (!profile_covers(op.operator_name())) {
    return false;
  }
  generic_native(op, stack);
  return true;
}

std::string active_profile_name() {
  return profile_name().value_or("");
}

}  // namespace

void fill_coverage_hooks(seam::Hooks& table) {
  table.kernel_taken = &kernel_taken;
  table.run_generic = &run_generic;
  table.profile_name = &active_profile_name;
}

}  // namespace openreg
