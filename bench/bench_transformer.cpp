// BERT-base-sized transformer ops on the CPU: linear with fused bias/activation (eval) against the
// unfused ops, cross_entropy over a 30522-word vocabulary, layer_norm, masked_softmax, softmax,
// embedding.
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"

namespace {
using namespace kiln;

// rows = batch * sequence (16 x 128), hidden 768, intermediate 3072
constexpr int64_t kRows = 2048, kHidden = 768, kInter = 3072, kVocab = 30522;

void linear_eval(benchmark::State& state, Activation act, bool fused) {
  Tensor x = randn({kRows, kHidden}), w = randn({kInter, kHidden}), b = randn({kInter});
  NoGradGuard ng;
  for (auto _ : state) {
    Tensor y = fused ? linear(x, w, b, act) : gelu(add(matmul(x, w.t()), b));
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * 2 * kRows * kHidden * kInter);  // flops
}
BENCHMARK_CAPTURE(linear_eval, gelu_fused, Activation::GELU, true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(linear_eval, gelu_unfused, Activation::GELU, false)->Unit(benchmark::kMillisecond);

// Forward and backward of the MLM loss; `ignored` of every 100 labels are -100.
void cross_entropy_step(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor logits = randn({n, kVocab}).requires_grad_();
  Tensor labels = randint(0, kVocab, {n});
  labels.narrow(0, 0, n * state.range(1) / 100).fill_(-100);
  for (auto _ : state) {
    cross_entropy(logits, labels).backward();
    logits.set_grad(Tensor());
  }
}
BENCHMARK(cross_entropy_step)->Args({kRows, 0})->Args({kRows, 85})->Unit(benchmark::kMillisecond);

void layer_norm_step(benchmark::State& state) {
  Tensor x = randn({kRows, kHidden}).requires_grad_(), w = ones({kHidden}).requires_grad_(),
         b = zeros({kHidden}).requires_grad_(), g = randn({kRows, kHidden});
  for (auto _ : state) layer_norm(x, {kHidden}, w, b).backward(g);
  state.SetBytesProcessed(state.iterations() * kRows * kHidden * 4 * 5);  // x, y; g, x, gx
}
BENCHMARK(layer_norm_step)->Unit(benchmark::kMicrosecond);

// BERT's attention probabilities: [B, H, S, S] scores with a [B, 1, 1, S] padding mask.
void masked_softmax_step(benchmark::State& state) {
  Tensor s = randn({16, 12, 128, 128}).requires_grad_(), g = randn({16, 12, 128, 128});
  Tensor mask = rand({16, 1, 1, 128}).gt(0.1);
  for (auto _ : state) masked_softmax(s, mask, -1).backward(g);
  state.SetBytesProcessed(state.iterations() * s.numel() * 4 * 5);
}
BENCHMARK(masked_softmax_step)->Unit(benchmark::kMillisecond);

// softmax (range(1) = 1: log_softmax), forward and backward: over the last dim of BERT's
// [B, H, S, S] scores (range(0) = 0), or over the classes of a [16, 21, 64, 64] segmentation
// map (dim 1, range(0) = 1).
void softmax_step(benchmark::State& state) {
  const bool rows = state.range(0) == 0, log = state.range(1) != 0;
  const Shape shape = rows ? Shape{16, 12, 128, 128} : Shape{16, 21, 64, 64};
  const int64_t dim = rows ? -1 : 1;
  Tensor x = randn(shape), g = randn(shape);
  for (auto _ : state) {
    Tensor a = x.detach().requires_grad_();
    (log ? log_softmax(a, dim) : softmax(a, dim)).backward(g);
  }
  state.SetBytesProcessed(state.iterations() * x.numel() * 4 * 5);  // x, y; g, y, gx
}
BENCHMARK(softmax_step)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);

void embedding_step(benchmark::State& state) {
  Tensor w = randn({kVocab, kHidden}).requires_grad_();
  Tensor idx = randint(0, kVocab, {16, 128});
  Tensor g = randn({16, 128, kHidden});
  for (auto _ : state) {
    embedding(w, idx, 0).backward(g);
    w.set_grad(Tensor());
  }
}
BENCHMARK(embedding_step)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
