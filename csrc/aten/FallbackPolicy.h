#pragma once

// What happens when an operator has no openreg kernel: run it on the CPU
// silently ("allow"), run it and warn once per operator ("warn"), or refuse
// before any data moves ("error"). The initial policy comes from
// OPENREG_FALLBACK (default "allow").

#include <ATen/core/operator_name.h>

#include <string>

namespace openreg {

enum class FallbackPolicy { Allow, Warn, Error };

FallbackPolicy fallback_policy();
void set_fallback_policy(FallbackPolicy policy);

// Parses "allow" / "warn" / "error"; throws a ValueError naming the choices.
FallbackPolicy parse_fallback_policy(const std::string& name);
std::string to_string(FallbackPolicy policy);

// Applies the policy to one call of `op`: returns when the fallback may run,
// warns (once per operator) under "warn", throws NotImplementedError under
// "error".
void check_fallback_allowed(const c10::OperatorName& op);

}  // namespace openreg
