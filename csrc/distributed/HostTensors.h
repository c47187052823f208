#pragma once

// Note [Collectives on host views]
// Gloo moves the bytes of CPU tensors. openreg's device memory is host memory
// (Note [Device memory is host memory]), so the backend hands Gloo a host
// view of each openreg tensor: a CPU tensor over the same bytes. Gloo reads
// the inputs and writes the outputs in place; nothing is staged or copied
// back. CPU tensors are passed through unchanged, so the same backend also
// serves a group's CPU collectives.
//
// A vendor with real device memory replaces this file: its collective
// library takes device pointers, and host_views becomes a no-op.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string_view>
#include <vector>

namespace openreg::distributed {

// The one device every tensor of a collective is on; raises a clear error
// naming both devices if two differ, or naming the device if it is neither
// openreg nor CPU. `op` names the collective in the message.
c10::Device common_device(std::string_view op,
                          std::initializer_list<const std::vector<at::Tensor>*> lists);

// Host views of `tensors` (Note [Device memory is host memory]).
std::vector<at::Tensor> host_views(const std::vector<at::Tensor>& tensors);
std::vector<std::vector<at::Tensor>> host_views(const std::vector<std::vector<at::Tensor>>& lists);

// Total bytes of `tensors`.
int64_t nbytes(const std::vector<at::Tensor>& tensors);

// The tensors of `lists`, in order.
std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists);

}  // namespace openreg::distributed
