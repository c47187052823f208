// gather and advanced indexing (index.Tensor: `x[idx]`, `x[mask]`), as
// Hugging Face models run them every step (BERT gathers its token type ids,
// GPT-2 indexes its logits), in their functional and out= forms.
//
// Each is the CPU's own kernel computing on host views of device memory (Note
// [Host kernels on host views] in HostKernel.h). index's result size depends
// on the values of a bool or uint8 mask, so its masks are first expanded into
// long indices on the host views, as ATen's index does, warning once for a
// uint8 mask as the CPU does; the result's sizes and strides are then those
// of the CPU's own iterator (meta_result), allocated on the device and
// filled by the CPU's index.Tensor_out.

#include "aten/native/HostKernel.h"

#include "aten/Registration.h"

#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/native/TensorAdvancedIndexingUtils.h>
#include <ATen/ops/empty_strided_ops.h>
#include <ATen/ops/gather_ops.h>
#include <ATen/ops/index_ops.h>
#include <c10/util/accumulate.h>

#include <utility>
#include <vector>

namespace openreg {
namespace {

using at::Tensor;
using native::check_same_device;
using Indices = c10::List<std::optional<Tensor>>;

// --- gather --------------------------------------------------------------------

Tensor gather(const Tensor& self, int64_t dim, const Tensor& index, bool sparse_grad) {
  check_same_device(self, index);
  Tensor out = native::empty(index.sizes(), self.options());
  Tensor host = host_view(out);
  InternalScope internal;  // Note [The backend's own dispatcher calls]
  at::_ops::gather_out::call(host_view(self), dim, host_view(index), sparse_grad, host);
  return out;
}

Tensor& gather_out(const Tensor& self, int64_t dim, const Tensor& index, bool sparse_grad,
                   Tensor& out) {
  check_same_device(self, index);
  check_same_device(self, out);
  native::resize_output(out, index.sizes());
  Tensor host = host_view(out);
  InternalScope internal;
  at::_ops::gather_out::call(host_view(self), dim, host_view(index), sparse_grad, host);
  return out;
}

// --- index.Tensor --------------------------------------------------------------

// The indices as the CPU kernel takes them: host views, bool and uint8 masks
// expanded into long indices (with ATen's checks and its uint8 warning).
// Indices live on self's device or on the CPU, as on other accelerators.
Indices host_indices(const Tensor& self, const Indices& indices) {
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()),
                    "too many indices for tensor of dimension ", self.dim(), " (got ",
                    indices.size(), ")");
  at::native::checkIndexTensorTypes(indices, /*allow_int=*/true);
  Indices views;
  views.reserve(indices.size());
  for (const std::optional<Tensor>& index : indices) {
    if (index.has_value() && index->defined()) {
      TORCH_CHECK_INDEX(index->device() == self.device() || index->is_cpu(),
                        "indices should be either on ", c10::kCPU,
                        " or on the same device as the indexed tensor (", self.device(), ")");
      views.push_back(host_view(*index));
    } else {
      views.push_back(std::nullopt);
    }
  }
  const Tensor host_self = host_view(self);
  std::vector<Tensor> expanded = at::native::expandTensors(host_self, views);
  Indices result;
  result.reserve(expanded.size());
  for (const Tensor& t : expanded) {
    result.push_back(t.defined() ? std::optional<Tensor>(t) : std::nullopt);
  }
  return result;
}

// The CPU's result for `self[indices]` as a meta tensor (its sizes and
// strides). ATen's index builds a TensorIterator over `self` restrided (each
// indexed dim replaced by the broadcast index shape, stride 0) and the index
// tensors reshaped to match, and the result takes the layout that iterator
// gives it (it follows the input's strides). The same iterator is built here
// over host views, with a meta output: the CPU's own layout rules, run in
// C++ (index's meta kernel is Python, and lays some results out otherwise).
// `indices` are expanded (no masks); errors in them are left to the CPU
// kernel, except the broadcast's, raised here with its message.
Tensor meta_result(const Tensor& host_self, const Indices& indices) {
  std::vector<Tensor> list;
  for (const std::optional<Tensor>& index : indices) {
    list.push_back(index.has_value() ? *index : Tensor());
  }
  try {
    list = at::expand_outplace(list);
  } catch (std::exception&) {
    TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together ",
                      "with shapes ", at::native::shapes_as_str(list));
  }
  while (list.size() < static_cast<size_t>(host_self.dim())) {
    list.emplace_back();
  }
  Tensor src = host_self;
  if (!at::native::hasContiguousSubspace(list)) {
    std::tie(src, list) = at::native::transposeToFront(src, list);
  }
  // The layout of ATen's AdvancedIndex: dims before the indexed ones, the
  // broadcast index shape, dims after.
  int64_t before = 0;
  int64_t after = 0;
  int64_t indexed = 0;
  c10::IntArrayRef replacement;
  bool empty_dim_indexed = false;
  for (size_t d = 0; d < list.size(); ++d) {
    if (!list[d].defined()) {
      (indexed == 0 ? before : after) += 1;
    } else {
      ++indexed;
      replacement = list[d].sizes();
      empty_dim_indexed |= src.size(static_cast<int64_t>(d)) == 0;
    }
  }
  // No index is in bounds for a dimension of size 0: unless the indices are
  // empty too, this is the CPU's IndexError (raised before its iterator would
  // restride the empty dimension).
  TORCH_CHECK_INDEX(!empty_dim_indexed || c10::multiply_integers(replacement) == 0,
                    "index is out of bounds for dimension with size 0");
  c10::DimVector sizes(src.sizes());
  c10::DimVector strides(src.strides());
  sizes.erase(sizes.begin() + before, sizes.begin() + before + indexed);
  strides.erase(strides.begin() + before, strides.begin() + before + indexed);
  sizes.insert(sizes.begin() + before, replacement.begin(), replacement.end());
  strides.insert(strides.begin() + before, replacement.size(), 0);
  const Tensor output;  // undefined: the iterator allocates it (on meta)
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(false)
      .check_all_same_dtype(false)
      .check_all_same_device(false)
      .declare_static_dtype_and_device(host_self.scalar_type(), c10::Device(c10::kMeta))
      .add_output(output)
      .add_owned_const_input(src.as_strided(sizes, strides));
  for (const Tensor& index : list) {
    if (index.defined()) {
      c10::DimVector shape(before, 1);
      shape.append(index.sizes().begin(), index.sizes().end());
      shape.append(after, 1);
      config.add_owned_const_input(index.reshape(shape));
    }
  }
  return config.build().output();
}

// The expanded host indices and the meta result, computed as the backend's
// own calls (Note [The backend's own dispatcher calls]).
std::pair<Indices, Tensor> plan(const Tensor& self, const Indices& indices) {
  InternalScope internal;
  Indices host = host_indices(self, indices);
  Tensor shape = meta_result(host_view(self), host);
  return {std::move(host), std::move(shape)};
}

void index_into(const Tensor& self, const Indices& host, const Tensor& out) {
  Tensor host_out = host_view(out);
  InternalScope internal;
  at::_ops::index_Tensor_out::call(host_view(self), host, host_out);
}

Tensor index(const Tensor& self, const Indices& indices) {
  auto [host, shape] = plan(self, indices);
  Tensor out = at::_ops::empty_strided::call(
      c10::fromIntArrayRefSlow(shape.sizes()), c10::fromIntArrayRefSlow(shape.strides()),
      self.scalar_type(), std::nullopt, self.device(), std::nullopt);
  index_into(self, host, out);
  return out;
}

Tensor& index_out(const Tensor& self, const Indices& indices, Tensor& out) {
  check_same_device(self, out);
  auto [host, shape] = plan(self, indices);
  native::resize_output(out, shape.sizes());
  index_into(self, host, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "gather", gather);
  OPENREG_IMPL(m, "gather.out", gather_out);
  OPENREG_IMPL(m, "index.Tensor", index);
  OPENREG_IMPL(m, "index.Tensor_out", index_out);
}

}  // namespace openreg
