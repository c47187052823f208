// cat and index_select: operators that only move bytes, so they run natively
// for every dtype. The loops copy blocks of memory (memcpy, or typed element
// copies for one-element blocks) between contiguous layouts; inputs in other
// layouts or dtypes are first converted on the device by the copy path.
//
// cat follows CPU's rules: type promotion across inputs (out= may be any
// dtype they can be cast to), the legacy rule that skips 1-D empty tensors,
// and an output in the inputs' common memory format (channels-last inputs
// give a channels-last result).
//
// index_select takes an int32 or int64 index on the same device; like the
// CPU fallback (Note [Fallback device rules]), a 0-dim index may also live on
// the CPU.

#include "aten/native/Common.h"

#include "aten/Registration.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/TensorShape.h>
#include <ATen/native/TypeProperties.h>

#include <cstring>
#include <type_traits>
#include <vector>

namespace openreg {
namespace {

using native::empty;
using native::grain_rows;
using native::resize_output;

[[noreturn]] void device_mismatch(c10::Device a, c10::Device b) {
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at least two devices, ", a,
              " and ", b, "!");
}

// Tensors with the conjugate or negative bit set are materialized first.
at::Tensor resolved(const at::Tensor& t) {
  if (t.is_conj() || t.is_neg()) {
    return t.resolve_conj().resolve_neg();
  }
  return t;
}

// --- block copies --------------------------------------------------------------

// Copies `count` blocks of `block` bytes: block k goes from src + src_off(k)
// to dst + dst_off(k) (offsets in bytes).
template <class SrcOff, class DstOff>
void copy_blocks(const char* src, char* dst, int64_t count, int64_t block, const SrcOff& src_off,
                 const DstOff& dst_off) {
  const int64_t grain = grain_rows(block);
  auto run = [&](auto elem) {
    using E = decltype(elem);
    at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        if constexpr (std::is_same_v<E, char>) {
          std::memcpy(dst + dst_off(k), src + src_off(k), block);
        } else {
          E v;
          std::memcpy(&v, src + src_off(k), sizeof(E));
          std::memcpy(dst + dst_off(k), &v, sizeof(E));
        }
      }
    });
  };
  switch (block) {  // one-element blocks: a fixed-size copy the compiler inlines
    case 1:
      run(uint8_t{});
      break;
    case 2:
      run(uint16_t{});
      break;
    case 4:
      run(uint32_t{});
      break;
    case 8:
      run(uint64_t{});
      break;
    default:
      run(char{});
  }
}

// --- cat ---------------------------------------------------------------------

c10::MemoryFormat cat_memory_format(const at::MaterializedITensorListRef& inputs) {
  std::optional<c10::MemoryFormat> format;
  for (const at::Tensor& t : inputs) {
    const auto f = t.suggest_memory_format();
    if (f == c10::MemoryFormat::Contiguous) {
      return f;
    }
    if (format.has_value() && *format != f) {
      return c10::MemoryFormat::Contiguous;
    }
    format = f;
  }
  return format.value_or(c10::MemoryFormat::Contiguous);
}

// The order in which the dimensions of a tensor in `format` are laid out in
// memory, outermost first.
std::vector<int64_t> memory_order(int64_t ndim, c10::MemoryFormat format) {
  std::vector<int64_t> order;
  if (format == c10::MemoryFormat::ChannelsLast || format == c10::MemoryFormat::ChannelsLast3d) {
    order.push_back(0);
    for (int64_t d = 2; d < ndim; ++d) {
      order.push_back(d);
    }
    order.push_back(1);
  } else {
    for (int64_t d = 0; d < ndim; ++d) {
      order.push_back(d);
    }
  }
  return order;
}

// Copies the inputs, dense in `format` and of out's dtype, into `out` (also
// dense in `format`) one after the other along `dim`.
void cat_kernel(const std::vector<at::Tensor>& inputs, int64_t dim, c10::MemoryFormat format,
                const at::Tensor& out) {
  if (inputs.empty() || out.numel() == 0) {
    return;  // nothing to copy (`dim` may not even be valid when every input was skipped)
  }
  const std::vector<int64_t> order = memory_order(out.dim(), format);
  // In memory order, `dim` splits every tensor into outer blocks of
  // size(dim) * inner elements.
  int64_t outer = 1;
  int64_t inner = 1;
  bool before = true;
  for (int64_t d : order) {
    if (d == dim) {
      before = false;
    } else if (before) {
      outer *= out.size(d);
    } else {
      inner *= out.size(d);
    }
  }
  const int64_t elem = out.element_size();
  const int64_t out_block = out.size(dim) * inner * elem;
  char* dst = static_cast<char*>(out.mutable_data_ptr());
  int64_t offset = 0;  // bytes into each output block
  for (const at::Tensor& t : inputs) {
    const int64_t block = t.size(dim) * inner * elem;
    if (block > 0) {
      const char* src = static_cast<const char*>(t.const_data_ptr());
      copy_blocks(
          src, dst + offset, outer, block, [&](int64_t k) { return k * block; },
          [&](int64_t k) { return k * out_block; });
    }
    offset += block;
  }
}

// Returns the result: a new tensor, or *out_arg for out=.
at::Tensor cat_impl(const at::ITensorListRef& tensors, int64_t dim, at::Tensor* out_arg) {
  const auto inputs = tensors.materialize();
  TORCH_CHECK(!inputs.empty(), "torch.cat(): expected a non-empty list of Tensors");
  at::native::check_cat_no_zero_dim(inputs);
  dim = at::legacy_cat_wrap_dim(dim, inputs);

  const c10::Device device = out_arg != nullptr ? out_arg->device() : inputs[0].get().device();
  for (const at::Tensor& t : inputs) {
    if (t.device() != device) {
      device_mismatch(device, t.device());
    }
  }
  const c10::MemoryFormat format = cat_memory_format(inputs);
  c10::ScalarType dtype = at::native::result_type(tensors);
  if (out_arg != nullptr) {
    TORCH_CHECK_TYPE(c10::canCast(dtype, out_arg->scalar_type()),
                     "torch.cat(): input types can't be cast to the desired output type ",
                     out_arg->scalar_type());
    dtype = out_arg->scalar_type();
  }

  // The output shape: that of the first tensor not skipped, with the sizes
  // along `dim` added up; [0] when every tensor is skipped.
  int64_t valid = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!at::native::cat_should_skip_tensor(inputs[i])) {
      valid = static_cast<int64_t>(i);
      break;
    }
  }
  std::vector<int64_t> sizes{0};
  std::vector<at::Tensor> parts;  // the non-skipped inputs, dense in `format`, of `dtype`
  if (valid >= 0) {
    const at::Tensor& first = inputs[valid];
    int64_t size_at_dim = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& t = inputs[i];
      if (at::native::cat_should_skip_tensor(t)) {
        continue;
      }
      at::native::check_cat_shape_except_dim(first, t, dim, static_cast<int64_t>(i));
      size_at_dim += t.size(dim);
      at::Tensor part = resolved(t);
      if (part.scalar_type() != dtype) {
        part = part.to(dtype);
      }
      // Not .to(..., format): for an expanded (stride 0) tensor it decides the
      // layout already matches and returns the tensor itself, not dense memory.
      part = part.contiguous(format);
      parts.push_back(std::move(part));
    }
    sizes = first.sizes().vec();
    sizes[dim] = size_at_dim;
  }

  at::Tensor result;
  if (out_arg == nullptr) {
    result = empty(sizes, inputs[0].get().options().dtype(dtype).memory_format(format));
  } else {
    at::Tensor& out = *out_arg;
    if (resize_output(out, sizes)) {
      out.unsafeGetTensorImpl()->empty_tensor_restride(format);
    }
    if (valid >= 0) {
      at::assert_no_internal_overlap(out);
      for (const at::Tensor& t : inputs) {
        at::assert_no_overlap(out, t);
      }
    }
    result = out;
  }
  if (out_arg != nullptr &&
      (!result.is_contiguous(format) || result.is_conj() || result.is_neg())) {
    // An out= tensor in another layout: fill a dense one, then copy.
    at::Tensor tmp = empty(sizes, result.options().memory_format(format));
    cat_kernel(parts, dim, format, tmp);
    result.copy_(tmp);
    return result;
  }
  cat_kernel(parts, dim, format, result);
  return result;
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  return cat_impl(tensors, dim, nullptr);
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  cat_impl(tensors, dim, &out);
  return out;
}

// --- index_select ----------------------------------------------------------------

template <typename I>
void check_indices(const I* idx, int64_t numel, int64_t size) {
  for (int64_t i = 0; i < numel; ++i) {
    TORCH_CHECK_INDEX(idx[i] >= 0 && idx[i] < size, "index out of range in self");
  }
}

// out (contiguous) = self (contiguous) indexed along dim by the validated
// indices idx[0..numel).
template <typename I>
void index_select_kernel(const at::Tensor& self, int64_t dim, const I* idx, int64_t numel,
                         const at::Tensor& out) {
  int64_t outer = 1;
  int64_t inner = 1;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d < dim) {
      outer *= self.size(d);
    } else if (d > dim) {
      inner *= self.size(d);
    }
  }
  const int64_t n = self.dim() == 0 ? 1 : self.size(dim);
  const int64_t block = inner * self.element_size();
  if (block == 0 || outer == 0 || numel == 0) {
    return;
  }
  copy_blocks(
      static_cast<const char*>(self.const_data_ptr()), static_cast<char*>(out.mutable_data_ptr()),
      outer * numel, block,
      [&](int64_t k) { return ((k / numel) * n + static_cast<int64_t>(idx[k % numel])) * block; },
      [&](int64_t k) { return k * block; });
}

// Returns the result: a new tensor, or *out_arg for out=.
at::Tensor index_select_impl(const at::Tensor& self_arg, int64_t dim, const at::Tensor& index,
                             at::Tensor* out_arg) {
  dim = c10::maybe_wrap_dim(dim, self_arg.dim());
  const int64_t numel = index.numel();
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(!(self_arg.dim() == 0 && numel != 1),
              "index_select(): Index to scalar can have only 1 value, got ", numel, " value(s)");
  TORCH_CHECK(index.scalar_type() == c10::kLong || index.scalar_type() == c10::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  if (index.device() != self_arg.device() && !(index.is_cpu() && index.dim() == 0)) {
    device_mismatch(self_arg.device(), index.device());
  }
  std::vector<int64_t> sizes = self_arg.sizes().vec();
  if (self_arg.dim() > 0) {
    sizes[dim] = numel;
  }
  at::Tensor result;
  if (out_arg == nullptr) {
    result = empty(sizes, self_arg.options());
  } else {
    at::Tensor& out = *out_arg;
    if (out.device() != self_arg.device()) {
      device_mismatch(self_arg.device(), out.device());
    }
    TORCH_CHECK(self_arg.scalar_type() == out.scalar_type(),
                "index_select(): self and result must have the same scalar type");
    at::assert_no_internal_overlap(out);
    at::assert_no_overlap(out, self_arg);
    at::assert_no_overlap(out, index);
    resize_output(out, sizes);
    result = out.is_contiguous() && !out.is_conj() && !out.is_neg()
                 ? out
                 : empty(sizes, self_arg.options());
  }

  const int64_t size = self_arg.dim() == 0 ? 1 : self_arg.size(dim);
  if (self_arg.dim() > 1 && self_arg.numel() == 0 && numel > 0) {
    TORCH_CHECK(size > 0, "index_select(): self indexing axis dim should be positive");
  }
  const at::Tensor idx = index.contiguous();
  const at::Tensor self = resolved(self_arg).contiguous();
  if (idx.scalar_type() == c10::kLong) {
    const int64_t* ip = idx.const_data_ptr<int64_t>();
    check_indices(ip, numel, size);
    index_select_kernel(self, dim, ip, numel, result);
  } else {
    const int32_t* ip = idx.const_data_ptr<int32_t>();
    check_indices(ip, numel, size);
    index_select_kernel(self, dim, ip, numel, result);
  }
  if (out_arg != nullptr && !result.is_same(*out_arg)) {
    out_arg->copy_(result);
    return *out_arg;
  }
  return result;
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  return index_select_impl(self, dim, index, nullptr);
}

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                             at::Tensor& out) {
  index_select_impl(self, dim, index, &out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "cat", cat);
  OPENREG_IMPL(m, "cat.out", cat_out);
  OPENREG_IMPL(m, "index_select", index_select);
  OPENREG_IMPL(m, "index_select.out", index_select_out);
}

}  // namespace openreg
