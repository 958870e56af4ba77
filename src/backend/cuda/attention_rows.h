// The math of the CUDA attention kernels as plain C++ (KILN_HOST_DEVICE): the call's geometry
// (MaskView, Dropout, Rows), the masked score and dropout keep test, the fused path's online
// softmax of one query row over a range of keys and its finishing (out, lse), the backward's
// per-key-row (dK, dV) and per-query-row (dQ) sums, and the rule choosing the fused path.
// Rows are read at any stride, so attention_fused.cu runs these over shared-memory tiles and
// tests/test_cuda_attention_rows.cpp over whole rows on the CPU. The host helpers at the end
// (batched views, the composed path's chunking) serve attention.cu and attention_fused.cu.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "backend/attention_math.h"
#include "backend/cuda/float_math.h"
#include "backend/cuda/host_device.h"
#include "backend/dispatch.h"
#include "core/tensor_util.h"

namespace kiln::backend::cuda {

inline constexpr int kMaxBatchDims = 8;
inline constexpr int kMaxHead = 128;  // the largest E and Ev the fused path takes
inline constexpr int kOnlineKeys = 32;  // keys online_keys scores at once (its local score array)
inline constexpr int kBlockRows = 64;  // fused kernels: threads per block, one query (or key) row each
// Fused kernels: rows per shared-memory tile; at E = Ev = 128 a tile pair is 32 KiB (under the
// 48 KiB of dynamic shared memory a launch gets without opting in).
template <class T>
inline constexpr int kTileRows = sizeof(T) == 8 ? 16 : 32;
static_assert(kTileRows<float> <= kOnlineKeys && kTileRows<double> <= kOnlineKeys, "online_keys takes a tile in one chunk");
// The composed path's score bytes at once, by default; score_budget() is the one in force.
inline constexpr int64_t kScoreBudget = int64_t{512} << 20;

// The mask's element offset for score (b, i, j) of the flattened batch b: row_offset + j * cs.
struct MaskView {
  const void* base = nullptr;
  bool is_bool = false;
  int nb = 0;
  int64_t sizes[kMaxBatchDims] = {}, strides[kMaxBatchDims] = {};
  int64_t rs = 0, cs = 0;
  KILN_HOST_DEVICE KILN_CUDA_INLINE int64_t row_offset(int64_t b, int64_t i) const {
    int64_t off = i * rs;
    for (int d = nb - 1; d >= 0; --d) {
      const int64_t q = b / sizes[d];
      off += (b - q * sizes[d]) * strides[d];
      b = q;
    }
    return off;
  }
};

struct Dropout {
  bool on = false;
  uint32_t threshold = 0;
  double keep_mul = 1;
  uint64_t seed = 0, offset = 0;
  // Score n = (b L + i) S + j is kept when word n % 4 of counter offset + n / 4 passes
  // (attention::keep_bits' rule).
  KILN_HOST_DEVICE KILN_CUDA_INLINE bool keep(uint64_t n) const {
    const philox::U32x4 r = philox::philox(seed, offset + (n >> 2));
    return (r.v[n & 3] >> 8) >= threshold;
  }
};

// keep() for runs of neighbouring scores: a counter's four words are computed once.
struct KeepWords {
  uint64_t ctr = ~uint64_t{0};
  philox::U32x4 r{};
  KILN_HOST_DEVICE KILN_CUDA_INLINE bool keep(const Dropout& d, uint64_t n) {
    if ((n >> 2) != ctr) ctr = n >> 2, r = philox::philox(d.seed, d.offset + ctr);
    return (r.v[n & 3] >> 8) >= d.threshold;
  }
};

struct Rows {
  int64_t b0 = 0;    // composed path: the first batch of the chunk a launch covers
  int64_t rows = 0;  // composed path: rows of the chunk
  int64_t L = 0, S = 0;
  double scale = 1;
  bool causal = false;
  MaskView mask;
  Dropout drop;
  KILN_HOST_DEVICE KILN_CUDA_INLINE uint64_t score_index(int64_t b, int64_t i, int64_t j) const {
    return static_cast<uint64_t>((b * L + i) * S + j);
  }
  // Keys a causal query i can see among the n keys from j0 (all n without causality).
  KILN_HOST_DEVICE KILN_CUDA_INLINE int64_t visible(int64_t i, int64_t j0, int64_t n) const {
    return causal ? std::clamp<int64_t>(i - j0 + 1, 0, n) : n;
  }
  // The keys [0, key_end) a block of query rows [i0, i0 + kBlockRows) needs: under causality
  // the later ones are masked for all of its rows.
  KILN_HOST_DEVICE KILN_CUDA_INLINE int64_t key_end(int64_t i0) const {
    return causal ? std::min(S, std::min(L, i0 + kBlockRows)) : S;
  }
  // The queries [query_begin, L) a block of key rows from j0 needs: under causality queries
  // before j0 see none of its keys.
  KILN_HOST_DEVICE KILN_CUDA_INLINE int64_t query_begin(int64_t j0) const { return causal ? std::min(j0, L) : 0; }
};

template <class T>
KILN_HOST_DEVICE KILN_CUDA_INLINE T inf() { return static_cast<T>(INFINITY); }

// Score j of row i (mask offset moff = mask.row_offset(b, i)) from its raw product q_i . k_j:
// scale, mask (bool -> -inf, float added), causality (top-left aligned, as PyTorch).
template <class T>
KILN_HOST_DEVICE KILN_CUDA_INLINE T masked_score(const Rows& R, T dot, int64_t i, int64_t j, int64_t moff) {
  if (R.causal && j > i) return -inf<T>();
  T v = dot * static_cast<T>(R.scale);
  if (R.mask.base) {
    const int64_t o = moff + j * R.mask.cs;
    if (R.mask.is_bool) v = static_cast<const bool*>(R.mask.base)[o] ? v : -inf<T>();
    else v += static_cast<const T*>(R.mask.base)[o];
  }
  return v;
}

template <class T>
KILN_HOST_DEVICE KILN_CUDA_INLINE T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

// The dropout factor of score n: keep_mul when kept, else 0 (1 without dropout).
template <class T>
KILN_HOST_DEVICE KILN_CUDA_INLINE T drop_factor(const Rows& R, KeepWords& kw, uint64_t n) {
  return !R.drop.on ? T(1) : kw.keep(R.drop, n) ? static_cast<T>(R.drop.keep_mul) : T(0);
}

// Keys j0 .. j0 + n: key row t at k + t * krs, its value row at v + t * vrs.
template <class T>
struct KeyRows {
  const T *k = nullptr, *v = nullptr;
  int64_t krs = 0, vrs = 0, j0 = 0, n = 0;
};

// Queries i0 .. i0 + n of one batch for the per-key sums: row t's q, dO, lse, D and mask offset
// (moff may be null without a mask).
template <class T>
struct QueryRows {
  const T *q = nullptr, *go = nullptr, *lse = nullptr, *D = nullptr;
  const int64_t* moff = nullptr;
  int64_t qrs = 0, gors = 0, i0 = 0, n = 0;
};

// A query row's running softmax: max m, sum l (before dropout), out accumulator.
template <class T>
struct OnlineRow {
  T m, l;
  T acc[kMaxHead];
  KILN_HOST_DEVICE KILN_CUDA_INLINE void init(int64_t Ev) {
    m = -inf<T>(), l = 0;
    for (int64_t e = 0; e < Ev; ++e) acc[e] = 0;
  }
};

// Row i of batch b takes keys `keys` into st, kOnlineKeys at a time: a chunk's max rescales l and
// acc once; each probability is summed into l before dropout, then its kept value (times
// keep_mul) weights its value row.
template <class T>
KILN_HOST_DEVICE void online_keys(const Rows& R, int64_t b, int64_t i, int64_t moff, const T* q, int64_t E,
                                  int64_t Ev, const KeyRows<T>& keys, OnlineRow<T>& st) {
  const int64_t n = R.visible(i, keys.j0, keys.n);
  KeepWords kw;
  for (int64_t c0 = 0; c0 < n; c0 += kOnlineKeys) {
    const int nc = static_cast<int>(std::min<int64_t>(kOnlineKeys, n - c0));
    T s[kOnlineKeys];
    T mx = st.m;
    for (int t = 0; t < nc; ++t) {
      const int64_t j = keys.j0 + c0 + t;
      s[t] = masked_score(R, dot(q, keys.k + (c0 + t) * keys.krs, E), i, j, moff);
      mx = s[t] > mx || s[t] != s[t] ? s[t] : mx;  // a NaN wins: the row's out and lse become NaN, as torch's
    }
    if (mx == -inf<T>()) {  // nothing attended yet: the chunk adds 0 x its values (NaN stays NaN)
      for (int t = 0; t < nc; ++t) {
        const T* v = keys.v + (c0 + t) * keys.vrs;
        for (int64_t e = 0; e < Ev; ++e) st.acc[e] += T(0) * v[e];
      }
      continue;
    }
    const T alpha = dev_exp(st.m - mx);  // 0 the first time (m = -inf)
    T sum = 0;
    for (int t = 0; t < nc; ++t) sum += (s[t] = dev_exp(s[t] - mx));
    st.l = st.l * alpha + sum;
    st.m = mx;
    if (alpha != T(1))
      for (int64_t e = 0; e < Ev; ++e) st.acc[e] *= alpha;
    for (int t = 0; t < nc; ++t) {
      // No skip for p = 0 (a masked or dropped key): 0 x a NaN or inf value is NaN, as in the
      // CPU's tile products and torch's.
      const T p = s[t] * drop_factor<T>(R, kw, R.score_index(b, i, keys.j0 + c0 + t));
      const T* v = keys.v + (c0 + t) * keys.vrs;
      for (int64_t e = 0; e < Ev; ++e) st.acc[e] += p * v[e];
    }
  }
}

// out = acc / l and lse = m + log(l); a row with every key masked (l = 0) gives zeros and
// lse = +inf, so that backward's exp(s - lse) is 0 (the CPU's rule).
template <class T>
KILN_HOST_DEVICE KILN_CUDA_INLINE void finish_row(const OnlineRow<T>& st, int64_t Ev, T* out, T* lse) {
  if (st.l == T(0)) {
    for (int64_t e = 0; e < Ev; ++e) out[e] = 0;
    *lse = inf<T>();
    return;
  }
  const T inv = T(1) / st.l;
  for (int64_t e = 0; e < Ev; ++e) out[e] = st.acc[e] * inv;
  *lse = st.m + dev_log(st.l);
}

// Backward's P_ij = exp(score - lse_i): 0 for a masked score and for an empty row (lse = +inf).
template <class T>
KILN_HOST_DEVICE KILN_CUDA_INLINE T prob(const Rows& R, T dot, T lse, int64_t i, int64_t j, int64_t moff) {
  return lse == inf<T>() ? T(0) : dev_exp(masked_score(R, dot, i, j, moff) - lse);
}

// D_i = dO_i . O_i: the softmax backward's correction for query row i.
template <class T>
KILN_HOST_DEVICE KILN_CUDA_INLINE T row_D(const T* go, const T* o, int64_t Ev) { return dot(go, o, Ev); }

// Key row j (k_j, v_j) of batch b over queries `qr`: dv += P_drop_ij dO_i and
// dk += dS_ij q_i with dS_ij = P_ij (dP_ij - D_i), dP_ij = (dO_i . v_j) x dropout factor.
// dk still lacks the factor scale (scale_row).
template <class T>
KILN_HOST_DEVICE void key_row_grads(const Rows& R, int64_t b, int64_t j, const T* kj, const T* vj, int64_t E,
                                    int64_t Ev, const QueryRows<T>& qr, T* dk, T* dv) {
  KeepWords kw;
  const int64_t t0 = R.causal ? std::clamp<int64_t>(j - qr.i0, 0, qr.n) : 0;  // queries i < j skip key j
  for (int64_t t = t0; t < qr.n; ++t) {
    const int64_t i = qr.i0 + t;
    const T* q = qr.q + t * qr.qrs;
    const T p = prob(R, dot(q, kj, E), qr.lse[t], i, j, qr.moff ? qr.moff[t] : 0);
    const T* go = qr.go + t * qr.gors;
    const T f = drop_factor<T>(R, kw, R.score_index(b, i, j));
    const T dp = dot(go, vj, Ev) * f, pd = p * f;
    for (int64_t e = 0; e < Ev; ++e) dv[e] += pd * go[e];  // p = 0 too: a NaN in dO reaches dv, as on the CPU
    const T ds = p * (dp - qr.D[t]);
    for (int64_t e = 0; e < E; ++e) dk[e] += ds * q[e];
  }
}

// Query row i of batch b (q_i, dO_i, lse_i, D_i) over keys `keys`: dq += dS_ij k_j, without
// the factor scale (scale_row).
template <class T>
KILN_HOST_DEVICE void query_row_grad(const Rows& R, int64_t b, int64_t i, int64_t moff, const T* q, const T* go,
                                     T lse, T D, int64_t E, int64_t Ev, const KeyRows<T>& keys, T* dq) {
  if (lse == inf<T>()) return;
  KeepWords kw;
  const int64_t n = R.visible(i, keys.j0, keys.n);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t j = keys.j0 + t;
    const T* k = keys.k + t * keys.krs;
    const T p = prob(R, dot(q, k, E), lse, i, j, moff);
    const T dp = dot(go, keys.v + t * keys.vrs, Ev) * drop_factor<T>(R, kw, R.score_index(b, i, j));
    const T ds = p * (dp - D);
    for (int64_t e = 0; e < E; ++e) dq[e] += ds * k[e];
  }
}

// dst = src * scale (dK and dQ's last step).
template <class T>
KILN_HOST_DEVICE KILN_CUDA_INLINE void scale_row(const T* src, int64_t n, double scale, T* dst) {
  for (int64_t e = 0; e < n; ++e) dst[e] = src[e] * static_cast<T>(scale);
}

// ---- host side

// Bytes the composed path holds per score: float32 and float64 keep one buffer of their own type
// forward and two backward (P and dP; a third for P with dropout applied). 16-bit inputs keep
// float32 scores and a 16-bit copy for the products: forward the scores and the probabilities,
// backward P, dP and one 16-bit buffer (P with dropout, then dS).
inline int64_t score_bytes(ScalarType t, bool backward, bool dropout) {
  if (t == kFloat32 || t == kFloat64) {
    const int64_t elem = t == kFloat64 ? 8 : 4;
    return backward ? elem * (dropout ? 3 : 2) : elem;
  }
  return backward ? 4 + 4 + 2 : 4 + 2;
}

// Batches per chunk of the composed path: the scores of [chunk, L, S] at `bytes` per score within
// `budget`, at least one.
inline int64_t chunk_batches(int64_t Bt, int64_t L, int64_t S, int64_t bytes, int64_t budget) {
  const int64_t per = std::max<int64_t>(1, L * S * bytes);
  return std::clamp<int64_t>(budget / per, 1, std::max<int64_t>(Bt, 1));
}

// Whether a call takes the fused path: E, Ev <= kMaxHead and one head's scores over `budget`
// (counted with the backward's buffers, so that a forward and its backward take the same path).
// Everything else is composed, in chunks of heads when they do not all fit: its products run on
// the tensor cores and its row kernels at memory speed, while the fused kernels are one thread
// per row on the CUDA cores (attention_fused.cu), there for memory, not speed. 16-bit calls take
// the fused path on float32 copies of q, k and v.
inline bool fused_rule(ScalarType t, int64_t L, int64_t S, int64_t E, int64_t Ev, bool dropout, int64_t budget) {
  if (E > kMaxHead || Ev > kMaxHead) return false;
  return L * S * score_bytes(t, true, dropout) > budget;
}

// The budget in force: KILN_ATTENTION_SCORE_BUDGET (bytes) where set, else kScoreBudget. Read once
// per call (attention.cu), so that tests can lower it for one case: small shapes then reach the
// fused kernels and the composed path's chunks.
inline int64_t score_budget() {
  const char* v = std::getenv("KILN_ATTENTION_SCORE_BUDGET");
  if (v == nullptr || *v == 0) return kScoreBudget;
  char* end = nullptr;
  const long long bytes = std::strtoll(v, &end, 10);
  KILN_CHECK(*end == 0 && bytes > 0, "scaled_dot_product_attention",
             "KILN_ATTENTION_SCORE_BUDGET must be a positive number of bytes, got \"", v, "\"");
  return bytes;
}

inline int64_t batch_numel(const Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 0; d + 2 < t.dim(); ++d) n *= t.size(d);
  return n;
}

// The rule for an Attention or AttentionBackward call (inputs q, k, v first) under `budget`.
inline bool use_fused(const AttentionAttrs& at, std::span<const Tensor> in, int64_t budget) {
  return fused_rule(in[0].dtype(), in[0].size(-2), in[1].size(-2), in[0].size(-1), in[2].size(-1), at.dropout_p > 0,
                    budget);
}

// [B..., R, C] with unit last stride as [Bt, R, C]: a view when the batch dims flatten to one
// stride (or a broadcast of one matrix), else a dense copy.
inline Tensor batched(const Tensor& t, int64_t Bt) {
  const int64_t nb = t.dim() - 2, R = t.size(-2), C = t.size(-1);
  int64_t stride = -1;
  bool flat = true;
  for (int64_t d = nb - 1; d >= 0 && flat; --d) {
    if (t.size(d) == 1) continue;
    if (stride < 0) {
      stride = t.stride(d);
    } else {
      int64_t inner = 1;  // the product of the non-trivial batch sizes inside d
      for (int64_t e = d + 1; e < nb; ++e) inner *= t.size(e);
      flat = t.stride(d) == stride * inner;
    }
  }
  if (flat)
    return make_view(t, {Bt, R, C}, {std::max<int64_t>(stride, 0), t.stride(-2), t.stride(-1)}, t.storage_offset());
  return t.contiguous().view({Bt, R, C});
}

inline Rows make_rows(const AttentionAttrs& at, const Tensor& q, const Tensor& k, const Tensor* mask) {
  Rows R;
  R.L = q.size(-2), R.S = k.size(-2), R.scale = at.scale, R.causal = at.is_causal;
  if (mask) {
    const int nb = static_cast<int>(mask->dim() - 2);
    R.mask.base = mask->data_ptr(), R.mask.is_bool = mask->dtype() == kBool, R.mask.nb = nb;
    for (int d = 0; d < nb; ++d) R.mask.sizes[d] = mask->size(d), R.mask.strides[d] = mask->stride(d);
    R.mask.rs = mask->stride(-2), R.mask.cs = mask->stride(-1);
  }
  if (at.dropout_p > 0)
    R.drop = {true, dropout_math::keep_threshold(at.dropout_p), dropout_math::keep_scale(at.dropout_p), at.seed,
              at.offset};
  return R;
}

// Rows of a batched [Bt, R, C] operand: row r of batch b at p + b * bs + r * rs.
template <class T>
struct Mat {
  const T* p = nullptr;
  int64_t bs = 0, rs = 0;
  KILN_HOST_DEVICE KILN_CUDA_INLINE const T* row(int64_t b, int64_t r) const { return p + b * bs + r * rs; }
};
template <class T>
Mat<T> mat_of(const Tensor& t3) { return {t3.data_ptr<T>(), t3.stride(0), t3.stride(1)}; }

// The fused path's view of a call: its rows and q, k, v batched (`keep` holds those views).
template <class T>
struct Problem {
  Rows R;
  int64_t Bt = 0, E = 0, Ev = 0;
  Mat<T> q, k, v;
};
template <class T>
Problem<T> make_problem(const AttentionAttrs& at, std::span<const Tensor> in, Tensor (&keep)[3]) {
  Problem<T> P;
  P.Bt = batch_numel(in[0]), P.E = in[0].size(-1), P.Ev = in[2].size(-1);
  P.R = make_rows(at, in[0], in[1], at.has_mask ? &in[3] : nullptr);
  for (int x = 0; x < 3; ++x) keep[x] = batched(in[x], P.Bt);
  P.q = mat_of<T>(keep[0]), P.k = mat_of<T>(keep[1]), P.v = mat_of<T>(keep[2]);
  return P;
}

// The fused kernels (attention_fused.cu), for calls where use_fused holds.
void fused_attention_forward(KernelArgs& a);
void fused_attention_backward(KernelArgs& a);

}  // namespace kiln::backend::cuda
