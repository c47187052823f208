#pragma once

// Note [Host kernels on host views]
// Some native kernels are not written here: the operator's own CPU kernel
// computes on host_view()s of the device tensors (Note [Device memory is host
// memory]), as the host BLAS does for the matrix products (Note [openreg's
// device BLAS] in LinearAlgebra.cpp). The kernel reads and writes device
// memory in place: results are allocated on the device first, with the sizes,
// strides and dtype the CPU gives them (ATen's dim checks raise ATen's errors),
// and the CPU's out= kernel checks the arguments (with the CPU's messages) and
// writes into their host views. An out= argument of the wrong size is resized
// on the device, never through its host view, whose storage cannot grow; and,
// as the CPU checks a call before it resizes (and warns), only once the CPU's
// kernel has checked it and computed into a host temporary. The CPU calls are
// the backend's own (Note [The backend's own dispatcher calls]): the trace
// records the openreg op as native, and its cost as that op's time. Where the
// CPU has no out= kernel for a call (a functional kernel only, or arguments
// the out= path does not take), its functional kernel runs on the host views
// and each result is moved into device memory allocated for it with the same
// sizes and strides (to_device_memory): the staging step of Note [openreg's
// device DNN library] in Convolution.cpp, inside the op, never a copy event.

#include "aten/HostView.h"
#include "aten/KernelScopes.h"  // Note [The lab's seam]
#include "aten/native/Common.h"

#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided_ops.h>
#include <c10/util/DimVector.h>

#include <bitset>

namespace openreg::native {

inline void check_same_device(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              a.device(), " and ", b.device(), "!");
}

// A host result of a CPU kernel moved into device memory of the same sizes,
// strides and dtype (Note [Host kernels on host views]). Undefined stays
// undefined.
inline at::Tensor to_device_memory(const at::Tensor& host, c10::Device device) {
  if (!host.defined()) {
    return host;
  }
  at::Tensor out = at::_ops::empty_strided::call(
      c10::fromIntArrayRefSlow(host.sizes()), c10::fromIntArrayRefSlow(host.strides()),
      host.scalar_type(), std::nullopt, device, std::nullopt);
  if (out.numel() > 0) {
    InternalScope internal;  // Note [The backend's own dispatcher calls]
    host_view(out).copy_(host);
  }
  return out;
}

// The sizes of a reduction of `self` over `dims` (all of them when absent or
// empty), with ATen's errors for a bad or repeated dim.
inline c10::DimVector reduced_shape(const at::Tensor& self, at::OptionalIntArrayRef dims,
                                    bool keepdim) {
  const int64_t ndim = self.dim();
  std::bitset<at::dim_bitset_size> mask;
  if (!dims.has_value() || dims->empty()) {
    mask.set();
  } else {
    mask = at::dim_list_to_bitset(*dims, ndim);
  }
  c10::DimVector shape;
  for (int64_t d = 0; d < ndim; ++d) {
    if (!mask[d]) {
      shape.push_back(self.size(d));
    } else if (keepdim) {
      shape.push_back(1);
    }
  }
  return shape;
}

// One-input operators with a structured CPU kernel, run as Note [Host kernels
// on host views] says. `OutOp` is the operator's out= form (the CPU kernel
// that checks and computes); `Result::make(self, args...)` allocates the
// functional form's result on the device, `Result::shape(self, args...)`
// gives its sizes (for an out= argument).
template <class OutOp, class Result, class... Args>
struct HostKernel {
  static at::Tensor functional(const at::Tensor& self, Args... args) {
    at::Tensor out = Result::make(self, args...);
    at::Tensor host = host_view(out);
    InternalScope internal;  // Note [The backend's own dispatcher calls]
    OutOp::call(host_view(self), args..., host);
    return out;
  }

  static at::Tensor& out(const at::Tensor& self, Args... args, at::Tensor& out) {
    check_same_device(self, out);
    const auto shape = Result::shape(self, args...);
    if (out.numel() != 0 && !out.sizes().equals(shape)) {
      return into_resized(self, out, shape, args...);
    }
    resize_output(out, shape);
    at::Tensor host = host_view(out);
    InternalScope internal;
    OutOp::call(host_view(self), args..., host);
    return out;
  }

 private:
  // An out= tensor that holds elements but has the wrong shape: the CPU
  // checks the call before it resizes it (and warns), so the CPU's kernel
  // runs first, into an empty host tensor of out's dtype that it sizes
  // itself; only then is `out` resized on the device and the result copied.
  static at::Tensor& into_resized(const at::Tensor& self, at::Tensor& out, c10::IntArrayRef shape,
                                  Args... args) {
    at::Tensor result = empty({0}, out.options().device(c10::kCPU));
    {
      InternalScope internal;
      OutOp::call(host_view(self), args..., result);
    }
    resize_output(out, shape);
    at::Tensor host = host_view(out);
    InternalScope internal;
    host.copy_(result);
    return out;
  }
};

}  // namespace openreg::native
