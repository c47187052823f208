// Fused scaled-dot-product attention: the forward and backward of
// aten::_scaled_dot_product_fused_attention_overrideable, PyTorch's entry for
// a PrivateUse1 device's own attention kernel.
//
// Note [Fused attention on openreg]
// Three parts fit together.
//  - The choice (AttentionChoice.cpp). scaled_dot_product_attention asks the
//    device which backend to run. openreg answers "overrideable" when
//    `attention::unsupported` (below) finds nothing it cannot run and the user
//    has not switched that backend off (torch.nn.attention.sdpa_kernel) and
//    no backend profile has switched the kernel off (Note [Profiles]);
//    otherwise "math", PyTorch's decomposition into matmul, softmax and
//    dropout, exactly as CPU falls back to it. It chooses the fused kernel for
//    4-D dense openreg tensors of one floating dtype (float32, float64,
//    bfloat16, float16) with equal batch sizes, boolean or same-dtype masks
//    that broadcast to (B, H, L, S), is_causal (top-left, as CPU's), any
//    scale, dropout below 1, and grouped-query attention (the query's heads a
//    multiple of the key's, with enable_gqa). The op itself also runs 3-D
//    inputs, which the choice leaves to the math path as CPU does. The
//    overrideable op is not given enable_gqa: it reads grouping from the head
//    counts, so the choice is what keeps a mismatch without enable_gqa on the
//    math path, which raises PyTorch's error. Arguments are checked as on CPU
//    (tests/operators/test_native_attention_args.py runs each bad case on
//    both): a dropout_p below 0 or NaN raises where the CPU's own choice is its
//    flash kernel, which refuses it, and is no dropout on the math path, as on
//    CPU. Two misuses CPU's flash kernel accepts raise on openreg, through the
//    math path's checks: is_causal with an attn_mask (documented as an error;
//    CPU's kernel applies both) and a value whose sequence length is not the
//    key's (CPU's kernel silently drops the keys past the value's length).
//  - The forward and backward (this file). openreg's "vendor attention
//    library" is the host's: the kernels run on host views of the device
//    tensors (Note [Device memory is host memory]), as the device BLAS does
//    (Note [openreg's device BLAS]). Without dropout and with equal head
//    dimensions they call CPU's flash-attention kernel
//    (at::_scaled_dot_product_flash_attention_for_cpu and its backward), which
//    never builds the L x S attention matrix; grouped heads are repeated for
//    it and their gradients summed back. Dropout takes CPU's math path (the
//    next point). A value head dimension unlike the query's and a gradient for
//    a floating mask (which CPU's kernel does not compute) take the explicit
//    path: scores, a log-sum-exp per row, probabilities and products in the
//    opmath dtype. The forward returns what PyTorch's meta function for the op
//    describes: the output in the query's memory layout, the float
//    log-sum-exp (B, H, L), the sequence lengths, the philox seed and offset
//    (CPU int64 scalars, as CUDA's kernels return theirs; with dropout the
//    seed's storage also holds the generator state the backward needs), and,
//    when asked for and with dropout, the kept positions as a boolean mask.
//  - The random numbers. With dropout the kernel computes what CPU's math path
//    computes, in the same ATen operations and order, and draws the mask as
//    the CPU's dropout draws it, from openreg's generator: Note [Attention
//    dropout as the CPU draws it] below.
// Results are written into device tensors allocated here; CPU's kernel
// allocates its outputs on the host, so they are copied once into device
// memory by a host memcpy (no device copy, nothing recorded as one).

#include "aten/native/Attention.h"

#include "aten/HostView.h"
#include "aten/Registration.h"
#include "runtime/Generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/_safe_softmax.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/_softmax_backward_data.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/core/TensorImpl.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <tuple>
#include <vector>

namespace openreg {

namespace attention {

namespace {

bool is_attention_dtype(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kDouble || t == c10::kHalf || t == c10::kBFloat16;
}

bool on_openreg_dense(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 &&
         t.layout() == c10::kStrided && !t.is_nested();
}

}  // namespace

const char* unsupported(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                        const std::optional<at::Tensor>& attn_mask, double dropout_p,
                        bool is_causal, bool enable_gqa) {
  if (!on_openreg_dense(query) || !on_openreg_dense(key) || !on_openreg_dense(value)) {
    return "query, key and value must be dense openreg tensors";
  }
  const auto dtype = query.scalar_type();
  if (!is_attention_dtype(dtype) || key.scalar_type() != dtype || value.scalar_type() != dtype) {
    return "query, key and value must share one dtype of float32, float64, bfloat16, float16";
  }
  const int64_t dim = query.dim();
  if ((dim != 3 && dim != 4) || key.dim() != dim || value.dim() != dim) {
    return "query, key and value must all be 3-D (H, L, E) or all 4-D (B, H, L, E)";
  }
  if (dim == 4 && (key.size(0) != query.size(0) || value.size(0) != query.size(0))) {
    return "query, key and value must have the same batch size (no broadcasting)";
  }
  const int64_t q_heads = query.size(-3);
  const int64_t kv_heads = key.size(-3);
  if (value.size(-3) != kv_heads) {
    return "key and value must have the same number of heads";
  }
  if (q_heads != kv_heads && !(enable_gqa && q_heads % kv_heads == 0)) {
    return "the query's heads must equal the key's, or be a multiple of them with enable_gqa";
  }
  if (key.size(-1) != query.size(-1) || value.size(-2) != key.size(-2)) {
    return "key must have the query's head dimension and value the key's sequence length";
  }
  if (query.numel() == 0 || key.numel() == 0 || value.numel() == 0) {
    return "empty query, key or value";
  }
  if (!(dropout_p >= 0.0 && dropout_p < 1.0)) {
    return "dropout_p must be in [0, 1)";
  }
  if (attn_mask.has_value() && attn_mask->defined()) {
    const at::Tensor& mask = *attn_mask;
    if (is_causal) {
      return "is_causal with an explicit attn_mask";
    }
    if (!on_openreg_dense(mask) ||
        (mask.scalar_type() != c10::kBool && mask.scalar_type() != dtype)) {
      return "attn_mask must be a dense openreg tensor, boolean or of the query's dtype";
    }
    if (mask.dim() > 4) {
      return "attn_mask has more than 4 dimensions";
    }
    // Broadcastable to (B, H, L, S), aligned at the last dimension.
    const std::vector<int64_t> full = {dim == 4 ? query.size(0) : 1, q_heads, query.size(-2),
                                       key.size(-2)};
    for (int64_t d = 1; d <= mask.dim(); ++d) {
      const int64_t m = mask.size(-d);
      if (m != 1 && m != full[4 - d]) {
        return "attn_mask does not broadcast to (batch, heads, L, S)";
      }
    }
  }
  return nullptr;
}

}  // namespace attention

namespace {

using at::Tensor;

// The sizes of one call, with 3-D inputs read as a batch of one.
struct SdpaShape {
  int64_t batch;
  int64_t q_heads;
  int64_t kv_heads;
  int64_t L;
  int64_t S;
  int64_t E;
  int64_t Ev;
  bool three_d;

  int64_t groups() const {
    return q_heads / kv_heads;
  }
};

SdpaShape shape_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  const bool three_d = q.dim() == 3;
  return SdpaShape{three_d ? 1 : q.size(0),
                   q.size(-3),
                   k.size(-3),
                   q.size(-2),
                   k.size(-2),
                   q.size(-1),
                   v.size(-1),
                   three_d};
}

// A host view of `t` as 4-D (B, H, rows, cols): a leading 1 added to 3-D ones,
// leading ones to masks of fewer dimensions.
Tensor host4(const Tensor& t) {
  Tensor h = host_view(t);
  while (h.dim() < 4) {
    h = h.unsqueeze(0);
  }
  return h;
}

std::optional<Tensor> host_mask(const std::optional<Tensor>& mask) {
  if (!mask.has_value() || !mask->defined()) {
    return std::nullopt;
  }
  return host4(*mask);
}

// `t` with unit stride along its last dimension, as CPU's flash kernel reads
// rows (a copy on the host when it is not).
Tensor unit_rows(const Tensor& t) {
  return t.size(-1) > 1 && t.stride(-1) != 1 ? t.contiguous() : t;
}

std::optional<Tensor> unit_rows(const std::optional<Tensor>& t) {
  return t.has_value() ? std::optional<Tensor>(unit_rows(*t)) : std::nullopt;
}

// Key or value heads repeated for grouped-query attention: query head h reads
// key head h / groups, as the math path's repeat_interleave.
Tensor repeat_heads(const Tensor& kv, int64_t groups) {
  return groups == 1 ? kv : kv.repeat_interleave(groups, 1);
}

// A gradient of repeated heads (B, H * groups, S, E) summed back to (B, H, S, E).
Tensor sum_heads(const Tensor& grad, int64_t groups) {
  if (groups == 1) {
    return grad;
  }
  return grad.unflatten(1, {grad.size(1) / groups, groups}).sum(2);
}

// An openreg tensor of `sizes` whose strides order the dimensions as
// `like`'s do (PyTorch's meta function for the op, alloc_with_matching_layout).
Tensor empty_with_layout_of(const Tensor& like, c10::IntArrayRef sizes) {
  const int64_t n = like.dim();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Outermost first: larger strides first, ties by position.
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  std::vector<int64_t> strides(n);
  int64_t running = 1;
  for (int64_t i = n - 1; i >= 0; --i) {
    strides[order[i]] = running;
    running *= std::max<int64_t>(sizes[order[i]], 1);
  }
  return at::empty_strided(sizes, strides, like.options());
}

// Writes a host result into a device tensor of the same shape.
void store(const Tensor& device, const Tensor& host) {
  host_view(device).copy_(host.reshape(device.sizes()));
}

double scale_of(std::optional<double> scale, int64_t head_dim) {
  return scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

// --- dropout ---------------------------------------------------------------------
// Note [Attention dropout as the CPU draws it]
// CPU's scaled_dot_product_attention with dropout takes its math path: the
// query times sqrt(scale) (16-bit inputs in float), times the key transposed
// times sqrt(scale) (heads repeated for grouped queries), plus the additive
// mask (a boolean or causal one as 0 and -inf), _safe_softmax over the keys,
// then at::dropout, which on the CPU draws a float tensor shaped like the
// probabilities with bernoulli_(1 - p) from the CPU's default generator,
// divides it by 1 - p and multiplies the probabilities by it, and last the
// product with the value. openreg's kernel runs exactly these ATen operations
// in this order on host views (math_path below), so every rounding is the
// CPU's, and draws the noise with the CPU engine of openreg's generator (Note
// [Dropout with openreg's generator] in Dropout.cpp), which torch.manual_seed
// seeds as it seeds the CPU's: after the same seed, outputs and gradients
// equal the CPU's bit for bit. The backward applies the math path's
// derivatives (those autograd applies on the CPU) and needs the same noise
// again: the forward keeps the engine's state from before its draw (a copy of
// the generator) in the storage of the philox_seed tensor it returns, whose
// value is the generator's seed; autograd keeps that tensor for the backward,
// which draws the noise again from another copy of the state. The live
// generator is locked across the draw, so no other draw interleaves.

// The scalar philox_seed tensor and the generator state it carries.
struct DropoutStart {
  int64_t seed;
  at::Generator engine;
};

void free_dropout_start(void* start) {
  delete static_cast<DropoutStart*>(start);
}

Tensor philox_seed_holding(at::Generator start) {
  int64_t seed = 0;
  const uint64_t current = start.current_seed();
  static_assert(sizeof(seed) == sizeof(current));
  std::memcpy(&seed, &current, sizeof(seed));
  auto* holder = new DropoutStart{seed, std::move(start)};
  c10::DataPtr data(&holder->seed, holder, &free_dropout_start, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), sizeof(int64_t), std::move(data),
                       /*allocator=*/nullptr, /*resizable=*/false);
  Tensor out = at::detail::make_tensor<c10::TensorImpl>(std::move(storage),
                                                        c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                        caffe2::TypeMeta::Make<int64_t>());
  out.unsafeGetTensorImpl()->set_sizes_contiguous({});
  return out;
}

// A scalar philox_seed or philox_offset that carries no generator state.
Tensor plain_seed(int64_t value) {
  return at::scalar_tensor(value, at::TensorOptions().dtype(at::kLong));
}

// The generator state a forward kept in `philox_seed`.
const at::Generator& dropout_start(const Tensor& philox_seed) {
  const bool ours = philox_seed.defined() && philox_seed.has_storage() &&
                    philox_seed.storage().data_ptr().get_deleter() == &free_dropout_start;
  TORCH_CHECK(ours,
              "_scaled_dot_product_fused_attention_overrideable_backward on openreg with dropout "
              "needs the philox_seed tensor its forward returned: it holds the state of openreg's "
              "generator the dropout mask was drawn from (Note [Attention dropout as the CPU "
              "draws it])");
  return static_cast<DropoutStart*>(philox_seed.storage().data_ptr().get_context())->engine;
}

// The CPU's dropout noise for probabilities `probs`: bernoulli(1 - p) divided
// by 1 - p, drawn with `engine` (which it advances).
Tensor noise_from(const Tensor& probs, double p, const at::Generator& engine) {
  Tensor noise = at::empty_like(probs).bernoulli_(1.0 - p, engine);
  return noise.div_(1.0 - p);
}

// The forward's noise, drawn from openreg's generator of `device`, and the
// generator's state before the draw.
std::pair<Tensor, at::Generator> draw_noise(const Tensor& probs, double p,
                                            c10::DeviceIndex device) {
  at::Generator engine = engine_for(std::nullopt, device);
  std::lock_guard<std::mutex> lock(engine.mutex());
  at::Generator start = engine.clone();
  at::Generator work = start.clone();
  Tensor noise = noise_from(probs, p, work);
  engine.set_state(work.get_state());
  return {std::move(noise), std::move(start)};
}

// The intermediates of CPU's math path (Note [Attention dropout as the CPU
// draws it]), on host tensors: 16-bit inputs computed in float, key and value
// heads repeated for grouped queries.
struct MathPath {
  double factor = 1.0;  // sqrt(|scale|); the query's is negated for a negative scale
  bool negative = false;
  Tensor query;  // query * (+-factor)
  Tensor key_t;  // key^T * factor
  Tensor value;
  Tensor scores;  // query @ key_t + mask
  Tensor probs;   // _safe_softmax(scores)
};

Tensor in_opmath(const Tensor& t) {
  const auto dtype = t.scalar_type();
  return dtype == at::kHalf || dtype == at::kBFloat16 ? t.to(at::kFloat) : t;
}

MathPath math_path(const Tensor& q, const Tensor& k, const Tensor& v,
                   const std::optional<Tensor>& mask, bool is_causal, std::optional<double> scale,
                   const SdpaShape& s) {
  MathPath m;
  m.negative = scale.has_value() && *scale < 0.0;
  m.factor = std::sqrt(m.negative ? -*scale : scale_of(scale, s.E));
  m.query = in_opmath(q) * (m.negative ? 0.0 - m.factor : m.factor);
  m.key_t = repeat_heads(in_opmath(k), s.groups()).transpose(-2, -1) * m.factor;
  m.value = repeat_heads(in_opmath(v), s.groups());
  m.scores = at::matmul(m.query, m.key_t);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    const Tensor allowed = at::ones({s.L, s.S}, at::TensorOptions().dtype(at::kBool)).tril();
    m.scores.add_(
        at::zeros({s.L, s.S}, m.query.options()).masked_fill_(allowed.logical_not(), neg_inf));
  } else if (mask.has_value()) {
    if (mask->scalar_type() == at::kBool) {
      m.scores.add_(
          at::zeros(mask->sizes(), q.options()).masked_fill_(mask->logical_not(), neg_inf));
    } else {
      m.scores.add_(*mask);
    }
  }
  m.probs = at::_safe_softmax(m.scores, -1);
  return m;
}

// --- the explicit path ----------------------------------------------------------

// Scaled scores q k^T * scale with the causal or given mask applied, in the
// opmath dtype: (B, Hq, L, S). k is already repeated to the query's heads.
Tensor scores(const Tensor& q, const Tensor& k, const std::optional<Tensor>& mask, bool is_causal,
              double scale, const SdpaShape& s, c10::ScalarType opmath) {
  Tensor out = at::matmul(q.to(opmath), k.to(opmath).transpose(-2, -1)).mul_(scale);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    const Tensor allowed = at::ones({s.L, s.S}, at::TensorOptions().dtype(at::kBool)).tril();
    out.masked_fill_(allowed.logical_not(), neg_inf);
  }
  if (mask.has_value()) {
    if (mask->scalar_type() == at::kBool) {
      out.masked_fill_(mask->logical_not(), neg_inf);
    } else {
      out.add_(mask->to(opmath));
    }
  }
  return out;
}

// Probabilities exp(scores - lse); rows that mask every key are 0 (as the math
// path's safe softmax gives), not NaN.
Tensor probabilities(const Tensor& scores, const Tensor& lse) {
  Tensor p = at::exp(scores - lse.unsqueeze(-1));
  return p.masked_fill_(lse.isneginf().unsqueeze(-1), 0.0);
}

// A mask gradient summed over the dimensions the mask broadcast along, in the
// mask's own shape.
Tensor reduce_to(const Tensor& grad, c10::IntArrayRef mask_sizes) {
  const int64_t lead = grad.dim() - static_cast<int64_t>(mask_sizes.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead || (mask_sizes[d - lead] == 1 && grad.size(d) != 1)) {
      dims.push_back(d);
    }
  }
  Tensor out = dims.empty() ? grad : grad.sum(dims, /*keepdim=*/true);
  return out.reshape(mask_sizes);
}

// Whether CPU's flash kernel runs this call: it has no dropout, needs equal
// head dimensions, and returns no mask gradient.
bool flash_runs(const SdpaShape& s, double dropout_p, bool mask_grad) {
  return dropout_p == 0.0 && s.E == s.Ev && !mask_grad;
}

using ForwardResult =
    std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor>;

ForwardResult fused_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                              const std::optional<Tensor>& attn_bias, double dropout_p,
                              bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  // The op is not told about grouping: a head count multiple of the key's is
  // grouped-query attention (Note [Fused attention on openreg]).
  const char* reason = attention::unsupported(query, key, value, attn_bias, dropout_p, is_causal,
                                              /*enable_gqa=*/true);
  TORCH_CHECK(reason == nullptr,
              "_scaled_dot_product_fused_attention_overrideable on openreg: ", reason,
              "; call torch.nn.functional.scaled_dot_product_attention, which takes the math "
              "path for such arguments");
  const SdpaShape s = shape_of(query, key, value);
  const double sc = scale_of(scale, s.E);
  const auto opmath = at::toOpMathType(query.scalar_type());

  std::vector<int64_t> out_sizes = query.sizes().vec();
  out_sizes.back() = s.Ev;
  Tensor out = empty_with_layout_of(query, out_sizes);
  Tensor lse = at::empty({s.batch, s.q_heads, s.L}, query.options().dtype(at::kFloat));

  const Tensor q = host4(query);
  const std::optional<Tensor> mask = host_mask(attn_bias);

  Tensor seed = plain_seed(0);
  Tensor debug_mask;
  if (dropout_p > 0.0) {
    // Note [Attention dropout as the CPU draws it]
    const MathPath m = math_path(q, host4(key), host4(value), mask, is_causal, scale, s);
    auto [noise, start] = draw_noise(m.probs, dropout_p, query.device().index());
    store(out, at::matmul(m.probs * noise, m.value));
    store(lse, at::logsumexp(m.scores, -1));
    seed = philox_seed_holding(std::move(start));
    if (return_debug_mask) {
      debug_mask = at::empty(noise.sizes(), query.options().dtype(at::kBool));
      store(debug_mask, noise.ne(0));
    }
    return {out,  lse,           Tensor(),  Tensor(), c10::SymInt(s.L), c10::SymInt(s.S),
            seed, plain_seed(0), debug_mask};
  }
  const Tensor k = repeat_heads(host4(key), s.groups());
  const Tensor v = repeat_heads(host4(value), s.groups());
  if (flash_runs(s, dropout_p, /*mask_grad=*/false)) {
    auto [o, l] = at::_scaled_dot_product_flash_attention_for_cpu(
        unit_rows(q), unit_rows(k), unit_rows(v), 0.0, is_causal, unit_rows(mask), sc);
    store(out, o);
    store(lse, l);
  } else {
    const Tensor sco = scores(q, k, mask, is_causal, sc, s, opmath);
    const Tensor l = at::logsumexp(sco, -1);
    store(out, at::matmul(probabilities(sco, l), v.to(opmath)));
    store(lse, l);
  }
  return {out,  lse,           Tensor(), Tensor(), c10::SymInt(s.L), c10::SymInt(s.S),
          seed, plain_seed(0), Tensor()};
}

// The gradients of the math path with dropout (Note [Attention dropout as the
// CPU draws it]): the derivatives autograd takes through the CPU's math path,
// in its order. Returns (query, key, value, scores) gradients, key and value
// ones with the query's heads.
std::array<Tensor, 4> dropout_gradients(const Tensor& go, const MathPath& m, const Tensor& noise) {
  const Tensor g = in_opmath(go);
  const Tensor grad_value = at::matmul((m.probs * noise).transpose(-2, -1), g);
  const Tensor grad_probs = at::matmul(g, m.value.transpose(-2, -1)) * noise;
  const Tensor grad_scores =
      at::_softmax_backward_data(grad_probs, m.probs, -1, m.probs.scalar_type());
  const Tensor grad_query =
      at::matmul(grad_scores, m.key_t.transpose(-2, -1)) * (m.negative ? 0.0 - m.factor : m.factor);
  const Tensor grad_key =
      (at::matmul(m.query.transpose(-2, -1), grad_scores) * m.factor).transpose(-2, -1);
  return {grad_query, grad_key, grad_value, grad_scores};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> fused_attention_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const Tensor& out,
    const Tensor& logsumexp, const Tensor& /*cum_seq_q*/, const Tensor& /*cum_seq_k*/,
    c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p, bool is_causal,
    const Tensor& philox_seed, const Tensor& /*philox_offset*/, std::optional<double> scale) {
  const std::optional<Tensor> bias =
      attn_bias.defined() ? std::optional<Tensor>(attn_bias) : std::nullopt;
  const char* reason = attention::unsupported(query, key, value, bias, dropout_p, is_causal,
                                              /*enable_gqa=*/true);
  TORCH_CHECK(reason == nullptr,
              "_scaled_dot_product_fused_attention_overrideable_backward on openreg: ", reason);
  const SdpaShape s = shape_of(query, key, value);
  const double sc = scale_of(scale, s.E);
  const auto opmath = at::toOpMathType(query.scalar_type());
  const bool mask_grad = grad_input_mask[3] && bias.has_value() && bias->is_floating_point();

  const Tensor q = host4(query);
  const std::optional<Tensor> mask = host_mask(bias);
  const Tensor go = host4(grad_out);

  Tensor gq;
  Tensor gk;
  Tensor gv;
  Tensor gmask;
  // The log-sum-exp is float32 (as PyTorch's meta function for the op says),
  // which CPU's float64 kernel cannot take: float64 takes the explicit path,
  // which recomputes it.
  const bool float64 = query.scalar_type() == at::kDouble;
  if (dropout_p > 0.0) {
    // Note [Attention dropout as the CPU draws it]: the forward's noise again.
    const MathPath m = math_path(q, host4(key), host4(value), mask, is_causal, scale, s);
    const Tensor noise = noise_from(m.probs, dropout_p, dropout_start(philox_seed).clone());
    const std::array<Tensor, 4> grads = dropout_gradients(go, m, noise);
    gq = grads[0];
    gk = grads[1];
    gv = grads[2];
    if (mask_grad) {
      gmask = at::empty(bias->sizes(), bias->options());
      store(gmask, reduce_to(grads[3], bias->sizes()).to(bias->scalar_type()));
    }
  } else if (flash_runs(s, dropout_p, mask_grad) && !float64) {
    const Tensor k = repeat_heads(host4(key), s.groups());
    const Tensor v = repeat_heads(host4(value), s.groups());
    std::tie(gq, gk, gv) = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        unit_rows(go), unit_rows(q), unit_rows(k), unit_rows(v), unit_rows(host4(out)),
        host_view(logsumexp), 0.0, is_causal, unit_rows(mask), sc);
  } else {
    const Tensor k = repeat_heads(host4(key), s.groups());
    const Tensor v = repeat_heads(host4(value), s.groups());
    const Tensor sco = scores(q, k, mask, is_causal, sc, s, opmath);
    // The probabilities from these very scores (not the forward's
    // log-sum-exp, which CPU's kernel computed in another order): the
    // gradient is then that of exactly this softmax.
    const Tensor p = probabilities(sco, at::logsumexp(sco, -1));
    const Tensor g = go.to(opmath);
    gv = at::matmul(p.transpose(-2, -1), g);
    const Tensor gp = at::matmul(g, v.to(opmath).transpose(-2, -1));
    // Softmax backward: dS = P * (dP - rowsum(dP * P)).
    const Tensor gs = p * (gp - (gp * p).sum(-1, /*keepdim=*/true));
    gq = at::matmul(gs, k.to(opmath)).mul_(sc);
    gk = at::matmul(gs.transpose(-2, -1), q.to(opmath)).mul_(sc);
    if (mask_grad) {
      gmask = at::empty(bias->sizes(), bias->options());
      store(gmask, reduce_to(gs, bias->sizes()).to(bias->scalar_type()));
    }
  }
  Tensor grad_q = at::empty_like(query);
  Tensor grad_k = at::empty_like(key);
  Tensor grad_v = at::empty_like(value);
  store(grad_q, gq);
  store(grad_k, sum_heads(gk, s.groups()));
  store(grad_v, sum_heads(gv, s.groups()));
  return {grad_q, grad_k, grad_v, gmask};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "_scaled_dot_product_fused_attention_overrideable", fused_attention);
  OPENREG_IMPL(m, "_scaled_dot_product_fused_attention_overrideable_backward",
               fused_attention_backward);
}

}  // namespace openreg
