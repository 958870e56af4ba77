// embedding, layer_norm, masked_softmax, fused linear and cross_entropy: values and gradients
// against float64 loops written here, layouts, gradchecks, and error messages.
#include <cmath>
#include <random>

#include "backend/embedding_math.h"
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

// A row picked more than 64 times is summed in segments of 64 positions (each from 0 in the
// compute type), whose sums are then added in order: the order the GPU kernel keeps too (it sums
// a frequent row's segments in parallel), so both give these bits. Rows of 64 positions or fewer
// are one running sum. Row 4 is the padding row, picked 300 times: zeros.
TEST(Embedding, FrequentRowsSumInSegmentsOfSixtyFour) {
  const int64_t num = 6, dim = 5;
  std::vector<int64_t> iv;
  const int64_t picks[num] = {64, 65, 1000, 129, 300, 1};
  for (int64_t round = 0; round < 1000; ++round)
    for (int64_t r = 0; r < num; ++r)
      if (round < picks[r]) iv.push_back(r);
  const auto m = static_cast<int64_t>(iv.size());
  Tensor idx = tensor(iv, {m}, kInt64);
  for (ScalarType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor w = rnd({num, dim}, kFloat32).to(dt).requires_grad_();
    Tensor g = rnd({m, dim}, kFloat32).mul(1000).to(dt);
    embedding(w, idx, 4).backward(g);
    const std::vector<double> gv = values(g.to(kFloat64)), got = values(w.grad().to(kFloat64));
    for (int64_t r = 0; r < num; ++r) {
      for (int64_t c = 0; c < dim; ++c) {
        float acc = 0, part = 0;
        int64_t in_part = 0;
        for (int64_t j = 0; j < m; ++j) {
          if (iv[static_cast<size_t>(j)] != r) continue;
          const auto x = static_cast<float>(gv[static_cast<size_t>(j * dim + c)]);
          if (picks[r] <= 64) {
            acc += x;
            continue;
          }
          part += x;
          if (++in_part == 64) {
            acc += part;
            part = 0, in_part = 0;
          }
        }
        if (in_part > 0) acc += part;
        const double want = r == 4 ? 0.0 : values(tensor(std::vector<double>{acc}, {1}).to(dt).to(kFloat64))[0];
        EXPECT_EQ(got[static_cast<size_t>(r * dim + c)], want) << "row " << r << " column " << c;
      }
    }
  }
}

// The GPU kernel's segment bookkeeping (embedding_math.h): how many segments a row takes, that
// segment_bound covers any counts adding up to m (the partial sums' buffer is sized by it
// without reading the counts back), and that row_of_segment finds each segment's row past rows
// with none.
TEST(Embedding, SegmentBookkeeping) {
  namespace e = kiln::emb;
  EXPECT_EQ(e::segments(0), 0);
  EXPECT_EQ(e::segments(64), 0);
  EXPECT_EQ(e::segments(65), 2);
  EXPECT_EQ(e::segments(128), 2);
  EXPECT_EQ(e::segments(129), 3);
  std::mt19937_64 gen(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t num = 1 + static_cast<int64_t>(gen() % 40);
    std::vector<int64_t> first(static_cast<size_t>(num) + 1, 0);
    int64_t m = 0;
    for (int64_t r = 0; r < num; ++r) {
      const int64_t count = gen() % 3 == 0 ? static_cast<int64_t>(gen() % 400) : static_cast<int64_t>(gen() % 70);
      m += count;
      first[static_cast<size_t>(r) + 1] = first[static_cast<size_t>(r)] + e::segments(count);
    }
    const int64_t total = first.back();
    ASSERT_LE(total, e::segment_bound(m)) << "m " << m;
    for (int64_t q = 0; q < total; ++q) {
      const int64_t r = e::row_of_segment(first.data(), num, q);
      ASSERT_TRUE(first[static_cast<size_t>(r)] <= q && q < first[static_cast<size_t>(r) + 1]) << "segment " << q;
    }
  }
  // Nearly tight where every row has 65 positions: 64 rows of 2 segments, 128, against 130.
  EXPECT_EQ(e::segment_bound(65 * 64), 130);
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
    (dt == kFloat64 ? ref : got) = std::vector<Tensor>{xs.grad(), ws.grad(), bs.grad()};
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

// ---------------------------------------------------------------------------------------------
// linear with an activation

double act_ref(double v, Activation a) {
  switch (a) {
    case Activation::None: return v;
    case Activation::ReLU: return v > 0 ? v : 0;
    case Activation::GELU: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case Activation::GELUTanh: return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  return v;
}

// act(x @ w^T + b) over rows of x [rows, in].
Vec linear_ref(const Vec& x, const Vec& w, const Vec* b, int64_t in, int64_t out, Activation a) {
  const int64_t rows = in == 0 ? static_cast<int64_t>(x.size()) : static_cast<int64_t>(x.size()) / in;
  Vec y;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b ? (*b)[o] : 0.0;
      for (int64_t k = 0; k < in; ++k) acc += x[r * in + k] * w[o * in + k];
      y.push_back(act_ref(acc, a));
    }
  return y;
}

struct LinCase {
  Shape x;
  int64_t out;
  bool bias, transposed;
};

const Activation kActs[] = {Activation::None, Activation::ReLU, Activation::GELU, Activation::GELUTanh};

TEST(LinearActivation, FusedEvalMatchesLoopsAndUnfusedOps) {
  const std::vector<LinCase> cases = {
      {{5, 7}, 3, true, false},   {{2, 3, 7}, 9, true, false}, {{7}, 4, true, false},
      {{6, 5}, 17, false, false}, {{6, 33}, 16, true, true},   {{0, 4}, 3, true, false},
      {{3, 2, 5}, 6, false, true},
  };
  for (ScalarType dt : {kFloat32, kFloat64}) {
    for (const auto& c : cases) {
      for (Activation a : kActs) {
        SCOPED_TRACE(testing::Message() << dt << " x " << c.x << " out " << c.out << " act " << static_cast<int>(a));
        const int64_t in = c.x.back();
        Tensor x = rnd(c.x, dt, -2, 2);
        if (c.transposed) x = transposed(x);
        Tensor w = rnd({c.out, in}, dt), b = c.bias ? rnd({c.out}, dt) : Tensor();
        Vec bv = c.bias ? values(b) : Vec();
        Shape ys = c.x;
        ys.back() = c.out;
        Tensor y = linear(x, w, b, a);  // no grad needed: the fused kernel
        EXPECT_FALSE(y.requires_grad());
        const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
        expect_close(y, linear_ref(values(x), values(w), c.bias ? &bv : nullptr, in, c.out, a), ys, tol, tol);
        // the unfused ops give the same within float rounding
        Tensor z = linear(x, w, b);
        if (a == Activation::ReLU) z = relu(z);
        if (a == Activation::GELU) z = gelu(z);
        if (a == Activation::GELUTanh) z = gelu(z, "tanh");
        expect_close(y, values(z), ys, tol, tol);
      }
    }
  }
}

TEST(LinearActivation, EmptyInnerDimGivesActivationOfBias) {
  for (ScalarType dt : {kFloat32, kFloat64}) {
    Tensor b = rnd({3}, dt);
    Tensor y = linear(rnd({2, 0}, dt), rnd({3, 0}, dt), b, Activation::GELU);
    Vec want;
    for (int r = 0; r < 2; ++r)
      for (double v : values(b)) want.push_back(act_ref(v, Activation::GELU));
    expect_close(y, want, {2, 3}, 1e-6, 1e-7);
  }
}

TEST(LinearActivation, IntegerLinearUsesTheLoopEpilogue) {
  Tensor x = tensor({{1, 2, 3}, {-4, 5, 6}}, kInt64), w = tensor({{1, 0, -1}, {2, 1, 0}}, kInt64);
  Tensor b = tensor({10, -20}, kInt64);
  Tensor y = linear(x, w, b);
  EXPECT_EQ(y.dtype(), kInt64);
  expect_close(y, {1 - 3 + 10, 2 + 2 - 20, -4 - 6 + 10, -8 + 5 - 20}, {2, 2}, 0, 0);
}

TEST(LinearActivation, TrainingKeepsThePreActivationAndGradchecks) {
  for (Activation a : kActs) {
    SCOPED_TRACE(static_cast<int>(a));
    Tensor x = rnd({2, 3, 5}).requires_grad_(), w = rnd({4, 5}).requires_grad_(), b = rnd({4}).requires_grad_();
    Tensor y = linear(x, w, b, a);
    EXPECT_TRUE(y.requires_grad());
    Vec bv = values(b);
    expect_close(y, linear_ref(values(x), values(w), &bv, 5, 4, a), {2, 3, 4}, 1e-12, 1e-12);
    EXPECT_TRUE(autograd::gradcheck([a](V t) { return linear(t[0], t[1], t[2], a); }, {x, w, b}));
    EXPECT_TRUE(autograd::gradcheck([a](V t) { return linear(t[0], t[1], Tensor(), a); }, {x, w}));
  }
  // float32 gradients through the fused-bias matmul against float64
  Tensor x = rnd({8, 16}), w = rnd({12, 16}), b = rnd({12}), g = rnd({8, 12});
  std::vector<Tensor> ref, got;
  for (ScalarType dt : {kFloat64, kFloat32}) {
    Tensor xs = x.to(dt).detach().requires_grad_(), ws = w.to(dt).detach().requires_grad_(),
           bs = b.to(dt).detach().requires_grad_();
    linear(xs, ws, bs, Activation::GELU).backward(g.to(dt));
    (dt == kFloat64 ? ref : got) = std::vector<Tensor>{xs.grad(), ws.grad(), bs.grad()};
  }
  for (int i = 0; i < 3; ++i) expect_close(got[i], values(ref[i]), ref[i].shape(), 1e-4, 1e-5);
}

// ---------------------------------------------------------------------------------------------
// cross_entropy on [N, C] logits (the fused kernels)

// Per-target loss w[t] * (logsumexp(x) - x[t]), 0 where ignored; and the gradient of
// sum(g * loss) with respect to x.
void cross_entropy_ref(const Vec& x, const std::vector<int64_t>& t, const Vec* w, int64_t c, int64_t ignore,
                       const Vec& g, Vec& loss, Vec& grad) {
  const size_t n = t.size();
  loss.assign(n, 0.0);
  grad.assign(n * c, 0.0);
  for (size_t r = 0; r < n; ++r) {
    if (t[r] == ignore) continue;
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, x[r * c + j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(x[r * c + j] - mx);
    const double lse = mx + std::log(s), wt = w ? (*w)[t[r]] : 1.0;
    loss[r] = wt * (lse - x[r * c + t[r]]);
    for (int64_t j = 0; j < c; ++j) grad[r * c + j] = g[r] * wt * (std::exp(x[r * c + j] - lse) - (j == t[r]));
  }
}

TEST(CrossEntropyFused, ValuesAndGradientsAgainstLoops) {
  struct Case {
    int64_t n, c;
    bool weight;
    int64_t ignore;
  };
  const std::vector<Case> cases = {{6, 5, false, -100}, {9, 1003, true, -100}, {7, 17, false, 3},
                                   {5, 40, true, 2},    {0, 4, false, -100},   {3, 1, false, -100}};
  for (ScalarType dt : {kFloat32, kFloat64}) {
    for (const auto& c : cases) {
      for (Reduction red : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
        SCOPED_TRACE(testing::Message() << dt << " n " << c.n << " c " << c.c << " reduction " << static_cast<int>(red));
        Tensor x = rnd({c.n, c.c}, dt, -4, 4).requires_grad_();
        std::vector<int64_t> tv;
        for (int64_t i = 0; i < c.n; ++i) tv.push_back(i % 3 == 1 ? c.ignore : std::uniform_int_distribution<int64_t>(0, c.c - 1)(gen()));
        Tensor t = tensor(tv, Shape{c.n}, kInt64);
        Tensor w = c.weight ? rnd({c.c}, dt, 0.2, 2) : Tensor();
        Vec wv = c.weight ? values(w) : Vec();
        Tensor loss = cross_entropy(x, t, w, red, c.ignore);
        Vec per, grad;
        Vec ones_g(static_cast<size_t>(c.n), 1.0);
        cross_entropy_ref(values(x), tv, c.weight ? &wv : nullptr, c.c, c.ignore, ones_g, per, grad);
        double total = 0, wsum = 0;
        for (int64_t i = 0; i < c.n; ++i) {
          total += per[i];
          if (tv[i] != c.ignore) wsum += c.weight ? wv[tv[i]] : 1.0;
        }
        const double tol = dt == kFloat64 ? 1e-10 : 1e-5;
        Vec g(static_cast<size_t>(c.n), red == Reduction::Mean ? 1.0 / wsum : 1.0);
        if (red == Reduction::None) {
          expect_close(loss, per, {c.n}, tol, tol);
          g = values(rnd({c.n}));
          loss.backward(tensor(g, Shape{c.n}, kFloat64).to(dt));
        } else {
          expect_close(loss, {red == Reduction::Sum ? total : total / wsum}, {}, tol, tol);
          loss.backward();
        }
        if (red == Reduction::Mean && wsum == 0) continue;  // 0/0: NaN, as in PyTorch
        cross_entropy_ref(values(x), tv, c.weight ? &wv : nullptr, c.c, c.ignore, g, per, grad);
        expect_close(x.grad(), grad, {c.n, c.c}, tol, tol);
      }
    }
  }
}

TEST(CrossEntropyFused, GradcheckAndNonContiguousLogits) {
  Tensor x = rnd({5, 6}).requires_grad_();
  Tensor t = tensor({0, 5, -100, 2, 2}, kInt64);
  Tensor w = rnd({6}, kFloat64, 0.5, 1.5);
  EXPECT_TRUE(autograd::gradcheck([&](V v) { return cross_entropy(v[0], t); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([&](V v) { return cross_entropy(v[0], t, w, Reduction::Sum); }, {x}));
  Tensor t2 = tensor({0, 5, 1, 2, 2}, kInt64);  // 2 ignored
  EXPECT_TRUE(autograd::gradcheck([&](V v) { return cross_entropy(v[0], t2, w, Reduction::None, 2); }, {x}));
  Tensor xt = transposed(rnd({5, 6}));
  Vec per, grad;
  cross_entropy_ref(values(xt), {0, 5, -100, 2, 2}, nullptr, 6, -100, Vec(5, 1.0), per, grad);
  expect_close(cross_entropy(xt, t, {}, Reduction::None), per, {5}, 1e-12, 1e-12);
  expect_close(cross_entropy(xt, t.to(kInt32), {}, Reduction::None), per, {5}, 1e-12, 1e-12);
}

TEST(CrossEntropyFused, Errors) {
  Tensor x = rnd({3, 4});
  expect_error([&] { cross_entropy(x, tensor({0, 4, 1}, kInt64)); }, "[cross_entropy] target 4 is out of range for 4 classes");
  expect_error([&] { cross_entropy(x, tensor({0, -1, 1}, kInt64)); }, "target -1 is out of range");
  expect_error([&] { cross_entropy(x, tensor({0, 1}, kInt64)); }, "[cross_entropy]");
}

}  // namespace
