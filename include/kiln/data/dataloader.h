// DataLoader: seeded shuffling, batching, and background prefetch on worker threads.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/sampler.h"

namespace kiln::data {

// Examples stacked along a new first dim: data [B, ...], target [B, ...] (class indices: [B]);
// target is undefined when no example has one (an unlabelled set).
struct Batch {
  Tensor data;
  Tensor target;
  int64_t index = 0;  // the batch's number within its epoch
};

// Stacks examples whose data (and targets) agree in shape and dtype; either every example has a
// target or none has. Contiguous CPU samples
// are copied with one memcpy each; others go through kiln::stack.
Batch collate(const std::vector<Example>& examples);

// Bounds on DataLoaderOptions (larger values are a kiln::Error): far past any machine's cores,
// and past any useful read-ahead.
inline constexpr int64_t kMaxWorkers = 1024;
inline constexpr int64_t kMaxPrefetch = 65536;

// Fields in torch.utils.data.DataLoader's order, for designated initialisers:
// DataLoader loader(dataset, {.batch_size = 128, .shuffle = true, .num_workers = 2}).
struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;  // drop the last batch when it is smaller than batch_size
  int64_t num_workers = 0;  // 0: batches are made on the iterating thread; at most kMaxWorkers
  int64_t prefetch = 2;     // batches each worker may hold ready ahead of the consumer; at most kMaxPrefetch
  // Shuffling and random transforms derive from (seed, epoch). Unset, the seed is drawn from
  // kiln's global generator when the loader is made, so that manual_seed decides the data order
  // too, as torch's; options() then holds the seed drawn.
  std::optional<uint64_t> seed = std::nullopt;
  // Batches in page-locked memory (pinned by the worker that makes the batch), so that
  // batch.data.to(device, /*non_blocking=*/true) only queues the copy, as in PyTorch; without
  // non_blocking the copy waits for the GPU's queued work first. Without a CUDA device: a
  // warning, and not pinned.
  bool pin_memory = false;
  // Which indices each epoch visits (e.g. a DistributedSampler); shuffle must then be false, as
  // in PyTorch. The loader passes its epoch to the sampler, unless the sampler has one chosen
  // (DistributedSampler::set_epoch): the pass then runs that epoch, as PyTorch's.
  std::shared_ptr<const Sampler> sampler = nullptr;
  // Makes a batch of a batch's examples (torch's collate_fn; default: collate, which stacks
  // them), e.g. padding sequences of different lengths to the longest. It runs on the worker
  // threads when num_workers > 0, so it must be safe to call from several threads at once, and
  // its batch is on the CPU there. The loader sets the batch's index and pins it afterwards.
  std::function<Batch(const std::vector<Example>&)> collate_fn = nullptr;
};

namespace detail {
struct EpochRun;
}

// Iterates over a dataset in batches: `for (Batch& batch : loader) ...`.
//
// Determinism: epoch e's order is a Fisher-Yates permutation drawn from (seed, e), and sample i's
// random transforms draw from (seed, e, i, how often i came earlier in the epoch)
// (SampleGenerator). Workers only decide when a batch is made, never what it holds; batches arrive
// in order. So the batches are the same for any num_workers, and a run resumed with set_epoch(e, b)
// sees exactly the batches it would have.
//
// Epochs: each begin() runs epoch epoch() and then advances it by one, so consecutive loops
// shuffle differently; set_epoch(e, start_batch) picks the next epoch (and, once, the batch it
// starts at). A sampler's chosen epoch takes its place (an error if set_epoch chose another).
//
// Workers: with num_workers = W, worker w makes batches start + w, start + w + W, ..., at most
// W * prefetch batches ahead of the consumer (a bounded buffer, never larger than the batches
// left). An exception thrown while making a batch reaches the consumer when it gets to that
// batch. Destroying the iterator (a loop that breaks, an exception) stops and joins its
// workers; an iterator does not refer to its loader, so either may be destroyed first.
class DataLoader {
 public:
  class Iterator;

  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  template <class D>
    requires std::derived_from<D, Dataset>
  DataLoader(D dataset, DataLoaderOptions options = {})
      : DataLoader(std::make_shared<const D>(std::move(dataset)), options) {}

  int64_t size() const;  // batches per epoch
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  uint64_t epoch() const { return epoch_; }
  void set_epoch(uint64_t epoch, int64_t start_batch = 0);

  // The order in which epoch `epoch` visits the dataset's indices.
  std::vector<int64_t> sample_order(uint64_t epoch) const;
  // Batch `index` of epoch `epoch`, made on the calling thread.
  Batch batch(uint64_t epoch, int64_t index) const;

  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

 private:
  // A pass over epoch `epoch`, no batch made yet.
  std::unique_ptr<detail::EpochRun> run(uint64_t epoch) const;

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  uint64_t epoch_ = 0;
  int64_t start_batch_ = 0;
  bool epoch_set_ = false;  // set_epoch was called since the last begin()
};

class DataLoader::Iterator {
 public:
  using iterator_concept = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;

  Iterator();
  explicit Iterator(std::unique_ptr<detail::EpochRun> run);
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();

  Batch& operator*() const;
  Batch* operator->() const { return &**this; }
  Iterator& operator++();
  void operator++(int) { ++*this; }
  bool operator==(std::default_sentinel_t) const;

 private:
  std::unique_ptr<detail::EpochRun> run_;
};

}  // namespace kiln::data
