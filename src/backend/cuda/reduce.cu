// CUDA kernels for the reductions: sum/mean, prod, amax/amin, all/any, var, logsumexp, norm and
// max/min with indices, over any set of dims of an input with any strides. The host splits the
// dims into kept (one per output) and reduced groups, as the CPU's plan does; a block holds
// `slots` outputs with `group` threads each (launch_shape.h's ThreadGroups), and a long
// reduction over few outputs is also split across blocks, whose partial states a second kernel
// merges. The folds themselves are in reduce_folds.h; the geometry, the offsets and the launch
// shape in reduce_plan.h (plain C++, which the CPU tests run).
#include <algorithm>

#include "backend/cuda/device/block_reduce.cuh"
#include "backend/cuda/reduce_folds.h"
#include "backend/cuda/reduce_plan.h"
#include "core/tensor_util.h"

namespace kiln::backend::cuda {
namespace {

template <class F>
struct MergeOp {
  F f;
  __device__ __forceinline__ typename F::State operator()(typename F::State a, typename F::State b) const {
    return f.merge(a, b);
  }
};

// Block (x, y) folds outputs [x * slots, (x + 1) * slots) (grid-striding over x) over reduced
// indices y * group + lane, stepping by group * gridDim.y. With `partial`, it leaves its states
// in partial[y * outer + o] for reduce_finish; otherwise it stores the results.
template <class F>
__global__ void __launch_bounds__(kThreads)
    reduce_kernel(const __grid_constant__ ReduceGeom g, const F f, const typename F::In* in, ReduceOut out,
                  typename F::State* partial, ThreadGroups tg, int64_t out_blocks) {
  using S = typename F::State;
  using C = compute_t<typename F::In>;
  __shared__ S shared[kThreads];
  const int slot = tg.slot(), lane = tg.lane();
  const int64_t first = static_cast<int64_t>(blockIdx.y) * tg.group + lane;
  const int64_t step = static_cast<int64_t>(gridDim.y) * tg.group;
  // The loop's trip count depends on the block only, so group_reduce's barriers are uniform.
  for (int64_t ob = blockIdx.x; ob < out_blocks; ob += gridDim.x) {
    const int64_t o = ob * tg.slots + slot;
    S acc = f.init();
    int64_t in_off = 0, out_off = 0;
    if (o < g.outer) {
      kept_offsets(g, o, in_off, out_off);
      for (int64_t r = first; r < g.inner; r += step)
        acc = f.step(acc, static_cast<C>(in[in_off + reduced_offset(g, r)]), r);
    }
    acc = group_reduce(acc, MergeOp<F>{f}, f.init(), tg, shared);
    if (lane == 0 && o < g.outer) {
      if (partial != nullptr) partial[blockIdx.y * g.outer + o] = acc;
      else f.store(acc, g.inner, out, out_off);
    }
  }
}

// One warp per output merges its `splits` partial states and stores the result.
template <class F>
__global__ void __launch_bounds__(kThreads)
    reduce_finish(const __grid_constant__ ReduceGeom g, const F f, const typename F::State* partial, int64_t splits,
                  ReduceOut out) {
  using S = typename F::State;
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  // o is the same in every lane of a warp, so the whole warp takes part in warp_reduce.
  for (int64_t o = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; o < g.outer; o += warps) {
    S acc = f.init();
    for (int64_t s = lane; s < splits; s += kWarp) acc = f.merge(acc, partial[s * g.outer + o]);
    acc = warp_reduce(acc, MergeOp<F>{f});
    if (lane == 0) {
      int64_t in_off, out_off;
      kept_offsets(g, o, in_off, out_off);
      f.store(acc, g.inner, out, out_off);
    }
  }
}

template <class F>
void launch_reduce(const KernelArgs& a, const ReduceGeom& g, const F& f, const char* name) {
  using S = typename F::State;
  const Tensor& in = a.inputs[0];
  const ReduceOut out{a.outputs[0].data_ptr(),
                      a.outputs.size() > 1 ? static_cast<int64_t*>(a.outputs[1].data_ptr()) : nullptr};
  const auto* x = static_cast<const typename F::In*>(in.data_ptr());
  const LaunchShape c = launch_shape(g);
  cudaStream_t stream = stream_of(a);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(c.out_blocks, int64_t{1} << 20)),
                  static_cast<unsigned>(c.splits));
  if (c.splits == 1) {
    reduce_kernel<F><<<grid, kThreads, 0, stream>>>(g, f, x, out, nullptr, c.tg, c.out_blocks);
    KILN_CUDA_LAUNCHED(name);
    return;
  }
  // Partial states, freed in stream order when `ws` goes out of scope.
  Tensor ws = make_empty(Shape{c.splits * g.outer * static_cast<int64_t>(sizeof(S))}, kUInt8, in.device());
  S* partial = static_cast<S*>(ws.data_ptr());
  reduce_kernel<F><<<grid, kThreads, 0, stream>>>(g, f, x, out, partial, c.tg, c.out_blocks);
  KILN_CUDA_LAUNCHED(name);
  reduce_finish<F><<<blocks_for(g.outer * kWarp), kThreads, 0, stream>>>(g, f, partial, c.splits, out);
  KILN_CUDA_LAUNCHED(name);
}

// Runs Fold<T> for the input's dtype T (floating dtypes only when kFloatOnly).
template <template <class> class Fold, bool kFloatOnly>
void reduce(KernelArgs& a, const char* name) {
  const Tensor &in = a.inputs[0], &out = a.outputs[0];
  const auto& attrs = *static_cast<const ReduceAttrs*>(a.attrs);
  const ReduceGeom g = make_geom(in, out, attrs.dims_mask);
  if (g.outer == 0) return;  // no outputs (an empty reduction with outputs still stores init)
  auto body = [&]<class T>() { launch_reduce(a, g, Fold<T>::make(attrs), name); };
  if constexpr (kFloatOnly) visit_float_dtype(in.dtype(), name, body);
  else visit_dtype(in.dtype(), name, body);
}

// Ranks above the plan's fixed arrays (25 dims) run on the CPU.
bool fits(const KernelArgs& a) { return a.inputs[0].dim() <= kMaxReduceDims; }

template <class T> using Sum = SumFold<T, false>;
template <class T> using Prod = SumFold<T, true>;
template <class T> using Amax = ExtremeFold<T, true>;
template <class T> using Amin = ExtremeFold<T, false>;
template <class T> using All = LogicalFold<T, true>;
template <class T> using Any = LogicalFold<T, false>;
template <class T> using MaxIndex = ExtremeIndexFold<T, true>;
template <class T> using MinIndex = ExtremeIndexFold<T, false>;

void sum(KernelArgs& a) { reduce<Sum, false>(a, "sum"); }
void prod(KernelArgs& a) { reduce<Prod, false>(a, "prod"); }
void amax(KernelArgs& a) { reduce<Amax, false>(a, "amax"); }
void amin(KernelArgs& a) { reduce<Amin, false>(a, "amin"); }
void all(KernelArgs& a) { reduce<All, false>(a, "all"); }
void any(KernelArgs& a) { reduce<Any, false>(a, "any"); }
void var(KernelArgs& a) { reduce<VarFold, true>(a, "var"); }
void logsumexp(KernelArgs& a) { reduce<LogSumExpFold, true>(a, "logsumexp"); }
void norm(KernelArgs& a) { reduce<NormFold, true>(a, "norm"); }
void max_with_index(KernelArgs& a) { reduce<MaxIndex, false>(a, "max"); }
void min_with_index(KernelArgs& a) { reduce<MinIndex, false>(a, "min"); }

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL_IF(Op::Sum, kCuda, sum, fits);
KILN_REGISTER_KERNEL_IF(Op::Prod, kCuda, prod, fits);
KILN_REGISTER_KERNEL_IF(Op::Amax, kCuda, amax, fits);
KILN_REGISTER_KERNEL_IF(Op::Amin, kCuda, amin, fits);
KILN_REGISTER_KERNEL_IF(Op::All, kCuda, all, fits);
KILN_REGISTER_KERNEL_IF(Op::Any, kCuda, any, fits);
KILN_REGISTER_KERNEL_IF(Op::Var, kCuda, var, fits);
KILN_REGISTER_KERNEL_IF(Op::LogSumExp, kCuda, logsumexp, fits);
KILN_REGISTER_KERNEL_IF(Op::Norm, kCuda, norm, fits);
KILN_REGISTER_KERNEL_IF(Op::MaxWithIndex, kCuda, max_with_index, fits);
KILN_REGISTER_KERNEL_IF(Op::MinWithIndex, kCuda, min_with_index, fits);

}  // namespace
}  // namespace kiln::backend::cuda
