// One SGD step over ResNet-50's parameter count (25.6M float32 in 161 tensors), against a
// STREAM-style fused loop doing the same update, and a plain copy for the machine's bandwidth.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <vector>

#include "kiln/kiln.h"
#include "kiln/optim.h"

namespace {
constexpr int64_t kParams = 25'557'032;  // torchvision resnet50
constexpr int kTensors = 161;

// kTensors tensors summing to kParams elements, with gradients set.
std::vector<kiln::Tensor> make_params() {
  std::vector<kiln::Tensor> ps;
  int64_t left = kParams;
  for (int i = 0; i < kTensors; ++i) {
    const int64_t n = i + 1 == kTensors ? left : kParams / kTensors;
    left -= n;
    kiln::Tensor p = kiln::full({n}, 0.5f).requires_grad_();
    p.set_grad(kiln::full({n}, 0.01f));
    ps.push_back(p);
  }
  return ps;
}

// Bytes a fused kernel must move per element: read p, g (and buf), write p (and buf).
int64_t ideal_bytes(bool momentum) { return kParams * 4 * (momentum ? 5 : 3); }

void run_sgd(benchmark::State& state, kiln::optim::SGDOptions o) {
  auto ps = make_params();
  kiln::optim::SGD opt(ps, o);
  opt.step();  // creates the momentum buffers
  for (auto _ : state) opt.step();
  state.SetBytesProcessed(state.iterations() * ideal_bytes(o.momentum != 0));
  state.counters["params"] = static_cast<double>(kParams);
}

void BM_SGDPlain(benchmark::State& s) { run_sgd(s, {.lr = 0.1}); }
void BM_SGDMomentum(benchmark::State& s) { run_sgd(s, {.lr = 0.1, .momentum = 0.9}); }
void BM_SGDMomentumWeightDecay(benchmark::State& s) { run_sgd(s, {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4}); }
void BM_SGDNesterovWeightDecay(benchmark::State& s) {
  run_sgd(s, {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true});
}

// The same momentum + weight-decay update in one fused loop: the floor an SGD kernel could reach.
void BM_FusedLoopMomentumWeightDecay(benchmark::State& state) {
  std::vector<float> p(kParams, 0.5f), g(kParams, 0.01f), buf(kParams, 0.f);
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < kParams; ++i) {
      const float d = g[i] + 1e-4f * p[i];
      buf[i] = 0.9f * buf[i] + d;
      p[i] -= 0.1f * buf[i];
    }
    benchmark::DoNotOptimize(p.data());
  }
  state.SetBytesProcessed(state.iterations() * ideal_bytes(true));
}

void BM_KilnCopy(benchmark::State& state) {
  kiln::Tensor a = kiln::ones({kParams}), b = kiln::zeros({kParams});
  for (auto _ : state) b.copy_(a);
  state.SetBytesProcessed(state.iterations() * kParams * 8);
}

BENCHMARK(BM_SGDPlain)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SGDMomentum)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SGDMomentumWeightDecay)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SGDNesterovWeightDecay)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FusedLoopMomentumWeightDecay)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_KilnCopy)->Unit(benchmark::kMillisecond)->UseRealTime();
}  // namespace

BENCHMARK_MAIN();
