// The geometry of an elementwise op over N operands, computed on the host: the CPU loops run it
// with threads, the CUDA kernels with a thread per element.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::backend {

inline constexpr int kMaxLoopDims = 25;
// The geometry of an elementwise op over N operands (operand 0 is the output): the output's
// shape with the inputs broadcast to it, size-1 dims dropped and adjacent dims merged where
// every operand allows, innermost dim last. Strides are in bytes.
template <int N>
struct LoopPlan {
  int ndim = 0;
  int64_t numel = 1;
  int64_t sizes[kMaxLoopDims];
  int64_t strides[kMaxLoopDims][N];
  char* base[N];
};

template <int N>
LoopPlan<N> make_plan(const std::array<const Tensor*, N>& ops) {
  LoopPlan<N> p;
  const Tensor& out = *ops[0];
  const int64_t rank = out.dim();
  KILN_CHECK(rank <= kMaxLoopDims, "elementwise", "tensors of rank ", rank, " exceed the limit of ",
             kMaxLoopDims);
  p.numel = out.numel();
  for (int k = 0; k < N; ++k) p.base[k] = static_cast<char*>(ops[k]->data_ptr());
  // Walk dims from the output's largest stride to its smallest, so a dense output in any dim
  // order (channels-last, transposed) becomes one contiguous run, as PyTorch's TensorIterator does.
  int64_t order[kMaxLoopDims];
  int nd = 0;
  for (int64_t d = 0; d < rank; ++d)
    if (out.shape()[d] != 1) order[nd++] = d;
  std::stable_sort(order, order + nd, [&](int64_t a, int64_t b) { return out.strides()[a] > out.strides()[b]; });
  for (int i = 0; i < nd; ++i) {
    const int64_t d = order[i];
    int64_t size = out.shape()[d];
    int64_t st[N];
    for (int k = 0; k < N; ++k) {
      const Tensor& t = *ops[k];
      int64_t dk = d - (rank - t.dim());
      st[k] = (dk < 0 || t.shape()[dk] == 1) ? 0 : t.strides()[dk] * static_cast<int64_t>(t.element_size());
    }
    if (p.ndim > 0) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && p.strides[p.ndim - 1][k] == st[k] * size;
      if (merge) {
        p.sizes[p.ndim - 1] *= size;
        for (int k = 0; k < N; ++k) p.strides[p.ndim - 1][k] = st[k];
        continue;
      }
    }
    p.sizes[p.ndim] = size;
    for (int k = 0; k < N; ++k) p.strides[p.ndim][k] = st[k];
    ++p.ndim;
  }
  return p;
}

}  // namespace kiln::backend
