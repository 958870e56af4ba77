// Products with a sum, composed of matmul/bmm and elementwise ops (their kernels and gradients):
// outer, addmm, baddbmm and einsum (ops.h); and diag and trace, of the diagonal view.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

// beta self + alpha (a @ b) (mm or bmm), torch's addmm/baddbmm rules: one dtype for the three (all
// in the autocast dtype under autocast, as torch's); self broadcasts to the product's shape; beta 0
// leaves self's values out (its NaN and inf too) and gives it a zero gradient; an integer product
// takes integer beta and alpha. a and b have `rank` dims (2 for mm's matrices, 3 for bmm's batches).
Tensor add_scaled(const Tensor& self_in, const Tensor& a_in, const Tensor& b_in, Scalar beta, Scalar alpha,
                  int64_t rank, Tensor (*product_of)(const Tensor&, const Tensor&), const char* name) {
  for (const Tensor* t : {&self_in, &a_in, &b_in}) ops::check_defined(*t, name);
  KILN_CHECK(a_in.dim() == rank && b_in.dim() == rank, name, "expects ", rank == 2 ? "2-D matrices" : "3-D batches",
             ", got ", a_in.dim(), "-D and ", b_in.dim(), "-D");
  const Tensor self = ops::autocast_lower(self_in), a = ops::autocast_lower(a_in), b = ops::autocast_lower(b_in);
  KILN_CHECK(self.dtype() == a.dtype() && a.dtype() == b.dtype(), name, "self and the matrices must have one dtype, got ",
             self.dtype(), ", ", a.dtype(), " and ", b.dtype());
  const Tensor product = product_of(a, b);
  KILN_CHECK(broadcast_shapes(self.shape(), product.shape(), name) == product.shape(), name, "self of shape ",
             self.shape(), " does not broadcast to the product's shape ", product.shape());
  KILN_CHECK(product.is_floating_point() || (!beta.is_floating_point() && !alpha.is_floating_point()), name,
             "beta and alpha must be integers for ", product.dtype(), " tensors");
  const Tensor scaled = alpha.to_double() == 1 ? product : product * alpha;
  if (beta.to_double() == 0)
    return self.requires_grad() ? where(ones_like(scaled, kBool), scaled, self) : scaled;
  return (beta.to_double() == 1 ? self : self * beta) + scaled;
}

}  // namespace

Tensor outer(const Tensor& a, const Tensor& b) {
  ops::check_defined(a, "outer");
  ops::check_defined(b, "outer");
  KILN_CHECK(a.dim() == 1 && b.dim() == 1, "outer", "expects two 1-D tensors, got ", a.dim(), "-D and ", b.dim(),
             "-D");
  return a.unsqueeze(1) * b.unsqueeze(0);
}

// A 1-D x as a matrix: x (padded by |diagonal| zeros) where column - row = diagonal, along the rows
// above the main diagonal and the columns below it.
Tensor diag(const Tensor& x, int64_t diagonal) {
  ops::check_defined(x, "diag");
  KILN_CHECK(x.dim() == 1 || x.dim() == 2, "diag", "expected a 1-D or 2-D tensor, got shape ", x.shape());
  if (x.dim() == 2) return x.diagonal(diagonal).clone();
  const int64_t k = diagonal < 0 ? -diagonal : diagonal, m = x.numel() + k;
  const TensorOptions at = TensorOptions(kInt64).device(x.device());
  const Tensor on_diagonal = (arange(m, at).view({1, m}) - arange(m, at).view({m, 1})) == diagonal;
  const Tensor padded = pad(x, {0, k});
  return where(on_diagonal, diagonal >= 0 ? padded.view({m, 1}) : padded.view({1, m}), zeros({}, x.options()));
}

Tensor trace(const Tensor& x) {
  ops::check_defined(x, "trace");
  KILN_CHECK(x.dim() == 2, "trace", "expected a matrix, got shape ", x.shape());
  return x.diagonal().sum();
}

Tensor addmm(const Tensor& self, const Tensor& m1, const Tensor& m2, Scalar beta, Scalar alpha) {
  return add_scaled(self, m1, m2, beta, alpha, 2, mm, "addmm");
}

Tensor baddbmm(const Tensor& self, const Tensor& b1, const Tensor& b2, Scalar beta, Scalar alpha) {
  return add_scaled(self, b1, b2, beta, alpha, 3, bmm, "baddbmm");
}

Tensor cosine_similarity(const Tensor& x1_in, const Tensor& x2_in, int64_t dim, double eps) {
  ops::check_defined(x1_in, "cosine_similarity");
  ops::check_defined(x2_in, "cosine_similarity");
  const Shape shape = broadcast_shapes(x1_in.shape(), x2_in.shape(), "cosine_similarity");
  const ScalarType t = ops::float_type(promote_types(x1_in.dtype(), x2_in.dtype()));
  const Tensor x1 = x1_in.to(t).expand(shape), x2 = x2_in.to(t).expand(shape);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(static_cast<int64_t>(shape.size()), 1), "cosine_similarity");
  // The norm raised to eps in value only (torch clamps it under no_grad).
  auto unit = [&](const Tensor& x) {
    const Tensor n = norm(x, 2.0, {d}, true);
    return x / (n + (clamp_min(n.detach(), eps) - n.detach()));
  };
  return sum(unit(x1) * unit(x2), {d});
}

// ---- einsum

namespace {

// Labels: 'A'-'Z' are 0-25 and 'a'-'z' 26-51 (torch's implicit output order is ASCII's); the dims
// of "..." get 52, 53, ... right-aligned across operands, so that they broadcast as NumPy's.
constexpr int kLetters = 52;

struct Term {
  std::vector<int> labels;  // the letters, in order
  bool ellipsis = false;
  size_t ellipsis_at = 0;  // where "..." stands among the letters
};

// An operand on its way through the contraction: the tensor and the label of each of its dims.
struct Labelled {
  Tensor t;
  std::vector<int> labels;
};

Term parse_term(std::string_view s, std::string_view eq) {
  Term term;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ' ') continue;
    if (c == '.') {
      KILN_CHECK(!term.ellipsis && s.substr(i, 3) == "...", "einsum", "\"", eq,
                 "\": '.' must come as one \"...\" per operand");
      term.ellipsis = true;
      term.ellipsis_at = term.labels.size();
      i += 2;
      continue;
    }
    KILN_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'), "einsum", "\"", eq, "\": '", c,
               "' is not a letter");
    term.labels.push_back(c >= 'a' ? 26 + (c - 'a') : c - 'A');
  }
  return term;
}

std::string label_name(int label) {
  if (label >= kLetters) return "... dim " + std::to_string(label - kLetters);
  return std::string(1, static_cast<char>(label < 26 ? 'A' + label : 'a' + (label - 26)));
}

// The dims' labels of an operand of `rank` dims: its letters with "..." standing for the dims they
// leave, the last of those labelled kLetters + ellipsis_dims - 1.
std::vector<int> dim_labels(const Term& term, int64_t rank, int64_t ellipsis_dims, size_t k, std::string_view eq) {
  const int64_t named = static_cast<int64_t>(term.labels.size());
  KILN_CHECK(term.ellipsis ? rank >= named : rank == named, "einsum", "\"", eq, "\": operand ", k, " has ", rank,
             " dims but its subscripts name ", named);
  std::vector<int> labels(term.labels.begin(), term.labels.end());
  if (term.ellipsis) {
    const int64_t e = rank - named;
    std::vector<int> dots;
    for (int64_t j = 0; j < e; ++j) dots.push_back(static_cast<int>(kLetters + ellipsis_dims - e + j));
    labels.insert(labels.begin() + static_cast<std::ptrdiff_t>(term.ellipsis_at), dots.begin(), dots.end());
  }
  return labels;
}

int64_t index_of(const std::vector<int>& labels, int label) {
  return std::find(labels.begin(), labels.end(), label) - labels.begin();
}
bool has(const std::vector<int>& labels, int label) {
  return std::find(labels.begin(), labels.end(), label) != labels.end();
}

// A label repeated in one operand ("ii->i") takes the diagonal: the two dims go last, flattened,
// and index_select keeps positions i (n + 1), one dim labelled once, last.
void take_diagonals(Labelled& x, size_t k) {
  for (size_t p = 0; p < x.labels.size(); ++p) {
    for (size_t q = p + 1; q < x.labels.size(); ++q) {
      if (x.labels[q] != x.labels[p]) continue;
      const int label = x.labels[p];
      const int64_t n = x.t.size(static_cast<int64_t>(p));
      KILN_CHECK(x.t.size(static_cast<int64_t>(q)) == n, "einsum", "subscript ", label_name(label),
                 " is repeated in operand ", k, " with sizes ", n, " and ", x.t.size(static_cast<int64_t>(q)));
      Shape order, shape;
      std::vector<int> labels;
      for (size_t d = 0; d < x.labels.size(); ++d)
        if (d != p && d != q) {
          order.push_back(static_cast<int64_t>(d));
          shape.push_back(x.t.size(static_cast<int64_t>(d)));
          labels.push_back(x.labels[d]);
        }
      order.push_back(static_cast<int64_t>(p));
      order.push_back(static_cast<int64_t>(q));
      shape.push_back(n * n);
      const Tensor flat = x.t.permute(order).reshape(shape);
      const Tensor diag = arange(n, TensorOptions(kInt64).device(x.t.device())) * (n + 1);
      x.t = index_select(flat, -1, diag);
      labels.push_back(label);
      x.labels = labels;
      return take_diagonals(x, k);  // the labels moved: look again
    }
  }
}

// Sums x over its labels that `keep` does not hold.
void sum_unneeded(Labelled& x, const std::vector<int>& keep) {
  Shape dims;
  std::vector<int> left;
  for (size_t d = 0; d < x.labels.size(); ++d) {
    if (has(keep, x.labels[d])) left.push_back(x.labels[d]);
    else dims.push_back(static_cast<int64_t>(d));
  }
  if (dims.empty()) return;
  x.t = sum(x.t, dims);
  x.labels = left;
}

int64_t size_of(const Labelled& x, int label) { return x.t.size(index_of(x.labels, label)); }

// a and b (each label once in each) contracted over their shared labels that `keep` does not
// hold, through one batched matmul: [batch, a's own, shared] @ [batch, shared, b's own].
Labelled contract(Labelled a, Labelled b, const std::vector<int>& keep) {
  std::vector<int> batch, shared, own_a, own_b;
  for (int l : a.labels) {
    if (!has(b.labels, l)) own_a.push_back(l);
    else if (has(keep, l)) batch.push_back(l);
    else shared.push_back(l);
  }
  for (int l : b.labels)
    if (!has(a.labels, l)) own_b.push_back(l);
  // A size-1 dim broadcasts against the other's: a shared one is summed out of the other first
  // (sum_k a_0 b_k = a_0 sum_k b_k), a batch one is expanded.
  for (int l : shared) {
    const int64_t na = size_of(a, l), nb = size_of(b, l);
    if (na == nb) continue;
    KILN_CHECK(na == 1 || nb == 1, "einsum", "subscript ", label_name(l), " has sizes ", na, " and ", nb,
               ", which do not broadcast");
    Labelled& big = na == 1 ? b : a;
    big.t = sum(big.t, {index_of(big.labels, l)}, true);
  }
  Shape batch_sizes;
  for (int l : batch) {
    const int64_t na = size_of(a, l), nb = size_of(b, l);
    KILN_CHECK(na == nb || na == 1 || nb == 1, "einsum", "subscript ", label_name(l), " has sizes ", na, " and ", nb,
               ", which do not broadcast");
    batch_sizes.push_back(std::max(na, nb));
  }
  auto arrange = [&](const Labelled& x, const std::vector<int>& mid, const std::vector<int>& last) {
    Shape order, shape;
    int64_t m = 1, n = 1, bt = 1;
    for (size_t i = 0; i < batch.size(); ++i) {
      order.push_back(index_of(x.labels, batch[i]));
      shape.push_back(batch_sizes[i]);
      bt *= batch_sizes[i];
    }
    for (int l : mid) {
      order.push_back(index_of(x.labels, l));
      shape.push_back(size_of(x, l));
      m *= size_of(x, l);
    }
    for (int l : last) {
      order.push_back(index_of(x.labels, l));
      shape.push_back(size_of(x, l));
      n *= size_of(x, l);
    }
    return x.t.permute(order).expand(shape).reshape({bt, m, n});
  };
  const Tensor product = bmm(arrange(a, own_a, shared), arrange(b, shared, own_b));
  Shape shape = batch_sizes;
  std::vector<int> labels = batch;
  for (int l : own_a) {
    shape.push_back(size_of(a, l));
    labels.push_back(l);
  }
  for (int l : own_b) {
    shape.push_back(size_of(b, l));
    labels.push_back(l);
  }
  return {product.reshape(shape), labels};
}

}  // namespace

Tensor einsum(std::string_view eq, const std::vector<Tensor>& operands) {
  KILN_CHECK(!operands.empty(), "einsum", "needs at least one operand");
  for (const Tensor& t : operands) ops::check_defined(t, "einsum");
  const ScalarType dtype = operands[0].dtype();
  for (const Tensor& t : operands)
    KILN_CHECK(t.dtype() == dtype, "einsum", "operands have ", dtype, " and ", t.dtype(), ": one dtype is needed");
  KILN_CHECK(dtype != kBool, "einsum", "is not defined for bool tensors (its products run through bmm)");
  const size_t arrow = eq.find("->");
  const std::string_view lhs = eq.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(lhs.substr(start, comma == std::string_view::npos ? comma : comma - start), eq));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  KILN_CHECK(terms.size() == operands.size(), "einsum", "\"", eq, "\" has ", terms.size(), " operand subscripts for ",
             operands.size(), " operands");
  int64_t ellipsis_dims = 0;
  for (size_t k = 0; k < terms.size(); ++k)
    if (terms[k].ellipsis)
      ellipsis_dims = std::max(ellipsis_dims, operands[k].dim() - static_cast<int64_t>(terms[k].labels.size()));

  std::vector<Labelled> xs;
  std::vector<int> counts(static_cast<size_t>(kLetters + ellipsis_dims), 0);
  for (size_t k = 0; k < terms.size(); ++k) {
    Labelled x{operands[k], dim_labels(terms[k], operands[k].dim(), ellipsis_dims, k, eq)};
    KILN_CHECK(x.t.device() == operands[0].device(), "einsum", "operands are on ", operands[0].device(), " and ",
               x.t.device());
    for (int l : x.labels) ++counts[static_cast<size_t>(l)];
    take_diagonals(x, k);
    xs.push_back(std::move(x));
  }
  // The output's labels: given after "->", else the "..." dims and then the letters used once.
  std::vector<int> out;
  if (arrow != std::string_view::npos) {
    const Term t = parse_term(eq.substr(arrow + 2), eq);
    out = t.labels;
    if (t.ellipsis) {
      std::vector<int> dots;
      for (int64_t j = 0; j < ellipsis_dims; ++j) dots.push_back(static_cast<int>(kLetters + j));
      out.insert(out.begin() + static_cast<std::ptrdiff_t>(t.ellipsis_at), dots.begin(), dots.end());
    }
    for (size_t i = 0; i < out.size(); ++i) {
      KILN_CHECK(counts[static_cast<size_t>(out[i])] > 0, "einsum", "\"", eq, "\": output subscript ",
                 label_name(out[i]), " is in no operand");
      KILN_CHECK(index_of(out, out[i]) == static_cast<int64_t>(i), "einsum", "\"", eq, "\": output subscript ",
                 label_name(out[i]), " appears more than once");
    }
  } else {
    for (int64_t j = 0; j < ellipsis_dims; ++j) out.push_back(static_cast<int>(kLetters + j));
    for (int l = 0; l < kLetters; ++l)
      if (counts[static_cast<size_t>(l)] == 1) out.push_back(l);
  }

  // A label in one operand only, not in the output, is summed out of it first.
  for (size_t k = 0; k < xs.size(); ++k) {
    std::vector<int> keep = out;
    for (size_t j = 0; j < xs.size(); ++j)
      if (j != k) keep.insert(keep.end(), xs[j].labels.begin(), xs[j].labels.end());
    sum_unneeded(xs[k], keep);
  }
  // Then left to right, each step keeping the labels the output or a later operand needs (so a
  // label of the running result that the next operand lacks is needed later: none is left to sum).
  Labelled acc = std::move(xs[0]);
  for (size_t k = 1; k < xs.size(); ++k) {
    std::vector<int> keep = out;
    for (size_t j = k + 1; j < xs.size(); ++j) keep.insert(keep.end(), xs[j].labels.begin(), xs[j].labels.end());
    acc = contract(std::move(acc), std::move(xs[k]), keep);
  }
  Shape order;
  for (int l : out) order.push_back(index_of(acc.labels, l));
  return acc.t.permute(order);
}

}  // namespace kiln
