// What the dispatcher needs from kiln::profiler: whether to record, the FLOP count, the counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "backend/dispatch.h"
#include "core/device_runtime.h"

namespace kiln::profiler::detail {

// Live sessions, and those of them that time kernels. The dispatcher's only cost while no
// session is alive is the relaxed load of sessions_alive.
// Hidden: read PC-relative, not through the shared library's GOT, on every dispatch.
[[gnu::visibility("hidden")]] extern std::atomic<int> g_sessions;
[[gnu::visibility("hidden")]] extern std::atomic<int> g_timing_sessions;
inline bool sessions_alive() { return g_sessions.load(std::memory_order_relaxed) != 0; }
inline bool timing_wanted() { return g_timing_sessions.load(std::memory_order_relaxed) != 0; }

// Adds one call of `op` to the process-wide counters every session reads.
void record(backend::Op op, uint64_t nanos, uint64_t flops);
// A device kernel's time, between two of the runtime's timing events (DeviceRuntime::timing_event):
// added to op's time when a session next reads its stats (which waits for the device).
void record_device_time(backend::Op op, DeviceRuntime* runtime, void* start, void* end);
// Adds the device times recorded so far (waiting for their events).
void flush_device_times();

// The op's FLOPs by the convention in include/kiln/profiler.h, from its shapes and attributes.
uint64_t op_flops(backend::Op op, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                  const void* attrs);

}  // namespace kiln::profiler::detail
