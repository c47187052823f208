// The fused LSTM and GRU cells: what nn.LSTM, nn.GRU, nn.LSTMCell and
// nn.GRUCell reach on openreg.
//
// ATen's recurrent layers send every device but the CPU (input.is_cuda() ||
// input.is_privateuseone() in RNN.cpp) to _thnn_fused_lstm_cell and
// _thnn_fused_gru_cell, whose only kernels are CUDA's: the CPU fallback cannot
// run them. openreg computes them here from ATen operators on device tensors
// (which reach openreg's own kernels), with CUDA's semantics, including the
// `workspace` layout their backward kernels read:
//   LSTM: gates (i, f, g, o), workspace = activated gates [i f g o];
//         cy = f * cx + i * g, hy = o * tanh(cy)
//   GRU:  gates (r, z, n), workspace = [r z n hx hn] with hn the hidden
//         n-gate (bias included); n = tanh(in + r * hn),
//         hy = n + z * (hx - n)
// Autograd uses the backward kernels below when grad mode is off during the
// backward pass, and ATen's differentiable composites
// (_thnn_differentiable_*_cell_backward) when it is on (double backward).

#include "aten/Registration.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>

#include <optional>
#include <tuple>

namespace openreg {
namespace {

using at::Tensor;

Tensor with_bias(const Tensor& gates, const std::optional<Tensor>& bias) {
  return bias.has_value() && bias->defined() ? gates + *bias : gates;
}

std::tuple<Tensor, Tensor, Tensor> lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                             const Tensor& cx,
                                             const std::optional<Tensor>& input_bias,
                                             const std::optional<Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes() && input_gates.dim() == 2 &&
                  input_gates.size(1) == 4 * cx.size(-1),
              "_thnn_fused_lstm_cell: expected gates of shape (batch, 4 * hidden), got ",
              input_gates.sizes(), " and ", hidden_gates.sizes(), " for cx ", cx.sizes());
  const Tensor gates = with_bias(input_gates, input_bias) + with_bias(hidden_gates, hidden_bias);
  const auto chunks = gates.chunk(4, 1);
  const Tensor i = at::sigmoid(chunks[0]);
  const Tensor f = at::sigmoid(chunks[1]);
  const Tensor g = at::tanh(chunks[2]);
  const Tensor o = at::sigmoid(chunks[3]);
  const Tensor cy = f * cx + i * g;
  const Tensor hy = o * at::tanh(cy);
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<Tensor, Tensor, Tensor> lstm_cell_backward(const std::optional<Tensor>& grad_hy,
                                                      const std::optional<Tensor>& grad_cy,
                                                      const Tensor& cx, const Tensor& cy,
                                                      const Tensor& workspace, bool has_bias) {
  const bool has_hy = grad_hy.has_value() && grad_hy->defined();
  const bool has_cy = grad_cy.has_value() && grad_cy->defined();
  if (!has_hy && !has_cy) {
    return {Tensor(), Tensor(), Tensor()};
  }
  const auto w = workspace.chunk(4, 1);
  const Tensor &i = w[0], &f = w[1], &g = w[2], &o = w[3];
  const Tensor tanh_cy = at::tanh(cy);
  const Tensor ghy = has_hy ? *grad_hy : at::zeros_like(cy);
  Tensor gc = ghy * o * (1 - tanh_cy * tanh_cy);
  if (has_cy) {
    gc = gc + *grad_cy;
  }
  const Tensor gi = gc * g * i * (1 - i);
  const Tensor gf = gc * cx * f * (1 - f);
  const Tensor gg = gc * i * (1 - g * g);
  const Tensor go = ghy * tanh_cy * o * (1 - o);
  const Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
  const Tensor grad_bias = has_bias ? grad_gates.sum(0) : Tensor();
  return {grad_gates, gc * f, grad_bias};
}

std::tuple<Tensor, Tensor> gru_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                    const Tensor& hx, const std::optional<Tensor>& input_bias,
                                    const std::optional<Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes() && input_gates.dim() == 2 &&
                  input_gates.size(1) == 3 * hx.size(-1),
              "_thnn_fused_gru_cell: expected gates of shape (batch, 3 * hidden), got ",
              input_gates.sizes(), " and ", hidden_gates.sizes(), " for hx ", hx.sizes());
  const auto in = with_bias(input_gates, input_bias).chunk(3, 1);
  const auto hid = with_bias(hidden_gates, hidden_bias).chunk(3, 1);
  const Tensor r = at::sigmoid(in[0] + hid[0]);
  const Tensor z = at::sigmoid(in[1] + hid[1]);
  const Tensor n = at::tanh(in[2] + r * hid[2]);
  const Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hid[2]}, 1)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> gru_cell_backward(const Tensor& grad_hy,
                                                                     const Tensor& workspace,
                                                                     bool has_bias) {
  const auto w = workspace.chunk(5, 1);
  const Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  const Tensor gz = grad_hy * (hx - n) * z * (1 - z);
  const Tensor ghx = grad_hy * z;
  const Tensor gn = grad_hy * (1 - z) * (1 - n * n);
  const Tensor ghn = gn * r;
  const Tensor gr = gn * hn * r * (1 - r);
  const Tensor grad_input_gates = at::cat({gr, gz, gn}, 1);
  const Tensor grad_hidden_gates = at::cat({gr, gz, ghn}, 1);
  if (!has_bias) {
    return {grad_input_gates, grad_hidden_gates, ghx, Tensor(), Tensor()};
  }
  return {grad_input_gates, grad_hidden_gates, ghx, grad_input_gates.sum(0),
          grad_hidden_gates.sum(0)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "_thnn_fused_lstm_cell", lstm_cell);
  OPENREG_IMPL(m, "_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  OPENREG_IMPL(m, "_thnn_fused_gru_cell", gru_cell);
  OPENREG_IMPL(m, "_thnn_fused_gru_cell_backward", gru_cell_backward);
}

}  // namespace openreg
