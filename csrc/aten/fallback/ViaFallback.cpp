// Operators whose PyTorch kernel for openreg is a composite that goes wrong
// on it, routed to the boxed CPU fallback instead.
//
// The dispatcher prefers an operator's CompositeExplicitAutograd(NonFunctional)
// kernel to a backend's boxed fallback, so these operators never reached the
// fallback. Registering the fallback itself as their PrivateUse1 kernel runs
// them exactly as any operator openreg lacks (policy check, copy path, CPU
// kernel) instead of through:
//   - aten::mode.values: mode_out refuses every device but CPU, CUDA and XPU
//     ("mode only supports CPU, CUDA and XPU device type, got: openreg");
//   - aten::smooth_l1_loss: the structured functional wrapper allocates the
//     reduced (0-dim) result and calls the .out kernel, whose meta function
//     first sizes the output like the broadcast inputs: a one-element out=
//     resized, and a deprecation warning CPU never emits.
// mse_loss, native_group_norm and index.Tensor have the same problem but get
// native kernels (native/MseLoss.cpp, native/GroupNorm.cpp,
// native/AdvancedIndexing.cpp).

#include "aten/fallback/Fallback.h"

#include <torch/library.h>

namespace openreg {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"mode.values", "smooth_l1_loss"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
  }
}

}  // namespace openreg
