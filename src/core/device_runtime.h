// The interface each device's runtime implements (memory, copies, synchronization), and its registry.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kiln/device.h"
#include "kiln/runtime.h"

namespace kiln {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual int device_count() const = 0;
  virtual std::string device_name(int index) const = 0;
  // Caching allocator. allocate(0) returns nullptr; a failure or an exceeded limit throws.
  virtual void* allocate(size_t nbytes, int index) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, int index) = 0;
  virtual MemoryStats stats(int index) const = 0;
  virtual void reset_peak(int index) = 0;
  virtual void set_limit(int index, size_t bytes) = 0;
  virtual void empty_cache(int index) = 0;
  // Copies nbytes between this device (index) and the host, or within this device. A copy from
  // the host returns once `src` may be reused, unless non_blocking (then, from pinned memory, it
  // may still be read after the call: the caller must not write it before the stream is done).
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes, int index) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t nbytes, int index, bool non_blocking) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t nbytes, int index) = 0;
  // From device src_index to device dst_index, after the work queued on both devices' current
  // streams, and before what is queued on them next. Here: through the host.
  virtual void copy_between_devices(void* dst, int dst_index, const void* src, int src_index, size_t nbytes) {
    std::unique_ptr<char[]> host(new char[nbytes]);
    copy_to_host(host.get(), src, nbytes, src_index);
    copy_from_host(dst, host.get(), nbytes, dst_index, false);
  }
  virtual void synchronize(int index) = 0;
  // The device's memory in bytes (see kiln::total_memory).
  virtual size_t total_memory(int index) const = 0;
  // Of it, the bytes free (CUDA: cudaMemGetInfo, every process's use counted); by default what
  // this process's allocator has not reserved.
  virtual size_t free_memory(int index) const {
    const size_t total = total_memory(index), reserved = stats(index).reserved;
    return reserved < total ? total - reserved : 0;
  }
  // The device's compute capability as major * 10 + minor (CUDA: 90 for an H100 or H200), which
  // decides what its kernels support; 0 for a runtime with no such notion or a failed query.
  virtual int compute_capability(int /*index*/) const { return 0; }
  // Empty, or why this build's kernels cannot run on the device (CUDA: built for other GPUs).
  virtual std::string incompatible(int /*index*/) const { return ""; }
  // The stream the calling thread's work on this device goes to (KernelArgs::stream); the CPU
  // has none.
  virtual void* current_stream(int /*index*/) { return nullptr; }
  // For the autograd engine, which runs each backward node on the stream its forward ran on:
  // makes `stream` the calling thread's current stream on device `index` and returns the one it
  // replaces; work queued on `waiter` from now on waits for the work queued on `producer` so far
  // (two streams of device `index`); and the memory at `data` (a block this runtime allocated) is
  // also used by work queued on `stream`, so it is not reused before that work is done
  // (cuda::record_stream). A runtime without streams has nothing to do.
  virtual void* exchange_stream(int /*index*/, void* /*stream*/) { return nullptr; }
  virtual void wait_stream(int /*index*/, void* /*waiter*/, void* /*producer*/) {}
  virtual void record_stream(const void* /*data*/, int /*index*/, void* /*stream*/) {}
  // Makes `index` the calling thread's current device and returns the previous one (device
  // kernels launch on the current device); a runtime with no such notion returns `index`.
  virtual int exchange_device(int index) { return index; }
  // The calling thread's current device (0 for a runtime with no such notion).
  virtual int current_device() const { return 0; }
  // Page-locked host memory for asynchronous copies to this kind of device (Tensor::pin_memory);
  // nullptr when the runtime has none.
  virtual void* allocate_pinned(size_t /*nbytes*/) { return nullptr; }
  virtual void free_pinned(void* /*ptr*/) {}
  // The profiler's kernel time on the device: a timed event recorded now on the current stream
  // (nullptr: the runtime has none, wall time is used), and the milliseconds between two of
  // them, which waits for the second and frees both.
  virtual void* timing_event(int /*index*/) { return nullptr; }
  virtual double elapsed_ms(void* /*start*/, void* /*end*/) { return 0; }
};

// Backends register their runtime at start-up.
void register_runtime(DeviceType type, DeviceRuntime* runtime);
// The runtime for a device; throws kiln::Error naming `where` if Kiln was built without it
// or the device index does not exist.
DeviceRuntime& runtime_for(Device device, const char* where);
DeviceRuntime* find_runtime(DeviceType type);

// Copies contiguous bytes between any two devices.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                bool non_blocking = false);

}  // namespace kiln
