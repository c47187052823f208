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
// "error". `subject` names what the user called when that is not `op`
// itself (convolution reaches openreg as convolution_overrideable); empty:
// `op`'s name.
void check_fallback_allowed(const c10::OperatorName& op, const std::string& subject = "");

// Note [Printing is exempt from the fallback policy]
// Printing an openreg tensor runs PyTorch's formatter (torch/_tensor_str.py),
// which computes on the device: isfinite, ne, bitwise_and, masked_select,
// abs, min, max, ceil... Several of them fall back, so under "error" a plain
// print(t) raised, and under "warn" it warned about operators the user never
// called. The policy is there to find the fallbacks of the user's computation,
// not of a diagnostic, so the calls made while formatting a tensor are exempt
// from it: they run (and are traced and counted) as under "allow". The
// exemption is per thread and set by openreg_lab.dispatch.fallback around the
// formatter; nothing is copied differently. (The alternative, formatting a
// CPU copy, would copy the whole tensor where the formatter only reads its
// edges, and would hide from a trace what printing costs on the device.)

// Sets whether this thread's fallback calls are exempt from the policy;
// returns the previous setting, to restore.
bool set_policy_exempt(bool exempt);

}  // namespace openreg
