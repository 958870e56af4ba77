// Memory bandwidth of a large elementwise add, against a STREAM-style add loop on the same machine;
// batch norm with and without its fused ReLU; max pooling at ResNet's stem; sort, topk and
// cumsum; a U-Net decoder's transposed convolution, group norm and upsampling.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <optional>
#include <vector>

#include "kiln/kiln.h"

namespace {
constexpr int64_t kElements = int64_t{1} << 25;  // 32M floats: 128 MiB per array, far beyond cache

// STREAM "add": c = a + b over plain arrays, OpenMP static schedule, 12 bytes moved per element.
void BM_StreamAdd(benchmark::State& state) {
  std::vector<float> a(kElements, 1.f), b(kElements, 2.f), c(kElements);
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < kElements; ++i) c[i] = a[i] + b[i];
    benchmark::DoNotOptimize(c.data());
  }
  state.SetBytesProcessed(state.iterations() * kElements * 12);
}

void BM_KilnAdd(benchmark::State& state) {
  kiln::Tensor a = kiln::ones({kElements}), b = kiln::full({kElements}, 2.0f);
  for (auto _ : state) {
    kiln::Tensor c = a + b;
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * kElements * 12);
}

// The in-place form writes where it reads: no fresh output pages.
void BM_KilnAddInplace(benchmark::State& state) {
  kiln::Tensor a = kiln::ones({kElements}), b = kiln::full({kElements}, 2.0f);
  for (auto _ : state) {
    a.add_(b);
    benchmark::DoNotOptimize(a.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * kElements * 12);
}

void BM_KilnAddBroadcastRow(benchmark::State& state) {
  kiln::Tensor a = kiln::ones({kElements / 1024, 1024}), b = kiln::ones({1024});
  for (auto _ : state) {
    kiln::Tensor c = a + b;
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * kElements * 8);
}

void BM_KilnSum(benchmark::State& state) {
  kiln::Tensor a = kiln::ones({kElements});
  for (auto _ : state) {
    kiln::Tensor s = a.sum();
    benchmark::DoNotOptimize(s.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * kElements * 4);
}
// A bias gradient: [8192, 768] summed over the batch (an outer dim) and over features (inner).
void BM_KilnSumOuterDim(benchmark::State& state) {
  kiln::Tensor a = kiln::ones({8192, 768});
  for (auto _ : state) {
    kiln::Tensor s = a.sum({0});
    benchmark::DoNotOptimize(s.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * a.nbytes());
}

void BM_KilnSumInnerDim(benchmark::State& state) {
  kiln::Tensor a = kiln::ones({8192, 768});
  for (auto _ : state) {
    kiln::Tensor s = a.sum({1});
    benchmark::DoNotOptimize(s.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * a.nbytes());
}
// Transcendental unary ops on 16M floats (vectorized exp/tanh/erf): in + out bytes.
template <kiln::Tensor (*Op)(const kiln::Tensor&)>
void BM_KilnUnary(benchmark::State& state) {
  kiln::manual_seed(0);
  kiln::Tensor x = kiln::randn({int64_t{1} << 24});
  for (auto _ : state) {
    kiln::Tensor y = Op(x);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * x.nbytes() * 2);
}
kiln::Tensor gelu_erf(const kiln::Tensor& x) { return kiln::gelu(x); }

// A bfloat16 tensor of 16M elements times a number: exact in bfloat16 (arg 0: 0.125) or not (arg 1:
// 0.1, kept in float32 by the op layer as PyTorch's opmath does): the two should cost the same.
void BM_KilnMulNumberBf16(benchmark::State& state) {
  kiln::manual_seed(0);
  kiln::Tensor x = kiln::randn({int64_t{1} << 24}).to(kiln::kBFloat16);
  const double number = state.range(0) == 0 ? 0.125 : 0.1;
  for (auto _ : state) {
    kiln::Tensor y = x * number;
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * x.nbytes() * 2);
}
}  // namespace

BENCHMARK(BM_KilnUnary<kiln::exp>)->Name("BM_KilnExp")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnUnary<kiln::sigmoid>)->Name("BM_KilnSigmoid")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnUnary<kiln::tanh>)->Name("BM_KilnTanh")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnUnary<gelu_erf>)->Name("BM_KilnGelu")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnSumOuterDim)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_KilnSumInnerDim)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_StreamAdd)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnAdd)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnAddInplace)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnAddBroadcastRow)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnSum)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnMulNumberBf16)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
// Batch norm then ReLU, forward and backward, at ResNet-50's first bottleneck (batch 16,
// training): the two ops one after the other (range(0) = 0) against batch_norm_relu (1), in the
// layout range(1) says (0 row-major, 1 channels-last).
void BM_BatchNormRelu(benchmark::State& state) {
  kiln::manual_seed(0);
  const kiln::MemoryFormat f = state.range(1) ? kiln::MemoryFormat::ChannelsLast : kiln::MemoryFormat::Contiguous;
  const kiln::Tensor x0 = kiln::randn({16, 64, 56, 56}).contiguous(f);
  const kiln::Tensor gy = kiln::randn({16, 64, 56, 56}).contiguous(f);
  kiln::Tensor w = kiln::ones({64}).requires_grad_(), b = kiln::zeros({64}).requires_grad_();
  for (auto _ : state) {
    kiln::Tensor x = x0.detach().requires_grad_();
    kiln::Tensor y = state.range(0) ? kiln::batch_norm_relu(x, {}, {}, w, b, true)
                                    : kiln::relu(kiln::batch_norm(x, {}, {}, w, b, true));
    y.backward(gy);
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
}

BENCHMARK(BM_BatchNormRelu)->ArgsProduct({{0, 1}, {0, 1}})->UseRealTime()->Unit(benchmark::kMillisecond);
// ResNet-50's stem pooling at batch 16 (3x3, stride 2, padding 1 over [16, 64, 112, 112]) in
// the layout range(0) says (0 row-major, 1 channels-last); range(1) = 1 adds the backward pass.
void BM_MaxPool2d(benchmark::State& state) {
  kiln::manual_seed(0);
  const kiln::MemoryFormat f = state.range(0) ? kiln::MemoryFormat::ChannelsLast : kiln::MemoryFormat::Contiguous;
  const kiln::Tensor x0 = kiln::randn({16, 64, 112, 112}).contiguous(f);
  const kiln::Tensor gy = kiln::randn({16, 64, 56, 56}).contiguous(f);
  for (auto _ : state) {
    kiln::Tensor x = x0.detach().requires_grad_(state.range(1) != 0);
    kiln::Tensor y = kiln::max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
    if (state.range(1)) y.backward(gy);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_MaxPool2d)->ArgsProduct({{0, 1}, {0, 1}})->UseRealTime()->Unit(benchmark::kMillisecond);

// Layout changes: ResNet-50's first bottleneck activation [16, 256, 56, 56] from row-major to
// channels-last (range(0) = 0) and back (1), as .contiguous(format) copies it.
void BM_CopyLayout(benchmark::State& state) {
  kiln::manual_seed(0);
  const bool to_cl = state.range(0) == 0;
  const kiln::Tensor x = kiln::randn({16, 256, 56, 56})
                             .contiguous(to_cl ? kiln::MemoryFormat::Contiguous : kiln::MemoryFormat::ChannelsLast);
  for (auto _ : state) {
    kiln::Tensor y = x.contiguous(to_cl ? kiln::MemoryFormat::ChannelsLast : kiln::MemoryFormat::Contiguous);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * 2 * x.numel() * 4);
}
BENCHMARK(BM_CopyLayout)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// ResNet-50's stem convolution at batch 16 (3 -> 64 channels, 7x7, stride 2, padding 3), forward
// and the weight's gradient, fed images in the layout range(0) says (0 row-major: what a model gets
// from an NCHW data pipeline; 1 channels-last); the weights are channels-last, as kiln bench's.
void BM_Conv2dStem(benchmark::State& state) {
  kiln::manual_seed(0);
  const kiln::MemoryFormat f = state.range(0) ? kiln::MemoryFormat::ChannelsLast : kiln::MemoryFormat::Contiguous;
  const kiln::Tensor x = kiln::randn({16, 3, 224, 224}).contiguous(f);
  kiln::Tensor w = kiln::randn({64, 3, 7, 7}).contiguous(kiln::MemoryFormat::ChannelsLast).requires_grad_();
  const kiln::Tensor gy = kiln::randn({16, 64, 112, 112}).contiguous(kiln::MemoryFormat::ChannelsLast);
  for (auto _ : state) {
    w.set_grad(kiln::Tensor());
    kiln::conv2d(x, w, {}, {2, 2}, {3, 3}).backward(gy);
    benchmark::DoNotOptimize(w.grad().data_ptr());
  }
}
BENCHMARK(BM_Conv2dStem)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// Indexing and selection on [4096, 1024] float32: gather and scatter_add along dim 1 with random
// indices (range(0) = 0, 1), where with a random mask (2), bfloat16 GELU (3), and index_select
// forward and backward along dim 0 (4) and dim 1 (5) with 4096 and 1024 random indices.
void BM_IndexAndSelect(benchmark::State& state) {
  kiln::manual_seed(0);
  const int64_t r = 4096, c = 1024;
  const kiln::Tensor x = kiln::randn({r, c}), y = kiln::randn({r, c}), xb = x.to(kiln::kBFloat16);
  const kiln::Tensor idx = kiln::randint(0, c, {r, c}), mask = kiln::rand({r, c}).gt(0.5);
  const kiln::Tensor xg = x.detach().requires_grad_(true), rows = kiln::randint(0, r, {r}),
                     cols = kiln::randint(0, c, {c});
  for (auto _ : state) {
    kiln::Tensor out;
    switch (state.range(0)) {
      case 0:
        out = kiln::gather(x, 1, idx);
        break;
      case 1:
        out = kiln::scatter_add(kiln::zeros({r, c}), 1, idx, x);
        break;
      case 2:
        out = kiln::where(mask, x, y);
        break;
      case 3:
        out = kiln::gelu(xb);
        break;
      default:
        out = kiln::index_select(xg, state.range(0) == 4 ? 0 : 1, state.range(0) == 4 ? rows : cols);
        out.backward(y);
        break;
    }
    benchmark::DoNotOptimize(out.data_ptr());
  }
}
BENCHMARK(BM_IndexAndSelect)->DenseRange(0, 5)->UseRealTime()->Unit(benchmark::kMillisecond);

// Unary math on [4096, 1024] float32 in [0.5, 1.5): log (range(0) = 0), log1p (1), expm1 (2),
// sqrt (3), x.pow(2) (4), x.pow(2.5) (libm's pow, 5), and x.pow(2) forward and backward (6).
void BM_UnaryMath(benchmark::State& state) {
  kiln::manual_seed(0);
  const kiln::Tensor x = kiln::rand({4096, 1024}) + 0.5, xg = x.detach().requires_grad_(true);
  for (auto _ : state) {
    kiln::Tensor out;
    switch (state.range(0)) {
      case 0: out = kiln::log(x); break;
      case 1: out = kiln::log1p(x); break;
      case 2: out = kiln::expm1(x); break;
      case 3: out = kiln::sqrt(x); break;
      case 4: out = kiln::pow(x, 2.0); break;
      case 5: out = kiln::pow(x, 2.5); break;
      default:
        out = kiln::pow(xg, 2.0).sum();
        out.backward();
        break;
    }
    benchmark::DoNotOptimize(out.data_ptr());
  }
}
BENCHMARK(BM_UnaryMath)->DenseRange(0, 6)->UseRealTime()->Unit(benchmark::kMillisecond);

// Sorting and running sums, at sizes a model meets: top-5 of [128, 1000] ImageNet logits
// (range(0) = 0), top-5 of [8192, 30522] masked-LM logits (BERT-base at batch 64; 1), sort of
// [1024, 1024] float32 along the last dim (2) and along dim 0 (3), one row of 2^22 (4), and cumsum
// of [64, 128, 768] along dim 1 (5) and along the last dim (6).
void BM_SortAndScan(benchmark::State& state) {
  kiln::manual_seed(0);
  const int64_t which = state.range(0);
  const kiln::Tensor x = which == 0   ? kiln::randn({128, 1000})
                         : which == 1 ? kiln::randn({8192, 30522})
                         : which == 4 ? kiln::randn({int64_t{1} << 22})
                         : which >= 5 ? kiln::randn({64, 128, 768})
                                      : kiln::randn({1024, 1024});
  for (auto _ : state) {
    kiln::Tensor out;
    switch (which) {
      case 0:
      case 1: out = std::get<1>(kiln::topk(x, 5)); break;
      case 2:
      case 4: out = std::get<0>(kiln::sort(x)); break;
      case 3: out = std::get<0>(kiln::sort(x, 0)); break;
      case 5: out = kiln::cumsum(x, 1); break;
      default: out = kiln::cumsum(x, -1); break;
    }
    benchmark::DoNotOptimize(out.data_ptr());
  }
}
BENCHMARK(BM_SortAndScan)->DenseRange(0, 6)->UseRealTime()->Unit(benchmark::kMillisecond);

// Selection, contraction and rounded division: nonzero of a [64, 128] mask (BERT's masked-LM
// positions at batch 64; range(0) = 0) and of a [4096, 1024] one (1), masked_select with the
// latter (2), BERT-base's attention scores [64, 12, 128, 64] by einsum "bhqd,bhkd->bhqk" (3) and by
// matmul with a transpose (4), remainder of 2^22 floats by 3.7 (5), floor_divide of 2^22 int64 by
// 7 (6). The masks are 15% true.
void BM_SelectAndContract(benchmark::State& state) {
  kiln::manual_seed(0);
  const int64_t which = state.range(0);
  const kiln::Tensor small = kiln::rand({64, 128}) < 0.15, big = kiln::rand({4096, 1024}) < 0.15;
  const kiln::Tensor values = kiln::randn({4096, 1024});
  const kiln::Tensor q = which == 3 || which == 4 ? kiln::randn({64, 12, 128, 64}) : kiln::Tensor();
  const kiln::Tensor k = which == 3 || which == 4 ? kiln::randn({64, 12, 128, 64}) : kiln::Tensor();
  const kiln::Tensor floats = kiln::randn({int64_t{1} << 22}) * 100;
  const kiln::Tensor ints = kiln::randint(-100000, 100000, {int64_t{1} << 22});
  for (auto _ : state) {
    kiln::Tensor out;
    switch (which) {
      case 0: out = kiln::nonzero(small); break;
      case 1: out = kiln::nonzero(big); break;
      case 2: out = kiln::masked_select(values, big); break;
      case 3: out = kiln::einsum("bhqd,bhkd->bhqk", {q, k}); break;
      case 4: out = kiln::matmul(q, k.transpose(-1, -2)); break;
      case 5: out = floats % 3.7; break;
      default: out = kiln::floor_divide(ints, 7); break;
    }
    benchmark::DoNotOptimize(out.data_ptr());
  }
}
BENCHMARK(BM_SelectAndContract)->DenseRange(0, 6)->UseRealTime()->Unit(benchmark::kMillisecond);

// A U-Net decoder's ops at batch 16 on [16, 64, 32, 32] activations, forward and backward (the
// gradient of the output's sum) unless said: ConvTranspose2d(64, 32, 2, stride 2) (0), group_norm
// of 32 groups with weight and bias (1), 2x nearest upsampling (2), 2x bilinear (3), 2x bilinear
// forward only (4). bench/pytorch_sort_scan.py cnn runs torch's.
void BM_CnnDecoderOps(benchmark::State& state) {
  kiln::manual_seed(0);
  const int64_t which = state.range(0);
  kiln::Tensor x = kiln::randn({16, 64, 32, 32}).requires_grad_();
  const kiln::Tensor w = (kiln::randn({64, 32, 2, 2}) * 0.1).requires_grad_();
  const kiln::Tensor gw = kiln::ones({64}).requires_grad_(), gb = kiln::zeros({64}).requires_grad_();
  for (auto _ : state) {
    kiln::Tensor out;
    std::optional<kiln::NoGradGuard> inference;
    if (which == 4) inference.emplace();
    switch (which) {
      case 0: out = kiln::conv_transpose2d(x, w, {}, {2, 2}); break;
      case 1: out = kiln::group_norm(x, 32, gw, gb); break;
      case 2: out = kiln::interpolate(x, {}, {2.0}); break;
      default: out = kiln::interpolate(x, {}, {2.0}, "bilinear"); break;
    }
    if (which < 4) out.sum().backward();
    benchmark::DoNotOptimize(out.data_ptr());
    x.set_grad({});
  }
}
BENCHMARK(BM_CnnDecoderOps)->DenseRange(0, 4)->UseRealTime()->Unit(benchmark::kMillisecond);

// Indexing (kiln/indexing.h) and searchsorted, forward only: x[idx] of 4096 rows of [8192, 256] (0),
// x[:, idx] of 128 columns (1), x[mask] = 0 with a 15% mask (2), x.index_put_((idx,), v,
// accumulate=True) of 4096 rows (3), x[mask] (4), searchsorted of 2^20 values in 2^16 (5).
// bench/pytorch_sort_scan.py indexing runs torch's.
void BM_Indexing(benchmark::State& state) {
  using namespace kiln::indexing;
  kiln::manual_seed(0);
  const int64_t which = state.range(0);
  kiln::Tensor x = kiln::randn({8192, 256});
  const kiln::Tensor rows = kiln::randint(0, 8192, {4096}), cols = kiln::randint(0, 256, {128});
  const kiln::Tensor mask = kiln::rand({8192, 256}) < 0.15, v = kiln::randn({4096, 256});
  const kiln::Tensor sorted = std::get<0>(kiln::sort(kiln::randn({1 << 16}))), probes = kiln::randn({1 << 20});
  for (auto _ : state) {
    kiln::Tensor out;
    switch (which) {
      case 0: out = x.index({rows}); break;
      case 1: out = x.index({Slice(), cols}); break;
      case 2: out = x.index_put_({mask}, 0); break;
      case 3: out = x.index_put_({rows}, v, true); break;
      case 4: out = x.index({mask}); break;
      default: out = kiln::searchsorted(sorted, probes); break;
    }
    benchmark::DoNotOptimize(out.data_ptr());
  }
}
BENCHMARK(BM_Indexing)->DenseRange(0, 5)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
