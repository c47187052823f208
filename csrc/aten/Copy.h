#pragma once

// The copy path (Copy.cpp). Every transfer into, out of or between openreg
// devices goes through `_copy_from`; this counter lets other code tell whether
// a call it made moved any data (autocast uses it to tell a cache hit from a
// fresh cast).

#include <cstdint>

namespace openreg {

// Number of `_copy_from` calls made so far on the calling thread.
uint64_t copies_on_this_thread() noexcept;

}  // namespace openreg
