#pragma once

// The recorder's part of the lab's table of hooks (Note [The lab's seam] in
// runtime/Seam.h): kernels, fallback, copies and casts, memory.

#include "runtime/Seam.h"

namespace openreg::trace {

// Fills the recorder's hooks of `table`, and its gates (the recorder's own
// enabled() and kernel_events() flags).
void fill_hooks(seam::Hooks& table);

}  // namespace openreg::trace
