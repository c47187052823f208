#pragma once

// Note [Structured kernels on device memory]
// A structured operator's CPU kernel is a class of two steps: `meta` checks
// the call (with the CPU's messages) and declares each result's sizes,
// strides and dtype through set_output_*; `impl` computes into the results.
// The CPU's functional form allocates the results in set_output_*, its out=
// form checks and resizes the given tensors there. openreg runs the CPU's own
// class (at::native::structured_<op>_out_cpu) on host views of the arguments
// (Note [Device memory is host memory]) through OnDevice (functional: each
// result allocated in device memory exactly as the CPU allocates it in host
// memory) or OnDeviceOut (out=: the given device tensors checked, resized and
// restrided as the CPU's out= form does), and `impl` computes into the
// results' host views: the CPU's arithmetic, layouts, checks and warnings,
// with no copy. The meta functions run here are the C++ ones the CPU's kernel
// runs, not the Python meta functions registered for the Meta device.
// Callers open an InternalScope around meta and impl (Note [The
// backend's own dispatcher calls]).

#include "aten/HostView.h"
#include "aten/native/Common.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided_ops.h>
#include <c10/core/TensorImpl.h>

#include <array>
#include <optional>

namespace openreg::native {

// A device tensor laid out as a structured kernel's set_output_* asks: the
// given strides, or else the options' memory format.
inline at::Tensor empty_as_declared(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                    const c10::TensorOptions& options) {
  if (strides.empty()) {
    return empty(sizes, options);
  }
  return at::_ops::empty_strided::call(c10::fromIntArrayRefSlow(sizes),
                                       c10::fromIntArrayRefSlow(strides),
                                       c10::optTypeMetaToScalarType(options.dtype_opt()),
                                       std::nullopt, options.device_opt(), std::nullopt);
}

// The functional form of structured CPU kernel `Kernel` with N results, on
// `device`: Note [Structured kernels on device memory].
template <class Kernel, size_t N>
class OnDevice final : public Kernel {
 public:
  explicit OnDevice(c10::Device device) : device_(device) {}

  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          c10::TensorOptions options) override {
    allocate(i, sizes, strides, options);
  }

  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              c10::TensorOptions options) override {
    allocate(i, sizes, strides, options);
  }

  const at::Tensor& maybe_get_output(int64_t i) override {
    return hosts_[i];
  }

  // Result i's host view (what `impl` writes) and the device tensor itself.
  const at::Tensor& host(size_t i) const {
    return hosts_[i];
  }
  const at::Tensor& result(size_t i) const {
    return results_[i];
  }

 private:
  void allocate(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                const c10::TensorOptions& options) {
    results_[i] = empty_as_declared(sizes, strides, options.device(device_));
    hosts_[i] = host_view(results_[i]);
  }

  c10::Device device_;
  std::array<at::Tensor, N> results_;
  std::array<at::Tensor, N> hosts_;
};

// The out= form of structured CPU kernel `Kernel` with N results, writing into
// the given device tensors (Note [Structured kernels on device memory]): a
// result of the wrong dtype or device is refused with the CPU's message, one
// of the wrong sizes is resized (with PyTorch's warning when it held
// elements) and then laid out as the kernel declares; where the kernel needs
// strides the tensor does not have, it computes into a device temporary that
// finish() copies into the tensor.
template <class Kernel, size_t N>
class OnDeviceOut final : public Kernel {
 public:
  explicit OnDeviceOut(std::array<at::Tensor, N> outs) : outs_(std::move(outs)) {}

  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          c10::TensorOptions options) override {
    resize(i, sizes, strides, options);
    if (!outs_[i].strides().equals(strides)) {
      proxies_[i] = empty_as_declared(sizes, strides, options.device(outs_[i].device()));
      host_[i] = host_view(*proxies_[i]);
    }
  }

  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              c10::TensorOptions options) override {
    resize(i, sizes, strides, options);
  }

  const at::Tensor& maybe_get_output(int64_t i) override {
    return host_[i];
  }

  const at::Tensor& host(size_t i) const {
    return host_[i];
  }

  // Copies the results computed into temporaries into the given tensors.
  void finish() {
    for (size_t i = 0; i < N; ++i) {
      if (proxies_[i].has_value()) {
        outs_[i].copy_(*proxies_[i]);
      }
    }
  }

 private:
  // What the CPU's out= wrapper does (resize_out in ATen's generated code).
  void resize(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
              const c10::TensorOptions& options) {
    const at::Tensor& out = outs_[i];
    check_out(out, c10::typeMetaToScalarType(options.dtype()), out.device());
    if (resize_output(out, sizes)) {
      if (!strides.empty()) {
        out.as_strided_(sizes, strides);
      } else if (options.memory_format_opt().has_value()) {
        out.unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
      }
    }
    host_[i] = host_view(out);
  }

  std::array<at::Tensor, N> outs_;
  std::array<at::Tensor, N> host_;
  std::array<std::optional<at::Tensor>, N> proxies_;
};

}  // namespace openreg::native
