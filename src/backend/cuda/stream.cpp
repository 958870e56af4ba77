// kiln::cuda's public API: devices, streams (a pool per device), events, the current stream,
// memory statistics and limits, TF32, library versions.
#include <cublasLt.h>
#ifdef KILN_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <array>
#include <atomic>
#include <mutex>

#include "backend/cuda/arch_support.h"
#include "backend/cuda/context.h"
#include "backend/cuda/state.h"
#include "core/device_runtime.h"
#include "kiln/cuda.h"

namespace kiln::cuda {
namespace be = kiln::backend::cuda;

namespace {

// 32 streams per priority per device, created on first use and kept for the process.
constexpr int kPoolSize = 32;
struct StreamPool {
  std::once_flag once;
  std::array<cudaStream_t, kPoolSize> low{}, high{};
  std::atomic<uint32_t> next_low{0}, next_high{0};
};
std::array<StreamPool, be::kMaxDevices> g_pools;

StreamPool& pool(int device) {
  StreamPool& p = g_pools[static_cast<size_t>(device)];
  std::call_once(p.once, [&] {
    be::DeviceGuard g(device);
    int least = 0, greatest = 0;  // numerically: least is the lowest priority
    KILN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    for (int i = 0; i < kPoolSize; ++i) {
      KILN_CUDA_CHECK(cudaStreamCreateWithPriority(&p.low[static_cast<size_t>(i)], cudaStreamNonBlocking, least));
      KILN_CUDA_CHECK(cudaStreamCreateWithPriority(&p.high[static_cast<size_t>(i)], cudaStreamNonBlocking, greatest));
    }
  });
  return p;
}

std::atomic<bool> g_allow_tf32{false};

// Destroys an event with its device current: from a thread whose current device is another one,
// cudaEventDestroy would create that device's context (PyTorch guards it for this reason). Never
// throws (destructors call it), so not DeviceGuard, whose failures throw.
void destroy_event(void* event, int device) {
  if (!event) return;
  int prev = 0;
  const bool switched = cudaGetDevice(&prev) == cudaSuccess && prev != device && cudaSetDevice(device) == cudaSuccess;
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
  if (switched) cudaSetDevice(prev);
}

}  // namespace

DeviceProperties get_device_properties(int device) {
  device = be::resolve(device, "cuda::get_device_properties");
  cudaDeviceProp p{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceProperties d;
  d.name = p.name;
  d.total_memory = p.totalGlobalMem;
  d.major = p.major;
  d.minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  d.l2_cache_bytes = static_cast<size_t>(p.l2CacheSize);
  d.shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
  d.incompatible = find_runtime(DeviceType::CUDA)->incompatible(device);
  return d;
}

std::string get_device_name(int device) { return get_device_properties(device).name; }

std::vector<std::string> get_arch_list() { return be::arch_names(be::built_arch_list()); }

Stream Stream::default_stream(int device) { return Stream(nullptr, be::resolve(device, "cuda::Stream::default_stream")); }

Stream Stream::create(int device, bool high_priority) {
  device = be::resolve(device, "cuda::Stream::create");
  StreamPool& p = pool(device);
  auto& counter = high_priority ? p.next_high : p.next_low;
  const auto& streams = high_priority ? p.high : p.low;
  return Stream(streams[counter.fetch_add(1) % kPoolSize], device);
}

Stream Stream::from_native(void* stream, int device) {
  KILN_CHECK(stream != static_cast<void*>(cudaStreamPerThread), "cuda::Stream::from_native",
             "cudaStreamPerThread names another stream in every thread; pass a stream of its own");
  if (stream == static_cast<void*>(cudaStreamLegacy)) stream = nullptr;  // the default stream's other name
  device = be::resolve(device, "cuda::Stream::from_native");
  if (stream != nullptr) {  // a stream of another GPU would run each op there, on memory of this one
    int owner = -1;
    KILN_CUDA_CHECK(cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &owner));
    KILN_CHECK(owner == device, "cuda::Stream::from_native", "the stream belongs to cuda:", owner, ", not cuda:",
               device);
  }
  return Stream(stream, device);
}

bool Stream::query() const {
  be::DeviceGuard g(device_);
  const cudaError_t st = cudaStreamQuery(static_cast<cudaStream_t>(stream_));
  if (st == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK(st);
  return true;
}

void Stream::synchronize() const {
  be::DeviceGuard g(device_);
  KILN_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

void Stream::wait(const Stream& other) const {
  Event e(other.device(), false);
  e.record(other);
  e.wait(*this);
}

Stream current_stream(int device) {
  device = be::resolve(device, "cuda::current_stream");
  return Stream(be::current_stream(device), device);  // the pool's or from_native's: checked already
}

StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()) {
  KILN_CUDA_CHECK(cudaGetDevice(&prev_device_));
  prev_stream_ = be::current_stream(device_);
  if (prev_device_ != device_) KILN_CUDA_CHECK(cudaSetDevice(device_));
  be::set_current_stream(device_, static_cast<cudaStream_t>(stream.native()));
}

StreamGuard::~StreamGuard() {
  be::set_current_stream(device_, static_cast<cudaStream_t>(prev_stream_));
  if (prev_device_ != device_) cudaSetDevice(prev_device_);
}

Event::Event(int device, bool enable_timing) : device_(be::resolve(device, "cuda::Event")), timed_(enable_timing) {
  be::DeviceGuard g(device_);
  cudaEvent_t e = nullptr;
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, enable_timing ? cudaEventDefault : cudaEventDisableTiming));
  event_ = e;
}

Event::~Event() { destroy_event(event_, device_); }

Event::Event(Event&& o) noexcept : event_(o.event_), device_(o.device_), timed_(o.timed_) { o.event_ = nullptr; }

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    destroy_event(event_, device_);
    event_ = o.event_;
    device_ = o.device_;
    timed_ = o.timed_;
    o.event_ = nullptr;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  KILN_CHECK(stream.device() == device_, "cuda::Event::record", "the event is on cuda:", device_,
             ", the stream on cuda:", stream.device());
  be::DeviceGuard g(device_);
  KILN_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream.native())));
}

void Event::record() { record(current_stream(device_)); }

// The event's device current for the query and synchronize, as for destroy_event.
bool Event::query() const {
  be::DeviceGuard g(device_);
  const cudaError_t st = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (st == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK(st);
  return true;
}

void Event::synchronize() const {
  be::DeviceGuard g(device_);
  KILN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}

void Event::wait(const Stream& stream) const {
  be::DeviceGuard g(stream.device());
  KILN_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.native()), static_cast<cudaEvent_t>(event_), 0));
}

void Event::wait() const { wait(current_stream(device_)); }

double Event::elapsed_ms(const Event& end) const {
  KILN_CHECK(timed_ && end.timed_, "cuda::Event::elapsed_ms", "both events must be created with enable_timing");
  KILN_CHECK(device_ == end.device_, "cuda::Event::elapsed_ms", "the events are on cuda:", device_, " and cuda:",
             end.device_);
  be::DeviceGuard g(device_);  // as the other calls: no context made on the calling thread's device
  float ms = 0;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(event_), static_cast<cudaEvent_t>(end.event_)));
  return ms;
}

void record_stream(const Tensor& t, const Stream& stream) {
  KILN_CHECK(t.defined() && t.device().is_cuda(), "record_stream", "needs a CUDA tensor, got ",
             t.defined() ? t.device().str() : "an undefined tensor");
  KILN_CHECK(stream.device() == t.device().index, "record_stream", "the tensor is on ", t.device().str(),
             ", the stream on cuda:", stream.device());
  be::allocator(t.device().index).record_stream(t.storage()->data, stream.native());
}

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

std::string runtime_version() {
  int v = 0;
  KILN_CUDA_CHECK(cudaRuntimeGetVersion(&v));
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string cublas_version() {
  const size_t v = cublasLtGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string cudnn_version() {
#ifdef KILN_HAVE_CUDNN
  const size_t v = cudnnGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
#else
  return "";  // built without cuDNN
#endif
}

}  // namespace kiln::cuda
