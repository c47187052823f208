#pragma once

// Interned strings: events carry 32-bit ids instead of text. Interning takes
// a lock, so the hot paths cache ids (per operator, per code location) and
// intern only the first time they see a string. Id 0 is the empty string.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace openreg::trace {

uint32_t intern(std::string_view text);

// The strings interned so far with ids from `first` on (ids only grow, so a
// reader that keeps what it got asks only for the new ones).
std::vector<std::string> interned_strings(size_t first = 0);

}  // namespace openreg::trace
