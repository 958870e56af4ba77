// CPU kernels for fused scaled dot-product attention: a tiled online-softmax forward and a
// backward that recomputes the scores tile by tile from q, k, v and the saved logsumexp.
// float16 and bfloat16 calls compute in float32 (attention_in_float).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/attention_float.h"
#include "backend/attention_math.h"
#include "backend/cpu/attention_tile.h"
#include "backend/cpu/loops.h"
#include "backend/dispatch.h"
#include "core/tensor_util.h"

namespace kiln::backend::cpu {
namespace {

using attn::gemm;
using attn::kLanes;

// 64 queries x 64 keys: a float score tile is 16 KiB, and with the packed key and value blocks
// it stays in L1/L2, so no thread ever holds more of the L x S score matrix than this.
constexpr int64_t kBlockQ = 64, kBlockK = 64;

enum class MaskKind { None, Bool, Float };

// Element offsets of each flattened batch index in a tensor whose leading dims are `batch`
// (strides may be 0 where it was expanded).
std::vector<int64_t> batch_offsets(const Tensor& t, int64_t nbatch) {
  int64_t B = 1;
  for (int64_t d = 0; d < nbatch; ++d) B *= t.shape()[d];
  std::vector<int64_t> off(static_cast<size_t>(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    int64_t rest = b, o = 0;
    for (int64_t d = nbatch - 1; d >= 0; --d) {
      o += (rest % t.shape()[d]) * t.strides()[d];
      rest /= t.shape()[d];
    }
    off[static_cast<size_t>(b)] = o;
  }
  return off;
}

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Everything the tile loops need about one call.
template <class T>
struct Problem {
  int64_t B = 0, L = 0, S = 0, E = 0, Ev = 0, EP = 0, EvP = 0;  // EP, EvP: padded to the lanes
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  int64_t q_rs = 0, k_rs = 0, v_rs = 0;
  std::vector<int64_t> q_off, k_off, v_off, m_off;
  MaskKind mask = MaskKind::None;
  const char* mask_base = nullptr;
  int64_t m_rs = 0, m_cs = 0;  // in elements
  T scale = 1;
  bool causal = false;
  bool dropout = false;
  uint32_t threshold = 0;
  T keep_mul = 1;
  uint64_t seed = 0, offset = 0;

  Problem(const AttentionAttrs& at, std::span<const Tensor> in) {
    const Tensor &tq = in[0], &tk = in[1], &tv = in[2];
    const int64_t nb = tq.dim() - 2;
    L = tq.size(-2), S = tk.size(-2), E = tq.size(-1), Ev = tv.size(-1);
    B = 1;
    for (int64_t d = 0; d < nb; ++d) B *= tq.shape()[d];
    EP = round_up(std::max<int64_t>(E, 1), kLanes<T>);
    EvP = round_up(std::max<int64_t>(Ev, 1), kLanes<T>);
    q = static_cast<const T*>(tq.data_ptr()), k = static_cast<const T*>(tk.data_ptr());
    v = static_cast<const T*>(tv.data_ptr());
    q_rs = tq.stride(-2), k_rs = tk.stride(-2), v_rs = tv.stride(-2);
    q_off = batch_offsets(tq, nb), k_off = batch_offsets(tk, nb), v_off = batch_offsets(tv, nb);
    if (at.has_mask) {
      const Tensor& tm = in[3];
      mask = tm.dtype() == kBool ? MaskKind::Bool : MaskKind::Float;
      mask_base = static_cast<const char*>(tm.data_ptr());
      m_rs = tm.stride(-2), m_cs = tm.stride(-1);
      m_off = batch_offsets(tm, nb);
    }
    scale = static_cast<T>(at.scale);
    causal = at.is_causal;
    dropout = at.dropout_p > 0;
    threshold = dropout_math::keep_threshold(at.dropout_p);
    keep_mul = static_cast<T>(dropout_math::keep_scale(at.dropout_p));
    seed = at.seed, offset = at.offset;
  }

  // Scores of one tile row in place: scale, mask, causal; -inf past the nk real keys.
  KILN_VEC_INLINE void mask_row(T* s, int64_t b, int64_t i, int64_t j0, int64_t nk) const {
    // Members copied to locals: stores through s (a T*) could otherwise alias them, which
    // keeps the compiler from vectorising these loops.
    const T ninf = -std::numeric_limits<T>::infinity(), sc = scale;
    const int64_t cs = m_cs;
    for (int64_t j = 0; j < nk; ++j) s[j] *= sc;
    if (mask == MaskKind::Bool) {
      const bool* m = reinterpret_cast<const bool*>(mask_base) + m_off[b] + i * m_rs + j0 * m_cs;
      for (int64_t j = 0; j < nk; ++j) s[j] = m[j * cs] ? s[j] : ninf;
    } else if (mask == MaskKind::Float) {
      const T* m = reinterpret_cast<const T*>(mask_base) + m_off[b] + i * m_rs + j0 * m_cs;
      for (int64_t j = 0; j < nk; ++j) s[j] += m[j * cs];
    }
    // Top-left aligned as in PyTorch: query i sees keys 0..i whatever L and S are.
    const int64_t last = causal ? std::clamp<int64_t>(i - j0 + 1, 0, nk) : nk;
    for (int64_t j = last; j < kBlockK; ++j) s[j] = ninf;
  }

  // The Philox words of scores j0 .. j0 + nk of row i, in order, at the returned pointer into
  // `flat` (68 words): score n uses word n % 4 of counter offset + n / 4 (attention::keep_bits'
  // rule). The (at most 17) counters of a row run 16 at a time in vector registers.
  KILN_VEC_INLINE const uint32_t* keep_words(int64_t b, int64_t i, int64_t j0, int64_t nk, uint32_t* flat) const {
    const uint64_t n = (static_cast<uint64_t>(b) * L + i) * S + j0, c0 = n >> 2;
    philox16(seed, offset + c0, flat);
    if (((n + nk - 1) >> 2) - c0 >= 16) {
      const philox::U32x4 r = philox::philox(seed, offset + c0 + 16);
      for (int k = 0; k < 4; ++k) flat[64 + k] = r.v[k];
    } else {
      for (int k = 0; k < 4; ++k) flat[64 + k] = 0;
    }
    return flat + (n & 3);
  }

  // Multiplies a tile row by its dropout factors (keep_mul or 0), branch-free over the whole
  // padded row (its entries past nk are 0).
  KILN_VEC_INLINE void drop_row(T* p, const uint32_t* words) const {
    const uint32_t thr = threshold;
    const T mul = keep_mul;
    for (int64_t j = 0; j < kBlockK; ++j) p[j] *= (words[j] >> 8) >= thr ? mul : T(0);
  }

  // First key block a query block [i0, i0 + nq) needs, and the end of those it needs.
  int64_t key_end(int64_t i0, int64_t nq) const { return causal ? std::min(S, i0 + nq) : S; }
};

// Units of work per thread below which a parallel region costs more than it saves (a region
// is a few microseconds, much more on a loaded machine): about 2^18 multiply-adds.
template <class T>
int64_t unit_grain(const Problem<T>& P, int64_t units) {
  const int64_t fma = P.B * P.L * std::max<int64_t>(P.S, 1) * (P.E + P.Ev);
  return fma < (int64_t{1} << 18) ? units : 1;
}

// Copies rows of n elements into a tile of width ld (>= n), zero past n: the padded lanes the
// tile products read.
template <class T>
KILN_VEC_INLINE void pack_rows(const T* src, int64_t src_rs, int64_t rows, int64_t n, T* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src + r * src_rs, src + r * src_rs + n, dst + r * ld);
    std::fill(dst + r * ld + n, dst + (r + 1) * ld, T(0));
  }
}

// Per-thread tiles, allocated once per parallel chunk (a few tens of KiB, never L x S).
template <class T>
struct Workspace {
  std::vector<T> kt, vt, kp, vp, qp, dop, s, dp, pd, o, dk, dv, dq, m, l;
  uint32_t words[68];
};

// Forward for query rows [i0, i0 + nq) of batch b: online softmax over key blocks.
template <class T>
KILN_VECTORIZE void forward_block(const Problem<T>& P, int64_t b, int64_t i0, int64_t nq, Workspace<T>& w, T* out,
                                  T* lse) {
  const T ninf = -std::numeric_limits<T>::infinity();
  const int64_t E = P.E, Ev = P.Ev, EvP = P.EvP;
  const T* q = P.q + P.q_off[b] + i0 * P.q_rs;
  const T* k = P.k + P.k_off[b];
  const T* v = P.v + P.v_off[b];
  std::fill(w.o.begin(), w.o.end(), T(0));
  std::fill(w.m.begin(), w.m.end(), ninf);
  std::fill(w.l.begin(), w.l.end(), T(0));
  const int64_t kend = P.key_end(i0, nq);
  for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, P.S - j0);
    // K^T block [E, 64] (zero past nk) so the score product streams contiguous rows.
    for (int64_t j = 0; j < kBlockK; ++j)
      for (int64_t e = 0; e < E; ++e) w.kt[e * kBlockK + j] = j < nk ? k[(j0 + j) * P.k_rs + e] : T(0);
    pack_rows(v + j0 * P.v_rs, P.v_rs, nk, Ev, w.vp.data(), EvP);
    gemm(q, P.q_rs, 1, nq, w.kt.data(), kBlockK, E, kBlockK, w.s.data(), kBlockK, false);
    for (int64_t r = 0; r < nq; ++r) {
      T* s = w.s.data() + r * kBlockK;
      P.mask_row(s, b, i0 + r, j0, nk);
      // A NaN score makes m_new NaN, and with it the row's out and lse (torch's result), rather
      // than being passed over as "nothing attended yet".
      const T m_new = attn::max_or_nan(w.m[r], attn::row_max(s, kBlockK));
      if (m_new == ninf) {  // nothing attended yet: this tile adds nothing
        std::fill(s, s + kBlockK, T(0));
        continue;
      }
      const T alpha = std::exp(w.m[r] - m_new);
      const T sum = attn::exp_sub_sum(s, kBlockK, m_new);
      w.l[r] = w.l[r] * alpha + sum;
      w.m[r] = m_new;
      if (alpha != T(1))
        for (int64_t e = 0; e < EvP; ++e) w.o[r * EvP + e] *= alpha;
      if (P.dropout) P.drop_row(s, P.keep_words(b, i0 + r, j0, nk, w.words));  // l is summed before dropout
    }
    gemm(w.s.data(), kBlockK, 1, nq, w.vp.data(), EvP, nk, EvP, w.o.data(), EvP, true);
  }
  for (int64_t r = 0; r < nq; ++r) {
    T* o = out + (i0 + r) * Ev;
    if (w.l[r] == T(0)) {  // every key masked: zeros, and +inf so backward's exp(s - lse) is 0
      std::fill(o, o + Ev, T(0));
      lse[i0 + r] = std::numeric_limits<T>::infinity();
      continue;
    }
    const T inv = T(1) / w.l[r];
    for (int64_t e = 0; e < Ev; ++e) o[e] = w.o[r * EvP + e] * inv;
    lse[i0 + r] = w.m[r] + std::log(w.l[r]);
  }
}

template <class T>
void attention_forward_t(KernelArgs& a) {
  const auto& at = *static_cast<const AttentionAttrs*>(a.attrs);
  const Problem<T> P(at, a.inputs);
  T* out = static_cast<T*>(a.outputs[0].data_ptr());
  T* lse = static_cast<T*>(a.outputs[1].data_ptr());
  const int64_t nqb = (P.L + kBlockQ - 1) / kBlockQ;
  parallel_for(P.B * nqb, unit_grain(P, P.B * nqb), [&](int64_t begin, int64_t end) {
    Workspace<T> w;
    w.kt.resize(static_cast<size_t>(P.E * kBlockK));
    w.vp.resize(static_cast<size_t>(kBlockK * P.EvP));
    w.s.resize(static_cast<size_t>(kBlockQ * kBlockK));
    w.o.resize(static_cast<size_t>(kBlockQ * P.EvP));
    w.m.resize(kBlockQ), w.l.resize(kBlockQ);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t b = u / nqb, i0 = (u % nqb) * kBlockQ;
      forward_block(P, b, i0, std::min(kBlockQ, P.L - i0), w, out + b * P.L * P.Ev, lse + b * P.L);
    }
  });
}

// Backward over key blocks [kb0, kb1) x query blocks [qb0, qb1) of batch b, recomputing each
// score tile: P = exp(s - lse), dV += P_drop^T dO, dP = dO V^T (times the dropout factors),
// dS = P (dP - D), dQ += dS K scale, dK += dS^T Q scale. want_kv / want_q pick the outputs, so
// a caller that splits one head over threads gives each output to one owner (no races).
template <class T>
KILN_VECTORIZE void backward_range(const Problem<T>& P, int64_t b, int64_t kb0, int64_t kb1, int64_t qb0, int64_t qb1,
                                   bool want_kv, bool want_q, const T* go, int64_t go_rs, const T* D, const T* lse,
                                   T* dq, T* dk, T* dv, Workspace<T>& w) {
  const int64_t E = P.E, Ev = P.Ev, EP = P.EP, EvP = P.EvP;
  const T* q = P.q + P.q_off[b];
  const T* k = P.k + P.k_off[b];
  const T* v = P.v + P.v_off[b];
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const int64_t j0 = kb * kBlockK, nk = std::min(kBlockK, P.S - j0);
    for (int64_t j = 0; j < kBlockK; ++j) {
      for (int64_t e = 0; e < E; ++e) w.kt[e * kBlockK + j] = j < nk ? k[(j0 + j) * P.k_rs + e] : T(0);
      for (int64_t e = 0; e < Ev; ++e) w.vt[e * kBlockK + j] = j < nk ? v[(j0 + j) * P.v_rs + e] : T(0);
    }
    pack_rows(k + j0 * P.k_rs, P.k_rs, nk, E, w.kp.data(), EP);
    if (want_kv) {
      std::fill(w.dk.begin(), w.dk.end(), T(0));
      std::fill(w.dv.begin(), w.dv.end(), T(0));
    }
    for (int64_t qb = qb0; qb < qb1; ++qb) {
      const int64_t i0 = qb * kBlockQ, nq = std::min(kBlockQ, P.L - i0);
      if (P.causal && i0 + nq - 1 < j0) continue;  // every score of the tile is masked
      const T* qr = q + i0 * P.q_rs;
      const T* gr = go + i0 * go_rs;
      T *s = w.s.data(), *dp = w.dp.data(), *pd = s;
      gemm(qr, P.q_rs, 1, nq, w.kt.data(), kBlockK, E, kBlockK, s, kBlockK, false);
      for (int64_t r = 0; r < nq; ++r) {
        P.mask_row(s + r * kBlockK, b, i0 + r, j0, nk);
        attn::exp_sub_sum(s + r * kBlockK, kBlockK, lse[i0 + r]);  // +inf lse (empty row): 0
      }
      gemm(gr, go_rs, 1, nq, w.vt.data(), kBlockK, Ev, kBlockK, dp, kBlockK, false);
      if (P.dropout) {
        pd = w.pd.data();
        std::copy(s, s + nq * kBlockK, pd);
        for (int64_t r = 0; r < nq; ++r) {
          const uint32_t* words = P.keep_words(b, i0 + r, j0, nk, w.words);
          P.drop_row(pd + r * kBlockK, words);
          P.drop_row(dp + r * kBlockK, words);
        }
      }
      if (want_kv) {
        pack_rows(gr, go_rs, nq, Ev, w.dop.data(), EvP);
        gemm(pd, 1, kBlockK, nk, w.dop.data(), EvP, nq, EvP, w.dv.data(), EvP, true);
      }
      for (int64_t r = 0; r < nq; ++r) {
        const T d = D[i0 + r];
        for (int64_t j = 0; j < kBlockK; ++j) dp[r * kBlockK + j] = s[r * kBlockK + j] * (dp[r * kBlockK + j] - d);
      }
      if (want_q) {
        gemm(dp, kBlockK, 1, nq, w.kp.data(), EP, nk, EP, w.dq.data(), EP, false);
        for (int64_t r = 0; r < nq; ++r)
          for (int64_t e = 0; e < E; ++e) dq[(i0 + r) * E + e] += P.scale * w.dq[r * EP + e];
      }
      if (want_kv) {
        pack_rows(qr, P.q_rs, nq, E, w.qp.data(), EP);
        gemm(dp, 1, kBlockK, nk, w.qp.data(), EP, nq, EP, w.dk.data(), EP, true);
      }
    }
    if (want_kv)
      for (int64_t j = 0; j < nk; ++j) {
        for (int64_t e = 0; e < E; ++e) dk[(j0 + j) * E + e] = P.scale * w.dk[j * EP + e];
        for (int64_t e = 0; e < Ev; ++e) dv[(j0 + j) * Ev + e] = w.dv[j * EvP + e];
      }
  }
}

template <class T>
void attention_backward_t(KernelArgs& a) {
  const auto& at = *static_cast<const AttentionAttrs*>(a.attrs);
  const Problem<T> P(at, a.inputs);
  const size_t base = at.has_mask ? 4 : 3;
  const Tensor &tout = a.inputs[base], &tlse = a.inputs[base + 1], &tgo = a.inputs[base + 2];
  const T* out = static_cast<const T*>(tout.data_ptr());
  const T* lse = static_cast<const T*>(tlse.data_ptr());
  const T* go = static_cast<const T*>(tgo.data_ptr());
  const std::vector<int64_t> go_off = batch_offsets(tgo, tgo.dim() - 2);
  const int64_t go_rs = tgo.stride(-2);
  T* dq = static_cast<T*>(a.outputs[0].data_ptr());
  T* dk = static_cast<T*>(a.outputs[1].data_ptr());
  T* dv = static_cast<T*>(a.outputs[2].data_ptr());
  const int64_t B = P.B, L = P.L, S = P.S, E = P.E, Ev = P.Ev;
  // D = rowsum(dO * O): the softmax backward's correction, one value per query row.
  Tensor td = make_empty({B * L}, a.outputs[0].dtype(), Device::cpu());
  T* D = static_cast<T*>(td.data_ptr());
  parallel_for(B * L, 256, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* g = go + go_off[r / L] + (r % L) * go_rs;
      const T* o = out + r * Ev;
      T acc = 0;
      for (int64_t e = 0; e < Ev; ++e) acc += g[e] * o[e];
      D[r] = acc;
    }
  });
  std::fill(dq, dq + B * L * E, T(0));
  const int64_t nqb = (L + kBlockQ - 1) / kBlockQ, nkb = (S + kBlockK - 1) / kBlockK;
  auto run = [&](int64_t units, auto&& body) {
    parallel_for(units, unit_grain(P, units), [&](int64_t begin, int64_t end) {
      Workspace<T> w;
      w.kt.resize(static_cast<size_t>(E * kBlockK)), w.vt.resize(static_cast<size_t>(Ev * kBlockK));
      w.kp.resize(static_cast<size_t>(kBlockK * P.EP)), w.qp.resize(static_cast<size_t>(kBlockQ * P.EP));
      w.dop.resize(static_cast<size_t>(kBlockQ * P.EvP));
      w.s.resize(kBlockQ * kBlockK), w.dp.resize(kBlockQ * kBlockK), w.pd.resize(kBlockQ * kBlockK);
      w.dk.resize(static_cast<size_t>(kBlockK * P.EP)), w.dv.resize(static_cast<size_t>(kBlockK * P.EvP));
      w.dq.resize(static_cast<size_t>(kBlockQ * P.EP));
      for (int64_t u = begin; u < end; ++u) body(u, w);
    });
  };
  auto range = [&](int64_t b, int64_t kb0, int64_t kb1, int64_t qb0, int64_t qb1, bool kv, bool wq, Workspace<T>& w) {
    backward_range(P, b, kb0, kb1, qb0, qb1, kv, wq, go + go_off[b], go_rs, D + b * L, lse + b * L, dq + b * L * E,
                   dk + b * S * E, dv + b * S * Ev, w);
  };
  const int64_t threads = unit_grain(P, 2) == 1 ? omp_get_max_threads() : 1;
  if (threads <= 1 || B % threads == 0 || B >= 4 * threads) {
    // One thread owns a whole head: every output row has one writer.
    run(B, [&](int64_t b, Workspace<T>& w) { range(b, 0, nkb, 0, nqb, true, true, w); });
  } else {
    // Few heads: dK, dV by key block, then dQ by query block (recomputing the tiles once more).
    run(B * nkb, [&](int64_t u, Workspace<T>& w) { range(u / nkb, u % nkb, u % nkb + 1, 0, nqb, true, false, w); });
    run(B * nqb, [&](int64_t u, Workspace<T>& w) { range(u / nqb, 0, nkb, u % nqb, u % nqb + 1, false, true, w); });
  }
}

void attention_forward(KernelArgs& a) {
  const ScalarType t = a.inputs[0].dtype();
  if (t == kFloat32) return attention_forward_t<float>(a);
  if (t == kFloat64) return attention_forward_t<double>(a);
  if (t == kFloat16 || t == kBFloat16) return attention_in_float(a, false, attention_forward_t<float>);
  KILN_FAIL("scaled_dot_product_attention", "the CPU kernel takes floating-point inputs, got ", t);
}

void attention_backward(KernelArgs& a) {
  const ScalarType t = a.inputs[0].dtype();
  if (t == kFloat32) return attention_backward_t<float>(a);
  if (t == kFloat64) return attention_backward_t<double>(a);
  if (t == kFloat16 || t == kBFloat16) return attention_in_float(a, true, attention_backward_t<float>);
  KILN_FAIL("scaled_dot_product_attention_backward", "the CPU kernel takes floating-point inputs, got ", t);
}

KILN_REGISTER_KERNEL(Op::Attention, DeviceType::CPU, attention_forward);
KILN_REGISTER_KERNEL(Op::AttentionBackward, DeviceType::CPU, attention_backward);

}  // namespace
}  // namespace kiln::backend::cpu
