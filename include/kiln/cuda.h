// kiln::cuda: NVIDIA GPUs — devices and their properties, streams and events, the current
// stream, memory statistics and limits, TF32. Like torch.cuda; no CUDA header is needed to use it.
// In a build without CUDA every device count is 0 and anything that needs a GPU is a kiln::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/runtime.h"
#include "kiln/tensor.h"

namespace kiln::cuda {

// (is_available, device_count and synchronize are declared in kiln/runtime.h.)
int current_device();
void set_device(int device);

// Makes `device` (-1: the current one) the calling thread's current device while alive, then
// restores the previous one (torch.cuda.device(i) / c10::cuda::CUDAGuard).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

struct DeviceProperties {
  std::string name;
  size_t total_memory = 0;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t l2_cache_bytes = 0;
  size_t shared_memory_per_block_optin = 0;
  // Empty, or why this build's GPU code cannot run on the device (its compute capability is not
  // covered by get_arch_list()) and how to rebuild; such a device refuses allocations.
  std::string incompatible;
};
DeviceProperties get_device_properties(int device = -1);
std::string get_device_name(int device = -1);

// The GPU code in this build, as torch.cuda.get_arch_list(): "sm_90" (machine code),
// "compute_90" (PTX, which the driver compiles for newer GPUs); from -DKILN_CUDA_ARCHITECTURES.
// Empty without CUDA.
std::vector<std::string> get_arch_list();

// A CUDA stream of one device (cudaStream_t). Work Kiln queues on a device goes to that device's
// current stream; ops return once their kernels are queued, and item(), to(kiln::Device::cpu()),
// printing and synchronize() wait. A value: streams come from a per-device pool, as PyTorch's
// do, and live as long as the process.
class Stream {
 public:
  // The device's default stream (CUDA's legacy stream 0), as torch.cuda.default_stream.
  static Stream default_stream(int device = -1);
  // A stream from the device's pool (round robin over 32, as torch.cuda.Stream), asynchronous
  // with the default stream; high_priority picks from the pool the scheduler favours.
  static Stream create(int device = -1, bool high_priority = false);
  // A stream made elsewhere (a cudaStream_t from another library) on `device`; it must outlive
  // the tensors allocated or recorded on it. cudaStreamLegacy is the default stream;
  // cudaStreamPerThread is refused (one handle for a different stream in every thread, which the
  // allocator could not tell apart), and so is a stream of another device (asked of CUDA).
  static Stream from_native(void* stream, int device);

  int device() const { return device_; }
  void* native() const { return stream_; }  // the cudaStream_t; nullptr is the default stream
  bool query() const;                       // all work queued so far has finished
  void synchronize() const;
  // Work queued on this stream after the call waits for work queued on `other` before it.
  void wait(const Stream& other) const;
  bool operator==(const Stream& o) const { return stream_ == o.stream_ && device_ == o.device_; }
  bool operator!=(const Stream& o) const { return !(*this == o); }

 private:
  Stream(void* stream, int device) : stream_(stream), device_(device) {}
  friend Stream current_stream(int device);
  void* stream_ = nullptr;
  int device_ = 0;
};

// The calling thread's current stream on `device` (-1: the current device); the default
// stream until a StreamGuard says otherwise.
Stream current_stream(int device = -1);

// Makes `stream` the calling thread's current stream on its device, and its device current,
// while alive (torch.cuda.stream(s) / c10::cuda::CUDAStreamGuard). As in torch, backward() runs
// each op's backward on the stream its forward ran on, whatever stream is current when it is
// called; a gradient passed between two streams is waited for, and when backward returns, the
// calling thread's current stream has waited for the gradients it left in .grad() (or returned).
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  void* prev_stream_;
  int prev_device_, device_;
};

// A CUDA event, timed unless enable_timing is false (torch.cuda.Event; an event only waited on
// is cheaper untimed).
class Event {
 public:
  explicit Event(int device = -1, bool enable_timing = true);
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void record();  // on the current stream
  bool query() const;
  void synchronize() const;
  // Work queued on `stream` after the call waits for this event.
  void wait(const Stream& stream) const;
  void wait() const;  // on the current stream of the event's device
  // Milliseconds between this event and `end`, both recorded and complete.
  double elapsed_ms(const Event& end) const;

 private:
  void* event_ = nullptr;
  int device_ = 0;
  bool timed_ = true;
};

// The device's caching allocator (torch.cuda.memory_stats and friends): bytes in tensors,
// reserved from the driver, the peak, retries and out-of-memory errors.
MemoryStats memory_stats(int device = -1);
void reset_peak_memory_stats(int device = -1);
void empty_cache(int device = -1);
// Fields of memory_stats(device), under torch.cuda's names.
size_t memory_allocated(int device = -1);      // .allocated
size_t max_memory_allocated(int device = -1);  // .peak
size_t memory_reserved(int device = -1);       // .reserved
size_t max_memory_reserved(int device = -1);   // .peak_reserved
// memory_stats as a table, with the device's free and total memory as the driver reports them.
std::string memory_summary(int device = -1);
// {free, total} bytes of the device as the driver reports them (cudaMemGetInfo): free counts
// every process's use, this one's cache included (torch.cuda.mem_get_info).
std::pair<size_t, size_t> mem_get_info(int device = -1);
// Caps what the allocator reserves at fraction x the device's memory (torch's
// set_per_process_memory_fraction); past it, allocations are an OutOfMemoryError.
void set_memory_fraction(double fraction, int device = -1);

// `t`'s memory is also used by work queued on `stream`: it is not reused for another tensor
// until that work is done (torch.Tensor.record_stream).
void record_stream(const Tensor& t, const Stream& stream);

// TF32 for float32 matmuls (torch.backends.cuda.matmul.allow_tf32; off by default, as PyTorch).
void set_allow_tf32(bool allow);
bool allow_tf32();

// Library versions ("" without CUDA): the runtime, cuBLAS(Lt), cuDNN.
std::string runtime_version();
std::string cublas_version();
std::string cudnn_version();

}  // namespace kiln::cuda
