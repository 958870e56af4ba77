// CUDA kernels for cross_entropy on [N, C] logits with int64 class targets (the contract of
// backend/cpu/loss.cpp): per row the max and log-sum-exp in float (double for double), the loss and
// the row's max and log-sum (stats [N, 2]); the backward writes grad * w[t] * (softmax - onehot)
// directly. A target outside [0, C) that is not ignore_index is recorded for the host
// (index_check.h) and its row gives NaN.
#include <cmath>

#include "backend/cuda/device/index_error.cuh"
#include "backend/cuda/device/row_group.cuh"
#include "backend/cuda/float_math.h"

namespace kiln::backend::cuda {
namespace {

template <class T, bool kWarpRows>
__global__ void cross_entropy_forward_kernel(const T* __restrict__ x, const int64_t* __restrict__ target,
                                             const T* __restrict__ w, T* __restrict__ loss,
                                             compute_t<T>* __restrict__ stats, int64_t rows, int64_t c,
                                             int64_t ignore_index, IndexErrorSlot* slot) {
  using A = compute_t<T>;
  __shared__ A shared[32];
  const RowGroup<kWarpRows> grp;
  for (int64_t r = grp.first_row(); r < rows; r += grp.row_stride()) {
    const int64_t t = target[r];  // the same for the whole group: the branches below are uniform
    if (t == ignore_index) {
      if (grp.lane() == 0) {
        loss[r] = T(0);
        stats[2 * r] = stats[2 * r + 1] = A(0);
      }
      continue;
    }
    if (t < 0 || t >= c) {
      if (grp.lane() == 0) {
        record_index_error(slot, IndexOp::CrossEntropy, t, c, r);
        loss[r] = static_cast<T>(A(NAN));
        stats[2 * r] = stats[2 * r + 1] = A(NAN);
      }
      continue;
    }
    const T* xr = x + r * c;
    A m = -INFINITY;
    for (int64_t i = grp.lane(); i < c; i += grp.size()) m = MaxOp{}(m, static_cast<A>(xr[i]));  // NaN wins
    m = grp.reduce(m, MaxOp{}, A(-INFINITY), shared);
    // All -inf: the sum is 0 and the loss NaN; a +inf logit stays, so that exp(inf - inf) makes the
    // loss NaN, as torch's cross_entropy (through log_softmax) gives.
    if (m == A(-INFINITY)) m = A(0);
    A s = 0;
    for (int64_t i = grp.lane(); i < c; i += grp.size()) s += dev_exp(static_cast<A>(xr[i]) - m);
    s = grp.reduce(s, SumOp{}, A(0), shared);
    if (grp.lane() == 0) {
      // log(sum) - (x_t - max), as the CPU's: (max + log(sum)) - x_t rounded log(sum) at the
      // size of the largest logit.
      const A log_sum = dev_log(s);
      stats[2 * r] = m;
      stats[2 * r + 1] = log_sum;
      loss[r] = static_cast<T>((log_sum - (static_cast<A>(xr[t]) - m)) * (w ? static_cast<A>(w[t]) : A(1)));
    }
  }
}

// grad_logits = scale * exp(x - max) / sum (not exp(x - lse): see the CPU kernel), then scale
// subtracted at the target (from the value already rounded to T, as the CPU kernel does), scale =
// grad[r] * w[t]; zero for ignored rows.
template <class T, bool kWarpRows>
__global__ void cross_entropy_backward_kernel(const T* __restrict__ grad, const T* __restrict__ x,
                                              const int64_t* __restrict__ target,
                                              const compute_t<T>* __restrict__ stats, const T* __restrict__ w,
                                              T* __restrict__ gx, int64_t rows, int64_t c, int64_t ignore_index,
                                              IndexErrorSlot* slot) {
  using A = compute_t<T>;
  const RowGroup<kWarpRows> grp;
  for (int64_t r = grp.first_row(); r < rows; r += grp.row_stride()) {
    const int64_t t = target[r];
    T* out = gx + r * c;
    if (t == ignore_index || t < 0 || t >= c) {
      const bool bad = t != ignore_index;
      if (bad && grp.lane() == 0) record_index_error(slot, IndexOp::CrossEntropy, t, c, r);
      for (int64_t i = grp.lane(); i < c; i += grp.size()) out[i] = static_cast<T>(bad ? A(NAN) : A(0));
      continue;
    }
    const T* xr = x + r * c;
    const A scale = static_cast<A>(grad[r]) * (w ? static_cast<A>(w[t]) : A(1));
    const A m = stats[2 * r], inv_sum_scale = dev_exp(-stats[2 * r + 1]) * scale;
    for (int64_t i = grp.lane(); i < c; i += grp.size()) {
      T v = static_cast<T>(dev_exp(static_cast<A>(xr[i]) - m) * inv_sum_scale);
      if (i == t) v = static_cast<T>(static_cast<A>(v) - scale);
      out[i] = v;
    }
  }
}

// {logits [N, C], target [N], weight [C]?} -> {loss [N], stats [N, 2]}
void cross_entropy_forward(KernelArgs& a) {
  const auto& at = *static_cast<const CrossEntropyAttrs*>(a.attrs);
  const Tensor& x = a.inputs[0];
  const int64_t n = x.size(0), c = x.size(1);
  if (n == 0) return;
  IndexErrorSlot* slot = index_error_slot(x.device().index);
  visit_float_dtype(x.dtype(), "cross_entropy", [&]<class T>() {
    using A = compute_t<T>;
    const T* w = at.has_weight ? a.inputs[2].data_ptr<T>() : nullptr;
    auto launch = [&]<bool kWarpRows>() {
      cross_entropy_forward_kernel<T, kWarpRows><<<row_blocks(n, kWarpRows), kThreads, 0, stream_of(a)>>>(
          x.data_ptr<T>(), a.inputs[1].data_ptr<int64_t>(), w, a.outputs[0].data_ptr<T>(),
          a.outputs[1].data_ptr<A>(), n, c, at.ignore_index, slot);
    };
    if (c <= kWarpRowMax) launch.template operator()<true>();
    else launch.template operator()<false>();
  });
  KILN_CUDA_LAUNCHED("cross_entropy");
}

// {grad [N], logits, target, stats, weight?} -> {grad_logits [N, C]}
void cross_entropy_backward(KernelArgs& a) {
  const auto& at = *static_cast<const CrossEntropyAttrs*>(a.attrs);
  const Tensor& x = a.inputs[1];
  const int64_t n = x.size(0), c = x.size(1);
  if (n == 0) return;
  IndexErrorSlot* slot = index_error_slot(x.device().index);
  visit_float_dtype(x.dtype(), "cross_entropy_backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* w = at.has_weight ? a.inputs[4].data_ptr<T>() : nullptr;
    auto launch = [&]<bool kWarpRows>() {
      cross_entropy_backward_kernel<T, kWarpRows><<<row_blocks(n, kWarpRows), kThreads, 0, stream_of(a)>>>(
          a.inputs[0].data_ptr<T>(), x.data_ptr<T>(), a.inputs[2].data_ptr<int64_t>(), a.inputs[3].data_ptr<A>(), w,
          a.outputs[0].data_ptr<T>(), n, c, at.ignore_index, slot);
    };
    if (c <= kWarpRowMax) launch.template operator()<true>();
    else launch.template operator()<false>();
  });
  KILN_CUDA_LAUNCHED("cross_entropy_backward");
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL(Op::CrossEntropy, kCuda, cross_entropy_forward);
KILN_REGISTER_KERNEL(Op::CrossEntropyBackward, kCuda, cross_entropy_backward);

}  // namespace
}  // namespace kiln::backend::cuda
