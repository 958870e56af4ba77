// The per-sample Philox stream, TensorDataset and TransformDataset.
#include "kiln/data/dataset.h"

#include "core/philox.h"
#include "kiln/random.h"

namespace kiln::data {

namespace {
constexpr uint64_t kDomain = 0x6B696C6E64617461ull;  // "kilndata": apart from kiln's global stream
constexpr int kBlockBits = 20;                       // 2^20 blocks (4M words) per sample
}  // namespace

namespace detail {
EpochKeys epoch_keys(uint64_t seed, uint64_t epoch) {
  philox::U32x4 r = philox::philox(seed ^ kDomain, epoch);
  return {philox::word64(r, 0), philox::word64(r, 1)};
}

uint64_t seed_or_draw(std::optional<uint64_t> seed) {
  if (seed) return *seed;
  const GeneratorState s = kiln::detail::reserve_counters(1);
  return philox::word64(philox::philox(s.seed, s.offset), 0);
}
}  // namespace detail

SampleGenerator::SampleGenerator(uint64_t seed, uint64_t epoch, int64_t index, uint64_t occurrence) {
  KILN_CHECK(index >= 0 && static_cast<uint64_t>(index) < (uint64_t{1} << (64 - kBlockBits)), "SampleGenerator",
             "sample index ", index, " out of range [0, 2^44)");
  key_ = detail::epoch_keys(seed, epoch).sample;
  if (occurrence > 0) {
    key_ = philox::word64(philox::philox(key_, (uint64_t{1} << 63) | occurrence), 0);
  }
  counter_ = static_cast<uint64_t>(index) << kBlockBits;
  end_ = counter_ + (uint64_t{1} << kBlockBits);
}

uint32_t SampleGenerator::next_u32() {
  if (used_ == 4) {
    KILN_CHECK(counter_ < end_, "SampleGenerator", "a sample drew more than 2^22 random words");
    philox::U32x4 r = philox::philox(key_, counter_++);
    for (int i = 0; i < 4; ++i) block_[i] = r.v[i];
    used_ = 0;
  }
  return block_[used_++];
}

uint64_t SampleGenerator::next_u64() {
  uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

double SampleGenerator::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

int64_t SampleGenerator::randint(int64_t n) {
  KILN_CHECK(n > 0, "SampleGenerator", "randint needs n > 0, got ", n);
  return static_cast<int64_t>((static_cast<unsigned __int128>(next_u64()) * static_cast<uint64_t>(n)) >> 64);
}

void check_index(int64_t index, int64_t size, const char* where) {
  KILN_CHECK(index >= 0 && index < size, where, "index ", index, " out of range for a dataset of size ", size);
}

TensorDataset::TensorDataset(Tensor data, Tensor targets) {
  KILN_CHECK(data.defined() && targets.defined(), "TensorDataset", "data and targets must be defined");
  KILN_CHECK(data.dim() >= 1 && targets.dim() >= 1, "TensorDataset", "data ", data.shape(), " and targets ",
             targets.shape(), " need a first (sample) dimension");
  KILN_CHECK(data.size(0) == targets.size(0), "TensorDataset", "data has ", data.size(0), " samples but targets ",
             targets.size(0));
  // Contiguous, so each sample is one block of memory the loader copies with one memcpy.
  data_ = data.detach().contiguous();
  targets_ = targets.detach().contiguous();
}

int64_t TensorDataset::size() const { return data_.size(0); }

Example TensorDataset::get(int64_t index) const {
  check_index(index, size(), "TensorDataset");
  return {data_.select(0, index), targets_.select(0, index)};
}

TransformDataset::TransformDataset(std::shared_ptr<const Dataset> base, std::vector<Transform> transforms)
    : base_(std::move(base)), transforms_(std::move(transforms)) {
  KILN_CHECK(base_ != nullptr, "TransformDataset", "the base dataset is null");
  for (size_t i = 0; i < transforms_.size(); ++i)
    KILN_CHECK(static_cast<bool>(transforms_[i]), "TransformDataset", "transform ", i, " is empty");
}

Example TransformDataset::get(int64_t index) const {
  check_index(index, size(), "TransformDataset");
  SampleGenerator gen(0, 0, index);
  return get(index, gen);
}

Example TransformDataset::get(int64_t index, SampleGenerator& gen) const {
  Example e = base_->get(index, gen);
  for (const auto& t : transforms_) e.data = t(e.data, gen);
  return e;
}

}  // namespace kiln::data
