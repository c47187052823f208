#pragma once

// Note [Ranks agree before Gloo runs]
// Gloo trusts every rank to pass tensors of the same size: when two ranks
// disagree (one all-reduces 4 floats, the other 8, or float32 against int64),
// its transport thread throws where nothing can catch it and the process is
// terminated. So before a collective whose ranks must agree, the backend
// all-gathers a small summary of its arguments (the collective, the dtype,
// the number of tensors and elements, the first tensor's shape) on the same
// Gloo group and compares them on every rank; a disagreement raises the same
// clear error on each rank, naming what each rank passed, and nothing runs.
//
// The exchange costs one small round trip per collective (see
// benchmarks/bench_distributed.py), and it is synchronous: a group collective,
// even with async_op=True, returns once every rank of the group has called it
// (its data still moves asynchronously). OPENREG_DIST_CHECK=0 skips the
// exchange, for programs known to be consistent: then nothing waits at issue.

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <string_view>
#include <vector>

namespace openreg::distributed {

// False when OPENREG_DIST_CHECK=0.
bool agreement_checked();

// Raises unless every rank of `group` passes the same collective on tensors
// of the same dtype and shapes as `tensors` (Note [Ranks agree before Gloo
// runs]). `op` names the collective.
void check_agreement(c10d::Backend& group, std::string_view op,
                     const std::vector<at::Tensor>& tensors);

}  // namespace openreg::distributed
