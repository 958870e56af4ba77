// CUDA kernels for softmax, log_softmax and masked softmax over one dim of a contiguous tensor,
// and the softmax backward passes. The tensor is viewed as [outer, n, inner] around the dim;
// each of the outer * inner rows (n elements, inner apart) is reduced by a group of threads
// (launch_shape.h's ThreadGroups): lanes along the row when it is contiguous (a warp,
// or a block for long rows), lanes across neighbouring rows when it is strided (softmax over
// the channels of NCHW). Math in float for 16-bit and float32, double for float64, with the
// CPU kernels' rules for NaN, infinities and fully masked rows (backend/cpu/softmax.cpp). The
// rows, their mask offsets and the split of a block into rows are in softmax_plan.h (plain C++,
// which the CPU tests run).
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/cuda/device/block_reduce.cuh"
#include "backend/cuda/float_math.h"
#include "backend/cuda/softmax_plan.h"

namespace kiln::backend::cuda {
namespace {

// M: void (plain softmax), bool (true = keep) or T (added to x).
template <class T, class M, bool kLog>
__global__ void __launch_bounds__(1024)
    softmax_forward(const T* x, T* y, const M* mask, const __grid_constant__ MaskGeom mg, RowGeom g, ThreadGroups tg) {
  using A = compute_t<T>;
  constexpr bool kMasked = !std::is_void_v<M>;
  constexpr A kInf = std::numeric_limits<A>::infinity();
  __shared__ A shared[1024];
  const int slot = tg.slot(), lane = tg.lane();
  // The trip count depends on the block only, so group_reduce's barriers are uniform.
  for (int64_t rb = blockIdx.x; rb < g.row_blocks; rb += gridDim.x) {
    const int64_t r = rb * tg.slots + slot;
    const bool live = r < g.rows;
    const int64_t base = live ? g.row_base(r) : 0;
    int64_t moff = 0;
    if constexpr (kMasked) moff = live ? mask_offset(mg, r) : 0;
    auto score = [&](int64_t i) -> A {
      A v = static_cast<A>(x[base + i * g.inner]);
      if constexpr (std::is_same_v<M, bool>) v = mask[moff + i * mg.step] ? v : -kInf;
      else if constexpr (kMasked) v += static_cast<A>(mask[moff + i * mg.step]);
      return v;
    };
    A mx = -kInf;
    if (live)
      for (int64_t i = lane; i < g.n; i += tg.group) {
        const A v = score(i);
        mx = (v > mx || v != v) ? v : mx;
      }
    mx = group_reduce(mx, MaxOp{}, -kInf, tg, shared);  // NaN wins
    // A fully masked row gives zeros; a -inf max is shifted to 0 so that exp stays defined. A
    // +inf score makes the row NaN (exp(inf - inf)), masked or not, as on the CPU and in torch.
    const bool dead = kMasked && mx == -kInf;
    if (mx == -kInf) mx = A(0);
    A sum = 0;
    if (live)
      for (int64_t i = lane; i < g.n; i += tg.group) sum += dev_exp(score(i) - mx);
    sum = group_reduce(sum, SumOp{}, A(0), tg, shared);
    if (!live) continue;
    if constexpr (kLog) {
      const A log_sum = dev_log(sum);  // (x - max) - log(sum), as the CPU's row_shift
      for (int64_t i = lane; i < g.n; i += tg.group) {
        const int64_t k = base + i * g.inner;
        y[k] = static_cast<T>((static_cast<A>(x[k]) - mx) - log_sum);
      }
    } else {
      const A inv = A(1) / sum;
      for (int64_t i = lane; i < g.n; i += tg.group)
        y[base + i * g.inner] = dead ? T(0) : static_cast<T>(dev_exp(score(i) - mx) * inv);
    }
  }
}

// grad_x from grad_y and the forward output y: y * (gy - sum(gy * y)), or for log_softmax
// gy - exp(y) * sum(gy).
template <class T, bool kLog>
__global__ void __launch_bounds__(1024)
    softmax_backward(const T* gy, const T* y, T* gx, RowGeom g, ThreadGroups tg) {
  using A = compute_t<T>;
  __shared__ A shared[1024];
  const int slot = tg.slot(), lane = tg.lane();
  for (int64_t rb = blockIdx.x; rb < g.row_blocks; rb += gridDim.x) {
    const int64_t r = rb * tg.slots + slot;
    const bool live = r < g.rows;
    const int64_t base = live ? g.row_base(r) : 0;
    A dot = 0;
    if (live)
      for (int64_t i = lane; i < g.n; i += tg.group) {
        const int64_t k = base + i * g.inner;
        dot += kLog ? static_cast<A>(gy[k]) : static_cast<A>(gy[k]) * static_cast<A>(y[k]);
      }
    dot = group_reduce(dot, SumOp{}, A(0), tg, shared);
    if (!live) continue;
    for (int64_t i = lane; i < g.n; i += tg.group) {
      const int64_t k = base + i * g.inner;
      const A yv = static_cast<A>(y[k]), gv = static_cast<A>(gy[k]);
      gx[k] = static_cast<T>(kLog ? gv - dev_exp(yv) * dot : yv * (gv - dot));
    }
  }
}

template <bool kLog>
void softmax(KernelArgs& a) {
  const Tensor &x = a.inputs[0], &y = a.outputs[0];
  if (x.numel() == 0) return;
  RowGeom g = rows_of(x, static_cast<const DimAttrs*>(a.attrs)->dim);
  ThreadGroups tg;
  const int threads = plan_rows(g, tg);
  visit_float_dtype(x.dtype(), kLog ? "log_softmax" : "softmax", [&]<class T>() {
    softmax_forward<T, void, kLog><<<grid_for(g), threads, 0, stream_of(a)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), nullptr, MaskGeom{}, g, tg);
  });
  KILN_CUDA_LAUNCHED(kLog ? "log_softmax" : "softmax");
}

template <bool kLog>
void softmax_grad(KernelArgs& a) {
  const Tensor &gy = a.inputs[0], &y = a.inputs[1], &gx = a.outputs[0];
  if (y.numel() == 0) return;
  RowGeom g = rows_of(y, static_cast<const DimAttrs*>(a.attrs)->dim);
  ThreadGroups tg;
  const int threads = plan_rows(g, tg);
  visit_float_dtype(y.dtype(), "softmax_backward", [&]<class T>() {
    softmax_backward<T, kLog><<<grid_for(g), threads, 0, stream_of(a)>>>(
        static_cast<const T*>(gy.data_ptr()), static_cast<const T*>(y.data_ptr()), static_cast<T*>(gx.data_ptr()), g, tg);
  });
  KILN_CUDA_LAUNCHED("softmax_backward");
}

// x contiguous, mask expanded to x's shape (any strides), y contiguous.
void masked_softmax(KernelArgs& a) {
  const Tensor &x = a.inputs[0], &mask = a.inputs[1], &y = a.outputs[0];
  if (x.numel() == 0) return;
  const int64_t dim = static_cast<const MaskedSoftmaxAttrs*>(a.attrs)->dim;
  RowGeom g = rows_of(x, dim);
  ThreadGroups tg;
  const int threads = plan_rows(g, tg);
  const MaskGeom mg = mask_geom(x, mask, dim);
  visit_float_dtype(x.dtype(), "masked_softmax", [&]<class T>() {
    auto launch = [&]<class M>() {
      softmax_forward<T, M, false><<<grid_for(g), threads, 0, stream_of(a)>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), static_cast<const M*>(mask.data_ptr()),
          mg, g, tg);
    };
    if (mask.dtype() == kBool) launch.template operator()<bool>();
    else if (mask.dtype() == x.dtype()) launch.template operator()<T>();
    else KILN_FAIL("masked_softmax", "mask must be bool or ", x.dtype(), ", got ", mask.dtype());
  });
  KILN_CUDA_LAUNCHED("masked_softmax");
}

// The mask's geometry has fixed arrays: higher ranks run on the CPU.
bool mask_fits(const KernelArgs& a) { return a.inputs[0].dim() <= kMaxLoopDims; }

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL(Op::Softmax, kCuda, softmax<false>);
KILN_REGISTER_KERNEL(Op::LogSoftmax, kCuda, softmax<true>);
KILN_REGISTER_KERNEL(Op::SoftmaxBackward, kCuda, softmax_grad<false>);
KILN_REGISTER_KERNEL(Op::LogSoftmaxBackward, kCuda, softmax_grad<true>);
KILN_REGISTER_KERNEL_IF(Op::MaskedSoftmax, kCuda, masked_softmax, mask_fits);

}  // namespace
}  // namespace kiln::backend::cuda
