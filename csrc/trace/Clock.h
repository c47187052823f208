#pragma once

// The recorder's one clock: the device's (runtime/Clock.h), monotonic
// nanoseconds. Every event's start_ns and dur_ns come from it, and so do the
// times the template hands to the lab's hooks (Note [The lab's seam]).

#include "runtime/Clock.h"

namespace openreg::trace {

using ::openreg::now_ns;

}  // namespace openreg::trace
