// CPU kernels for index_select, gather and scatter_add (indices are checked here, where they are
// read), and the positions of a mask's true elements (nonzero's).
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

// Negative indices are errors here, as in PyTorch's index_select, gather and scatter_add.
inline int64_t checked_index(int64_t i, int64_t size, const char* where) {
  KILN_CHECK(i >= 0 && i < size, where, "index ", i, " is out of range for a dim of size ", size);
  return i;
}

// Offset in elements of the element at the flat row-major position `flat` of shape/strides.
inline int64_t strided_offset(int64_t flat, const Shape& shape, const Shape& strides) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    off += (flat % shape[d]) * strides[d];
    flat /= shape[d];
  }
  return off;
}

// Index (row-major, its own shape) viewed as [outer, n, inner] around dim, and where one tensor's
// elements at those coordinates are: outer_offset(o) + i * stride + inner_off[k] (a 0-d tensor:
// everything at 0).
struct Walk {
  int64_t outer = 1, n = 1, inner = 1, stride = 0;
  Shape outer_shape, outer_strides;
  std::vector<int64_t> inner_off;
  int64_t outer_offset(int64_t o) const { return strided_offset(o, outer_shape, outer_strides); }
};
Walk walk(const Tensor& t, const Tensor& index, int64_t dim) {
  Walk w;
  Shape inner_shape, inner_strides;
  for (int64_t d = 0; d < index.dim(); ++d) {
    const int64_t size = index.shape()[d], stride = t.dim() ? t.strides()[d] : 0;
    if (d < dim) {
      w.outer *= size;
      w.outer_shape.push_back(size);
      w.outer_strides.push_back(stride);
    } else if (d == dim) {
      w.n = size;
      w.stride = stride;
    } else {
      w.inner *= size;
      inner_shape.push_back(size);
      inner_strides.push_back(stride);
    }
  }
  w.inner_off.resize(static_cast<size_t>(w.inner));
  for (int64_t k = 0; k < w.inner; ++k) w.inner_off[k] = strided_offset(k, inner_shape, inner_strides);
  return w;
}

// Every index in [0, size), checked before any thread starts (an error cannot leave a parallel
// region).
void check_indices(const int64_t* idx, int64_t m, int64_t size, const char* where) {
  for (int64_t p = 0; p < m; ++p) checked_index(idx[p], size, where);
}

// x contiguous, index 1-D int64 contiguous, out contiguous.
void index_select(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const Tensor& index = a.inputs[1];
  const Tensor& out = a.outputs[0];
  const int64_t dim = static_cast<const DimAttrs*>(a.attrs)->dim;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  const int64_t n = x.dim() == 0 ? 1 : x.shape()[dim];
  const int64_t m = index.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  std::vector<int64_t> rows(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) rows[j] = checked_index(idx[j], n, "index_select");
  const size_t es = x.element_size();
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(outer * m, std::max<int64_t>(1, 65536 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t o = r / m, j = r % m;
      std::memcpy(dst + r * inner * es, src + (o * n + rows[j]) * inner * es, inner * es);
    }
  });
}

// out[p] = x[p with coordinate dim replaced by index[p]]; out and index contiguous. Rows of the
// index's [outer * n, inner] view in parallel (each writes its own part of out).
void gather(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const Tensor& index = a.inputs[1];
  const Tensor& out = a.outputs[0];
  const int64_t dim = static_cast<const DimAttrs*>(a.attrs)->dim;
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  check_indices(idx, index.numel(), x.dim() ? x.shape()[dim] : 1, "gather");
  const Walk w = walk(x, index, dim);
  visit_dtype(x.dtype(), "gather", [&]<class T>() {
    const T* src = static_cast<const T*>(x.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    parallel_for(w.outer * w.n, std::max<int64_t>(1, 32768 / std::max<int64_t>(w.inner, 1)), [&](int64_t b, int64_t e) {
      int64_t o = b / w.n, i = b % w.n;  // row r = o * n + i: the outer offset once per o
      const T* base = src + w.outer_offset(o);
      for (int64_t r = b; r < e; ++r) {
        const int64_t* ir = idx + r * w.inner;
        T* dr = dst + r * w.inner;
        for (int64_t k = 0; k < w.inner; ++k) dr[k] = base[ir[k] * w.stride + w.inner_off[k]];
        if (++i == w.n && r + 1 < e) i = 0, base = src + w.outer_offset(++o);
      }
    });
  });
}

// out (already a copy of self, contiguous) [p with dim replaced by index[p]] += src[p]. Elements
// at different outer or inner coordinates never meet, so (outer, block of inner) pairs run in
// parallel, each adding along dim in index order: the bits of one sequential pass.
void scatter_add(KernelArgs& a) {
  const Tensor& index = a.inputs[0];
  const Tensor& src = a.inputs[1];
  const Tensor& out = a.outputs[0];
  const auto& attrs = *static_cast<const ScatterAttrs*>(a.attrs);
  const int64_t dim = attrs.dim;
  const bool overwrite = attrs.overwrite;
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  check_indices(idx, index.numel(), out.dim() ? out.shape()[dim] : 1, "scatter_add");
  const Walk wo = walk(out, index, dim), ws = walk(src, index, dim);
  constexpr int64_t kBlock = 1024;
  const int64_t blocks = (wo.inner + kBlock - 1) / kBlock;
  visit_dtype(out.dtype(), "scatter_add", [&]<class T>() {
    using A = compute_t<T>;
    const T* s = static_cast<const T*>(src.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(wo.n * std::min(wo.inner, kBlock), 1));
    parallel_for(wo.outer * blocks, grain, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / blocks, k0 = (t % blocks) * kBlock, k1 = std::min(wo.inner, k0 + kBlock);
        T* ob = dst + wo.outer_offset(o);
        const T* sb = s + ws.outer_offset(o);
        for (int64_t i = 0; i < wo.n; ++i) {
          const int64_t* ir = idx + (o * wo.n + i) * wo.inner;
          for (int64_t k = k0; k < k1; ++k) {
            T& d = ob[ir[k] * wo.stride + wo.inner_off[k]];
            const T v = sb[i * ws.stride + ws.inner_off[k]];
            d = overwrite ? v : static_cast<T>(static_cast<A>(d) + static_cast<A>(v));
          }
        }
      }
    });
  });
}

constexpr DeviceType kCpu = DeviceType::CPU;
KILN_REGISTER_KERNEL(Op::IndexSelect, kCpu, index_select);
KILN_REGISTER_KERNEL(Op::Gather, kCpu, gather);
KILN_REGISTER_KERNEL(Op::ScatterAdd, kCpu, scatter_add);

// Two passes over the same chunks: each chunk's count, then each chunk writes its positions after
// the chunks before it.
void mask_positions(KernelArgs& a) {
  const auto* m = static_cast<const bool*>(a.inputs[0].data_ptr());
  auto* out = static_cast<int64_t*>(a.outputs[0].data_ptr());
  const int64_t total = a.inputs[0].numel(), chunks = parallel_chunks(total, int64_t{1} << 16);
  std::vector<int64_t> starts(static_cast<size_t>(chunks) + 1, 0);
  for_chunks(total, chunks, [&](int64_t b, int64_t e, int64_t c) {
    int64_t k = 0;
    for (int64_t i = b; i < e; ++i) k += m[i];
    starts[static_cast<size_t>(c) + 1] = k;
  });
  for (size_t c = 1; c < starts.size(); ++c) starts[c] += starts[c - 1];
  KILN_CHECK(starts.back() == a.outputs[0].numel(), "nonzero", "the mask holds ", starts.back(),
             " true elements for an output of ", a.outputs[0].numel());
  for_chunks(total, chunks, [&](int64_t b, int64_t e, int64_t c) {
    int64_t* o = out + starts[static_cast<size_t>(c)];
    for (int64_t i = b; i < e; ++i)
      if (m[i]) *o++ = i;
  });
}

KILN_REGISTER_KERNEL(Op::MaskPositions, kCpu, mask_positions);

}  // namespace
}  // namespace kiln::backend::cpu
