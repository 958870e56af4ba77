// CUDA conv2d, its input gradient and its weight gradient through cuDNN's convolution API (or,
// with KILN_CUDNN_API=graph, its graph API first: conv_graph.h): the
// operands of a call dense in one layout (channels-last; NCHW for float64), the algorithm from
// cuDNN's heuristics (or timed, with kiln::cudnn::set_benchmark) chosen once per geometry, the
// bias added by our elementwise kernel and its gradient summed by our reduction kernel.
#if defined(KILN_HAVE_CUDNN)
#include <algorithm>
#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/conv_graph.h"
#include "backend/cuda/conv_plan.h"
#include "backend/cuda/cudnn.h"
#include "backend/cuda/epilogue.h"
#include "backend/cuda/state.h"
#include "backend/dispatch.h"
#include "core/device_runtime.h"
#include "core/tensor_util.h"
#include "kiln/cudnn.h"

namespace kiln::backend::cuda {
namespace {

namespace cp = conv_plan;
using cp::Kind;
using cp::Layout;
using cp::Math;

static_assert(static_cast<int>(Math::Default) == CUDNN_DEFAULT_MATH &&
              static_cast<int>(Math::TensorOp) == CUDNN_TENSOR_OP_MATH &&
              static_cast<int>(Math::TensorOpAllowConversion) == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
              static_cast<int>(Math::Fma) == CUDNN_FMA_MATH);

// The most workspace one algorithm may ask for; the ones asking more are not tried.
constexpr size_t kWorkspaceLimit = size_t{1} << 30;

// The last refusal of this thread's convolution (cuDNN's message read when it happened), for
// the error when every layout and algorithm is refused.
thread_local std::string t_last_refusal;

// A refusal while describing, ranking or running means "not in this layout" or "not this
// algorithm": the caller tries the next (a real mistake of ours is refused by every candidate and
// still ends in the error naming the last refusal). Any other failure is an error naming the call.
bool usable(cudnnStatus_t st, const char* call) {
  if (cudnn_accepts(st, call)) return true;
  t_last_refusal = cudnn_message(call, st);
  return false;
}
#define KILN_CUDNN_USABLE(expr) usable((expr), #expr)

cudnnDataType_t data_type(ScalarType t) {
  switch (t) {
    case kFloat64: return CUDNN_DATA_DOUBLE;
    case kFloat16: return CUDNN_DATA_HALF;
    case kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

cp::Dims dims_of(const Tensor& t) { return {t.size(0), t.size(1), t.size(2), t.size(3)}; }
cp::Dims strides_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }
// Sizes, strides and attributes fit in int (supports() checked).
int to_int(int64_t v) { return static_cast<int>(v); }

// One call: x [N, C_in, H, W], w [C_out, C_in / groups, kH, kW], y [N, C_out, OH, OW]; the kind
// says which of them is written (y, x or w: the result, the input gradient, the weight gradient).
struct Conv {
  Kind kind;
  Tensor x, w, y;
  const ConvAttrs* attrs;
  const Tensor& out() const { return kind == Kind::Forward ? y : kind == Kind::BackwardData ? x : w; }
};

cp::Geometry geometry(const Conv& c) {
  return {c.x.size(0), c.x.size(1), c.x.size(2), c.x.size(3), c.w.size(0), c.w.size(1),
          c.w.size(2), c.w.size(3), c.y.size(2), c.y.size(3)};
}

// "forward of float32 input [2, 4, 9, 9] (strides [...]), weight ..., stride [1, 1], ...", for errors.
std::string describe(const Conv& c) {
  static constexpr const char* kNames[] = {"forward", "input gradient", "weight gradient"};
  const ConvAttrs& a = *c.attrs;
  std::ostringstream os;
  os << kNames[static_cast<int>(c.kind)] << " of " << c.x.dtype() << " input " << c.x.shape() << " (strides "
     << c.x.strides() << "), weight " << c.w.shape() << " (strides " << c.w.strides() << "), output "
     << c.y.shape() << " (strides " << c.y.strides() << "), stride [" << a.stride[0] << ", " << a.stride[1]
     << "], padding [" << a.padding[0] << ", " << a.padding[1] << "], dilation [" << a.dilation[0] << ", "
     << a.dilation[1] << "], groups " << a.groups;
  return os.str();
}

void copy_into(const Tensor& from, const Tensor& to) {
  Tensor dst = to;
  ::kiln::backend::run(Op::Copy, to.device(), std::span<const Tensor>(&from, 1), std::span<Tensor>(&dst, 1));
}

// `t` as cuDNN may read or write it in layout `l`: itself when dense so and aligned, otherwise a
// dense copy of it (written: a dense scratch tensor, copied into `t` after the call).
Tensor dense_operand(const Tensor& t, Layout l, bool written) {
  const cp::Dims d = dims_of(t);
  if (!cp::needs_copy(d, strides_of(t), reinterpret_cast<uintptr_t>(t.data_ptr()), l)) return t;
  const cp::Dims s = cp::packed_strides(d, l);
  Tensor dense = make_empty_strided(Shape(d.begin(), d.end()), Shape(s.begin(), s.end()), t.dtype(), t.device());
  if (!written) copy_into(t, dense);
  return dense;
}

// The tensors cuDNN sees: the call's own, or dense copies of them.
struct Operands {
  Tensor x, w, y;
};

Operands prepare(const Conv& c, Layout l) {
  return {dense_operand(c.x, l, c.kind == Kind::BackwardData), dense_operand(c.w, l, c.kind == Kind::BackwardFilter),
          dense_operand(c.y, l, c.kind == Kind::Forward)};
}

// Copies a scratch result into the call's output.
void finish(const Conv& c, const Operands& o) {
  const Tensor& written = c.kind == Kind::Forward ? o.y : c.kind == Kind::BackwardData ? o.x : o.w;
  if (!written.is_same(c.out())) copy_into(written, c.out());
}

struct Descriptors {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
};

bool set_tensor(const TensorDescriptor& d, const cp::Dims& dims, Layout l, cudnnDataType_t dt) {
  const cp::Dims s = cp::packed_strides(dims, l);
  const int di[4] = {to_int(dims[0]), to_int(dims[1]), to_int(dims[2]), to_int(dims[3])};
  const int si[4] = {to_int(s[0]), to_int(s[1]), to_int(s[2]), to_int(s[3])};
  return KILN_CUDNN_USABLE(cudnnSetTensorNdDescriptor(d.get(), dt, 4, di, si));
}

// Describes the call in layout `l` with math type `math`; false when cuDNN refuses the layout.
bool set_descriptors(const Descriptors& d, const Conv& c, Layout l, Math math) {
  const ScalarType t = c.x.dtype();
  const cudnnDataType_t dt = data_type(t);
  // float16/bfloat16 multiply in their own type and accumulate in float32 (PSEUDO_HALF_CONFIG).
  const cudnnDataType_t compute = t == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const ConvAttrs& a = *c.attrs;
  const int pad[2] = {to_int(a.padding[0]), to_int(a.padding[1])};
  const int stride[2] = {to_int(a.stride[0]), to_int(a.stride[1])};
  const int dilation[2] = {to_int(a.dilation[0]), to_int(a.dilation[1])};
  const cp::Dims wd = dims_of(c.w);
  const int wdims[4] = {to_int(wd[0]), to_int(wd[1]), to_int(wd[2]), to_int(wd[3])};
  const cudnnTensorFormat_t format = l == Layout::NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  return set_tensor(d.x, dims_of(c.x), l, dt) && set_tensor(d.y, dims_of(c.y), l, dt) &&
         KILN_CUDNN_USABLE(cudnnSetFilterNdDescriptor(d.w.get(), dt, format, 4, wdims)) &&
         KILN_CUDNN_USABLE(
             cudnnSetConvolutionNdDescriptor(d.conv.get(), 2, pad, stride, dilation, CUDNN_CROSS_CORRELATION, compute)) &&
         KILN_CUDNN_USABLE(cudnnSetConvolutionGroupCount(d.conv.get(), to_int(a.groups))) &&
         KILN_CUDNN_USABLE(cudnnSetConvolutionMathType(d.conv.get(), static_cast<cudnnMathType_t>(math)));
}

template <class Perf>
std::vector<cp::Ranked> ranked_of(const std::vector<Perf>& p, int n) {
  std::vector<cp::Ranked> r;
  for (size_t i = 0; i < p.size() && i < static_cast<size_t>(std::max(n, 0)); ++i)
    r.push_back({static_cast<int>(p[i].algo), p[i].status == CUDNN_STATUS_SUCCESS,
                 p[i].determinism == CUDNN_DETERMINISTIC, cp::math_from(static_cast<int>(p[i].mathType))});
  return r;
}

// cuDNN's heuristic ranking (nothing runs); empty when it takes nothing in this layout.
std::vector<cp::Ranked> heuristics(cudnnHandle_t h, Kind k, const Descriptors& d) {
  int max = 0, got = 0;
  switch (k) {
    case Kind::Forward: {
      KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> p(static_cast<size_t>(std::max(max, 1)));
      if (!KILN_CUDNN_USABLE(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                                    static_cast<int>(p.size()), &got, p.data())))
        return {};
      return ranked_of(p, got);
    }
    case Kind::BackwardData: {
      KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> p(static_cast<size_t>(std::max(max, 1)));
      if (!KILN_CUDNN_USABLE(cudnnGetConvolutionBackwardDataAlgorithm_v7(
              h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), static_cast<int>(p.size()), &got, p.data())))
        return {};
      return ranked_of(p, got);
    }
    case Kind::BackwardFilter: {
      KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> p(static_cast<size_t>(std::max(max, 1)));
      if (!KILN_CUDNN_USABLE(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
              h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), static_cast<int>(p.size()), &got, p.data())))
        return {};
      return ranked_of(p, got);
    }
  }
  return {};
}

// The workspace `algo` needs with math type `m`, or nullopt when cuDNN refuses the pair.
std::optional<size_t> workspace_size(cudnnHandle_t h, Kind k, const Descriptors& d, int algo, Math m) {
  if (cudnnSetConvolutionMathType(d.conv.get(), static_cast<cudnnMathType_t>(m)) != CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  size_t bytes = 0;
  cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
  switch (k) {
    case Kind::Forward:
      st = cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes);
      break;
    case Kind::BackwardData:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes);
      break;
    case Kind::BackwardFilter:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes);
      break;
  }
  if (st != CUDNN_STATUS_SUCCESS) return std::nullopt;
  return bytes;
}

// Scratch memory from the device's stream-ordered allocator: freeing it when the kernel function
// returns is safe, as the next user of the block is ordered after this stream's work.
Tensor workspace(size_t bytes, Device dev) { return make_empty(Shape{static_cast<int64_t>(bytes)}, kUInt8, dev); }

// cuDNN's ranking by timing every algorithm on the call's operands (benchmark mode), with a
// workspace as large as the hungriest algorithm within the limit wants (none if that much memory
// is not to be had: then only the algorithms that need none are timed).
std::vector<cp::Ranked> timed(cudnnHandle_t h, Kind k, const Descriptors& d, const Operands& o, Math base) {
  const int count = k == Kind::Forward        ? static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
                    : k == Kind::BackwardData ? static_cast<int>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)
                                              : static_cast<int>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  size_t bytes = 0;
  for (int algo = 0; algo < count; ++algo)
    if (const std::optional<size_t> ws = workspace_size(h, k, d, algo, base); ws && *ws <= kWorkspaceLimit)
      bytes = std::max(bytes, *ws);
  KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), static_cast<cudnnMathType_t>(base)));
  Tensor ws;
  if (bytes > 0) {
    try {
      ws = workspace(bytes, o.x.device());
    } catch (const OutOfMemoryError&) {
      bytes = 0;
    }
  }
  void* wp = bytes > 0 ? ws.data_ptr() : nullptr;
  int max = 0, got = 0;
  switch (k) {
    case Kind::Forward: {
      KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> p(static_cast<size_t>(std::max(max, 1)));
      if (!KILN_CUDNN_USABLE(cudnnFindConvolutionForwardAlgorithmEx(
              h, d.x.get(), o.x.data_ptr(), d.w.get(), o.w.data_ptr(), d.conv.get(), d.y.get(), o.y.data_ptr(),
              static_cast<int>(p.size()), &got, p.data(), wp, bytes)))
        return {};
      return ranked_of(p, got);
    }
    case Kind::BackwardData: {
      KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> p(static_cast<size_t>(std::max(max, 1)));
      if (!KILN_CUDNN_USABLE(cudnnFindConvolutionBackwardDataAlgorithmEx(
              h, d.w.get(), o.w.data_ptr(), d.y.get(), o.y.data_ptr(), d.conv.get(), d.x.get(), o.x.data_ptr(),
              static_cast<int>(p.size()), &got, p.data(), wp, bytes)))
        return {};
      return ranked_of(p, got);
    }
    case Kind::BackwardFilter: {
      KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> p(static_cast<size_t>(std::max(max, 1)));
      if (!KILN_CUDNN_USABLE(cudnnFindConvolutionBackwardFilterAlgorithmEx(
              h, d.x.get(), o.x.data_ptr(), d.y.get(), o.y.data_ptr(), d.conv.get(), d.w.get(), o.w.data_ptr(),
              static_cast<int>(p.size()), &got, p.data(), wp, bytes)))
        return {};
      return ranked_of(p, got);
    }
  }
  return {};
}

const char* call_name(Kind k) {
  switch (k) {
    case Kind::Forward: return "cudnnConvolutionForward";
    case Kind::BackwardData: return "cudnnConvolutionBackwardData";
    case Kind::BackwardFilter: return "cudnnConvolutionBackwardFilter";
  }
  return "cudnnConvolution";
}

cudnnStatus_t execute(cudnnHandle_t h, Kind k, const Descriptors& d, const Operands& o, int algo, void* ws,
                      size_t bytes) {
  const bool f64 = o.x.dtype() == kFloat64;
  const float one = 1.0f, zero = 0.0f;
  const double one64 = 1.0, zero64 = 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&one64) : &one;
  const void* beta = f64 ? static_cast<const void*>(&zero64) : &zero;
  switch (k) {
    case Kind::Forward:
      return cudnnConvolutionForward(h, alpha, d.x.get(), o.x.data_ptr(), d.w.get(), o.w.data_ptr(), d.conv.get(),
                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, beta, d.y.get(),
                                     o.y.data_ptr());
    case Kind::BackwardData:
      return cudnnConvolutionBackwardData(h, alpha, d.w.get(), o.w.data_ptr(), d.y.get(), o.y.data_ptr(), d.conv.get(),
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes, beta, d.x.get(),
                                          o.x.data_ptr());
    case Kind::BackwardFilter:
      return cudnnConvolutionBackwardFilter(h, alpha, d.x.get(), o.x.data_ptr(), d.y.get(), o.y.data_ptr(),
                                            d.conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes,
                                            beta, d.w.get(), o.w.data_ptr());
  }
  return CUDNN_STATUS_BAD_PARAM;
}

// Runs the candidates in order until cuDNN carries one out (conv_plan::Ran says which, and whether
// one was skipped for want of workspace memory). The allocator's error is kept in `oom`.
cp::Ran run_candidates(cudnnHandle_t h, Kind k, const Descriptors& d, const Operands& o,
                       const std::vector<cp::Candidate>& candidates, std::exception_ptr& oom) {
  cp::Ran r;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const cp::Candidate& c = candidates[i];
    Tensor ws;
    if (c.workspace > 0) {
      try {
        ws = workspace(c.workspace, o.x.device());
      } catch (const OutOfMemoryError&) {
        oom = std::current_exception();
        r.skipped_for_memory = true;
        continue;
      }
    }
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), static_cast<cudnnMathType_t>(c.math)));
    const cudnnStatus_t st = execute(h, k, d, o, c.algo, ws.defined() ? ws.data_ptr() : nullptr, c.workspace);
    if (usable(st, call_name(k))) {
      r.index = static_cast<int>(i);
      return r;
    }
  }
  return r;
}

// The layout and the algorithms to try, in order, per geometry (conv_plan.h's key). Bounded: a
// workload whose shapes never repeat starts the cache afresh now and then.
struct Plan {
  Layout layout = Layout::NHWC;
  std::vector<cp::Candidate> candidates;
};
// Never destroyed: a convolution from a thread still running at exit finds them.
std::mutex& g_plan_mutex = *new std::mutex;
std::map<cp::PlanKey, std::shared_ptr<const Plan>>& g_plans = *new std::map<cp::PlanKey, std::shared_ptr<const Plan>>;
constexpr size_t kMaxPlans = 4096;

std::shared_ptr<const Plan> cached_plan(const cp::PlanKey& key) {
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  auto it = g_plans.find(key);
  return it == g_plans.end() ? nullptr : it->second;
}

// Keeps the candidates from `first` on (conv_plan::kept_from).
void store_plan(const cp::PlanKey& key, Layout l, const std::vector<cp::Candidate>& candidates, size_t first) {
  auto plan = std::make_shared<Plan>(Plan{
      l, std::vector<cp::Candidate>(candidates.begin() + static_cast<std::ptrdiff_t>(first), candidates.end())});
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  if (g_plans.size() >= kMaxPlans) g_plans.clear();
  g_plans[key] = std::move(plan);
}

// Runs the convolution with the cached plan, or plans it: per layout (the preferred one, then the
// other), cuDNN's ranking, then its algorithms in order until one runs.
void run_conv(const Conv& c, cudaStream_t stream) {
  const Tensor& out = c.out();
  const int device = out.device().index;
  const ScalarType t = out.dtype();
  const bool tf32 = kiln::cudnn::allow_tf32(), bench = kiln::cudnn::benchmark();
  const bool deterministic = kiln::cudnn::deterministic();
  const Math base = cp::base_math(t, tf32);
  const cp::PlanKey key = cp::plan_key(c.kind, device, t, base, bench, deterministic, geometry(c), *c.attrs);
  std::exception_ptr oom;
  t_last_refusal.clear();
  try {
    CudnnHandle handle(device, stream);
    const cudnnHandle_t h = handle.get();
    // KILN_CUDNN_API=graph: cuDNN's graph API first (heuristics only: benchmark mode times the
    // legacy algorithms), channels-last; the legacy path below where it has no engine.
    // Its channels-last operands are kept for the legacy path in that layout (no second copy).
    std::optional<Operands> nhwc;
    if (!bench && t != kFloat64 && graph_api_enabled() && !graph_has_no_engine(key)) {
      const Operands& o = nhwc.emplace(prepare(c, Layout::NHWC));
      GraphConv g{c.kind, t, Layout::NHWC, dims_of(c.x), dims_of(c.w), dims_of(c.y)};
      g.xp = o.x.data_ptr(), g.wp = o.w.data_ptr(), g.yp = o.y.data_ptr();
      g.attrs = c.attrs;
      g.allow_tf32 = tf32;
      g.deterministic = deterministic;
      if (run_conv_graph(h, g, key)) {
        finish(c, o);
        return;
      }
    }
    const auto operands = [&](Layout l) { return l == Layout::NHWC && nhwc ? *nhwc : prepare(c, l); };
    if (const std::shared_ptr<const Plan> plan = cached_plan(key)) {
      Descriptors d;
      if (set_descriptors(d, c, plan->layout, base)) {
        const Operands o = operands(plan->layout);
        const cp::Ran ran = run_candidates(h, c.kind, d, o, plan->candidates, oom);
        if (ran.index >= 0) {
          if (const std::optional<size_t> first = cp::kept_from(ran, true))
            store_plan(key, plan->layout, plan->candidates, *first);
          finish(c, o);
          return;
        }
      }
      // Every cached algorithm was refused (or ran out of memory): plan afresh below.
    }
    const Layout preferred = cp::preferred_layout(t);
    for (const Layout l : {preferred, cp::other(preferred)}) {
      Descriptors d;
      if (!set_descriptors(d, c, l, base)) continue;
      std::optional<Operands> o;
      if (bench) o = operands(l);  // timing runs the algorithms on the real operands
      const std::vector<cp::Ranked> ranked = bench ? timed(h, c.kind, d, *o, base) : heuristics(h, c.kind, d);
      const std::vector<cp::Candidate> candidates = cp::select_candidates(
          ranked, t, tf32, deterministic, kWorkspaceLimit, [&](int algo, Math m) { return workspace_size(h, c.kind, d, algo, m); });
      if (candidates.empty()) continue;
      if (!o) o = operands(l);
      // Kept also when the preferred layout only lacked workspace memory: planning afresh on every
      // call would ask for that memory (a device sync and a cache flush) each time.
      const cp::Ran ran = run_candidates(h, c.kind, d, *o, candidates, oom);
      const std::optional<size_t> first = cp::kept_from(ran, false);
      if (!first) continue;
      store_plan(key, l, candidates, *first);
      finish(c, *o);
      return;
    }
  } catch (const OutOfMemoryError&) {
    throw;
  } catch (const Error& e) {
    KILN_FAIL("conv2d", describe(c), ": ", e.what());
  }
  if (oom) std::rethrow_exception(oom);
  KILN_FAIL("conv2d", "cuDNN has no algorithm for the ", describe(c), " in either layout (channels-last or NCHW)",
            t_last_refusal.empty() ? "" : "; the last refusal: ", t_last_refusal);
}

cudaStream_t stream_of(const KernelArgs& a) { return static_cast<cudaStream_t>(a.stream); }

void fill_zero(const Tensor& t) {
  Tensor dst = t;
  const ScalarAttrs zero{Scalar(0)};
  ::kiln::backend::run(Op::Fill, t.device(), {}, std::span<Tensor>(&dst, 1), &zero);
}

// A per-channel vector [C] as [1, C, 1, 1], so that it lines up with dim 1 of [N, C, H, W].
Tensor per_channel(const Tensor& v) {
  return make_view(v, Shape{1, v.size(0), 1, 1}, Shape{v.size(0) * v.stride(0), v.stride(0), 1, 1}, v.storage_offset());
}

// {x, w[, bias]} -> {y}
void conv2d_forward(KernelArgs& args) {
  const auto& a = *static_cast<const ConvAttrs*>(args.attrs);
  const Tensor &x = args.inputs[0], &w = args.inputs[1], &y = args.outputs[0];
  if (y.numel() == 0) return;
  if (x.numel() == 0 || w.numel() == 0) fill_zero(y);  // an empty sum
  else run_conv({Kind::Forward, x, w, y, &a}, stream_of(args));
  if (args.inputs.size() > 2 && args.inputs[2].defined())
    bias_activation(y, per_channel(args.inputs[2]), 0, stream_of(args));
}

// {grad_y, w} -> {grad_x}
void conv2d_backward_input(KernelArgs& args) {
  const auto& a = *static_cast<const ConvAttrs*>(args.attrs);
  const Tensor &gy = args.inputs[0], &w = args.inputs[1], &gx = args.outputs[0];
  if (gx.numel() == 0) return;
  if (gy.numel() == 0 || w.numel() == 0) fill_zero(gx);
  else run_conv({Kind::BackwardData, gx, w, gy, &a}, stream_of(args));
}

// {grad_y, x} -> {grad_w[, grad_bias]}. grad_bias is grad_y summed over N, H and W by our
// reduction kernel (deterministic, every dtype and layout), not cudnnConvolutionBackwardBias.
void conv2d_backward_weight(KernelArgs& args) {
  const auto& a = *static_cast<const ConvAttrs*>(args.attrs);
  const Tensor &gy = args.inputs[0], &x = args.inputs[1], &gw = args.outputs[0];
  if (gw.numel() > 0) {
    if (x.numel() == 0 || gy.numel() == 0) fill_zero(gw);
    else run_conv({Kind::BackwardFilter, x, gw, gy, &a}, stream_of(args));
  }
  if (args.outputs.size() > 1 && args.outputs[1].defined() && args.outputs[1].numel() > 0) {
    Tensor gb = per_channel(args.outputs[1]);
    ReduceAttrs r;
    r.dims_mask = 1u | 4u | 8u;  // N, H, W
    ::kiln::backend::run(Op::Sum, gb.device(), std::span<const Tensor>(&gy, 1), std::span<Tensor>(&gb, 1), &r);
  }
}

// The float dtypes (bfloat16 from sm_80 on), with sizes and attributes in int range; the rest
// (other dtypes, tensors past 2^31 elements) run on the CPU.
bool supports(const KernelArgs& args) {
  const ScalarType t = args.outputs[0].dtype();
  if (t != kFloat32 && t != kFloat64 && t != kFloat16 && t != kBFloat16) return false;
  auto fits = [](const Tensor& x) {
    if (!x.defined()) return true;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (!cp::fits_int(x.size(d))) return false;
    return cp::fits_int(x.numel());
  };
  for (const Tensor& x : args.inputs)
    if (!fits(x)) return false;
  for (const Tensor& x : args.outputs)
    if (!fits(x)) return false;
  if (!cp::attrs_fit(*static_cast<const ConvAttrs*>(args.attrs))) return false;
  return t != kBFloat16 || find_runtime(DeviceType::CUDA)->compute_capability(args.outputs[0].device().index) >= 80;
}

KILN_REGISTER_KERNEL_IF(Op::Conv2d, DeviceType::CUDA, conv2d_forward, supports);
KILN_REGISTER_KERNEL_IF(Op::Conv2dBackwardInput, DeviceType::CUDA, conv2d_backward_input, supports);
KILN_REGISTER_KERNEL_IF(Op::Conv2dBackwardWeight, DeviceType::CUDA, conv2d_backward_weight, supports);

}  // namespace
}  // namespace kiln::backend::cuda

#endif  // KILN_HAVE_CUDNN
