// The device runtime registry, Storage, cross-device copies and the public memory functions.
#include <array>
#include <cmath>
#include <cstdio>
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

std::string format_bytes(size_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%zu bytes", n);
    return buf;
  }
  // The precision of the value as printed: 9.999 GiB is "10.0 GiB", and 1023.8 MiB is "1.00 GiB".
  int decimals = v < 9.995 ? 2 : v < 99.95 ? 1 : 0;
  if (decimals == 0 && v >= 1023.5 && u < 5) v /= 1024, ++u, decimals = 2;
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, v, units[u]);
  return buf;
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

DeviceGuard::DeviceGuard(int device) {
  if (device < 0) return;  // the current device: nothing changes
  prev_ = runtime_for(Device::cuda(device), "cuda::DeviceGuard").exchange_device(device);
  changed_ = prev_ != device;
}
DeviceGuard::~DeviceGuard() {
  if (!changed_) return;
  try {
    find_runtime(DeviceType::CUDA)->exchange_device(prev_);
  } catch (const std::exception&) {  // a destructor does not throw; the device stays as it is
  }
}

// The memory functions through the runtime too: kiln::memory_stats(Device::cuda(device)) and so on.
MemoryStats memory_stats(int device) { return kiln::memory_stats(Device::cuda(device)); }
void reset_peak_memory_stats(int device) { kiln::reset_peak_memory_stats(Device::cuda(device)); }
void empty_cache(int device) { kiln::empty_cache(Device::cuda(device)); }
size_t memory_allocated(int device) { return memory_stats(device).allocated; }
size_t max_memory_allocated(int device) { return memory_stats(device).peak; }
size_t memory_reserved(int device) { return memory_stats(device).reserved; }
size_t max_memory_reserved(int device) { return memory_stats(device).peak_reserved; }

void set_memory_fraction(double fraction, int device) {
  KILN_CHECK(fraction > 0 && fraction <= 1, "cuda::set_memory_fraction", "the fraction must be in (0, 1], got ",
             fraction);
  const Device d = Device::cuda(device).resolved();
  // At least a byte: 0 would mean no limit at all (torch refuses every allocation there).
  set_memory_limit(d, std::max<size_t>(1, static_cast<size_t>(fraction * static_cast<double>(total_memory(d)))));
}

std::pair<size_t, size_t> mem_get_info(int device) {
  return on_device(Device::cuda(device), "cuda::mem_get_info",
                   [](DeviceRuntime& r, int i) { return std::make_pair(r.free_memory(i), r.total_memory(i)); });
}

std::string memory_summary(int device) {
  const Device d = Device::cuda(device).resolved();
  const MemoryStats m = memory_stats(d.index);
  const auto [free, total] = mem_get_info(d.index);
  auto row = [](const char* what, const std::string& value, const std::string& more) {
    std::string line = std::string("  ") + what;
    line.resize(24, ' ');
    line += value;
    if (!more.empty()) {
      line.resize(38, ' ');
      line += more;
    }
    return line + "\n";
  };
  return detail::cat(d.str(), " memory (", m.caching ? "the caching allocator" : "no cache: KILN_ALLOCATOR=system", ")\n",
                     row("allocated", format_bytes(m.allocated), "peak " + format_bytes(m.peak)),
                     row("reserved", format_bytes(m.reserved), "peak " + format_bytes(m.peak_reserved)),
                     row("limit", m.limit ? format_bytes(m.limit) : "none", ""),
                     row("device", format_bytes(free) + " free", "of " + format_bytes(total) + " (every process)"),
                     row("driver allocations", std::to_string(m.os_allocations), ""),
                     row("cache freed for room", std::to_string(m.allocation_retries), ""),
                     row("out-of-memory errors", std::to_string(m.out_of_memory), ""));
}
}  // namespace cuda

}  // namespace kiln
