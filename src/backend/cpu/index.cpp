// CPU kernels for index_select, gather and scatter_add; indices are checked here, where they are read.
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

// Offset in `t` of the element at index position p (row-major in index's shape) with its
// coordinate along dim replaced by index[p]: where gather reads and scatter_add writes.
inline int64_t indexed_offset(const Tensor& t, const Tensor& index, const int64_t* idx, int64_t p, int64_t dim,
                              const char* where) {
  const int64_t n = t.dim() == 0 ? 1 : t.shape()[dim];
  if (index.dim() == 0) return checked_index(idx[p], n, where) * (t.dim() ? t.strides()[dim] : 0);
  int64_t flat = p, off = 0;
  for (int64_t d = index.dim() - 1; d >= 0; --d) {
    int64_t c = flat % index.shape()[d];
    flat /= index.shape()[d];
    off += (d == dim ? checked_index(idx[p], n, where) : c) * (t.dim() ? t.strides()[d] : 0);
  }
  return off;
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

// out[p] = x[p with coordinate dim replaced by index[p]]; out and index contiguous.
void gather(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const Tensor& index = a.inputs[1];
  const Tensor& out = a.outputs[0];
  const int64_t dim = static_cast<const DimAttrs*>(a.attrs)->dim;
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  visit_dtype(x.dtype(), "gather", [&]<class T>() {
    const T* src = static_cast<const T*>(x.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    for (int64_t p = 0; p < index.numel(); ++p) dst[p] = src[indexed_offset(x, index, idx, p, dim, "gather")];
  });
}

// out (already a copy of self, contiguous) [p with dim replaced by index[p]] += src[p].
void scatter_add(KernelArgs& a) {
  const Tensor& index = a.inputs[0];
  const Tensor& src = a.inputs[1];
  const Tensor& out = a.outputs[0];
  const int64_t dim = static_cast<const DimAttrs*>(a.attrs)->dim;
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  visit_dtype(out.dtype(), "scatter_add", [&]<class T>() {
    const T* s = static_cast<const T*>(src.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    for (int64_t p = 0; p < index.numel(); ++p) {
      const int64_t off = indexed_offset(out, index, idx, p, dim, "scatter_add");
      T v = s[strided_offset(p, index.shape(), src.strides())];
      dst[off] = static_cast<T>(static_cast<compute_t<T>>(dst[off]) + static_cast<compute_t<T>>(v));
    }
  });
}

constexpr DeviceType kCpu = DeviceType::CPU;
KILN_REGISTER_KERNEL(Op::IndexSelect, kCpu, index_select);
KILN_REGISTER_KERNEL(Op::Gather, kCpu, gather);
KILN_REGISTER_KERNEL(Op::ScatterAdd, kCpu, scatter_add);

}  // namespace
}  // namespace kiln::backend::cpu
