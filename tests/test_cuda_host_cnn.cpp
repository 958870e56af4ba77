// CPU tests of the CUDA CNN kernels' host-callable parts: pooling's gather ranges and per-element
// math (pool_math.h) against the CPU kernels, batch norm's channel mapping and per-channel math
// (batch_norm_math.h), and the channel sums' launch splits (channel_sums_plan.h) covering every
// element once with the kernels' thread mappings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/batch_norm_math.h"
#include "backend/cuda/channel_sums_plan.h"
#include "backend/dispatch.h"
#include "backend/pool_math.h"
#include "core/tensor_util.h"
#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

namespace kc = backend::cuda;
using backend::PoolAttrs;

PoolAttrs window_attrs(PoolAttrs::Kind kind, int64_t k, int64_t s, int64_t p, int64_t d, bool include_pad = true) {
  PoolAttrs a;
  a.kind = kind;
  a.kernel[0] = a.kernel[1] = k;
  a.stride[0] = a.stride[1] = s;
  a.padding[0] = a.padding[1] = p;
  a.dilation[0] = a.dilation[1] = d;
  a.count_include_pad = include_pad;
  return a;
}

// PyTorch's output size (ceil_mode's last window must start inside the input or left padding).
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = num / s + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// The inputs output o reads along one dim, from the forward definitions.
std::set<int64_t> window_of(const PoolAttrs& a, int64_t o, int64_t in, int64_t out) {
  std::set<int64_t> r;
  if (a.kind == PoolAttrs::Max) {
    for (int64_t k = 0; k < a.kernel[0]; ++k) {
      const int64_t i = o * a.stride[0] - a.padding[0] + k * a.dilation[0];
      if (i >= 0 && i < in) r.insert(i);
    }
  } else {
    const pool::Window w = pool::avg_window(a, 0, o, in, out);
    for (int64_t i = w.start; i < w.end; ++i) r.insert(i);
  }
  return r;
}

struct PoolCase {
  PoolAttrs a;
  int64_t in, out;
};
std::vector<PoolCase> pool_cases() {
  std::vector<PoolCase> cases;
  for (int64_t in : {1, 2, 5, 7, 12, 13})
    for (int64_t k : {1, 2, 3, 5})
      for (int64_t s : {1, 2, 3})
        for (int64_t p = 0; 2 * p <= k; ++p)
          for (int64_t d : {1, 2})
            for (bool ceil_mode : {false, true})
              for (PoolAttrs::Kind kind : {PoolAttrs::Max, PoolAttrs::Avg}) {
                if (kind == PoolAttrs::Avg && d != 1) continue;
                const int64_t span = d * (k - 1) + 1;
                if (2 * p > span) continue;
                const int64_t out = out_size(in, k, s, p, d, ceil_mode);
                if (out <= 0) continue;
                cases.push_back({window_attrs(kind, k, s, p, d), in, out});
              }
  for (int64_t in : {1, 3, 7, 12, 13})
    for (int64_t out : {1, 2, 5, 7, 12, 13}) cases.push_back({window_attrs(PoolAttrs::AdaptiveAvg, 1, 1, 0, 1), in, out});
  return cases;
}

std::string describe(const PoolCase& c) {
  return "kind " + std::to_string(c.a.kind) + " k " + std::to_string(c.a.kernel[0]) + " s " +
         std::to_string(c.a.stride[0]) + " p " + std::to_string(c.a.padding[0]) + " d " +
         std::to_string(c.a.dilation[0]) + " in " + std::to_string(c.in) + " out " + std::to_string(c.out);
}

// The backward kernels gather: input i visits outputs_holding(i). Every output whose window reads
// i must be in that range (else a gradient is lost); for average pooling the range is exactly
// those outputs, and for max pooling every output in it spans i (the arg-max test does the rest).
TEST(CudaHostCnn, PoolGatherRangesInvertTheForwardWindows) {
  const std::vector<PoolCase> cases = pool_cases();
  ASSERT_GT(cases.size(), 500u);
  for (const PoolCase& c : cases) {
    std::vector<std::set<int64_t>> readers(static_cast<size_t>(c.in));
    for (int64_t o = 0; o < c.out; ++o)
      for (int64_t i : window_of(c.a, o, c.in, c.out)) readers[static_cast<size_t>(i)].insert(o);
    for (int64_t i = 0; i < c.in; ++i) {
      const pool::Range r = pool::outputs_holding(c.a, 0, i, c.in, c.out);
      ASSERT_LE(0, r.first) << describe(c);
      ASSERT_LE(r.first, r.last) << describe(c);
      ASSERT_LE(r.last, c.out) << describe(c);
      for (int64_t o : readers[static_cast<size_t>(i)])
        ASSERT_TRUE(o >= r.first && o < r.last) << describe(c) << ": input " << i << " misses output " << o;
      if (c.a.kind == PoolAttrs::Max) {
        for (int64_t o = r.first; o < r.last; ++o) {
          const int64_t start = o * c.a.stride[0] - c.a.padding[0];
          ASSERT_TRUE(i >= start && i <= start + c.a.dilation[0] * (c.a.kernel[0] - 1)) << describe(c) << " o " << o;
        }
      } else {
        ASSERT_EQ(r.last - r.first, static_cast<int64_t>(readers[static_cast<size_t>(i)].size())) << describe(c)
                                                                                                << " input " << i;
      }
    }
  }
}

Tensor random_input(Shape shape, bool channels_last, uint32_t seed, bool ties) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  Tensor t = empty(shape, kFloat32);
  float* p = t.data_ptr<float>();
  // With ties, values from a few levels, so windows hold equal maxima (the first must win).
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = ties ? std::floor(u(gen)) : u(gen);
  return channels_last ? t.contiguous(MemoryFormat::ChannelsLast) : t;
}

// The CUDA kernels' per-element functions (max_at, avg_at, max_grad_at, avg_grad_at) against the
// CPU kernels on whole tensors (channels-last inputs, the op layer's rule; gradients in either
// layout), with overlapping windows, padding, dilation, uneven adaptive bins, and ties and NaN for
// max pooling.
TEST(CudaHostCnn, PoolPerElementMathMatchesTheCpuKernels) {
  struct Cfg {
    PoolAttrs a;
    int64_t h, w, oh, ow;
  };
  const std::vector<Cfg> cfgs = {
      {window_attrs(PoolAttrs::Max, 3, 2, 1, 1), 9, 11, 5, 6},   // ResNet's stem pool
      {window_attrs(PoolAttrs::Max, 2, 2, 0, 1), 8, 8, 4, 4},    // VGG's
      {window_attrs(PoolAttrs::Max, 3, 1, 1, 2), 7, 6, 5, 4},    // dilated, overlapping
      {window_attrs(PoolAttrs::Max, 3, 2, 1, 1), 8, 8, 5, 5},    // ceil mode's last window
      {window_attrs(PoolAttrs::Avg, 3, 2, 1, 1), 9, 10, 5, 5},
      {window_attrs(PoolAttrs::Avg, 3, 2, 1, 1, false), 9, 10, 5, 5},
      {window_attrs(PoolAttrs::Avg, 2, 2, 0, 1), 8, 8, 4, 4},
      {window_attrs(PoolAttrs::AdaptiveAvg, 1, 1, 0, 1), 7, 9, 3, 4},
      {window_attrs(PoolAttrs::AdaptiveAvg, 1, 1, 0, 1), 7, 7, 1, 1},
      {window_attrs(PoolAttrs::AdaptiveAvg, 1, 1, 0, 1), 5, 3, 7, 6},  // more bins than inputs
  };
  uint32_t seed = 1;
  for (const Cfg& cfg : cfgs)
    for (bool channels_last : {false, true})
      for (bool ties : {false, true}) {
        const bool max = cfg.a.kind == PoolAttrs::Max;
        const std::string what = "kind " + std::to_string(cfg.a.kind) + " k " + std::to_string(cfg.a.kernel[0]) +
                                 (channels_last ? " gradient nchw" : " gradient channels-last") + (ties ? " ties" : "");
        const int64_t N = 2, C = ties ? 3 : 19;  // 19: the vectorised channel loop with a tail
        Tensor x = random_input({N, C, cfg.h, cfg.w}, true, seed++, ties);
        if (max && ties) x.data_ptr<float>()[5] = NAN;
        const Shape ys{N, C, cfg.oh, cfg.ow};
        Tensor y = make_empty_strided(ys, channels_last_strides(ys), kFloat32, Device::cpu());
        Tensor ind = make_empty_strided(ys, channels_last_strides(ys), kInt64, Device::cpu());
        std::vector<Tensor> outs = max ? std::vector<Tensor>{y, ind} : std::vector<Tensor>{y};
        backend::run(max ? backend::Op::MaxPool2d : backend::Op::AvgPool2d, Device::cpu(), std::vector<Tensor>{x},
                     std::span<Tensor>(outs), &cfg.a);
        if (max) {  // without the indices (no backward pass will follow): the same values, bit for bit
          std::vector<Tensor> alone{make_empty_strided(ys, channels_last_strides(ys), kFloat32, Device::cpu())};
          backend::run(backend::Op::MaxPool2d, Device::cpu(), std::vector<Tensor>{x}, std::span<Tensor>(alone), &cfg.a);
          ASSERT_EQ(std::memcmp(alone[0].data_ptr(), y.data_ptr(), y.nbytes()), 0) << what;
        }
        Tensor g = random_input(ys, !channels_last, seed++, false);
        Tensor gx = make_empty_strided(x.shape(), x.strides(), kFloat32, Device::cpu());
        std::vector<Tensor> gouts{gx};
        if (max)
          backend::run(backend::Op::MaxPool2dBackward, Device::cpu(), std::vector<Tensor>{g, ind},
                       std::span<Tensor>(gouts), &cfg.a);
        else
          backend::run(backend::Op::AvgPool2dBackward, Device::cpu(), std::vector<Tensor>{g}, std::span<Tensor>(gouts),
                       &cfg.a);
        auto at = [](const Tensor& t, int64_t n, int64_t c, int64_t h, int64_t w) {
          return t.data_ptr<float>()[n * t.stride(0) + c * t.stride(1) + h * t.stride(2) + w * t.stride(3)];
        };
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = 0; c < C; ++c) {
            auto xa = [&](int64_t h, int64_t w) { return at(x, n, c, h, w); };
            auto ga = [&](int64_t h, int64_t w) { return at(g, n, c, h, w); };
            auto ia = [&](int64_t h, int64_t w) {
              return ind.data_ptr<int64_t>()[n * ind.stride(0) + c * ind.stride(1) + h * ind.stride(2) + w * ind.stride(3)];
            };
            for (int64_t oh = 0; oh < cfg.oh; ++oh)
              for (int64_t ow = 0; ow < cfg.ow; ++ow) {
                const float want = at(y, n, c, oh, ow);
                if (max) {
                  const pool::MaxAt<float> m = pool::max_at<float>(cfg.a, oh, ow, cfg.h, cfg.w, xa);
                  ASSERT_EQ(m.arg, ia(oh, ow)) << what << " output " << oh << "," << ow;
                  if (std::isnan(want)) {
                    ASSERT_TRUE(std::isnan(m.value)) << what;
                  }
                  else ASSERT_EQ(m.value, want) << what;
                } else {
                  const float v = pool::avg_at<float>(cfg.a, oh, ow, cfg.h, cfg.w, cfg.oh, cfg.ow, xa);
                  ASSERT_NEAR(v, want, 1e-6 * (1 + std::abs(want))) << what << " output " << oh << "," << ow;
                }
              }
            for (int64_t ih = 0; ih < cfg.h; ++ih)
              for (int64_t iw = 0; iw < cfg.w; ++iw) {
                const float want = at(gx, n, c, ih, iw);
                const float v = max ? pool::max_grad_at<float>(cfg.a, ih, iw, cfg.h, cfg.w, cfg.oh, cfg.ow, ga, ia)
                                    : pool::avg_grad_at<float>(cfg.a, ih, iw, cfg.h, cfg.w, cfg.oh, cfg.ow, ga);
                ASSERT_NEAR(v, want, 1e-6 * (1 + std::abs(want))) << what << " input " << ih << "," << iw;
              }
          }
      }
}

// batch_norm_math.h's channel_of names each element's channel for both layouts the kernels take.
TEST(CudaHostCnn, BatchNormChannelOfEveryElement) {
  for (bool channels_last : {false, true})
    for (Shape s : {Shape{2, 3, 4, 5}, Shape{1, 7, 1, 1}, Shape{3, 1, 2, 2}}) {
      Tensor x = arange(shape_numel(s), kFloat32).reshape(s);
      if (channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
      const bn::Geometry geo = bn::geometry(x);
      EXPECT_EQ(geo.per_channel() * geo.c, x.numel());
      // The element at memory position i holds value v = the NCHW flat index; its channel is (v / HW) % C.
      const float* p = x.data_ptr<float>();
      const int64_t hw = s[2] * s[3];
      for (int64_t i = 0; i < x.numel(); ++i)
        ASSERT_EQ(bn::channel_of(i, geo.c, geo.inner), (static_cast<int64_t>(p[i]) / hw) % s[1])
            << (channels_last ? "channels-last " : "nchw ") << s << " position " << i;
    }
  // Row-major [N, C] and [N, C, L].
  for (Shape s : {Shape{6, 4}, Shape{2, 3, 5}}) {
    Tensor x = arange(shape_numel(s), kFloat32).reshape(s);
    const bn::Geometry geo = bn::geometry(x);
    const int64_t inner = s.size() == 3 ? s[2] : 1;
    for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(bn::channel_of(i, geo.c, geo.inner), (i / inner) % s[1]);
  }
}

// channel_partials_kernel's mapping (a block per channel and chunk, kThreads threads striding
// the chunk) reads each element of [outer, C, inner] once, from its own channel's block.
TEST(CudaHostCnn, ChannelChunksCoverEveryElementOnce) {
  for (int64_t outer : {1, 2, 3, 64})
    for (int64_t channels : {1, 3, 64, 513})
      for (int64_t inner : {2, 7, 49, 3136}) {
        const int64_t per_channel = outer * inner;
        const kc::ChannelChunks p = kc::channel_chunks(per_channel, channels);
        const std::string what = "outer " + std::to_string(outer) + " C " + std::to_string(channels) + " inner " +
                                 std::to_string(inner);
        ASSERT_GE(p.chunks, 1) << what;
        EXPECT_LE(p.chunks, 65535) << what;  // gridDim.y
        EXPECT_LE(p.chunks * channels, std::max<int64_t>(4096, channels)) << what;
        EXPECT_GE(p.chunks * p.per_chunk, per_channel) << what;
        EXPECT_LT((p.chunks - 1) * p.per_chunk, per_channel) << what;  // no chunk empty
        if (outer * channels * inner > 2'000'000) continue;
        std::vector<uint8_t> seen(static_cast<size_t>(outer * channels * inner), 0);
        for (int64_t c = 0; c < channels; ++c)
          for (int64_t chunk = 0; chunk < p.chunks; ++chunk)
            for (int t = 0; t < kc::kThreads; ++t) {
              const int64_t j0 = chunk * p.per_chunk, j1 = std::min(per_channel, j0 + p.per_chunk);
              for (int64_t j = j0 + t; j < j1; j += kc::kThreads) {
                const int64_t o = j / inner, s = j - o * inner, i = (o * channels + c) * inner + s;
                ASSERT_EQ(bn::channel_of(i, channels, inner), c) << what;
                ASSERT_EQ(seen[static_cast<size_t>(i)]++, 0) << what << " element " << i;
              }
            }
        for (uint8_t v : seen) ASSERT_EQ(v, 1) << what;
      }
}

// The CPU's fused-ReLU gradient mask compares the unrounded output with the largest value the
// storage type rounds to +0; the GPU's (and the forward's) rounds it to that type and compares
// with 0. The two agree at the rounding boundary and on random outputs, subnormal ones included.
template <class T>
void expect_mask_is_the_rounded_outputs_sign() {
  auto rounded_positive = [](T x, bn::Affine<float> f) { return static_cast<float>(bn::apply(x, f, false)) > 0.0f; };
  auto kept = [](T x, bn::Affine<float> f) { return bn::relu_masked(1.0f, x, f, true) == 1.0f; };
  const float edge = bn::kRoundsToZero<T>;
  for (float shift : {edge, std::nextafter(edge, 1.0f), std::nextafter(edge, 0.0f), 0.0f, -0.0f, -edge,
                      std::nextafter(edge, 1.0f) * 3, std::numeric_limits<float>::denorm_min(), NAN, INFINITY,
                      -INFINITY, 1e-30f, 6e-8f, 3e-8f}) {
    const bn::Affine<float> f{1.0f, shift};
    EXPECT_EQ(kept(T(0.0f), f), rounded_positive(T(0.0f), f)) << shift;
  }
  EXPECT_FALSE(kept(T(0.0f), bn::Affine<float>{1.0f, edge}));                       // rounds to +0: cut
  EXPECT_TRUE(kept(T(0.0f), bn::Affine<float>{1.0f, std::nextafter(edge, 1.0f)}));  // rounds up: kept
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::uniform_int_distribution<int> e(-150, 4);
  int differ = 0;
  for (int i = 0; i < 200000; ++i) {
    const T x(std::ldexp(u(gen), e(gen)));
    const bn::Affine<float> f{std::ldexp(u(gen), e(gen) / 2), std::ldexp(u(gen), e(gen))};
    differ += kept(x, f) != rounded_positive(x, f);
  }
  EXPECT_EQ(differ, 0);
}

TEST(CudaHostCnn, BatchNormReluMaskIsTheRoundedOutputsSign) {
  expect_mask_is_the_rounded_outputs_sign<float>();
  expect_mask_is_the_rounded_outputs_sign<BFloat16>();
  expect_mask_is_the_rounded_outputs_sign<Half>();
}

// The per-channel arithmetic the CUDA kernels finish with, from sums taken in another order (a
// chunked split, as the GPU's), against the CPU kernels' statistics and gradients in float64,
// with and without the fused ReLU's gradient mask (bn::relu_masked, as the CUDA kernels apply it).
TEST(CudaHostCnn, BatchNormFactorsFromChunkedSumsMatchTheCpuKernel) {
  for (bool training : {true, false})
    for (bool relu : {false, true})
      for (bool channels_last : {false, true}) {
        const Shape s{4, 5, 6, 7};
        Tensor x = random_input(s, channels_last, 7, false).to(kFloat64);
        if (channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
        Tensor g = random_input(s, false, 8, false).to(kFloat64);
        g = channels_last ? g.contiguous(MemoryFormat::ChannelsLast) : g.contiguous();
        const bn::Geometry geo = bn::geometry(x);
        const double eps = 1e-5, count = static_cast<double>(geo.per_channel());
        const double momentum = 0.25;
        backend::BatchNormAttrs attrs{eps, training, relu, momentum};
        // Running statistics before: 0.2 + 0.1 c and 1.5, updated in place by the kernel.
        std::vector<Tensor> st{empty({5}, kFloat64), empty({5}, kFloat64), arange(5, kFloat64).mul(0.1).add(0.2),
                               full({5}, 1.5, kFloat64)};
        backend::run(backend::Op::BatchNormStats, Device::cpu(), std::vector<Tensor>{x}, std::span<Tensor>(st), &attrs);
        // Sums per channel in chunks of 17 elements, in memory order.
        const double *xp = x.data_ptr<double>(), *gp = g.data_ptr<double>();
        std::vector<double> sum(5), sq(5), sg(5), sgx(5);
        for (int64_t i0 = 0; i0 < x.numel(); i0 += 17) {
          std::vector<double> a(5, 0), b(5, 0);
          for (int64_t i = i0; i < std::min(x.numel(), i0 + 17); ++i) {
            const int64_t c = bn::channel_of(i, geo.c, geo.inner);
            a[c] += xp[i];
            b[c] += xp[i] * xp[i];
          }
          for (int c = 0; c < 5; ++c) sum[c] += a[c], sq[c] += b[c];
        }
        Tensor var = empty({5}, kFloat64);  // the biased batch variance, as evaluation's "running" one
        for (int c = 0; c < 5; ++c) {
          const bn::Stats stats = bn::stats_from_sums(sum[c], sq[c], count, eps, 0.0);  // unshifted sums
          EXPECT_NEAR(stats.mean, st[0].data_ptr<double>()[c], 1e-13);
          EXPECT_NEAR(stats.invstd, st[1].data_ptr<double>()[c], 1e-12);
          // PyTorch's running update: the unbiased variance.
          EXPECT_NEAR((1 - momentum) * (0.2 + 0.1 * c) + momentum * stats.mean, st[2].data_ptr<double>()[c], 1e-13);
          EXPECT_NEAR((1 - momentum) * 1.5 + momentum * stats.var * count / (count - 1), st[3].data_ptr<double>()[c],
                      1e-12);
          var.data_ptr<double>()[c] = stats.var;
        }
        Tensor w = arange(5, kFloat64).mul(0.3).add(0.5), b = arange(5, kFloat64).mul(-0.4).add(0.6);
        std::vector<Tensor> bw{make_empty_strided(x.shape(), x.strides(), kFloat64, Device::cpu()),
                               empty({5}, kFloat64), empty({5}, kFloat64)};
        // The kernel takes invstd when training, the (running) variance when not.
        const std::vector<Tensor> in{g, x, st[0], training ? st[1] : var, w, b};
        backend::run(backend::Op::BatchNormBackward, Device::cpu(), in, std::span<Tensor>(bw), &attrs);
        const double* mean = st[0].data_ptr<double>();
        std::vector<double> gm(x.numel());  // g under the ReLU's mask
        int64_t cut = 0;
        for (int64_t i = 0; i < x.numel(); ++i) {
          const int64_t c = bn::channel_of(i, geo.c, geo.inner);
          const auto f = bn::affine<double>(mean[c], st[1].data_ptr<double>()[c], w.data_ptr<double>()[c],
                                            b.data_ptr<double>()[c]);
          gm[i] = bn::relu_masked(gp[i], xp[i], f, relu);
          cut += gm[i] != gp[i];
          sg[c] += gm[i];
          sgx[c] += gm[i] * (xp[i] - mean[c]);
        }
        EXPECT_EQ(cut > x.numel() / 10, relu);
        std::vector<bn::Backward> f;
        for (int c = 0; c < 5; ++c) {
          f.push_back(bn::backward_factors(sg[c], sgx[c], st[1].data_ptr<double>()[c], w.data_ptr<double>()[c], count,
                                           training));
          EXPECT_NEAR(f[c].grad_weight, bw[1].data_ptr<double>()[c], 1e-11);
          EXPECT_NEAR(f[c].grad_bias, bw[2].data_ptr<double>()[c], 1e-11);
        }
        const double* gx = bw[0].data_ptr<double>();
        for (int64_t i = 0; i < x.numel(); ++i) {
          const int64_t c = bn::channel_of(i, geo.c, geo.inner);
          ASSERT_NEAR(f[c].k * gm[i] + f[c].m * (xp[i] - mean[c]) + f[c].d, gx[i], 1e-11) << i;
        }
        // And against autograd's definition in float64 for training: grad_x sums to ~0 per channel.
        if (training)
          for (int c = 0; c < 5; ++c) {
            double s = 0;
            for (int64_t i = 0; i < x.numel(); ++i)
              if (bn::channel_of(i, geo.c, geo.inner) == c) s += gx[i];
            EXPECT_NEAR(s, 0.0, 1e-10) << "channel " << c;
          }
      }
}

}  // namespace
}  // namespace kiln::test
