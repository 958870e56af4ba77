// The seeded shuffle every loader and sampler uses, the random samplers, and DistributedSampler's
// shares.
#include "kiln/data/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/philox.h"
#include "distributed/process_group.h"
#include "kiln/data/dataset.h"
#include "kiln/distributed.h"
#include "kiln/error.h"

namespace kiln::data {

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Fisher-Yates; step i takes the 64-bit number i of the Philox stream keyed by (seed, epoch).
  const uint64_t key = detail::epoch_keys(seed, epoch).shuffle;
  for (int64_t i = n - 1; i > 0; --i) {
    philox::U32x4 r = philox::philox(key, static_cast<uint64_t>(i) / 2);
    const uint64_t word = philox::word64(r, i % 2 ? 0 : 1);
    auto j = static_cast<int64_t>((static_cast<unsigned __int128>(word) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

namespace {

// The random samplers' numbers: 64-bit word i of the Philox stream keyed by (seed, epoch), apart
// from the shuffle's and the samples' streams.
class EpochStream {
 public:
  EpochStream(uint64_t seed, uint64_t epoch)
      : key_(detail::epoch_keys(seed ^ 0x73616D706C657273ull /* "samplers" */, epoch).shuffle) {}
  uint64_t next() {
    const philox::U32x4 r = philox::philox(key_, i_ / 2);
    return philox::word64(r, static_cast<int>(i_++ % 2));
  }
  int64_t below(int64_t n) {  // [0, n), 64-bit multiply-shift
    return static_cast<int64_t>((static_cast<unsigned __int128>(next()) * static_cast<uint64_t>(n)) >> 64);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  uint64_t key_;
  uint64_t i_ = 0;
};

// Fisher-Yates over v with the stream's numbers.
void shuffle(std::vector<int64_t>& v, EpochStream& s) {
  for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i)
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>(s.below(i + 1))]);
}

}  // namespace

RandomSampler::RandomSampler(int64_t dataset_size, RandomSamplerOptions options)
    : n_(dataset_size), num_samples_(options.num_samples.value_or(dataset_size)), replacement_(options.replacement),
      seed_(detail::seed_or_draw(options.seed)) {
  KILN_CHECK(n_ >= 0, "RandomSampler", "the data set size must be >= 0, got ", n_);
  KILN_CHECK(num_samples_ >= 0, "RandomSampler", "num_samples must be >= 0, got ", num_samples_);
  KILN_CHECK(n_ > 0 || num_samples_ == 0, "RandomSampler", "cannot draw ", num_samples_, " samples from an empty data set");
}

std::vector<int64_t> RandomSampler::indices(uint64_t epoch) const {
  EpochStream s(seed_, epoch);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  if (replacement_) {
    for (int64_t i = 0; i < num_samples_; ++i) out.push_back(s.below(n_));
    return out;
  }
  while (static_cast<int64_t>(out.size()) < num_samples_) {  // whole permutations, the last cut short
    std::vector<int64_t> perm(static_cast<size_t>(n_));
    std::iota(perm.begin(), perm.end(), int64_t{0});
    shuffle(perm, s);
    const size_t take = std::min(perm.size(), static_cast<size_t>(num_samples_) - out.size());
    out.insert(out.end(), perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(take));
  }
  return out;
}

WeightedRandomSampler::WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement,
                                             std::optional<uint64_t> seed)
    : weights_(std::move(weights)), num_samples_(num_samples), replacement_(replacement), seed_(detail::seed_or_draw(seed)) {
  const char* op = "WeightedRandomSampler";
  KILN_CHECK(num_samples_ >= 0, op, "num_samples must be >= 0, got ", num_samples_);
  double total = 0;
  int64_t nonzero = 0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    KILN_CHECK(std::isfinite(weights_[i]) && weights_[i] >= 0, op, "weight ", i, " is ", weights_[i],
               "; weights must be finite and >= 0");
    total += weights_[i];
    if (weights_[i] > 0) ++nonzero, last_positive_ = static_cast<int64_t>(i);
    cumulative_.push_back(total);
  }
  KILN_CHECK(num_samples_ == 0 || total > 0, op, "the weights sum to 0: nothing can be drawn");
  KILN_CHECK(replacement_ || num_samples_ <= nonzero, op, "cannot draw ", num_samples_,
             " samples without replacement from ", nonzero, " nonzero weights");
}

std::vector<int64_t> WeightedRandomSampler::indices(uint64_t epoch) const {
  EpochStream s(seed_, epoch);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  if (replacement_) {  // the first index whose running sum passes u * total
    const double total = cumulative_.empty() ? 0 : cumulative_.back();
    for (int64_t i = 0; i < num_samples_; ++i) {
      // A zero weight's index is never picked: its running sum equals the one before it.
      const auto k = std::upper_bound(cumulative_.begin(), cumulative_.end(), s.uniform() * total) - cumulative_.begin();
      out.push_back(k < static_cast<std::ptrdiff_t>(cumulative_.size()) ? k : last_positive_);  // past: rounding
    }
    return out;
  }
  // Without replacement: the num_samples largest keys log(u) / w (Efraimidis and Spirakis), which
  // draws as picking one by one in proportion to the weights left.
  std::vector<std::pair<double, int64_t>> keys;
  for (size_t i = 0; i < weights_.size(); ++i)
    if (weights_[i] > 0) keys.emplace_back(std::log(1.0 - s.uniform()) / weights_[i], static_cast<int64_t>(i));
  std::partial_sort(keys.begin(), keys.begin() + num_samples_, keys.end(), std::greater<>());
  for (int64_t i = 0; i < num_samples_; ++i) out.push_back(keys[static_cast<size_t>(i)].second);
  return out;
}

SubsetRandomSampler::SubsetRandomSampler(std::vector<int64_t> indices, std::optional<uint64_t> seed)
    : indices_(std::move(indices)), seed_(detail::seed_or_draw(seed)) {
  for (int64_t i : indices_) KILN_CHECK(i >= 0, "SubsetRandomSampler", "index ", i, " is negative");
}

std::vector<int64_t> SubsetRandomSampler::indices(uint64_t epoch) const {
  EpochStream s(seed_, epoch);
  std::vector<int64_t> out = indices_;
  shuffle(out, s);
  return out;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : n_(dataset_size), options_(options) {
  const char* op = "DistributedSampler";
  for (const auto& [name, v] : {std::pair{"num_replicas", options_.num_replicas}, std::pair{"rank", options_.rank}})
    KILN_CHECK(v >= -1, op, name, " must be -1 (the process group's) or >= 0, got ", v);
  // torch refuses a default sampler without a process group; here a world of one is one, but not
  // in a process of an MPI job: each would take the whole data set, in the same order.
  if (options_.num_replicas == -1 || options_.rank == -1)
    KILN_CHECK(distributed::is_initialized() || !distributed::detail::launched_by_mpi(), op,
               "num_replicas and rank default to the process group's, but an MPI launcher started this process "
               "and distributed::init() has not been called yet: call it before making the sampler");
  if (options_.num_replicas == -1) options_.num_replicas = distributed::world_size();
  if (options_.rank == -1) options_.rank = distributed::rank();
  KILN_CHECK(n_ >= 0, op, "the data set size must be >= 0, got ", n_);
  KILN_CHECK(options_.num_replicas >= 1, op, "num_replicas must be at least 1, got ",
             options_.num_replicas);
  KILN_CHECK(options_.rank < options_.num_replicas, op, "rank ", options_.rank,
             " is not in [0, ", options_.num_replicas, ")");
}

int64_t DistributedSampler::size() const {
  const int64_t r = options_.num_replicas;
  if (options_.drop_last) return n_ / r;
  if (options_.pad) return (n_ + r - 1) / r;
  return n_ / r + (options_.rank < n_ % r ? 1 : 0);
}

std::vector<int64_t> DistributedSampler::indices(uint64_t epoch) const {
  std::vector<int64_t> order = options_.shuffle ? shuffled_indices(n_, options_.seed, epoch) : [&] {
    std::vector<int64_t> o(static_cast<size_t>(n_));
    std::iota(o.begin(), o.end(), int64_t{0});
    return o;
  }();
  const int64_t r = options_.num_replicas;
  int64_t total = n_;
  if (options_.drop_last) total = n_ / r * r;
  else if (options_.pad) total = (n_ + r - 1) / r * r;
  if (total > n_ && n_ > 0)  // PyTorch's padding: the order again from its start, as often as needed
    for (int64_t i = n_; i < total; ++i) order.push_back(order[static_cast<size_t>(i % n_)]);
  order.resize(static_cast<size_t>(n_ > 0 ? total : 0));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(size()));
  for (int64_t i = options_.rank; i < total; i += r) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace kiln::data
