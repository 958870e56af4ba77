// A stream-ordered caching allocator (the shape of PyTorch's CUDACachingAllocator), written
// against an abstract device (raw memory and events) so that its logic runs in CPU tests with a
// fake device and on CUDA with the real one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/caching_allocator.h"
#include "kiln/runtime.h"

namespace kiln::backend {

using StreamId = void*;  // a device stream handle; nullptr is the default stream

// What the allocator needs from a device.
class StreamDevice {
 public:
  virtual ~StreamDevice() = default;
  virtual void* raw_alloc(size_t bytes) = 0;  // nullptr when the device is out of memory
  virtual void raw_free(void* p) = 0;
  virtual void* record_event(StreamId stream) = 0;  // marks the work queued on `stream` so far
  virtual bool event_done(void* event) = 0;         // that work has finished
  virtual void release_event(void* event) = 0;
  virtual void synchronize() = 0;                   // every stream of the device
  virtual void fill(void* /*p*/, int /*byte*/, size_t /*n*/) {}  // poisons a new block (system mode)
};

// Blocks are carved from segments obtained from the device: requests of up to 1 MiB from 2 MiB
// segments (the small pool), larger ones from segments of 20 MiB or the request rounded up to
// 2 MiB (the large pool); a block larger than asked is split and the rest stays cached, and a
// freed block merges with free neighbours of its segment. Every block belongs to the stream it
// was allocated on and is reused only for that stream, where the stream's ordering makes reuse
// safe without waiting. A block also used on other streams (record_stream) returns to its pool
// only when an event recorded on each of them at free time has completed. When a request does
// not fit (the device refuses, or the limit would be passed), the cache is released (unsplit
// free segments go back to the device) and the request retried once; then it is an
// OutOfMemoryError "[cuda] out of memory on cuda:0: asked ..., limit ..., ... in use, ... reserved".
class StreamAllocator {
 public:
  StreamAllocator(std::string device_name, std::unique_ptr<StreamDevice> device,
                  CachingAllocator::Mode mode = CachingAllocator::mode_from_env());
  ~StreamAllocator();
  StreamAllocator(const StreamAllocator&) = delete;
  StreamAllocator& operator=(const StreamAllocator&) = delete;

  void* allocate(size_t nbytes, StreamId stream);
  void deallocate(void* p);
  // The block holding p is also used by work queued on `stream` (torch's record_stream).
  void record_stream(void* p, StreamId stream);
  MemoryStats stats() const;
  void reset_peak();
  void set_limit(size_t bytes);
  // Waits for the device, then returns every free segment to it.
  void empty_cache();

  static size_t round_size(size_t n);  // requests are rounded up to 512 bytes

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    StreamId stream = nullptr;
    bool small = false;
    bool allocated = false;
    int pending_events = 0;        // events still to complete before the block can be reused
    Block* prev = nullptr;         // neighbours within the segment
    Block* next = nullptr;
    std::vector<StreamId> uses;    // other streams the block was used on
  };
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;

  Block* find_free_locked(size_t size, bool small, StreamId stream);
  Block* new_segment_locked(size_t size, bool small, StreamId stream, size_t asked);
  void free_block_locked(Block* b);
  void process_events_locked();
  void release_cached_locked();  // unsplit free segments back to the device
  Pool& pool(bool small) { return small ? small_pool_ : large_pool_; }

  const std::string device_name_;
  std::unique_ptr<StreamDevice> device_;
  const CachingAllocator::Mode mode_;
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;
  std::unordered_map<void*, Block*> allocated_blocks_;
  std::deque<std::pair<void*, Block*>> pending_;  // (event, block) in recording order
  AllocatorCounts n_;
};

}  // namespace kiln::backend
