// Reductions over any set of dims: sum, mean, prod, var, std, amax/amin, max/min with indices,
// argmax/argmin, logsumexp, all/any, norm; with their gradients.
#include <cmath>

#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;
using ops::ReduceDims;

// Runs a reduction kernel into a contiguous keep-shaped output, then drops reduced dims.
Tensor reduce_raw(Op op, const Tensor& x, const ReduceDims& r, ScalarType out_dtype, backend::ReduceAttrs attrs) {
  Tensor out = make_empty(r.keep_shape, out_dtype, x.device());
  attrs.dims_mask = r.mask;
  // An empty result has nothing to compute (sum(zeros({5, 0}), {0}) is [0]); the kernels' plans
  // assume at least one output.
  if (out.numel() > 0) ops::run1(op, x.device(), {x}, out, &attrs);
  return out.shape() == r.out_shape ? out : out.view(r.out_shape);
}

// The gradient of a reduction, given back in the input's shape: g (out-shaped) -> keep shape -> expand.
Tensor expand_grad(const Tensor& g, const Shape& keep_shape, const Shape& in_shape) {
  return g.reshape(keep_shape).expand(in_shape);
}

Shape mask_dims(uint64_t mask, int64_t rank) {
  Shape d;
  for (int64_t i = 0; i < rank; ++i)
    if (mask >> i & 1) d.push_back(i);
  return d;
}

void check_nonempty(const Tensor& x, const ReduceDims& r, const char* op) {
  KILN_CHECK(r.count > 0, op, "cannot reduce over an empty dim (input shape ",
             x.shape(), ")");
}


// var's gradient: 2 (x - mean) / (n - correction) times g.
Tensor var_grad(const Tensor& xv, const Tensor& g, const ReduceDims& r, int64_t correction) {
  Tensor centered = xv - mean(xv, mask_dims(r.mask, xv.dim()), true);
  const double denom = static_cast<double>(r.count - correction);
  return centered * (2.0 / denom) * expand_grad(g, r.keep_shape, xv.shape());
}

// `name` is the op the caller called (max() and argmax() reduce through these), for messages.
// max() and min() of all elements give a NaN result's gradient to the NaN elements (PyTorch's
// evenly_distribute_backward); amax and amin compare with the result, so NaN everywhere.
Tensor extreme(const Tensor& x, const Shape& dims, bool keepdim, bool is_max, const char* name) {
  ops::check_defined(x, name);
  ReduceDims r = ops::reduce_dims(x, dims, keepdim, name);
  check_nonempty(x, r, name);
  Tensor out = reduce_raw(is_max ? Op::Amax : Op::Amin, x, r, x.dtype(), {});
  if (autograd::needs_grad({&x})) {
    const bool nan_picks = std::string_view(name) == "max" || std::string_view(name) == "min";
    autograd::record(is_max ? "AmaxBackward" : "AminBackward", {&x}, out,
                     [sx = SavedTensor(x), so = SavedTensor(out), r, nan_picks](const Tensor& g) -> TensorList {
                       Tensor xv = sx.get("AmaxBackward"), ov = so.get("AmaxBackward").reshape(r.keep_shape);
                       Tensor hit = xv == ov;
                       if (nan_picks) hit = logical_or(hit, logical_and(ne(xv, xv), ne(ov, ov)));
                       return {ops::spread_evenly(g, hit, r, xv)};
                     });
  }
  return out;
}

std::tuple<Tensor, Tensor> extreme_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max, const char* name) {
  ops::check_defined(x, name);
  ReduceDims r = ops::reduce_dims(x, {dim}, keepdim, name);
  check_nonempty(x, r, name);
  Tensor values = make_empty(r.keep_shape, x.dtype(), x.device());
  Tensor indices = make_empty(r.keep_shape, kInt64, x.device());
  backend::ReduceAttrs attrs;
  attrs.dims_mask = r.mask;
  Tensor outs[2] = {values, indices};
  std::initializer_list<Tensor> in{x};
  if (values.numel() > 0)
    backend::run(is_max ? Op::MaxWithIndex : Op::MinWithIndex, x.device(), std::span<const Tensor>(in.begin(), 1),
                 std::span<Tensor>(outs, 2), &attrs);
  if (r.keep_shape != r.out_shape) {
    values = values.view(r.out_shape);
    indices = indices.view(r.out_shape);
  }
  if (autograd::needs_grad({&x})) {
    const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), name);
    autograd::record(is_max ? "MaxBackward" : "MinBackward", {&x}, values,
                     [si = SavedTensor(indices), r, d, shape = x.shape(), dt = x.dtype()](const Tensor& g) -> TensorList {
                       Tensor z = zeros(shape, TensorOptions(dt).device(g.device()));
                       if (shape.empty()) return {g.reshape(shape)};
                       return {scatter_add(z, d, si.get("MaxBackward").reshape(r.keep_shape), g.reshape(r.keep_shape))};
                     });
  }
  return {values, indices};
}

Tensor arg_extreme(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "argmax" : "argmin";
  ops::check_defined(x, name);
  NoGradGuard no_grad;
  if (!dim) {
    KILN_CHECK(x.numel() > 0, name, "cannot take the ", name, " of an empty tensor");
    Tensor idx = std::get<1>(extreme_dim(x.reshape({-1}), 0, false, is_max, name));
    return keepdim ? idx.reshape(Shape(static_cast<size_t>(x.dim()), 1)) : idx;
  }
  return std::get<1>(extreme_dim(x, *dim, keepdim, is_max, name));
}

}  // namespace

Tensor ops::spread_evenly(const Tensor& g, const Tensor& hit, const ReduceDims& r, const Tensor& xv) {
  const Tensor count = sum(hit, mask_dims(r.mask, xv.dim()), true, kFloat32);
  const Tensor ge = expand_grad(g, r.keep_shape, xv.shape());
  return (where(hit, ge, zeros_like(ge)) / count).to(xv.dtype());
}

// sum, prod and norm are on torch.autocast's float32 list (mean is not): a 16-bit input is
// reduced in float32 under autocast and the result stays float32.
Tensor sum(const Tensor& x_in, const Shape& dims, bool keepdim, std::optional<ScalarType> dtype) {
  ops::check_defined(x_in, "sum");
  const Tensor x = ops::autocast_float32(x_in);
  ReduceDims r = ops::reduce_dims(x, dims, keepdim, "sum");
  ScalarType out_t = dtype ? *dtype : (is_floating_point(x.dtype()) ? x.dtype() : kInt64);
  Tensor out = reduce_raw(Op::Sum, ops::cast(x, out_t), r, out_t, {});
  if (autograd::needs_grad({&x}) && is_floating_point(out_t))  // an integer sum has no gradient
    autograd::record("SumBackward", {&x}, out, [r, shape = x.shape(), dt = x.dtype()](const Tensor& g) -> TensorList {
      return {ops::cast(expand_grad(g, r.keep_shape, shape), dt)};
    });
  return out;
}

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  ops::check_defined(x, "mean");
  KILN_CHECK(x.is_floating_point(), "mean", "needs a floating-point tensor, got ", x.dtype(),
             " (convert it with to(kFloat32) first)");
  ReduceDims r = ops::reduce_dims(x, dims, keepdim, "mean");
  backend::ReduceAttrs attrs;
  attrs.scale = r.count == 0 ? std::nan("") : 1.0 / static_cast<double>(r.count);
  Tensor out = reduce_raw(Op::Sum, x, r, x.dtype(), attrs);
  if (autograd::needs_grad({&x}))
    autograd::record("MeanBackward", {&x}, out, [r, shape = x.shape()](const Tensor& g) -> TensorList {
      return {expand_grad(g, r.keep_shape, shape) / static_cast<double>(r.count)};
    });
  return out;
}

namespace {
// Inclusive products along the last dim, from the left (or the right), in ceil(log2 n) steps of
// differentiable ops (a Hillis-Steele scan): each step multiplies by the partial products s
// places away.
Tensor scan_products(Tensor c, bool from_right) {
  const int64_t n = c.size(-1), last = c.dim() - 1;
  for (int64_t s = 1; s < n; s *= 2) {
    Shape pad = c.shape();
    pad.back() = s;
    const Tensor one = ones(pad, TensorOptions(c.dtype()).device(c.device()));
    c = c * (from_right ? cat({c.narrow(last, s, n - s), one}, last) : cat({one, c.narrow(last, 0, n - s)}, last));
  }
  return c;
}

// The product of the other elements of each element's group (the dims `rd`, ascending), in
// differentiable ops whatever the zeros: the products of those before it times those after it,
// from two scans (torch's prod_safe_zeros_backward, with its cumprods as scans: O(n log n) work
// and memory). Only for a create_graph pass through a group holding two or more zeros, where the
// formula below has no second derivative.
Tensor product_of_others(const Tensor& x, const Shape& rd) {
  Shape perm, kept;
  int64_t n = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(rd.begin(), rd.end(), d) == rd.end()) {
      perm.push_back(d);
      kept.push_back(x.size(d));
    }
  for (int64_t d : rd) {
    perm.push_back(d);
    n *= x.size(d);
  }
  Shape flat = kept, grouped = kept, edge = kept;
  flat.push_back(n);
  edge.push_back(1);
  for (int64_t d : rd) grouped.push_back(x.size(d));
  const Tensor values = x.permute(perm).reshape(flat);
  const int64_t last = values.dim() - 1;
  const Tensor one = ones(edge, TensorOptions(x.dtype()).device(x.device()));
  const Tensor before = cat({one, scan_products(values, false).narrow(last, 0, n - 1)}, last);
  const Tensor after = cat({scan_products(values, true).narrow(last, 1, n - 1), one}, last);
  Tensor others = (before * after).reshape(grouped);
  Shape inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return others.permute(inverse);
}
}  // namespace

Tensor prod(const Tensor& x_in, const Shape& dims, bool keepdim) {
  ops::check_defined(x_in, "prod");
  const Tensor x = ops::autocast_float32(x_in);
  ReduceDims r = ops::reduce_dims(x, dims, keepdim, "prod");
  ScalarType out_t = is_floating_point(x.dtype()) ? x.dtype() : kInt64;
  Tensor out = reduce_raw(Op::Prod, ops::cast(x, out_t), r, out_t, {});
  if (autograd::needs_grad({&x}))
    autograd::record("ProdBackward", {&x}, out, [sx = SavedTensor(x), so = SavedTensor(out), r](const Tensor& g) -> TensorList {
      // d prod / d x_i = product of the others; computed without dividing by a zero x_i.
      Tensor xv = sx.get("ProdBackward");
      Shape rd = mask_dims(r.mask, xv.dim());
      Tensor is_zero = xv == 0;
      Tensor zeros_in_group = sum(is_zero, rd, true);
      Tensor prod_nonzero = prod(where(is_zero, ones_like(xv), xv), rd, true);
      Tensor total = so.get("ProdBackward").reshape(r.keep_shape);
      Tensor safe_x = where(is_zero, ones_like(xv), xv);
      // A non-zero x_i beside one zero x_z: the product of the others is 0, as prod_nonzero / x_i
      // times x_z, which keeps its derivative in x_z for a second derivative (create_graph).
      const bool create_graph = autograd::is_grad_enabled();
      Tensor beside_one_zero =
          create_graph ? prod_nonzero / safe_x * sum(where(is_zero, xv, zeros_like(xv)), rd, true) : zeros_like(xv);
      Tensor others = where(is_zero, where(zeros_in_group == 1, prod_nonzero, zeros_like(prod_nonzero)),
                            where(zeros_in_group == 0, total / safe_x,
                                  where(zeros_in_group == 1, beside_one_zero, zeros_like(xv))));
      // Two zeros or more: the second derivative in a pair of them is the product of the rest,
      // which this formula does not give.
      if (create_graph && (zeros_in_group >= 2).any().item<bool>()) others = product_of_others(xv, rd);
      return {others * expand_grad(g, r.keep_shape, xv.shape())};
    });
  return out;
}

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  ops::check_defined(x, "var");
  KILN_CHECK(x.is_floating_point(), "var", "needs a floating-point tensor, got ", x.dtype());
  KILN_CHECK(correction >= 0, "var", "correction must be >= 0, got ", correction);
  ReduceDims r = ops::reduce_dims(x, dims, keepdim, "var");
  backend::ReduceAttrs attrs;
  attrs.correction = correction;
  Tensor out = reduce_raw(Op::Var, x, r, x.dtype(), attrs);
  if (autograd::needs_grad({&x}))
    autograd::record("VarBackward", {&x}, out, [sx = SavedTensor(x), r, correction](const Tensor& g) -> TensorList {
      return {var_grad(sx.get("VarBackward"), g, r, correction)};
    });
  return out;
}

// sqrt(var) with PyTorch's std_backward: 0 where the std is 0 (a constant row), not the NaN
// of sqrt's infinite slope times var's zero one.
Tensor std(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  Tensor out;
  {
    NoGradGuard ng;
    out = sqrt(var(x, dims, correction, keepdim));
  }
  if (autograd::needs_grad({&x})) {
    const ReduceDims r = ops::reduce_dims(x, dims, keepdim, "std");
    autograd::record("StdBackward", {&x}, out,
                     [sx = SavedTensor(x), so = SavedTensor(out), r, correction](const Tensor& g) -> TensorList {
                       const Tensor s = so.get("StdBackward");
                       const Tensor gv = where(s == 0, zeros_like(g), g / (s * 2.0));
                       return {var_grad(sx.get("StdBackward"), gv, r, correction)};
                     });
  }
  return out;
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) { return extreme(x, dims, keepdim, true, "amax"); }
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) { return extreme(x, dims, keepdim, false, "amin"); }
Tensor max(const Tensor& x) { return extreme(x, {}, false, true, "max"); }
Tensor min(const Tensor& x) { return extreme(x, {}, false, false, "min"); }
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, true, "max");
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, false, "min");
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) { return arg_extreme(x, dim, keepdim, true); }
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) { return arg_extreme(x, dim, keepdim, false); }

Tensor logsumexp(const Tensor& x_in, const Shape& dims, bool keepdim) {
  ops::check_defined(x_in, "logsumexp");
  const Tensor x = ops::autocast_float32(x_in);
  ScalarType t = ops::float_type(x.dtype());
  Tensor xf = ops::cast(x, t);
  ReduceDims r = ops::reduce_dims(x, dims, keepdim, "logsumexp");
  Tensor out = reduce_raw(Op::LogSumExp, xf, r, t, {});
  if (autograd::needs_grad({&x}))
    autograd::record("LogsumexpBackward", {&x}, out, [sx = SavedTensor(xf), so = SavedTensor(out), r](const Tensor& g) -> TensorList {
      Tensor xv = sx.get("LogsumexpBackward");
      return {exp(xv - so.get("LogsumexpBackward").reshape(r.keep_shape)) * expand_grad(g, r.keep_shape, xv.shape())};
    });
  return out;
}

Tensor all(const Tensor& x, const Shape& dims, bool keepdim) {
  ops::check_defined(x, "all");
  return reduce_raw(Op::All, x, ops::reduce_dims(x, dims, keepdim, "all"), kBool, {});
}

Tensor any(const Tensor& x, const Shape& dims, bool keepdim) {
  ops::check_defined(x, "any");
  return reduce_raw(Op::Any, x, ops::reduce_dims(x, dims, keepdim, "any"), kBool, {});
}

Tensor norm(const Tensor& x_in, double p, const Shape& dims, bool keepdim) {
  ops::check_defined(x_in, "norm");
  const Tensor x = ops::autocast_float32(x_in);
  KILN_CHECK(x.is_floating_point(), "norm", "needs a floating-point tensor, got ", x.dtype());
  KILN_CHECK(p >= 0 && !std::isnan(p), "norm", "p must be >= 0 or inf, got ", p);
  ReduceDims r = ops::reduce_dims(x, dims, keepdim, "norm");
  if (std::isinf(p)) check_nonempty(x, r, "norm");  // a max has no identity, as in PyTorch
  backend::ReduceAttrs attrs;
  attrs.p = p;
  Tensor out = reduce_raw(Op::Norm, x, r, x.dtype(), attrs);
  if (autograd::needs_grad({&x}))
    autograd::record("NormBackward", {&x}, out, [sx = SavedTensor(x), so = SavedTensor(out), r, p](const Tensor& g) -> TensorList {
      Tensor xv = sx.get("NormBackward");
      Tensor n = so.get("NormBackward").reshape(r.keep_shape);
      Tensor ge = expand_grad(g, r.keep_shape, xv.shape());
      Tensor d;
      if (p == 0) {
        d = zeros_like(xv);
      } else if (p == 1) {
        d = sign(xv);
      } else if (std::isinf(p)) {
        d = sign(xv) * ops::spread_evenly(ones_like(n), abs(xv) == n, r, xv);
      } else {
        // x |x|^(p-2) / n^(p-1), and 0 where the norm is 0
        Tensor safe_n = where(n == 0, ones_like(n), n);
        d = xv * pow(abs(xv), p - 2) / pow(safe_n, p - 1);
        if (p < 2) d = where(xv == 0, zeros_like(d), d);
        d = where(n == 0, zeros_like(d), d);
      }
      return {d * ge};
    });
  return out;
}

}  // namespace kiln
