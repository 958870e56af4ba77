// The CUDA device runtime: a stream-ordered caching allocator per device, copies queued on the
// current stream, synchronization, and the per-thread current stream.
#include <array>
#include <iostream>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/cuda/arch_support.h"
#include "backend/cuda/context.h"
#include "backend/cuda/index_check.h"
#include "backend/cuda/pinned.h"
#include "backend/cuda/state.h"
#include "core/device_runtime.h"

namespace kiln::backend::cuda {
namespace {

thread_local std::array<cudaStream_t, kMaxDevices> t_current{};  // zero: the default stream

// The CUDA runtime or the device's context is gone (a tensor freed during static destruction, at
// exit): its memory goes with the process, so a free or an event there is nothing to report.
bool runtime_gone(cudaError_t st) {
  if (st != cudaErrorCudartUnloading && st != cudaErrorContextIsDestroyed) return false;
  cudaGetLastError();
  return true;
}

// An untimed event recorded on `stream` (of the current device).
OwnedEvent recorded_event(cudaStream_t stream) {
  cudaEvent_t raw = nullptr;
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&raw, cudaEventDisableTiming));
  OwnedEvent e(raw);
  KILN_CUDA_CHECK(cudaEventRecord(e.get(), stream));
  return e;
}

// Pinned host memory for a copy of a device's index-error slot, queued on a stream and read after
// waiting for it (pinned: an asynchronous copy, no staging). Freed once read; the pinned
// allocator keeps the block for the next one. None (slot null) where no memory can be page-locked.
struct PinnedSlot {
  IndexErrorSlot* slot = nullptr;
  PinnedSlot() {
    try {
      slot = static_cast<IndexErrorSlot*>(pinned_allocate(sizeof(IndexErrorSlot)));
    } catch (const OutOfMemoryError&) {
    }
  }
  PinnedSlot(const PinnedSlot&) = delete;
  PinnedSlot& operator=(const PinnedSlot&) = delete;
  ~PinnedSlot() {
    if (slot) pinned_free(slot);
  }
};

// Lets device `from` read and write device `to`'s memory directly, once per pair, where the
// hardware allows it (cudaMemcpyPeerAsync works without it, staged by the driver).
void enable_peer_access(int from, int to) {
  static std::mutex m;
  static std::array<std::array<bool, kMaxDevices>, kMaxDevices> tried{};
  std::lock_guard<std::mutex> lock(m);
  bool& done = tried.at(static_cast<size_t>(from)).at(static_cast<size_t>(to));
  if (done) return;
  done = true;
  int can = 0;
  KILN_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
  if (!can) return;
  DeviceGuard g(from);
  // Refused (already enabled, or too many peers): the copy is staged by the driver instead.
  if (cudaDeviceEnablePeerAccess(to, 0) != cudaSuccess) cudaGetLastError();
}

// Device memory and events for the allocator. Events come from a small free list: creating
// one per freed block would cost a driver call on every free of a cross-stream tensor.
class CudaStreamDevice final : public StreamDevice {
 public:
  explicit CudaStreamDevice(int index) : index_(index) {}
  ~CudaStreamDevice() override {
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  }
  void* raw_alloc(size_t n) override {
    DeviceGuard g(index_);
    void* p = nullptr;
    if (cudaMalloc(&p, n) != cudaSuccess) {
      cudaGetLastError();  // clear the out-of-memory error; the allocator retries or reports
      return nullptr;
    }
    return p;
  }
  void raw_free(void* p) override {
    DeviceGuard g(index_);
    const cudaError_t st = cudaFree(p);
    if (!runtime_gone(st)) KILN_CUDA_CHECK(st);
  }
  // nullptr when the runtime is gone (an event that is done at once).
  void* record_event(StreamId stream) override {
    DeviceGuard g(index_);
    cudaEvent_t e = nullptr;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else {
      const cudaError_t st = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
      if (runtime_gone(st)) return nullptr;
      KILN_CUDA_CHECK(st);
    }
    const cudaError_t st = cudaEventRecord(e, static_cast<cudaStream_t>(stream));
    if (st != cudaSuccess) {
      free_events_.push_back(e);  // not lost: recording failed, the event is as it was
      if (runtime_gone(st)) return nullptr;
      KILN_CUDA_CHECK(st);
    }
    return e;
  }
  bool event_done(void* event) override {
    if (!event) return true;
    // The event's device current: a query from a thread whose current device has no context yet
    // would create one there (StreamAllocator::allocate runs on any thread, with no device scope).
    DeviceGuard g(index_);
    const cudaError_t st = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (st == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    KILN_CUDA_CHECK(st);
    return true;
  }
  void release_event(void* event) override {
    if (event) free_events_.push_back(static_cast<cudaEvent_t>(event));
  }
  void synchronize() override {
    DeviceGuard g(index_);
    KILN_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void fill(void* p, int byte, size_t n) override {
    DeviceGuard g(index_);
    KILN_CUDA_CHECK(cudaMemset(p, byte, n));
    // cudaMemset of device memory may return before it runs, and the pool's streams do not wait
    // for the legacy stream: a kernel could write the block before the poison lands on it.
    KILN_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  int index_;
  std::vector<cudaEvent_t> free_events_;  // guarded by the allocator's mutex
};

class CudaRuntime final : public DeviceRuntime {
 public:
  CudaRuntime() {
    // The devices CUDA reports (the namespace's device_count: this class's own counts the
    // allocators made here, none yet).
    const int n = ::kiln::backend::cuda::device_count();
    for (int i = 0; i < n; ++i) {
      allocators_.push_back(
          std::make_unique<StreamAllocator>("cuda:" + std::to_string(i), std::make_unique<CudaStreamDevice>(i)));
      int major = 0, minor = 0;
      if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i) != cudaSuccess ||
          cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i) != cudaSuccess) {
        cudaGetLastError();
        major = minor = 0;
      }
      capabilities_.push_back(major * 10 + minor);
      // A failed query (0) is not a reason to refuse the device: its kernels' errors will say.
      runs_.push_back(major == 0 || arch_list_runs_on(built_arch_list(), major * 10 + minor));
    }
  }
  int compute_capability(int index) const override { return capabilities_.at(static_cast<size_t>(index)); }
  std::string incompatible(int index) const override {
    if (runs_.at(static_cast<size_t>(index))) return "";
    return arch_list_problem(built_arch_list(), compute_capability(index),
                             "cuda:" + std::to_string(index) + " (" + device_name(index) + ")");
  }
  int device_count() const override { return static_cast<int>(allocators_.size()); }
  std::string device_name(int index) const override {
    cudaDeviceProp prop{};
    KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    return prop.name;
  }
  void* allocate(size_t nbytes, int index) override {
    // No tensor on a GPU that none of this build's kernels could run on: the error comes at
    // model.to(device), not as "no kernel image" at the first op.
    if (!runs_.at(static_cast<size_t>(index))) KILN_FAIL("cuda", incompatible(index));
    return allocators_.at(index)->allocate(nbytes, cuda::current_stream(index));
  }
  void deallocate(void* p, size_t, int index) override { allocators_.at(index)->deallocate(p); }
  MemoryStats stats(int index) const override { return allocators_.at(index)->stats(); }
  void reset_peak(int index) override { allocators_.at(index)->reset_peak(); }
  void set_limit(int index, size_t bytes) override { allocators_.at(index)->set_limit(bytes); }
  void empty_cache(int index) override {
    release_blaslt_workspaces(index);
    allocators_.at(index)->empty_cache();
  }
  // Copies are queued on the current stream. From pageable host memory the driver stages the
  // data before returning, so the caller may reuse its buffer at once; from pinned memory the
  // copy is truly asynchronous and the pinned allocator keeps the block until it is done. Into
  // host memory the caller reads the data next, so the stream is waited for. An index kernel's bad
  // index surfaces here, as the CPU's would: the index-error slot is copied behind the data, on the
  // same stream, so one wait covers both (item() waits once, not twice).
  void copy_to_host(void* dst, const void* src, size_t n, int index) override {
    DeviceGuard g(index);
    cudaStream_t s = cuda::current_stream(index);
    const PinnedSlot seen;
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s));
    if (seen.slot)
      KILN_CUDA_CHECK(
          cudaMemcpyAsync(seen.slot, index_error_slot(index), sizeof(IndexErrorSlot), cudaMemcpyDeviceToHost, s));
    KILN_CUDA_CHECK(cudaStreamSynchronize(s));
    if (seen.slot) raise_index_error(index, *seen.slot);
    else raise_index_error(index);  // a read of its own
  }
  void copy_from_host(void* dst, const void* src, size_t n, int index, bool non_blocking) override {
    DeviceGuard g(index);
    cudaStream_t s = cuda::current_stream(index);
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s));
    // A pinned source is not reused for another tensor before the copy has read it; and unless
    // asked for non_blocking, the caller may write it as soon as we return (PyTorch's rule).
    if (pinned_record(src, index, s) && !non_blocking) KILN_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  void copy_on_device(void* dst, const void* src, size_t n, int index) override {
    DeviceGuard g(index);
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, cuda::current_stream(index)));
  }
  // GPU to GPU directly (NVLink or PCIe peer to peer where the pair allows it; else the driver
  // stages it), on the source's current stream, ordered after the destination stream's work and
  // before its next (PyTorch's rule).
  void copy_between_devices(void* dst, int dst_index, const void* src, int src_index, size_t n) override {
    enable_peer_access(src_index, dst_index);
    cudaStream_t ss = cuda::current_stream(src_index), ds = cuda::current_stream(dst_index);
    {
      DeviceGuard g(dst_index);
      OwnedEvent before = recorded_event(ds);
      DeviceGuard gs(src_index);
      KILN_CUDA_CHECK(cudaStreamWaitEvent(ss, before.get(), 0));
    }
    DeviceGuard g(src_index);
    KILN_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_index, src, src_index, n, ss));
    OwnedEvent done = recorded_event(ss);
    DeviceGuard gd(dst_index);
    KILN_CUDA_CHECK(cudaStreamWaitEvent(ds, done.get(), 0));
  }
  void synchronize(int index) override {
    DeviceGuard g(index);
    KILN_CUDA_CHECK(cudaDeviceSynchronize());
    raise_index_error(index);
  }
  size_t total_memory(int index) const override {
    cudaDeviceProp prop{};
    KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    return prop.totalGlobalMem;
  }
  size_t free_memory(int index) const override {
    DeviceGuard g(index);
    size_t free = 0, total = 0;
    KILN_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
  }
  void* current_stream(int index) override { return t_current[static_cast<size_t>(index)]; }
  void* exchange_stream(int index, void* stream) override {
    return std::exchange(t_current[static_cast<size_t>(index)], static_cast<cudaStream_t>(stream));
  }
  void wait_stream(int index, void* waiter, void* producer) override {
    DeviceGuard g(index);
    OwnedEvent done = recorded_event(static_cast<cudaStream_t>(producer));
    KILN_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter), done.get(), 0));
  }
  void record_stream(const void* data, int index, void* stream) override {
    allocators_.at(static_cast<size_t>(index))->record_stream(const_cast<void*>(data), stream);
  }
  int current_device() const override {
    int index = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&index));
    return index;
  }
  int exchange_device(int index) override {
    int prev = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&prev));
    if (prev != index) KILN_CUDA_CHECK(cudaSetDevice(index));
    return prev;
  }
  void* timing_event(int index) override {
    DeviceGuard g(index);
    cudaEvent_t raw = nullptr;
    KILN_CUDA_CHECK(cudaEventCreate(&raw));
    OwnedEvent e(raw);
    KILN_CUDA_CHECK(cudaEventRecord(e.get(), cuda::current_stream(index)));
    return e.release();
  }
  double elapsed_ms(void* start, void* end) override {
    struct Destroy {  // both events, whether the calls below succeed or throw
      cudaEvent_t s, e;
      ~Destroy() {
        cudaEventDestroy(s);
        cudaEventDestroy(e);
      }
    } events{static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)};
    float ms = 0;
    KILN_CUDA_CHECK(cudaEventSynchronize(events.e));
    KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, events.s, events.e));
    return ms;
  }
  void* allocate_pinned(size_t nbytes) override { return pinned_allocate(nbytes); }
  void free_pinned(void* p) override { pinned_free(p); }

  StreamAllocator& allocator(int index) { return *allocators_.at(static_cast<size_t>(index)); }

 private:
  std::vector<std::unique_ptr<StreamAllocator>> allocators_;
  std::vector<int> capabilities_;  // per device, major * 10 + minor
  std::vector<bool> runs_;         // per device, whether the build's GPU code runs on it
};

// Never destroyed, like the CPU runtime: tensors freed at exit still find it.
CudaRuntime* const g_runtime = [] {
  auto* r = new CudaRuntime();
  register_runtime(DeviceType::CUDA, r);
  return r;
}();

}  // namespace

int device_count() {
  static const int count = [] {
    int n = 0;
    if (const cudaError_t st = cudaGetDeviceCount(&n); st != cudaSuccess) {
      // No device (or no driver at all): CUDA is simply absent. Anything else (a driver older
      // than the runtime, a broken install) is said once, as torch.cuda warns, not hidden.
      cudaGetLastError();
      int driver = 0;  // 0: no driver installed (a machine without a GPU)
      cudaDriverGetVersion(&driver);
      if (st != cudaErrorNoDevice && driver != 0)
        std::cerr << "kiln: warning: CUDA initialization failed: " << cudaGetErrorName(st) << " ("
                  << cudaGetErrorString(st) << "); no GPU will be used\n";
      n = 0;
    }
    return std::min(n, kMaxDevices);
  }();
  return count;
}

void check_device(int device, const char* where) {
  KILN_CHECK(device >= 0 && device < device_count(), where, "device cuda:", device, " does not exist (",
             device_count(), " present)");
}

int resolve(int device, const char* where) {
  if (device < 0) {
    KILN_CHECK(device_count() > 0, where, "no CUDA device is present");
    KILN_CUDA_CHECK(cudaGetDevice(&device));
  }
  check_device(device, where);
  return device;
}

DeviceGuard::DeviceGuard(int index) {
  KILN_CUDA_CHECK(cudaGetDevice(&prev_));
  changed_ = prev_ != index;
  if (changed_) KILN_CUDA_CHECK(cudaSetDevice(index));
}

DeviceGuard::~DeviceGuard() {
  if (changed_) cudaSetDevice(prev_);
}

cudaStream_t current_stream(int device) { return t_current[static_cast<size_t>(device)]; }
void set_current_stream(int device, cudaStream_t stream) { t_current[static_cast<size_t>(device)] = stream; }

const char* built_arch_list() { return KILN_CUDA_ARCHITECTURES; }

StreamAllocator& allocator(int device) {
  check_device(device, "cuda allocator");
  return g_runtime->allocator(device);
}

}  // namespace kiln::backend::cuda
