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

// Every string interned so far, indexed by id.
std::vector<std::string> interned_strings();

}  // namespace openreg::trace
