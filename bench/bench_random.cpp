// Random fills on the CPU (4M numbers: rand, randn, randint) and what they cost a user: building
// a model, whose construction draws its initial weights (BERT-base: 110M numbers, VGG-16: 138M).
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"

namespace {
constexpr int64_t kNumbers = 4096 * 1024;

void BM_Rand(benchmark::State& state, kiln::ScalarType dtype) {
  for (auto _ : state) benchmark::DoNotOptimize(kiln::rand({kNumbers}, dtype).data_ptr());
  state.SetItemsProcessed(state.iterations() * kNumbers);
}
void BM_Randn(benchmark::State& state, kiln::ScalarType dtype) {
  for (auto _ : state) benchmark::DoNotOptimize(kiln::randn({kNumbers}, dtype).data_ptr());
  state.SetItemsProcessed(state.iterations() * kNumbers);
}
void BM_Randint(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(kiln::randint(0, 1000, {kNumbers}).data_ptr());
  state.SetItemsProcessed(state.iterations() * kNumbers);
}
BENCHMARK_CAPTURE(BM_Rand, fp32, kiln::kFloat32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Rand, bf16, kiln::kBFloat16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Randn, fp32, kiln::kFloat32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Randn, fp64, kiln::kFloat64)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Randint)->Unit(benchmark::kMillisecond);

void BM_ConstructBertBase(benchmark::State& state) {
  for (auto _ : state) {
    auto m = kiln::models::bert_for_masked_lm(kiln::models::BertConfig::preset("bert-base"));
    benchmark::DoNotOptimize(&m);
  }
}
void BM_ConstructModel(benchmark::State& state, const char* name) {
  for (auto _ : state) {
    auto m = kiln::models::create(name, 1000);
    benchmark::DoNotOptimize(&m);
  }
}
BENCHMARK(BM_ConstructBertBase)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ConstructModel, vgg16, "vgg16")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ConstructModel, resnet50, "resnet50")->Unit(benchmark::kMillisecond);
}  // namespace

BENCHMARK_MAIN();
