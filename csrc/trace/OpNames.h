#pragma once

// Interned "aten::add.Tensor"-style names of operators, cached per schema so
// the hot path interns each operator once per thread.

#include "trace/Intern.h"

#include <ATen/core/function_schema.h>

#include <cstdint>

namespace openreg::trace {

uint32_t op_name_id(const c10::FunctionSchema& schema);

}  // namespace openreg::trace
