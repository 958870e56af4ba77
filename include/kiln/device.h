// kiln::Device: where a tensor lives (the CPU or CUDA device i).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace kiln {

enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
inline constexpr DeviceType kCPU = DeviceType::CPU;
inline constexpr DeviceType kCUDA = DeviceType::CUDA;
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  // A CUDA device named without an index ("cuda", kCUDA, Device::cuda()) has index -1: the
  // current device (cuda::set_device), as in libtorch, fixed where a tensor is made or moved
  // (resolved()). A tensor's device always has its index: x.device() == Device("cuda") is false,
  // as torch's x.device == torch.device("cuda").
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = -1) : type(t), index(t == DeviceType::CPU ? 0 : i) {}
  // Parses "cpu", "cuda" (the current device), "cuda:1".
  explicit Device(const std::string& spec);

  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  static constexpr Device cuda(int i = -1) { return Device(DeviceType::CUDA, i); }
  constexpr bool has_index() const { return index >= 0; }
  // This device with its index: an index-less CUDA device is the current one (cuda:0 where no
  // CUDA device is present, so that the error names it).
  Device resolved() const { return has_index() ? *this : with_current_index(); }
  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  friend constexpr bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }

 private:
  Device with_current_index() const;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace kiln
