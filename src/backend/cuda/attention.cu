// CUDA scaled_dot_product_attention, forward and backward, built from cuBLASLt
// products and row kernels: scores = q k^T (one batched product), then one
// block per query row applies scale, mask and causality, takes the softmax with
// its logsumexp and the dropout rule shared with the CPU (attention_math.h: the
// same seed keeps the same scores), then out = P v. Backward recomputes the
// scores from q, k and the saved logsumexp. The scores of a chunk of heads are
// held at once (at most score_budget() bytes, 512 MiB by default): memory is
// quadratic in the sequence length per head, so a call whose single head's
// scores exceed the budget goes to the fused kernels instead (attention_fused.cu,
// memory linear in the sequence length; use_fused in attention_rows.h decides).
// bfloat16 and float16 calls take their products on the tensor cores: 16-bit operands, float32
// scores and row math, the probabilities and score gradients rounded to 16 bits for the products
// after them (forward_t's note); out and lse are float32 (AttentionAttrs' contract).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/attention_float.h"
#include "backend/cuda/attention_rows.h"
#include "backend/cuda/device/block_reduce.cuh"
#include "backend/cuda/gemm.h"
#include "core/tensor_util.h"

namespace kiln::backend::cuda {
namespace {

inline constexpr int kRowThreads = 128;

// The composed path's types: Acc for the scores and the row math, In for q, k, v. They are
// equal for float32 and float64. For 16-bit inputs Acc is float: the products take 16-bit
// operands (the probabilities and the score gradients are rounded to In on the way, as flash
// attention's are) on the tensor cores and accumulate in float32 into float32 scores.

// One block per row of the scores [B, L, S]: softmax (with dropout applied) into probs, lse.
// probs may be the scores themselves (In == Acc): each element is read and then written by one
// thread.
template <class Acc, class In>
__global__ void softmax_rows(Rows R, const Acc* scores, Acc* lse, In* probs) {
  __shared__ Acc shared[kRowThreads / kWarp];
  for (int64_t local = blockIdx.x; local < R.rows; local += gridDim.x) {  // the same for the whole block
    const int64_t row = R.b0 * R.L + local, b = row / R.L, i = row % R.L;
    const Acc* s = scores + local * R.S;
    In* p_row = probs + local * R.S;
    const int64_t moff = R.mask.base ? R.mask.row_offset(b, i) : 0;
    Acc m = -INFINITY;
    for (int64_t j = threadIdx.x; j < R.S; j += blockDim.x) m = MaxOp{}(m, masked_score(R, s[j], i, j, moff));
    m = block_reduce(m, MaxOp{}, Acc(-INFINITY), shared);
    Acc l = 0;
    if (m != Acc(-INFINITY))
      for (int64_t j = threadIdx.x; j < R.S; j += blockDim.x) l += exp(masked_score(R, s[j], i, j, moff) - m);
    l = block_reduce(l, SumOp{}, Acc(0), shared);
    // Every key masked: zeros, and +inf so that backward's exp(s - lse) is 0
    // (the CPU's rule).
    const Acc row_lse = l == Acc(0) ? Acc(INFINITY) : m + log(l);
    for (int64_t j = threadIdx.x; j < R.S; j += blockDim.x) {
      Acc p = l == Acc(0) ? Acc(0) : exp(masked_score(R, s[j], i, j, moff) - row_lse);
      if (R.drop.on)
        p = R.drop.keep(static_cast<uint64_t>(row * R.S + j)) ? p * static_cast<Acc>(R.drop.keep_mul) : Acc(0);
      p_row[j] = static_cast<In>(p);
    }
    if (threadIdx.x == 0) lse[local] = row_lse;
  }
}

// Backward, per row: from raw scores s recompute P = exp(masked s - lse) in place, and with
// write_pd the products' operand P_drop (P with dropout applied) in In to pd; without it the
// caller uses s itself, which then holds P.
template <class Acc, class In>
__global__ void probs_rows(Rows R, Acc* s_all, const Acc* lse, In* pd_all, bool write_pd) {
  for (int64_t local = blockIdx.x; local < R.rows; local += gridDim.x) {
    const int64_t row = R.b0 * R.L + local, b = row / R.L, i = row % R.L;
    Acc* s = s_all + local * R.S;
    const int64_t moff = R.mask.base ? R.mask.row_offset(b, i) : 0;
    const Acc row_lse = lse[local];
    for (int64_t j = threadIdx.x; j < R.S; j += blockDim.x) {
      const Acc p = row_lse == Acc(INFINITY) ? Acc(0) : exp(masked_score(R, s[j], i, j, moff) - row_lse);
      s[j] = p;
      if (!write_pd) continue;
      const bool kept = !R.drop.on || R.drop.keep(static_cast<uint64_t>(row * R.S + j));
      pd_all[local * R.S + j] = static_cast<In>(kept ? p * static_cast<Acc>(R.drop.keep_mul) : Acc(0));
    }
  }
}

// dS = scale * P * (dP_drop * Z * keep_mul - D) from dp into ds (ds may be dp itself), with
// D = rowsum(dO * O).
template <class Acc, class In>
__global__ void score_grad_rows(Rows R, const Acc* p_all, const Acc* dp_all, const In* go, const Acc* out, int64_t Ev,
                                In* ds_all) {
  __shared__ Acc shared[kRowThreads / kWarp];
  for (int64_t local = blockIdx.x; local < R.rows; local += gridDim.x) {
    const int64_t row = R.b0 * R.L + local;
    Acc d = 0;
    for (int64_t e = threadIdx.x; e < Ev; e += blockDim.x)
      d += static_cast<Acc>(go[local * Ev + e]) * out[local * Ev + e];
    d = block_reduce(d, SumOp{}, Acc(0), shared);
    const Acc* p = p_all + local * R.S;
    const Acc* dp = dp_all + local * R.S;
    In* ds = ds_all + local * R.S;
    for (int64_t j = threadIdx.x; j < R.S; j += blockDim.x) {
      Acc g = dp[j];
      if (R.drop.on)
        g = R.drop.keep(static_cast<uint64_t>(row * R.S + j)) ? g * static_cast<Acc>(R.drop.keep_mul) : Acc(0);
      ds[j] = static_cast<In>(static_cast<Acc>(R.scale) * p[j] * (g - d));
    }
  }
}

// Blocks for a row kernel: one per row, up to 2^20 (then each block takes
// several).
unsigned row_grid(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t{1} << 20)); }

constexpr ScalarType acc_dtype(ScalarType t) { return t == kFloat64 ? kFloat64 : kFloat32; }

template <class Acc, class In>
void forward_t(KernelArgs& a, int64_t budget) {
  const auto& at = *static_cast<const AttentionAttrs*>(a.attrs);
  const Tensor &q = a.inputs[0], &k = a.inputs[1], &v = a.inputs[2];
  const Tensor* mask = at.has_mask ? &a.inputs[3] : nullptr;
  cudaStream_t stream = stream_of(a);
  const int64_t Bt = batch_numel(q), L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  const Tensor q3 = batched(q, Bt), k3 = batched(k, Bt), v3 = batched(v, Bt);
  const Tensor out3 = a.outputs[0].view({Bt, L, Ev}), lse2 = a.outputs[1].view({Bt, L});
  const int64_t cb = chunk_batches(Bt, L, S, score_bytes(q.dtype(), false, false), budget);
  Tensor buffer = make_empty({cb, L, S}, acc_dtype(q.dtype()), q.device());
  Tensor probs_buffer = std::is_same_v<Acc, In> ? buffer : make_empty({cb, L, S}, q.dtype(), q.device());
  Rows R = make_rows(at, q, k, mask);
  for (int64_t b0 = 0; b0 < Bt; b0 += cb) {
    const int64_t nb = std::min(cb, Bt - b0);
    const Tensor scores = buffer.narrow(0, 0, nb), probs = probs_buffer.narrow(0, 0, nb);
    if (S == 0 || E == 0)
      KILN_CUDA_CHECK(cudaMemsetAsync(scores.data_ptr(), 0, scores.nbytes(), stream));
    else
      gemm(q3.narrow(0, b0, nb), k3.narrow(0, b0, nb).transpose(1, 2), scores, stream);
    R.b0 = b0, R.rows = nb * L;
    if (L > 0) {
      softmax_rows<Acc, In><<<row_grid(R.rows), kRowThreads, 0, stream>>>(
          R, scores.data_ptr<Acc>(), lse2.narrow(0, b0, nb).data_ptr<Acc>(), probs.data_ptr<In>());
      KILN_CUDA_LAUNCHED("scaled_dot_product_attention softmax");
    }
    gemm(probs, v3.narrow(0, b0, nb), out3.narrow(0, b0, nb), stream);
  }
}

template <class Acc, class In>
void backward_t(KernelArgs& a, int64_t budget) {
  constexpr bool kSame = std::is_same_v<Acc, In>;
  const auto& at = *static_cast<const AttentionAttrs*>(a.attrs);
  const Tensor &q = a.inputs[0], &k = a.inputs[1], &v = a.inputs[2];
  const Tensor* mask = at.has_mask ? &a.inputs[3] : nullptr;
  const size_t base = at.has_mask ? 4 : 3;
  const Tensor &out = a.inputs[base], &lse = a.inputs[base + 1], &go = a.inputs[base + 2];
  cudaStream_t stream = stream_of(a);
  const int64_t Bt = batch_numel(q), L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  Rows R = make_rows(at, q, k, mask);
  const Tensor q3 = batched(q, Bt), k3 = batched(k, Bt), v3 = batched(v, Bt);
  const Tensor go3 = go.is_contiguous() ? go.view({Bt, L, Ev}) : go.contiguous().view({Bt, L, Ev});
  const Tensor out3 = out.view({Bt, L, Ev}), lse2 = lse.view({Bt, L});
  const Tensor gq = a.outputs[0].view({Bt, L, E}), gk = a.outputs[1].view({Bt, S, E}),
               gv = a.outputs[2].view({Bt, S, Ev});
  const int64_t cb = chunk_batches(Bt, L, S, score_bytes(q.dtype(), true, R.drop.on), budget);
  const ScalarType acc = acc_dtype(q.dtype());
  // p: P (Acc); dp: dP_drop (Acc); pd: the products' P_drop in In, later dS in In (for In ==
  // Acc: p itself without dropout, and dS in place over dp).
  const Tensor p_buf = make_empty({cb, L, S}, acc, q.device()), dp_buf = make_empty({cb, L, S}, acc, q.device());
  const bool write_pd = !kSame || R.drop.on;
  const Tensor pd_buf = write_pd ? make_empty({cb, L, S}, q.dtype(), q.device()) : p_buf;
  const Tensor& ds_buf = kSame ? dp_buf : pd_buf;
  for (int64_t b0 = 0; b0 < Bt; b0 += cb) {
    const int64_t nb = std::min(cb, Bt - b0);
    const Tensor p = p_buf.narrow(0, 0, nb), pd = pd_buf.narrow(0, 0, nb), dp = dp_buf.narrow(0, 0, nb),
                 ds = ds_buf.narrow(0, 0, nb);
    const Tensor qc = q3.narrow(0, b0, nb), kc = k3.narrow(0, b0, nb), vc = v3.narrow(0, b0, nb);
    const Tensor goc = go3.narrow(0, b0, nb);
    if (E == 0)
      KILN_CUDA_CHECK(cudaMemsetAsync(p.data_ptr(), 0, p.nbytes(), stream));
    else
      gemm(qc, kc.transpose(1, 2), p, stream);
    R.b0 = b0, R.rows = nb * L;
    const unsigned rows = row_grid(R.rows);
    if (R.rows > 0) {
      probs_rows<Acc, In><<<rows, kRowThreads, 0, stream>>>(
          R, p.data_ptr<Acc>(), lse2.narrow(0, b0, nb).data_ptr<Acc>(), pd.data_ptr<In>(), write_pd);
      KILN_CUDA_LAUNCHED("scaled_dot_product_attention backward probabilities");
    }
    gemm(pd.transpose(1, 2), goc, gv.narrow(0, b0, nb), stream);  // dV = P_drop^T dO
    gemm(goc, vc.transpose(1, 2), dp, stream);                    // dP_drop = dO V^T
    if (R.rows > 0) {
      score_grad_rows<Acc, In>
          <<<rows, kRowThreads, 0, stream>>>(R, p.data_ptr<Acc>(), dp.data_ptr<Acc>(), goc.data_ptr<In>(),
                                             out3.narrow(0, b0, nb).data_ptr<Acc>(), Ev, ds.data_ptr<In>());
      KILN_CUDA_LAUNCHED("scaled_dot_product_attention backward scores");
    }
    gemm(ds, kc, gq.narrow(0, b0, nb), stream);                  // dQ = dS K
    gemm(ds.transpose(1, 2), qc, gk.narrow(0, b0, nb), stream);  // dK = dS^T Q
  }
}

bool supports(const KernelArgs& a) {
  const ScalarType t = a.inputs[0].dtype();
  const int64_t nb = a.inputs[0].dim() - 2;
  return (t == kFloat32 || t == kFloat64 || t == kBFloat16 || t == kFloat16) && nb <= kMaxBatchDims;
}

// The composed path in its types, or the fused kernels (float32 and float64; 16-bit calls on
// float32 copies).
template <bool kBackward>
void attention(KernelArgs& a) {
  const ScalarType t = a.inputs[0].dtype();
  const int64_t budget = score_budget();
  if (use_fused(*static_cast<const AttentionAttrs*>(a.attrs), a.inputs, budget)) {
    const Kernel fused = kBackward ? fused_attention_backward : fused_attention_forward;
    return t == kFloat32 || t == kFloat64 ? fused(a) : backend::attention_in_float(a, kBackward, fused);
  }
  switch (t) {
    case kFloat64:
      return kBackward ? backward_t<double, double>(a, budget) : forward_t<double, double>(a, budget);
    case kBFloat16:
      return kBackward ? backward_t<float, BFloat16>(a, budget) : forward_t<float, BFloat16>(a, budget);
    case kFloat16:
      return kBackward ? backward_t<float, Half>(a, budget) : forward_t<float, Half>(a, budget);
    default:
      return kBackward ? backward_t<float, float>(a, budget) : forward_t<float, float>(a, budget);
  }
}

KILN_REGISTER_KERNEL_IF(Op::Attention, DeviceType::CUDA, attention<false>, supports);
KILN_REGISTER_KERNEL_IF(Op::AttentionBackward, DeviceType::CUDA, attention<true>, supports);

}  // namespace
}  // namespace kiln::backend::cuda
