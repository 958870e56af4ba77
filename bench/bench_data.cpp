// Data loading: Fashion-MNIST batches of 128 per second, with 0 to 2 workers, with and without augmentation.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>

#include "kiln/data.h"

namespace {

const char* kRoot = "/usr/share/datasets/fashion-mnist";

std::shared_ptr<const kiln::data::Dataset> fashion(bool augment) {
  static auto base = std::make_shared<const kiln::data::FashionMNIST>(kRoot);
  if (!augment) return base;
  namespace T = kiln::data::transforms;
  return std::make_shared<const kiln::data::TransformDataset>(
      base, std::vector<kiln::data::Transform>{T::RandomCrop(28, 2), T::RandomHorizontalFlip(), T::Normalize({0.286}, {0.353})});
}

// state.range(0): workers; state.range(1): 1 with crop + flip + normalize.
void BM_FashionMNISTBatches(benchmark::State& state) {
  if (!std::filesystem::exists(std::string(kRoot) + "/train-images-idx3-ubyte.gz")) {
    state.SkipWithError("Fashion-MNIST is not installed (apt install dataset-fashion-mnist)");
    return;
  }
  kiln::data::DataLoader loader(fashion(state.range(1) != 0),
                                {.batch_size = 128, .shuffle = true, .num_workers = state.range(0), .seed = 1});
  auto it = loader.begin();
  for (auto _ : state) {
    if (it == loader.end()) it = loader.begin();
    benchmark::DoNotOptimize(it->data.data_ptr());
    ++it;
  }
  state.counters["batches/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetItemsProcessed(state.iterations() * 128);
}
BENCHMARK(BM_FashionMNISTBatches)->ArgsProduct({{0, 1, 2}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
BENCHMARK_MAIN();
