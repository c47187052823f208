#pragma once

// Note [Profiles]
// A profile decides which operators run natively on openreg, to emulate the
// operator coverage of another backend (openreg_lab/dispatch/profiles.py derives the
// lists, e.g. from torch's native_functions.yaml). With no profile active,
// nothing here costs anything: the statically registered kernels are the
// dispatcher's table as usual and no call checks anything.
//
// Activating a profile registers kernels on torch::Library objects for
// PrivateUse1 that live exactly as long as the profile:
//   - for each hand-written operator the profile lacks, what the dispatcher
//     would pick if openreg had no kernel for it (the newest registration for
//     a key shadows the static kernel): its composite kernel when it has one,
//     else the boxed CPU fallback. The composite kernel is reached by
//     redispatching to PrivateUse3, a backend key no one registers kernels for
//     here, whose dispatch table entry is therefore the operator's composite
//     (profiles.py checks that it has no kernel of its own);
//   - the generic native kernel (Note [Generic native path]) for each operator
//     the profile has but openreg has no hand-written kernel for (if the CPU
//     has a kernel for it, and it is not composite implicit: those decompose
//     above the backend key whatever the profile says).
// Deactivating destroys the libraries, and the dispatcher restores the static
// kernels exactly: the undo is the dispatcher's own deregistration.
//
// A hand-written kernel that hands a call to openreg::fallback (a dtype it was
// not written for) runs the generic native path instead when the profile
// covers the operator: under a profile, an operator it covers never falls
// back. cpu_fallback asks through the lab's seam (run_generic in
// CoverageHooks.cpp; Note [The lab's seam] in runtime/Seam.h), and so do the
// convolution hooks and the fused attention choice (kernel_taken): profiles
// are the lab's, the template has no code of theirs; `profile_covers` is one
// relaxed atomic load when no profile is active.
//
// Never switched: the operators every backend must provide (the `minimal`
// family; the fallback itself needs them), the convolution hooks (the only way
// convolution reaches a backend; their kernels ask `profile_covers` themselves
// and compute through the copy path when the profile lacks them: Note
// [openreg's device DNN library] in Convolution.cpp), the fallback routes (ViaFallback.cpp:
// their kernel is cpu_fallback, which takes the generic path for them when the
// profile covers them) and PrivateUse1 kernels registered outside openreg.
// Profiles are process-wide, like the fallback policy, and change only through
// set_profile / clear_profile: the one place where a switch can be recorded.

#include <ATen/core/operator_name.h>

#include <optional>
#include <string>
#include <vector>

namespace openreg {

// What a profile changes, as qualified operator names ("aten::add.Tensor").
struct ProfileOps {
  std::vector<std::string> fallback;   // hand-written operators the profile lacks, no composite
  std::vector<std::string> composite;  // hand-written operators it lacks, with a composite
  std::vector<std::string> generic;    // operators it has, without a hand-written kernel
  std::vector<std::string> covered;    // every operator it runs natively
};

// Replaces the active profile (if any) by `ops`, under `name`. Throws a
// ValueError naming an operator that is not registered, before changing
// anything.
void set_profile(const std::string& name, const ProfileOps& ops);

// Back to openreg's own kernels.
void clear_profile();

// Name of the active profile, or nullopt.
std::optional<std::string> profile_name();

// Whether the active profile runs `op` natively (false when none is active).
bool profile_covers(const c10::OperatorName& op) noexcept;

// Whether a profile is active: one relaxed atomic load.
bool profile_active() noexcept;

}  // namespace openreg
