// kiln::profiler: the process-wide op counters, sessions over them, FLOP counts, the text table,
// and KILN_PROFILE=1 (a session for the whole process, its table on stderr at exit).
#include "kiln/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>
#include <sstream>

#include "backend/profiler_hooks.h"

namespace kiln::profiler {
namespace detail {

constinit std::atomic<int> g_sessions{0};
constinit std::atomic<int> g_timing_sessions{0};

namespace {

using backend::kNumOps;
using backend::Op;

// Counts since start-up, only while a session lives; sessions keep a snapshot and subtract.
// Integers (nanoseconds, FLOPs) so the subtraction is exact; unsigned, so a wrap-around still
// gives the right difference. Relaxed atomics: ops may come from data-loader threads, and a
// session reads them after the work it measures has been joined.
struct Counters {
  std::atomic<uint64_t> count[kNumOps]{}, nanos[kNumOps]{}, flops[kNumOps]{};
};
constinit Counters g_counters;

std::vector<uint64_t> snapshot() {
  std::vector<uint64_t> s(3 * kNumOps);
  for (int i = 0; i < kNumOps; ++i) {
    s[i] = g_counters.count[i].load(std::memory_order_relaxed);
    s[kNumOps + i] = g_counters.nanos[i].load(std::memory_order_relaxed);
    s[2 * kNumOps + i] = g_counters.flops[i].load(std::memory_order_relaxed);
  }
  return s;
}

uint64_t u(int64_t v) { return v > 0 ? static_cast<uint64_t>(v) : 0; }

}  // namespace

void record(Op op, uint64_t nanos, uint64_t flops) {
  const int i = static_cast<int>(op);
  g_counters.count[i].fetch_add(1, std::memory_order_relaxed);
  if (nanos) g_counters.nanos[i].fetch_add(nanos, std::memory_order_relaxed);
  if (flops) g_counters.flops[i].fetch_add(flops, std::memory_order_relaxed);
}

namespace {
struct DeviceTime {
  Op op;
  DeviceRuntime* runtime;
  void* start;
  void* end;
};
std::mutex g_device_mutex;
std::vector<DeviceTime> g_device_times;  // recorded, not yet added
constexpr size_t kMaxPendingDeviceTimes = 8192;

void flush_locked() {
  // Taken out first: elapsed_ms destroys each pair even when it throws, so none is seen twice.
  std::vector<DeviceTime> times;
  times.swap(g_device_times);
  for (const DeviceTime& t : times) {
    const double ms = t.runtime->elapsed_ms(t.start, t.end);
    g_counters.nanos[static_cast<int>(t.op)].fetch_add(static_cast<uint64_t>(ms * 1e6), std::memory_order_relaxed);
  }
}
}  // namespace

void process_profile_on_device();  // below

void record_device_time(Op op, DeviceRuntime* runtime, void* start, void* end) {
  static std::once_flag first;
  std::call_once(first, process_profile_on_device);
  std::lock_guard<std::mutex> lock(g_device_mutex);
  g_device_times.push_back({op, runtime, start, end});
  if (g_device_times.size() >= kMaxPendingDeviceTimes) flush_locked();  // bounded: a long session waits now and then
}

void flush_device_times() {
  std::lock_guard<std::mutex> lock(g_device_mutex);
  flush_locked();
}

uint64_t op_flops(Op op, std::span<const Tensor> in, std::span<const Tensor> out, const void* attrs) {
  switch (op) {
    case Op::Matmul:  // {a [B, M, K], b [B', K, N]} -> {out [B, M, N]}
    case Op::Linear:  // {x [1, M, K], w^T [1, K, N], bias?} -> {y [1, M, N]}
      if (in.size() < 2 || out.empty() || in[0].dim() < 1) return 0;
      return 2 * u(out[0].numel()) * u(in[0].size(-1));
    // Each: 2 x (elements of y) x (Cin / groups) kH kW, with w [Cout, Cin / groups, kH, kW].
    case Op::Conv2d:  // {x, w, bias?} -> {y}
      if (in.size() < 2 || out.empty() || in[1].dim() != 4) return 0;
      return 2 * u(out[0].numel()) * u(in[1].size(1) * in[1].size(2) * in[1].size(3));
    case Op::Conv2dBackwardInput:  // {grad_y, w} -> {grad_x}
      if (in.size() < 2 || in[1].dim() != 4) return 0;
      return 2 * u(in[0].numel()) * u(in[1].size(1) * in[1].size(2) * in[1].size(3));
    case Op::Conv2dBackwardWeight:  // {grad_y, x} -> {grad_w [Cout, Cin/g, kH, kW][, grad_bias]}
      if (in.empty() || out.empty() || out[0].dim() != 4) return 0;
      return 2 * u(in[0].numel()) * u(out[0].size(1) * out[0].size(2) * out[0].size(3));
    case Op::Attention:          // {q [B, L, E], k [B, S, E], v [B, S, Ev], mask?} -> {out, lse}
    case Op::AttentionBackward: {  // {q, k, v, ...} -> {grad_q, grad_k, grad_v}
      if (in.size() < 3 || in[0].dim() < 2 || in[1].dim() < 2 || in[2].dim() < 2) return 0;
      const uint64_t L = u(in[0].size(-2)), E = u(in[0].size(-1)), S = u(in[1].size(-2)),
                     Ev = u(in[2].size(-1));
      if (L == 0 || E == 0) return 0;
      const uint64_t heads = u(in[0].numel()) / (L * E);  // q carries the (expanded) batch dims
      const uint64_t per = op == Op::Attention ? 2 * L * S * (E + Ev) : 2 * L * S * (3 * E + 2 * Ev);
      return heads * per;
    }
    default:
      (void)attrs;
      return 0;
  }
}

}  // namespace detail

using detail::g_counters;
using detail::g_sessions;
using detail::g_timing_sessions;

// Device times still pending belong to earlier sessions: added before this one's start.
Session::Session(SessionOptions options)
    : start_((detail::flush_device_times(), detail::snapshot())), options_(options) {
  if (options_.timing) g_timing_sessions.fetch_add(1, std::memory_order_relaxed);
  g_sessions.fetch_add(1, std::memory_order_relaxed);
}

Session::~Session() {
  g_sessions.fetch_sub(1, std::memory_order_relaxed);
  if (options_.timing) g_timing_sessions.fetch_sub(1, std::memory_order_relaxed);
}

void Session::reset() {
  detail::flush_device_times();
  start_ = detail::snapshot();
}

std::vector<OpStat> Session::stats() const {
  using backend::kNumOps;
  detail::flush_device_times();
  const std::vector<uint64_t> now = detail::snapshot();
  std::vector<OpStat> out;
  for (int i = 0; i < kNumOps; ++i) {
    const uint64_t count = now[i] - start_[i];
    if (count == 0) continue;
    OpStat s;
    s.op = backend::op_name(static_cast<backend::Op>(i));
    s.count = static_cast<int64_t>(count);
    s.seconds = options_.timing ? static_cast<double>(now[kNumOps + i] - start_[kNumOps + i]) * 1e-9 : 0.0;
    s.flops = static_cast<double>(now[2 * kNumOps + i] - start_[2 * kNumOps + i]);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const OpStat& a, const OpStat& b) {
    if (a.seconds != b.seconds) return a.seconds > b.seconds;
    if (a.flops != b.flops) return a.flops > b.flops;
    if (a.count != b.count) return a.count > b.count;
    return a.op < b.op;
  });
  return out;
}

double Session::total_flops() const {
  double total = 0;
  for (const OpStat& s : stats()) total += s.flops;
  return total;
}

double Session::total_seconds() const {
  double total = 0;
  for (const OpStat& s : stats()) total += s.seconds;
  return total;
}

bool recording() { return detail::sessions_alive(); }

std::string format_table(const std::vector<OpStat>& stats, double total_wall_seconds) {
  double kernel_s = 0, flops = 0;
  int64_t calls = 0;
  int width = 15;  // "total (kernels)"
  for (const OpStat& s : stats) {
    kernel_s += s.seconds, flops += s.flops, calls += s.count;
    width = std::max(width, static_cast<int>(s.op.size()));
  }
  const double base = total_wall_seconds > 0 ? total_wall_seconds : kernel_s;
  std::ostringstream os;
  char buf[320];
  // count < 0: a summary line without count and mean.
  auto line = [&](const std::string& name, int64_t count, double sec, double fl) {
    char cnt[32] = "", mean[32] = "", share[32] = "-", rate[32] = "-";
    if (count >= 0) std::snprintf(cnt, sizeof cnt, "%lld", static_cast<long long>(count));
    if (count > 0) std::snprintf(mean, sizeof mean, "%.1f", sec / static_cast<double>(count) * 1e6);
    if (base > 0) std::snprintf(share, sizeof share, "%.1f", 100.0 * sec / base);
    if (fl > 0 && sec > 0) std::snprintf(rate, sizeof rate, "%.1f", fl / sec * 1e-9);
    std::snprintf(buf, sizeof buf, "%-*s %9s %11.3f %10s %7s %11.3f %9s\n", width, name.c_str(), cnt, sec * 1e3,
                  mean, share, fl * 1e-9, rate);
    os << buf;
  };
  std::snprintf(buf, sizeof buf, "%-*s %9s %11s %10s %7s %11s %9s\n", width, "op", "count", "total ms",
                "mean us", "share %", "GFLOP", "GFLOP/s");
  os << buf;
  for (const OpStat& s : stats) line(s.op, s.count, s.seconds, s.flops);
  line("total (kernels)", calls, kernel_s, flops);
  if (total_wall_seconds > 0) {
    if (kernel_s <= total_wall_seconds) line("outside kernels", -1, total_wall_seconds - kernel_s, 0);
    line("wall", -1, total_wall_seconds, flops);
    if (kernel_s > total_wall_seconds)
      os << "(the kernels' times are summed over the threads that ran them, and their sum exceeds the wall time)\n";
  }
  return os.str();
}

// ---- KILN_PROFILE=1: one session for the whole process, its table on stderr at exit.
namespace {

struct ProcessProfile {
  Session* session = nullptr;  // never deleted: it must outlive every static destructor's ops
  std::chrono::steady_clock::time_point start;
  std::atomic<bool> printed{false};
};
ProcessProfile g_process;

void print_process_profile() {
  if (!g_process.session || g_process.printed.exchange(true)) return;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - g_process.start).count();
  // stdio, not iostreams: it is usable in any atexit handler. Nothing may escape one: an
  // exception there (a GPU's event times unreadable) would abort the process at its very end.
  try {
    const std::string table = format_table(g_process.session->stats(), wall);
    std::fprintf(stderr, "kiln: per-op profile (KILN_PROFILE=1), %.3f s wall:\n%s", wall, table.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: KILN_PROFILE=1: no profile: %s\n", e.what());
  }
  std::fflush(stderr);
}

bool start_process_profile() {
  const char* v = std::getenv("KILN_PROFILE");
  if (!v || !*v || !std::strcmp(v, "0") || !std::strcmp(v, "off") || !std::strcmp(v, "false")) return false;
  if (std::strcmp(v, "1") && std::strcmp(v, "on") && std::strcmp(v, "true")) {
    std::fprintf(stderr, "kiln: warning: KILN_PROFILE must be 1 (or on) or 0 (or off), got '%s'; no profile\n", v);
    return false;
  }
  g_process.start = std::chrono::steady_clock::now();
  g_process.session = new Session(SessionOptions{.timing = true});
  std::atexit(print_process_profile);
  return true;
}
[[maybe_unused]] const bool g_process_profile_started = start_process_profile();

}  // namespace

namespace detail {
// The first device op timed: the GPU runtime is up by now, and its own exit handler (which
// unloads it) was registered before this one, so this one runs first and can still read the
// device's event times. The one registered at start-up then finds the table printed.
void process_profile_on_device() {
  if (g_process.session) std::atexit(print_process_profile);
}
}  // namespace detail
}  // namespace kiln::profiler
