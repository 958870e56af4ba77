// One SGD step over ResNet-50's parameter count (25.6M float32 in 161 tensors), against a
// STREAM-style fused loop doing the same update, and a plain copy for the machine's bandwidth;
// one Adam/AdamW step over BERT-base's parameters (109.5M float32 in 199 tensors), fused and as
// the per-tensor op sequence of torch.optim.AdamW's single-tensor path (the unfused baseline);
// gradient clipping over BERT-base's gradients, multi-tensor and per tensor; RMSprop over BERT-base in
// torch's fused elementwise ops and in separate ones.
// Bytes per second count the traffic a fused kernel must move: SGD reads p, g (and buf) and
// writes p (and buf); Adam reads p, g, m, v and writes p, m, v (plus vmax with amsgrad).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <memory>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/utils.h"
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

// bert-base-uncased's parameter shapes: embeddings, 12 encoder layers, pooler.
std::vector<kiln::Shape> bert_base_shapes() {
  std::vector<kiln::Shape> s{{30522, 768}, {512, 768}, {2, 768}, {768}, {768}};
  for (int layer = 0; layer < 12; ++layer) {
    for (int i = 0; i < 4; ++i) s.insert(s.end(), {{768, 768}, {768}});  // q, k, v, attention output
    s.insert(s.end(), {{768}, {768}, {3072, 768}, {3072}, {768, 3072}, {768}, {768}, {768}});
  }
  s.insert(s.end(), {{768, 768}, {768}});
  return s;
}

struct BertParams {
  std::vector<kiln::Tensor> params;
  int64_t numel = 0;
  BertParams() {
    for (const auto& shape : bert_base_shapes()) {
      kiln::Tensor p = kiln::full(shape, 0.02f).requires_grad_();
      p.set_grad(kiln::full(shape, 1e-3f));
      numel += p.numel();
      params.push_back(p);
    }
  }
};

void run_adam(benchmark::State& state, bool decoupled, bool amsgrad) {
  BertParams b;
  std::unique_ptr<kiln::optim::AdamBase> opt;
  if (decoupled) opt = std::make_unique<kiln::optim::AdamW>(b.params, kiln::optim::AdamWOptions{.amsgrad = amsgrad});
  else opt = std::make_unique<kiln::optim::Adam>(b.params, kiln::optim::AdamOptions{.weight_decay = 0.01, .amsgrad = amsgrad});
  opt->step();  // creates the state
  for (auto _ : state) opt->step();
  state.SetBytesProcessed(state.iterations() * b.numel * 4 * (amsgrad ? 9 : 7));
  state.counters["params"] = static_cast<double>(b.numel);
  state.counters["tensors"] = static_cast<double>(b.params.size());
}

void BM_AdamW(benchmark::State& s) { run_adam(s, true, false); }
void BM_AdamWAmsgrad(benchmark::State& s) { run_adam(s, true, true); }
void BM_AdamL2(benchmark::State& s) { run_adam(s, false, false); }

// torch.optim.AdamW's single-tensor path as kiln ops, one tensor at a time: the step before
// the fused kernel (each op a pass over memory, temporaries allocated per op).
void BM_AdamWPerTensorOps(benchmark::State& state) {
  BertParams b;
  std::vector<kiln::Tensor> m, v;
  for (const auto& p : b.params) {
    m.push_back(kiln::zeros_like(p));
    v.push_back(kiln::zeros_like(p));
  }
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  kiln::NoGradGuard no_grad;
  int step = 0;
  for (auto _ : state) {
    ++step;
    const double bc1 = 1 - std::pow(b1, step), bc2_sqrt = std::sqrt(1 - std::pow(b2, step));
    for (size_t i = 0; i < b.params.size(); ++i) {
      kiln::Tensor& p = b.params[i];
      const kiln::Tensor g = p.grad();
      p.mul_(1 - lr * wd);
      m[i].mul_(b1).add_(g * (1 - b1));
      v[i].mul_(b2).add_(g * g * (1 - b2));
      kiln::Tensor denom = v[i].sqrt().div_(bc2_sqrt).add_(eps);
      p.sub_(m[i] / denom * (lr / bc1));
    }
  }
  state.SetBytesProcessed(state.iterations() * b.numel * 4 * 7);
}

// The momentum + weight-decay update as kiln ops per tensor (what SGD::step did before the
// fused kernel): d = p * wd + g; buf = buf * momentum + d; p -= buf * lr.
void BM_SGDMomentumWeightDecayPerTensorOps(benchmark::State& state) {
  auto ps = make_params();
  std::vector<kiln::Tensor> bufs;
  for (const auto& p : ps) bufs.push_back(kiln::zeros_like(p));
  kiln::NoGradGuard no_grad;
  for (auto _ : state)
    for (size_t i = 0; i < ps.size(); ++i) {
      kiln::Tensor d = ps[i] * 1e-4;
      d.add_(ps[i].grad());
      bufs[i].mul_(0.9);
      bufs[i].add_(d);
      ps[i].sub_(bufs[i] * 0.1);
    }
  state.SetBytesProcessed(state.iterations() * ideal_bytes(true));
}

// RMSprop with momentum over BERT-base's parameters: torch's update in addcmul_/addcdiv_/add_
// with alpha (what RMSprop::step runs), and the same update in separate ops, each rounding (what
// it ran before those ops existed). Reads p, g, v, buf and writes p, v, buf.
void BM_RMSpropMomentum(benchmark::State& state) {
  BertParams b;
  kiln::optim::RMSprop opt(b.params, {.lr = 1e-3, .momentum = 0.9});
  opt.step();  // creates the state
  for (auto _ : state) opt.step();
  state.SetBytesProcessed(state.iterations() * b.numel * 4 * 7);
}

void BM_RMSpropMomentumSeparateOps(benchmark::State& state) {
  BertParams b;
  std::vector<kiln::Tensor> v, buf;
  for (const auto& p : b.params) {
    v.push_back(kiln::zeros_like(p));
    buf.push_back(kiln::zeros_like(p));
  }
  const double alpha = 0.99, lr = 1e-3, eps = 1e-8, momentum = 0.9;
  kiln::NoGradGuard no_grad;
  for (auto _ : state)
    for (size_t i = 0; i < b.params.size(); ++i) {
      kiln::Tensor& p = b.params[i];
      const kiln::Tensor g = p.grad();
      v[i].mul_(alpha);
      v[i].add_(g * (1 - alpha) * g);
      kiln::Tensor avg = v[i].sqrt();
      avg.add_(eps);
      buf[i].mul_(momentum);
      buf[i].add_(g / avg);
      p.add_(buf[i] * -lr);
    }
  state.SetBytesProcessed(state.iterations() * b.numel * 4 * 7);
}

// clip_grad_norm_ over BERT-base's gradients (the multi-tensor ForeachNorm and ForeachMul), and
// the per-tensor sequence it replaced: a norm per gradient, their stack and norm, a multiply per
// gradient. max_norm above the total: the gradients keep their values from one call to the next.
void BM_ClipGradNorm(benchmark::State& state) {
  BertParams b;
  for (auto _ : state) benchmark::DoNotOptimize(kiln::nn::utils::clip_grad_norm_(b.params, 1e9));
  state.SetBytesProcessed(state.iterations() * b.numel * 4 * 3);  // read for the norms, read and write to scale
}

void BM_ClipGradNormPerTensorOps(benchmark::State& state) {
  BertParams b;
  kiln::NoGradGuard no_grad;
  for (auto _ : state) {
    std::vector<kiln::Tensor> norms;
    for (const auto& p : b.params) norms.push_back(kiln::norm(p.grad(), 2.0));
    const kiln::Tensor total = kiln::norm(kiln::stack(norms), 2.0);
    const kiln::Tensor coef = kiln::clamp_max(1e9 / (total + 1e-6), 1.0);
    for (const auto& p : b.params) p.grad().mul_(coef);
    benchmark::DoNotOptimize(total.item<double>());
  }
  state.SetBytesProcessed(state.iterations() * b.numel * 4 * 3);
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
BENCHMARK(BM_SGDMomentumWeightDecayPerTensorOps)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FusedLoopMomentumWeightDecay)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamW)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamWAmsgrad)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamL2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ClipGradNorm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ClipGradNormPerTensorOps)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamWPerTensorOps)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RMSpropMomentum)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RMSpropMomentumSeparateOps)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_KilnCopy)->Unit(benchmark::kMillisecond)->UseRealTime();
}  // namespace

BENCHMARK_MAIN();
