// The fused CUDA attention's row math (backend/cuda/attention_rows.h) run on the CPU, no GPU
// needed: the forward's online softmax and the backward's per-query-row (dQ) and per-key-row
// (dK, dV) sums, over whole rows, odd tiles and the kernels' tiles and ranges, against the CPU
// attention kernels with the same attributes (batch dims with broadcast k/v, L != S, E != Ev,
// bool masks with fully masked rows, float masks, causality with L < S and L > S, dropout);
// the dropout keep test against attention::keep_bits; the rule choosing the fused path.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/attention_rows.h"
#include "core/tensor_util.h"
#include "test_util.h"

namespace {

using namespace kiln;
namespace kc = kiln::backend::cuda;
using backend::AttentionAttrs;
using backend::Op;

enum class MaskKind { kNone, kBool, kFloat };

struct Case {
  std::string name;
  Shape qb, kb;  // batch dims of q and of k and v
  int64_t L, S, E, Ev;
  MaskKind mask = MaskKind::kNone;
  Shape mask_shape;  // broadcast to [batch..., L, S]
  bool causal = false;
  double p = 0;
};

Shape with(Shape b, int64_t r) {
  b.push_back(r);
  return b;
}
Shape rows(const Shape& b, int64_t r, int64_t c) { return with(with(b, r), c); }

// The kernels' operands as the op makes them: q, k, v expanded to the batch, the mask to the
// scores' shape; attrs with a known dropout seed and offset.
struct Call {
  Shape batch;
  ScalarType dt;
  std::vector<Tensor> in;
  AttentionAttrs at;
};

Call make_call(const Case& c, ScalarType dt) {
  manual_seed(11);
  Call x;
  x.dt = dt;
  x.batch = broadcast_shapes(c.qb, c.kb, "test");
  x.in = {randn(rows(c.qb, c.L, c.E), dt).expand(rows(x.batch, c.L, c.E)),
          randn(rows(c.kb, c.S, c.E), dt).expand(rows(x.batch, c.S, c.E)),
          randn(rows(c.kb, c.S, c.Ev), dt).expand(rows(x.batch, c.S, c.Ev))};
  if (c.mask != MaskKind::kNone) {
    Tensor m;
    if (c.mask == MaskKind::kBool) {
      m = ge(rand(c.mask_shape), 0.3);
      m.narrow(-2, 1, 1).fill_(false);  // query row 1 sees no key: zeros, lse = +inf
    } else {
      m = randn(c.mask_shape, dt);
    }
    x.in.push_back(m.expand(rows(x.batch, c.L, c.S)));
  }
  x.at.scale = 0.7 / std::sqrt(static_cast<double>(std::max<int64_t>(c.E, 1)));
  x.at.dropout_p = c.p, x.at.seed = 1234567, x.at.offset = 77;
  x.at.is_causal = c.causal, x.at.has_mask = c.mask != MaskKind::kNone;
  return x;
}

void run_cpu(Op op, std::vector<Tensor> in, std::vector<Tensor>& out, const AttentionAttrs& at) {
  backend::KernelArgs a;
  a.inputs = in, a.outputs = out, a.attrs = &at;
  backend::kernel_for(op, DeviceType::CPU)(a);
}

// How the host runs a row over the other side's rows: all at once, in tiles of a few rows, or
// as the kernels do (kernel tiles over the range a block of kBlockRows rows needs).
constexpr int64_t kWhole = 0, kAsKernels = -1;

// Rows [begin, end) in steps of `tile` (kWhole: all at once), as fn(start, count).
template <class F>
void tiles(int64_t begin, int64_t end, int64_t tile, F&& fn) {
  const int64_t step = tile > 0 ? tile : std::max<int64_t>(end - begin, 1);
  for (int64_t s = begin; s < end; s += step) fn(s, std::min(step, end - s));
}

int64_t block_start(int64_t r) { return r / kc::kBlockRows * kc::kBlockRows; }

template <class T>
std::vector<Tensor> host_forward(const Call& x, int64_t tile) {
  Tensor keep[3];
  const kc::Problem<T> P = kc::make_problem<T>(x.at, x.in, keep);
  const int64_t L = P.R.L, S = P.R.S;
  Tensor out = make_empty(rows(x.batch, L, P.Ev), x.dt, Device::cpu());
  Tensor lse = make_empty(with(x.batch, L), x.dt, Device::cpu());
  for (int64_t b = 0; b < P.Bt; ++b)
    for (int64_t i = 0; i < L; ++i) {
      kc::OnlineRow<T> st;
      st.init(P.Ev);
      const int64_t moff = P.R.mask.base ? P.R.mask.row_offset(b, i) : 0;
      const int64_t end = tile == kAsKernels ? P.R.key_end(block_start(i)) : S;
      tiles(0, end, tile == kAsKernels ? kc::kTileRows<T> : tile, [&](int64_t j0, int64_t n) {
        kc::online_keys(P.R, b, i, moff, P.q.row(b, i), P.E, P.Ev,
                        kc::KeyRows<T>{P.k.row(b, j0), P.v.row(b, j0), P.k.rs, P.v.rs, j0, n}, st);
      });
      kc::finish_row(st, P.Ev, out.data_ptr<T>() + (b * L + i) * P.Ev, lse.data_ptr<T>() + b * L + i);
    }
  return {out, lse};
}

// {dq, dk, dv} from forward's out and lse and the output gradient go.
template <class T>
std::vector<Tensor> host_backward(const Call& x, const Tensor& out, const Tensor& lse, const Tensor& go, int64_t tile) {
  Tensor keep[3];
  const kc::Problem<T> P = kc::make_problem<T>(x.at, x.in, keep);
  const kc::Rows& R = P.R;
  const int64_t L = R.L, S = R.S, E = P.E, Ev = P.Ev;
  const Tensor go3 = kc::batched(go, P.Bt);
  const kc::Mat<T> g = kc::mat_of<T>(go3);
  const T *o = out.data_ptr<T>(), *l = lse.data_ptr<T>();
  std::vector<T> D(static_cast<size_t>(P.Bt * L));
  for (int64_t r = 0; r < P.Bt * L; ++r) D[r] = kc::row_D(g.row(r / L, r % L), o + r * Ev, Ev);
  std::vector<Tensor> grads{make_empty(rows(x.batch, L, E), x.dt, Device::cpu()),
                            make_empty(rows(x.batch, S, E), x.dt, Device::cpu()),
                            make_empty(rows(x.batch, S, Ev), x.dt, Device::cpu())};
  std::vector<T> acc(kc::kMaxHead), acc2(kc::kMaxHead);
  std::vector<int64_t> moff(static_cast<size_t>(L));
  for (int64_t b = 0; b < P.Bt; ++b) {
    for (int64_t i = 0; i < L; ++i) moff[i] = R.mask.base ? R.mask.row_offset(b, i) : 0;
    for (int64_t i = 0; i < L; ++i) {
      std::fill(acc.begin(), acc.end(), T(0));
      const int64_t row = b * L + i;
      const int64_t end = tile == kAsKernels ? R.key_end(block_start(i)) : S;
      tiles(0, end, tile == kAsKernels ? kc::kTileRows<T> : tile, [&](int64_t j0, int64_t n) {
        kc::query_row_grad(R, b, i, moff[i], P.q.row(b, i), g.row(b, i), l[row], D[row], E, Ev,
                           kc::KeyRows<T>{P.k.row(b, j0), P.v.row(b, j0), P.k.rs, P.v.rs, j0, n}, acc.data());
      });
      kc::scale_row(acc.data(), E, R.scale, grads[0].data_ptr<T>() + row * E);
    }
    for (int64_t j = 0; j < S; ++j) {
      std::fill(acc.begin(), acc.end(), T(0));
      std::fill(acc2.begin(), acc2.end(), T(0));
      const int64_t begin = tile == kAsKernels ? R.query_begin(block_start(j)) : 0;
      tiles(begin, L, tile == kAsKernels ? kc::kTileRows<T> : tile, [&](int64_t i0, int64_t n) {
        const kc::QueryRows<T> qr{P.q.row(b, i0), g.row(b, i0), l + b * L + i0, D.data() + b * L + i0,
                                  R.mask.base ? moff.data() + i0 : nullptr, P.q.rs, g.rs, i0, n};
        kc::key_row_grads(R, b, j, P.k.row(b, j), P.v.row(b, j), E, Ev, qr, acc.data(), acc2.data());
      });
      kc::scale_row(acc.data(), E, R.scale, grads[1].data_ptr<T>() + (b * S + j) * E);
      kc::scale_row(acc2.data(), Ev, 1.0, grads[2].data_ptr<T>() + (b * S + j) * Ev);
    }
  }
  return grads;
}

// |got - want| <= rtol (|want| + max |want|); infinities must match.
void expect_near_all(const Tensor& got, const Tensor& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = test::values(got), w = test::values(want);
  double scale = 0;
  for (double v : w)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  for (size_t n = 0; n < g.size(); ++n) {
    if (std::isinf(w[n])) {
      EXPECT_EQ(g[n], w[n]) << what << " element " << n;
    }
    else EXPECT_NEAR(g[n], w[n], rtol * (std::abs(w[n]) + scale)) << what << " element " << n;
  }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"plain", {2}, {2}, 5, 7, 8, 6, MaskKind::kNone, {}},
      {"broadcast kv, bool mask, empty row", {2, 3}, {1, 3}, 9, 13, 16, 5, MaskKind::kBool, {2, 1, 9, 13}},
      {"float mask over several chunks", {3}, {3}, 6, 70, 4, 12, MaskKind::kFloat, {6, 70}},
      {"causal L < S", {2}, {2}, 5, 70, 8, 8, MaskKind::kNone, {}, true},
      {"causal L > S with bool mask", {2}, {1}, 75, 9, 3, 7, MaskKind::kBool, {75, 9}, true},
      {"causal, three blocks of rows", {1}, {1}, 150, 140, 4, 3, MaskKind::kNone, {}, true},
      {"dropout", {2, 2}, {2, 2}, 33, 37, 8, 5, MaskKind::kNone, {}, false, 0.3},
      {"dropout, causal, bool mask", {2}, {2}, 40, 45, 6, 9, MaskKind::kBool, {1, 40, 45}, true, 0.3},
      {"widest heads", {1}, {1}, 4, 35, 128, 128, MaskKind::kNone, {}},
      {"E = 0", {2}, {2}, 3, 4, 0, 3, MaskKind::kNone, {}},
  };
  return c;
}

// The CPU attention kernel's {out, lse} for a call.
std::vector<Tensor> cpu_forward(const Call& x) {
  const int64_t L = x.in[0].size(-2), Ev = x.in[2].size(-1);
  std::vector<Tensor> fwd{make_empty(rows(x.batch, L, Ev), x.dt, Device::cpu()),
                          make_empty(with(x.batch, L), x.dt, Device::cpu())};
  run_cpu(Op::Attention, x.in, fwd, x.at);
  return fwd;
}

template <class T>
void check_case(const Case& c, ScalarType dt, double rtol) {
  const Call x = make_call(c, dt);
  const std::vector<Tensor> fwd = cpu_forward(x);
  const Tensor go = randn(rows(x.batch, c.L, c.Ev), dt);
  std::vector<Tensor> bin = x.in;
  bin.insert(bin.end(), {fwd[0], fwd[1], go});
  std::vector<Tensor> bwd{make_empty(rows(x.batch, c.L, c.E), dt, Device::cpu()),
                          make_empty(rows(x.batch, c.S, c.E), dt, Device::cpu()),
                          make_empty(rows(x.batch, c.S, c.Ev), dt, Device::cpu())};
  run_cpu(Op::AttentionBackward, bin, bwd, x.at);
  for (int64_t tile : {kWhole, int64_t{5}, kAsKernels}) {
    const std::string what = c.name + " (" + std::string(dtype_name(dt)) + ", " + (tile == kWhole ? std::string("whole rows") : tile == kAsKernels ? std::string("kernel tiles") : "tile " + std::to_string(tile)) + ")";
    const std::vector<Tensor> h = host_forward<T>(x, tile);
    expect_near_all(h[0], fwd[0], rtol, what + " out");
    expect_near_all(h[1], fwd[1], rtol, what + " lse");
    const std::vector<Tensor> hg = host_backward<T>(x, fwd[0], fwd[1], go, tile);
    const char* names[3] = {" dq", " dk", " dv"};
    for (int n = 0; n < 3; ++n) expect_near_all(hg[n], bwd[n], rtol, what + names[n]);
  }
}

TEST(CudaAttentionRows, MatchCpuKernelsFloat64) {
  for (const Case& c : cases()) check_case<double>(c, kFloat64, 1e-12);
}

TEST(CudaAttentionRows, MatchCpuKernelsFloat32) {
  for (const Case& c : cases()) check_case<float>(c, kFloat32, 1e-5);
}

// The fully masked row of the bool-mask case gives zeros and lse = +inf (not NaN).
TEST(CudaAttentionRows, EmptyRowIsZeroWithInfiniteLse) {
  const Call x = make_call(cases()[1], kFloat64);
  const std::vector<Tensor> h = host_forward<double>(x, 0);
  EXPECT_EQ(test::values(h[0].select(2, 1)), std::vector<double>(2 * 3 * 5, 0.0));
  EXPECT_EQ(test::values(h[1].select(2, 1)), std::vector<double>(2 * 3, std::numeric_limits<double>::infinity()));
}

// A float64 call of L queries over S keys whose keys [k0, k0 + n) every query masks out, with NaN
// value rows there.
Call masked_nan_values(int64_t L, int64_t S, int64_t k0, int64_t n) {
  Call x = make_call({"masked NaN values", {1}, {1}, L, S, 2, 2, MaskKind::kBool, {L, S}}, kFloat64);
  x.in[3] = ones({1, L, S}, kBool);
  x.in[3].narrow(2, k0, n).fill_(false);
  x.in[2] = x.in[2].clone();
  x.in[2].narrow(1, k0, n).fill_(std::numeric_limits<double>::quiet_NaN());
  return x;
}

void expect_all_nan(const Tensor& t, const std::string& what) {
  for (double o : test::values(t)) EXPECT_TRUE(std::isnan(o)) << what;
}

// A NaN value row at a key every query masks out: 0 x NaN is NaN in the CPU's tile products and in
// torch, so the fused rows give NaN too (they skipped zero probabilities before), and a NaN in
// the output gradient reaches dv through them.
TEST(CudaAttentionRows, ANaNValueAtAMaskedKeyGivesNaNAsOnTheCpu) {
  Call x = masked_nan_values(3, 4, 3, 1);
  expect_all_nan(cpu_forward(x)[0], "the CPU kernel");
  expect_all_nan(host_forward<double>(x, kWhole)[0], "the fused rows");

  x.in[2] = x.in[2].clone();
  x.in[2].narrow(1, 3, 1).fill_(0.0);
  const std::vector<Tensor> fwd = cpu_forward(x);
  Tensor go = ones({1, 3, 2}, kFloat64);
  go.narrow(1, 0, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  const std::vector<Tensor> hg = host_backward<double>(x, fwd[0], fwd[1], go, kWhole);
  EXPECT_TRUE(std::isnan(test::values(hg[2]).back())) << "dv of the masked key";

  // NaN values at keys masked ahead of any attended one (a whole leading chunk of the fused rows).
  const Call y = masked_nan_values(2, 40, 0, 32);
  expect_all_nan(cpu_forward(y)[0], "the CPU kernel, leading chunk");
  for (int64_t tile : {kWhole, kAsKernels}) expect_all_nan(host_forward<double>(y, tile)[0], "fused, leading chunk");
}

TEST(CudaAttentionRows, KeepTestIsKeepBits) {
  for (double p : {0.0, 0.1, 0.3, 0.9, 1.0}) {
    const uint32_t thr = dropout_math::keep_threshold(p);
    const kc::Dropout d{true, thr, dropout_math::keep_scale(p), 0x9e3779b97f4a7c15ull, 12345};
    kc::KeepWords kw;
    for (uint64_t n : {uint64_t{0}, uint64_t{3}, uint64_t{1} << 33}) {
      const uint64_t bits = attention::keep_bits(d.seed, d.offset, n, 64, thr);
      for (int t = 0; t < 64; ++t) {
        const bool want = (bits >> t) & 1;
        EXPECT_EQ(d.keep(n + t), want) << "p " << p << " n " << n + t;
        EXPECT_EQ(kw.keep(d, n + t), want) << "cached, p " << p << " n " << n + t;
      }
    }
  }
  // A score whose 24 bits equal the threshold is kept (>=, as keep_bits and dropout()).
  for (uint64_t n : {uint64_t{5}, uint64_t{1000003}}) {
    const philox::U32x4 r = philox::philox(42, 9 + (n >> 2));
    const kc::Dropout d{true, r.v[n & 3] >> 8, 2.0, 42, 9};
    kc::KeepWords kw;
    EXPECT_TRUE(d.keep(n));
    EXPECT_TRUE(kw.keep(d, n));
    EXPECT_EQ(attention::keep_bits(42, 9, n, 1, d.threshold), 1u);
    const kc::Dropout above{true, d.threshold + 1, 2.0, 42, 9};
    EXPECT_FALSE(above.keep(n));
  }
}

TEST(CudaAttentionRows, FusedPathRule) {
  const int64_t budget = kc::kScoreBudget;  // 512 MiB
  // BERT at 128 and 512 tokens: composed (its tensor-core products), whatever the batch.
  EXPECT_FALSE(kc::fused_rule(kFloat32, 128, 128, 64, 64, true, budget));
  EXPECT_FALSE(kc::fused_rule(kFloat32, 512, 512, 64, 64, true, budget));
  EXPECT_FALSE(kc::fused_rule(kBFloat16, 512, 512, 64, 64, true, budget));
  // Fused once one head's scores, counted with the backward's buffers, exceed the budget:
  // float32 with dropout holds 12 bytes a score, so 6688^2 fit and 6689^2 do not.
  EXPECT_FALSE(kc::fused_rule(kFloat32, 6688, 6688, 64, 64, true, budget));
  EXPECT_TRUE(kc::fused_rule(kFloat32, 6689, 6689, 64, 64, true, budget));
  EXPECT_FALSE(kc::fused_rule(kFloat32, 6689, 6689, 64, 64, false, budget));   // 8 bytes a score
  EXPECT_TRUE(kc::fused_rule(kFloat64, 8192, 8192, 128, 128, false, budget));  // 16 bytes a score
  EXPECT_FALSE(kc::fused_rule(kFloat64, 4096, 4096, 128, 128, false, budget));
  EXPECT_TRUE(kc::fused_rule(kFloat16, 8192, 8192, 64, 64, false, budget));  // 10 bytes a score
  EXPECT_FALSE(kc::fused_rule(kFloat16, 7000, 7000, 64, 64, false, budget));
  // A lower budget (tests reach the fused kernels with small shapes so).
  EXPECT_TRUE(kc::fused_rule(kFloat32, 520, 512, 64, 64, false, 1 << 20));
  EXPECT_FALSE(kc::fused_rule(kFloat32, 40, 56, 64, 64, true, 1 << 20));
  // Heads wider than 128: composed, whatever the length.
  EXPECT_FALSE(kc::fused_rule(kFloat32, 1 << 15, 1 << 15, 129, 64, false, budget));
  EXPECT_FALSE(kc::fused_rule(kFloat32, 1 << 15, 1 << 15, 64, 129, false, budget));
  EXPECT_EQ(kc::score_bytes(kBFloat16, false, true), 6);
  EXPECT_EQ(kc::score_bytes(kFloat16, true, false), 10);
  EXPECT_EQ(kc::score_bytes(kFloat32, true, true), 12);
  EXPECT_EQ(kc::score_bytes(kFloat64, false, true), 8);
  EXPECT_EQ(kc::chunk_batches(10, 128, 128, 6, budget), 10);
  EXPECT_EQ(kc::chunk_batches(10, 1 << 14, 1 << 14, 6, budget), 1);  // one head at least, over budget
  EXPECT_EQ(kc::chunk_batches(768, 512, 512, 12, budget), 170);      // BERT at 512 tokens: 5 chunks
  // From the tensors of a call, q [2, 3, 600, 32], k and v [2, 3, 500, 32 / 16], with the budget
  // of KILN_ATTENTION_SCORE_BUDGET: 600 x 500 float32 scores hold 2.4 MB in backward.
  const AttentionAttrs at;
  const std::vector<Tensor> in{make_empty({2, 3, 600, 32}, kFloat32, Device::cpu()),
                               make_empty({2, 3, 500, 32}, kFloat32, Device::cpu()),
                               make_empty({2, 3, 500, 16}, kFloat32, Device::cpu())};
  const std::vector<Tensor> shorter{in[0].narrow(2, 0, 100), in[1], in[2]};
  EXPECT_EQ(kc::score_budget(), budget);
  EXPECT_FALSE(kc::use_fused(at, in, kc::score_budget()));
  {
    kiln::test::ScopedEnv env("KILN_ATTENTION_SCORE_BUDGET", "1000000");
    EXPECT_EQ(kc::score_budget(), 1000000);
    EXPECT_TRUE(kc::use_fused(at, in, kc::score_budget()));
    EXPECT_FALSE(kc::use_fused(at, shorter, kc::score_budget()));
  }
  for (const char* bad : {"0", "-5", "1e6", "lots"}) {
    kiln::test::ScopedEnv env("KILN_ATTENTION_SCORE_BUDGET", bad);
    kiln::test::expect_error([] { (void)kc::score_budget(); },
                             "KILN_ATTENTION_SCORE_BUDGET must be a positive number of bytes");
  }
  EXPECT_EQ(kc::score_budget(), budget);
}

}  // namespace
