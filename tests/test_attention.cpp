// Fused scaled_dot_product_attention: forward against a float64 loop, gradients, dropout, errors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/attention_tile.h"
#include "core/philox.h"
#include "test_util.h"

namespace {

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;
using kiln::test::values;
constexpr double kInf = std::numeric_limits<double>::infinity();

Shape lead(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }
Shape rows(Shape b, int64_t r, int64_t c) {
  b.push_back(r);
  b.push_back(c);
  return b;
}

// softmax(q k^T scale + mask) (times keep) v, one float64 loop per query row. keep: the dropout
// factors [..., L, S] (0 or 1/(1-p)) or undefined. A row with every key masked gives zeros.
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal, double scale,
                 const Tensor& keep = {}) {
  Shape batch = broadcast_shapes(broadcast_shapes(lead(q), lead(k), "ref"), lead(v), "ref");
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  int64_t B = 1;
  for (int64_t d : batch) B *= d;
  auto flat = [&](const Tensor& t, int64_t r, int64_t c) { return values(t.expand(rows(batch, r, c))); };
  auto qv = flat(q, L, E), kv = flat(k, S, E), vv = flat(v, S, Ev);
  std::vector<double> mv, kp;
  if (mask.defined()) mv = flat(mask, L, S);
  if (keep.defined()) kp = flat(keep, L, S);
  std::vector<double> out(static_cast<size_t>(B * L * Ev), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(static_cast<size_t>(S));
      double mx = -kInf;
      for (int64_t j = 0; j < S; ++j) {
        double x = 0;
        for (int64_t e = 0; e < E; ++e) x += qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e];
        x *= scale;
        const size_t mi = static_cast<size_t>((b * L + i) * S + j);
        if (mask.defined()) x = mask.dtype() == kBool ? (mv[mi] != 0 ? x : -kInf) : x + mv[mi];
        if (causal && j > i) x = -kInf;
        s[j] = x;
        mx = std::max(mx, x);
      }
      if (mx == -kInf) continue;
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < S; ++j) {
        double p = s[j] / sum;
        if (keep.defined()) p *= kp[static_cast<size_t>((b * L + i) * S + j)];
        for (int64_t e = 0; e < Ev; ++e) out[(b * L + i) * Ev + e] += p * vv[(b * S + j) * Ev + e];
      }
    }
  return tensor(out, rows(batch, L, Ev), kFloat64);
}

// The same with ops (differentiable, materialises the scores): the composite the fused op replaces.
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal, double scale,
                 const Tensor& keep = {}) {
  Tensor s = mul(matmul(q, k.transpose(-2, -1)), scale);
  if (mask.defined()) s = mask.dtype() == kBool ? masked_fill(s, logical_not(mask), -kInf) : add(s, mask);
  if (causal) s = masked_fill(s, logical_not(tril(ones({q.size(-2), k.size(-2)}, kBool))), -kInf);
  Tensor p = softmax(s, -1);
  if (keep.defined()) p = mul(p, keep);
  return matmul(p, v);
}

Tensor randn64(const Shape& s) { return randn(s, kFloat64); }
// A bool mask with about a quarter of the entries false, from a fixed generator.
Tensor random_bool_mask(const Shape& s) { return ge(rand(s), 0.25); }

struct Case {
  const char* name;
  Shape q, k, v;
  int mask;  // 0 none, 1 bool, 2 float
  Shape mask_shape;
  bool causal;
};

std::vector<Case> forward_cases() {
  return {
      {"no_mask", {2, 3, 5, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}, 0, {}, false},
      {"bool_mask", {2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 8}, 1, {2, 3, 5, 7}, false},
      {"float_mask", {2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 8}, 2, {2, 3, 5, 7}, false},
      {"bert_bool_mask", {2, 3, 9, 4}, {2, 3, 9, 4}, {2, 3, 9, 4}, 1, {2, 1, 1, 9}, false},
      {"bert_float_mask", {2, 3, 9, 4}, {2, 3, 9, 4}, {2, 3, 9, 4}, 2, {2, 1, 1, 9}, false},
      {"mask_2d", {2, 3, 6, 4}, {2, 3, 6, 4}, {2, 3, 6, 4}, 1, {6, 6}, false},
      {"causal", {2, 2, 70, 8}, {2, 2, 70, 8}, {2, 2, 70, 8}, 0, {}, true},
      {"causal_l_lt_s", {1, 2, 5, 8}, {1, 2, 9, 8}, {1, 2, 9, 8}, 0, {}, true},
      {"causal_l_gt_s", {1, 2, 9, 8}, {1, 2, 5, 8}, {1, 2, 5, 8}, 0, {}, true},
      {"causal_and_mask", {1, 2, 67, 8}, {1, 2, 67, 8}, {1, 2, 67, 8}, 2, {1, 1, 1, 67}, true},
      {"len_1", {2, 1, 3}, {2, 1, 3}, {2, 1, 3}, 0, {}, false},
      {"len_7", {2, 7, 5}, {2, 7, 5}, {2, 7, 5}, 1, {2, 7, 7}, false},
      {"len_65", {1, 2, 65, 16}, {1, 2, 65, 16}, {1, 2, 65, 16}, 1, {1, 1, 1, 65}, false},
      {"len_130", {1, 2, 130, 16}, {1, 2, 130, 16}, {1, 2, 130, 16}, 2, {1, 2, 130, 130}, false},
      {"len_130_causal", {1, 1, 130, 17}, {1, 1, 130, 17}, {1, 1, 130, 17}, 0, {}, true},
      {"l_ne_s", {2, 33, 8}, {2, 129, 8}, {2, 129, 8}, 1, {2, 33, 129}, false},
      {"ev_ne_e", {2, 2, 10, 8}, {2, 2, 12, 8}, {2, 2, 12, 24}, 0, {}, false},
      {"ev_odd_large", {1, 70, 40}, {1, 66, 40}, {1, 66, 81}, 2, {70, 66}, false},
      {"rank_2", {5, 8}, {6, 8}, {6, 3}, 0, {}, false},
      {"broadcast_kv", {2, 3, 5, 8}, {1, 1, 6, 8}, {3, 6, 8}, 0, {}, false},
      {"many_heads", {3, 5, 20, 8}, {3, 5, 20, 8}, {3, 5, 20, 8}, 1, {3, 1, 1, 20}, false},
  };
}

Tensor make_mask(const Case& c) {
  if (c.mask == 0) return {};
  if (c.mask == 1) return random_bool_mask(c.mask_shape);
  return randn64(c.mask_shape);
}

TEST(Attention, ForwardMatchesFloat64Reference) {
  for (ScalarType dt : {kFloat64, kFloat32})
    for (const Case& c : forward_cases()) {
      manual_seed(11);
      Tensor q = randn64(c.q), k = randn64(c.k), v = randn64(c.v), m = make_mask(c);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.q.back()));
      Tensor ref = reference(q, k, v, m, c.causal, scale);
      Tensor md = m.defined() && m.dtype() != kBool ? m.to(dt) : m;
      Tensor y = scaled_dot_product_attention(q.to(dt), k.to(dt), v.to(dt), md, 0.0, c.causal);
      EXPECT_EQ(y.dtype(), dt) << c.name;
      const double tol = dt == kFloat64 ? 1e-12 : 2e-5;
      expect_close(y, values(ref), ref.shape(), tol, tol, std::string(c.name) + " " + dtype_name(dt));
    }
}

TEST(Attention, ExplicitScaleAndNonContiguousInputs) {
  manual_seed(3);
  // [B, S, H, E] permuted to [B, H, S, E], as a multi-head layer produces them.
  Tensor q = randn64({2, 9, 3, 8}).permute({0, 2, 1, 3}), k = randn64({2, 9, 3, 8}).permute({0, 2, 1, 3});
  Tensor v = randn64({2, 3, 8, 9}).transpose(-1, -2);  // last dim strided
  ASSERT_FALSE(q.is_contiguous());
  Tensor y = scaled_dot_product_attention(q, k, v, {}, 0.0, false, 0.3);
  Tensor ref = reference(q, k, v, {}, false, 0.3);
  expect_close(y, values(ref), ref.shape(), 1e-12, 1e-12);
}

TEST(Attention, FullyMaskedRowGivesZerosAndZeroGradient) {
  manual_seed(5);
  Tensor q = randn64({1, 2, 4, 3}).requires_grad_(), k = randn64({1, 2, 6, 3}).requires_grad_();
  Tensor v = randn64({1, 2, 6, 3}).requires_grad_();
  std::vector<bool> mv(2 * 4 * 6, true);
  for (int j = 0; j < 6; ++j) mv[static_cast<size_t>(1 * 6 + j)] = false;  // head 0, query 1: nothing
  for (int j = 0; j < 6; ++j) mv[static_cast<size_t>(4 * 6 + 2 * 6 + j)] = false;  // head 1, query 2
  Tensor m = tensor(mv, {1, 2, 4, 6}, kBool);
  Tensor y = scaled_dot_product_attention(q, k, v, m);
  Tensor ref = reference(q.detach(), k.detach(), v.detach(), m, false, 1 / std::sqrt(3.0));
  expect_close(y, values(ref), ref.shape(), 1e-12, 1e-12);
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(values(y)[static_cast<size_t>(1 * 3 + e)], 0.0);
    EXPECT_EQ(values(y)[static_cast<size_t>((4 + 2) * 3 + e)], 0.0);
  }
  y.sum().backward();
  std::vector<double> gq = values(q.grad());
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(gq[static_cast<size_t>(1 * 3 + e)], 0.0);
    EXPECT_EQ(gq[static_cast<size_t>((4 + 2) * 3 + e)], 0.0);
  }
  for (double g : values(k.grad())) EXPECT_TRUE(std::isfinite(g));
  // The empty rows contribute nothing to k and v: the gradients equal those of the other rows.
  Tensor keep_rows = tensor(std::vector<double>{1, 0, 1, 1, 1, 1, 0, 1}, {1, 2, 4, 1}, kFloat64);
  Tensor k2 = k.detach().requires_grad_(), v2 = v.detach().requires_grad_();
  Tensor y2 = mul(scaled_dot_product_attention(q.detach(), k2, v2, m), keep_rows);
  y2.sum().backward();
  expect_close(k.grad(), values(k2.grad()), k.shape(), 1e-12, 1e-12, "grad k");
  expect_close(v.grad(), values(v2.grad()), v.shape(), 1e-12, 1e-12, "grad v");
}

// A NaN reaches what it touches, as in torch: a NaN in a query row makes that row's output and
// gradient NaN (not the zeros of a row with nothing attended), and a NaN in key 0, which every
// causal row sees, makes every row of its head NaN, row 0 (whose one key it is) included; the
// other head stays finite. Over several tiles of queries and keys, in both CPU float types.
TEST(Attention, NaNInputsGiveNaNRowsNotZeros) {
  for (ScalarType dt : {kFloat64, kFloat32}) {
    for (const bool in_key : {false, true}) {
      manual_seed(17);
      Tensor q = randn({1, 2, 70, 8}).to(dt), k = randn({1, 2, 80, 8}).to(dt), v = randn({1, 2, 80, 8}).to(dt);
      (in_key ? k.narrow(1, 0, 1).narrow(2, 0, 1) : q.narrow(1, 0, 1).narrow(2, 5, 1)).narrow(3, 0, 1).fill_(NAN);
      q.requires_grad_();
      Tensor y = scaled_dot_product_attention(q, k, v, {}, 0.0, /*causal=*/in_key);
      y.sum().backward();
      const std::vector<double> out = values(y.to(kFloat64)), gq = values(q.grad().to(kFloat64));
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t i = 0; i < 70; ++i) {
          const bool nan_row = h == 0 && (in_key || i == 5);
          for (int64_t e = 0; e < 8; ++e) {
            const size_t at = static_cast<size_t>((h * 70 + i) * 8 + e);
            const std::string where = std::string(dtype_name(dt)) + (in_key ? " NaN key" : " NaN query") + ", head " +
                                      std::to_string(h) + " row " + std::to_string(i);
            EXPECT_EQ(std::isnan(out[at]), nan_row) << where << " output " << out[at];
            EXPECT_EQ(std::isnan(gq[at]), nan_row) << where << " grad q " << gq[at];
          }
        }
      }
    }
  }
}

// Gradients (float64) against the composite's autograd, for shapes too big for finite differences.
TEST(Attention, GradientsMatchCompositeAcrossTiles) {
  for (const Case& c : forward_cases()) {
    manual_seed(21);
    Tensor q = randn64(c.q).requires_grad_(), k = randn64(c.k).requires_grad_(), v = randn64(c.v).requires_grad_();
    Tensor m = make_mask(c);
    if (c.mask == 1) {
      // Make key 0 always visible so no row is empty (the composite gives NaN there).
      Tensor first = zeros({c.mask_shape.back()}, kBool);
      first.narrow(0, 0, 1).fill_(true);
      m = logical_or(m, first);
    }
    const double scale = 0.7;
    Tensor y = scaled_dot_product_attention(q, k, v, m, 0.0, c.causal, scale);
    Tensor w = randn64(y.shape());
    auto g = autograd::grad({mul(y, w).sum()}, {q, k, v});
    Tensor q2 = q.detach().requires_grad_(), k2 = k.detach().requires_grad_(), v2 = v.detach().requires_grad_();
    auto g2 = autograd::grad({mul(composite(q2, k2, v2, m, c.causal, scale), w).sum()}, {q2, k2, v2});
    for (int i = 0; i < 3; ++i)
      expect_close(g[i], values(g2[i]), g2[i].shape(), 1e-10, 1e-10, std::string(c.name) + " grad " + "qkv"[i]);
  }
}

// A float mask that requires grad (a learned position bias) gets the gradient the composed ops
// give it (PyTorch's math path), summed over the dims it was broadcast along; q, k and v get
// theirs too, with and without is_causal.
TEST(Attention, AFloatMaskThatRequiresGradGetsItsGradient) {
  for (bool causal : {false, true}) {
    manual_seed(5);
    Tensor q = randn64({2, 3, 5, 4}).requires_grad_(), k = randn64({2, 3, 6, 4}).requires_grad_(),
           v = randn64({2, 3, 6, 3}).requires_grad_(), m = randn64({3, 5, 6}).requires_grad_();
    Tensor y = scaled_dot_product_attention(q, k, v, m, 0.0, causal);
    Tensor w = randn64(y.shape());
    auto g = autograd::grad({mul(y, w).sum()}, {q, k, v, m});
    auto g2 = autograd::grad({mul(composite(q, k, v, m, causal, 0.5), w).sum()}, {q, k, v, m});
    ASSERT_EQ(g[3].shape(), (Shape{3, 5, 6}));
    for (int i = 0; i < 4; ++i)
      expect_close(g[i], values(g2[i]), g2[i].shape(), 1e-10, 1e-10, std::string("grad ") + "qkvm"[i]);
  }
  // A fully masked row: zeros and a zero mask gradient, as on the fused path, not NaN.
  Tensor masked = zeros({2, 3}, kFloat64);
  masked.select(0, 0).fill_(-kInf);
  masked.requires_grad_();
  Tensor ym = scaled_dot_product_attention(randn64({2, 2}), randn64({3, 2}), randn64({3, 2}), masked);
  ym.sum().backward();
  expect_close(ym.select(0, 0), {0, 0}, {2});
  expect_close(masked.grad().select(0, 0), {0, 0, 0}, {3});
  for (double g : values(masked.grad())) EXPECT_TRUE(std::isfinite(g));
  // Only the mask requires grad: a bias learned in front of frozen attention.
  Tensor m = zeros({4, 4}, kFloat64).requires_grad_();
  scaled_dot_product_attention(randn64({4, 2}), randn64({4, 2}), randn64({4, 2}), m).sum().backward();
  ASSERT_TRUE(m.grad().defined());
}

TEST(Attention, Gradcheck) {
  struct G {
    Shape q, k, v;
    int mask;
    Shape ms;
    bool causal;
  };
  const std::vector<G> rows_ = {
      {{2, 3, 4}, {2, 5, 4}, {2, 5, 3}, 0, {}, false},
      {{1, 2, 3, 2}, {1, 2, 4, 2}, {1, 2, 4, 2}, 1, {1, 1, 1, 4}, false},
      {{1, 2, 3, 2}, {1, 2, 4, 2}, {1, 2, 4, 2}, 2, {1, 2, 3, 4}, false},
      {{2, 5, 3}, {2, 5, 3}, {2, 5, 2}, 0, {}, true},
      {{1, 4, 2}, {1, 6, 2}, {1, 6, 2}, 2, {4, 6}, true},
      {{1, 66, 2}, {1, 65, 2}, {1, 65, 1}, 1, {1, 1, 65}, false},  // crosses a 64 tile
      {{1, 67, 1}, {1, 67, 1}, {1, 67, 1}, 0, {}, true},
  };
  for (const G& r : rows_) {
    manual_seed(8);
    Tensor q = randn64(r.q).requires_grad_(), k = randn64(r.k).requires_grad_(), v = randn64(r.v).requires_grad_();
    Tensor m;
    if (r.mask == 1) {
      m = random_bool_mask(r.ms);
      Tensor first = zeros({r.ms.back()}, kBool);
      first.narrow(0, 0, 1).fill_(true);
      m = logical_or(m, first);
    } else if (r.mask == 2) {
      m = randn64(r.ms);
    }
    EXPECT_TRUE(autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return scaled_dot_product_attention(in[0], in[1], in[2], m, 0.0, r.causal);
        },
        {q, k, v}))
        << "q " << r.q << " causal " << r.causal;
  }
}

namespace attn = kiln::backend::cpu::attn;

// The CPU kernels' tile products in both register shapes (AVX-512's 4 x 4 tiles of 64-byte
// vectors, AVX2's 4 x 2 of 32-byte ones; a machine runs one of them), on odd row counts, partial
// column groups, both read orders of A and accumulation, against a double loop.
template <class T, int R, int NV, int W>
void check_tile_product() {
  for (const bool transposed : {false, true}) {
    for (const bool accumulate : {false, true}) {
      const int64_t M = 7, K = 5, N = 3 * attn::kLanes<T>;  // N: a multiple of the 64-byte lanes
      std::vector<T> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N)), c(static_cast<size_t>(M * N));
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<T>(std::sin(0.7 * static_cast<double>(i)));
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<T>(std::cos(0.3 * static_cast<double>(i)));
      for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<T>(0.5 * static_cast<double>(i % 7));
      const std::vector<T> c0 = c;
      // A(r, t) at a[r * ar + t * at]: row-major (ar = K, at = 1) or its transpose (ar = 1, at = M).
      const int64_t ar = transposed ? 1 : K, at = transposed ? M : 1;
      attn::gemm_tiles<T, R, NV, W>(a.data(), ar, at, M, b.data(), N, K, N, c.data(), N, accumulate);
      for (int64_t r = 0; r < M; ++r)
        for (int64_t j = 0; j < N; ++j) {
          double want = accumulate ? static_cast<double>(c0[static_cast<size_t>(r * N + j)]) : 0.0;
          for (int64_t t = 0; t < K; ++t)
            want += static_cast<double>(a[static_cast<size_t>(r * ar + t * at)]) * b[static_cast<size_t>(t * N + j)];
          EXPECT_NEAR(c[static_cast<size_t>(r * N + j)], want, 1e-5) << r << " " << j << " " << transposed;
        }
    }
  }
}

TEST(Attention, TileProductsOfBothRegisterShapesMatchALoop) {
  check_tile_product<float, 4, 4, 64>();
  check_tile_product<float, 4, 2, 32>();
  check_tile_product<double, 4, 4, 64>();
  check_tile_product<double, 4, 2, 32>();
}

// The row operations in both widths: exp(x - m) and its sum, the row maximum, and the dropout's
// Philox words (16 counters as 1 x 16 or 2 x 8 lanes, their low word wrapping into the high
// one), against scalar loops.
template <int W>
void check_row_operations() {
  std::vector<float> x(64);
  for (size_t j = 0; j < x.size(); ++j) x[j] = std::sin(static_cast<float>(j) * 0.37f) * 5.0f;
  const float mx = attn::row_max_w<float, W>(x.data(), 64);
  EXPECT_EQ(mx, *std::max_element(x.begin(), x.end())) << W;
  std::vector<float> e = x;
  float sum = 0;
  EXPECT_EQ((kiln::math::exp_sum_vectors<W, true>(e.data(), e.data(), 64, mx, sum)), 64) << W;
  double want = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    EXPECT_NEAR(e[j], std::exp(static_cast<double>(x[j]) - mx), 1e-6) << W << " at " << j;
    want += e[j];
  }
  EXPECT_NEAR(sum, want, 1e-5) << W;
  for (uint64_t ctr : {uint64_t{0}, uint64_t{0xfffffff5}, (uint64_t{7} << 32) + 12345}) {
    uint32_t words[64];
    kiln::backend::cpu::philox16_w<W>(42, ctr, words);
    for (uint64_t c = 0; c < 16; ++c) {
      const philox::U32x4 r = philox::philox(42, ctr + c);
      for (int k = 0; k < 4; ++k) EXPECT_EQ(words[4 * c + k], r.v[k]) << W << " counter " << ctr + c << " word " << k;
    }
  }
}

TEST(Attention, RowOperationsOfBothWidthsMatchScalarLoops) {
  check_row_operations<64>();
  check_row_operations<32>();
}

}  // namespace
