// The host-side decisions of the cuDNN convolutions (backend/cuda/conv.cpp) in plain C++, so that
// g++ tests them without cuDNN (tests/test_cudnn_host.cpp): the layout a convolution runs in,
// which operands need a dense copy, the math type, the plan-cache key, the order in which
// cuDNN's ranked algorithms are tried, and what the plan cache keeps after a run.
#pragma once

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/dispatch.h"
#include "kiln/dtype.h"

namespace kiln::backend::cuda::conv_plan {

// What a call computes: y from (x, w); dx from (dy, w); dw from (x, dy).
enum class Kind : uint8_t { Forward, BackwardData, BackwardFilter };
// The one layout all three operands of a cuDNN call have: cuDNN's fast kernels want activations
// and filter in the same format (a channels-last filter descriptor requires channels-last
// activations), so operands in another layout are copied rather than mixed.
enum class Layout : uint8_t { NCHW, NHWC };
// cudnnMathType_t's values (conv.cpp asserts that they agree).
enum class Math : uint8_t { Default = 0, TensorOp = 1, TensorOpAllowConversion = 2, Fma = 3 };

using Dims = std::array<int64_t, 4>;  // N, C, H, W (or K, C/groups, kH, kW for a filter)

inline Layout other(Layout l) { return l == Layout::NHWC ? Layout::NCHW : Layout::NHWC; }

// Dense strides of a logical NCHW shape stored as `l`.
inline Dims packed_strides(const Dims& d, Layout l) {
  if (l == Layout::NCHW) return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
  return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
}

// Whether `s` lays `d` out densely as `l`; a size-1 dim's stride says nothing (Tensor::is_contiguous).
inline bool is_packed(const Dims& d, const Dims& s, Layout l) {
  const Dims want = packed_strides(d, l);
  for (size_t i = 0; i < 4; ++i)
    if (d[i] != 1 && s[i] != want[i]) return false;
  return true;
}

// cuDNN's vectorised kernels assume 16-byte aligned operands; the legacy API's heuristics are not
// told the addresses, so a view at an odd offset is copied like a strided one.
inline constexpr uintptr_t kAlignment = 16;

// Whether an operand must go through a dense copy (or, for an output, a dense scratch tensor
// copied back) before cuDNN sees it in layout `l`.
inline bool needs_copy(const Dims& d, const Dims& s, uintptr_t address, Layout l) {
  return !is_packed(d, s, l) || address % kAlignment != 0;
}

// The layout tried first: channels-last, Kiln's activation layout (every conv output and every
// gradient reaching a conv's backward is channels-last); NCHW for float64, which cuDNN's
// channels-last kernels do not cover (PyTorch makes the same exception). The other layout is
// tried when cuDNN has no algorithm for the first.
inline Layout preferred_layout(ScalarType t) { return t == kFloat64 ? Layout::NCHW : Layout::NHWC; }

// The math type set on the descriptor before cuDNN ranks its algorithms. float32: DEFAULT lets
// cuDNN use TF32 tensor cores (torch.backends.cudnn.allow_tf32, on by default), FMA forbids it;
// float16/bfloat16: tensor cores; float64: DEFAULT (no reduced precision exists for it).
inline Math base_math(ScalarType t, bool allow_tf32) {
  switch (t) {
    case kFloat32: return allow_tf32 ? Math::Default : Math::Fma;
    case kFloat16:
    case kBFloat16: return Math::TensorOp;
    default: return Math::Default;
  }
}

// The math type an algorithm runs with: the one cuDNN reports with it, except that float32
// without TF32 stays FMA-only and float32 is never converted down to half precision.
inline Math candidate_math(ScalarType t, bool allow_tf32, Math reported) {
  if (t == kFloat32) {
    if (!allow_tf32) return Math::Fma;
    if (reported == Math::TensorOpAllowConversion) return Math::Default;
  }
  return reported;
}

// A cudnnMathType_t value as Math (an unknown value reads as DEFAULT).
inline Math math_from(int v) { return v >= 0 && v <= 3 ? static_cast<Math>(v) : Math::Default; }

// The sizes of one convolution, from its three operands.
struct Geometry {
  int64_t n = 0, c_in = 0, h = 0, w = 0;         // x
  int64_t c_out = 0, c_in_group = 0, kh = 0, kw = 0;  // w
  int64_t oh = 0, ow = 0;                        // y (N and C_out as above)
};

// Everything that decides which algorithm cuDNN gets: the kind, device, dtype, the math type it
// was ranked under, benchmark mode (a timed choice is kept apart from a heuristic one), every
// size and the attributes. The operands' own strides are not in it because they never reach
// cuDNN: each operand is described with the packed strides of the plan's layout (copied first
// when it is laid out otherwise), and the layout tried first is a function of the dtype.
inline constexpr size_t kPlanKeySize = 23;
using PlanKey = std::array<int64_t, kPlanKeySize>;

inline PlanKey plan_key(Kind kind, int device, ScalarType t, Math math, bool benchmark, bool deterministic,
                        const Geometry& g, const ConvAttrs& a) {
  return {static_cast<int64_t>(kind), device, static_cast<int64_t>(t), static_cast<int64_t>(math), benchmark ? 1 : 0,
          deterministic ? 1 : 0, g.n, g.c_in, g.h, g.w, g.c_out, g.c_in_group, g.kh, g.kw, g.oh, g.ow,
          a.stride[0], a.stride[1], a.padding[0], a.padding[1], a.dilation[0], a.dilation[1], a.groups};
}

// One entry of cuDNN's ranked list (heuristics or timed), as reported.
struct Ranked {
  int algo = 0;
  bool ok = false;             // status CUDNN_STATUS_SUCCESS
  bool deterministic = true;   // CUDNN_DETERMINISTIC
  Math math = Math::Default;
};

// An algorithm to try, with its math type and the workspace it needs.
struct Candidate {
  int algo = 0;
  Math math = Math::Default;
  size_t workspace = 0;
  bool operator==(const Candidate&) const = default;
};

// cuDNN's usable algorithms in its order, each once, with their workspace from
// workspace_of(algo, math) (nullopt: cuDNN refuses it) of at most `limit` bytes. With
// `deterministic` (kiln::cudnn::deterministic(), on by default) deterministic algorithms come first
// and the others only after all of them: an op gives the same bits on every run
// (tests/test_threads.cpp holds the GPU to it) unless no deterministic algorithm works. Without it,
// cuDNN's order alone (PyTorch's default: its heuristics' first choice, or the fastest timed).
template <class WorkspaceOf>
std::vector<Candidate> select_candidates(const std::vector<Ranked>& ranked, ScalarType t, bool allow_tf32,
                                         bool deterministic, size_t limit, WorkspaceOf&& workspace_of) {
  std::vector<Candidate> first, later;
  auto listed = [](const std::vector<Candidate>& v, int algo, Math m) {
    return std::any_of(v.begin(), v.end(), [&](const Candidate& c) { return c.algo == algo && c.math == m; });
  };
  for (const Ranked& r : ranked) {
    if (!r.ok) continue;
    const Math m = candidate_math(t, allow_tf32, r.math);
    if (listed(first, r.algo, m) || listed(later, r.algo, m)) continue;
    const std::optional<size_t> ws = workspace_of(r.algo, m);
    if (!ws || *ws > limit) continue;
    (r.deterministic || !deterministic ? first : later).push_back({r.algo, m, *ws});
  }
  first.insert(first.end(), later.begin(), later.end());
  return first;
}

// The outcome of trying a plan's candidates (or the graph API's engines) in order: the first that
// ran (-1: none), and whether one was skipped because its workspace memory was not to be had.
struct Ran {
  int index = -1;
  bool skipped_for_memory = false;
};

// Where the plan kept after a run starts (nullopt: the cache stays as it is): at the candidate
// that ran, also when one before it lacked workspace memory, as PyTorch's Conv_v7 try_all keeps
// the algorithm that ran after an out-of-memory. A skipped candidate left first would ask for its
// memory again on every call, and each failed ask synchronizes the device and empties the
// allocator's cache. A kept plan (`cached`) whose first candidate ran stays as it is.
inline std::optional<size_t> kept_from(const Ran& r, bool cached) {
  if (r.index < 0 || (cached && r.index == 0)) return std::nullopt;
  return static_cast<size_t>(r.index);
}

// What cuDNN's graph API says of an engine (its numerical notes) that decides whether Kiln runs it.
struct EngineNotes {
  bool tensor_core = false;                  // TF32 for float32 inputs
  bool down_convert = false;                 // inputs converted to a narrower type first
  bool reduced_precision_reduction = false;  // sums kept in the 16-bit type
  bool nondeterministic = false;
};

// The legacy path's rules for the graph API's engines: no type is converted down (as PyTorch's
// filter); float32 uses tensor cores (TF32) only when allowed; float16/bfloat16 multiply in their
// type but sum in float32.
inline bool engine_allowed(ScalarType t, bool allow_tf32, const EngineNotes& n) {
  if (n.down_convert) return false;
  if (t == kFloat32) return allow_tf32 || !n.tensor_core;
  return !n.reduced_precision_reduction;
}

// The order to try the heuristics' engine configs in (their indices): the allowed ones, with
// `deterministic` the deterministic first, each group in cuDNN's order (as select_candidates does
// for algorithms).
inline std::vector<size_t> engine_order(ScalarType t, bool allow_tf32, bool deterministic,
                                        const std::vector<EngineNotes>& notes) {
  std::vector<size_t> first, later;
  for (size_t i = 0; i < notes.size(); ++i)
    if (engine_allowed(t, allow_tf32, notes[i]))
      (notes[i].nondeterministic && deterministic ? later : first).push_back(i);
  first.insert(first.end(), later.begin(), later.end());
  return first;
}

// cuDNN's legacy API takes sizes, strides and attributes as int: larger problems run on the CPU.
inline bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }
inline bool attrs_fit(const ConvAttrs& a) {
  for (int i = 0; i < 2; ++i)
    if (!fits_int(a.stride[i]) || !fits_int(a.padding[i]) || !fits_int(a.dilation[i])) return false;
  return fits_int(a.groups);
}

}  // namespace kiln::backend::cuda::conv_plan
