// Tensor indexing (kiln/indexing.h): integers, slices, None and Ellipsis are views; the index
// tensors ("advanced" indexing) become one int64 position over the dims they index (merged into
// one), so that x[indices] is an index_select of the merged dim and x[indices] = values an
// index_copy (index_add with accumulate) of it, written back through the view (copy_, whose
// autograd is CopySlices). Every device runs them on those ops' kernels.
#include <algorithm>
#include <numeric>
#include <string_view>

#include "kiln/indexing.h"
#include "ops/op_util.h"

namespace kiln {

using indexing::TensorIndex;
using Kind = TensorIndex::Kind;

indexing::TensorIndex::TensorIndex(const char* text) : kind_(Kind::Ellipsis) {
  KILN_CHECK(text && std::string_view(text) == "...", "index", "the only string index is \"...\" (Ellipsis), got \"",
             text ? text : "(null)", "\"");
}

namespace {

// An advanced index over `count` consecutive dims of the view from `dim` on: positions along them as
// one row-major position, any shape (they broadcast with the others): an integer tensor's own
// (count 1), or a bool mask's true positions (found when needed: index_put_'s masked_fill_ does
// without). `checked`: in [0, size) already (masks, and integer indices that were on the CPU);
// otherwise on a device, checked by the kernel (see plan()).
struct Advanced {
  int64_t dim, count;
  Tensor positions;  // undefined for a mask
  bool checked;
  Tensor mask;  // the bool mask, if any (on the view's device)
};

struct Indexed {
  Tensor view;
  std::vector<Advanced> adv;
};

// The dims of x an index consumes.
int64_t dims_used(const TensorIndex& i) {
  if (i.kind() == Kind::Integer || i.kind() == Kind::Slice) return 1;
  if (i.kind() == Kind::Tensor) return i.tensor().dtype() == kBool ? i.tensor().dim() : 1;
  return 0;
}

void check_tensor_index(const Tensor& t, const char* op) {
  KILN_CHECK(t.defined(), op, "an index tensor is undefined");
  const ScalarType d = t.dtype();
  KILN_CHECK(d == kBool || d == kInt64 || d == kInt32, op,
             "tensors used as indices must be int64, int32 or bool tensors, got ", d,
             d == kUInt8 ? " (torch takes uint8 as a mask, deprecated: use a bool mask)" : "");
}

// Integer positions along a dim of `size`: checked and wrapped on the host where either the index
// or the view is on the CPU (before they move to the view's device), else left for plan().
Advanced integer_index(const Tensor& t, int64_t dim, int64_t size, Device dev, const char* op) {
  Tensor p = ops::cast(t, kInt64);
  if (!p.device().is_cpu() && !dev.is_cpu()) return {dim, 1, p, false, Tensor()};
  bool negative = false;
  for (int64_t i : p.to_vector<int64_t>()) {
    KILN_CHECK(i >= -size && i < size, op, "index ", i, " is out of bounds for dimension ", dim, " with size ", size);
    negative |= i < 0;
  }
  if (negative) p = where(p < 0, p + size, p);
  return {dim, 1, p.to(dev), true, Tensor()};
}

Indexed apply(const Tensor& x, const std::vector<TensorIndex>& indices, const char* op) {
  ops::check_defined(x, op);
  int64_t used = 0, ellipses = 0;
  for (const TensorIndex& i : indices) {
    if (i.kind() == Kind::Tensor) check_tensor_index(i.tensor(), op);
    used += dims_used(i);
    ellipses += i.kind() == Kind::Ellipsis;
  }
  KILN_CHECK(ellipses <= 1, op, "an index can only have a single ellipsis (...)");
  KILN_CHECK(used <= x.dim(), op, "too many indices for a tensor of dimension ", x.dim(), " (", used, " dims indexed)");
  const Device dev = x.device();
  Indexed r{x, {}};
  Tensor& v = r.view;
  int64_t d = 0;  // the view's dim the next index applies to
  auto select = [&](int64_t k) {
    const int64_t n = v.size(d);
    KILN_CHECK(k >= -n && k < n, op, "index ", k, " is out of bounds for dimension ", d, " with size ", n);
    v = v.select(d, k);
  };
  for (const TensorIndex& i : indices) {
    switch (i.kind()) {
      case Kind::None: v = v.unsqueeze(d++); break;
      case Kind::Ellipsis: d += x.dim() - used; break;
      case Kind::Integer: select(i.integer()); break;
      case Kind::Slice: {
        const indexing::Slice& s = i.slice();
        KILN_CHECK(s.step() > 0, op, "a slice's step must be greater than zero, got ", s.step());
        v = v.slice(d++, s.start(), s.stop(), s.step());
        break;
      }
      case Kind::Boolean:  // a new dim, indexed by [0] (true) or nothing (false), as torch's
        v = v.unsqueeze(d);
        r.adv.push_back({d++, 1, zeros({i.boolean() ? 1 : 0}, TensorOptions(kInt64).device(dev)), true, Tensor()});
        break;
      case Kind::Tensor: {
        const Tensor& t = i.tensor();
        if (t.dtype() != kBool && t.dim() == 0) {  // an integer, as torch's (read on the host)
          select(t.item<int64_t>());
          break;
        }
        if (t.dtype() != kBool) {
          r.adv.push_back(integer_index(t, d, v.size(d), dev, op));
          ++d;
          break;
        }
        Tensor mask = t.to(dev);
        if (t.dim() == 0) {  // a new dim of size 1, kept where the mask is true
          v = v.unsqueeze(d);
          mask = mask.reshape({1});
        }
        for (int64_t j = 0; j < mask.dim(); ++j)
          KILN_CHECK(mask.size(j) == v.size(d + j), op, "the shape of the mask ", mask.shape(), " at index ", j,
                     " does not match the shape of the indexed tensor ", v.shape(), " at index ", d + j);
        r.adv.push_back({d, mask.dim(), Tensor(), true, mask});  // positions found in plan()
        d += mask.dim();
        break;
      }
    }
  }
  return r;
}

// `merged`'s shape with dim `at` replaced by `shape`.
Shape replace_dim(const Shape& merged, int64_t at, const Shape& shape) {
  Shape out(merged.begin(), merged.begin() + at);
  out.insert(out.end(), shape.begin(), shape.end());
  out.insert(out.end(), merged.begin() + at + 1, merged.end());
  return out;
}

// The advanced indices as one flat position into the merged dim `at` of `src` (the indexed dims
// moved together, to the front when they were not already next to each other, and merged).
struct Plan {
  Tensor src;                // the view, its indexed dims together from `at` on
  int64_t at;
  Shape merged_shape;        // src's shape with the indexed dims merged into one, at `at`
  bool merges;               // whether src's indexed dims merge into a view (else merging copies src)
  Shape positions_shape;     // the index tensors' broadcast shape
  Tensor positions;          // int64 [numel of positions_shape], into the merged dim
  std::vector<Tensor> each;  // each index's own positions (wrapped; a bad one its dims' size)
  Shape perm;                // the view's dims in src's order (empty: not permuted)

  Tensor merged() const { return src.reshape(merged_shape); }
};

Plan plan(const Indexed& r, const char* op) {
  const Tensor& v = r.view;
  const std::vector<Advanced>& adv = r.adv;
  std::vector<int64_t> sizes;
  int64_t total = 1, covered = 0;
  bool adjacent = true;
  for (size_t i = 0; i < adv.size(); ++i) {
    int64_t s = 1;
    for (int64_t j = 0; j < adv[i].count; ++j) s *= v.size(adv[i].dim + j);
    sizes.push_back(s);
    total *= s;
    covered += adv[i].count;
    if (i > 0) adjacent &= adv[i].dim == adv[i - 1].dim + adv[i - 1].count;
  }
  Plan p;
  p.src = v;
  p.at = adv[0].dim;
  if (!adjacent) {  // the indexed dims first, in order, then the rest (numpy's rule for the result)
    std::vector<bool> taken(static_cast<size_t>(v.dim()));
    for (const Advanced& a : adv)
      for (int64_t j = 0; j < a.count; ++j) p.perm.push_back(a.dim + j), taken[a.dim + j] = true;
    for (int64_t k = 0; k < v.dim(); ++k)
      if (!taken[k]) p.perm.push_back(k);
    p.src = v.permute(p.perm);
    p.at = 0;
  }
  const Shape& ss = p.src.shape();
  p.merged_shape.assign(ss.begin(), ss.begin() + p.at);
  p.merged_shape.push_back(total);
  p.merged_shape.insert(p.merged_shape.end(), ss.begin() + p.at + covered, ss.end());
  p.merges = ops::view_strides(ss, p.src.strides(), p.merged_shape).has_value();
  // Row-major over the entries (the last one fastest). Positions not yet checked (integer indices
  // on a device) are wrapped, and a bad one made out of range (its dims' size in `each`, `total`
  // or more in the merged position), so that the kernel that reads it reports it (index_check.h)
  // instead of reading a wrong element.
  p.each.resize(adv.size());
  Tensor lin, bad;
  int64_t mult = 1;
  for (size_t i = adv.size(); i-- > 0;) {
    Tensor q = adv[i].mask.defined() ? ops::true_positions(adv[i].mask.flatten()) : adv[i].positions;
    p.positions_shape = i + 1 == adv.size() ? q.shape() : broadcast_shapes(p.positions_shape, q.shape(), op);
    p.each[i] = q;
    if (!adv[i].checked) {
      const int64_t n = sizes[i];
      const Tensor out = (q < -n).logical_or(q >= n);
      bad = bad.defined() ? bad.logical_or(out) : out;
      q = where(q < 0, q + n, q);
      p.each[i] = where(out, n, q);
    }
    const Tensor term = mult == 1 ? q : q * mult;
    lin = lin.defined() ? lin + term : term;
    mult *= sizes[i];
  }
  if (bad.defined()) lin = where(bad, total, lin);
  p.positions = lin.expand(p.positions_shape).reshape({shape_numel(p.positions_shape, op)});
  return p;
}

// x[indices] one indexed dim at a time, where the indexed dims (one each) do not merge into a view
// (merging would copy all of the view): index_select along the first in the view's own order (no
// copy of a contiguous view), then a gather along each next one, the picks' dim moved to the front
// last when the indexed dims were apart. Chosen when the first step makes the view smaller.
Tensor index_each(const Indexed& ix, const Plan& p) {
  const int64_t nb = p.positions.numel(), d0 = ix.adv[0].dim;
  auto flat = [&](size_t i) { return p.each[i].expand(p.positions_shape).reshape({nb}); };
  Tensor r = index_select(ix.view, d0, flat(0));
  for (size_t i = 1; i < p.each.size(); ++i) {
    const int64_t di = ix.adv[i].dim - static_cast<int64_t>(i - 1);  // the dims squeezed so far were before it
    Shape pick = r.shape(), along(static_cast<size_t>(r.dim()), 1);
    pick[static_cast<size_t>(di)] = 1;
    along[static_cast<size_t>(d0)] = nb;
    r = gather(r, di, flat(i).view(along).expand(pick)).squeeze(di);
  }
  if (!p.perm.empty()) {
    Shape order{d0};
    for (int64_t k = 0; k < r.dim(); ++k)
      if (k != d0) order.push_back(k);
    r = r.permute(order);
  }
  return r.reshape(replace_dim(r.shape(), p.perm.empty() ? d0 : 0, p.positions_shape));
}

// values made x[indices]'s shape: leading dims of size 1 dropped where values has more dims (as
// torch's index_put_), then broadcast.
Tensor fit(Tensor values, const Shape& shape, const char* op) {
  while (values.dim() > static_cast<int64_t>(shape.size()) && values.size(0) == 1) values = values.squeeze(0);
  bool fits = values.dim() <= static_cast<int64_t>(shape.size());
  for (int64_t k = 1; fits && k <= values.dim(); ++k) {
    const int64_t f = values.size(-k), t = shape[shape.size() - static_cast<size_t>(k)];
    fits = f == 1 || f == t;
  }
  KILN_CHECK(fits, op, "shape mismatch: value tensor of shape ", values.shape(),
             " cannot be broadcast to indexing result of shape ", shape);
  return values.expand(shape);
}

// x[indices] = values (+= with accumulate) through the view `r` of x.
void put(Indexed& r, const Tensor& values_in, bool accumulate, const char* op) {
  Tensor& v = r.view;
  const Tensor values = ops::cast(values_in, v.dtype()).to(v.device());
  if (r.adv.empty()) {
    const Tensor source = fit(values, v.shape(), op);
    if (accumulate) v.add_(source);
    else v.copy_(source);
    return;
  }
  const Advanced& a = r.adv[0];
  if (r.adv.size() == 1 && a.mask.defined() && values.numel() == 1) {
    // One mask and one value: masked_fill_ of the view (no positions read on the host).
    Shape ms(static_cast<size_t>(v.dim()), 1);
    for (int64_t j = 0; j < a.count; ++j) ms[a.dim + j] = v.size(a.dim + j);
    const Tensor m = a.mask.reshape(ms), one = values.reshape({});
    if (accumulate) v.copy_(where(m, v + one, v));
    else v.masked_fill_(m, one);
    return;
  }
  const Plan p = plan(r, op);
  const int64_t n = p.positions.numel();
  const Shape rows = replace_dim(p.merged_shape, p.at, {n});
  Tensor source = fit(values, replace_dim(p.merged_shape, p.at, p.positions_shape), op).reshape(rows);
  const Tensor merged = p.merged();
  if (p.merges && !autograd::needs_grad({&v, &values})) {
    // The merged dims are a view of x and no gradient is recorded: the ScatterAdd kernel writes
    // the addressed elements in place (work in the number written, not in x's size).
    if (source.storage() == v.storage()) source = source.clone();  // read before anything is written
    Shape along(rows.size(), 1);
    along[static_cast<size_t>(p.at)] = n;
    ops::scatter_into(merged, p.at, p.positions.view(along).expand(rows), source, !accumulate);
    ops::bump_version(v);
    return;
  }
  // Otherwise the merged tensor updated out of place and copied back (copy_'s gradient).
  Tensor updated = accumulate ? index_add(merged, p.at, p.positions, source)
                              : index_copy(merged, p.at, p.positions, source);
  updated = updated.reshape(p.src.shape());
  if (!p.perm.empty()) {
    Shape inverse(p.perm.size());
    for (size_t k = 0; k < p.perm.size(); ++k) inverse[p.perm[k]] = static_cast<int64_t>(k);
    updated = updated.permute(inverse);
  }
  v.copy_(updated);
}

}  // namespace

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  const Indexed r = apply(x, indices, "index");
  if (r.adv.empty()) return r.view;
  const Plan p = plan(r, "index");
  const bool one_dim_each = std::all_of(r.adv.begin(), r.adv.end(), [](const Advanced& a) { return a.count == 1; });
  if (!p.merges && one_dim_each && p.positions.numel() <= r.view.size(r.adv[0].dim)) return index_each(r, p);
  return index_select(p.merged(), p.at, p.positions).reshape(replace_dim(p.merged_shape, p.at, p.positions_shape));
}

Tensor index_put(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) {
  ops::check_defined(x, "index_put");
  Tensor out = x.clone();
  return out.index_put_(indices, values, accumulate);
}

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const { return kiln::index(*this, indices); }

Tensor Tensor::index_put(const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) const {
  return kiln::index_put(*this, indices, values, accumulate);
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) {
  const char* op = "index_put_";
  ops::check_defined(*this, op);
  ops::check_defined(values, op);
  autograd::check_inplace(*this, op);
  Indexed r = apply(*this, indices, op);
  put(r, values, accumulate, op);
  return *this;
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, Scalar value) {
  ops::check_defined(*this, "index_put_");
  ops::check_fill_value(value, dtype(), "index_put_");
  return index_put_(indices, ops::wrap_scalar(value, dtype()));
}

}  // namespace kiln
