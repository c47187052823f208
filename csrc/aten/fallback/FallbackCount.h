#pragma once

// How many calls ran through the boxed CPU fallback (Fallback.cpp) on the
// calling thread. Tests and tools use it to tell whether a piece of code fell
// back at all, the way copies_on_this_thread() (Copy.h) tells whether it moved
// data. One thread-local increment per fallback call; nothing when native.

#include <cstdint>

namespace openreg {

void count_fallback() noexcept;

// Number of boxed CPU fallback calls made so far on the calling thread.
uint64_t fallbacks_on_this_thread() noexcept;

}  // namespace openreg
