#pragma once

// Text openreg hands Kineto, made what Kineto's JSON writer can carry
// (Note [Text in Kineto's JSON]).

#include <string>
#include <string_view>

namespace openreg::trace {

std::string kineto_text(std::string_view text);

}  // namespace openreg::trace
