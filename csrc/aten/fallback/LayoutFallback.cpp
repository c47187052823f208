// Note [Sparse and quantized tensors through the fallback]
// A sparse, quantized or nested openreg tensor dispatches to
// SparsePrivateUse1, SparseCsrPrivateUse1, QuantizedPrivateUse1 or
// NestedTensorPrivateUse1, not to PrivateUse1, so the dense fallback
// (Fallback.cpp) never sees it. openreg registers the same CPU round trip for
// those keys. For one call it
//   - moves each such argument to the host whole, with tensor.to("cpu"): a
//     sparse tensor's indices and values, a quantized tensor's bytes with its
//     quantizer (scale, zero point), a nested tensor's buffer with its sizes,
//     all through the copy path, so a trace shows one fallback and its copies;
//   - runs the CPU kernel of the matching CPU key (SparseCPU, SparseCsrCPU,
//     QuantizedCPU, NestedTensorCPU), chosen from the layouts of the
//     arguments (host_layout_key in BoxedArguments.h);
//   - moves results back with .to(device), which rebuilds a sparse result
//     from its indices and values (Sparse.cpp, SparseCsr.cpp), a quantized
//     one with its quantizer (Quantized.cpp) and a nested one around its
//     buffer (NestedTensor.cpp); arguments the op writes are copied back.
// Views are not kept: a sparse or nested op whose schema returns an alias
// (permute, unsqueeze, transpose, ...) returns a copy on openreg, because the
// host copy shares nothing with the device tensor; a non-contiguous nested
// argument or result is made contiguous to move (PyTorch moves only whole
// nested buffers). The fallback policy
// (allow / warn / error) applies as for dense operators.
//
// One dispatch rule gets in the way. Many operators have a composite kernel
// (CompositeExplicitAutograd, or CompositeExplicitAutogradNonFunctional for
// every structured operator: mm, addmm, add.Tensor, sin, ...) whose alias
// covers these keys (CompositeExplicitAutogradNonFunctional's does not cover
// SparsePrivateUse1), and the dispatcher prefers it to a backend fallback.
// Where the CPU has a kernel of its own for the layout, the composite is the
// wrong road: it allocates a result in the input's layout and calls an out=
// or dim= variant the CPU refuses ("addmm: computation on CPU is not
// implemented for SparseCsr + SparseCsr @ Strided", "reduction operations on
// CSR tensors with keepdim=False is unsupported"), or returns another layout
// (sum() of a sparse tensor is dense on CPU, the composite's is sparse). So
// for each operator with a SparseCPU (SparseCsrCPU, QuantizedCPU) kernel and
// a composite one, and no openreg kernel for the key (Sparse.cpp,
// SparseCsr.cpp, Quantized.cpp), openreg registers the
// round trip explicitly: the CPU then runs the kernel it runs for a CPU
// tensor. This runs on import (register_layout_fallbacks, from the module's
// init), after every static registration of the extension, so that openreg's
// own kernels are seen and kept.

#include "aten/fallback/LayoutFallback.h"

#include "aten/fallback/Fallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <vector>

namespace openreg {
namespace {

std::unique_ptr<torch::Library> register_over_composites(c10::DispatchKey key,
                                                         c10::DispatchKey cpu_key,
                                                         bool implicit_too = false) {
  auto lib =
      std::make_unique<torch::Library>(torch::Library::IMPL, "aten", key, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNamesForDispatchKey(cpu_key)) {
    auto op = dispatcher.findOp(name);
    if (name.name.rfind("aten::", 0) != 0 || !op.has_value() || op->hasKernelForDispatchKey(key)) {
      continue;
    }
    const bool composite =
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
        (implicit_too && op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd));
    if (!composite) {
      continue;
    }
    std::string unqualified = name.name.substr(6);
    if (!name.overload_name.empty()) {
      unqualified += "." + name.overload_name;
    }
    lib->impl(unqualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_cpu_fallback>());
  }
  return lib;
}

}  // namespace

void register_layout_fallbacks() {
  static const std::vector<std::unique_ptr<torch::Library>> libraries = [] {
    std::vector<std::unique_ptr<torch::Library>> libs;
    libs.push_back(
        register_over_composites(c10::DispatchKey::SparsePrivateUse1, c10::DispatchKey::SparseCPU));
    libs.push_back(register_over_composites(c10::DispatchKey::SparseCsrPrivateUse1,
                                            c10::DispatchKey::SparseCsrCPU));
    libs.push_back(register_over_composites(c10::DispatchKey::QuantizedPrivateUse1,
                                            c10::DispatchKey::QuantizedCPU));
    // linear, matmul, ...: the implicit composites read sizes(), which a
    // nested tensor does not have; NestedTensorCPU has kernels of its own.
    libs.push_back(register_over_composites(c10::DispatchKey::NestedTensorPrivateUse1,
                                            c10::DispatchKey::NestedTensorCPU,
                                            /*implicit_too=*/true));
    return libs;
  }();
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_cpu_fallback>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_cpu_fallback>());
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_cpu_fallback>());
}

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_cpu_fallback>());
}

}  // namespace openreg
