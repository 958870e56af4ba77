// CUDA kernels for the fused optimizer steps (the contract of backend/cpu/optim.cpp): Adam/AdamW
// and SGD over a whole param group, GradScaler's unscale and gradient clipping's norms and
// scaling, as a multi-tensor apply. Up to kMaxTensors tensors go in one launch, their pointers,
// sizes and per-tensor factors packed in a struct passed by value; each block takes one chunk of
// one tensor (optim_plan.h: plain C++, which the CPU tests run). No host round trips.
//
// The arithmetic is the CPU kernel's, operation for operation in the compute type C (float for
// 16-bit params, whose state is stored in their own dtype as on the CPU), with the CPU's
// coefficients. Every operation is an explicit round-to-nearest intrinsic, so nvcc contracts
// nothing on its own; the fused multiply-adds written here are exactly those GCC makes of the CPU
// code in its x86-64-v4 (AVX-512) clone, checked bit for bit on float and double, so the two
// agree bitwise there. (The CPU's x86-64-v3 clone, AVX2 with FMA, contracts too; its baseline clone
// contracts nothing and differs by an ulp.)
#include <cmath>
#include <span>

#include "backend/cuda/device/block_reduce.cuh"
#include "backend/cuda/device/common.cuh"
#include "backend/cuda/optim_plan.h"
#include "backend/cuda/reduce_folds.h"
#include "core/tensor_util.h"

namespace kiln::backend::cuda {
namespace {

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float fma_(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double fma_(double a, double b, double c) { return __fma_rn(a, b, c); }
__device__ __forceinline__ float sqrt_(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_(double a) { return __dsqrt_rn(a); }

// This block's tensor and element range [begin, end) (Chunks, optim_plan.h).
__device__ __forceinline__ int block_tensor(const Chunks& c, int64_t& begin, int64_t& end) {
  return cuda::block_tensor(c, static_cast<int64_t>(blockIdx.x), begin, end);
}

// Packs the non-empty tensors among `tensors` into lists of at most kMaxTensors and launches one
// kernel per list: add(list, k, t) fills entry k of the list from tensor t, launch(list, blocks)
// launches it.
template <class List, class Add, class Launch>
void for_each_list(std::span<const Tensor> tensors, const char* op, const Add& add, const Launch& launch) {
  List l{};
  const auto flush = [&] {
    if (l.chunks.count == 0) return;
    KILN_CHECK(l.chunks.blocks() <= INT32_MAX, op, "too many elements in one launch");
    launch(l, static_cast<unsigned>(l.chunks.blocks()));
    KILN_CUDA_LAUNCHED(op);
    l = List{};
  };
  for (size_t t = 0; t < tensors.size(); ++t) {
    const int64_t numel = tensors[t].numel();
    if (numel == 0) continue;
    add(l, l.chunks.count, t);
    l.chunks.add(numel);
    if (l.chunks.count == kMaxTensors) flush();
  }
  flush();
}

// ---- Adam / AdamW
enum Decay : int { kNoDecay, kL2, kDecoupled };

template <class C>
struct AdamCoef {
  C g_sign, wd, decay, lerp_coef, beta2, one_minus_beta2, eps;  // g_sign: -1 to maximize
  bool lerp_from_m, amsgrad;
  int decay_kind;
};

template <class T, class C>
struct AdamList {
  Chunks chunks;
  const T* g[kMaxTensors];
  T* p[kMaxTensors];
  T* m[kMaxTensors];
  T* v[kMaxTensors];
  T* vmax[kMaxTensors];
  C bc2_sqrt[kMaxTensors], neg_step_size[kMaxTensors];
};
static_assert(sizeof(AdamList<double, double>) + sizeof(AdamCoef<double>) <= 4000);

// __grid_constant__: the list is read in place from the parameter space (a by-value copy indexed
// by the runtime tensor index would live in local memory).
template <class T, class C>
__global__ void adam_kernel(const __grid_constant__ AdamList<T, C> l, const AdamCoef<C> c) {
  int64_t begin, end;
  const int t = block_tensor(l.chunks, begin, end);
  const T* __restrict__ g = l.g[t];
  T* __restrict__ p = l.p[t];
  T* __restrict__ m = l.m[t];
  T* __restrict__ v = l.v[t];
  T* __restrict__ vmax = l.vmax[t];
  const C bc2_sqrt = l.bc2_sqrt[t], neg_step_size = l.neg_step_size[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    C pi = static_cast<C>(p[i]), gi = mul(static_cast<C>(g[i]), c.g_sign);
    if (c.decay_kind == kL2) gi = fma_(c.wd, pi, gi);                 // g + wd * p
    if (c.decay_kind == kDecoupled) pi = mul(pi, c.decay);            // p * (1 - lr * wd)
    const C mi = static_cast<C>(m[i]);
    const C mn = fma_(c.lerp_coef, sub(gi, mi), c.lerp_from_m ? mi : gi);  // lerp(m, g, 1 - beta1)
    const C vn = fma_(static_cast<C>(v[i]), c.beta2, mul(mul(c.one_minus_beta2, gi), gi));
    m[i] = static_cast<T>(mn);
    v[i] = static_cast<T>(vn);
    C vh = vn;
    if (c.amsgrad) {
      const C old = static_cast<C>(vmax[i]);
      vh = vn != vn || old < vn ? vn : old;  // torch.maximum(old, vn): a NaN either side stays
      vmax[i] = static_cast<T>(vh);
    }
    const C denom = add(div(sqrt_(vh), bc2_sqrt), c.eps);
    p[i] = static_cast<T>(add(pi, div(mul(neg_step_size, mn), denom)));
  }
}

template <class T>
void adam_all(KernelArgs& a, const AdamStepAttrs& at) {
  using C = compute_t<T>;
  const size_t n = a.inputs.size();
  AdamCoef<C> c{};  // the CPU kernel's coefficients, rounded to C the same way
  c.g_sign = at.maximize ? C(-1) : C(1);
  c.wd = static_cast<C>(at.weight_decay);
  c.decay = static_cast<C>(1 - at.lr * at.weight_decay);
  const C w = static_cast<C>(1 - at.beta1);
  c.lerp_from_m = std::abs(w) < C(0.5);
  c.lerp_coef = c.lerp_from_m ? w : w - C(1);
  c.beta2 = static_cast<C>(at.beta2);
  c.one_minus_beta2 = static_cast<C>(1 - at.beta2);
  c.eps = static_cast<C>(at.eps);
  c.amsgrad = at.amsgrad;
  c.decay_kind = at.weight_decay == 0 ? kNoDecay : at.decoupled ? kDecoupled : kL2;
  for_each_list<AdamList<T, C>>(
      a.inputs, "AdamStep",
      [&](AdamList<T, C>& l, int k, size_t t) {
        l.g[k] = static_cast<const T*>(a.inputs[t].data_ptr());
        l.p[k] = static_cast<T*>(a.outputs[t].data_ptr());
        l.m[k] = static_cast<T*>(a.outputs[n + t].data_ptr());
        l.v[k] = static_cast<T*>(a.outputs[2 * n + t].data_ptr());
        l.vmax[k] = at.amsgrad ? static_cast<T*>(a.outputs[3 * n + t].data_ptr()) : nullptr;
        l.bc2_sqrt[k] = static_cast<C>(at.bias_correction2_sqrt[t]);
        l.neg_step_size[k] = static_cast<C>(-at.step_size[t]);
      },
      [&](const AdamList<T, C>& l, unsigned blocks) {
        adam_kernel<T, C><<<blocks, kThreads, 0, stream_of(a)>>>(l, c);
      });
}

void adam_step(KernelArgs& a) {
  const auto& at = *static_cast<const AdamStepAttrs*>(a.attrs);
  if (a.inputs.empty()) return;
  visit_float_dtype(a.outputs[0].dtype(), "AdamStep", [&]<class T>() { adam_all<T>(a, at); });
}

// ---- SGD: d = g + wd * p; buf = d (fresh) or buf * momentum + (1 - dampening) * d;
// d = nesterov ? d + momentum * buf : buf; p += -lr * d
template <class C>
struct SgdCoef {
  C wd, momentum, one_minus_dampening, neg_lr, g_sign;  // g_sign: -1 to maximize
  bool has_wd, has_momentum, nesterov;
};

template <class T>
struct SgdList {
  Chunks chunks;
  const T* g[kMaxTensors];
  T* p[kMaxTensors];
  T* buf[kMaxTensors];
  bool fresh[kMaxTensors];
};
static_assert(sizeof(SgdList<double>) + sizeof(SgdCoef<double>) <= 4000);

template <class T, class C>
__global__ void sgd_kernel(const __grid_constant__ SgdList<T> l, const SgdCoef<C> c) {
  int64_t begin, end;
  const int t = block_tensor(l.chunks, begin, end);
  const T* __restrict__ g = l.g[t];
  T* __restrict__ p = l.p[t];
  T* __restrict__ buf = l.buf[t];
  const bool fresh = l.fresh[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const C pi = static_cast<C>(p[i]);
    C d = mul(static_cast<C>(g[i]), c.g_sign);
    if (c.has_wd) d = fma_(c.wd, pi, d);
    if (c.has_momentum) {
      const C b = fresh ? d : fma_(static_cast<C>(buf[i]), c.momentum, mul(c.one_minus_dampening, d));
      buf[i] = static_cast<T>(b);
      d = c.nesterov ? fma_(c.momentum, b, d) : b;
    }
    p[i] = static_cast<T>(fma_(c.neg_lr, d, pi));
  }
}

template <class T>
void sgd_all(KernelArgs& a, const SgdStepAttrs& at) {
  using C = compute_t<T>;
  const size_t n = a.inputs.size();
  const bool momentum = at.momentum != 0;
  const SgdCoef<C> c{static_cast<C>(at.weight_decay), static_cast<C>(at.momentum), static_cast<C>(1 - at.dampening),
                     static_cast<C>(-at.lr), at.maximize ? C(-1) : C(1), at.weight_decay != 0, momentum,
                     momentum && at.nesterov};
  for_each_list<SgdList<T>>(
      a.inputs, "SgdStep",
      [&](SgdList<T>& l, int k, size_t t) {
        l.g[k] = static_cast<const T*>(a.inputs[t].data_ptr());
        l.p[k] = static_cast<T*>(a.outputs[t].data_ptr());
        l.buf[k] = momentum ? static_cast<T*>(a.outputs[n + t].data_ptr()) : nullptr;
        l.fresh[k] = momentum && at.fresh_buffer[t] != 0;
      },
      [&](const SgdList<T>& l, unsigned blocks) { sgd_kernel<T, C><<<blocks, kThreads, 0, stream_of(a)>>>(l, c); });
}

void sgd_step(KernelArgs& a) {
  const auto& at = *static_cast<const SgdStepAttrs*>(a.attrs);
  if (a.inputs.empty()) return;
  visit_float_dtype(a.outputs[0].dtype(), "SgdStep", [&]<class T>() { sgd_all<T>(a, at); });
}

// ---- GradScaler's unscale: g *= inv_scale; *found = 1 when some g was inf or NaN before.
template <class T>
struct UnscaleList {
  Chunks chunks;
  T* g[kMaxTensors];
};

template <class T, class C>
__global__ void unscale_kernel(const __grid_constant__ UnscaleList<T> l, C inv, float* found) {
  int64_t begin, end;
  T* __restrict__ g = l.g[block_tensor(l.chunks, begin, end)];
  bool bad = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const C v = static_cast<C>(g[i]);
    bad = bad || !isfinite(v);
    g[i] = static_cast<T>(mul(v, inv));
  }
  if (bad) *found = 1.0f;  // every writer writes the same value
}

void amp_unscale(KernelArgs& a) {
  const auto& at = *static_cast<const AmpUnscaleAttrs*>(a.attrs);
  const std::span<const Tensor> grads(a.outputs.data(), a.outputs.size() - 1);
  float* found = static_cast<float*>(a.outputs.back().data_ptr());
  if (grads.empty()) return;
  visit_float_dtype(grads[0].dtype(), "AmpUnscale", [&]<class T>() {
    using C = compute_t<T>;
    for_each_list<UnscaleList<T>>(
        grads, "AmpUnscale", [&](UnscaleList<T>& l, int k, size_t t) { l.g[k] = static_cast<T*>(grads[t].data_ptr()); },
        [&](const UnscaleList<T>& l, unsigned blocks) {
          unscale_kernel<T, C><<<blocks, kThreads, 0, stream_of(a)>>>(l, static_cast<C>(at.inv_scale), found);
        });
  });
}

// ---- gradient clipping: the norm of every tensor of a list (each block folds one chunk into a
// partial, then one thread per tensor folds its chunks' partials in order: the CPU kernel's
// chunks and order), and every tensor scaled by one number on the device.
template <class T>
struct NormList {
  Chunks chunks;
  const T* x[kMaxTensors];
  int64_t out[kMaxTensors];  // where each tensor's norm goes (empty tensors take no entry)
};

struct NormMerge {  // NormFold's merge as a binary functor for block_reduce
  int kind;
  __device__ double operator()(double a, double b) const {
    if (kind == NormFold<float>::kMaxAbs) return (a > b || a != a) ? a : b;
    return a + b;
  }
};

template <class T>
__global__ void norm_chunks_kernel(const __grid_constant__ NormList<T> l, NormFold<T> fold, double* partial) {
  __shared__ double shared[kThreads / kWarp];
  int64_t begin, end;
  const T* __restrict__ x = l.x[block_tensor(l.chunks, begin, end)];
  double s = fold.init();
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s = fold.step(s, static_cast<compute_t<T>>(x[i]), i);
  s = block_reduce(s, NormMerge{fold.kind}, fold.init(), shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

template <class T, class R>
__global__ void norm_finish_kernel(const __grid_constant__ NormList<T> l, NormFold<T> fold, const double* partial,
                                   R* norms) {
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= l.chunks.count) return;
  double s = fold.init();
  for (int64_t c = l.chunks.first_chunk[t]; c < l.chunks.first_chunk[t + 1]; ++c) s = fold.merge(s, partial[c]);
  norms[l.out[t]] = static_cast<R>(fold.finish(s));
}

void foreach_norm(KernelArgs& a) {
  const auto& at = *static_cast<const ReduceAttrs*>(a.attrs);
  Tensor& norms = a.outputs[0];
  if (a.inputs.empty()) return;
  // Empty tensors take no chunk: their norms are the fold's empty value, written first.
  KILN_CUDA_CHECK(cudaMemsetAsync(norms.data_ptr(), 0, norms.nbytes(), stream_of(a)));
  visit_float_dtype(a.inputs[0].dtype(), "ForeachNorm", [&]<class T>() {
    const NormFold<T> fold = NormFold<T>::make(at);
    // One buffer for the partials of every launch (each uses it from 0; the launches are
    // ordered on the stream), sized for all chunks, more than any one launch has.
    int64_t blocks = 0;
    for (const Tensor& t : a.inputs) blocks += (t.numel() + kChunk - 1) / kChunk;
    const Tensor partial = make_empty({std::max<int64_t>(blocks, 1)}, kFloat64, norms.device());
    for_each_list<NormList<T>>(
        a.inputs, "ForeachNorm",
        [&](NormList<T>& l, int k, size_t t) {
          l.x[k] = static_cast<const T*>(a.inputs[t].data_ptr());
          l.out[k] = static_cast<int64_t>(t);
        },
        [&](const NormList<T>& l, unsigned grid) {
          double* p = partial.data_ptr<double>();
          norm_chunks_kernel<T><<<grid, kThreads, 0, stream_of(a)>>>(l, fold, p);
          KILN_CUDA_LAUNCHED("ForeachNorm");
          visit_float_dtype(norms.dtype(), "ForeachNorm", [&]<class R>() {
            norm_finish_kernel<T, R><<<1, kMaxTensors, 0, stream_of(a)>>>(l, fold, p, norms.data_ptr<R>());
          });
        });
  });
}

template <class T>
struct ScaleList {
  Chunks chunks;
  T* x[kMaxTensors];
};

template <class T, class C, class S>
__global__ void scale_kernel(const __grid_constant__ ScaleList<T> l, const S* scale) {
  int64_t begin, end;
  T* __restrict__ x = l.x[block_tensor(l.chunks, begin, end)];
  const C s = static_cast<C>(*scale);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) x[i] = static_cast<T>(mul(static_cast<C>(x[i]), s));
}

void foreach_mul(KernelArgs& a) {
  const std::span<const Tensor> xs(a.outputs.data(), a.outputs.size());
  if (xs.empty()) return;
  visit_float_dtype(a.inputs[0].dtype(), "ForeachMul", [&]<class S>() {
    const S* scale = a.inputs[0].data_ptr<S>();
    visit_float_dtype(xs[0].dtype(), "ForeachMul", [&]<class T>() {
      for_each_list<ScaleList<T>>(
          xs, "ForeachMul", [&](ScaleList<T>& l, int k, size_t t) { l.x[k] = static_cast<T*>(xs[t].data_ptr()); },
          [&](const ScaleList<T>& l, unsigned blocks) {
            scale_kernel<T, compute_t<T>, S><<<blocks, kThreads, 0, stream_of(a)>>>(l, scale);
          });
    });
  });
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL(Op::AdamStep, kCuda, adam_step);
KILN_REGISTER_KERNEL(Op::SgdStep, kCuda, sgd_step);
KILN_REGISTER_KERNEL(Op::AmpUnscale, kCuda, amp_unscale);
KILN_REGISTER_KERNEL(Op::ForeachNorm, kCuda, foreach_norm);
KILN_REGISTER_KERNEL(Op::ForeachMul, kCuda, foreach_mul);

}  // namespace
}  // namespace kiln::backend::cuda
