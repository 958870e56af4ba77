// Samplers: which dataset indices an epoch visits and in what order (torch.utils.data.Sampler):
// RandomSampler, WeightedRandomSampler, SubsetRandomSampler, and DistributedSampler, each
// process's share of a data set (torch.utils.data.DistributedSampler).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::data {

// 0 .. n - 1 in the order a seeded Fisher-Yates shuffle gives for (seed, epoch): the same on
// every machine and every process (the DataLoader's own shuffle).
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t epoch);

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The indices epoch `epoch` visits, in order.
  virtual std::vector<int64_t> indices(uint64_t epoch) const = 0;
  // How many indices an epoch has.
  virtual int64_t size() const = 0;
  // The epoch the user chose for the next pass (DistributedSampler::set_epoch), which a DataLoader
  // then runs, as PyTorch's loader does; none (the loader runs its own epoch) until one is chosen.
  virtual std::optional<uint64_t> chosen_epoch() const { return std::nullopt; }
};

// The random samplers draw from (seed, epoch) alone, so an epoch's indices are the same on every
// machine and after a resume. seed unset: drawn from kiln's global generator when the sampler is
// made (manual_seed decides it), as the DataLoader's.
struct RandomSamplerOptions {
  bool replacement = false;
  // How many indices an epoch has (unset: the data set's size). Without replacement, more than
  // the size gives whole permutations one after another, as torch's.
  std::optional<int64_t> num_samples = std::nullopt;
  std::optional<uint64_t> seed = std::nullopt;
};

// Every index in a random order each epoch, or num_samples drawn uniformly with replacement
// (torch.utils.data.RandomSampler).
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t dataset_size, RandomSamplerOptions options = {});
  std::vector<int64_t> indices(uint64_t epoch) const override;
  int64_t size() const override { return num_samples_; }

 private:
  int64_t n_, num_samples_;
  bool replacement_;
  uint64_t seed_;
};

// num_samples indices drawn with probability proportional to their weight (class balancing),
// with replacement by default (torch.utils.data.WeightedRandomSampler); without replacement,
// num_samples at most the number of nonzero weights. Weights must be finite and >= 0, not all 0.
class WeightedRandomSampler : public Sampler {
 public:
  WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement = true,
                        std::optional<uint64_t> seed = std::nullopt);
  std::vector<int64_t> indices(uint64_t epoch) const override;
  int64_t size() const override { return num_samples_; }

 private:
  std::vector<double> cumulative_;  // running sums of the weights
  std::vector<double> weights_;
  int64_t last_positive_ = 0;  // the last index with a weight above 0
  int64_t num_samples_;
  bool replacement_;
  uint64_t seed_;
};

// The given indices in a random order each epoch (torch.utils.data.SubsetRandomSampler): a
// train/validation split of one data set.
class SubsetRandomSampler : public Sampler {
 public:
  explicit SubsetRandomSampler(std::vector<int64_t> indices, std::optional<uint64_t> seed = std::nullopt);
  std::vector<int64_t> indices(uint64_t epoch) const override;
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }

 private:
  std::vector<int64_t> indices_;
  uint64_t seed_;
};

// Fields in torch.utils.data.DistributedSampler's order. num_replicas and rank default (-1) to
// kiln::distributed's world size and rank: in a process an MPI launcher started, distributed::init()
// must come first (before it, every process would be a world of one and take the whole data set).
// Other negative values are errors.
struct DistributedSamplerOptions {
  int64_t num_replicas = -1;
  int64_t rank = -1;
  bool shuffle = true;
  uint64_t seed = 0;       // the same on every process: they shuffle alike and take disjoint shares
  bool drop_last = false;  // drop the tail that does not divide evenly instead of padding
  // Without drop_last: pad with indices from the start so every process gets as many (PyTorch's
  // behaviour, for training); false gives each index to exactly one process and shares that
  // differ by at most one (for evaluation, where counting a sample twice would skew the result).
  bool pad = true;
};

// Process `rank` of `num_replicas` takes every num_replicas-th index of the epoch's order,
// starting at `rank`: the shares are disjoint and together cover the data set (padded or
// trimmed as the options say). A DataLoader passes its own epoch, so each epoch reshuffles without
// set_epoch(); once set_epoch(e) is called, the loader's next pass runs epoch e, as in PyTorch
// (call it each epoch, or once when resuming: loader.set_epoch(e, batch) does the same alone).
// indices() serves a loop without a DataLoader.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options = {});
  std::vector<int64_t> indices(uint64_t epoch) const override;
  int64_t size() const override;
  void set_epoch(uint64_t epoch) { chosen_ = epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }
  std::optional<uint64_t> chosen_epoch() const override { return chosen_; }
  std::vector<int64_t> indices() const { return indices(epoch_); }
  const DistributedSamplerOptions& options() const { return options_; }

 private:
  int64_t n_;
  DistributedSamplerOptions options_;
  uint64_t epoch_ = 0;
  std::optional<uint64_t> chosen_;
};

}  // namespace kiln::data
