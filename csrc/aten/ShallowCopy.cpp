// Note [Module parameters keep their identity]
// Module._apply (behind .to(), .openreg(), .cpu(), to_empty(), .half(), ...)
// moves a parameter in place, `param.data = moved`, only when
// torch._has_compatible_shallow_copy_type(param, moved) is true; otherwise it
// wraps `moved` in a new Parameter. A new Parameter breaks everything that
// held the old one: a weight tied between two modules (a language model's
// input and output embeddings) becomes two independent weights, and an
// optimizer built before .to() keeps stepping the abandoned ones. Training
// then runs, silently wrong. `variable.data = t` itself checks the same
// operator.
//
// c10's answer, TensorImpl::has_compatible_shallow_copy_type, accepts two
// dense tensors only when both backends are on its list (CPU, CUDA, MPS, HIP,
// XPU, HPU, MTIA). PrivateUse1 is not on it (pytorch issue 116255); the
// comment there tells PrivateUse1 backends to register their own kernel for
// the operator, which is this file. The operator is CompositeImplicitAutograd,
// so a PrivateUse1 kernel also replaces the composite in the
// AutogradPrivateUse1 slot, and the dispatcher picks it whenever either
// tensor is an openreg tensor (PrivateUse1 is the higher backend of any
// pair). Two tensors of other devices never reach it: their answer stays
// c10's, unchanged.
//
// The rule: an openreg dense tensor answers exactly as a CPU dense tensor
// would. So openreg <-> openreg and openreg <-> any dense backend c10 knows
// are compatible; openreg <-> meta, sparse or a wrapper subclass are not,
// just as CPU <-> those are not. Nothing is copied from c10's list: the other
// tensor is asked about a CPU dense key set. The torch function keeps its
// signature (torch.compile's polyfill for it checks it); only its kernel for
// openreg is new.

#include "aten/Registration.h"

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>

namespace openreg {
namespace {

bool is_openreg_dense(const at::Tensor& t) {
  const c10::DispatchKeySet ks = t.key_set();
  return ks.has_backend(c10::BackendComponent::PrivateUse1Bit) &&
         ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense));
}

// c10's answer for `t` against a dense CPU tensor.
bool compatible_with_cpu_dense(const at::Tensor& t) {
  return t.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(
      c10::DispatchKeySet(c10::DispatchKey::CPU));
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const bool self_openreg = is_openreg_dense(self);
  const bool from_openreg = is_openreg_dense(from);
  if (self_openreg && from_openreg) {
    return true;
  }
  if (self_openreg) {
    return compatible_with_cpu_dense(from);
  }
  if (from_openreg) {
    return compatible_with_cpu_dense(self);
  }
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

}  // namespace openreg
