#pragma once

// Note [Host kernels on host views]
// Some native kernels are not written here: the operator's own CPU kernel
// computes on host_view()s of the device tensors (Note [Device memory is host
// memory]), as the host BLAS does for the matrix products (Note [openreg's
// device BLAS] in LinearAlgebra.cpp). The kernel reads and writes device
// memory in place: results are allocated on the device first, with the sizes,
// strides and dtype the operator's meta function gives (the same function
// that checks the arguments for the CPU, so a bad argument raises the CPU's
// error), and the CPU's out= kernel writes into their host views. An out=
// argument of the wrong size is resized on the device first (with ATen's
// deprecation warning), never through its host view, whose storage cannot
// grow. The CPU calls are the backend's own (Note [The backend's own
// dispatcher calls]): the trace records the openreg op as native, and its
// cost as that op's time.

#include "aten/HostView.h"
#include "aten/native/Common.h"
#include "trace/Hooks.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided_ops.h>

namespace openreg::native {

inline void check_same_device(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              a.device(), " and ", b.device(), "!");
}

// A meta tensor with the sizes, strides and dtype of `t`.
inline at::Tensor meta_like(const at::Tensor& t) {
  return at::_ops::empty_strided::call(c10::fromIntArrayRefSlow(t.sizes()),
                                       c10::fromIntArrayRefSlow(t.strides()), t.scalar_type(),
                                       std::nullopt, c10::Device(c10::kMeta), std::nullopt);
}

// A tensor on `device` with the sizes, strides and dtype of the meta tensor `m`.
inline at::Tensor empty_like_meta(const at::Tensor& m, c10::Device device) {
  return at::_ops::empty_strided::call(c10::fromIntArrayRefSlow(m.sizes()),
                                       c10::fromIntArrayRefSlow(m.strides()), m.scalar_type(),
                                       std::nullopt, device, std::nullopt);
}

// One-input operators with a structured CPU kernel, run as Note [Host kernels
// on host views] says: `Op` is the functional operator (its meta function
// gives the result), `OutOp` its out= form (the CPU kernel that computes).
template <class Op, class OutOp, class... Args>
struct HostKernel {
  static at::Tensor functional(const at::Tensor& self, Args... args) {
    at::Tensor out;
    {
      trace::InternalScope internal;  // Note [The backend's own dispatcher calls]
      out = empty_like_meta(Op::call(meta_like(self), args...), self.device());
    }
    at::Tensor host = host_view(out);
    trace::InternalScope internal;
    OutOp::call(host_view(self), args..., host);
    return out;
  }

  static at::Tensor& out(const at::Tensor& self, Args... args, at::Tensor& out) {
    check_same_device(self, out);
    at::Tensor meta;
    {
      trace::InternalScope internal;
      meta = Op::call(meta_like(self), args...);
    }
    resize_output(out, meta.sizes());
    at::Tensor host = host_view(out);
    trace::InternalScope internal;
    OutOp::call(host_view(self), args..., host);
    return out;
  }
};

}  // namespace openreg::native
