// Joining and splitting: cat, stack, split, chunk.
#include "ops/op_util.h"

namespace kiln {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "cat", "expects at least one tensor");
  // Like PyTorch, 1-D empty tensors are skipped (legacy behaviour many callers rely on).
  // The skipped tensors still take part in the result's dtype, as in PyTorch.
  std::vector<Tensor> parts;
  ScalarType dtype = tensors[0].defined() ? tensors[0].dtype() : kFloat32;
  for (const Tensor& t : tensors) {
    ops::check_defined(t, "cat");
    dtype = promote_types(dtype, t.dtype());
    if (!(t.dim() == 1 && t.numel() == 0)) parts.push_back(t);
  }
  if (parts.empty()) return ops::cast(tensors[0], dtype).clone();
  const Tensor& first = parts[0];
  KILN_CHECK(first.dim() > 0, "cat", "zero-dimensional tensors cannot be concatenated");
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = parts[i];
    KILN_CHECK(t.device() == first.device(), "cat", "tensor ", i, " is on ", t.device().str(), ", tensor 0 on ",
               first.device().str());
    KILN_CHECK(t.dim() == first.dim(), "cat", "tensor ", i, " has rank ", t.dim(), ", tensor 0 has rank ", first.dim());
    for (int64_t k = 0; k < t.dim(); ++k)
      KILN_CHECK(k == d || t.shape()[k] == first.shape()[k], "cat", "tensor ", i, " has shape ", t.shape(),
                 ", which differs from tensor 0's ", first.shape(), " outside dim ", d);
    shape[d] += t.shape()[d];
  }
  Tensor out = make_empty(shape, dtype, first.device());
  std::vector<int64_t> sizes;
  {
    NoGradGuard ng;
    int64_t off = 0;
    for (const Tensor& t : parts) {
      out.narrow(d, off, t.shape()[d]).copy_(t);
      sizes.push_back(t.shape()[d]);
      off += t.shape()[d];
    }
  }
  if (autograd::needs_grad(parts)) {
    std::vector<ScalarType> dtypes;
    for (const Tensor& t : parts) dtypes.push_back(t.dtype());
    autograd::record("CatBackward", parts, out, [d, sizes, dtypes](const Tensor& g) -> TensorList {
      TensorList grads;
      int64_t off = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        grads.push_back(ops::cast(g.narrow(d, off, sizes[i]), dtypes[i]));
        off += sizes[i];
      }
      return grads;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "stack", "expects at least one tensor");
  ops::check_defined(tensors[0], "stack");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ops::check_defined(tensors[i], "stack");
    KILN_CHECK(tensors[i].shape() == tensors[0].shape(), "stack", "tensor ", i, " has shape ", tensors[i].shape(),
               ", tensor 0 has ", tensors[0].shape());
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  ops::check_defined(x, "split");
  KILN_CHECK(x.dim() > 0, "split", "cannot split a 0-d tensor");
  KILN_CHECK(split_size > 0 || (split_size == 0 && x.size(dim) == 0), "split", "split_size must be positive, got ",
             split_size);
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.shape()[d];
  std::vector<Tensor> out;
  if (n == 0) return {x};
  for (int64_t off = 0; off < n; off += split_size) out.push_back(x.narrow(d, off, std::min(split_size, n - off)));
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  ops::check_defined(x, "split");
  KILN_CHECK(x.dim() > 0, "split", "cannot split a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "split", "split sizes must be >= 0, got ", Shape(sizes));
    total += s;
  }
  KILN_CHECK(total == x.shape()[d], "split", "split sizes ", Shape(sizes), " add up to ", total, ", but dim ", d,
             " has size ", x.shape()[d]);
  std::vector<Tensor> out;
  int64_t off = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, off, s));
    off += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  ops::check_defined(x, "chunk");
  KILN_CHECK(chunks > 0, "chunk", "chunks must be positive, got ", chunks);
  KILN_CHECK(x.dim() > 0, "chunk", "cannot chunk a 0-d tensor");
  const int64_t n = x.size(dim);
  // An empty dim still gives `chunks` empty pieces, as in PyTorch (split would give one).
  if (n == 0) return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), 0), dim);
  return split(x, (n + chunks - 1) / chunks, dim);
}

}  // namespace kiln
