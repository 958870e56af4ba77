// conv2d through cuDNN's graph (backend) API: see conv_graph.h. Per plan key and handle, once: the
// operand and convolution descriptors, a one-operation graph, heuristics mode A's engine configs
// tried in conv_plan::engine_order until one's execution plan finalizes and runs; then each call
// only builds a variant pack (the call's pointers and workspace) and executes the kept plan. An
// engine that cuDNN cannot build is skipped (cudnn_engine_accepts); so is one whose workspace memory
// is not to be had, and the engine that runs after it is kept (conv_plan::kept_from, as conv.cpp's
// legacy path does).
#if defined(KILN_HAVE_CUDNN)
#include "backend/cuda/conv_graph.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cudnn.h"
#include "core/tensor_util.h"
#include "kiln/error.h"

namespace kiln::backend::cuda {
namespace {

namespace cp = conv_plan;

// The most workspace one engine may ask for (conv.cpp's limit for the legacy algorithms).
constexpr int64_t kWorkspaceLimit = int64_t{1} << 30;
constexpr int64_t kX = 1, kW = 2, kY = 3;  // the operands' unique ids

// This thread's last refusal (cuDNN's message), for the warning when no engine takes a case.
thread_local std::string t_last_refusal;

bool accepted(cudnnStatus_t st, const char* call, bool engine) {
  if (engine ? cudnn_engine_accepts(st, call) : cudnn_accepts(st, call)) return true;
  t_last_refusal = cudnn_message(call, st);
  return false;
}

// A backend descriptor, destroyed with its owner; movable, not copyable.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { KILN_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&&) = delete;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  // Setting an attribute Kiln describes fully is never a refusal: any failure is an error.
  template <class T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values, int64_t n = 1) {
    KILN_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, n, values));
  }
  void set_desc(cudnnBackendAttributeName_t name, const Desc& d) {
    cudnnBackendDescriptor_t raw = d.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw);
  }
  // The handle attributes are deprecated from cuDNN 9.x on (a device-properties descriptor may
  // replace them) but still honoured; the handle tells the plan which device it is for.
  void set_handle(cudnnBackendAttributeName_t name, cudnnHandle_t h) { set(name, CUDNN_TYPE_HANDLE, &h); }
  // False when cuDNN refuses the case (for an engine's plan: cudnn_engine_accepts).
  bool finalize(const char* what, bool engine = false) { return accepted(cudnnBackendFinalize(d_), what, engine); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

cudnnDataType_t data_type(ScalarType t) {
  return t == kFloat16 ? CUDNN_DATA_HALF : t == kBFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

// One finalized plan and every descriptor it was built from (kept alive with it), or none: no
// engine takes the case.
struct Plan {
  std::vector<Desc> parts;
  Desc* plan = nullptr;  // in parts
  int64_t workspace = 0;
};

// Never destroyed: a convolution from a thread still running at exit finds them, and the plans'
// descriptors are not destroyed after the CUDA runtime has gone.
std::mutex& g_mutex = *new std::mutex;
std::map<std::pair<cp::PlanKey, cudnnHandle_t>, std::shared_ptr<Plan>>& g_plans =
    *new std::map<std::pair<cp::PlanKey, cudnnHandle_t>, std::shared_ptr<Plan>>;
// Geometries no engine took (on any handle: the legacy API runs them).
std::set<cp::PlanKey>& g_no_engine = *new std::set<cp::PlanKey>;
constexpr size_t kMaxPlans = 4096;

Desc tensor(int64_t uid, const cp::Dims& d, cp::Layout l, cudnnDataType_t dt) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cp::Dims s = cp::packed_strides(d, l);
  const int64_t alignment = static_cast<int64_t>(cp::kAlignment);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &dt);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, d.data(), 4);
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, s.data(), 4);
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment);
  return t;
}

Desc convolution(const ConvAttrs& a) {
  Desc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;  // 16-bit types sum in float32
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2;
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute);
  c.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode);
  c.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial);
  c.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, a.dilation, 2);
  c.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, a.stride, 2);
  c.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, a.padding, 2);
  c.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, a.padding, 2);
  return c;
}

// The operation's descriptor type and its attributes for x, w, y (or their gradients), the
// convolution, alpha and beta, per conv_plan::Kind.
struct OperationAttrs {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};
constexpr OperationAttrs kOperations[] = {
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
};

static_assert(static_cast<int>(cp::Kind::BackwardFilter) == 2 && std::size(kOperations) == 3);

// The operation: y = conv(x, w), dx = conv_data(dy, w) or dw = conv_filter(x, dy); groups follow
// from the channel counts (w's C_in / groups against x's C_in).
Desc operation(cp::Kind k, const Desc& x, const Desc& w, const Desc& y, const Desc& conv) {
  const OperationAttrs& a = kOperations[static_cast<int>(k)];
  const float alpha = 1.0f, beta = 0.0f;
  Desc op(a.type);
  op.set_desc(a.x, x);
  op.set_desc(a.w, w);
  op.set_desc(a.y, y);
  op.set_desc(a.conv, conv);
  op.set(a.alpha, CUDNN_TYPE_FLOAT, &alpha);
  op.set(a.beta, CUDNN_TYPE_FLOAT, &beta);
  return op;
}

// The engine's numerical notes; nullopt when cuDNN cannot say (the engine is skipped).
std::optional<cp::EngineNotes> notes_of(const Desc& config) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t got = 0;
  if (!accepted(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                         &got, &raw),
                "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINECFG_ENGINE)", true))
    return std::nullopt;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t n = 0;
  if (!accepted(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                         CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes),
                "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE)", true))
    return std::nullopt;
  cp::EngineNotes e;
  for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; ++i) {
    switch (notes[i]) {
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
        e.tensor_core = true;
        break;
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
        e.down_convert = true;
        break;
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
        e.reduced_precision_reduction = true;
        break;
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
        e.nondeterministic = true;
        break;
      default:
        break;
    }
  }
  return e;
}

enum class Outcome { Ran, Refused, NoMemory };

// Executes `plan` with the call's pointers and a workspace from the caching allocator (freed on
// return: the next user of the block is ordered after this stream's work).
Outcome execute(cudnnHandle_t h, const Desc& plan, int64_t workspace, const GraphConv& c, Device device) {
  Tensor ws;
  if (workspace > 0) {
    try {
      ws = make_empty(Shape{workspace}, kUInt8, device);
    } catch (const OutOfMemoryError&) {
      return Outcome::NoMemory;
    }
  }
  const int64_t uids[3] = {kX, kW, kY};
  void* pointers[3] = {c.xp, c.wp, c.yp};
  void* wsp = ws.defined() ? ws.data_ptr() : nullptr;
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids, 3);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers, 3);
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &wsp);
  if (!pack.finalize("cudnnBackendFinalize(variant pack)")) return Outcome::Refused;
  return accepted(cudnnBackendExecute(h, plan.get(), pack.get()), "cudnnBackendExecute", false) ? Outcome::Ran
                                                                                                : Outcome::Refused;
}

// A plan that ran (or an empty one: no engine did), and which engine of engine_order's it was.
struct Planned {
  std::shared_ptr<Plan> plan;
  cp::Ran ran;
};

// Builds the graph and runs the engine configs in order until one runs.
Planned plan_and_run(cudnnHandle_t h, const GraphConv& c, Device device) {
  Planned r{std::make_shared<Plan>(), {}};
  Plan* p = r.plan.get();
  auto keep = [&](Desc d) -> Desc& { return p->parts.emplace_back(std::move(d)); };
  // Reserved so that the references handed out stay valid (every part below, and the configs).
  p->parts.reserve(64);
  const cudnnDataType_t dt = data_type(c.dtype);
  Desc& x = keep(tensor(kX, c.x, c.layout, dt));
  Desc& w = keep(tensor(kW, c.w, c.layout, dt));
  Desc& y = keep(tensor(kY, c.y, c.layout, dt));
  Desc& conv = keep(convolution(*c.attrs));
  for (Desc* d : {&x, &w, &y, &conv})
    if (!d->finalize("cudnnBackendFinalize(tensor or convolution)")) return r;
  Desc& op = keep(operation(c.kind, x, w, y, conv));
  if (!op.finalize("cudnnBackendFinalize(convolution operation)")) return r;
  Desc& graph = keep(Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  graph.set_desc(CUDNN_ATTR_OPERATIONGRAPH_OPS, op);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  graph.set_handle(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, h);
#pragma GCC diagnostic pop
  if (!graph.finalize("cudnnBackendFinalize(operation graph)")) return r;
  Desc& heur = keep(Desc(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  if (!heur.finalize("cudnnBackendFinalize(engine heuristics)")) return r;
  int64_t count = 0;
  KILN_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                            &count, nullptr));
  count = std::min<int64_t>(count, 32);
  std::vector<Desc> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) raw.push_back(configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
  int64_t got = 0;
  KILN_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                            count, &got, raw.data()));
  while (static_cast<int64_t>(configs.size()) > std::clamp<int64_t>(got, 0, count)) configs.pop_back();
  // The configs whose notes cuDNN gives, and the notes (an engine it cannot describe is skipped).
  std::vector<Desc> described;
  std::vector<cp::EngineNotes> notes;
  for (Desc& cfg : configs) {
    if (const std::optional<cp::EngineNotes> n = notes_of(cfg)) {
      notes.push_back(*n);
      described.push_back(std::move(cfg));
    }
  }
  const std::vector<size_t> order = cp::engine_order(c.dtype, c.allow_tf32, c.deterministic, notes);
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    plan.set_handle(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, h);
#pragma GCC diagnostic pop
    plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, described[i]);
    if (!plan.finalize("cudnnBackendFinalize(execution plan)", true)) continue;
    int64_t workspace = 0;
    if (!accepted(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                           &got, &workspace),
                  "cudnnBackendGetAttribute(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)", true) ||
        workspace > kWorkspaceLimit)
      continue;
    const Outcome o = execute(h, plan, workspace, c, device);
    r.ran.skipped_for_memory = r.ran.skipped_for_memory || o == Outcome::NoMemory;
    if (o != Outcome::Ran) continue;
    keep(std::move(described[i]));
    p->plan = &keep(std::move(plan));
    p->workspace = workspace;
    r.ran.index = static_cast<int>(k);
    return r;
  }
  return r;
}

// "forward float32 x [N, C, H, W] w [...] y [...] stride [..] padding [..] dilation [..]": the
// geometry a warning names.
std::string describe(const GraphConv& c) {
  static constexpr const char* kNames[] = {"forward", "input gradient", "weight gradient"};
  const ConvAttrs& a = *c.attrs;
  auto dims = [](const cp::Dims& d) { return detail::cat("[", d[0], ", ", d[1], ", ", d[2], ", ", d[3], "]"); };
  return detail::cat(kNames[static_cast<int>(c.kind)], " of ", c.dtype, " x ", dims(c.x), ", w ", dims(c.w), ", y ",
                     dims(c.y), ", stride [", a.stride[0], ", ", a.stride[1], "], padding [", a.padding[0], ", ",
                     a.padding[1], "], dilation [", a.dilation[0], ", ", a.dilation[1], "]");
}

}  // namespace

bool graph_api_enabled() {
  static const int mode = [] {
    const char* v = std::getenv("KILN_CUDNN_API");
    if (!v || !*v || std::strcmp(v, "legacy") == 0) return 0;
    if (std::strcmp(v, "graph") == 0) return 1;
    return -1;
  }();
  KILN_CHECK(mode >= 0, "conv2d", "KILN_CUDNN_API must be 'graph' or 'legacy', got '", std::getenv("KILN_CUDNN_API"),
             "'");
  return mode == 1;
}

bool graph_has_no_engine(const cp::PlanKey& key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_no_engine.count(key) > 0;
}

bool run_conv_graph(cudnnHandle_t h, const GraphConv& c, const cp::PlanKey& key) {
  const Device device = Device::cuda(static_cast<int>(key[1]));
  std::shared_ptr<Plan> plan;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_no_engine.count(key)) return false;
    auto it = g_plans.find({key, h});
    if (it != g_plans.end()) plan = it->second;
  }
  // A kept plan whose run is refused now tries the legacy API; one whose workspace memory is not to
  // be had now is planned afresh, and the engine that runs then is kept (as conv.cpp does).
  if (plan) {
    const Outcome o = execute(h, *plan->plan, plan->workspace, c, device);
    if (o != Outcome::NoMemory) return o == Outcome::Ran;
  }
  t_last_refusal.clear();
  const Planned planned = plan_and_run(h, c, device);
  std::lock_guard<std::mutex> lock(g_mutex);
  // The engine that ran is kept even when one ranked before it lacked workspace memory, and a
  // geometry on which none ran, even for want of memory, goes to the legacy API from now on:
  // planning afresh on every call would finalize every plan and ask for that memory (a device
  // sync and a cache flush) each time.
  if (!cp::kept_from(planned.ran, false)) {
    if (g_no_engine.insert(key).second)
      std::cerr << "kiln: warning: [conv2d] cuDNN's graph API has no engine "
                << (planned.ran.skipped_for_memory ? "whose workspace memory is free " : "") << "for the "
                << describe(c) << "; using the legacy API for it"
                << (t_last_refusal.empty() ? "" : " (the last refusal: " + t_last_refusal + ")") << "\n";
    return false;
  }
  if (g_plans.size() >= kMaxPlans) {
    g_plans.clear();
    g_no_engine.clear();
  }
  g_plans[{key, h}] = planned.plan;
  return true;
}

}  // namespace kiln::backend::cuda

#endif  // KILN_HAVE_CUDNN
