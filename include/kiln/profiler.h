// kiln::profiler: per-op-kind counts, kernel time and FLOPs of everything the kernel table runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::profiler {

struct SessionOptions {
  // Time each kernel call (two clock reads per op). Off: only counts and FLOPs are kept.
  bool timing = true;
};

// One op kind (a backend primitive: Matmul, Linear, Conv2d, Add, ...) over a session.
struct OpStat {
  std::string op;
  int64_t count = 0;     // kernel calls
  double seconds = 0;    // wall time inside the kernel calls (self time: see below); 0 without timing
  double flops = 0;      // floating-point operations by the model-FLOP convention (see below)
};

// Records every op dispatched (from any thread) while it is alive. Sessions nest: each one sees
// what ran during its own lifetime, so an outer session also sees an inner one's ops. Nothing is
// recorded while no session is alive (the dispatcher then pays one relaxed atomic load).
//
// Time: the wall time of each kernel call as the dispatcher sees it, including the CPU fallback's
// copies for a device without the kernel; a kernel that dispatches other ops is charged only its
// own (self) time. On CUDA, kernels run asynchronously: an op's time there is its time on the GPU,
// between CUDA events recorded around it on the current stream (the ops a device kernel
// dispatches itself are counted, their time is the outer op's); reading a session's stats waits
// for the GPU. The events time the stream, not the kernel alone: where the GPU waits for the
// host (a step bound by its launches), an op's time includes the wait for its own launch. Ops
// that fall back to the CPU because the device has no kernel are timed by the wall clock, copies
// included, once the device's queued work is done (untimed); a device kernel that refuses its
// arguments falls back between the device's events, which then time the copies and the host's
// work. Times are summed over the threads that ran ops (data-loader workers too), so their sum
// can exceed the wall time. Under shadow mode (KILN_SHADOW) its own copies and checks are not
// counted, but they lie inside the device ops' times.
//
// FLOPs, from the shapes and attributes at dispatch (multiply and add each count 1, as in
// PyTorch's torch.utils.flop_counter and the usual "model FLOPs"):
//   Matmul [B, M, K] @ [B, K, N]: 2 B M N K.   Linear (fused) x [M, K] @ W^T [K, N]: 2 M N K
//   (bias and activation epilogue not counted).
//   Conv2d: 2 N Cout Hout Wout (Cin / groups) kH kW; Conv2dBackwardInput and
//   Conv2dBackwardWeight: the same count each (bias gradient not counted).
//   Attention, per batch-head, q [L, E], k [S, E], v [S, Ev]: 2 L S E (q k^T) + 2 L S Ev (p v),
//   counted over the full L x S even when is_causal or a mask skips part of it (as
//   torch.utils.flop_counter does); softmax, scale and dropout not counted.
//   AttentionBackward: recomputed scores 2 L S E, then dV = P^T dO 2 L S Ev, dP = dO V^T
//   2 L S Ev, dQ = dS K 2 L S E, dK = dS^T Q 2 L S E: 2 L S (3 E + 2 Ev) in all.
//   Everything else (elementwise, reductions, normalisation, softmax, embedding, losses,
//   optimizer steps) counts 0, by the same convention: those are memory-bound and small in FLOPs.
class Session {
 public:
  explicit Session(SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Op kinds with at least one call, by time (then FLOPs, count, name), largest first.
  std::vector<OpStat> stats() const;
  double total_flops() const;
  double total_seconds() const;  // sum of the ops' kernel time
  // Forget what was recorded so far; the session keeps recording.
  void reset();

 private:
  std::vector<uint64_t> start_;  // the process-wide counters when the session (re)started
  SessionOptions options_;
};

// Whether any session is recording.
bool recording();

// A text table: op, count, total ms, mean us, share %, GFLOP, GFLOP/s, one line per stat and a
// total line. With total_wall_seconds > 0 (the caller's own clock around the same work), shares
// are of that wall time and a line shows the time outside kernels (or, when ops on several
// threads sum to more than the wall time, a note saying so); otherwise of the ops' sum.
std::string format_table(const std::vector<OpStat>& stats, double total_wall_seconds = 0);

}  // namespace kiln::profiler
