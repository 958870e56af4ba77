// scaled_dot_product_attention: one fused op (tiled online softmax) whose backward recomputes the
// score tiles from q, k, v and the saved logsumexp, so memory stays linear in sequence length.
#include <cmath>

#include "kiln/random.h"
#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;
constexpr const char* kName = "scaled_dot_product_attention";

// The kernels read rows through their stride but want each row's elements adjacent.
Tensor unit_last_stride(const Tensor& t) { return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous(); }

Shape with_rows(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

Shape lead(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// Everything backward needs besides the saved tensors.
struct Plan {
  Shape batch;  // the broadcast leading dims
  ScalarType compute;
  backend::AttentionAttrs attrs;
};

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p) {
  ops::check_defined(q, kName);
  ops::check_defined(k, kName);
  ops::check_defined(v, kName);
  KILN_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, kName,
             "query, key and value need at least 2 dims ([..., L, E], [..., S, E], [..., S, Ev]), got ", q.shape(),
             ", ", k.shape(), " and ", v.shape());
  KILN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), kName,
             "query, key and value must have one dtype, got ", q.dtype(), ", ", k.dtype(), " and ", v.dtype());
  KILN_CHECK(q.is_floating_point(), kName, "expects floating-point query, key and value, got ", q.dtype());
  KILN_CHECK(q.size(-1) == k.size(-1), kName, "query's last dim (E) must equal key's, got query ", q.shape(),
             " and key ", k.shape());
  KILN_CHECK(k.size(-2) == v.size(-2), kName, "key and value must have the same sequence length S (dim -2), got key ",
             k.shape(), " and value ", v.shape());
  KILN_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, kName, "dropout_p must be in [0, 1], got ", dropout_p);
  if (mask.defined())
    KILN_CHECK(mask.dtype() == kBool || mask.dtype() == q.dtype(), kName,
               "attn_mask must be bool or the query's dtype (", q.dtype(), "), got ", mask.dtype());
}

// PyTorch's math path, for a float mask that needs a gradient (a learned position bias): the
// composed ops, whose autograd gives the mask its gradient. The S x S scores are materialised.
// `replay`: the counters a fused call's dropout drew, so that its mask is drawn again (create_graph
// through it), over the scores of the batch q, k and v broadcast to, as the fused kernels draw it.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                          bool is_causal, double scale, ScalarType compute, const GeneratorState* replay = nullptr) {
  ops::AutocastOff off;  // the inputs are cast already: its products run in `compute`, not lowered again
  Tensor scores = matmul(q.to(compute), k.to(compute).transpose(-2, -1)) * scale + mask.to(compute);
  if (is_causal) {
    const int64_t L = q.size(-2), S = k.size(-2);
    scores = scores.masked_fill(triu(ones({L, S}, TensorOptions(kBool).device(q.device())), 1), -INFINITY);
  }
  // A row whose every score is -inf gives zeros (and a zero mask gradient), as the fused path
  // and PyTorch's math path (its _safe_softmax) give, not NaN.
  Tensor p = masked_softmax(scores, ne(scores, -INFINITY), -1);
  // dropout() for p = 1 too (x * 0, no draw), which the fused kernels' scale of 1/(1-p) is not.
  if (dropout_p > 0 && dropout_p < 1 && replay) {
    const Shape batch = broadcast_shapes(broadcast_shapes(lead(q), lead(k), kName), lead(v), kName);
    p = ops::dropout_with(p.expand(with_rows(batch, q.size(-2), k.size(-2))), dropout_p, *replay);
  } else if (dropout_p > 0) {
    p = dropout(p, dropout_p);
  }
  return matmul(p, v.to(compute)).to(q.dtype());
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& mask_in,
                                    double dropout_p, bool is_causal, std::optional<double> scale) {
  // A float mask follows q, k and v into the autocast dtype (a bool one is left alone).
  const Tensor q = ops::autocast_lower(q_in), k = ops::autocast_lower(k_in), v = ops::autocast_lower(v_in),
               attn_mask = ops::autocast_lower(mask_in);
  check_inputs(q, k, v, attn_mask, dropout_p);
  const Device device = attn_mask.defined() ? ops::common_device({&q, &k, &v, &attn_mask}, kName)
                                            : ops::common_device({&q, &k, &v}, kName);
  Shape batch;
  try {
    batch = broadcast_shapes(broadcast_shapes(lead(q), lead(k), kName), lead(v), kName);
  } catch (const Error&) {
    KILN_FAIL(kName, "the leading dims of query ", q.shape(), ", key ", k.shape(), " and value ", v.shape(),
              " do not broadcast");
  }
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  const Shape score_shape = with_rows(batch, L, S);
  if (attn_mask.defined()) {
    bool fits = attn_mask.dim() <= static_cast<int64_t>(score_shape.size());
    if (fits) {
      const int64_t skip = static_cast<int64_t>(score_shape.size()) - attn_mask.dim();
      for (int64_t d = 0; d < attn_mask.dim(); ++d)
        fits = fits && (attn_mask.shape()[d] == 1 || attn_mask.shape()[d] == score_shape[skip + d]);
    }
    KILN_CHECK(fits, kName, "attn_mask of shape ", attn_mask.shape(), " does not broadcast to the scores' shape ",
               score_shape, " (query ", q.shape(), ", key ", k.shape(), ")");
  }

  // An empty sum (E = 0) gives scores of 0 whatever the scale, as in PyTorch: not 0 * inf.
  const double sc = scale ? *scale : E > 0 ? 1.0 / std::sqrt(static_cast<double>(E)) : 1.0;
  const ScalarType compute = q.dtype() == kFloat64 ? kFloat64 : kFloat32;
  if (attn_mask.defined() && attn_mask.dtype() != kBool && autograd::needs_grad({&attn_mask}))
    return composed_attention(q, k, v, attn_mask, dropout_p, is_causal, sc, compute);

  // float16/bfloat16 inputs go to the kernels as they are; out, the logsumexp and a float mask
  // are float32 (each backend computes in float32 where its products do not take 16 bits).
  Plan plan;
  plan.batch = batch;
  plan.compute = compute;
  // The kernels' views of the operands; this op records its own node, so none for these.
  Tensor qc, kc, vc, mc;
  {
    NoGradGuard ng;
    auto prep = [&](const Tensor& t, int64_t rows, int64_t cols) {
      return unit_last_stride(t.expand(with_rows(batch, rows, cols)));
    };
    qc = prep(q, L, E), kc = prep(k, S, E), vc = prep(v, S, Ev);
    if (attn_mask.defined())
      mc = (attn_mask.dtype() == kBool ? attn_mask : ops::cast(attn_mask, plan.compute)).expand(score_shape);
  }

  auto& at = plan.attrs;
  at.scale = sc;
  at.dropout_p = dropout_p;
  at.is_causal = is_causal;
  at.has_mask = mc.defined();
  if (dropout_p > 0) {
    // One draw per call, as dropout(rand(scores)) would take: the same generator state gives
    // the same kept scores as the composite softmax + dropout, on every device.
    const uint64_t n = static_cast<uint64_t>(shape_numel(score_shape));
    const GeneratorState st = detail::reserve_counters((n + 3) / 4);
    at.seed = st.seed, at.offset = st.offset;
  }

  Tensor out = make_empty(with_rows(batch, L, Ev), plan.compute, device);
  Shape lse_shape = batch;
  lse_shape.push_back(L);
  Tensor lse = make_empty(lse_shape, plan.compute, device);  // per query row, kept for backward
  if (out.numel() > 0) {
    std::vector<Tensor> in{qc, kc, vc};
    if (mc.defined()) in.push_back(mc);
    Tensor outs[2] = {out, lse};
    backend::run(Op::Attention, device, in, outs, &at);
  }
  Tensor result;
  {
    NoGradGuard ng;
    result = ops::cast(out, q.dtype());
  }

  if (autograd::needs_grad({&q, &k, &v}))
    autograd::record("ScaledDotProductAttentionBackward", {&q, &k, &v}, result,
                     [sq = SavedTensor(qc), sk = SavedTensor(kc), sv = SavedTensor(vc), sm = SavedTensor(mc),
                      so = SavedTensor(out), sl = SavedTensor(lse), plan, oq = SavedTensor(q), ok = SavedTensor(k),
                      ov = SavedTensor(v), mq = autograd::InputMeta(q),
                      mk = autograd::InputMeta(k), mv = autograd::InputMeta(v)](const Tensor& g) -> TensorList {
                       const char* node = "ScaledDotProductAttentionBackward";
                       Tensor qv = sq.get(node), kv = sk.get(node), vv = sv.get(node), o = so.get(node);
                       if (autograd::is_grad_enabled()) {  // create_graph: the composed op, differentiated
                         Tensor mask;
                         if (sm.defined()) {
                           const Tensor m = sm.get(node);
                           mask = m.dtype() == kBool ? zeros(m.shape(), TensorOptions(plan.compute).device(m.device()))
                                                           .masked_fill(logical_not(m), -INFINITY)
                                                     : m;
                         } else {
                           mask = zeros({}, TensorOptions(plan.compute).device(qv.device()));
                         }
                         // With dropout, the forward's mask drawn again from its counters.
                         const GeneratorState drawn{plan.attrs.seed, plan.attrs.offset};
                         const auto fwd = [&](const std::vector<Tensor>& in) {
                           return composed_attention(in[0], in[1], in[2], mask, plan.attrs.dropout_p, plan.attrs.is_causal,
                                                     plan.attrs.scale, plan.compute, &drawn);
                         };
                         const std::vector<Tensor> r = ops::recomputed_gradients(fwd, {oq.get(node), ok.get(node), ov.get(node)}, g);
                         return {mq(r[0]), mk(r[1]), mv(r[2])};
                       }
                       std::vector<Tensor> in{qv, kv, vv};
                       if (sm.defined()) in.push_back(sm.get(node));
                       in.push_back(o);
                       in.push_back(sl.get(node));
                       in.push_back(unit_last_stride(ops::cast(g, qv.dtype())));
                       Tensor grads[3] = {make_empty(qv.shape(), qv.dtype(), qv.device()),
                                          make_empty(kv.shape(), qv.dtype(), qv.device()),
                                          make_empty(vv.shape(), qv.dtype(), qv.device())};
                       if (o.numel() > 0) backend::run(Op::AttentionBackward, qv.device(), in, grads, &plan.attrs);
                       else
                         for (Tensor& t : grads) t.zero_();
                       return {mq(grads[0]), mk(grads[1]), mv(grads[2])};
                     });
  return result;
}

}  // namespace kiln
