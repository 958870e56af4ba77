// A stand-in "cuda:0" for tests on machines without a GPU: a device whose memory is host memory
// takes the CUDA slot, with no CUDA kernels (those of a CUDA build would run device code on host
// memory), so every op on it goes through the CPU fallback. Restores both when destroyed.
#pragma once

#include <array>
#include <utility>

#include "backend/cpu/host_runtime.h"
#include "backend/dispatch.h"
#include "core/device_runtime.h"

namespace kiln::test {

// Counts the copies in and out of the device.
class HostBackedRuntime final : public backend::cpu::HostRuntime {
 public:
  HostBackedRuntime() : HostRuntime("host-backed test device") {}
  void copy_to_host(void* d, const void* s, size_t n, int i) override { HostRuntime::copy_to_host(d, s, n, i); ++copies; }
  void copy_from_host(void* d, const void* s, size_t n, int i, bool nb) override {
    HostRuntime::copy_from_host(d, s, n, i, nb);
    ++copies;
  }
  int copies = 0;
};

class StandInCuda {
 public:
  StandInCuda() : saved_(find_runtime(DeviceType::CUDA)) {
    register_runtime(DeviceType::CUDA, &runtime_);
    for (int op = 0; op < backend::kNumOps; ++op) {
      const auto o = static_cast<backend::Op>(op);
      kernels_[static_cast<size_t>(op)] = {backend::kernel_for(o, DeviceType::CUDA), backend::supports_for(o, DeviceType::CUDA)};
      takes_numbers_[static_cast<size_t>(op)] = backend::takes_host_numbers(o, DeviceType::CUDA);
      backend::register_kernel(o, DeviceType::CUDA, nullptr);
      backend::take_host_numbers(o, DeviceType::CUDA, false);
    }
  }
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
};

}  // namespace kiln::test
