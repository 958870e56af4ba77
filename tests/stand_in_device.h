// A stand-in "cuda:0" for tests on machines without a GPU: a device whose memory is host memory
// takes the CUDA slot, with no CUDA kernels (those of a CUDA build would run device code on host
// memory), so every op on it goes through the CPU fallback. Restores both when destroyed.
#pragma once

#include <array>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cpu/host_runtime.h"
#include "backend/dispatch.h"
#include "core/device_runtime.h"

namespace kiln::test {

// Counts the copies in and out of the device (a copy to the host is a wait for a real GPU).
class HostBackedRuntime final : public backend::cpu::HostRuntime {
 public:
  HostBackedRuntime() : HostRuntime("host-backed test device") {}
  void copy_to_host(void* d, const void* s, size_t n, int i) override {
    HostRuntime::copy_to_host(d, s, n, i);
    ++to_host;
    if (after_copy_to_host) after_copy_to_host();
  }
  // Runs after each copy to the host: another writer of the device memory (a thread, a stream).
  std::function<void()> after_copy_to_host;
  void copy_from_host(void* d, const void* s, size_t n, int i, bool nb) override {
    HostRuntime::copy_from_host(d, s, n, i, nb);
    ++from_host;
  }
  // fail_frees: each free throws (after freeing, so that nothing leaks), as a CUDA free does
  // after a device fault.
  void deallocate(void* p, size_t n, int i) override {
    HostRuntime::deallocate(p, n, i);
    if (fail_frees) KILN_FAIL("stand-in free", "a device fault");
  }
  bool fail_frees = false;
  // `devices` devices (1 unless a test asks for more), all the same host memory; the current one
  // per thread, as CUDA's. The devices made current by threads other than `main_thread`
  // (data-loading workers) are counted.
  int device_count() const override { return devices; }
  int devices = 1;
  int current_device() const override { return current; }
  int exchange_device(int index) override {
    if (std::this_thread::get_id() != main_thread) worker_device_sets.fetch_add(1);
    const int previous = current;
    current = index;
    return previous;
  }
  inline static thread_local int current = 0;
  std::thread::id main_thread = std::this_thread::get_id();
  std::atomic<int> worker_device_sets{0};
  // Kernels that depend on the GPU's generation see an H200's.
  int compute_capability(int) const override { return 90; }
  // What a real runtime says of a GPU its build has no code for; empty: usable.
  std::string incompatible(int) const override { return incompatible_reason; }
  std::string incompatible_reason;
  // Pinned memory: plain host memory, as all of this device's.
  void* allocate_pinned(size_t n) override { return std::malloc(n); }
  void free_pinned(void* p) override { std::free(p); }
  int copies() const { return to_host + from_host; }
  int to_host = 0, from_host = 0;
  void synchronize(int i) override {
    HostRuntime::synchronize(i);
    ++syncs;
  }
  int syncs = 0;
  // Streams: any pointer a test makes up names one (nullptr the default stream), current per
  // thread; each wait of one stream for another and each record_stream is written down.
  void* current_stream(int) override { return t_stream; }
  void* exchange_stream(int, void* stream) override { return std::exchange(t_stream, stream); }
  void wait_stream(int, void* waiter, void* producer) override {
    std::lock_guard lock(log_mutex);
    waits.emplace_back(waiter, producer);
  }
  void record_stream(const void* data, int, void* stream) override {
    std::lock_guard lock(log_mutex);
    recorded.emplace_back(data, stream);
  }
  inline static thread_local void* t_stream = nullptr;
  std::mutex log_mutex;
  std::vector<std::pair<void*, void*>> waits;            // {waiter, producer}
  std::vector<std::pair<const void*, void*>> recorded;  // {memory, stream}
};

class StandInCuda {
 public:
  enum class Kernels { None, CpuWhereCudaHasOne };
  explicit StandInCuda(Kernels kernels = Kernels::None) : saved_(find_runtime(DeviceType::CUDA)) {
    register_runtime(DeviceType::CUDA, &runtime_);
    for (int op = 0; op < backend::kNumOps; ++op) {
      const auto o = static_cast<backend::Op>(op);
      const backend::Kernel cuda = backend::kernel_for(o, DeviceType::CUDA);
      kernels_[static_cast<size_t>(op)] = {cuda, backend::supports_for(o, DeviceType::CUDA)};
      takes_numbers_[static_cast<size_t>(op)] = backend::takes_host_numbers(o, DeviceType::CUDA);
      const bool native = kernels == Kernels::CpuWhereCudaHasOne && cuda != nullptr;
      backend::register_kernel(o, DeviceType::CUDA, native ? backend::kernel_for(o, DeviceType::CPU) : nullptr,
                               native ? backend::supports_for(o, DeviceType::CUDA) : nullptr);
      backend::take_host_numbers(o, DeviceType::CUDA, native && takes_numbers_[static_cast<size_t>(op)]);
      native_ops_ += native;
    }
  }
  int native_ops() const { return native_ops_; }
  ~StandInCuda() {
    for (int op = 0; op < backend::kNumOps; ++op) {
      const auto& [kernel, supports] = kernels_[static_cast<size_t>(op)];
      backend::register_kernel(static_cast<backend::Op>(op), DeviceType::CUDA, kernel, supports);
      backend::take_host_numbers(static_cast<backend::Op>(op), DeviceType::CUDA, takes_numbers_[static_cast<size_t>(op)]);
    }
    register_runtime(DeviceType::CUDA, saved_);
  }
  StandInCuda(const StandInCuda&) = delete;
  StandInCuda& operator=(const StandInCuda&) = delete;
  HostBackedRuntime& runtime() { return runtime_; }

 private:
  DeviceRuntime* saved_;
  HostBackedRuntime runtime_;
  std::array<std::pair<backend::Kernel, backend::Supports>, backend::kNumOps> kernels_{};
  std::array<bool, backend::kNumOps> takes_numbers_{};
  int native_ops_ = 0;
};

}  // namespace kiln::test
