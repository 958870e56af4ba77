// The device runtime registry, Storage, cross-device copies and the public memory functions.
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>

#include "core/device_runtime.h"
#include "core/parse_number.h"
#include "kiln/cuda.h"
#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln {
namespace {
std::array<DeviceRuntime*, kNumDeviceTypes>& runtimes() {
  static std::array<DeviceRuntime*, kNumDeviceTypes> r{};
  return r;
}
}  // namespace

void register_runtime(DeviceType type, DeviceRuntime* runtime) {
  runtimes()[static_cast<int>(type)] = runtime;
}

DeviceRuntime* find_runtime(DeviceType type) { return runtimes()[static_cast<int>(type)]; }

DeviceRuntime& runtime_for(Device device, const char* where) {
  DeviceRuntime* r = find_runtime(device.type);
  KILN_CHECK(r != nullptr, where, "device ", device.str(), " is not available: Kiln was built without ",
             device.is_cuda() ? "CUDA" : "this backend");
  int n = r->device_count();
  KILN_CHECK(device.index >= 0 && device.index < n, where, "device ", device.type == kCUDA ? "cuda:" : "cpu:",
             device.index, " does not exist (", n, " present)");
  return *r;
}

Device Device::with_current_index() const {
  KILN_CHECK(index == -1, "Device", "device index ", index, " is not a device (-1: the current one)");
  DeviceRuntime* r = find_runtime(type);
  return Device(type, r != nullptr && r->device_count() > 0 ? r->current_device() : 0);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes, bool non_blocking) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
  } else if (src_device.is_cpu()) {
    runtime_for(dst_device, "copy").copy_from_host(dst, src, nbytes, dst_device.index, non_blocking);
  } else if (dst_device.is_cpu()) {
    runtime_for(src_device, "copy").copy_to_host(dst, src, nbytes, src_device.index);
  } else if (dst_device == src_device) {
    runtime_for(dst_device, "copy").copy_on_device(dst, src, nbytes, dst_device.index);
  } else {
    KILN_CHECK(dst_device.type == src_device.type, "copy", "no copy from ", src_device.str(), " to ", dst_device.str());
    runtime_for(src_device, "copy");  // both indices checked
    runtime_for(dst_device, "copy").copy_between_devices(dst, dst_device.index, src, src_device.index, nbytes);
  }
}

Storage::Storage(size_t n, Device d) : nbytes(n), device(d.resolved()) {
  data = runtime_for(device, "allocate").allocate(n, device.index);
}

Storage::Storage(size_t n, Pinned) : nbytes(n), device(Device::cpu()), pinned(true) {
  DeviceRuntime* cuda = find_runtime(DeviceType::CUDA);
  KILN_CHECK(cuda && cuda->device_count() > 0, "pin_memory",
             "needs a CUDA device (pinned memory is page-locked for copies to a GPU); none is present");
  data = n ? cuda->allocate_pinned(n) : nullptr;
  KILN_CHECK(data != nullptr || n == 0, "pin_memory", "the CUDA runtime could not allocate ", n,
             " bytes of pinned memory");
}

Storage::~Storage() {
  if (!data) return;
  // A destructor must not throw (it would end the process): after a device fault, a free that
  // reports it leaves the block to the fault and says so once; the fault itself was reported
  // as an error where it was found.
  try {
    if (pinned) find_runtime(DeviceType::CUDA)->free_pinned(data);
    else find_runtime(device.type)->deallocate(data, nbytes, device.index);
  } catch (const std::exception& e) {
    static std::once_flag said;
    std::call_once(said, [&] { std::cerr << "kiln: warning: freeing memory on " << device.str() << " failed: " << e.what() << "\n"; });
  }
}

namespace {
// f(runtime, index) for device d (index-less: the current device).
template <class F>
decltype(auto) on_device(Device d, const char* where, F&& f) {
  const Device device = d.resolved();
  return f(runtime_for(device, where), device.index);
}
}  // namespace

MemoryStats memory_stats(Device d) {
  return on_device(d, "memory_stats", [](DeviceRuntime& r, int i) { return r.stats(i); });
}
void reset_peak_memory_stats(Device d) {
  on_device(d, "reset_peak_memory_stats", [](DeviceRuntime& r, int i) { r.reset_peak(i); });
}
size_t total_memory(Device d) {
  return on_device(d, "total_memory", [](DeviceRuntime& r, int i) { return r.total_memory(i); });
}

size_t parse_memory_limit(const std::string& text, size_t total, const char* where) {
  size_t used = 0;
  const std::optional<double> number = detail::parse_number_prefix<double>(text, &used);
  const double v = number.value_or(-1);
  std::string unit = text.substr(used);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double scale = 1;
  if (unit == "%") scale = static_cast<double>(total) / 100;
  else if (unit == "K" || unit == "KiB" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty()) scale = -1;
  KILN_CHECK(number && std::isfinite(v) && v >= 0 && scale > 0 && v * scale < 1.8e19, where,
             "expected a size such as 20G, 512M, 4096 or 80%, or 0 for no limit; got '", text, "'");
  KILN_CHECK(unit != "%" || v <= 100, where, "a share of the memory is at most 100%, got '", text, "'");
  const auto bytes = static_cast<size_t>(v * scale);
  // 0 means no limit: a limit that rounds to it would silently remove the one asked for.
  KILN_CHECK(bytes > 0 || v == 0, where, "'", text, "' is less than one byte (0 means no limit)");
  return bytes;
}

void set_memory_limit(Device d, size_t bytes) {
  on_device(d, "set_memory_limit", [bytes](DeviceRuntime& r, int i) { r.set_limit(i, bytes); });
}
void empty_cache(Device d) {
  on_device(d, "empty_cache", [](DeviceRuntime& r, int i) { r.empty_cache(i); });
}

namespace cuda {
int device_count() {
  DeviceRuntime* r = find_runtime(DeviceType::CUDA);
  return r ? r->device_count() : 0;
}
bool is_available() { return device_count() > 0; }
void synchronize(int device) {
  DeviceRuntime* r = find_runtime(DeviceType::CUDA);
  if (!r) return;
  // The current device by default, as torch.cuda.synchronize (all of them would make a context
  // on every GPU of the machine in every process of a multi-GPU job).
  if (device < 0) {
    if (r->device_count() == 0) return;
    device = r->current_device();
  }
  runtime_for(Device::cuda(device), "cuda::synchronize").synchronize(device);
}
// Through the runtime, so that a stand-in device (tests) answers too.
int current_device() {
  DeviceRuntime& r = runtime_for(Device::cuda(0), "cuda::current_device");
  return r.current_device();
}
void set_device(int device) { runtime_for(Device::cuda(device), "cuda::set_device").exchange_device(device); }
}  // namespace cuda

}  // namespace kiln
