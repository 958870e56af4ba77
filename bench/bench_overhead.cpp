// Per-op overhead: adding two one-element tensors, with and without autograd recording.
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"

static void BM_TinyAddNoGrad(benchmark::State& state) {
  kiln::Tensor a = kiln::ones({1}), b = kiln::ones({1});
  for (auto _ : state) {
    kiln::Tensor c = a + b;
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_TinyAddNoGrad);

static void BM_TinyAddWithGrad(benchmark::State& state) {
  kiln::Tensor a = kiln::ones({1}).requires_grad_(), b = kiln::ones({1}).requires_grad_();
  for (auto _ : state) {
    kiln::Tensor c = a + b;
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_TinyAddWithGrad);

static void BM_TinyAddScalar(benchmark::State& state) {
  kiln::Tensor a = kiln::ones({1});
  for (auto _ : state) {
    kiln::Tensor c = a + 1.0;
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_TinyAddScalar);

static void BM_TinyAddBackward(benchmark::State& state) {
  kiln::Tensor a = kiln::ones({1}).requires_grad_(), b = kiln::ones({1}).requires_grad_();
  for (auto _ : state) {
    kiln::Tensor c = (a + b).sum();
    c.backward();
  }
}
BENCHMARK(BM_TinyAddBackward);

// The backward engine's cost per node: a chain of 100 one-element multiplications by a number
// (nothing saved but the number), then backward through it.
static void BM_ChainBackward(benchmark::State& state) {
  kiln::Tensor x = kiln::ones({1}).requires_grad_();
  for (auto _ : state) {
    kiln::Tensor y = x;
    for (int i = 0; i < 100; ++i) y = y * 1.0001;
    y.sum().backward();
  }
  state.SetItemsProcessed(state.iterations() * 100);
}
BENCHMARK(BM_ChainBackward);

BENCHMARK_MAIN();
