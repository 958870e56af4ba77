// The kernel table: Op x device -> kernel, the fallback policy, and the kernels' argument type.
#pragma once

#include <type_traits>
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "kiln/tensor.h"

namespace kiln::backend {

// Every primitive a backend can implement. One X-macro list gives the enum and the names.
#define KILN_OP_LIST(X)                                                                     \
  X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Maximum) X(Minimum) X(AddRelu)                       \
  X(FloorDivide) X(TruncDivide) X(Remainder) X(Fmod) X(Atan2)                              \
  X(BitwiseAnd) X(BitwiseOr) X(BitwiseXor) X(BitwiseNot)                                   \
  X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge) X(LogicalAnd) X(LogicalOr)                            \
  X(ReluBackward) X(SigmoidBackward) X(TanhBackward) X(GeluErfBackward) X(GeluTanhBackward) \
  X(SiluBackward) X(Activation) X(ActivationBackward)                                       \
  X(Neg) X(Abs) X(Sign) X(Exp) X(Log) X(Log1p) X(Expm1) X(Sqrt) X(Rsqrt) X(Square)         \
  X(Reciprocal) X(Tanh) X(Sigmoid) X(Relu) X(GeluErf) X(GeluTanh) X(Silu) X(Sin) X(Cos)    \
  X(LogicalNot) X(Floor) X(Ceil) X(Round) X(Trunc) X(IsNan) X(IsInf) X(IsFinite) X(Erf) X(Log2) \
  X(Log10) X(Exp2)                                                                          \
  X(Clamp) X(Where) X(Copy) X(Fill) X(Addcmul) X(Addcdiv) X(Lerp)                           \
  X(Sum) X(Prod) X(Amax) X(Amin) X(All) X(Any) X(Var) X(LogSumExp) X(Norm)                  \
  X(MaxWithIndex) X(MinWithIndex) X(Sort) X(Cumsum) X(MaskPositions) X(SearchSorted)       \
  X(Softmax) X(LogSoftmax) X(SoftmaxBackward) X(LogSoftmaxBackward)                         \
  X(Matmul)                                                                                 \
  X(IndexSelect) X(Gather) X(ScatterAdd) X(Tril) X(Triu) X(Resample)                        \
  X(Arange) X(Uniform) X(Normal) X(RandInt) X(Dropout) X(DropoutBackward)                   \
  X(Conv2d) X(Conv2dBackwardInput) X(Conv2dBackwardWeight)                                  \
  X(MaxPool2d) X(MaxPool2dBackward) X(AvgPool2d) X(AvgPool2dBackward)                       \
  X(BatchNormStats) X(BatchNormApply) X(BatchNormBackward)                                  \
  X(Attention) X(AttentionBackward)                                                         \
  X(Embedding) X(EmbeddingBackward) X(LayerNorm) X(LayerNormBackward) X(MaskedSoftmax)      \
  X(Linear) X(CrossEntropy) X(CrossEntropyBackward)                                         \
  X(AdamStep) X(SgdStep) X(AmpUnscale) X(ForeachNorm) X(ForeachMul)

enum class Op : uint16_t {
#define KILN_OP_ENUM(name) name,
  KILN_OP_LIST(KILN_OP_ENUM)
#undef KILN_OP_ENUM
      kCount
};
inline constexpr int kNumOps = static_cast<int>(Op::kCount);
const char* op_name(Op op);

struct KernelArgs {
  std::span<const Tensor> inputs;
  std::span<Tensor> outputs;
  const void* attrs = nullptr;  // the op's own attribute struct, or nullptr
  void* stream = nullptr;       // the device's current stream (a cudaStream_t), or nullptr
};
using Kernel = void (*)(KernelArgs&);
// Whether a kernel takes these arguments (ggml's supports_op): a device kernel may leave rare
// cases (a dtype, a rank) to the CPU fallback, decided here in one place.
using Supports = bool (*)(const KernelArgs&);

void register_kernel(Op op, DeviceType device, Kernel kernel, Supports supports = nullptr);
bool has_kernel(Op op, DeviceType device);
// The registered kernel, or nullptr (tests wrap kernels with it).
Kernel kernel_for(Op op, DeviceType device);
Supports supports_for(Op op, DeviceType device);
// A device kernel that reads CPU operands itself: numbers (0-d CPU tensors, perhaps expanded:
// one element whatever their shape), which it passes to the device by value. Without this mark
// the dispatcher copies each one to the device first (an allocation and a host-to-device copy).
void take_host_numbers(Op op, DeviceType device, bool takes = true);
bool takes_host_numbers(Op op, DeviceType device);

// KILN_SHADOW=cpu (or set_shadow_mode) runs every op on a device tensor a second time, on the
// CPU with copies of its inputs, and compares: the first op kind that differs beyond its dtype's
// tolerance is reported once on stderr with its shapes, dtypes and worst element (cpu:error
// makes it a kiln::Error). For finding a wrong kernel with one shadowed training step.
enum class ShadowMode { Off, Warn, Error };
void set_shadow_mode(ShadowMode mode);
ShadowMode shadow_mode();
// Op kinds whose device result differed from the CPU's, with how often.
std::map<std::string, uint64_t> shadow_mismatches();

// Runs the kernel for `device`. With no kernel there, copies the inputs to the CPU, runs the
// CPU kernel and copies the outputs back, warning once per op and counting it;
// KILN_FALLBACK=error makes that an error instead.
void run(Op op, Device device, std::span<const Tensor> inputs, std::span<Tensor> outputs,
         const void* attrs = nullptr);

// ---- attribute structs shared by ops and kernels
struct ScalarAttrs { Scalar value; };
// min/max for floating-point tensors; imin/imax, exact, for integer tensors (the op layer has
// checked that they fit the tensor's type: through a double, INT64_MAX became 2^63, past int64).
struct ClampAttrs {
  bool has_min = false, has_max = false;
  double min = 0, max = 0;
  int64_t imin = 0, imax = 0;
  template <class C> C lo() const {
    if constexpr (std::is_integral_v<C>) return static_cast<C>(imin);
    else return static_cast<C>(min);
  }
  template <class C> C hi() const {
    if constexpr (std::is_integral_v<C>) return static_cast<C>(imax);
    else return static_cast<C>(max);
  }
};
// Reductions: reduce over the dims where reduce[d] is true (input rank), output keeps rank with
// size 1 there (the op layer squeezes). var uses correction; norm uses p; mean uses scale.
struct ReduceAttrs {
  uint64_t dims_mask = 0;
  double scale = 1.0;
  int64_t correction = 0;
  double p = 2.0;
};
struct DimAttrs { int64_t dim = 0; };
// ScatterAdd: {index int64 contiguous, src (any strides)} -> {out (any strides), written in place}:
// for each index position p, out at p's coordinates with dim's replaced by index[p] += src at p's
// coordinates; with `overwrite` that element is set to it instead (an element addressed twice
// takes one of the values: the last on the CPU, any on a GPU).
struct ScatterAttrs {
  int64_t dim = 0;
  bool overwrite = false;
};
// cumsum: {x [outer, n, inner] contiguous} -> {out, the same}: out[o, j, i] = the sum of x[o, 0..j, i]
// (x[o, j..n-1, i] when reverse) in cumsum_acc_t (visit_dtype.h), added in order, each output rounded
// from the running sum; with `product` (cumprod) the product instead, from 1.
struct CumsumAttrs {
  bool reverse = false;
  bool product = false;
};
// MaskPositions: {mask [N] bool, contiguous} -> {out [n] int64}: the positions of the mask's true
// elements, in order (n, their count, sized the output: the op layer counted them).
// SearchSorted: {sorted [B, m], values [R, k], both contiguous, one dtype (not bool)} -> {out [R, k]
// int64 or int32, contiguous}: out[r, j] is the first position i in row (B == 1 ? 0 : r) of sorted
// whose element is >= values[r, j] (> with right), m if none: search_math.h's search, NaN above
// every number. B is 1 or R.
struct SearchSortedAttrs {
  bool right = false;
};
// Resample (interpolate's linear maps along one dim, and their transposes, its gradients):
// {x [outer, n, inner] contiguous, float32 or float64; offsets [m + 1], source [nnz], both int64;
// weight [nnz], x's dtype} -> {out [outer, m, inner] contiguous}: out[o, j, i] is the sum over t in
// [offsets[j], offsets[j + 1]) of weight[t] * x[o, source[t], i] (source[t] in [0, n), the op layer
// builds them), from the first product on in t order in x's dtype, every product and sum rounded
// (no fused multiply-add, so every device gives the same bits); 0 where the range is empty.
// sort and topk along rows: {x [rows, n] contiguous} -> {values [rows, k], indices [rows, k] (int64)},
// contiguous: each row's k first elements in sort_math.h's order (stable: ties by position).
struct SortAttrs {
  bool descending = false;
  int64_t k = 0;  // 0 <= k <= n
};
struct TriAttrs { int64_t diagonal = 0; };
// out[i] = start + i * step, in double; or, when `integral`, istart + i * istep in int64 (a
// double holds 53 bits: arange(2^60, 2^60 + 3)).
struct ArangeAttrs {
  double start = 0, step = 1;
  bool integral = false;
  int64_t istart = 0, istep = 1;
};
struct RandomAttrs {
  uint64_t seed = 0, offset = 0;
  double a = 0, b = 1;     // uniform: [a, b); normal: mean a, std b
  int64_t low = 0;         // randint: [low, low + range), in 64-bit integers (a double holds 53 bits)
  uint64_t range = 0;
};
// dropout: {x} -> {y, keep (bool)}, all contiguous, element i kept by Philox word i of the
// reserved counters (dropout_math.h); backward {grad_y, keep} -> {grad_x}, all contiguous.
struct DropoutAttrs { uint64_t seed = 0, offset = 0; double p = 0; };
// conv2d: inputs {x, w[, bias]} -> {y}; backward input {grad_y, w} -> {grad_x};
// backward weight {grad_y, x} -> {grad_w[, grad_bias]}. Tensors are 4-D with any strides.
struct ConvAttrs {
  int64_t stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  int64_t groups = 1;
  bool inference = false;  // no backward will follow (lets a library pick an inference kernel)
};
// Pooling over H and W of 4-D tensors, x channels-last (the op layer makes it so). Max: {x} ->
// {y[, indices (int64, h * W + w), given when a backward pass will need them]}, backward
// {grad_y, indices} -> {grad_x}. Avg and adaptive avg: {x} -> {y}, backward {grad_y} -> {grad_x}.
struct PoolAttrs {
  enum Kind : uint8_t { Max, Avg, AdaptiveAvg } kind = Max;
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  bool count_include_pad = true;
};
// Batch norm over [N, C, S...] laid out row-major or as channels-last [N, C, H, W]:
// stats {x} -> {mean[C], invstd[C][, running_mean[C], running_var[C]]}, the running statistics
// (dense, one float dtype, read and written in place) updated by `momentum` when given (PyTorch's
// rule: the batch's variance unbiased); apply {x, mean, invstd, weight, bias} -> {y};
// backward {grad_y, x, mean, invstd, weight, bias (relu's mask is recomputed from y)} ->
// {grad_x, grad_weight, grad_bias}, where
// `training` says mean/invstd came from this batch (so grad_x includes their derivative).
// Apply and Backward take per-channel statistics: the batch's mean and invstd when training, the
// running mean and variance when not (the kernels compute invstd, bn::invstd_of).
struct BatchNormAttrs {
  double eps = 1e-5;
  bool training = true;
  bool relu = false;  // batch_norm_relu: Apply clamps at 0, Backward masks the gradient by it
  double momentum = 0.1;  // Stats: the running statistics' update
};
// Fused optimizer steps over a whole param group: n parameters, each with its state tensors laid
// out like it (dense, same strides; src/optim/fused_step.cpp checks), all updated in place.
// Adam/AdamW: inputs {grad x n} -> outputs {param x n, exp_avg x n, exp_avg_sq x n
// [, max_exp_avg_sq x n when amsgrad]}. Each parameter has its own step count, so the
// bias-corrected factors come per tensor (computed in double, as torch.optim.Adam does).
struct AdamStepAttrs {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool amsgrad = false;
  bool maximize = false;                      // g = -g first
  bool decoupled = false;                     // AdamW: p *= 1 - lr * wd instead of g += wd * p
  std::span<const double> step_size;          // per tensor: lr / (1 - beta1^step)
  std::span<const double> bias_correction2_sqrt;  // per tensor: sqrt(1 - beta2^step)
};
// SGD: inputs {grad x n} -> outputs {param x n [, momentum_buffer x n when momentum != 0]}.
// A fresh buffer (first step of its parameter) is only written: buf = grad + wd * p.
struct SgdStepAttrs {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;  // g = -g first
  std::span<const uint8_t> fresh_buffer;  // per tensor, when momentum != 0
};
// GradScaler's unscale (torch's _amp_foreach_non_finite_check_and_unscale_): no inputs ->
// outputs {grad x n (dense, one float dtype, multiplied by inv_scale in place), found_inf
// (float32 [1], set to 1 when some gradient held an inf or NaN before; never reset)}. The
// product is taken in float for 16-bit gradients.
struct AmpUnscaleAttrs { double inv_scale = 1.0; };
// Multi-tensor ops for gradient clipping (torch's _foreach_norm and _foreach_mul_), over n dense
// tensors of one float dtype. ForeachNorm (ReduceAttrs' p): {t x n} -> {norms [n], float32, or
// float64 for float64 tensors}, each the norm of one whole tensor as Op::Norm computes it
// (0 for an empty one; p >= 0). ForeachMul: {scale (one floating-point element on the device)} ->
// {t x n, multiplied by it in place, in float for 16-bit tensors}.
// Fused attention. q [B..., L, E], k [B..., S, E], v [B..., S, Ev] share the batch dims B...
// and one floating-point dtype (expanded views are fine) and have unit stride in their last dim;
// the optional mask is a view expanded to [B..., L, S] (any strides; bool true = attend, or float
// added to the scores, in the compute dtype: float64 for float64, else float32).
// Forward {q, k, v[, mask]} -> {out [B..., L, Ev], logsumexp [B..., L]} (contiguous, in the
// compute dtype); backward {q, k, v, [mask,] out, logsumexp, grad_out (q's dtype)} -> {grad_q,
// grad_k, grad_v} (contiguous, expanded batch, q's dtype). With dropout_p > 0, score (b, i, j) of the flattened batch b is kept when
// word n % 4 of Philox counter offset + n / 4 is at least the threshold, n = (b L + i) S + j.
struct AttentionAttrs {
  double scale = 1.0;
  double dropout_p = 0.0;
  uint64_t seed = 0, offset = 0;
  bool is_causal = false;
  bool has_mask = false;
};

// embedding: {weight [num, dim] contiguous, indices [m] int64 contiguous} -> {out [m, dim]};
// backward {grad [m, dim] contiguous, indices} -> {grad_weight [num, dim]} (every row written:
// the sum of its rows of grad, zero for padding_idx and for rows no index picks). Kernels check
// the indices (they are where they are read) and name `embedding` in the error.
struct EmbeddingAttrs { int64_t padding_idx = -1; };
// layer_norm over rows of n = the normalized numel: forward {x [rows, n] contiguous, weight [n]?,
// bias [n]?} -> {y [rows, n], mean [rows], rstd [rows]} (statistics in float32, float64 for
// float64 x); backward {grad_y, x, mean, rstd, weight?} -> {grad_x, grad_weight?, grad_bias?}.
// The optional tensors are present when the flags say so.
struct LayerNormAttrs {
  double eps = 1e-5;
  bool has_weight = false, has_bias = false;  // forward inputs; backward: has_weight only
  bool grad_weight = false, grad_bias = false;  // backward outputs beyond grad_x
};
// masked_softmax over dim of x contiguous: {x, mask (x's shape, any strides incl. 0: a broadcast
// view; bool = keep, or x's float dtype = added)} -> {y contiguous}. A fully masked row gives 0.
struct MaskedSoftmaxAttrs { int64_t dim = 0; };
// linear: {x [1, M, K], weight^T [1, K, N] (any strides), bias [N]?} -> {y [1, M, N] contiguous}
// = activation(x @ weight^T + bias); activation is kiln::Activation as an integer.
struct LinearAttrs {
  bool has_bias = false;
  int activation = 0;  // 0 none, 1 relu, 2 gelu (erf), 3 gelu (tanh)
};
// cross_entropy on logits [N, C] contiguous with int64 targets [N]: forward {logits, target,
// weight [C]?} -> {loss [N] (0 where ignored, times the class weight), stats [N, 2] (float32/64:
// each row's max and log(sum(exp(x - max))))}; backward {grad [N], logits, target, stats, weight?}
// -> {grad_logits [N, C]}
// = grad[i] * w[t_i] * (softmax(logits_i) - onehot(t_i)), 0 for ignored rows.
struct CrossEntropyAttrs {
  int64_t ignore_index = -100;
  bool has_weight = false;
};

}  // namespace kiln::backend

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)
// Registers a kernel at start-up from the backend's own file.
#define KILN_REGISTER_KERNEL(op, device, fn)                                  \
  static const bool KILN_CONCAT(kiln_registered_, __LINE__) =                 \
      (::kiln::backend::register_kernel(::kiln::backend::op, (device), (fn)), true)
// The same, for a kernel that takes numbers on the host (take_host_numbers).
#define KILN_REGISTER_KERNEL_TAKING_NUMBERS(op, device, fn)                                           \
  static const bool KILN_CONCAT(kiln_registered_, __LINE__) =                                          \
      (::kiln::backend::register_kernel(::kiln::backend::op, (device), (fn)),                          \
       ::kiln::backend::take_host_numbers(::kiln::backend::op, (device)), true)
// The same, with a predicate for the cases the kernel takes (the rest run on the CPU).
#define KILN_REGISTER_KERNEL_IF(op, device, fn, supports)                     \
  static const bool KILN_CONCAT(kiln_registered_, __LINE__) =                 \
      (::kiln::backend::register_kernel(::kiln::backend::op, (device), (fn), (supports)), true)
