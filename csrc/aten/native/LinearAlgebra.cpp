// Matrix products: mm, addmm (and addmm_), bmm, each with its out= variant,
// plus dot and mv, which torch.matmul reaches for 1-D operands. Together they
// keep torch.matmul and nn.functional.linear native for 1-D, 2-D and 3-D
// inputs, forward and backward.
//
// Note [openreg's device BLAS]
// These are the one family whose arithmetic is not written here. A real
// accelerator backend hands GEMM to its vendor library (cuBLAS, oneDNN, ...);
// openreg's "device BLAS" is the host's BLAS. Each kernel checks shapes,
// dtypes and devices itself (with ATen's messages) and allocates its output on
// the device, then runs the CPU product (at::mm_out, at::addmm_out,
// at::bmm_out, at::mv_out) on host_view()s of the device tensors (Note [Device
// memory is host memory]): the BLAS reads and writes device memory in place and
// nothing is copied. BLAS has no integer GEMM, so non-floating dtypes go to
// the CPU fallback whole, as they would on a vendor library without them.

#include "aten/HostView.h"
#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/dot_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mv.h>
#include <ATen/ops/mv_ops.h>

#include <array>

namespace openreg {
namespace {

using at::ScalarType;

// The dtypes the host BLAS multiplies.
bool is_blas_dtype(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::Half ||
         t == ScalarType::BFloat16;
}

void linalg_check_same_device(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              a.device(), " and ", b.device(), "!");
}

// The checks ATen's structured kernels make on an out= tensor, then its resize.
void prepare_out(const at::Tensor& out, const at::Tensor& like, at::IntArrayRef shape) {
  TORCH_CHECK(out.dtype() == like.dtype(), "Expected out tensor to have dtype ", like.dtype(),
              ", but got ", out.dtype(), " instead");
  TORCH_CHECK(out.device() == like.device(), "Expected out tensor to have device ", like.device(),
              ", but got ", out.device(), " instead");
  at::native::resize_output(out, shape);
}

// --- mm -------------------------------------------------------------------------

void check_mm(const at::Tensor& self, const at::Tensor& mat2) {
  TORCH_CHECK(self.dim() == 2, "self must be a matrix");
  TORCH_CHECK(mat2.dim() == 2, "mat2 must be a matrix");
  TORCH_CHECK(self.size(1) == mat2.size(0), "mat1 and mat2 shapes cannot be multiplied (",
              self.size(0), "x", self.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  TORCH_CHECK(self.dtype() == mat2.dtype(),
              "expected m1 and m2 to have the same dtype, but got: ", self.dtype(),
              " != ", mat2.dtype());
}

// Note [openreg's device BLAS]
void blas_mm(const at::Tensor& out, const at::Tensor& self, const at::Tensor& mat2) {
  at::Tensor result = host_view(out);
  at::mm_out(result, host_view(self), host_view(mat2));
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  linalg_check_same_device(self, mat2);
  if (!is_blas_dtype(self.scalar_type())) {
    return fallback<at::_ops::mm>(self, mat2);
  }
  check_mm(self, mat2);
  at::Tensor out = at::empty({self.size(0), mat2.size(1)}, self.options());
  blas_mm(out, self, mat2);
  return out;
}

at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  linalg_check_same_device(self, mat2);
  if (!is_blas_dtype(self.scalar_type())) {
    return fallback<at::_ops::mm_out>(self, mat2, out);
  }
  check_mm(self, mat2);
  prepare_out(out, self, {self.size(0), mat2.size(1)});
  blas_mm(out, self, mat2);
  return out;
}

// --- addmm ----------------------------------------------------------------------

void check_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2) {
  linalg_check_same_device(mat1, mat2);
  linalg_check_same_device(mat1, self);
  TORCH_CHECK(self.scalar_type() == mat2.scalar_type(),
              "self and mat2 must have the same dtype, but got ", self.scalar_type(), " and ",
              mat2.scalar_type());
  TORCH_CHECK(mat1.scalar_type() == mat2.scalar_type(),
              "mat1 and mat2 must have the same dtype, but got ", mat1.scalar_type(), " and ",
              mat2.scalar_type());
  TORCH_CHECK(mat1.dim() == 2, "mat1 must be a matrix, got ", mat1.dim(), "-D tensor");
  TORCH_CHECK(mat2.dim() == 2, "mat2 must be a matrix, got ", mat2.dim(), "-D tensor");
  TORCH_CHECK(mat1.size(1) == mat2.size(0), "mat1 and mat2 shapes cannot be multiplied (",
              mat1.size(0), "x", mat1.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
}

// Note [openreg's device BLAS]. `self` broadcasts to the result's shape (the
// bias of a linear layer); expand() raises ATen's error when it cannot.
void blas_addmm(const at::Tensor& out, const at::Tensor& self, const at::Tensor& mat1,
                const at::Tensor& mat2, const c10::Scalar& beta, const c10::Scalar& alpha) {
  at::Tensor result = host_view(out);
  const at::Tensor bias = host_view(self).expand({mat1.size(0), mat2.size(1)});
  at::addmm_out(result, bias, host_view(mat1), host_view(mat2), beta, alpha);
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                 const c10::Scalar& beta, const c10::Scalar& alpha) {
  if (!is_blas_dtype(mat2.scalar_type())) {
    return fallback<at::_ops::addmm>(self, mat1, mat2, beta, alpha);
  }
  check_addmm(self, mat1, mat2);
  at::Tensor out = at::empty({mat1.size(0), mat2.size(1)}, mat1.options());
  blas_addmm(out, self, mat1, mat2, beta, alpha);
  return out;
}

at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                      const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
  if (!is_blas_dtype(mat2.scalar_type())) {
    return fallback<at::_ops::addmm_out>(self, mat1, mat2, beta, alpha, out);
  }
  check_addmm(self, mat1, mat2);
  prepare_out(out, mat1, {mat1.size(0), mat2.size(1)});
  blas_addmm(out, self, mat1, mat2, beta, alpha);
  return out;
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                   const c10::Scalar& beta, const c10::Scalar& alpha) {
  if (!is_blas_dtype(mat2.scalar_type())) {
    return fallback<at::_ops::addmm_>(self, mat1, mat2, beta, alpha);
  }
  check_addmm(self, mat1, mat2);
  const std::array<int64_t, 2> shape{mat1.size(0), mat2.size(1)};
  TORCH_CHECK(self.sizes() == at::IntArrayRef(shape), "Bad in-place call: input tensor size ",
              self.sizes(), " and output tensor size ", at::IntArrayRef(shape), " should match");
  blas_addmm(self, self, mat1, mat2, beta, alpha);
  return self;
}

// --- bmm ------------------------------------------------------------------------

void check_bmm(const at::Tensor& self, const at::Tensor& mat2) {
  linalg_check_same_device(self, mat2);
  TORCH_CHECK(self.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(mat2.dim() == 3, "batch2 must be a 3D tensor");
  TORCH_CHECK(mat2.size(0) == self.size(0) && mat2.size(1) == self.size(2),
              "Expected size for first two dimensions of batch2 tensor to be: [", self.size(0),
              ", ", self.size(2), "] but got: [", mat2.size(0), ", ", mat2.size(1), "].");
  TORCH_CHECK(self.scalar_type() == mat2.scalar_type(), "expected scalar type ", self.scalar_type(),
              " but found ", mat2.scalar_type());
}

// Note [openreg's device BLAS]
void blas_bmm(const at::Tensor& out, const at::Tensor& self, const at::Tensor& mat2) {
  at::Tensor result = host_view(out);
  at::bmm_out(result, host_view(self), host_view(mat2));
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
  if (!is_blas_dtype(self.scalar_type())) {
    return fallback<at::_ops::bmm>(self, mat2);
  }
  check_bmm(self, mat2);
  at::Tensor out = at::empty({self.size(0), self.size(1), mat2.size(2)}, self.options());
  blas_bmm(out, self, mat2);
  return out;
}

at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  if (!is_blas_dtype(self.scalar_type())) {
    return fallback<at::_ops::bmm_out>(self, mat2, out);
  }
  check_bmm(self, mat2);
  prepare_out(out, self, {self.size(0), self.size(1), mat2.size(2)});
  blas_bmm(out, self, mat2);
  return out;
}

// --- dot and mv (torch.matmul with 1-D operands) -----------------------------------

void check_dot(const at::Tensor& self, const at::Tensor& other) {
  linalg_check_same_device(self, other);
  TORCH_CHECK(self.dim() == 1 && other.dim() == 1, "1D tensors expected, but got ", self.dim(),
              "D and ", other.dim(), "D tensors");
  TORCH_CHECK(self.scalar_type() == other.scalar_type(),
              "dot : expected both vectors to have same dtype, but found ", self.scalar_type(),
              " and ", other.scalar_type());
  TORCH_CHECK(self.numel() == other.numel(), "inconsistent tensor size, expected tensor [",
              self.numel(), "] and src [", other.numel(),
              "] to have the same number of elements, but got ", self.numel(), " and ",
              other.numel(), " elements respectively");
}

// Note [openreg's device BLAS]: a (1 x n) @ (n x 1) product written into the
// 0-dim result viewed as 1 x 1.
at::Tensor dot(const at::Tensor& self, const at::Tensor& other) {
  if (!is_blas_dtype(self.scalar_type())) {
    return fallback<at::_ops::dot>(self, other);
  }
  check_dot(self, other);
  at::Tensor out = at::empty({}, self.options());
  at::Tensor result = host_view(out).view({1, 1});
  at::mm_out(result, host_view(self).unsqueeze(0), host_view(other).unsqueeze(1));
  return out;
}

void check_mv(const at::Tensor& self, const at::Tensor& vec) {
  linalg_check_same_device(self, vec);
  TORCH_CHECK(self.dim() == 2 && vec.dim() == 1, "vector + matrix @ vector expected, got 1, ",
              self.dim(), ", ", vec.dim());
  TORCH_CHECK(self.size(1) == vec.size(0), "size mismatch, got input (", self.size(0), "), mat (",
              self.size(0), "x", self.size(1), "), vec (", vec.size(0), ")");
  TORCH_CHECK(self.scalar_type() == vec.scalar_type(),
              "addmv input tensors must have the same dtype, but got ", vec.scalar_type(), ", ",
              self.scalar_type(), ", and ", vec.scalar_type());
}

// Note [openreg's device BLAS]
void blas_mv(const at::Tensor& out, const at::Tensor& self, const at::Tensor& vec) {
  at::Tensor result = host_view(out);
  at::mv_out(result, host_view(self), host_view(vec));
}

at::Tensor mv(const at::Tensor& self, const at::Tensor& vec) {
  if (!is_blas_dtype(vec.scalar_type())) {
    return fallback<at::_ops::mv>(self, vec);
  }
  check_mv(self, vec);
  at::Tensor out = at::empty({self.size(0)}, vec.options());
  blas_mv(out, self, vec);
  return out;
}

at::Tensor& mv_out(const at::Tensor& self, const at::Tensor& vec, at::Tensor& out) {
  if (!is_blas_dtype(vec.scalar_type())) {
    return fallback<at::_ops::mv_out>(self, vec, out);
  }
  check_mv(self, vec);
  prepare_out(out, vec, {self.size(0)});
  blas_mv(out, self, vec);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "mm", mm);
  OPENREG_IMPL(m, "mm.out", mm_out);
  OPENREG_IMPL(m, "addmm", addmm);
  OPENREG_IMPL(m, "addmm.out", addmm_out);
  OPENREG_IMPL(m, "addmm_", addmm_);
  OPENREG_IMPL(m, "bmm", bmm);
  OPENREG_IMPL(m, "bmm.out", bmm_out);
  OPENREG_IMPL(m, "dot", dot);
  OPENREG_IMPL(m, "mv", mv);
  OPENREG_IMPL(m, "mv.out", mv_out);
}

}  // namespace openreg
