#pragma once

// Note [Backend metadata]
// A real accelerator often stores a tensor in a device-side format of its
// own (channels blocked by 4 for the convolution unit, 16x16 tiles for the
// matrix unit, ...) and must know it for every kernel and every copy. PyTorch
// gives a backend one slot per tensor for such facts, c10::BackendMeta in the
// TensorImpl, and one hook to carry it through torch.save / torch.load
// (torch::jit::TensorBackendMetaRegistry). openreg keeps a format tag there,
// as the template for a vendor whose tensors carry layout information; the
// simulated kernels compute on ordinary strided memory and do not read it.
//
// What keeps the tag and what drops it, as for any BackendMeta:
//   - it belongs to the TensorImpl, not to the storage: detach() and other
//     shallow copies keep it (BackendMeta::clone), views and the results of
//     operators are new TensorImpls and start as "plain";
//   - torch.save records it in the tensor's serialized metadata, which is a
//     map from string to bool: the key carries the value
//     ("openreg.format.nc4hw4": true); "plain" writes nothing, so checkpoints
//     of untagged tensors are byte-for-byte what they were;
//   - torch.load onto openreg restores it; loading with map_location="cpu"
//     ignores it (a CPU tensor has no openreg format); a key naming a format
//     this build does not know raises instead of loading the wrong layout.
// Identity of the allocation (its address, an id) is deliberately not saved:
// a loaded tensor is a new allocation, so it would describe nothing.

#include <ATen/core/Tensor.h>

#include <string>
#include <string_view>
#include <vector>

namespace openreg {

// The format tags openreg knows, "plain" (the default) first.
const std::vector<std::string>& backend_formats();

// The format tag of an openreg tensor ("plain" when none was set).
std::string backend_format(const at::Tensor& t);

// Tags an openreg tensor; "plain" clears the tag. Raises for a tensor not on
// openreg and for an unknown format, naming the known ones.
void set_backend_format(const at::Tensor& t, std::string_view format);

}  // namespace openreg
