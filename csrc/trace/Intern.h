#pragma once

// Interned strings: events carry 32-bit ids instead of text. Interning takes
// a lock, so the hot paths cache ids (per operator, per code location) and
// intern only the first time they see a string. Id 0 is the empty string.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace openreg::trace {

uint32_t intern(std::string_view text);

// The strings of ids [start, stop), stop capped at interned_count(). Strings
// are never removed, so a reader can fetch each one once and keep it.
std::vector<std::string> interned_strings(size_t start, size_t stop);
size_t interned_count();

}  // namespace openreg::trace
