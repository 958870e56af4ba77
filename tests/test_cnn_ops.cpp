// conv2d, pooling and batch_norm: values against float64 loops written here, layouts, float32
// (oneDNN) gradients against float64 (direct loops, gradchecked) ones, gradchecks, errors.
#include <cmath>
#include <random>

#include "ops/op_util.h"
#include "test_util.h"

namespace {

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;
using kiln::test::values;

Tensor rnd(const Shape& s, ScalarType dt = kFloat64, double lo = -1, double hi = 1) {
  static std::mt19937_64 g(11);
  int64_t n = 1;
  for (auto d : s) n *= d;
  std::vector<double> v(n);
  for (auto& x : v) x = std::uniform_real_distribution<double>(lo, hi)(g);
  return tensor(v, s, kFloat64).to(dt);
}

struct ConvCase {
  Shape x, w;
  int64_t stride[2], pad[2], dil[2], groups;
  bool bias;
};

// Direct float64 convolution from the definition.
std::vector<double> conv_ref(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& c, Shape& out) {
  auto xv = values(x), wv = values(w);
  const int64_t N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3], O = c.w[0], CI = c.w[1], KH = c.w[2], KW = c.w[3];
  const int64_t OH = (H + 2 * c.pad[0] - c.dil[0] * (KH - 1) - 1) / c.stride[0] + 1;
  const int64_t OW = (W + 2 * c.pad[1] - c.dil[1] * (KW - 1) - 1) / c.stride[1] + 1;
  out = {N, O, OH, OW};
  std::vector<double> y(N * O * OH * OW, 0.0);
  std::vector<double> bv = b.defined() ? values(b) : std::vector<double>(O, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = bv[o];
          const int64_t g = o / (O / c.groups);
          for (int64_t ci = 0; ci < CI; ++ci)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = i * c.stride[0] - c.pad[0] + kh * c.dil[0];
                const int64_t iw = j * c.stride[1] - c.pad[1] + kw * c.dil[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += xv[((n * C + g * CI + ci) * H + ih) * W + iw] * wv[((o * CI + ci) * KH + kh) * KW + kw];
              }
          y[((n * O + o) * OH + i) * OW + j] = acc;
        }
  return y;
}

const std::vector<ConvCase> kConvCases = {
    {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {{2, 4, 9, 8}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, false},
    {{1, 8, 6, 6}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 8, true},   // depthwise
    {{3, 5, 5, 5}, {7, 5, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1, true},   // 1x1 stride 2 (ResNet downsample)
    {{2, 3, 12, 12}, {4, 3, 7, 7}, {2, 2}, {3, 3}, {1, 1}, 1, false}, // ResNet stem
};

Tensor run_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& c) {
  return conv2d(x, w, b, {c.stride[0], c.stride[1]}, {c.pad[0], c.pad[1]}, {c.dil[0], c.dil[1]}, c.groups);
}

TEST(Conv2d, MatchesDefinitionInEveryLayoutAndDtype) {
  for (const auto& c : kConvCases)
    for (ScalarType dt : {kFloat64, kFloat32})
      for (int layout = 0; layout < 3; ++layout) {
        Tensor x = rnd(c.x), w = rnd(c.w), b = c.bias ? rnd({c.w[0]}) : Tensor();
        Shape out;
        auto expected = conv_ref(x, w, b, c, out);
        Tensor xin = x.to(dt);
        if (layout == 1) xin = xin.contiguous(MemoryFormat::ChannelsLast);
        if (layout == 2) xin = xin.transpose(2, 3).contiguous().transpose(2, 3);  // non-dense order
        Tensor y = run_conv(xin, w.to(dt), c.bias ? b.to(dt) : Tensor(), c);
        EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast));
        expect_close(y, expected, out, dt == kFloat32 ? 1e-4 : 1e-12, dt == kFloat32 ? 1e-4 : 1e-12);
      }
}

// float32 gradients (oneDNN's backward primitives) equal float64 ones (direct loops).
TEST(Conv2d, Float32GradientsMatchFloat64) {
  for (const auto& c : kConvCases) {
    Tensor x = rnd(c.x), w = rnd(c.w), b = c.bias ? rnd({c.w[0]}) : Tensor();
    Tensor gy;
    std::vector<std::vector<double>> grads[2];
    for (int k = 0; k < 2; ++k) {
      ScalarType dt = k == 0 ? kFloat64 : kFloat32;
      Tensor xs = x.to(dt).contiguous(MemoryFormat::ChannelsLast).detach().requires_grad_();
      Tensor ws = w.to(dt).detach().requires_grad_();
      Tensor bs = c.bias ? b.to(dt).detach().requires_grad_() : Tensor();
      Tensor y = run_conv(xs, ws, bs, c);
      if (!gy.defined()) gy = rnd(y.shape());
      (y * gy.to(dt)).sum().backward();
      EXPECT_EQ(xs.grad().strides(), xs.strides());
      grads[k] = {values(xs.grad()), values(ws.grad())};
      if (c.bias) grads[k].push_back(values(bs.grad()));
    }
    for (size_t i = 0; i < grads[0].size(); ++i)
      for (size_t j = 0; j < grads[0][i].size(); ++j)
        EXPECT_NEAR(grads[1][i][j], grads[0][i][j], 1e-4 + 1e-4 * std::abs(grads[0][i][j])) << "grad " << i;
  }
}

// The input's layout changes neither the output nor the gradients, to the bit: an NCHW or a
// non-dense input takes the same kernels as a channels-last one (oneDNN's reference kernel, which
// an NCHW input into a channels-last output used to get, is slower by about 1000 times and rounds
// otherwise), and the input's gradient comes back in the input's layout.
TEST(Conv2d, TheInputsLayoutChangesNoBitOfTheResults) {
  for (const auto& c : kConvCases) {
    const Tensor x = rnd(c.x, kFloat32), w = rnd(c.w, kFloat32), b = c.bias ? rnd({c.w[0]}, kFloat32) : Tensor();
    Tensor gy;
    std::vector<std::vector<double>> results[3];
    for (int layout = 0; layout < 3; ++layout) {
      Tensor xs = layout == 0   ? x.contiguous(MemoryFormat::ChannelsLast)
                  : layout == 1 ? x.contiguous()
                                : x.transpose(2, 3).contiguous().transpose(2, 3);  // non-dense order
      xs = xs.detach().requires_grad_();
      Tensor ws = w.detach().requires_grad_(), bs = c.bias ? b.detach().requires_grad_() : Tensor();
      Tensor y = run_conv(xs, ws, bs, c);
      if (!gy.defined()) gy = rnd(y.shape(), kFloat32);
      y.backward(gy);
      EXPECT_EQ(xs.grad().strides(), xs.strides()) << "layout " << layout;
      results[layout] = {values(y), values(xs.grad()), values(ws.grad())};
      if (c.bias) results[layout].push_back(values(bs.grad()));
    }
    for (int layout = 1; layout < 3; ++layout)
      for (size_t i = 0; i < results[0].size(); ++i)
        EXPECT_EQ(results[layout][i], results[0][i]) << "layout " << layout << ", result " << i << ", x " << c.x;
  }
}

TEST(Conv2d, Gradcheck) {
  for (const auto& c : kConvCases) {
    if (c.x[1] * c.x[2] * c.x[3] > 300) continue;  // finite differences over big inputs are slow
    std::vector<Tensor> in{rnd(c.x).requires_grad_(), rnd(c.w).requires_grad_()};
    if (c.bias) in.push_back(rnd({c.w[0]}).requires_grad_());
    EXPECT_TRUE(autograd::gradcheck(
        [&](const std::vector<Tensor>& v) { return run_conv(v[0], v[1], c.bias ? v[2] : Tensor(), c); }, in));
  }
  Tensor x = rnd({1, 2, 5, 4}).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], {}, {2, 1}, {1, 2}); },
                                  {x, rnd({3, 2, 3, 3}).requires_grad_()}));
}

// A frozen weight with a trained bias (and input): the bias's gradient is the output gradient's sum
// over N, H and W, as when the weight trains too; the weight gets none.
TEST(Conv2d, FrozenWeightTrainedBias) {
  for (ScalarType dt : {kFloat64, kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x0 = rnd({2, 3, 6, 5}).to(dt).contiguous(MemoryFormat::ChannelsLast), w0 = rnd({4, 3, 3, 3}).to(dt);
    const Tensor b0 = rnd({4}).to(dt), gy = rnd({2, 4, 6, 5}).to(dt);
    Tensor grads[2][2];
    for (int frozen = 0; frozen < 2; ++frozen) {
      Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_(frozen == 0),
             b = b0.detach().requires_grad_();
      (conv2d(x, w, b, {1, 1}, {1, 1}) * gy).sum().backward();
      grads[frozen][0] = x.grad(), grads[frozen][1] = b.grad();
      EXPECT_EQ(w.grad().defined(), frozen == 0);
    }
    const double tol = dt == kBFloat16 ? 5e-2 : 1e-5;
    for (int i = 0; i < 2; ++i)
      expect_close(grads[1][i], values(grads[0][i]), grads[0][i].shape(), tol, tol, i ? "bias" : "input");
    EXPECT_EQ(grads[1][1].dtype(), dt);
  }
}

// A convolution whose input or output is past what cuDNN's int sizes take runs over chunks of the
// batch (it ran on the CPU); here the limit is lowered to 100 elements (a sample has 32 in, 72
// out: chunks of one), in both layouts: the output and the three gradients as in one piece.
TEST(Conv2d, PastTheKernelsSizesItRunsOverChunksOfTheBatch) {
  for (MemoryFormat layout : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    const Tensor x0 = rnd({5, 2, 4, 4}).contiguous(layout), w0 = rnd({3, 2, 3, 3}), b0 = rnd({3});
    const Tensor gy = rnd({5, 3, 4, 6});
    auto run = [&](std::vector<Tensor>& out) {
      Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_(), b = b0.detach().requires_grad_();
      profiler::Session session({.timing = false});
      const Tensor y = conv2d(x, w, b, {1, 1}, {1, 2});
      (y * gy).sum().backward();
      out = {y, x.grad(), w.grad(), b.grad()};
      int64_t calls = 0;
      for (const profiler::OpStat& st : session.stats())
        if (st.op.starts_with("Conv2d")) calls += st.count;
      return calls;
    };
    std::vector<Tensor> whole, split;
    EXPECT_EQ(run(whole), 3);  // the forward and each gradient in one call
    const int64_t before = ops::set_conv_split_elements(100);
    EXPECT_EQ(run(split), 5 * 3);
    ops::set_conv_split_elements(before);
    const char* names[] = {"output", "input grad", "weight grad", "bias grad"};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(split[i].shape(), whole[i].shape()) << names[i];
      expect_close(split[i], values(whole[i]), whole[i].shape(), 1e-5, 1e-5, names[i]);
    }
    EXPECT_EQ(split[1].strides(), x0.strides());
  }
}

// The kernels read the bias as a dense vector (oneDNN ignores a bias descriptor's strides): a
// strided or expanded bias is made dense first, in every dtype.
TEST(Conv2d, AStridedOrExpandedBiasIsReadThroughItsStrides) {
  for (ScalarType dt : {kFloat64, kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = rnd({1, 2, 3, 3}).to(dt), w = rnd({4, 2, 3, 3}).to(dt);
    const Tensor every_other = tensor({0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0}).to(dt).slice(0, 0, 8, 2);
    const Tensor expanded = tensor({5.0}).to(dt).expand({4});
    expect_close(conv2d(x, w, every_other), values(conv2d(x, w, tensor({0.0, 20.0, 40.0, 60.0}).to(dt))), {1, 4, 1, 1},
                 0, 0, "strided");
    expect_close(conv2d(x, w, expanded), values(conv2d(x, w, full({4}, 5.0, dt))), {1, 4, 1, 1}, 0, 0, "expanded");
  }
}

// Empty inputs as PyTorch takes them: zero batch, or zero channels (the output is the bias, whose
// gradient is the output gradient's sum); an empty H or W of a non-empty batch is an error.
TEST(Conv2d, EmptyInputs) {
  Tensor x = zeros({2, 0, 4, 4}, kFloat64).requires_grad_(), w = zeros({3, 0, 3, 3}, kFloat64).requires_grad_();
  Tensor b = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
  Tensor y = conv2d(x, w, b, {1, 1}, {1, 1});
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4, 4}));
  expect_close(y.sum({0, 2, 3}), {32, 64, 96}, {3});
  (y * 2.0).sum().backward();
  expect_close(b.grad(), {64, 64, 64}, {3});
  EXPECT_EQ(w.grad().shape(), w.shape());
  EXPECT_EQ(x.grad().shape(), x.shape());

  Tensor none = zeros({0, 3, 4, 4}, kFloat64).requires_grad_(), b2 = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  Tensor y2 = conv2d(none, rnd({2, 3, 3, 3}), b2);
  EXPECT_EQ(y2.shape(), (Shape{0, 2, 2, 2}));
  y2.sum().backward();
  expect_close(b2.grad(), {0, 0}, {2});

  expect_error([] { conv2d(zeros({1, 1, 0, 4}), ones({2, 1, 1, 1}), {}, {1, 1}, {1, 1}); },
               "[conv2d] only inputs with zero batch or zero channels may be empty (as PyTorch), got shape [1, 1, 0, 4]");
}

TEST(Conv2d, UnbatchedInputAndErrors) {
  Tensor x = rnd({3, 5, 5}), w = rnd({2, 3, 3, 3});
  Tensor y = conv2d(x, w);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
  expect_close(y, values(conv2d(x.unsqueeze(0), w)), {2, 3, 3}, 1e-12, 1e-12);
  expect_error([&] { conv2d(rnd({1, 4, 5, 5}), w); }, "[conv2d] input has 4 channels");
  expect_error([&] { conv2d(rnd({1, 3, 2, 2}), w); }, "larger than the padded input");
  expect_error([&] { conv2d(rnd({1, 3, 5, 5}), w, rnd({3})); }, "expected bias of shape [2]");
  expect_error([&] { conv2d(rnd({1, 3, 5, 5}), w, {}, {0, 1}); }, "stride must be at least 1");
  expect_error([&] { conv2d(rnd({1, 3, 5, 5}), w.to(kFloat32)); }, "but weight is");
  expect_error([&] { conv2d(rnd({1, 4, 5, 5}), rnd({3, 2, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 2); },
               "not divisible by groups=2");
  expect_error([&] { conv2d(rnd({5, 5}), w); }, "expected a 3-D");
}

// ---- pooling

std::vector<double> pool_ref(const Tensor& x, int kind, int64_t k, int64_t s, int64_t p, bool ceil, bool incl,
                             Shape& out, int64_t oh_ad = 0) {
  auto xv = values(x);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  auto osize = [&](int64_t in) {
    int64_t num = in + 2 * p - k + (ceil ? s - 1 : 0);
    int64_t o = num / s + 1;
    if (ceil && (o - 1) * s >= in + p) --o;
    return o;
  };
  const int64_t OH = kind == 2 ? oh_ad : osize(H), OW = kind == 2 ? oh_ad : osize(W);
  out = {N, C, OH, OW};
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          int64_t h0, h1, w0, w1, cnt;
          if (kind == 2) {
            h0 = i * H / OH, h1 = ((i + 1) * H + OH - 1) / OH, w0 = j * W / OW, w1 = ((j + 1) * W + OW - 1) / OW;
            cnt = (h1 - h0) * (w1 - w0);
          } else {
            h0 = i * s - p, w0 = j * s - p;
            h1 = std::min(h0 + k, H + p), w1 = std::min(w0 + k, W + p);
            cnt = (h1 - h0) * (w1 - w0);
            h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0), h1 = std::min(h1, H), w1 = std::min(w1, W);
            if (!(kind == 1 && incl)) cnt = (h1 - h0) * (w1 - w0);
          }
          double acc = kind == 0 ? -INFINITY : 0.0;
          for (int64_t a = h0; a < h1; ++a)
            for (int64_t b = w0; b < w1; ++b) {
              double v = xv[((n * C + c) * H + a) * W + b];
              acc = kind == 0 ? std::max(acc, v) : acc + v;
            }
          y.push_back(kind == 0 ? acc : acc / cnt);
        }
  return y;
}

TEST(Pool2d, MatchDefinition) {
  for (ScalarType dt : {kFloat64, kFloat32})
    for (bool cl : {false, true})
      for (bool ceil : {false, true}) {
        Tensor x = rnd({2, 3, 9, 8});
        Tensor xin = cl ? x.to(dt).contiguous(MemoryFormat::ChannelsLast) : x.to(dt);
        Shape out;
        auto e = pool_ref(x, 0, 3, 2, 1, ceil, true, out);
        expect_close(max_pool2d(xin, {3}, {2}, {1}, {1}, ceil), e, out, 1e-6, 1e-6, "max");
        for (bool incl : {false, true}) {
          e = pool_ref(x, 1, 3, 2, 1, ceil, incl, out);
          expect_close(avg_pool2d(xin, {3}, {2}, {1}, ceil, incl), e, out, 1e-6, 1e-6, "avg");
        }
        for (int64_t o : {1, 3, 5, 7}) {
          e = pool_ref(x, 2, 0, 0, 0, false, false, out, o);
          expect_close(adaptive_avg_pool2d(xin, {o, o}), e, out, 1e-6, 1e-6, "adaptive");
        }
      }
}

TEST(Pool2d, MaxPoolDilationAndNan) {
  Tensor x = tensor(std::vector<double>{1, 5, 2, 8, 3, 4, 7, 6, 0}, {1, 1, 3, 3}, kFloat64);
  // dilation 2 with kernel 2 sees the four corners.
  expect_close(max_pool2d(x, {2}, {1}, {0}, {2}), {7.0}, {1, 1, 1, 1});
  Tensor xn = tensor(std::vector<double>{1, NAN, 2, 3}, {1, 1, 2, 2}, kFloat64);
  EXPECT_TRUE(std::isnan(values(max_pool2d(xn, {2}))[0]));
  // Kernel 2 with dilation 4 and padding 2 would have windows wholly in the padding (output
  // -inf, no input to take the gradient): PyTorch's padding rule refuses it.
  expect_error([] { max_pool2d(rnd({2, 3, 1, 4}), {2, 1}, {1, 1}, {2, 0}, {4, 1}); }, "must be at most half");
}

TEST(Pool2d, Gradcheck) {
  // Distinct values so max is never tied.
  std::vector<double> v(2 * 2 * 7 * 6);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.013 * static_cast<double>((i * 37) % v.size());
  Tensor x = tensor(v, {2, 2, 7, 6}, kFloat64).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  using V = const std::vector<Tensor>&;
  EXPECT_TRUE(autograd::gradcheck([](V t) { return max_pool2d(t[0], {3, 2}, {2, 1}, {1, 1}, {1, 1}, true); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([](V t) { return max_pool2d(t[0], {2}, {1}, {0}, {2}); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([](V t) { return avg_pool2d(t[0], {3}, {2}, {1}, true, false); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([](V t) { return avg_pool2d(t[0], {2, 3}, {1, 2}, {1, 0}); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([](V t) { return adaptive_avg_pool2d(t[0], {3, 4}); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([](V t) { return adaptive_avg_pool2d(t[0], {1}); }, {x}));
}

// A 16-bit input gradient that several windows feed is summed in float32 and rounded once, as
// the CUDA kernels do. The four 2x2 windows of a 3x3 input all hold its centre; their gradients
// 1 and three of 2^-8 sum to 1 + 3 * 2^-8, which bfloat16 rounds to 1 + 2^-6 (a tie, to even);
// rounding after each add kept 1 (1 + 2^-8 is a tie that rounds to 1).
TEST(Pool2d, HalfPrecisionGradientsOfOverlappingWindowsRoundOnce) {
  const double t = 1.0 / 256;
  for (bool cl : {false, true}) {
    Tensor x = tensor(std::vector<double>{0, 0, 0, 0, 1, 0, 0, 0, 0}, {1, 1, 3, 3}).to(kBFloat16);
    if (cl) x = x.contiguous(MemoryFormat::ChannelsLast);
    x.requires_grad_();
    max_pool2d(x, {2}, {1}).backward(tensor(std::vector<double>{1, t, t, t}, {1, 1, 2, 2}).to(kBFloat16));
    EXPECT_EQ(x.grad().to(kFloat64).flatten().select(0, 4).item<double>(), 1.015625) << "max, channels-last " << cl;
    x.set_grad(Tensor());
    avg_pool2d(x, {2}, {1}).backward(tensor(std::vector<double>{4, 4 * t, 4 * t, 4 * t}, {1, 1, 2, 2}).to(kBFloat16));
    EXPECT_EQ(x.grad().to(kFloat64).flatten().select(0, 4).item<double>(), 1.015625) << "avg, channels-last " << cl;
    EXPECT_EQ(x.grad().to(kFloat64).flatten().select(0, 0).item<double>(), 1.0) << "avg corner, channels-last " << cl;
  }
}

// A channels-last input whose size-1 W has a stride other than the canonical one (a sequence
// [N, L, C] transposed and unsqueezed): its gradient is laid out canonically, and equals that of
// a contiguous copy, for each pooling.
TEST(Pool2d, ChannelsLastInputWithAnOddStrideOnASizeOneDim) {
  const Tensor seq = rnd({2, 8, 3});
  for (int kind = 0; kind < 3; ++kind) {
    SCOPED_TRACE(kind);
    auto pool = [kind](const Tensor& t) {
      return kind == 0 ? max_pool2d(t, {2, 1}) : kind == 1 ? avg_pool2d(t, {2, 1}) : adaptive_avg_pool2d(t, {4, 1});
    };
    Tensor x = seq.transpose(1, 2).unsqueeze(-1).detach().requires_grad_();  // [2, 3, 8, 1]
    Tensor dense = x.detach().contiguous().requires_grad_();
    Tensor w = rnd({2, 3, 4, 1});
    (pool(x) * w).sum().backward();
    (pool(dense) * w).sum().backward();
    expect_close(x.grad(), values(dense.grad()), x.shape(), 0, 0);
  }
}

TEST(Pool2d, Errors) {
  Tensor x = rnd({1, 2, 4, 4});
  expect_error([&] { max_pool2d(x, {3}, {1}, {2}); }, "[max_pool2d] padding [2] must be at most half");
  // PyTorch's rule is on the kernel size without dilation: windows wholly in the padding otherwise
  expect_error([] { max_pool2d(rnd({1, 1, 5, 5}), {3, 3}, {1, 1}, {2, 2}, {2, 2}); },
               "[max_pool2d] padding [2, 2] must be at most half of kernel_size [3, 3]");
  expect_error([&] { max_pool2d(x, {5}); }, "too small for kernel_size");
  expect_error([&] { avg_pool2d(x, {0}); }, "kernel_size must be at least 1");
  expect_error([&] { adaptive_avg_pool2d(x, {0, 2}); }, "output_size must be positive");
  expect_error([&] { max_pool2d(rnd({4, 4}), {2}); }, "expected a 3-D");
  expect_error([&] { max_pool2d(x.to(kInt64), {2}); }, "floating-point");
  EXPECT_EQ(max_pool2d(rnd({2, 4, 4}), {2}).shape(), (Shape{2, 2, 2}));
}

// ---- batch norm

// Row-major sums take a vector's lanes in turn along each run of H x W: runs shorter than one
// vector (5 x 2) and longer, not a multiple of it (7 x 5).
TEST(BatchNorm, TrainingNormalisesAndUpdatesRunningStats) {
  for (const auto& [H, W] : {std::pair<int64_t, int64_t>{5, 2}, {7, 5}})
    for (ScalarType dt : {kFloat64, kFloat32})
      for (bool cl : {false, true}) {
        const int64_t inner = H * W, m = 4 * inner;
        Tensor x = rnd({4, 3, H, W}, kFloat64, -2, 3);
        Tensor w = rnd({3}), b = rnd({3});
        Tensor rm = zeros({3}, dt), rv = ones({3}, dt);
        Tensor xin = cl ? x.to(dt).contiguous(MemoryFormat::ChannelsLast) : x.to(dt);
        Tensor y = batch_norm(xin, rm, rv, w.to(dt), b.to(dt), true, 0.1, 1e-5);
        EXPECT_EQ(y.strides(), xin.strides());
        auto xv = values(x), wv = values(w), bv = values(b);
        std::vector<double> mean(3, 0), var(3, 0), expect(xv.size());
        auto channel = [&](size_t i) { return static_cast<size_t>(static_cast<int64_t>(i) / inner % 3); };
        for (size_t i = 0; i < xv.size(); ++i) mean[channel(i)] += xv[i] / m;
        for (size_t i = 0; i < xv.size(); ++i) var[channel(i)] += std::pow(xv[i] - mean[channel(i)], 2) / m;
        for (size_t i = 0; i < xv.size(); ++i) {
          const size_t c = channel(i);
          expect[i] = (xv[i] - mean[c]) / std::sqrt(var[c] + 1e-5) * wv[c] + bv[c];
        }
        const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
        expect_close(y, expect, x.shape(), tol, tol);
        std::vector<double> erm(3), erv(3);
        for (int c = 0; c < 3; ++c) erm[c] = 0.1 * mean[c], erv[c] = 0.9 + 0.1 * var[c] * m / (m - 1);
        expect_close(rm, erm, {3}, tol, tol);
        expect_close(rv, erv, {3}, tol, tol);
        // Evaluation uses the running statistics.
        Tensor ye = batch_norm(xin, rm, rv, w.to(dt), b.to(dt), false);
        auto rmv = values(rm), rvv = values(rv);
        for (size_t i = 0; i < xv.size(); ++i) {
          const size_t c = channel(i);
          expect[i] = (xv[i] - rmv[c]) / std::sqrt(rvv[c] + 1e-5) * wv[c] + bv[c];
        }
        expect_close(ye, expect, x.shape(), tol, tol);
      }
}

// A mean far from 0 against the spread: values 1e8 + x, x of variance about 0.33, in float64
// (whose sum of squares, about 1e16 a value, cannot hold such a variance: the sums are taken
// relative to each channel's first value). The output equals batch norm of x alone, and the
// running variance moves by x's variance, in both layouts.
TEST(BatchNorm, LargeMeanSmallSpreadKeepsItsVariance) {
  for (bool cl : {false, true}) {
    Tensor x = rnd({8, 3, 6, 5}, kFloat64, -1, 1);
    Tensor shifted = cl ? x.add(1e8).contiguous(MemoryFormat::ChannelsLast) : x.add(1e8);
    Tensor rm = zeros({3}, kFloat64), rv = zeros({3}, kFloat64), rm0 = zeros({3}, kFloat64), rv0 = zeros({3}, kFloat64);
    Tensor y = batch_norm(shifted, rm, rv, {}, {}, true, 1.0, 1e-5);
    Tensor want = batch_norm(x, rm0, rv0, {}, {}, true, 1.0, 1e-5);
    expect_close(y, values(want), x.shape(), 1e-6, 1e-6, cl ? "channels-last" : "NCHW");
    expect_close(rv, values(rv0), {3}, 1e-7, 1e-7, "running variance");
    expect_close(rm, values(rm0.add(1e8)), {3}, 1e-7, 0, "running mean");
  }
}

// The running statistics are updated in place, in their own dtype (bfloat16 buffers of a converted
// model too), through a strided view as well, and their version moves (an in-place change).
TEST(BatchNorm, RunningStatsInAnyDtypeAndLayout) {
  const Tensor x = rnd({4, 3, 5, 2}, kFloat64, -2, 3);
  const int64_t m = 4 * 5 * 2;
  std::vector<double> mean(3, 0), var(3, 0);
  const auto xv = values(x);
  for (size_t i = 0; i < xv.size(); ++i) mean[(i / 10) % 3] += xv[i] / m;
  for (size_t i = 0; i < xv.size(); ++i) var[(i / 10) % 3] += std::pow(xv[i] - mean[(i / 10) % 3], 2) / m;
  std::vector<double> erm(3), erv(3);
  for (int c = 0; c < 3; ++c) erm[c] = 0.7 * 0.5 + 0.3 * mean[c], erv[c] = 0.7 * 2.0 + 0.3 * var[c] * m / (m - 1);
  for (ScalarType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor rm = full({3}, 0.5, dt), rv = full({3}, 2.0, dt);
    const uint64_t v0 = rm.version();
    batch_norm(x.to(dt), rm, rv, {}, {}, true, 0.3);
    EXPECT_EQ(rm.dtype(), dt);
    EXPECT_GT(rm.version(), v0);
    const double tol = dt == kBFloat16 ? 2e-2 : 1e-5;
    expect_close(rm, erm, {3}, tol, tol);
    expect_close(rv, erv, {3}, tol, tol);
  }
  Tensor both = full({3, 2}, 0.5), rm = both.select(1, 0), rv = full({6}, 2.0).narrow(0, 1, 5).slice(0, 0, 5, 2);
  batch_norm(x.to(kFloat32), rm, rv, {}, {}, true, 0.3);
  expect_close(rm, erm, {3}, 1e-5, 1e-5);
  expect_close(rv, erv, {3}, 1e-5, 1e-5);
  EXPECT_EQ(values(both.select(1, 1)), (std::vector<double>{0.5, 0.5, 0.5}));  // the rest untouched
  expect_error([&] { batch_norm(x, zeros({3}), ones({3}, kFloat64), {}, {}, true); },
               "running_mean and running_var must have one dtype, got float32 and float64");
}

// batch_norm and batch_norm_relu (random inputs stay away from the ReLU's kink), training and
// evaluation, both layouts.
TEST(BatchNorm, Gradcheck) {
  using V = const std::vector<Tensor>&;
  for (auto* op : {&batch_norm, &batch_norm_relu})
    for (bool cl : {false, true}) {
      Tensor x = rnd({3, 2, 3, 2});
      if (cl) x = x.contiguous(MemoryFormat::ChannelsLast);
      x.requires_grad_();
      Tensor w = rnd({2}).requires_grad_(), b = rnd({2}).requires_grad_();
      EXPECT_TRUE(autograd::gradcheck([&](V t) { return op(t[0], {}, {}, t[1], t[2], true, 0.1, 1e-5); }, {x, w, b}));
      Tensor rm = rnd({2}), rv = rnd({2}, kFloat64, 0.5, 2);
      EXPECT_TRUE(autograd::gradcheck([&](V t) { return op(t[0], rm, rv, t[1], t[2], false, 0.1, 1e-5); }, {x, w, b}));
    }
  Tensor x2 = rnd({5, 3}).requires_grad_();  // BatchNorm1d-style [N, C]
  EXPECT_TRUE(autograd::gradcheck([](V t) { return batch_norm(t[0], {}, {}, {}, {}, true); }, {x2}));
}

TEST(BatchNorm, Float32GradientsMatchFloat64) {
  Tensor x = rnd({4, 5, 6, 7}, kFloat64, -1, 2), w = rnd({5}), b = rnd({5}), gy = rnd({4, 5, 6, 7});
  for (bool cl : {false, true}) {
    std::vector<double> g[2][3];
    for (int k = 0; k < 2; ++k) {
      ScalarType dt = k ? kFloat32 : kFloat64;
      Tensor xs = x.to(dt);
      if (cl) xs = xs.contiguous(MemoryFormat::ChannelsLast);
      xs = xs.detach().requires_grad_();
      Tensor ws = w.to(dt).detach().requires_grad_(), bs = b.to(dt).detach().requires_grad_();
      (batch_norm(xs, {}, {}, ws, bs, true) * gy.to(dt)).sum().backward();
      g[k][0] = values(xs.grad()), g[k][1] = values(ws.grad()), g[k][2] = values(bs.grad());
    }
    for (int i = 0; i < 3; ++i)
      for (size_t j = 0; j < g[0][i].size(); ++j) EXPECT_NEAR(g[1][i][j], g[0][i][j], 1e-4) << cl << " " << i;
  }
}

// Evaluation of an input with an empty spatial dim: empty input gradient, zero weight and bias
// gradients (the backward kernel divided by the empty plane's size).
TEST(BatchNorm, EmptyInputInEvaluationHasGradients) {
  for (const Shape& shape : {Shape{2, 3, 0, 4}, Shape{2, 3, 0}}) {
    Tensor x = zeros(shape, kFloat64).requires_grad_(), w = ones({3}, kFloat64).requires_grad_(),
           b = zeros({3}, kFloat64).requires_grad_();
    batch_norm(x, zeros({3}, kFloat64), ones({3}, kFloat64), w, b, /*training=*/false).sum().backward();
    EXPECT_EQ(x.grad().shape(), shape);
    expect_close(w.grad(), {0, 0, 0}, {3});
    expect_close(b.grad(), {0, 0, 0}, {3});
  }
}

TEST(BatchNorm, Errors) {
  Tensor x = rnd({2, 3, 2, 2});
  expect_error([&] { batch_norm(x, {}, {}, rnd({4}), {}, true); }, "[batch_norm] expected weight of shape [3]");
  expect_error([&] { batch_norm(x, {}, {}, {}, {}, false); }, "needs running_mean and running_var");
  expect_error([&] { batch_norm(rnd({1, 3}), {}, {}, {}, {}, true); }, "more than 1 value per channel");
  expect_error([&] { batch_norm(rnd({3}), {}, {}, {}, {}, true); }, "rank 2 or more");
  expect_error([&] { batch_norm(x, zeros({3}, kFloat64), {}, {}, {}, true); }, "both given or both omitted");
  expect_error([&] { batch_norm_relu(x, {}, {}, rnd({4}), {}, true); }, "[batch_norm_relu] expected weight of shape [3]");
}

// Equal element for element, NaNs where the other has NaNs.
void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto av = values(a), bv = values(b);
  for (size_t i = 0; i < av.size(); ++i)
    if (!(std::isnan(av[i]) && std::isnan(bv[i]))) {
      ASSERT_EQ(av[i], bv[i]) << what << " at " << i;
    }
}

// batch_norm_relu against relu(batch_norm(...)): the same values, gradients and running
// statistics, bit for bit, in every float dtype and layout, training and evaluation; channel 1 is
// constant with bias 0 (its outputs are exactly 0 in training, where the ReLU's gradient is cut:
// the constant is 0.5, so that x * scale + shift is 0 also when the compiler fuses it into one
// rounding, whatever the random weight), and one of its elements is NaN in evaluation.
TEST(BatchNormRelu, EqualsReluOfBatchNormBitForBit) {
  for (ScalarType dt : {kFloat64, kFloat32, kBFloat16, kFloat16})
    for (bool cl : {false, true})
      for (bool training : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + (cl ? " channels-last" : "") + (training ? " training" : " eval"));
        std::vector<double> xv = values(rnd({4, 3, 5, 2}, kFloat64, -2, 3));
        for (size_t i = 0; i < xv.size(); ++i)
          if ((i / 10) % 3 == 1) xv[i] = 0.5;
        if (!training) xv[2 * 30 + 1 * 10 + 3] = std::nan("");  // an element of channel 1, in eval
        Tensor x = tensor(xv, {4, 3, 5, 2}, kFloat64);
        Tensor xin = cl ? x.to(dt).contiguous(MemoryFormat::ChannelsLast) : x.to(dt);
        std::vector<double> bv = values(rnd({3}));
        bv[1] = 0.0;
        Tensor w = rnd({3}).to(dt), b = tensor(bv, {3}, kFloat64).to(dt);
        Tensor gy = rnd({4, 3, 5, 2}).to(dt);
        const Tensor rm0 = rnd({3}).to(dt), rv0 = rnd({3}, kFloat64, 0.5, 2).to(dt);
        Tensor rm[2], rv[2], y[2], grads[2][3];
        for (int fused = 0; fused < 2; ++fused) {
          rm[fused] = rm0.clone(), rv[fused] = rv0.clone();
          Tensor xs = xin.detach().requires_grad_(), ws = w.detach().requires_grad_(),
                 bs = b.detach().requires_grad_();
          y[fused] = fused ? batch_norm_relu(xs, rm[fused], rv[fused], ws, bs, training)
                           : relu(batch_norm(xs, rm[fused], rv[fused], ws, bs, training));
          (y[fused] * gy).sum().backward();
          grads[fused][0] = xs.grad(), grads[fused][1] = ws.grad(), grads[fused][2] = bs.grad();
        }
        EXPECT_EQ(y[1].strides(), y[0].strides());
        expect_same(y[1], y[0], "output");
        if (training) {
          EXPECT_GE((y[1] == 0).sum().item<int64_t>(), 40);  // all of channel 1
        }
        for (int i = 0; i < 3; ++i) expect_same(grads[1][i], grads[0][i], "gradient " + std::to_string(i));
        expect_same(rm[1], rm[0], "running_mean");
        expect_same(rv[1], rv[0], "running_var");
      }
}

// add_relu against relu(a + b): the same values and gradients, bit for bit, in every float dtype,
// channels-last and broadcast operands, sums that are exactly 0, -0 or NaN; integers too; and a
// C++ number on either side.
TEST(AddRelu, EqualsReluOfAddBitForBit) {
  for (ScalarType dt : {kFloat64, kFloat32, kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<double> av = values(rnd({2, 3, 4, 5}, kFloat64, -2, 2)), bv = values(rnd({3, 4, 5}, kFloat64, -2, 2));
    av[0] = 0.5, bv[0] = -0.5;   // exactly 0
    av[1] = -0.0, bv[1] = -0.0;  // -0
    av[2] = std::nan(""), bv[3] = -INFINITY;
    av[4] = 1e-30, bv[4] = -2e-30;  // tiny: -0 or 0 in fp16
    const Tensor a0 = tensor(av, {2, 3, 4, 5}, kFloat64).to(dt).contiguous(MemoryFormat::ChannelsLast);
    const Tensor b0 = tensor(bv, {3, 4, 5}, kFloat64).to(dt);
    const Tensor gy = rnd({2, 3, 4, 5}).to(dt);
    Tensor y[2], ga[2], gb[2];
    for (int fused = 0; fused < 2; ++fused) {
      Tensor a = a0.detach().requires_grad_(), b = b0.detach().requires_grad_();
      y[fused] = fused ? add_relu(a, b) : relu(a + b);
      (y[fused] * gy).sum().backward();
      ga[fused] = a.grad(), gb[fused] = b.grad();
    }
    EXPECT_EQ(y[1].dtype(), dt);
    EXPECT_EQ(y[1].strides(), y[0].strides());
    expect_same(y[1], y[0], "output");
    EXPECT_FALSE(std::signbit(values(y[1])[1]));  // relu(-0) is +0
    expect_same(ga[1], ga[0], "gradient of a");
    expect_same(gb[1], gb[0], "gradient of b");
    expect_same(add_relu(a0, 0.25), relu(a0 + 0.25), "number on the right");
    expect_same(add_relu(-0.25, b0), relu(-0.25 + b0), "number on the left");
  }
  Tensor i = arange(-6, 6, 1, kInt64), j = full({12}, 2, kInt64);
  EXPECT_EQ(values(add_relu(i, j)), values(relu(i + j)));
  EXPECT_EQ(add_relu(i, j).dtype(), kInt64);
  EXPECT_EQ(add_relu(i, 0.5).dtype(), kDefaultFloat);  // the type promotion of add
  expect_error([] { add_relu(zeros({2, 3}), zeros({4})); }, "[add_relu]");
}

}  // namespace

namespace {

// A ResNet-style chain keeps activations channels-last from layer to layer (so oneDNN never
// reorders them), forward and backward.
TEST(CnnLayout, ActivationsStayChannelsLast) {
  using kiln::MemoryFormat;
  kiln::Tensor x = rnd({2, 3, 16, 16}, kiln::kFloat32).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  kiln::Tensor w1 = rnd({8, 3, 3, 3}, kiln::kFloat32).requires_grad_(), w2 = rnd({8, 8, 3, 3}, kiln::kFloat32);
  kiln::Tensor a = kiln::conv2d(x, w1, {}, {2, 2}, {1, 1});
  kiln::Tensor b = kiln::relu(kiln::batch_norm(a, {}, {}, {}, {}, true));
  kiln::Tensor c = kiln::max_pool2d(b, {3}, {2}, {1});
  kiln::Tensor d = kiln::relu(kiln::conv2d(c, w2, {}, {1, 1}, {1, 1}) + c);
  for (const kiln::Tensor* t : {&a, &b, &c, &d}) EXPECT_TRUE(t->is_contiguous(MemoryFormat::ChannelsLast));
  kiln::adaptive_avg_pool2d(d, {1}).flatten(1).sum().backward();
  EXPECT_TRUE(x.grad().is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_TRUE(w1.grad().is_contiguous());
}

}  // namespace
