// Indexing ops: index_select, gather, scatter_add, one_hot, tril and triu, with gradients.
#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;

void check_index(const Tensor& index, const char* op) {
  ops::check_defined(index, op);
  KILN_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, "indices must be int64 or int32, got ",
             index.dtype());
}

// gather/scatter_add shape rule: same rank, index.size(d) <= x.size(d) for d != dim.
void check_gather_shape(const Tensor& x, int64_t d, const Tensor& index, const char* op, const Tensor* src = nullptr) {
  KILN_CHECK(index.dim() == x.dim() || (x.dim() == 0 && index.dim() <= 1), op, "index has rank ", index.dim(),
             " but the tensor has rank ", x.dim());
  for (int64_t k = 0; k < index.dim() && x.dim() > 0; ++k) {
    KILN_CHECK(k == d || index.shape()[k] <= x.shape()[k], op, "index of shape ", index.shape(),
               " is larger than the tensor's ", x.shape(), " at dim ", k);
    if (src) KILN_CHECK(index.shape()[k] <= src->shape()[k], op, "index of shape ", index.shape(),
                        " is larger than src's ", src->shape(), " at dim ", k);
  }
}

}  // namespace

Tensor ops::sum_at(const Shape& shape, int64_t d, const Tensor& idx, const Tensor& g) {
  const ScalarType acc = g.dtype() == kFloat16 || g.dtype() == kBFloat16 ? kFloat32 : g.dtype();
  return scatter_add(zeros(shape, g.options().dtype(acc)), d, idx, g.to(acc)).to(g.dtype());
}

// A 0-d CPU operand (which may join a device op) on the op's device, without autograd (the op
// records its own node).
static Tensor on_device(const Tensor& t, Device dev) { return t.device() == dev ? t : t.detach().to(dev); }

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined(x, "index_select");
  check_index(index, "index_select");
  KILN_CHECK(index.dim() <= 1, "index_select", "index must be 0-d or 1-D, got shape ", index.shape());
  const Device dev = ops::common_device({&x, &index}, "index_select");
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  Shape shape = x.shape();
  if (x.dim() > 0) shape[d] = index.numel();
  else KILN_CHECK(index.numel() == 1, "index_select", "a 0-d input takes exactly one index, got ", index.numel());
  Tensor xc = on_device(x, dev).contiguous();
  Tensor ic = ops::cast(index, kInt64).contiguous().reshape({-1});
  Tensor out = make_empty(shape, x.dtype(), dev);
  backend::DimAttrs attrs{d};
  backend::run(Op::IndexSelect, dev, std::initializer_list<Tensor>{xc, ic}, std::span<Tensor>(&out, 1), &attrs);
  if (autograd::needs_grad({&x}))
    autograd::record("IndexSelectBackward", {&x}, out, [shape = x.shape(), d, si = SavedTensor(ic), xdev = x.device()](const Tensor& g) -> TensorList {
      Tensor idx = si.get("IndexSelectBackward");
      if (shape.empty()) return {g.reshape(shape).to(xdev)};
      const int64_t n = idx.numel();
      if (n == 0 || g.numel() == 0) return {zeros(shape, g.options())};
      // Each slice of x along d sums the gradient slices that picked it, in index order, in
      // float32 for 16-bit data, rounded once (sum_at).
      int64_t outer = 1;
      for (int64_t k = 0; k < d; ++k) outer *= shape[k];
      if (outer == 1 && !autograd::needs_grad({&g})) {  // (create_graph takes scatter_add, differentiable in g)
        // Rows of x (d = 0, as the MLM head's picks, or only size-1 dims before d): embedding's
        // backward, without atomics on CUDA. Moving a later d to the front and back cost more
        // than the scatter_add below (BM_IndexAndSelect/5).
        Tensor gx = make_empty(shape, g.dtype(), g.device());
        Tensor rows = gx.view({shape[d], gx.numel() / shape[d]});
        backend::EmbeddingAttrs no_padding{-1};
        ops::run1(Op::EmbeddingBackward, g.device(), {g.contiguous().view({n, g.numel() / n}), idx}, rows, &no_padding);
        return {gx};
      }
      // scatter_add along d with the index broadcast over the other dims
      Shape view(shape.size(), 1);
      view[d] = n;
      return {ops::sum_at(shape, d, idx.reshape(view).expand(g.shape()).contiguous(), g)};
    });
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined(x, "gather");
  check_index(index, "gather");
  const Device dev = ops::common_device({&x, &index}, "gather");
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  check_gather_shape(x, d, index, "gather");
  Tensor ic = ops::cast(index, kInt64).contiguous();
  Tensor out = make_empty(index.shape(), x.dtype(), dev);
  backend::DimAttrs attrs{d};
  backend::run(Op::Gather, dev, std::initializer_list<Tensor>{on_device(x, dev), ic}, std::span<Tensor>(&out, 1), &attrs);
  if (autograd::needs_grad({&x}))
    autograd::record("GatherBackward", {&x}, out, [shape = x.shape(), d, si = SavedTensor(ic), xdev = x.device()](const Tensor& g) -> TensorList {
      return {ops::sum_at(shape, d, si.get("GatherBackward"), g).to(xdev)};
    });
  return out;
}

void ops::scatter_into(Tensor out, int64_t d, const Tensor& index, const Tensor& src, bool overwrite) {
  backend::ScatterAttrs attrs{d, overwrite};
  backend::run(Op::ScatterAdd, out.device(), std::initializer_list<Tensor>{ops::cast(index, kInt64).contiguous(), src},
               std::span<Tensor>(&out, 1), &attrs);
}

Tensor scatter_add(const Tensor& x_in, int64_t dim, const Tensor& index, const Tensor& src_in) {
  ops::check_defined(x_in, "scatter_add");
  ops::check_defined(src_in, "scatter_add");
  // On autocast's promote list (each gradient cast back to its input's dtype by the casts).
  Tensor x = x_in, src = src_in;
  ops::autocast_promote(x, src);
  check_index(index, "scatter_add");
  const Device dev = ops::common_device({&x, &index, &src}, "scatter_add");
  KILN_CHECK(src.dtype() == x.dtype(), "scatter_add", "src has dtype ", src.dtype(), " but the tensor has ", x.dtype());
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  KILN_CHECK(src.dim() == index.dim(), "scatter_add", "src has rank ", src.dim(), " but index has rank ", index.dim());
  check_gather_shape(x, d, index, "scatter_add", &src);
  Tensor ic = ops::cast(index, kInt64).contiguous();
  Tensor out = make_empty(x.shape(), x.dtype(), dev);
  ops::run1(Op::Copy, dev, {on_device(x, dev)}, out);
  ops::scatter_into(out, d, ic, on_device(src, dev), false);
  if (autograd::needs_grad({&x, &src}))
    autograd::record("ScatterAddBackward", {&x, &src}, out,
                     [d, si = SavedTensor(ic), nx = x.requires_grad(), ns = src.requires_grad(),
                      src_shape = src.shape(), xdev = x.device(), sdev = src.device()](const Tensor& g) -> TensorList {
                       Tensor gs;
                       if (ns) {
                         gs = gather(g, d, si.get("ScatterAddBackward"));
                         if (gs.shape() != src_shape) {
                           // src may be larger than index: the elements index does not reach
                           // were not added anywhere, and get a zero gradient.
                           Tensor full = zeros(src_shape, gs.options());
                           Tensor part = full;
                           for (int64_t k = 0; k < gs.dim(); ++k) part = part.narrow(k, 0, gs.size(k));
                           part.copy_(gs);
                           gs = full;
                         }
                       }
                       return {nx ? g.to(xdev) : Tensor(), gs.defined() ? gs.to(sdev) : gs};
                     });
  return out;
}

Tensor one_hot(const Tensor& x, int64_t num_classes) {
  ops::check_defined(x, "one_hot");
  KILN_CHECK(x.dtype() == kInt64 || x.dtype() == kInt32, "one_hot", "expects an integer tensor of class indices, got ",
             x.dtype());
  if (num_classes == -1) {
    KILN_CHECK(x.numel() > 0, "one_hot", "cannot infer the number of classes of an empty tensor");
    num_classes = max(x).item<int64_t>() + 1;
  }
  KILN_CHECK(num_classes > 0, "one_hot", "num_classes must be positive, got ", num_classes);
  if (x.numel() > 0) {
    int64_t lo = min(x).item<int64_t>(), hi = max(x).item<int64_t>();
    KILN_CHECK(lo >= 0 && hi < num_classes, "one_hot", "class values must be in [0, ", num_classes, "), got ", lo,
               " to ", hi);
  }
  Tensor classes = arange(num_classes, TensorOptions(x.dtype()).device(x.device()));
  return eq(x.unsqueeze(-1), classes).to(kInt64);
}

namespace {
Tensor triangle(const Tensor& x, int64_t k, bool upper) {
  const char* name = upper ? "triu" : "tril";
  ops::check_defined(x, name);
  KILN_CHECK(x.dim() >= 2, name, "expects a tensor of rank >= 2, got shape ", x.shape());
  Tensor xc = x.contiguous();
  Tensor out = make_empty(x.shape(), x.dtype(), x.device());
  backend::TriAttrs attrs{k};
  ops::run1(upper ? Op::Triu : Op::Tril, x.device(), {xc}, out, &attrs);
  if (autograd::needs_grad({&x}))
    autograd::record(upper ? "TriuBackward" : "TrilBackward", {&x}, out,
                     [k, upper](const Tensor& g) -> TensorList { return {upper ? triu(g, k) : tril(g, k)}; });
  return out;
}
}  // namespace

Tensor tril(const Tensor& x, int64_t k) { return triangle(x, k, false); }
Tensor triu(const Tensor& x, int64_t k) { return triangle(x, k, true); }

}  // namespace kiln
