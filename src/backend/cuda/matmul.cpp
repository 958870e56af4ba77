// CUDA matmul and linear through cuBLASLt: batched (strided, broadcast batches), any operand that
// is row- or column-major in its last two dims, float32 (TF32 when allowed), bfloat16, float16
// (float32 accumulators) and float64, and 16-bit operands into a float32 result (attention's
// scores); linear's bias and ReLU/GELU(tanh) as cuBLASLt epilogues,
// GELU(erf) as our kernel after the bias epilogue. The chosen algorithm is cached per geometry.
// Integer products (uint8, int32, int64) by our own kernel (integer_gemm.h).
#include <cublasLt.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>

#include "backend/cuda/context.h"
#include "backend/cuda/epilogue.h"
#include "backend/cuda/gemm.h"
#include "backend/dispatch.h"
#include "kiln/cuda.h"

namespace kiln::backend::cuda {
namespace {

// One operand of a row-major product, as cuBLASLt (column-major) sees it.
struct Operand {
  bool transpose = false;
  int64_t rows = 0, cols = 0, ld = 0;  // of the column-major matrix before `transpose`
  int64_t batch_stride = 0;
};

// A row-major [R, C] matrix with strides (s_r, s_c) is the column-major [C, R] matrix with
// ld s_r when s_c == 1, or the transpose of the column-major [R, C] with ld s_c when s_r == 1.
// The result is used as op(X) of shape [C, R]. A size-1 dim's stride says nothing: either fits.
bool as_operand(int64_t R, int64_t C, int64_t s_r, int64_t s_c, int64_t batch_stride, Operand& o) {
  if (s_c == 1 || C == 1) {
    o = {false, C, R, std::max<int64_t>({R == 1 ? C : s_r, C, 1}), batch_stride};
    return R == 1 || s_r >= C;
  }
  if (s_r == 1 || R == 1) {
    o = {true, R, C, std::max<int64_t>({C == 1 ? R : s_c, R, 1}), batch_stride};
    return C == 1 || s_c >= R;
  }
  return false;
}

bool cublas_dtype(ScalarType t, cudaDataType_t& d) {
  switch (t) {
    case kFloat32: d = CUDA_R_32F; return true;
    case kFloat64: d = CUDA_R_64F; return true;
    case kFloat16: d = CUDA_R_16F; return true;
    case kBFloat16: d = CUDA_R_16BF; return true;
    default: return false;
  }
}

// The largest power of two (at most 256) dividing the address: cuBLASLt's heuristics assume
// 256-byte alignment unless told.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

// cuBLASLt descriptors, destroyed with their owner.
template <class H, cublasStatus_t (*Destroy)(H)>
struct LtHandle {
  H h = nullptr;
  LtHandle() = default;
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  ~LtHandle() { if (h) Destroy(h); }
};
using MatmulDesc = LtHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Layout = LtHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = LtHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

void make_layout(Layout& l, cudaDataType_t dt, uint64_t rows, uint64_t cols, int64_t ld, int32_t batch, int64_t bstride) {
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.h, dt, rows, cols, ld));
  if (batch > 1) {
    KILN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
    KILN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &bstride, sizeof(bstride)));
  }
}

// What decides the algorithm: the cache key.
using PlanKey = std::tuple<int, cudaStream_t, int, int, int, int, int64_t, int64_t, int64_t, int64_t, bool, bool,
                           int64_t, int64_t, int64_t, int64_t, int, uint32_t, uint32_t, uint32_t, uint32_t>;
// The heuristic's choice per geometry, or nullopt where it had none (asked once, not per call).
// Bounded: a workload whose shapes never repeat starts the cache afresh now and then.
// Never destroyed: a matmul from a thread still running at exit finds them.
std::mutex& g_plan_mutex = *new std::mutex;
std::map<PlanKey, std::optional<cublasLtMatmulAlgo_t>>& g_plans = *new std::map<PlanKey, std::optional<cublasLtMatmulAlgo_t>>;
constexpr size_t kMaxPlans = 4096;

struct Gemm {
  const Tensor *a, *w, *out;
  const Tensor* bias = nullptr;  // [N], for the epilogue
  int activation = 0;            // LinearAttrs' numbering
  const char* op = "matmul";     // the op its errors name
};

// "float32 [B, M, K] (strides [...]) x [B, K, N] (strides [...]) into float32 [B, M, N]", for errors.
std::string describe(const Gemm& g) {
  std::ostringstream os;
  os << g.a->dtype() << " " << g.a->shape() << " (strides " << g.a->strides() << ") x " << g.w->shape()
     << " (strides " << g.w->strides() << ") into " << g.out->dtype() << " " << g.out->shape();
  if (g.bias) os << " with bias";
  return os.str();
}

// out[b] = act(a[b] @ w[b] + bias) in one cuBLASLt call. False when cuBLASLt cannot take it
// (the caller then makes the operands dense, or falls back).
bool lt_matmul(const Gemm& g, cudaStream_t stream, bool fuse_epilogue) {
  const Tensor &a = *g.a, &w = *g.w, &out = *g.out;
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  // The operands' type (a and w share one) and the result's: equal, or 16-bit into float32.
  cudaDataType_t dt, in_t;
  if (!cublas_dtype(out.dtype(), dt) || !cublas_dtype(a.dtype(), in_t) || w.dtype() != a.dtype() || B > INT32_MAX)
    return false;
  if (in_t != dt && !(dt == CUDA_R_32F && (in_t == CUDA_R_16BF || in_t == CUDA_R_16F))) return false;
  // Row-major out[M, N] = a[M, K] w[K, N] is column-major out^T[N, M] = w^T[N, K] a^T[K, M].
  Operand ow, oa;
  if (!as_operand(K, N, w.stride(1), w.stride(2), w.size(0) == 1 ? 0 : w.stride(0), ow)) return false;
  if (!as_operand(M, K, a.stride(1), a.stride(2), a.size(0) == 1 ? 0 : a.stride(0), oa)) return false;

  const bool f64 = dt == CUDA_R_64F;
  const bool tf32 = in_t == CUDA_R_32F && kiln::cuda::allow_tf32();
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale_t = f64 ? CUDA_R_64F : CUDA_R_32F;
  MatmulDesc desc;
  KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.h, compute, scale_t));
  const cublasOperation_t ta = ow.transpose ? CUBLAS_OP_T : CUBLAS_OP_N, tb = oa.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  int epilogue_kind = 0;
  if (fuse_epilogue && (g.bias || g.activation == 1 || g.activation == 3)) {
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_DEFAULT;
    if (g.activation == 1) ep = g.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else if (g.activation == 3) ep = g.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else ep = CUBLASLT_EPILOGUE_BIAS;  // GELU(erf) is applied after, by our kernel
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
    if (g.bias) {
      const void* bp = g.bias->data_ptr();
      KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)));
    }
    epilogue_kind = static_cast<int>(ep);
  }
  Layout la, lb, lc;
  const int32_t batch = static_cast<int32_t>(B);
  make_layout(la, in_t, ow.rows, ow.cols, ow.ld, batch, ow.batch_stride);
  make_layout(lb, in_t, oa.rows, oa.cols, oa.ld, batch, oa.batch_stride);
  make_layout(lc, dt, N, M, N, batch, M * N);

  const int device = out.device().index;
  cublasLtHandle_t handle = blaslt_handle(device);
  const BlasltWorkspace ws_lease = blaslt_workspace(device, stream);  // held until the matmul is queued
  void* const workspace = ws_lease.ptr;
  const size_t workspace_bytes = ws_lease.bytes;
  const uint32_t al_a = alignment(w.data_ptr()), al_b = alignment(a.data_ptr()), al_c = alignment(out.data_ptr());
  const uint32_t al_bias = g.bias ? alignment(g.bias->data_ptr()) : 256;
  const PlanKey key{device, stream, static_cast<int>(in_t), static_cast<int>(dt),
                    static_cast<int>(compute), epilogue_kind, B, M, N, K, ow.transpose, oa.transpose, ow.ld, oa.ld,
                    ow.batch_stride, oa.batch_stride, static_cast<int>(workspace_bytes >> 20), al_a, al_b, al_c,
                    al_bias};
  cublasLtMatmulAlgo_t algo;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_plan_mutex);
    auto it = g_plans.find(key);
    if (it != g_plans.end()) {
      if (!it->second) return false;
      algo = *it->second, cached = true;
    }
  }
  if (!cached) {
    Preference pref;
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.h));
    const uint64_t ws = workspace_bytes;
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // No split-K reduced in place in the output: the order in which its parts are added varies
    // from run to run (the same product gave other bits from four threads on an H200). The other
    // schemes reduce in a fixed order.
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_INPLACE);
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                           sizeof(schemes)));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle, desc.h, la.h, lb.h, lc.h, lc.h, pref.h, 1, &result, &found);
    const bool none = st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0);
    if (!none) KILN_CUBLAS_CHECK(st);
    std::lock_guard<std::mutex> lock(g_plan_mutex);
    if (g_plans.size() >= kMaxPlans) g_plans.clear();
    g_plans.emplace(key, none ? std::nullopt : std::optional<cublasLtMatmulAlgo_t>(result.algo));
    if (none) return false;
    algo = result.algo;
  }
  const double one64 = 1.0, zero64 = 0.0;
  const float one32 = 1.0f, zero32 = 0.0f;
  const void* alpha = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = f64 ? static_cast<const void*>(&zero64) : &zero32;
  KILN_CUBLAS_CHECK(cublasLtMatmul(handle, desc.h, alpha, w.data_ptr(), la.h, a.data_ptr(), lb.h, beta, out.data_ptr(),
                                   lc.h, out.data_ptr(), lc.h, &algo, workspace, workspace_bytes, stream));
  return true;
}

// lt_matmul, a failure named with the op and its operands as conv's are (cuBLASLt's own message
// names neither); an out-of-memory error passes unchanged, so that callers still see its type.
bool lt_matmul_named(const Gemm& g, cudaStream_t stream, bool fuse_epilogue) {
  try {
    return lt_matmul(g, stream, fuse_epilogue);
  } catch (const OutOfMemoryError&) {
    throw;
  } catch (const Error& e) {
    KILN_FAIL(g.op, describe(g), ": ", e.what());
  }
}

// Operands cuBLASLt cannot take as they are (both strides > 1 in the last two dims, or an
// alignment no algorithm takes) are made dense first, on the device: a dense view at an odd
// offset is copied too, into a fresh (aligned) allocation.
Tensor dense(const Tensor& t) {
  if (!t.is_contiguous()) return t.contiguous();
  return alignment(t.data_ptr()) >= 16 ? t : t.clone();
}

// cuBLASLt's types, and the integers our own kernel multiplies (bool has no product).
bool supports(const KernelArgs& a) {
  cudaDataType_t dt;
  const ScalarType t = a.outputs[0].dtype();
  return cublas_dtype(t, dt) || t == kUInt8 || t == kInt32 || t == kInt64;
}

void run_gemm(Gemm g, cudaStream_t stream, bool fuse) {
  const Tensor& out = *g.out;
  if (out.numel() == 0) return;
  if (!is_floating_point(out.dtype())) {  // integers: our own product, then the bias
    integer_gemm(*g.a, *g.w, out, stream);
    if (g.bias) bias_activation(out, *g.bias, g.activation, stream);
    return;
  }
  // cuBLASLt's epilogues are for the float32-accumulated types, and read the bias with vector
  // loads that its alignment preferences do not cover (a bias sliced at an odd offset faults).
  fuse = fuse && out.dtype() != kFloat64 && !(g.bias && alignment(g.bias->data_ptr()) < 16);
  // Whatever cuBLASLt's epilogue did not do, our own kernel does: GELU (erf) always, the bias
  // and the activation when nothing was fused.
  const auto finish = [&](bool fused) {
    if (fused && g.activation == 2)
      bias_activation(out, Tensor(), 2, stream);
    else if (!fused && (g.bias || g.activation))
      bias_activation(out, g.bias ? *g.bias : Tensor(), g.activation, stream);
  };
  if (g.a->size(2) == 0) {  // an empty sum: zeros, then the epilogue
    KILN_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream));
    return finish(false);
  }
  if (lt_matmul_named(g, stream, fuse)) return finish(fuse);
  const Tensor a = dense(*g.a), w = dense(*g.w);
  Gemm d = g;
  d.a = &a, d.w = &w;
  if (lt_matmul_named(d, stream, fuse)) return finish(fuse);
  // No algorithm with the epilogue (rare: some dtype/epilogue pairs): the product, then our own.
  KILN_CHECK(lt_matmul_named(d, stream, false), g.op, "cuBLASLt has no algorithm for ", describe(d));
  finish(false);
}

void matmul(KernelArgs& args) { gemm(args.inputs[0], args.inputs[1], args.outputs[0], static_cast<cudaStream_t>(args.stream)); }

void linear(KernelArgs& args) {
  const auto& at = *static_cast<const LinearAttrs*>(args.attrs);
  Gemm g{&args.inputs[0], &args.inputs[1], &args.outputs[0], at.has_bias ? &args.inputs[2] : nullptr, at.activation,
         "linear"};
  run_gemm(g, static_cast<cudaStream_t>(args.stream), true);
}

}  // namespace

void gemm(const Tensor& a, const Tensor& w, const Tensor& out, cudaStream_t stream) { run_gemm({&a, &w, &out}, stream, false); }

namespace {
KILN_REGISTER_KERNEL_IF(Op::Matmul, DeviceType::CUDA, matmul, supports);
KILN_REGISTER_KERNEL_IF(Op::Linear, DeviceType::CUDA, linear, supports);

}  // namespace
}  // namespace kiln::backend::cuda
