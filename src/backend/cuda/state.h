// The CUDA backend's internal state, shared by its files: the device guard, each device's
// allocator and stream pool, and the calling thread's current stream per device.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "backend/cuda/check.h"
#include "backend/stream_allocator.h"

namespace kiln::backend::cuda {

inline constexpr int kMaxDevices = 64;

// The number of devices the driver reports (0 without a driver or device), read once.
int device_count();
// Throws "[where] device cuda:N does not exist (M present)" for a bad index.
void check_device(int device, const char* where);
// -1 means the thread's current device.
int resolve(int device, const char* where);

// An event destroyed with its owner unless released (one whose record failed does not leak).
struct EventDestroy {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
using OwnedEvent = std::unique_ptr<CUevent_st, EventDestroy>;

// Makes `index` the current device of the calling thread while alive.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

// The calling thread's current stream on `device` (nullptr: the default stream).
cudaStream_t current_stream(int device);
void set_current_stream(int device, cudaStream_t stream);

// The device's caching allocator (stream-ordered).
StreamAllocator& allocator(int device);

// The CMake architecture list the device code was built for (KILN_CUDA_ARCHITECTURES, ';' or ','
// between entries; backend/cuda/arch_support.h reads it).
const char* built_arch_list();

}  // namespace kiln::backend::cuda
