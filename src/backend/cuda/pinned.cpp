// The pinned host allocator: see pinned.h.
#include "backend/cuda/pinned.h"

#include <bit>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/state.h"

namespace kiln::backend::cuda {
namespace {

struct Block {
  char* ptr = nullptr;
  size_t size = 0;
  bool in_use = false;
  std::vector<std::pair<int, cudaEvent_t>> events;  // copies still reading it, per device
};

class PinnedPool {
 public:
  void* allocate(size_t n) {
    const size_t size = std::bit_ceil(std::max<size_t>(n, 512));
    std::lock_guard<std::mutex> lock(mutex_);
    collect();
    auto it = free_.find(size);
    if (it != free_.end()) {
      Block* b = it->second;
      free_.erase(it);
      b->in_use = true;
      return b->ptr;
    }
    void* p = nullptr;
    if (cudaHostAlloc(&p, size, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      release_free();  // cached blocks of other sizes back to the driver, then once more
      if (cudaHostAlloc(&p, size, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        throw OutOfMemoryError(detail::cat("[pin_memory] out of memory: cannot page-lock ", size, " bytes of host memory"));
      }
    }
    auto* b = new Block{static_cast<char*>(p), size, true, {}};
    blocks_.emplace(reinterpret_cast<uintptr_t>(p), b);
    return p;
  }

  void free(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    Block* b = find(p);
    if (!b) return;
    b->in_use = false;
    if (b->events.empty()) free_.emplace(b->size, b);
    else pending_.push_back(b);
  }

  bool record(const void* p, int device, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    Block* b = find(p);
    if (!b) return false;
    prune(*b);
    DeviceGuard g(device);
    cudaEvent_t raw = nullptr;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&raw, cudaEventDisableTiming));
    OwnedEvent e(raw);
    KILN_CUDA_CHECK(cudaEventRecord(e.get(), stream));
    b->events.emplace_back(device, e.get());
    e.release();
    return true;
  }

 private:
  // The block holding address p, if any.
  Block* find(const void* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = blocks_.upper_bound(a);
    if (it == blocks_.begin()) return nullptr;
    --it;
    return a < it->first + it->second->size ? it->second : nullptr;
  }
  // Drops the events of copies that are done, each queried and destroyed with its device current
  // (from another device, the call would create a context there).
  static void prune(Block& b) {
    auto& ev = b.events;
    for (size_t k = 0; k < ev.size();) {
      DeviceGuard g(ev[k].first);
      const cudaError_t st = cudaEventQuery(ev[k].second);
      if (st == cudaErrorNotReady) {
        cudaGetLastError();
        ++k;
        continue;
      }
      cudaEventDestroy(ev[k].second);
      ev.erase(ev.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  // Freed blocks whose copies are done become reusable.
  void collect() {
    for (size_t i = 0; i < pending_.size();) {
      Block* b = pending_[i];
      prune(*b);
      if (b->events.empty()) {
        free_.emplace(b->size, b);
        pending_[i] = pending_.back();
        pending_.pop_back();
      } else {
        ++i;
      }
    }
  }
  void release_free() {
    for (auto& [size, b] : free_) {
      cudaFreeHost(b->ptr);
      blocks_.erase(reinterpret_cast<uintptr_t>(b->ptr));
      delete b;
    }
    free_.clear();
  }

  std::mutex mutex_;
  std::map<uintptr_t, Block*> blocks_;  // every block, by address
  std::multimap<size_t, Block*> free_;  // reusable, by size
  std::vector<Block*> pending_;         // freed while copies may still read them
};

// Never destroyed: pinned tensors freed at exit still find it.
PinnedPool& pool() {
  static PinnedPool* p = new PinnedPool();
  return *p;
}

}  // namespace

void* pinned_allocate(size_t nbytes) { return pool().allocate(nbytes); }
void pinned_free(void* p) { pool().free(p); }
bool pinned_record(const void* p, int device, cudaStream_t stream) { return pool().record(p, device, stream); }

}  // namespace kiln::backend::cuda
