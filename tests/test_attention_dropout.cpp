// Fused attention: dropout (same mask as softmax + dropout), memory linear in sequence length,
// 16-bit inputs and bad input.
#include <cmath>
#include <limits>

#include "backend/attention_math.h"
#include "test_util.h"

namespace {

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;
using kiln::test::values;
constexpr double kInf = std::numeric_limits<double>::infinity();

// softmax(q k^T scale + mask) * keep @ v with ops (materialises the scores).
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                 const Tensor& keep) {
  Tensor s = mul(matmul(q, k.transpose(-2, -1)), scale);
  if (mask.defined()) s = mask.dtype() == kBool ? masked_fill(s, logical_not(mask), -kInf) : add(s, mask);
  Tensor p = softmax(s, -1);
  if (keep.defined()) p = mul(p, keep);
  return matmul(p, v);
}

// The dropout factors softmax + dropout(p) would use when drawn from generator state `st`.
Tensor keep_factors(const GeneratorState& st, const Shape& scores, double p) {
  const GeneratorState saved = get_rng_state();
  set_rng_state(st);
  Tensor keep = mul(ge(rand(scores), p).to(kFloat64), 1.0 / (1.0 - p));
  set_rng_state(saved);
  return keep;
}

TEST(AttentionDropout, SameSeedSameOutputOtherSeedOther) {
  manual_seed(1);
  Tensor q = randn({2, 3, 20, 8}), k = randn({2, 3, 20, 8}), v = randn({2, 3, 20, 8});
  auto run = [&](uint64_t seed) {
    manual_seed(seed);
    return values(scaled_dot_product_attention(q, k, v, {}, 0.3));
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
  // Successive calls draw fresh counters.
  manual_seed(5);
  auto a = values(scaled_dot_product_attention(q, k, v, {}, 0.3));
  auto b = values(scaled_dot_product_attention(q, k, v, {}, 0.3));
  EXPECT_NE(a, b);
}

// The kept scores are exactly those dropout(rand(...)) keeps for the same generator state, in
// float64 and float32, across tile boundaries and with rows that start mid-counter (S odd).
TEST(AttentionDropout, MaskEqualsCompositeDropoutForwardAndBackward) {
  for (ScalarType dt : {kFloat64, kFloat32}) {
    manual_seed(2);
    const Shape qs{2, 2, 70, 8}, ks{2, 2, 67, 8};
    Tensor q = randn(qs, kFloat64), k = randn(ks, kFloat64), v = randn({2, 2, 67, 5}, kFloat64);
    Tensor m = ge(rand({2, 1, 1, 67}), 0.2);
    m.narrow(3, 0, 1).fill_(true);
    const double p = 0.3, scale = 0.4;
    Tensor qd = q.to(dt).requires_grad_(), kd = k.to(dt).requires_grad_(), vd = v.to(dt).requires_grad_();
    const GeneratorState st = get_rng_state();
    Tensor y = scaled_dot_product_attention(qd, kd, vd, m, p, false, scale);
    const GeneratorState after = get_rng_state();
    // The call reserves the counters rand() over the scores would.
    set_rng_state(st);
    rand({2, 2, 70, 67});
    EXPECT_EQ(get_rng_state().offset, after.offset);
    set_rng_state(after);

    Tensor keep = keep_factors(st, {2, 2, 70, 67}, p);
    Tensor q2 = q.detach().requires_grad_(), k2 = k.detach().requires_grad_(), v2 = v.detach().requires_grad_();
    Tensor ref = composite(q2, k2, v2, m, scale, keep);
    const double tol = dt == kFloat64 ? 1e-11 : 1e-4;
    expect_close(y, values(ref), ref.shape(), tol, tol, std::string("forward ") + dtype_name(dt));
    Tensor w = randn(ref.shape(), kFloat64);
    auto g = autograd::grad({mul(y.to(kFloat64), w).sum()}, {qd, kd, vd});
    auto g2 = autograd::grad({mul(ref, w).sum()}, {q2, k2, v2});
    for (int i = 0; i < 3; ++i)
      expect_close(g[i], values(g2[i]), g2[i].shape(), tol, tol, std::string("grad ") + "qkv"[i] + dtype_name(dt));
  }
}

// The rule a device kernel implements (attention_math.h): rand() >= p, read at any score offset.
TEST(AttentionDropout, KeepBitsRuleEqualsRandThreshold) {
  const GeneratorState st{5, 3};
  set_rng_state(st);
  const std::vector<double> u = values(rand({200}));
  for (double p : {0.1, 0.3, 0.5}) {
    const uint32_t thr = dropout_math::keep_threshold(p);
    for (uint64_t n : {0, 1, 2, 3, 61, 130}) {
      const int count = static_cast<int>(std::min<uint64_t>(64, 200 - n));
      const uint64_t bits = attention::keep_bits(st.seed, st.offset, n, count, thr);
      for (int t = 0; t < count; ++t) EXPECT_EQ((bits >> t) & 1, u[n + t] >= p ? 1u : 0u) << n << " " << t;
    }
  }
}

// The mask is a function of the saved counters, so finite differences agree when every
// evaluation starts from the same generator state.
TEST(AttentionDropout, Gradcheck) {
  manual_seed(4);
  Tensor q = randn({1, 2, 5, 3}, kFloat64).requires_grad_(), k = randn({1, 2, 7, 3}, kFloat64).requires_grad_();
  Tensor v = randn({1, 2, 7, 2}, kFloat64).requires_grad_();
  Tensor m = randn({1, 1, 5, 7}, kFloat64);
  const GeneratorState st = get_rng_state();
  for (bool causal : {false, true})
    EXPECT_TRUE(autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          set_rng_state(st);
          return scaled_dot_product_attention(in[0], in[1], in[2], m, 0.4, causal);
        },
        {q, k, v}));
}

TEST(AttentionDropout, UnbiasedOnAverage) {
  // With v = 1 every undropped output is exactly 1; dropout keeps the expectation.
  manual_seed(9);
  Tensor q = randn({2, 256, 16}), k = randn({2, 256, 16}), v = ones({2, 256, 4});
  double mean = scaled_dot_product_attention(q, k, v, {}, 0.5).mean().item<double>();
  EXPECT_NEAR(mean, 1.0, 0.02);
  double dropped = 0;
  for (double x : values(scaled_dot_product_attention(q, k, v, {}, 0.5))) dropped += x == 0.0;
  EXPECT_LT(dropped, 5);  // rows with 256 keys are almost never entirely dropped
}

TEST(AttentionDropout, ProbabilityOneGivesZerosAndZeroGradients) {
  Tensor q = randn({1, 4, 3}, kFloat64).requires_grad_(), k = randn({1, 5, 3}, kFloat64), v = randn({1, 5, 2}, kFloat64);
  Tensor y = scaled_dot_product_attention(q, k, v, {}, 1.0);
  for (double x : values(y)) EXPECT_EQ(x, 0.0);
  y.sum().backward();
  for (double x : values(q.grad())) EXPECT_EQ(x, 0.0);
}

// Peak bytes allocated by forward + backward beyond the inputs.
size_t peak_bytes(int64_t S, bool fused) {
  manual_seed(0);
  const int64_t B = 1, H = 2, E = 16;
  Tensor q = randn({B, H, S, E}).requires_grad_(), k = randn({B, H, S, E}).requires_grad_();
  Tensor v = randn({B, H, S, E}).requires_grad_();
  Tensor m = ge(rand({B, 1, 1, S}), 0.1);
  m.narrow(3, 0, 1).fill_(true);
  const size_t base = memory_stats().allocated;
  reset_peak_memory_stats();
  {
    Tensor y = fused ? scaled_dot_product_attention(q, k, v, m) : composite(q, k, v, m, 0.25, {});
    y.sum().backward();
  }
  return memory_stats().peak - base;
}

TEST(AttentionMemory, PeakGrowsLinearlyInSequenceLength) {
  const size_t p256 = peak_bytes(256, true), p512 = peak_bytes(512, true), p1024 = peak_bytes(1024, true);
  const size_t scores1024 = size_t{2} * 1024 * 1024 * sizeof(float);  // one [B, H, S, S] float32 matrix
  EXPECT_GT(p512, p256);
  EXPECT_LT(p1024 - p512, 2.5 * static_cast<double>(p512 - p256)) << p256 << " " << p512 << " " << p1024;
  EXPECT_LT(p1024, scores1024 / 4) << p1024;
  // The measurement sees the composite's quadratic score matrices.
  const size_t c512 = peak_bytes(512, false), c1024 = peak_bytes(1024, false);
  EXPECT_GE(c1024, scores1024);
  EXPECT_GT(c1024 - c512, 2.5 * static_cast<double>(p1024 - p512));
}

struct Threads {
  int saved = get_num_threads();
  explicit Threads(int n) { set_num_threads(n); }
  ~Threads() { set_num_threads(saved); }
};

// Big enough to run in parallel: one head (split over key blocks, then query blocks), three
// heads (split too, as 3 is odd) and four (a head per thread) give the same bits on 1, 2 and 3
// threads, since every output row is summed in the same order, and equal the composite's.
TEST(Attention, ThreadSplitsGiveIdenticalGradients) {
  for (const Shape& shape : {Shape{1, 200, 16}, Shape{3, 130, 16}, Shape{4, 130, 16}}) {
    manual_seed(31);
    Tensor q = randn(shape, kFloat64), k = randn(shape, kFloat64), v = randn(shape, kFloat64);
    Tensor w = randn(shape, kFloat64);
    Tensor m = ge(rand({shape[1], shape[1]}), 0.3);
    m.narrow(1, 0, 1).fill_(true);
    std::vector<std::vector<double>> first;
    for (int threads : {1, 2, 3}) {
      Threads t(threads);
      for (bool causal : {false, true}) {
        Tensor qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(), vg = v.detach().requires_grad_();
        GeneratorState st{7, 0};
        set_rng_state(st);
        Tensor y = scaled_dot_product_attention(qg, kg, vg, m, 0.2, causal);
        auto g = autograd::grad({mul(y, w).sum()}, {qg, kg, vg});
        std::vector<std::vector<double>> got{values(y), values(g[0]), values(g[1]), values(g[2])};
        if (threads == 1) {
          first.insert(first.end(), got.begin(), got.end());
          Tensor keep = keep_factors(st, {shape[0], shape[1], shape[1]}, 0.2);
          Tensor q2 = q.detach().requires_grad_(), k2 = k.detach().requires_grad_(), v2 = v.detach().requires_grad_();
          Tensor mc = causal ? logical_and(m, tril(ones({shape[1], shape[1]}, kBool))) : m;
          Tensor ref = composite(q2, k2, v2, mc, 0.25, keep);
          auto g2 = autograd::grad({mul(ref, w).sum()}, {q2, k2, v2});
          expect_close(y, values(ref), shape, 1e-11, 1e-11, "forward");
          for (int i = 0; i < 3; ++i) expect_close(g[i], values(g2[i]), shape, 1e-10, 1e-10, "grad");
        } else {
          for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], first[(causal ? 4 : 0) + i]) << threads;
        }
      }
    }
  }
}

TEST(Attention, HalfInputsComputeInFloat32) {
  manual_seed(12);
  Tensor q = randn({2, 9, 8}), k = randn({2, 11, 8}), v = randn({2, 11, 4});
  Tensor m = randn({9, 11});
  for (ScalarType dt : {kFloat16, kBFloat16}) {
    Tensor qh = q.to(dt).requires_grad_(), kh = k.to(dt), vh = v.to(dt);
    Tensor y = scaled_dot_product_attention(qh, kh, vh, m.to(dt));
    EXPECT_EQ(y.dtype(), dt);
    Tensor y32 = scaled_dot_product_attention(qh.detach().to(kFloat32), kh.to(kFloat32), vh.to(kFloat32), m.to(dt).to(kFloat32));
    expect_close(y.to(kFloat32), values(y32.to(dt).to(kFloat32)), y32.shape(), 1e-2, 1e-2, dtype_name(dt));
    y.sum().backward();
    EXPECT_EQ(qh.grad().dtype(), dt);
  }
  // Keys and values broadcast over a head dim, with dropout: the gradients are the float32
  // computation's, rounded once.
  Tensor q4 = randn({2, 3, 9, 8}), k4 = randn({2, 1, 11, 8}), v4 = randn({2, 1, 11, 4});
  auto run = [&](ScalarType dt) {
    Tensor a = q4.to(dt).detach().requires_grad_(), b = k4.to(dt).detach().requires_grad_(),
           c = v4.to(dt).detach().requires_grad_();
    manual_seed(3);
    Tensor y = scaled_dot_product_attention(a, b, c, {}, 0.25);
    (y.to(kFloat32) * y.to(kFloat32)).sum().backward();
    return std::vector<Tensor>{y, a.grad(), b.grad(), c.grad()};
  };
  const std::vector<Tensor> want = run(kFloat32);
  for (ScalarType dt : {kFloat16, kBFloat16}) {
    const std::vector<Tensor> got = run(dt);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].dtype(), dt);
      EXPECT_EQ(got[i].shape(), want[i].shape());
      expect_close(got[i].to(kFloat32), values(want[i]), want[i].shape(), 3e-2, 3e-2,
                   std::string(dtype_name(dt)) + " part " + std::to_string(i));
    }
  }
}

TEST(Attention, BadInputIsAClearError) {
  Tensor q = randn({2, 3, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 6});
  auto sdpa = [](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& m = {}, double p = 0.0) {
    return scaled_dot_product_attention(a, b, c, m, p);
  };
  expect_error([&] { sdpa(randn({4}), k, v); }, "[scaled_dot_product_attention] query, key and value need at least 2 dims");
  expect_error([&] { sdpa(q, randn({2, 5, 3}), v); }, "query's last dim (E) must equal key's, got query [2, 3, 4] and key [2, 5, 3]");
  expect_error([&] { sdpa(q, k, randn({2, 6, 6})); }, "key [2, 5, 4] and value [2, 6, 6]");
  expect_error([&] { sdpa(q, k.to(kFloat64), v); }, "one dtype, got float32, float64 and float32");
  expect_error([&] { sdpa(q.to(kInt64), k.to(kInt64), v.to(kInt64)); }, "floating-point");
  expect_error([&] { sdpa(q, randn({3, 5, 4}), randn({3, 5, 6})); }, "do not broadcast");
  expect_error([&] { sdpa(q, k, v, ones({2, 3, 5}, kInt64)); }, "attn_mask must be bool or the query's dtype (float32), got int64");
  expect_error([&] { sdpa(q, k, v, ones({2, 3, 5}, kFloat64)); }, "got float64");
  expect_error([&] { sdpa(q, k, v, ones({2, 3, 4}, kBool)); }, "attn_mask of shape [2, 3, 4] does not broadcast to the scores' shape [2, 3, 5]");
  expect_error([&] { sdpa(q, k, v, ones({7, 2, 3, 5}, kBool)); }, "does not broadcast");
  expect_error([&] { sdpa(q, k, v, {}, 1.5); }, "dropout_p must be in [0, 1], got 1.5");
  expect_error([&] { sdpa(q, k, v, {}, -0.1); }, "dropout_p");
  expect_error([&] { sdpa(Tensor(), k, v); }, "[scaled_dot_product_attention] got an undefined tensor");
}

// A head dim of 0: every score is an empty sum, 0, whatever the scale (not 0 * inf), so each
// row is the mean of v, as in PyTorch.
TEST(Attention, HeadDimZeroGivesTheMeanOfV) {
  Tensor v = tensor({{1.0, 2.0}, {3.0, 5.0}}, kFloat64).unsqueeze(0);
  Tensor y = scaled_dot_product_attention(zeros({1, 3, 0}, kFloat64), zeros({1, 2, 0}, kFloat64), v);
  expect_close(y, {2, 3.5, 2, 3.5, 2, 3.5}, {1, 3, 2});
}

TEST(Attention, EmptySequences) {
  Tensor q = randn({2, 0, 4}).requires_grad_(), k = randn({2, 5, 4}).requires_grad_(), v = randn({2, 5, 3});
  Tensor y = scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(y.shape(), (Shape{2, 0, 3}));
  y.sum().backward();
  for (double g : values(k.grad())) EXPECT_EQ(g, 0.0);
  // No keys: every row is empty, so zeros (PyTorch gives NaN here).
  Tensor y2 = scaled_dot_product_attention(randn({2, 3, 4}), randn({2, 0, 4}), randn({2, 0, 3}));
  for (double x : values(y2)) EXPECT_EQ(x, 0.0);
}

}  // namespace
