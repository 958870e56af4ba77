// The seeded shuffle every loader and sampler uses, and DistributedSampler's shares.
#include "kiln/data/sampler.h"

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
    uint64_t word = i % 2 ? (uint64_t{r.v[0]} << 32) | r.v[1] : (uint64_t{r.v[2]} << 32) | r.v[3];
    auto j = static_cast<int64_t>((static_cast<unsigned __int128>(word) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
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
