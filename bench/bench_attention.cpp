// Fused scaled_dot_product_attention against the composite (matmul, softmax, matmul) at BERT-base's
// shape, B=8, H=12, S=128, E=64, float32, forward and forward + backward; arg 0: no mask, 1: a
// [B, 1, 1, S] float padding mask; arg 1: dropout in percent. BM_CudaPaths: the CUDA kernels' two
// paths at 512 tokens (on a GPU only).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "kiln/kiln.h"

namespace {

constexpr int64_t kB = 8, kH = 12, kS = 128, kE = 64;

kiln::Tensor composite(const kiln::Tensor& q, const kiln::Tensor& k, const kiln::Tensor& v, const kiln::Tensor& mask,
                       double p) {
  kiln::Tensor s = kiln::mul(kiln::matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(double(kE)));
  if (mask.defined()) s = kiln::add(s, mask);
  kiln::Tensor a = kiln::softmax(s, -1);
  if (p > 0) a = kiln::dropout(a, p, true);
  return kiln::matmul(a, v);
}

struct Inputs {
  kiln::Tensor q, k, v, mask, grad;
  explicit Inputs(bool with_mask, bool requires_grad) {
    kiln::manual_seed(0);
    q = kiln::randn({kB, kH, kS, kE}), k = kiln::randn({kB, kH, kS, kE}), v = kiln::randn({kB, kH, kS, kE});
    if (with_mask) {  // the last quarter of each sequence is padding, as BERT's extended mask
      mask = kiln::zeros({kB, 1, 1, kS});
      mask.narrow(3, kS * 3 / 4, kS / 4).fill_(-10000.0);
    }
    grad = kiln::randn({kB, kH, kS, kE});
    if (requires_grad) q.requires_grad_(), k.requires_grad_(), v.requires_grad_();
  }
};

void set_flops(benchmark::State& state, double passes) {
  // Two products of [S, E] x [E, S] per head forward; backward recomputes one and does four.
  const double f = 2.0 * 2.0 * kB * kH * kS * kS * kE * passes;
  state.counters["GFLOP/s"] = benchmark::Counter(f * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

template <bool kFused>
void BM_Forward(benchmark::State& state) {
  Inputs in(state.range(0) != 0, false);
  const double p = state.range(1) / 100.0;
  kiln::NoGradGuard ng;
  for (auto _ : state) {
    kiln::Tensor y = kFused ? kiln::scaled_dot_product_attention(in.q, in.k, in.v, in.mask, p)
                            : composite(in.q, in.k, in.v, in.mask, p);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  set_flops(state, 1.0);
}

template <bool kFused>
void BM_ForwardBackward(benchmark::State& state) {
  Inputs in(state.range(0) != 0, true);
  const double p = state.range(1) / 100.0;
  for (auto _ : state) {
    kiln::Tensor y = kFused ? kiln::scaled_dot_product_attention(in.q, in.k, in.v, in.mask, p)
                            : composite(in.q, in.k, in.v, in.mask, p);
    auto g = kiln::autograd::grad({y}, {in.q, in.k, in.v}, {in.grad});
    benchmark::DoNotOptimize(g[0].data_ptr());
  }
  set_flops(state, 3.5);
}

void args(benchmark::internal::Benchmark* b) {
  b->Args({0, 0})->Args({1, 0})->Args({1, 10})->Unit(benchmark::kMillisecond)->UseRealTime();
}

// On a GPU: the CUDA kernels' two paths at BERT's 512 tokens (B=16, H=12, E=64, a padding mask,
// dropout 10%), forward and backward; arg 0: 0 the composed path (cuBLASLt products and row
// kernels, the default there), 1 the fused kernels (forced by a score budget of one byte);
// arg 1: 0 float32, 1 bfloat16. Skipped without a GPU.
void BM_CudaPaths(benchmark::State& state) {
  if (!kiln::cuda::is_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  constexpr int64_t B = 16, S = 512;
  const bool fused = state.range(0) != 0;
  const kiln::ScalarType dt = state.range(1) != 0 ? kiln::kBFloat16 : kiln::kFloat32;
  const kiln::Device gpu = kiln::Device::cuda(0);
  kiln::manual_seed(0);
  auto make = [&] { return kiln::randn({B, kH, S, kE}).to(gpu, dt).requires_grad_(); };
  kiln::Tensor q = make(), k = make(), v = make(), grad = kiln::randn({B, kH, S, kE}).to(gpu, dt);
  kiln::Tensor mask = kiln::zeros({B, 1, 1, S});
  mask.narrow(3, S * 3 / 4, S / 4).fill_(-10000.0);
  mask = mask.to(gpu, dt);
  if (fused) setenv("KILN_ATTENTION_SCORE_BUDGET", "1", 1);
  for (auto _ : state) {
    kiln::Tensor y = kiln::scaled_dot_product_attention(q, k, v, mask, 0.1);
    auto g = kiln::autograd::grad({y}, {q, k, v}, {grad});
    kiln::cuda::synchronize();
  }
  unsetenv("KILN_ATTENTION_SCORE_BUDGET");
  const double f = 2.0 * 2.0 * B * kH * S * S * kE * 3.5;
  state.counters["TFLOP/s"] = benchmark::Counter(f * state.iterations() / 1e12, benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_CudaPaths)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Forward<true>)->Name("FusedForward")->Apply(args);
BENCHMARK(BM_Forward<false>)->Name("CompositeForward")->Apply(args);
BENCHMARK(BM_ForwardBackward<true>)->Name("FusedForwardBackward")->Apply(args);
BENCHMARK(BM_ForwardBackward<false>)->Name("CompositeForwardBackward")->Apply(args);
BENCHMARK_MAIN();
