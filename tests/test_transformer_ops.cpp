// embedding, layer_norm, masked_softmax, fused linear and cross_entropy: values and gradients
// against float64 loops written here, layouts, gradchecks, and error messages.
#include <cmath>
#include <random>

#include "test_util.h"

namespace {

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;
using kiln::test::values;
using Vec = std::vector<double>;
using V = const std::vector<Tensor>&;

std::mt19937_64& gen() {
  static std::mt19937_64 g(4242);
  return g;
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Tensor rnd(const Shape& s, ScalarType dt = kFloat64, double lo = -1, double hi = 1) {
  Vec v(static_cast<size_t>(numel(s)));
  for (auto& x : v) x = std::uniform_real_distribution<double>(lo, hi)(gen());
  return tensor(v, s, kFloat64).to(dt);
}

Tensor rnd_index(const Shape& s, int64_t hi, ScalarType dt = kInt64) {
  std::vector<int64_t> v(static_cast<size_t>(numel(s)));
  for (auto& x : v) x = std::uniform_int_distribution<int64_t>(0, hi - 1)(gen());
  return tensor(v, s, kInt64).to(dt);
}

// The same values in a transposed layout: a non-contiguous tensor of shape s.
Tensor transposed(const Tensor& t) { return t.transpose(-1, -2).contiguous().transpose(-1, -2); }

double tol_of(ScalarType dt) { return dt == kFloat64 ? 1e-12 : 2e-5; }

// ---------------------------------------------------------------------------------------------
// embedding

Vec embedding_ref(const Vec& w, const std::vector<int64_t>& idx, int64_t dim) {
  Vec out;
  for (int64_t i : idx)
    for (int64_t c = 0; c < dim; ++c) out.push_back(w[i * dim + c]);
  return out;
}

Vec embedding_grad_ref(const Vec& g, const std::vector<int64_t>& idx, int64_t num, int64_t dim, int64_t pad) {
  Vec gw(static_cast<size_t>(num * dim), 0.0);
  for (size_t j = 0; j < idx.size(); ++j)
    if (idx[j] != pad)
      for (int64_t c = 0; c < dim; ++c) gw[idx[j] * dim + c] += g[j * dim + c];
  return gw;
}

struct EmbCase {
  int64_t num, dim;
  Shape index_shape;
  int64_t padding_idx;
};

TEST(Embedding, ValuesAndGradientAgainstLoops) {
  const std::vector<EmbCase> cases = {
      {7, 5, {4}, -1}, {10, 3, {2, 6}, 2}, {3, 17, {3, 2, 5}, 0}, {5, 4, {0}, -1}, {4, 1, {}, 3},
      {50, 64, {4000}, 7},  // many repeated indices across threads
  };
  for (ScalarType dt : {kFloat32, kFloat64}) {
    for (ScalarType it : {kInt64, kInt32}) {
      for (const auto& c : cases) {
        SCOPED_TRACE(testing::Message() << dt << " " << it << " num " << c.num << " idx " << c.index_shape);
        Tensor w = rnd({c.num, c.dim}, dt).requires_grad_();
        Tensor idx = rnd_index(c.index_shape, c.num, it);
        Tensor y = embedding(w, idx, c.padding_idx);
        Shape want_shape = c.index_shape;
        want_shape.push_back(c.dim);
        auto iv = idx.to(kInt64).to_vector<int64_t>();
        expect_close(y, embedding_ref(values(w), iv, c.dim), want_shape, 0, 0);
        Tensor g = rnd(want_shape, dt);
        y.backward(g);
        expect_close(w.grad(), embedding_grad_ref(values(g), iv, c.num, c.dim, c.padding_idx), {c.num, c.dim},
                     tol_of(dt), tol_of(dt));
      }
    }
  }
}

TEST(Embedding, NonContiguousInputsAndPaddingRowStillRead) {
  Tensor base = rnd({6, 9});
  Tensor w = base.t();  // [9, 6], non-contiguous
  Tensor idx = tensor({{0, 8, 3}, {3, 3, 1}}, kInt64).t();  // [3, 2], non-contiguous
  Tensor y = embedding(w, idx, 3);
  auto iv = idx.contiguous().to_vector<int64_t>();
  expect_close(y, embedding_ref(values(w), iv, 6), {3, 2, 6}, 0, 0);
}

TEST(Embedding, Gradcheck) {
  Tensor w = rnd({6, 3}).requires_grad_();
  Tensor idx = tensor({{1, 4, 1}, {5, 1, 0}}, kInt64);  // repeated 1, padding 4
  EXPECT_TRUE(autograd::gradcheck([&](V t) { return embedding(t[0], idx); }, {w}));
  // with a padding row that no index picks (one that is picked is read but gets no gradient by
  // definition, which finite differences cannot agree with: checked exactly below)
  EXPECT_TRUE(autograd::gradcheck([&](V t) { return embedding(t[0], idx, 2); }, {w}));
  // the padding row gets exactly zero even though it is read
  Tensor y = embedding(w, idx, 4);
  y.sum().backward();
  expect_close(w.grad().select(0, 4), {0, 0, 0}, {3}, 0, 0);
  expect_close(w.grad().select(0, 1), {3, 3, 3}, {3}, 0, 0);
}

TEST(Embedding, Errors) {
  Tensor w = rnd({4, 3});
  expect_error([&] { embedding(w, tensor({1, 4}, kInt64)); }, "[embedding] index 4 (at position 1) is out of range for a table of 4 rows");
  expect_error([&] { embedding(w, tensor({-1}, kInt64)); }, "index -1");
  expect_error([&] { embedding(w, tensor({1000000000}, kInt32)); }, "index 1000000000");
  expect_error([&] { embedding(w, tensor({1.0f})); }, "[embedding] indices must be integers");
  expect_error([&] { embedding(rnd({4}), tensor({1}, kInt64)); }, "[embedding] weight must be 2-D");
  expect_error([&] { embedding(w, tensor({1}, kInt64), 4); }, "[embedding] padding_idx 4 is out of range for a table of 4 rows");
  // out-of-range ids in the backward's indices cannot happen (the forward checked them); a
  // negative padding_idx other than -1 means "none"
  Tensor wg = rnd({4, 3}).requires_grad_();
  embedding(wg, tensor({0, 0}, kInt64), -3).sum().backward();
  expect_close(wg.grad().select(0, 0), {2, 2, 2}, {3}, 0, 0);
}

// ---------------------------------------------------------------------------------------------
// layer_norm

// y = (x - mean) / sqrt(var + eps) * w + b over the last n elements of each row.
Vec layer_norm_ref(const Vec& x, int64_t n, const Vec* w, const Vec* b, double eps) {
  Vec y(x.size());
  for (size_t r = 0; n > 0 && r < x.size() / n; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; ++i) m += x[r * n + i];
    m /= n;
    for (int64_t i = 0; i < n; ++i) v += (x[r * n + i] - m) * (x[r * n + i] - m);
    v /= n;
    for (int64_t i = 0; i < n; ++i) {
      double t = (x[r * n + i] - m) / std::sqrt(v + eps);
      y[r * n + i] = t * (w ? (*w)[i] : 1.0) + (b ? (*b)[i] : 0.0);
    }
  }
  return y;
}

struct LnCase {
  Shape x, normalized;
  bool weight, bias, transposed;
};

TEST(LayerNorm, ValuesAgainstLoops) {
  const std::vector<LnCase> cases = {
      {{4, 7}, {7}, true, true, false},     {{2, 3, 5}, {3, 5}, true, false, false},
      {{3, 1}, {1}, false, true, false},    {{0, 5}, {5}, true, true, false},
      {{5, 33}, {33}, false, false, false}, {{6, 17}, {17}, true, true, true},
      {{2, 4, 3}, {4, 3}, true, true, true}, {{768}, {768}, true, true, false},
      {{2, 0}, {0}, true, true, false},
  };
  for (ScalarType dt : {kFloat32, kFloat64}) {
    for (const auto& c : cases) {
      SCOPED_TRACE(testing::Message() << dt << " x " << c.x << " normalized " << c.normalized);
      Tensor x = rnd(c.x, dt, -2, 3);
      if (c.transposed) x = transposed(x);
      Tensor w = c.weight ? rnd(c.normalized, dt, 0.5, 1.5) : Tensor();
      Tensor b = c.bias ? rnd(c.normalized, dt) : Tensor();
      Vec wv = w.defined() ? values(w) : Vec(), bv = b.defined() ? values(b) : Vec();
      const int64_t n = numel(c.normalized);
      Tensor y = layer_norm(x, c.normalized, w, b, 1e-5);
      EXPECT_EQ(y.dtype(), dt);
      expect_close(y, layer_norm_ref(values(x), n, w.defined() ? &wv : nullptr, b.defined() ? &bv : nullptr, 1e-5),
                   c.x, dt == kFloat64 ? 1e-10 : 1e-4, dt == kFloat64 ? 1e-10 : 1e-4);
    }
  }
}

TEST(LayerNorm, LargeOffsetDoesNotCancel) {
  // mean 1e3, spread 1: a one-pass float32 sum of squares (1e6 - 1e6) would lose the variance
  Tensor x = add(rnd({3, 64}, kFloat64), 1e3).to(kFloat32);
  Tensor y = layer_norm(x, {64});
  expect_close(y, layer_norm_ref(values(x), 64, nullptr, nullptr, 1e-5), {3, 64}, 1e-3, 1e-3);
}

TEST(LayerNorm, Gradcheck) {
  Tensor x = rnd({3, 4, 5}).requires_grad_();
  Tensor w1 = rnd({5}).requires_grad_(), b1 = rnd({5}).requires_grad_();
  Tensor w2 = rnd({4, 5}).requires_grad_(), b2 = rnd({4, 5}).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](V t) { return layer_norm(t[0], {5}, t[1], t[2]); }, {x, w1, b1}));
  EXPECT_TRUE(autograd::gradcheck([](V t) { return layer_norm(t[0], {4, 5}, t[1], t[2], 1e-3); }, {x, w2, b2}));
  EXPECT_TRUE(autograd::gradcheck([](V t) { return layer_norm(t[0], {5}); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([&](V t) { return layer_norm(t[0], {4, 5}, w2.detach(), t[1]); }, {x, b2}));
  EXPECT_TRUE(autograd::gradcheck([&](V t) { return layer_norm(t[0], {5}, t[1]); }, {transposed(x.detach()).requires_grad_(), w1}));
  // the parameters alone (x needs no gradient)
  EXPECT_TRUE(autograd::gradcheck([&](V t) { return layer_norm(x.detach(), {5}, t[0], t[1]); }, {w1, b1}));
}

TEST(LayerNorm, Float32GradientsMatchFloat64) {
  Tensor x = rnd({64, 48}, kFloat64, -2, 2), w = rnd({48}, kFloat64, 0.5, 1.5), b = rnd({48});
  Tensor g = rnd({64, 48});
  std::vector<Tensor> ref, got;
  for (ScalarType dt : {kFloat64, kFloat32}) {
    Tensor xs = x.to(dt).detach().requires_grad_(), ws = w.to(dt).detach().requires_grad_(),
           bs = b.to(dt).detach().requires_grad_();
    layer_norm(xs, {48}, ws, bs).backward(g.to(dt));
    (dt == kFloat64 ? ref : got) = {xs.grad(), ws.grad(), bs.grad()};
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].dtype(), kFloat32);
    expect_close(got[i], values(ref[i]), ref[i].shape(), 1e-4, 1e-4, "gradient " + std::to_string(i));
  }
}

TEST(LayerNorm, Errors) {
  Tensor x = rnd({2, 3, 5});
  expect_error([&] { layer_norm(x, {4}); }, "[layer_norm] input of shape [2, 3, 5] does not end with normalized_shape [4]");
  expect_error([&] { layer_norm(x, {2, 3, 5, 1}); }, "does not end with normalized_shape");
  expect_error([&] { layer_norm(x, {}); }, "[layer_norm] normalized_shape must have at least 1 dim");
  expect_error([&] { layer_norm(x, {5}, rnd({4})); }, "[layer_norm] weight must have normalized_shape [5], got shape [4]");
  expect_error([&] { layer_norm(x, {3, 5}, rnd({3, 5}), rnd({5})); }, "bias must have normalized_shape [3, 5], got shape [5]");
  expect_error([&] { layer_norm(x, {5}, rnd({5}, kFloat32)); }, "weight has float32");
  expect_error([&] { layer_norm(tensor({1, 2}, kInt64), {2}); }, "[layer_norm] expected a floating-point input");
}

// ---------------------------------------------------------------------------------------------
// masked_softmax

// softmax over dim of x where keep (bool) or of x + add (float); fully masked rows give 0.
Vec masked_softmax_ref(const Vec& x, const Vec& m, bool is_bool, const Shape& s, int64_t dim) {
  int64_t outer = 1, n = s.empty() ? 1 : s[dim], inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < dim) outer *= s[d];
    if (d > dim) inner *= s[d];
  }
  Vec y(x.size(), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t i) { return (o * n + i) * inner + in; };
      auto score = [&](int64_t i) { return is_bool ? (m[at(i)] != 0 ? x[at(i)] : -INFINITY) : x[at(i)] + m[at(i)]; };
      double mx = -INFINITY;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, score(i));
      if (mx == -INFINITY) continue;
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(score(i) - mx);
      for (int64_t i = 0; i < n; ++i) y[at(i)] = std::exp(score(i) - mx) / sum;
    }
  return y;
}

// A mask of shape ms: bool with about 1 in 3 dropped (and rows fully dropped where `kill`), or
// float with -inf where dropped and small values elsewhere.
Tensor make_mask(const Shape& ms, bool is_bool, ScalarType dt, bool kill_first = false) {
  Vec v(static_cast<size_t>(numel(ms)));
  for (size_t i = 0; i < v.size(); ++i) {
    bool keep = std::uniform_int_distribution<int>(0, 2)(gen()) != 0;
    if (kill_first && i < (ms.empty() ? 1 : static_cast<size_t>(ms.back()))) keep = false;
    v[i] = is_bool ? (keep ? 1 : 0) : (keep ? std::uniform_real_distribution<double>(-1, 1)(gen()) : -INFINITY);
  }
  return tensor(v, ms, kFloat64).to(is_bool ? kBool : dt);
}

struct MsCase {
  Shape x, mask;
  int64_t dim;
  bool transposed;
};

TEST(MaskedSoftmax, ValuesAgainstLoops) {
  const std::vector<MsCase> cases = {
      {{2, 3, 4, 4}, {2, 1, 1, 4}, -1, false},  // BERT's padding mask
      {{2, 3, 5, 5}, {5, 5}, 3, false},         // causal-style [S, S]
      {{3, 7}, {3, 7}, 1, false},
      {{3, 7}, {3, 1}, 0, false},
      {{4, 6, 5}, {1, 6, 1}, 1, true},
      {{2, 9}, {9}, -1, true},
      {{0, 4}, {1, 4}, -1, false},
      {{5}, {}, 0, false},
      {{2, 33}, {2, 33}, -1, false},
  };
  for (ScalarType dt : {kFloat32, kFloat64}) {
    for (bool is_bool : {true, false}) {
      for (const auto& c : cases) {
        SCOPED_TRACE(testing::Message() << dt << (is_bool ? " bool" : " float") << " x " << c.x << " mask " << c.mask
                                        << " dim " << c.dim);
        Tensor x = rnd(c.x, dt, -3, 3);
        if (c.transposed) x = transposed(x);
        Tensor m = make_mask(c.mask, is_bool, dt, true);
        Tensor y = masked_softmax(x, m, c.dim);
        EXPECT_EQ(y.dtype(), dt);
        Vec mv = values(m.to(kFloat64).expand(c.x).contiguous());
        const int64_t d = c.dim < 0 ? c.dim + static_cast<int64_t>(c.x.size()) : c.dim;
        expect_close(y, masked_softmax_ref(values(x), mv, is_bool, c.x, d), c.x, tol_of(dt), tol_of(dt));
      }
    }
  }
}

TEST(MaskedSoftmax, FullyMaskedRowsGiveZerosAndFloatMaskOfOtherDtype) {
  Tensor x = rnd({2, 4}, kFloat32);
  Tensor m = tensor({{1, 0, 1, 1}, {0, 0, 0, 0}}).to(kBool);
  Tensor y = masked_softmax(x, m, -1);
  Vec yv = values(y);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(yv[i], 0.0);
  EXPECT_EQ(yv[1], 0.0);
  EXPECT_NEAR(yv[0] + yv[2] + yv[3], 1.0, 1e-6);
  Tensor mf = tensor({{0.0, -INFINITY, 0.5, 0.0}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY}}, kFloat64);
  Tensor yf = masked_softmax(x, mf, 1);  // float64 mask on float32 input
  EXPECT_EQ(yf.dtype(), kFloat32);
  expect_close(yf, masked_softmax_ref(values(x), values(mf), false, {2, 4}, 1), {2, 4}, 1e-6, 1e-7);
}

TEST(MaskedSoftmax, Gradcheck) {
  Tensor x = rnd({2, 3, 4, 4}).requires_grad_();
  Tensor pad = make_mask({2, 1, 1, 4}, true, kFloat64, true);
  Tensor causal = tril(ones({4, 4})).to(kBool);
  Tensor fm = make_mask({2, 1, 4, 4}, false, kFloat64, true);
  EXPECT_TRUE(autograd::gradcheck([&](V t) { return masked_softmax(t[0], pad, -1); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([&](V t) { return masked_softmax(t[0], causal, 3); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([&](V t) { return masked_softmax(t[0], fm, -1); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([&](V t) { return masked_softmax(t[0], pad.squeeze(1).squeeze(1).unsqueeze(1).unsqueeze(-1), 2); }, {x}));
  // a fully masked row passes no gradient
  Tensor xs = rnd({2, 4}).requires_grad_();
  Tensor m = tensor({{1, 1, 0, 1}, {0, 0, 0, 0}}).to(kBool);
  (masked_softmax(xs, m, 1) * rnd({2, 4})).sum().backward();
  expect_close(xs.grad().select(0, 1), {0, 0, 0, 0}, {4}, 0, 0);
  EXPECT_EQ(values(xs.grad())[2], 0.0);
}

TEST(MaskedSoftmax, Errors) {
  Tensor x = rnd({2, 3, 4});
  expect_error([&] { masked_softmax(x, ones({2, 1, 5}).to(kBool), -1); },
               "[masked_softmax] mask of shape [2, 1, 5] cannot be broadcast to the input's shape [2, 3, 4]");
  expect_error([&] { masked_softmax(x, ones({1, 2, 3, 4}).to(kBool), -1); }, "cannot be broadcast");
  expect_error([&] { masked_softmax(x, ones({4}, kInt64), -1); }, "[masked_softmax] mask must be bool");
  expect_error([&] { masked_softmax(x, ones({4}).to(kBool), 3); }, "[masked_softmax]");
  expect_error([&] { masked_softmax(tensor({1, 2}, kInt64), ones({2}).to(kBool), 0); }, "floating-point");
}

}  // namespace
