#pragma once

// The coverage profiles' part of the lab's table of hooks (Note [The lab's
// seam] in runtime/Seam.h): what the template asks of a profile
// (Note [Profiles]).

#include "runtime/Seam.h"

namespace openreg {

// Fills kernel_taken, run_generic and profile_name of `table`.
void fill_coverage_hooks(seam::Hooks& table);

}  // namespace openreg
