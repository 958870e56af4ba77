// Datasets (torch::data style): Example, the per-sample random stream, Dataset, TensorDataset.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::data {

// One sample: the input and its target (a class index is a 0-d int64 tensor).
struct Example {
  Tensor data;
  Tensor target;
};

// The random numbers of one sample in one epoch, counter-based so that they depend only on
// (seed, epoch, index, occurrence) and not on which thread asks or when: a resumed run, or a
// loader with any number of workers, sees the same augmented samples. `occurrence` counts the
// sample's earlier visits in the epoch (a sampler may give an index twice): each visit draws anew.
//
// Scheme: key = words 2,3 of Philox4x32-10(key = seed ^ "kilndata", counter = epoch), for a
// later occurrence o words 0,1 of Philox(key, 2^63 + o) instead; the stream of sample `index`
// is Philox(key, counter = index * 2^20 + block), words in order.
class SampleGenerator {
 public:
  SampleGenerator(uint64_t seed, uint64_t epoch, int64_t index, uint64_t occurrence = 0);
  uint32_t next_u32();
  uint64_t next_u64();          // two words, the first in the high half
  double uniform();             // [0, 1), 53 random bits
  int64_t randint(int64_t n);   // [0, n) by 64-bit multiply-shift (bias below n / 2^64)

 private:
  uint64_t key_;
  uint64_t counter_;   // the next Philox block
  uint64_t end_;       // first counter past this sample's blocks
  uint32_t block_[4] = {0, 0, 0, 0};
  int used_ = 4;       // words of block_ already handed out
};

namespace detail {
// The per-epoch keys derived from the loader seed: for shuffling and for sample streams.
struct EpochKeys {
  uint64_t shuffle;
  uint64_t sample;
};
EpochKeys epoch_keys(uint64_t seed, uint64_t epoch);
// `seed`, or one drawn from kiln's global generator (manual_seed decides it): the loader's and
// the random samplers' default.
uint64_t seed_or_draw(std::optional<uint64_t> seed);
}  // namespace detail

// A map-style dataset. get() must be safe to call from several threads at once: the loader's
// workers call it concurrently.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // What the loader calls: datasets with random transforms draw their randomness from `gen`.
  virtual Example get(int64_t index, SampleGenerator& /*gen*/) const { return get(index); }
};

// Examples are (data[i], targets[i]) of two CPU tensors with the same first dimension.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor targets);
  using Dataset::get;
  int64_t size() const override;
  Example get(int64_t index) const override;
  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_, targets_;
};

// A transform of a sample's data; random ones draw from the sample's generator.
using Transform = std::function<Tensor(const Tensor&, SampleGenerator&)>;

// A dataset whose examples' data go through transforms in order (torchvision's Compose).
// get(index) without a generator uses the stream of (seed 0, epoch 0, index).
class TransformDataset : public Dataset {
 public:
  TransformDataset(std::shared_ptr<const Dataset> base, std::vector<Transform> transforms);
  template <class D>
    requires std::derived_from<D, Dataset>
  TransformDataset(D base, std::vector<Transform> transforms)
      : TransformDataset(std::make_shared<const D>(std::move(base)), std::move(transforms)) {}
  int64_t size() const override { return base_->size(); }
  Example get(int64_t index) const override;
  Example get(int64_t index, SampleGenerator& gen) const override;
  const Dataset& base() const { return *base_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<Transform> transforms_;
};

// Checks 0 <= index < size for a dataset's get(); `where` names the dataset.
void check_index(int64_t index, int64_t size, const char* where);

}  // namespace kiln::data
