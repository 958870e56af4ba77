// The stream-ordered caching allocator: pools, splitting, coalescing and deferred frees.
#include "backend/stream_allocator.h"

#include <limits>

#include "kiln/error.h"

namespace kiln::backend {
namespace {

constexpr size_t kMinBlock = 512;                 // every size is a multiple of this
constexpr size_t kSmallSize = size_t{1} << 20;    // the small pool serves requests up to 1 MiB
constexpr size_t kSmallSegment = size_t{2} << 20; // from segments of 2 MiB
constexpr size_t kMinLargeSegment = size_t{10} << 20;  // requests below 10 MiB ...
constexpr size_t kLargeSegment = size_t{20} << 20;     // ... share 20 MiB segments
constexpr size_t kRoundLarge = size_t{2} << 20;        // larger ones get their size rounded to 2 MiB

size_t segment_size(size_t size, bool small) {
  if (small) return kSmallSegment;
  if (size < kMinLargeSegment) return kLargeSegment;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

}  // namespace

bool StreamAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return reinterpret_cast<uintptr_t>(a->stream) < reinterpret_cast<uintptr_t>(b->stream);
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

size_t StreamAllocator::round_size(size_t n) { return n < kMinBlock ? kMinBlock : (n + kMinBlock - 1) / kMinBlock * kMinBlock; }

StreamAllocator::StreamAllocator(std::string device_name, std::unique_ptr<StreamDevice> device,
                                 CachingAllocator::Mode mode)
    : device_name_(std::move(device_name)), device_(std::move(device)), mode_(mode) {}

StreamAllocator::~StreamAllocator() {
  // Runs at exit, when the driver may already be going away: return what is cached, leak
  // blocks still handed out (their tensors outlive the allocator only in static destruction).
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [event, b] : pending_) device_->release_event(event);
  pending_.clear();
  for (Pool* p : {&small_pool_, &large_pool_}) {
    for (Block* b : *p)
      if (!b->prev && !b->next) device_->raw_free(b->ptr);
    for (Block* b : *p) delete b;
    p->clear();
  }
}

StreamAllocator::Block* StreamAllocator::find_free_locked(size_t size, bool small, StreamId stream) {
  Pool& p = pool(small);
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = p.lower_bound(&key);
  if (it == p.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  p.erase(it);
  return b;
}

StreamAllocator::Block* StreamAllocator::new_segment_locked(size_t size, bool small, StreamId stream, size_t asked) {
  size_t seg = mode_ == CachingAllocator::Mode::System ? size : segment_size(size, small);
  // A request that fits under the limit though its shared 20 MiB segment would not gets a
  // segment of its own size (rounded to 2 MiB): the limit refuses only what does not fit.
  const size_t tight = (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  void* ptr = nullptr;
  for (int attempt = 0; attempt < 2 && !ptr; ++attempt) {
    if (attempt == 1) {  // free what the cache holds, then try once more
      ++n_.retries;
      device_->synchronize();
      process_events_locked();
      // A block that other streams have now finished with may fit, in a segment still partly in
      // use (which releasing the cache would not free).
      if (mode_ == CachingAllocator::Mode::Caching)
        if (Block* b = find_free_locked(size, small, stream)) return b;
      release_cached_locked();
    }
    if (!small && tight < seg && n_.over_limit(seg) && !n_.over_limit(tight)) seg = tight;
    if (n_.over_limit(seg)) continue;
    ptr = device_->raw_alloc(seg);
  }
  if (!ptr)
    n_.out_of_memory(device_name_, asked,
                     n_.over_limit(seg) ? AllocatorCounts::Refusal::Limit : AllocatorCounts::Refusal::Refused);
  // Poisoned before it is counted: a failed fill gives the segment back and leaves the counts right.
  if (mode_ == CachingAllocator::Mode::System) {
    try {
      device_->fill(ptr, 0xFF, seg);
    } catch (...) {
      device_->raw_free(ptr);
      throw;
    }
  }
  n_.reserve(seg);
  auto* b = new Block;
  b->ptr = ptr;
  b->size = seg;
  b->stream = stream;
  b->small = small;
  return b;
}

void* StreamAllocator::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  // No device has a quarter of the address space: refused before any rounding could wrap around.
  if (nbytes > AllocatorCounts::kLargestRequest)
    n_.out_of_memory(device_name_, nbytes, AllocatorCounts::Refusal::TooLarge);
  process_events_locked();
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  Block* b = mode_ == CachingAllocator::Mode::System ? nullptr : find_free_locked(size, small, stream);
  if (!b) b = new_segment_locked(size, small, stream, nbytes);
  // Split off what is not needed when it is worth keeping as a block of its own.
  const size_t rest = b->size - size;
  if (mode_ == CachingAllocator::Mode::Caching && (small ? rest >= kMinBlock : rest > kSmallSize)) {
    auto* r = new Block;
    r->ptr = static_cast<char*>(b->ptr) + size;
    r->size = rest;
    r->stream = stream;
    r->small = small;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool(small).insert(r);
  }
  b->allocated = true;
  allocated_blocks_[b->ptr] = b;
  n_.hand_out(b->size);
  return b->ptr;
}

void StreamAllocator::deallocate(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocated_blocks_.find(p);
  KILN_CHECK(it != allocated_blocks_.end(), "allocate", "free of ", p, " which ", device_name_,
             "'s allocator did not hand out");
  Block* b = it->second;
  allocated_blocks_.erase(it);
  b->allocated = false;
  n_.allocated -= b->size;
  if (mode_ == CachingAllocator::Mode::System) {
    // The block is its own segment; the driver's free waits for the device, other streams too.
    device_->raw_free(b->ptr);
    n_.reserved -= b->size;
    delete b;
    return;
  }
  if (!b->uses.empty()) {
    // An event on each stream that used the block, all or none: a failed record (a stream
    // destroyed since record_stream) must neither free the block while a stream it did fence
    // still runs nor lose it. Then the device is waited for and the block freed now.
    std::vector<void*> events;
    try {
      for (StreamId s : b->uses) events.push_back(device_->record_event(s));
    } catch (...) {
      for (void* e : events) device_->release_event(e);
      b->uses.clear();
      device_->synchronize();
      free_block_locked(b);
      throw;
    }
    for (void* e : events) pending_.emplace_back(e, b);
    b->pending_events = static_cast<int>(events.size());
    b->uses.clear();
    return;
  }
  free_block_locked(b);
}

void StreamAllocator::record_stream(void* p, StreamId stream) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocated_blocks_.find(p);
  KILN_CHECK(it != allocated_blocks_.end(), "record_stream", "the tensor's memory was not allocated by ",
             device_name_, "'s allocator");
  Block* b = it->second;
  if (stream == b->stream) return;  // its own stream orders its reuse already
  for (StreamId s : b->uses)
    if (s == stream) return;
  b->uses.push_back(stream);
}

void StreamAllocator::free_block_locked(Block* b) {
  Pool& p = pool(b->small);
  for (Block* n : {b->prev, b->next}) {
    if (!n || n->allocated || n->pending_events > 0) continue;
    p.erase(n);
    if (n == b->prev) {  // n absorbs nothing: b takes n's start
      b->ptr = n->ptr;
      b->prev = n->prev;
      if (n->prev) n->prev->next = b;
    } else {
      b->next = n->next;
      if (n->next) n->next->prev = b;
    }
    b->size += n->size;
    delete n;
  }
  p.insert(b);
}

void StreamAllocator::process_events_locked() {
  // Events complete in the order of their stream, not across streams: look at all of them.
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!device_->event_done(it->first)) {
      ++it;
      continue;
    }
    device_->release_event(it->first);
    Block* b = it->second;
    it = pending_.erase(it);
    if (--b->pending_events == 0) free_block_locked(b);
  }
}

void StreamAllocator::release_cached_locked() {
  for (Pool* p : {&small_pool_, &large_pool_}) {
    for (auto it = p->begin(); it != p->end();) {
      Block* b = *it;
      if (b->prev || b->next) {  // part of a segment still in use
        ++it;
        continue;
      }
      device_->raw_free(b->ptr);
      n_.reserved -= b->size;
      it = p->erase(it);
      delete b;
    }
  }
}

MemoryStats StreamAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return n_.stats(mode_ == CachingAllocator::Mode::Caching);
}

void StreamAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  n_.reset_peaks();
}

void StreamAllocator::set_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  n_.limit = bytes;
}

void StreamAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  device_->synchronize();
  process_events_locked();
  release_cached_locked();
}

}  // namespace kiln::backend
