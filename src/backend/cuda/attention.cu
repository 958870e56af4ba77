// CUDA scaled_dot_product_attention, forward and backward, built from cuBLASLt
// products and row kernels: scores = q k^T (one batched product), then one
// block per query row applies scale, mask and causality, takes the softmax with
// its logsumexp and the dropout rule shared with the CPU (attention_math.h: the
// same seed keeps the same scores), then out = P v. Backward recomputes the
// scores from q, k and the saved logsumexp. The scores of a chunk of heads are
// held at once (at most kScoreBudget bytes, or one head): memory is quadratic
// in the sequence length per head, so long sequences and calls that would need
// several chunks go to the fused kernels instead (attention_fused.cu, memory
// linear in the sequence length; use_fused in attention_rows.h decides).
#include <algorithm>
#include <cmath>

#include "backend/cuda/attention_rows.h"
#include "backend/cuda/device/block_reduce.cuh"
#include "backend/cuda/gemm.h"
#include "core/tensor_util.h"

namespace kiln::backend::cuda {
namespace {

inline constexpr int kRowThreads = 128;

// One block per row of the scores [B, L, S]: softmax in place (with dropout
// applied), lse.
template <class T>
__global__ void softmax_rows(Rows R, T* scores, T* lse) {
  __shared__ T shared[kRowThreads / kWarp];
  for (int64_t local = blockIdx.x; local < R.rows; local += gridDim.x) {  // the same for the whole block
    const int64_t row = R.b0 * R.L + local, b = row / R.L, i = row % R.L;
    T* s = scores + local * R.S;
    const int64_t moff = R.mask.base ? R.mask.row_offset(b, i) : 0;
    T m = -INFINITY;
    for (int64_t j = threadIdx.x; j < R.S; j += blockDim.x) m = MaxOp{}(m, masked_score(R, s[j], i, j, moff));
    m = block_reduce(m, MaxOp{}, T(-INFINITY), shared);
    T l = 0;
    if (m != T(-INFINITY))
      for (int64_t j = threadIdx.x; j < R.S; j += blockDim.x) l += exp(masked_score(R, s[j], i, j, moff) - m);
    l = block_reduce(l, SumOp{}, T(0), shared);
    // Every key masked: zeros, and +inf so that backward's exp(s - lse) is 0
    // (the CPU's rule).
    const T row_lse = l == T(0) ? T(INFINITY) : m + log(l);
    for (int64_t j = threadIdx.x; j < R.S; j += blockDim.x) {
      T p = l == T(0) ? T(0) : exp(masked_score(R, s[j], i, j, moff) - row_lse);
      if (R.drop.on) p = R.drop.keep(static_cast<uint64_t>(row * R.S + j)) ? p * static_cast<T>(R.drop.keep_mul) : T(0);
      s[j] = p;
    }
    if (threadIdx.x == 0) lse[local] = row_lse;
  }
}

// Backward, per row: from raw scores s recompute P = exp(masked s - lse); with
// dropout write P_drop to pd (else the caller uses s itself, which then holds
// P).
template <class T>
__global__ void probs_rows(Rows R, T* s_all, const T* lse, T* pd_all) {
  for (int64_t local = blockIdx.x; local < R.rows; local += gridDim.x) {
    const int64_t row = R.b0 * R.L + local, b = row / R.L, i = row % R.L;
    T* s = s_all + local * R.S;
    const int64_t moff = R.mask.base ? R.mask.row_offset(b, i) : 0;
    const T row_lse = lse[local];
    for (int64_t j = threadIdx.x; j < R.S; j += blockDim.x) {
      const T p = row_lse == T(INFINITY) ? T(0) : exp(masked_score(R, s[j], i, j, moff) - row_lse);
      s[j] = p;
      if (R.drop.on)
        pd_all[local * R.S + j] =
            R.drop.keep(static_cast<uint64_t>(row * R.S + j)) ? p * static_cast<T>(R.drop.keep_mul) : T(0);
    }
  }
}

// dS = scale * P * (dP_drop * Z * keep_mul - D) in place over dp, D = rowsum(dO
// * O).
template <class T>
__global__ void score_grad_rows(Rows R, const T* p_all, T* dp_all, const T* go, const T* out, int64_t Ev) {
  __shared__ T shared[kRowThreads / kWarp];
  for (int64_t local = blockIdx.x; local < R.rows; local += gridDim.x) {
    const int64_t row = R.b0 * R.L + local;
    T d = 0;
    for (int64_t e = threadIdx.x; e < Ev; e += blockDim.x) d += go[local * Ev + e] * out[local * Ev + e];
    d = block_reduce(d, SumOp{}, T(0), shared);
    const T* p = p_all + local * R.S;
    T* dp = dp_all + local * R.S;
    for (int64_t j = threadIdx.x; j < R.S; j += blockDim.x) {
      T g = dp[j];
      if (R.drop.on) g = R.drop.keep(static_cast<uint64_t>(row * R.S + j)) ? g * static_cast<T>(R.drop.keep_mul) : T(0);
      dp[j] = static_cast<T>(R.scale) * p[j] * (g - d);
    }
  }
}

// Blocks for a row kernel: one per row, up to 2^20 (then each block takes
// several).
unsigned row_grid(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t{1} << 20)); }

template <class T>
void forward_t(KernelArgs& a) {
  const auto& at = *static_cast<const AttentionAttrs*>(a.attrs);
  const Tensor &q = a.inputs[0], &k = a.inputs[1], &v = a.inputs[2];
  const Tensor* mask = at.has_mask ? &a.inputs[3] : nullptr;
  cudaStream_t stream = stream_of(a);
  const int64_t Bt = batch_numel(q), L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  const Tensor q3 = batched(q, Bt), k3 = batched(k, Bt), v3 = batched(v, Bt);
  const Tensor out3 = a.outputs[0].view({Bt, L, Ev}), lse2 = a.outputs[1].view({Bt, L});
  const int64_t cb = chunk_batches(Bt, L, S, 1, sizeof(T));
  Tensor buffer = make_empty({cb, L, S}, q.dtype(), q.device());
  Rows R = make_rows(at, q, k, mask);
  for (int64_t b0 = 0; b0 < Bt; b0 += cb) {
    const int64_t nb = std::min(cb, Bt - b0);
    const Tensor scores = buffer.narrow(0, 0, nb);
    if (S == 0 || E == 0)
      KILN_CUDA_CHECK(cudaMemsetAsync(scores.data_ptr(), 0, scores.nbytes(), stream));
    else
      gemm(q3.narrow(0, b0, nb), k3.narrow(0, b0, nb).transpose(1, 2), scores, stream);
    R.b0 = b0, R.rows = nb * L;
    if (L > 0) {
      softmax_rows<T>
          <<<row_grid(R.rows), kRowThreads, 0, stream>>>(R, scores.data_ptr<T>(), lse2.narrow(0, b0, nb).data_ptr<T>());
      KILN_CUDA_LAUNCHED("scaled_dot_product_attention softmax");
    }
    gemm(scores, v3.narrow(0, b0, nb), out3.narrow(0, b0, nb), stream);
  }
}

template <class T>
void backward_t(KernelArgs& a) {
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
  const int buffers = R.drop.on ? 3 : 2;
  const int64_t cb = chunk_batches(Bt, L, S, buffers, sizeof(T));
  Tensor p_buf = make_empty({cb, L, S}, q.dtype(), q.device()), dp_buf = make_empty({cb, L, S}, q.dtype(), q.device());
  Tensor pd_buf = R.drop.on ? make_empty({cb, L, S}, q.dtype(), q.device()) : p_buf;
  for (int64_t b0 = 0; b0 < Bt; b0 += cb) {
    const int64_t nb = std::min(cb, Bt - b0);
    const Tensor p = p_buf.narrow(0, 0, nb), pd = pd_buf.narrow(0, 0, nb), dp = dp_buf.narrow(0, 0, nb);
    const Tensor qc = q3.narrow(0, b0, nb), kc = k3.narrow(0, b0, nb), vc = v3.narrow(0, b0, nb);
    const Tensor goc = go3.narrow(0, b0, nb);
    if (E == 0)
      KILN_CUDA_CHECK(cudaMemsetAsync(p.data_ptr(), 0, p.nbytes(), stream));
    else
      gemm(qc, kc.transpose(1, 2), p, stream);
    R.b0 = b0, R.rows = nb * L;
    const unsigned rows = row_grid(R.rows);
    if (R.rows > 0) {
      probs_rows<T><<<rows, kRowThreads, 0, stream>>>(R, p.data_ptr<T>(), lse2.narrow(0, b0, nb).data_ptr<T>(),
                                                      pd.data_ptr<T>());
      KILN_CUDA_LAUNCHED("scaled_dot_product_attention backward probabilities");
    }
    gemm(pd.transpose(1, 2), goc, gv.narrow(0, b0, nb),
         stream);                               // dV = P_drop^T dO
    gemm(goc, vc.transpose(1, 2), dp, stream);  // dP_drop = dO V^T
    if (R.rows > 0) {
      score_grad_rows<T><<<rows, kRowThreads, 0, stream>>>(R, p.data_ptr<T>(), dp.data_ptr<T>(), goc.data_ptr<T>(),
                                                           out3.narrow(0, b0, nb).data_ptr<T>(), Ev);
      KILN_CUDA_LAUNCHED("scaled_dot_product_attention backward scores");
    }
    gemm(dp, kc, gq.narrow(0, b0, nb), stream);                  // dQ = dS K
    gemm(dp.transpose(1, 2), qc, gk.narrow(0, b0, nb), stream);  // dK = dS^T Q
  }
}

bool supports(const KernelArgs& a) {
  const ScalarType t = a.inputs[0].dtype();
  const int64_t nb = a.inputs[0].dim() - 2;
  return (t == kFloat32 || t == kFloat64) && nb <= kMaxBatchDims;
}

void attention_forward(KernelArgs& a) {
  if (use_fused(*static_cast<const AttentionAttrs*>(a.attrs), a.inputs)) return fused_attention_forward(a);
  if (a.inputs[0].dtype() == kFloat64) return forward_t<double>(a);
  forward_t<float>(a);
}
void attention_backward(KernelArgs& a) {
  if (use_fused(*static_cast<const AttentionAttrs*>(a.attrs), a.inputs)) return fused_attention_backward(a);
  if (a.inputs[0].dtype() == kFloat64) return backward_t<double>(a);
  backward_t<float>(a);
}

KILN_REGISTER_KERNEL_IF(Op::Attention, DeviceType::CUDA, attention_forward, supports);
KILN_REGISTER_KERNEL_IF(Op::AttentionBackward, DeviceType::CUDA, attention_backward, supports);

}  // namespace
}  // namespace kiln::backend::cuda
