#pragma once

// What Gloo cannot run, as one-line reasons: the backend (Backend.cpp) raises
// them before it calls Gloo, in this order: the reduce op, the tensor lists,
// the dtypes, then density (refusal_of). Each reason names the problem and
// the fix; "" means the call is fine. A vendor whose collective library runs
// other dtypes or reduce ops edits this file.

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <initializer_list>
#include <string>
#include <vector>

namespace openreg::distributed {

struct Refusal {
  std::string why;         // "" when the call is fine
  bool not_dense = false;  // why: a tensor is not dense
};

// A reduce op Gloo cannot apply to `dtype` (PREMUL_SUM, bitwise ops on
// floating-point tensors, AVG on integers), or one that is not a reduce op.
std::string reduce_refusal(const c10d::ReduceOp& op, at::ScalarType dtype,
                           const std::vector<at::Tensor>& outputs);

// A list of `n` tensors per rank unless each matches `like`'s elements and
// dtype ("the output list holds 3 tensors for a group of 2 ranks; ...").
std::string list_refusal(const char* what, const std::vector<at::Tensor>& list, int n,
                         const at::Tensor& like);

// `first` if it is a reason, else a dtype Gloo does not move, else a tensor
// that is not dense (NCCL's rule: a collective takes contiguous tensors).
Refusal refusal_of(std::string first, std::initializer_list<const std::vector<at::Tensor>*> lists);

// The first defined tensor's dtype, or Undefined.
at::ScalarType dtype_of(const std::vector<at::Tensor>& tensors);

}  // namespace openreg::distributed
