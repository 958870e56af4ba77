// DataLoader: coverage of every index, seeded order, workers, early exit, errors, resume, collate.
#include <algorithm>
#include <atomic>
#include <memory>
#include <numeric>
#include <set>

#include "kiln/data/dataloader.h"
#include "kiln/data/transforms.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using data::Batch;
using data::DataLoader;
using data::DataLoaderOptions;
using data::Example;

// Sample i: data [2, 3] filled with i + 0.5 * j, target i (int64). Counts calls to get().
class CountingDataset : public data::Dataset {
 public:
  explicit CountingDataset(int64_t n, int64_t fail_at = -1, bool std_error = false)
      : n_(n), fail_at_(fail_at), std_error_(std_error) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    calls.fetch_add(1);
    if (i == fail_at_) {
      if (std_error_) throw std::runtime_error("disk on fire");
      KILN_FAIL("CountingDataset", "cannot read sample ", i);
    }
    std::vector<float> v;
    for (int j = 0; j < 6; ++j) v.push_back(static_cast<float>(i) + 0.5f * j);
    return {tensor(v, Shape{2, 3}), scalar_tensor(i, kInt64)};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_, fail_at_;
  bool std_error_;
};

std::vector<int64_t> targets_of(DataLoader& loader) {
  std::vector<int64_t> all;
  for (Batch& b : loader) {
    auto t = b.target.to_vector<int64_t>();
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

TEST(DataLoader, EveryIndexOncePerEpochWithStackedBatches) {
  auto ds = std::make_shared<CountingDataset>(103);
  DataLoader loader(ds, {.batch_size = 10, .shuffle = true, .seed = 7});
  EXPECT_EQ(loader.size(), 11);
  int64_t count = 0;
  std::vector<int64_t> seen;
  for (Batch& b : loader) {
    EXPECT_EQ(b.index, count);
    int64_t rows = count == 10 ? 3 : 10;
    ASSERT_EQ(b.data.shape(), (Shape{rows, 2, 3}));
    ASSERT_EQ(b.target.shape(), (Shape{rows}));
    ASSERT_EQ(b.target.dtype(), kInt64);
    auto t = b.target.to_vector<int64_t>();
    auto d = b.data.to_vector<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < 6; ++j)
        EXPECT_EQ(d[static_cast<size_t>(r * 6 + j)], static_cast<float>(t[static_cast<size_t>(r)]) + 0.5f * j);
    seen.insert(seen.end(), t.begin(), t.end());
    ++count;
  }
  EXPECT_EQ(count, 11);
  std::vector<int64_t> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 103; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_FALSE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(loader.epoch(), 1u);
}

TEST(DataLoader, NoShuffleKeepsOrderAndDropLast) {
  DataLoader plain(std::make_shared<CountingDataset>(25), {.batch_size = 4});
  std::vector<int64_t> expect(25);
  for (int64_t i = 0; i < 25; ++i) expect[static_cast<size_t>(i)] = i;
  EXPECT_EQ(targets_of(plain), expect);
  DataLoader dropping(std::make_shared<CountingDataset>(25), {.batch_size = 4, .shuffle = true, .drop_last = true, .seed = 3});
  EXPECT_EQ(dropping.size(), 6);
  int batches = 0;
  std::set<int64_t> seen;
  for (Batch& b : dropping) {
    EXPECT_EQ(b.data.size(0), 4);
    for (int64_t t : b.target.to_vector<int64_t>()) EXPECT_TRUE(seen.insert(t).second) << t;
    ++batches;
  }
  EXPECT_EQ(batches, 6);
  EXPECT_EQ(seen.size(), 24u);
}

TEST(DataLoader, SeedAndEpochDetermineTheOrder) {
  auto ds = std::make_shared<CountingDataset>(50);
  DataLoader a(ds, {.batch_size = 8, .shuffle = true, .seed = 1});
  DataLoader b(ds, {.batch_size = 8, .shuffle = true, .seed = 1});
  DataLoader c(ds, {.batch_size = 8, .shuffle = true, .seed = 2});
  auto a0 = targets_of(a), a1 = targets_of(a);
  auto b0 = targets_of(b), b1 = targets_of(b);
  EXPECT_EQ(a0, b0);
  EXPECT_EQ(a1, b1);
  EXPECT_NE(a0, a1);  // epochs 0 and 1 shuffle differently
  EXPECT_NE(a0, targets_of(c));
  EXPECT_EQ(a0, a.sample_order(0));
  b.set_epoch(1);
  EXPECT_EQ(targets_of(b), a1);
}

// Workers change when batches are made, never what they hold: data with random transforms too.
TEST(DataLoader, SameBatchesWithZeroOneAndThreeWorkers) {
  auto base = std::make_shared<CountingDataset>(61);
  auto augmented = std::make_shared<data::TransformDataset>(
      base, std::vector<data::Transform>{data::transforms::RandomCrop(3, 1), data::transforms::RandomHorizontalFlip()});
  std::vector<std::vector<double>> reference;
  for (int64_t workers : {0, 1, 3}) {
    DataLoader loader(augmented, {.batch_size = 4, .shuffle = true, .num_workers = workers, .prefetch = 1, .seed = 9});
    loader.set_epoch(2);
    std::vector<std::vector<double>> got;
    for (Batch& b : loader) {
      got.push_back(values(b.data));
      got.push_back(values(b.target));
    }
    if (reference.empty()) reference = got;
    EXPECT_EQ(got, reference) << workers << " workers";
  }
  ASSERT_EQ(reference.size(), 32u);
  // The padded crop put zeros somewhere, so the transforms really ran.
  EXPECT_NE(std::count(reference[0].begin(), reference[0].end(), 0.0), 0);
}

TEST(DataLoader, EarlyBreakAndRestart) {
  auto ds = std::make_shared<CountingDataset>(200);
  DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .num_workers = 3, .prefetch = 2, .seed = 4});
  int taken = 0;
  for (Batch& b : loader) {
    (void)b;
    if (++taken == 2) break;
  }
  // Workers stop at the bounded buffer: taken batches + 3 * 2 ready + 3 in the making, at most.
  EXPECT_LE(ds->calls.load(), (2 + 3 * 2 + 3) * 5);
  EXPECT_EQ(loader.epoch(), 1u);
  EXPECT_EQ(targets_of(loader).size(), 200u);  // epoch 1, complete
}

TEST(DataLoader, IteratorOutlivesLoader) {
  auto ds = std::make_shared<CountingDataset>(40);
  auto loader = std::make_unique<DataLoader>(ds, DataLoaderOptions{.batch_size = 4, .num_workers = 2});
  auto it = loader->begin();
  loader.reset();
  int64_t batches = 0;
  for (; it != std::default_sentinel; ++it) {
    EXPECT_EQ(it->target.to_vector<int64_t>()[0], batches * 4);
    ++batches;
  }
  EXPECT_EQ(batches, 10);
  // Destroyed mid-epoch with workers running: joins them.
  auto loader2 = std::make_unique<DataLoader>(ds, DataLoaderOptions{.batch_size = 1, .num_workers = 3});
  { auto it2 = loader2->begin(); ++it2; loader2.reset(); }
}

TEST(DataLoader, ErrorsReachTheConsumerInOrder) {
  for (int64_t workers : {0, 1, 3}) {
    auto ds = std::make_shared<CountingDataset>(30, /*fail_at=*/17);
    DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    int64_t good = 0;
    expect_error([&] { for (Batch& b : loader) { (void)b; ++good; } }, "[CountingDataset] cannot read sample 17");
    EXPECT_EQ(good, 4) << workers;  // batches 0..3 arrive, batch 4 (samples 16..19) fails
    auto ds2 = std::make_shared<CountingDataset>(30, /*fail_at=*/2, /*std_error=*/true);
    DataLoader loader2(ds2, {.batch_size = 4, .num_workers = workers});
    expect_error([&] { for (Batch& b : loader2) (void)b; }, "[DataLoader] batch 0 of epoch 0: disk on fire");
  }
}

TEST(DataLoader, ResumeFromABatch) {
  auto ds = std::make_shared<CountingDataset>(37);
  for (int64_t workers : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .num_workers = workers, .seed = 11});
    loader.set_epoch(3);
    std::vector<std::vector<int64_t>> full;
    for (Batch& b : loader) full.push_back(b.target.to_vector<int64_t>());
    ASSERT_EQ(full.size(), 8u);
    loader.set_epoch(3, 5);
    std::vector<std::vector<int64_t>> resumed;
    for (Batch& b : loader) {
      EXPECT_EQ(b.index, 5 + static_cast<int64_t>(resumed.size()));
      resumed.push_back(b.target.to_vector<int64_t>());
    }
    EXPECT_EQ(resumed, std::vector<std::vector<int64_t>>(full.begin() + 5, full.end()));
    EXPECT_EQ(loader.batch(3, 6).target.to_vector<int64_t>(), full[6]);
    loader.set_epoch(3, 8);  // the end: an empty epoch
    EXPECT_TRUE(loader.begin() == loader.end());
    // The start batch applies once: the next epoch starts at 0.
    EXPECT_EQ(targets_of(loader).size(), 37u);
  }
}

TEST(DataLoader, BadArgumentsRejected) {
  auto ds = std::make_shared<CountingDataset>(10);
  expect_error([&] { DataLoader(ds, {.batch_size = 0}); }, "[DataLoader] batch_size must be at least 1, got 0");
  expect_error([&] { DataLoader(ds, {.num_workers = -1}); }, "[DataLoader] num_workers must be >= 0, got -1");
  expect_error([&] { DataLoader(ds, {.prefetch = 0}); }, "[DataLoader] prefetch must be at least 1, got 0");
  DataLoader loader(ds, {.batch_size = 3});
  expect_error([&] { loader.set_epoch(0, 5); }, "[DataLoader] start batch 5 out of range [0, 4]");
  expect_error([&] { loader.batch(0, 4); }, "[DataLoader] batch 4 out of range [0, 4)");
  auto it = loader.begin();
  for (int i = 0; i < 4; ++i) ++it;
  EXPECT_TRUE(it == loader.end());
  expect_error([&] { ++it; }, "[DataLoader] advancing an iterator past the end");
}

// num_workers * prefetch wrapped to 0 (a ring of no slots: a division by zero) or asked for a
// ring of 2^42 slots (std::bad_alloc); both are bounded, and the ring by the batches left.
TEST(DataLoader, HugeWorkerAndPrefetchCountsAreErrorsAndTheRingIsCapped) {
  auto ds = std::make_shared<CountingDataset>(10);
  expect_error([&] { DataLoader(ds, {.batch_size = 2, .num_workers = 4, .prefetch = int64_t{1} << 62}); },
               "[DataLoader] prefetch must be at most 65536, got 4611686018427387904");
  expect_error([&] { DataLoader(ds, {.batch_size = 2, .num_workers = 4, .prefetch = int64_t{1} << 40}); },
               "prefetch must be at most 65536");
  expect_error([&] { DataLoader(ds, {.num_workers = int64_t{1} << 62}); },
               "[DataLoader] num_workers must be at most 1024, got 4611686018427387904");
  // The largest prefetch works, with a ring of the 5 batches there are (not 2^18 slots).
  DataLoader loader(ds, {.batch_size = 2, .num_workers = 4, .prefetch = 65536});
  EXPECT_EQ(targets_of(loader), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  loader.set_epoch(0, 3);  // started part-way: the ring holds the 2 batches left
  EXPECT_EQ(targets_of(loader), (std::vector<int64_t>{6, 7, 8, 9}));
}

TEST(DataLoader, CollateChecksShapesAndHandlesViews) {
  Tensor x = arange(12, kFloat32).reshape({3, 4});
  Batch b = data::collate({{x.select(1, 0), scalar_tensor(0, kInt64)}, {x.select(1, 2), scalar_tensor(1, kInt64)}});
  expect_close(b.data, {0, 4, 8, 2, 6, 10}, {2, 3});
  expect_close(b.target, {0, 1}, {2});
  expect_error([&] { data::collate({{x[0], x[0]}, {x, x[0]}}); },
               "[collate] example 1 has data float32 [3, 4] on cpu but example 0 has float32 [4] on cpu");
  expect_error([&] { data::collate({}); }, "[collate] no examples to stack");
  // An unlabelled set batches its data alone (torch's default_collate); a mix is an error.
  Batch unlabelled = data::collate({{x[0], Tensor()}, {x[1], Tensor()}});
  expect_close(unlabelled.data, {0, 1, 2, 3, 4, 5, 6, 7}, {2, 4});
  EXPECT_FALSE(unlabelled.target.defined());
  expect_error([&] { data::collate({{x[0], Tensor()}, {x[1], x[1]}}); }, "[collate] example 1 has a target but example 0 has none");
  expect_error([&] { data::collate({{x[0], x[0]}, {x[1], Tensor()}}); }, "[collate] example 1 has no target");
}

// A sampler that gives indices it was made with, every epoch.
class FixedSampler : public data::Sampler {
 public:
  explicit FixedSampler(std::vector<int64_t> order) : order_(std::move(order)) {}
  std::vector<int64_t> indices(uint64_t) const override { return order_; }
  int64_t size() const override { return static_cast<int64_t>(order_.size()); }

 private:
  std::vector<int64_t> order_;
};

// Each visit of a sample draws its own augmentation: an index a sampler gives twice is cropped
// twice, not copied (oversampling, repeated augmentation, DistributedSampler's padding).
TEST(DataLoader, ASampleVisitedTwiceIsAugmentedAnew) {
  auto images = std::make_shared<data::TensorDataset>(arange(64, kFloat32).reshape({1, 1, 8, 8}), zeros({1}, kInt64));
  auto augmented = std::make_shared<data::TransformDataset>(
      images, std::vector<data::Transform>{data::transforms::RandomCrop(4, 2)});
  for (int64_t workers : {0, 2}) {
    DataLoader loader(augmented, {.batch_size = 1, .num_workers = workers, .seed = 5,
                                  .sampler = std::make_shared<FixedSampler>(std::vector<int64_t>{0, 0, 0, 0})});
    std::vector<std::vector<double>> crops;
    for (Batch& b : loader) crops.push_back(values(b.data));
    ASSERT_EQ(crops.size(), 4u);
    EXPECT_EQ(std::set<std::vector<double>>(crops.begin(), crops.end()).size(), 4u) << workers << " workers";
    // The first visit draws what a sampler that gives the index once draws.
    DataLoader once(augmented, {.batch_size = 1, .seed = 5, .sampler = std::make_shared<FixedSampler>(std::vector<int64_t>{0})});
    EXPECT_EQ(values((*once.begin()).data), crops[0]);
  }
}

// RandomSampler, WeightedRandomSampler and SubsetRandomSampler, as torch's: what each epoch draws,
// from (seed, epoch) alone.
TEST(DataLoader, RandomSamplers) {
  auto sorted = [](std::vector<int64_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  std::vector<int64_t> all(10);
  std::iota(all.begin(), all.end(), int64_t{0});
  data::RandomSampler perm(10, {.seed = 1});
  EXPECT_EQ(sorted(perm.indices(0)), all);
  EXPECT_NE(perm.indices(0), perm.indices(1));
  EXPECT_EQ(perm.indices(3), data::RandomSampler(10, {.seed = 1}).indices(3));
  EXPECT_NE(perm.indices(0), data::RandomSampler(10, {.seed = 2}).indices(0));
  // More samples than the data set without replacement: whole permutations one after another.
  const std::vector<int64_t> long_epoch = data::RandomSampler(4, {.num_samples = 10, .seed = 3}).indices(0);
  ASSERT_EQ(long_epoch.size(), 10u);
  EXPECT_EQ(sorted({long_epoch.begin(), long_epoch.begin() + 4}), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(sorted({long_epoch.begin() + 4, long_epoch.begin() + 8}), (std::vector<int64_t>{0, 1, 2, 3}));
  const std::vector<int64_t> drawn = data::RandomSampler(3, {.replacement = true, .num_samples = 3000, .seed = 4}).indices(0);
  for (int64_t k = 0; k < 3; ++k) EXPECT_NEAR(std::count(drawn.begin(), drawn.end(), k), 1000, 120) << k;

  // Weighted: in proportion to the weights, never a zero weight's index.
  data::WeightedRandomSampler weighted({0.0, 1.0, 3.0}, 20000, true, 5);
  const std::vector<int64_t> w = weighted.indices(0);
  EXPECT_EQ(std::count(w.begin(), w.end(), 0), 0);
  EXPECT_NEAR(static_cast<double>(std::count(w.begin(), w.end(), 2)) / 20000, 0.75, 0.015);
  // Without replacement: distinct, nonzero weights only, the heavy ones first more often.
  int heavy_first = 0;
  for (uint64_t e = 0; e < 400; ++e) {
    const std::vector<int64_t> once = data::WeightedRandomSampler({1.0, 0.0, 9.0, 1.0}, 3, false, 6).indices(e);
    EXPECT_EQ(sorted(once), (std::vector<int64_t>{0, 2, 3})) << e;
    heavy_first += once[0] == 2;
  }
  EXPECT_NEAR(heavy_first / 400.0, 9.0 / 11, 0.06);
  expect_error([] { data::WeightedRandomSampler({1.0, 0.0}, 2, false); }, "cannot draw 2 samples without replacement from 1 nonzero weights");
  expect_error([] { data::WeightedRandomSampler({1.0, -1.0}, 2); }, "[WeightedRandomSampler] weight 1 is -1");
  expect_error([] { data::WeightedRandomSampler({0.0, 0.0}, 2); }, "the weights sum to 0");

  // A subset in a random order each epoch.
  data::SubsetRandomSampler subset({7, 3, 9, 1}, 8);
  EXPECT_EQ(sorted(subset.indices(0)), (std::vector<int64_t>{1, 3, 7, 9}));
  EXPECT_NE(subset.indices(0), subset.indices(1));

  // In a loader: the sampler's indices, batched.
  auto ds = std::make_shared<CountingDataset>(10);
  auto sampler = std::make_shared<data::WeightedRandomSampler>(std::vector<double>(10, 1.0), 12, true, 9);
  DataLoader loader(ds, {.batch_size = 5, .sampler = sampler});
  EXPECT_EQ(loader.size(), 3);
  EXPECT_EQ(targets_of(loader), sampler->indices(0));
}

// Without a seed the loader draws one from kiln's global generator: manual_seed decides the order.
TEST(DataLoader, ManualSeedDecidesTheOrderWithoutASeed) {
  auto ds = std::make_shared<CountingDataset>(40);
  auto order = [&](uint64_t seed) {
    manual_seed(seed);
    return DataLoader(ds, {.batch_size = 8, .shuffle = true}).sample_order(0);
  };
  const std::vector<int64_t> one = order(1);
  EXPECT_EQ(order(1), one);
  EXPECT_NE(order(2), one);
  manual_seed(1);
  DataLoader loader(ds, {.batch_size = 8, .shuffle = true});
  ASSERT_TRUE(loader.options().seed.has_value());
  EXPECT_EQ(DataLoader(ds, {.batch_size = 8, .shuffle = true, .seed = *loader.options().seed}).sample_order(0), one);
}

TEST(DataLoader, TensorDatasetBatches) {
  Tensor data = arange(20, kFloat32).reshape({10, 2});
  Tensor targets = arange(10, kInt64);
  DataLoader loader(data::TensorDataset(data, targets), {.batch_size = 4});
  std::vector<Batch> batches;
  for (Batch& b : loader) batches.push_back(b);
  ASSERT_EQ(batches.size(), 3u);
  expect_close(batches[2].data, {16, 17, 18, 19}, {2, 2});
  expect_close(batches[2].target, {8, 9}, {2});
  expect_error([&] { data::TensorDataset(data, arange(9, kInt64)); },
               "[TensorDataset] data has 10 samples but targets 9");
}

// A collate_fn pads sequences of different lengths to the batch's longest (torch's collate_fn):
// the same batches with and without workers; its errors reach the consumer at its batch.
class RaggedDataset : public data::Dataset {
 public:
  int64_t size() const override { return 9; }
  Example get(int64_t i) const override { return {full({i % 4 + 1}, static_cast<double>(i + 1), kInt64), Tensor()}; }
};

Batch pad_to_longest(const std::vector<Example>& examples) {
  int64_t longest = 0;
  for (const Example& e : examples) longest = std::max(longest, e.data.numel());
  Tensor out = zeros({static_cast<int64_t>(examples.size()), longest}, kInt64);
  for (size_t i = 0; i < examples.size(); ++i)
    out.select(0, static_cast<int64_t>(i)).narrow(0, 0, examples[i].data.numel()).copy_(examples[i].data);
  return {out, Tensor()};
}

TEST(DataLoader, ACollateFnMakesTheBatches) {
  auto ds = std::make_shared<RaggedDataset>();
  for (int64_t workers : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 3, .num_workers = workers,
                           .collate_fn = [](const std::vector<Example>& e) {
                             std::vector<Example> first_two(e.begin(), e.begin() + std::min<size_t>(2, e.size()));
                             return pad_to_longest(first_two);
                           }});
    std::vector<Batch> batches;
    for (Batch& b : loader) batches.push_back(b);
    ASSERT_EQ(batches.size(), 3u);
    expect_close(batches[0].data, {1, 0, 2, 2}, {2, 2});  // samples 0 and 1 (lengths 1 and 2)
    expect_close(batches[1].data, {4, 4, 4, 4, 5, 0, 0, 0}, {2, 4});  // samples 3 and 4 (lengths 4 and 1)
    EXPECT_FALSE(batches[1].target.defined());
    EXPECT_EQ(batches[2].index, 2);
  }
  for (int64_t workers : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 3, .num_workers = workers, .collate_fn = [](const std::vector<Example>& e) {
                             for (const Example& x : e) KILN_CHECK(x.data.numel() < 4, "pad", "a sequence of 4 tokens");
                             return pad_to_longest(e);
                           }});
    int64_t good = 0;
    expect_error([&] { for (Batch& b : loader) { (void)b; ++good; } }, "[pad] a sequence of 4 tokens");
    EXPECT_EQ(good, 1) << workers;
  }
}

}  // namespace
}  // namespace kiln::test
