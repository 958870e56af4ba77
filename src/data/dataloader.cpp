// DataLoader: the epoch's sample order, collation by memcpy, and the ordered, bounded prefetch of
// batches by worker threads.
#include "kiln/data/dataloader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iostream>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "kiln/cuda.h"
#include "kiln/ops.h"
#include "kiln/runtime.h"

namespace kiln::data {
namespace {

// Undefined when no example has the field and `optional`.
Tensor stack_field(const std::vector<Example>& examples, Tensor Example::*field, const char* name, bool optional) {
  const Tensor& first = examples[0].*field;
  for (size_t i = 0; i < examples.size(); ++i) {
    const Tensor& t = examples[i].*field;
    if (optional && !first.defined()) {
      KILN_CHECK(!t.defined(), "collate", "example ", i, " has a ", name, " but example 0 has none");
      continue;
    }
    KILN_CHECK(t.defined(), "collate", "example ", i, " has no ", name);
    KILN_CHECK(t.shape() == first.shape() && t.dtype() == first.dtype() && t.device() == first.device(), "collate",
               "example ", i, " has ", name, " ", t.dtype(), " ", t.shape(), " on ", t.device(), " but example 0 has ",
               first.dtype(), " ", first.shape(), " on ", first.device());
  }
  if (!first.defined()) return {};
  if (!first.device().is_cpu()) {
    std::vector<Tensor> list;
    for (const auto& e : examples) list.push_back((e.*field).detach());
    return stack(list, 0);
  }
  Shape shape{static_cast<int64_t>(examples.size())};
  shape.insert(shape.end(), first.shape().begin(), first.shape().end());
  Tensor out = empty(shape, first.dtype());
  size_t bytes = first.nbytes();
  char* dst = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < examples.size(); ++i) {
    Tensor t = (examples[i].*field).contiguous();  // no copy when already contiguous
    if (bytes) std::memcpy(dst + i * bytes, t.data_ptr(), bytes);
  }
  return out;
}

}  // namespace

Batch collate(const std::vector<Example>& examples) {
  KILN_CHECK(!examples.empty(), "collate", "no examples to stack");
  return {stack_field(examples, &Example::data, "data", false),
          stack_field(examples, &Example::target, "target", true)};
}

namespace detail {

// One pass over the dataset, owned by its iterator; with workers, also their threads and the ring
// of batches made ahead of the consumer.
struct EpochRun {
  std::shared_ptr<const Dataset> dataset;
  DataLoaderOptions options;
  uint64_t epoch = 0;
  std::vector<int64_t> order;
  std::vector<uint32_t> occurrence;  // per position: earlier visits of its index (empty: none repeat)
  int64_t num_batches = 0;
  int64_t next = 0;  // the batch the consumer takes next
  Batch current;
  bool done = false;

  struct Slot {
    bool full = false;
    Batch batch;
    std::exception_ptr error;
  };
  std::mutex mutex;
  std::condition_variable space;  // workers wait for room in the ring
  std::condition_variable ready;  // the consumer waits for its next batch
  std::vector<Slot> slots;        // batch b lives in slots[b % slots.size()]
  bool stop = false;
  std::vector<std::thread> workers;
  int pin_device = -1;  // the GPU made current in worker threads before pinning

  Batch make(int64_t b) const {
    int64_t n = static_cast<int64_t>(order.size()), bs = options.batch_size;
    int64_t begin = b * bs, end = std::min(n, begin + bs);
    std::vector<Example> examples;
    examples.reserve(static_cast<size_t>(end - begin));
    try {
      for (int64_t k = begin; k < end; ++k) {
        const auto at = static_cast<size_t>(k);
        SampleGenerator gen(*options.seed, epoch, order[at], occurrence.empty() ? 0 : occurrence[at]);
        examples.push_back(dataset->get(order[at], gen));
      }
      Batch batch = options.collate_fn ? options.collate_fn(examples) : collate(examples);
      batch.index = b;
      if (options.pin_memory) {
        if (pin_device >= 0) cuda::set_device(pin_device);
        batch.data = batch.data.pin_memory();
        if (batch.target.defined()) batch.target = batch.target.pin_memory();
      }
      return batch;
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      KILN_FAIL("DataLoader", "batch ", b, " of epoch ", epoch, ": ", e.what());
    } catch (...) {
      KILN_FAIL("DataLoader", "batch ", b, " of epoch ", epoch, ": unknown exception");
    }
  }

  void start_workers(int64_t start) {
    int64_t w_count = options.num_workers;
    // Workers pin on the starting thread's GPU, as PyTorch's pin-memory thread does: with no GPU
    // current, a pinned allocation makes a context on GPU 0 in every process of a multi-GPU job.
    if (options.pin_memory) pin_device = cuda::current_device();
    // The ring never needs more slots than batches are left (a large prefetch on a small data set).
    int64_t ring = 0;
    if (__builtin_mul_overflow(w_count, options.prefetch, &ring)) ring = INT64_MAX;  // the constructor bounds both
    slots.resize(static_cast<size_t>(std::min(ring, num_batches - start)));
    for (int64_t w = 0; w < w_count; ++w) {
      try {
        workers.emplace_back([this, start, w, w_count] { work(start + w, w_count); });
      } catch (const std::system_error& e) {  // the system's thread limit: stop the ones started
        shutdown();
        KILN_FAIL("DataLoader", "could not start data-loading thread ", w + 1, " of ", w_count, " (num_workers): ",
                  e.what(), "; use fewer workers");
      }
    }
  }

  void work(int64_t first, int64_t step) {
    int64_t capacity = static_cast<int64_t>(slots.size());
    for (int64_t b = first; b < num_batches; b += step) {
      {
        std::unique_lock lock(mutex);
        space.wait(lock, [&] { return stop || b < next + capacity; });
        if (stop) return;
      }
      Slot slot{true, {}, nullptr};
      try {
        slot.batch = make(b);
        // A device tensor made on a worker's thread is on that thread's stream (the default one),
        // unordered with the consumer's: workers build batches on the CPU, as PyTorch's do.
        for (const Tensor* t : {&slot.batch.data, &slot.batch.target})
          KILN_CHECK(!t->defined() || t->device().is_cpu(), "DataLoader",
                     "workers (num_workers > 0) build batches on the CPU, but batch ", b, " is on ", t->device(),
                     ": set num_workers = 0, or move each batch to the device in the loop (pin_memory makes that "
                     "copy asynchronous)");
      } catch (...) {
        slot.error = std::current_exception();
      }
      bool failed = slot.error != nullptr;
      {
        std::lock_guard lock(mutex);
        if (stop) return;
        slots[static_cast<size_t>(b % capacity)] = std::move(slot);
      }
      ready.notify_one();
      if (failed) return;  // the consumer stops at this batch; later ones are never needed
    }
  }

  void shutdown() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    space.notify_all();
    for (auto& t : workers) t.join();
    workers.clear();
    slots.clear();
  }

  // Moves batch `next` into `current`, or marks the run done. A failed batch ends the run and
  // rethrows its exception here, on the consumer's thread.
  void advance() {
    current = Batch{};
    if (next >= num_batches) {
      done = true;
      shutdown();
      return;
    }
    if (workers.empty()) {
      try {
        current = make(next++);
      } catch (...) {
        done = true;
        throw;
      }
      return;
    }
    Slot slot;
    {
      std::unique_lock lock(mutex);
      Slot& s = slots[static_cast<size_t>(next % static_cast<int64_t>(slots.size()))];
      ready.wait(lock, [&] { return s.full; });
      slot = std::move(s);
      s = Slot{};
      ++next;
    }
    space.notify_all();
    if (slot.error) {
      done = true;
      shutdown();
      std::rethrow_exception(slot.error);
    }
    current = std::move(slot.batch);
  }

  ~EpochRun() { shutdown(); }
};

}  // namespace detail

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  KILN_CHECK(dataset_ != nullptr, "DataLoader", "the dataset is null");
  KILN_CHECK(options_.batch_size >= 1, "DataLoader", "batch_size must be at least 1, got ", options_.batch_size);
  KILN_CHECK(options_.num_workers >= 0, "DataLoader", "num_workers must be >= 0, got ", options_.num_workers);
  KILN_CHECK(options_.num_workers <= kMaxWorkers, "DataLoader", "num_workers must be at most ", kMaxWorkers, ", got ",
             options_.num_workers);
  KILN_CHECK(options_.prefetch >= 1, "DataLoader", "prefetch must be at least 1, got ", options_.prefetch);
  KILN_CHECK(options_.prefetch <= kMaxPrefetch, "DataLoader", "prefetch must be at most ", kMaxPrefetch, ", got ",
             options_.prefetch);
  KILN_CHECK(dataset_->size() >= 0, "DataLoader", "the dataset reports size ", dataset_->size());
  KILN_CHECK(!(options_.sampler && options_.shuffle), "DataLoader",
             "shuffle must be false with a sampler (the sampler decides the order)");
  options_.seed = detail::seed_or_draw(options_.seed);
  if (options_.pin_memory && !cuda::is_available()) {  // as PyTorch: pinning needs a GPU
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      std::cerr << "kiln: warning: [DataLoader] pin_memory is set but no CUDA device is present; batches are not pinned\n";
    options_.pin_memory = false;
  }
}

int64_t DataLoader::size() const {
  int64_t n = options_.sampler ? options_.sampler->size() : dataset_->size(), bs = options_.batch_size;
  return options_.drop_last ? n / bs : n / bs + (n % bs != 0);
}

void DataLoader::set_epoch(uint64_t epoch, int64_t start_batch) {
  KILN_CHECK(start_batch >= 0 && start_batch <= size(), "DataLoader", "start batch ", start_batch,
             " out of range [0, ", size(), "]");
  epoch_ = epoch;
  start_batch_ = start_batch;
  epoch_set_ = true;
}

std::vector<int64_t> DataLoader::sample_order(uint64_t epoch) const {
  if (options_.sampler) {
    std::vector<int64_t> order = options_.sampler->indices(epoch);
    // size() counts batches by the sampler's size: its indices must be as many.
    KILN_CHECK(static_cast<int64_t>(order.size()) == options_.sampler->size(), "DataLoader", "the sampler gave ",
               order.size(), " indices for epoch ", epoch, " but its size() is ", options_.sampler->size());
    const int64_t n = dataset_->size();
    for (int64_t i : order)
      KILN_CHECK(i >= 0 && i < n, "DataLoader", "the sampler gave index ", i, " for a dataset of ", n);
    return order;
  }
  if (options_.shuffle) return shuffled_indices(dataset_->size(), *options_.seed, epoch);
  std::vector<int64_t> order(static_cast<size_t>(dataset_->size()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  return order;
}

std::unique_ptr<detail::EpochRun> DataLoader::run(uint64_t epoch) const {
  auto run = std::make_unique<detail::EpochRun>();
  run->dataset = dataset_;
  run->options = options_;
  run->epoch = epoch;
  run->order = sample_order(epoch);
  run->num_batches = size();
  if (options_.sampler) {  // only a sampler repeats an index (a shuffle is a permutation)
    std::unordered_map<int64_t, uint32_t> seen;
    std::vector<uint32_t> occurrence(run->order.size());
    bool repeats = false;
    for (size_t k = 0; k < occurrence.size(); ++k) repeats |= (occurrence[k] = seen[run->order[k]]++) > 0;
    if (repeats) run->occurrence = std::move(occurrence);
  }
  return run;
}

Batch DataLoader::batch(uint64_t epoch, int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "DataLoader", "batch ", index, " out of range [0, ", size(), ")");
  return run(epoch)->make(index);
}

DataLoader::Iterator DataLoader::begin() {
  if (const auto chosen = options_.sampler ? options_.sampler->chosen_epoch() : std::nullopt) {
    KILN_CHECK(!epoch_set_ || *chosen == epoch_, "DataLoader", "set_epoch chose epoch ", epoch_,
               " but the sampler's set_epoch chose epoch ", *chosen, ": set both alike, or only one");
    epoch_ = *chosen;
  }
  std::unique_ptr<detail::EpochRun> run = this->run(epoch_);
  run->next = start_batch_;
  ++epoch_;
  start_batch_ = 0;
  epoch_set_ = false;
  if (options_.num_workers > 0 && run->next < run->num_batches) run->start_workers(run->next);
  run->advance();
  return Iterator(std::move(run));
}

DataLoader::Iterator::Iterator() = default;
DataLoader::Iterator::Iterator(std::unique_ptr<detail::EpochRun> run) : run_(std::move(run)) {}
DataLoader::Iterator::Iterator(Iterator&&) noexcept = default;
DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&&) noexcept = default;
DataLoader::Iterator::~Iterator() = default;

Batch& DataLoader::Iterator::operator*() const {
  KILN_CHECK(run_ && !run_->done, "DataLoader", "dereferencing an iterator at the end of its epoch");
  return run_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  KILN_CHECK(run_ && !run_->done, "DataLoader", "advancing an iterator past the end of its epoch");
  run_->advance();
  return *this;
}

bool DataLoader::Iterator::operator==(std::default_sentinel_t) const { return !run_ || run_->done; }

}  // namespace kiln::data
