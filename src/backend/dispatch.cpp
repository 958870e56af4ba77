// The kernel table and the CPU fallback for ops a device has no kernel for.
#include "backend/dispatch.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <vector>

#include "core/device_runtime.h"
#include "backend/profiler_hooks.h"
#include "backend/shadow.h"
#include "core/tensor_util.h"

namespace kiln::backend {
namespace {

struct Table {
  std::array<std::array<Kernel, kNumDeviceTypes>, kNumOps> kernels{};
  std::array<std::array<Supports, kNumDeviceTypes>, kNumOps> supports{};
  std::array<std::array<bool, kNumDeviceTypes>, kNumOps> host_numbers{};
  std::array<std::atomic<uint64_t>, kNumOps> fallbacks{};
  std::array<std::array<std::atomic<bool>, 2>, kNumOps> warned{};  // per op: [no kernel, refused]
};
Table& table() {
  static Table t;
  return t;
}

const char* const kOpNames[] = {
#define KILN_OP_NAME(name) #name,
    KILN_OP_LIST(KILN_OP_NAME)
#undef KILN_OP_NAME
};

// KILN_FALLBACK: "warn" (or unset: run on the CPU with a warning per op and reason), "error"
// (forbid it), "off" (run on the CPU silently; still counted). Anything else is an error naming
// the variable, not a silent "warn".
enum class FallbackMode { Warn, Error, Off };
FallbackMode fallback_mode() {
  static const int mode = [] {
    const char* v = std::getenv("KILN_FALLBACK");
    if (!v || !*v || std::strcmp(v, "warn") == 0) return 0;
    if (std::strcmp(v, "error") == 0) return 1;
    if (std::strcmp(v, "off") == 0) return 2;
    return -1;
  }();
  KILN_CHECK(mode >= 0, "dispatch", "KILN_FALLBACK must be warn, error or off, got '", std::getenv("KILN_FALLBACK"),
             "'");
  return static_cast<FallbackMode>(mode);
}

// A fallback's output back on its device. A dense one is its storage range; one with gaps (a
// column of a matrix) goes to a dense buffer that the device's copy kernel scatters, so that
// only its own elements are written: writing back the whole range would undo what another
// thread or stream wrote to the gaps meanwhile.
void upload_output(const Tensor& mirror, const Tensor& out) {
  Kernel copy = table().kernels[static_cast<int>(Op::Copy)][static_cast<int>(out.device().type)];
  if (is_non_overlapping_and_dense(out) || !copy) return upload_mirror(mirror, out);
  const Tensor dense = mirror.contiguous();
  Tensor staged = make_empty(out.shape(), out.dtype(), out.device());
  upload_mirror(dense, staged);
  Tensor dst = out;
  run(Op::Copy, out.device(), std::initializer_list<Tensor>{staged}, std::span<Tensor>(&dst, 1), nullptr);
}

// Runs `op` on the CPU for `device`'s tensors: `refused` when the device has a kernel whose
// supports rule does not take these arguments (the message names them), else it has none.
void run_fallback(Op op, Device device, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                  const void* attrs, bool refused) {
  const char* name = op_name(op);
  auto why = [&] {
    return refused ? kiln::detail::cat("the ", device.str(), " kernel does not take these arguments (",
                                 detail::describe_operands(inputs), ")")
                   : kiln::detail::cat("no ", device.str(), " kernel");
  };
  const FallbackMode mode = fallback_mode();
  if (mode == FallbackMode::Error) KILN_FAIL(name, why(), ", and KILN_FALLBACK=error forbids running it on the CPU");
  Kernel cpu = table().kernels[static_cast<int>(op)][static_cast<int>(DeviceType::CPU)];
  KILN_CHECK(cpu != nullptr, name, "no kernel for ", device.str(), " or the CPU");
  auto& t = table();
  t.fallbacks[static_cast<int>(op)].fetch_add(1, std::memory_order_relaxed);
  if (mode == FallbackMode::Warn && !t.warned[static_cast<int>(op)][refused ? 1 : 0].exchange(true))
    std::cerr << "kiln: warning: [" << name << "] " << why()
              << "; running it on the CPU (KILN_FALLBACK=error forbids this, off silences it)\n";
  std::vector<Tensor> in;
  in.reserve(inputs.size());
  for (const Tensor& x : inputs) in.push_back(x.device().is_cpu() ? x : host_mirror(x));
  std::vector<Tensor> out;
  out.reserve(outputs.size());
  for (const Tensor& y : outputs) out.push_back(y.device().is_cpu() ? y : host_mirror(y));
  KernelArgs args{in, out, attrs, nullptr};
  cpu(args);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i].device().is_cpu()) upload_output(out[i], outputs[i]);
}

// A device kernel's run (not the CPU's): on the device's current stream, with the device current,
// shadowed when asked.
bool on_host(const Tensor& t) { return t.defined() && t.device().is_cpu(); }

// A CPU operand's elements on the device, with its strides. Such operands come from 0-d CPU
// tensors (C++ numbers, which PyTorch's rule lets join any device), perhaps reshaped or
// expanded by the op: their span is one element, whatever their shape.
Tensor to_device_mirror(const Tensor& t, Device device) {
  Tensor d = make_empty_strided(t.shape(), t.strides(), t.dtype(), device);
  const int64_t span = t.numel() == 0 ? 0 : element_span(t).second;
  copy_bytes(d.data_ptr(), device, t.data_ptr(), Device::cpu(), static_cast<size_t>(span) * element_size(t.dtype()));
  return d;
}

// Makes a device current for a kernel's launches and library calls (multi-GPU: the tensors'
// device, not the thread's current one), and restores the previous one.
class DeviceScope {
 public:
  DeviceScope(DeviceRuntime* rt, int index) : rt_(rt), prev_(rt->exchange_device(index)), index_(index) {}
  ~DeviceScope() {
    if (prev_ == index_) return;
    try {
      rt_->exchange_device(prev_);
    } catch (const std::exception&) {  // a destructor must not throw; the device's fault surfaces at its next call
    }
  }

 private:
  DeviceRuntime* rt_;
  int prev_, index_;
};

[[gnu::noinline]] void run_on_device(Op op, Device device, Kernel k, Supports supports, std::span<const Tensor> inputs,
                                     std::span<Tensor> outputs, const void* attrs) {
  // Device kernels read device memory only, unless they take numbers on the host themselves: CPU
  // operands go over first, queued on the stream like the kernel.
  if (!takes_host_numbers(op, device.type) && std::any_of(inputs.begin(), inputs.end(), on_host)) [[unlikely]] {
    std::vector<Tensor> moved(inputs.begin(), inputs.end());
    for (Tensor& t : moved)
      if (on_host(t)) t = to_device_mirror(t, device);
    return run_on_device(op, device, k, supports, moved, outputs, attrs);
  }
  DeviceRuntime* rt = find_runtime(device.type);
  DeviceScope scope(rt, device.index);
  KernelArgs args{inputs, outputs, attrs, rt->current_stream(device.index)};
  if (supports && !supports(args)) {
    run_fallback(op, device, inputs, outputs, attrs, /*refused=*/true);
    return;
  }
  if (shadow_mode() != ShadowMode::Off) [[unlikely]] {
    Kernel cpu = table().kernels[static_cast<int>(op)][static_cast<int>(DeviceType::CPU)];
    if (cpu) {
      detail::run_shadowed(op, k, cpu, args);
      return;
    }
  }
  k(args);
}

// The hot path of run(): the kernel for the device, or the fallback.
[[gnu::always_inline]] inline void run_unprofiled(Op op, Device device, std::span<const Tensor> inputs,
                                                  std::span<Tensor> outputs, const void* attrs) {
  Kernel k = table().kernels[static_cast<int>(op)][static_cast<int>(device.type)];
  if (k != nullptr) [[likely]] {
    if (device.type == DeviceType::CPU) [[likely]] {
      KernelArgs args{inputs, outputs, attrs, nullptr};
      k(args);
      return;
    }
    run_on_device(op, device, k, table().supports[static_cast<int>(op)][static_cast<int>(device.type)], inputs,
                  outputs, attrs);
    return;
  }
  run_fallback(op, device, inputs, outputs, attrs, /*refused=*/false);
}

// Kernel time of the ops this thread is running now that nested calls already charged to
// themselves, so a kernel that dispatches other ops is charged only its self time.
thread_local uint64_t t_child_nanos = 0;

// Ops on a device run asynchronously: a device kernel is timed on the device, between events
// around the outermost op this thread dispatches (the ops it dispatches itself are counted, and
// their time is the outer op's).
thread_local int t_device_depth = 0;

void run_device_timed(Op op, Device device, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                      const void* attrs, uint64_t flops) {
  DeviceRuntime* rt = find_runtime(device.type);
  void* start = t_device_depth == 0 && rt ? rt->timing_event(device.index) : nullptr;
  struct Depth {
    Depth() { ++t_device_depth; }
    ~Depth() { --t_device_depth; }
  };
  try {
    Depth d;
    run_unprofiled(op, device, inputs, outputs, attrs);
  } catch (...) {
    if (start) {  // the op is not recorded; its start event is freed (elapsed_ms destroys both)
      try {
        (void)rt->elapsed_ms(start, rt->timing_event(device.index));
      } catch (...) {
      }
    }
    throw;
  }
  if (start) profiler::detail::record_device_time(op, rt, start, rt->timing_event(device.index));
  profiler::detail::record(op, 0, flops);
}

// While a kiln::profiler::Session is alive: the call counted, its FLOPs and (when a session
// wants it) its time: wall time on the CPU and through the fallback, device time on a device.
[[gnu::noinline, gnu::cold]] void run_profiled(Op op, Device device, std::span<const Tensor> inputs,
                                    std::span<Tensor> outputs, const void* attrs) {
  const uint64_t flops = profiler::detail::op_flops(op, inputs, outputs, attrs);
  if (!profiler::detail::timing_wanted()) {
    run_unprofiled(op, device, inputs, outputs, attrs);
    profiler::detail::record(op, 0, flops);
    return;
  }
  if (!device.is_cpu() && table().kernels[static_cast<int>(op)][static_cast<int>(device.type)] != nullptr)
    return run_device_timed(op, device, inputs, outputs, attrs, flops);
  const uint64_t outer = t_child_nanos;
  t_child_nanos = 0;
  struct Restore {  // an op that throws is not recorded, and its caller's account is kept
    uint64_t outer;
    bool done = false;
    ~Restore() {
      if (!done) t_child_nanos = outer;
    }
  } restore{outer};
  // A device op through the CPU fallback: the device's queued work is waited for first, untimed
  // (its kernels have their own times; the fallback's copy to the host would wait for them).
  if (!device.is_cpu())
    if (DeviceRuntime* rt = find_runtime(device.type)) rt->synchronize(device.index);
  const auto t0 = std::chrono::steady_clock::now();
  run_unprofiled(op, device, inputs, outputs, attrs);
  const auto elapsed = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  const uint64_t self = elapsed - std::min(elapsed, t_child_nanos);
  t_child_nanos = outer + elapsed;
  restore.done = true;
  profiler::detail::record(op, self, flops);
}

}  // namespace

const char* op_name(Op op) { return kOpNames[static_cast<int>(op)]; }

void register_kernel(Op op, DeviceType device, Kernel kernel, Supports supports) {
  table().kernels[static_cast<int>(op)][static_cast<int>(device)] = kernel;
  table().supports[static_cast<int>(op)][static_cast<int>(device)] = supports;
}

void take_host_numbers(Op op, DeviceType device, bool takes) {
  table().host_numbers[static_cast<int>(op)][static_cast<int>(device)] = takes;
}
bool takes_host_numbers(Op op, DeviceType device) {
  return table().host_numbers[static_cast<int>(op)][static_cast<int>(device)];
}

bool has_kernel(Op op, DeviceType device) { return kernel_for(op, device) != nullptr; }

Kernel kernel_for(Op op, DeviceType device) { return table().kernels[static_cast<int>(op)][static_cast<int>(device)]; }
Supports supports_for(Op op, DeviceType device) { return table().supports[static_cast<int>(op)][static_cast<int>(device)]; }

void run(Op op, Device device, std::span<const Tensor> inputs, std::span<Tensor> outputs,
         const void* attrs) {
  if (profiler::detail::sessions_alive() && detail::t_shadow_helpers == 0) [[unlikely]] {
    run_profiled(op, device, inputs, outputs, attrs);
    return;
  }
  run_unprofiled(op, device, inputs, outputs, attrs);
}

}  // namespace kiln::backend

namespace kiln {
std::vector<std::string> ops_without_kernel(const std::vector<std::string>& ops, DeviceType device) {
  std::vector<std::string> missing;
  for (const std::string& name : ops) {
    int i = 0;
    while (i < backend::kNumOps && name != backend::kOpNames[i]) ++i;
    if (i == backend::kNumOps || !backend::has_kernel(static_cast<backend::Op>(i), device)) missing.push_back(name);
  }
  return missing;
}

std::map<std::string, uint64_t> fallback_counts() {
  std::map<std::string, uint64_t> counts;
  for (int i = 0; i < backend::kNumOps; ++i) {
    uint64_t n = backend::table().fallbacks[i].load();
    if (n) counts[backend::kOpNames[i]] = n;
  }
  return counts;
}
}  // namespace kiln
