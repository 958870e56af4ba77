// The op table, reductions: sum, mean, var, norms and the rest over dims, max/min and arg forms, softmax.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "op_table_util.h"

namespace kiln::test::op_table {
namespace {

// ==========================================================================================
// Reductions over sets of dims, with keepdim.

// Reduces v (shape `shape`) over `dims` (empty = all) with f applied to each group, whose values
// are in row-major order of the reduced dims. Returns the values and the output shape.
std::pair<Vec, Shape> reduce_ref(const Vec& v, const Shape& shape, const Shape& dims, bool keepdim,
                                 const std::function<double(const Vec&)>& f) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> red(shape.size(), dims.empty());
  for (int64_t d : dims)
    if (rank > 0) red[wrap_dim_ref(d, rank)] = true;
  Shape kept, reduced, out_shape;
  for (int64_t d = 0; d < rank; ++d) {
    (red[d] ? reduced : kept).push_back(shape[d]);
    if (!red[d]) out_shape.push_back(shape[d]);
    else if (keepdim) out_shape.push_back(1);
  }
  Shape st = row_major(shape);
  Vec out;
  for (int64_t o = 0; o < numel_of(kept); ++o) {
    Shape ko = unravel(o, kept);
    Vec group;
    for (int64_t g = 0; g < numel_of(reduced); ++g) {
      Shape rg = unravel(g, reduced);
      int64_t off = 0;
      size_t ki = 0, ri = 0;
      for (int64_t d = 0; d < rank; ++d) off += (red[d] ? rg[ri++] : ko[ki++]) * st[d];
      group.push_back(v[off]);
    }
    out.push_back(f(group));
  }
  return {out, out_shape};
}

double sum_ref(const Vec& g) { return std::accumulate(g.begin(), g.end(), 0.0); }
double prod_ref(const Vec& g) { return std::accumulate(g.begin(), g.end(), 1.0, std::multiplies<>()); }
double all_ref(const Vec& g) { return b2d(std::all_of(g.begin(), g.end(), [](double v) { return v != 0; })); }
double any_ref(const Vec& g) { return b2d(std::any_of(g.begin(), g.end(), [](double v) { return v != 0; })); }
double mean_ref(const Vec& g) { return g.empty() ? kNaN : sum_ref(g) / static_cast<double>(g.size()); }
double var_ref(const Vec& g, int64_t correction) {
  double m = mean_ref(g), s = 0;
  for (double x : g) s += (x - m) * (x - m);
  return s / std::max<double>(static_cast<double>(g.size()) - static_cast<double>(correction), 0.0);
}
double norm_ref(const Vec& g, double p) {
  double s = 0;
  for (double x : g) s = std::isinf(p) ? std::max(s, std::abs(x)) : s + std::pow(std::abs(x), p);
  return std::isinf(p) ? s : std::pow(s, 1.0 / p);
}
double logsumexp_ref(const Vec& g) {
  double m = -kInf;
  for (double x : g) m = std::max(m, x);
  if (g.empty()) return -kInf;
  double s = 0;
  for (double x : g) s += std::exp(x - m);
  return m + std::log(s);
}

struct ReduceRow {
  std::string name;
  std::function<Tensor(const Tensor&, const Shape&, bool)> fn;
  std::function<double(const Vec&)> ref;
  Dist dist;
  Out out;
  std::vector<ScalarType> dtypes;
  bool empty_group_throws = false;  // amax/amin have no identity
};
void PrintTo(const ReduceRow& r, std::ostream* os) { *os << r.name; }

std::vector<ReduceRow> reduce_rows() {
  using T = const Tensor&;
  using S = const Shape&;
  const auto F = kFloats, FI = kFloatsInts;
  const auto FIB = kFloatsInts + std::vector<ScalarType>{kBool};
  auto extreme = [](bool is_max) {
    return [is_max](const Vec& g) {
      double r = is_max ? -kInf : kInf;
      for (double x : g) r = is_max ? std::max(r, x) : std::min(r, x);
      return r;
    };
  };
  return {
      {"sum", [](T x, S d, bool k) { return sum(x, d, k); }, sum_ref, Dist::Normal, Out::SumLike, FIB},
      {"sum_method", [](T x, S d, bool k) { return x.sum(d, k); }, sum_ref, Dist::Normal, Out::SumLike, {kFloat32}},
      {"mean", [](T x, S d, bool k) { return mean(x, d, k); }, mean_ref, Dist::Normal, Out::Same, F},
      {"var_correction0", [](T x, S d, bool k) { return var(x, d, 0, k); }, [](const Vec& g) { return var_ref(g, 0); },
       Dist::Normal, Out::Same, F},
      {"var_correction1", [](T x, S d, bool k) { return x.var(d, 1, k); }, [](const Vec& g) { return var_ref(g, 1); },
       Dist::Normal, Out::Same, F},
      {"std_correction0", [](T x, S d, bool k) { return kiln::std(x, d, 0, k); },
       [](const Vec& g) { return std::sqrt(var_ref(g, 0)); }, Dist::Normal, Out::Same, F},
      {"std_correction1", [](T x, S d, bool k) { return x.std(d, 1, k); },
       [](const Vec& g) { return std::sqrt(var_ref(g, 1)); }, Dist::Normal, Out::Same, F},
      {"prod", [](T x, S d, bool k) { return prod(x, d, k); }, prod_ref, Dist::NearOne, Out::SumLike, FIB},
      {"logsumexp", [](T x, S d, bool k) { return logsumexp(x, d, k); }, logsumexp_ref, Dist::Normal, Out::Float, FI},
      {"amax", [](T x, S d, bool k) { return amax(x, d, k); }, extreme(true), Dist::Normal, Out::Same, FIB, true},
      {"amin", [](T x, S d, bool k) { return x.amin(d, k); }, extreme(false), Dist::Normal, Out::Same, FIB, true},
      {"all", [](T x, S d, bool k) { return all(x, d, k); }, all_ref, Dist::NearOne, Out::Bool, FIB},
      {"all_with_zeros", [](T x, S d, bool k) { return all(x, d, k); }, all_ref, Dist::SmallInt, Out::Bool, FIB},
      {"any", [](T x, S d, bool k) { return any(x, d, k); }, any_ref, Dist::SmallInt, Out::Bool, FIB},
      {"norm_p1", [](T x, S d, bool k) { return norm(x, 1, d, k); }, [](const Vec& g) { return norm_ref(g, 1); },
       Dist::Normal, Out::Same, F},
      {"norm_p2", [](T x, S d, bool k) { return norm(x, 2, d, k); }, [](const Vec& g) { return norm_ref(g, 2); },
       Dist::Normal, Out::Same, F},
      {"norm_p3", [](T x, S d, bool k) { return norm(x, 3, d, k); }, [](const Vec& g) { return norm_ref(g, 3); },
       Dist::Normal, Out::Same, F},
      {"norm_p0", [](T x, S d, bool k) { return norm(x, 0, d, k); },
       [](const Vec& g) { return static_cast<double>(g.size() - std::count(g.begin(), g.end(), 0.0)); },
       Dist::SmallInt, Out::Same, F},
      {"norm_pinf", [](T x, S d, bool k) { return norm(x, kInf, d, k); },
       [](const Vec& g) { return norm_ref(g, kInf); }, Dist::Normal, Out::Same, F, true},
  };
}

struct ReduceCase {
  Shape shape;
  Layout layout;
  std::vector<Shape> dim_sets;
};
const std::vector<Shape> kDims3 = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {2, 0}, {1, 2}, {0, 1, 2}};
const std::vector<ReduceCase> kReduceCases = {
    {{3, 4, 5}, Layout::Contig, kDims3},     {{3, 4, 5}, Layout::Transposed, kDims3},
    {{3, 4, 5}, Layout::Sliced, kDims3},     {{3, 4, 5}, Layout::Expanded, kDims3},
    {{3, 4, 5}, Layout::Permuted, kDims3},   {{}, Layout::Contig, {{}, {0}, {-1}}},
    {{0, 4}, Layout::Contig, {{}, {0}, {1}}}, {{6}, Layout::Sliced, {{}, {0}}},
    {{300, 130}, Layout::Transposed, {{0}, {1}}},  // threaded over outputs
};

class OpTableReduce : public ::testing::TestWithParam<ReduceRow> {};

TEST_P(OpTableReduce, MatchesReference) {
  const ReduceRow& row = GetParam();
  for (Device dev : test::devices())
    for (ScalarType dt : row.dtypes)
      for (const ReduceCase& c : kReduceCases)
        for (const Shape& dims : c.dim_sets)
          for (bool keepdim : {false, true}) {
            std::string what = row.name + " " + dtype_name(dt) + " " + str(c.shape, c.layout) + " dims " + str(dims) +
                               (keepdim ? " keepdim" : "") + " on " + dev.str();
            run_case(what, [&] {
              Input x = make_input(c.shape, row.dist, dt, dev, c.layout);
              bool empty_group = false;
              auto [want, shape] = reduce_ref(x.v, c.shape, dims, keepdim, [&](const Vec& g) {
                empty_group = empty_group || g.empty();
                return row.ref(g);
              });
              if (empty_group && row.empty_group_throws) {
                EXPECT_THROW(row.fn(x.t, dims, keepdim), Error) << what;
                return;
              }
              ScalarType ot = out_dtype(row.out, dt);
              check(row.fn(x.t, dims, keepdim), want, shape, ot, dev, sum_tol_for(ot), what);
            });
          }
}

INSTANTIATE_TEST_SUITE_P(OpTable, OpTableReduce, ::testing::ValuesIn(reduce_rows()),
                         [](const auto& info) { return info.param.name; });

// Whole-tensor forms without dims.
TEST(OpTableReduceAll, FullReductions) {
  for (Device dev : test::devices())
    for (ScalarType dt : kFloats) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " on " + dev.str());
      Input x = make_input({3, 4}, Dist::NearOne, dt, dev, Layout::Transposed);
      Tol tol = sum_tol_for(dt);
      check(x.t.sum(), {sum_ref(x.v)}, {}, dt, dev, tol, "sum()");
      check(x.t.mean(), {mean_ref(x.v)}, {}, dt, dev, tol, "mean()");
      check(x.t.prod(), {prod_ref(x.v)}, {}, dt, dev, tol, "prod()");
      check(max(x.t), {*std::max_element(x.v.begin(), x.v.end())}, {}, dt, dev, {0, 0}, "max()");
      check(x.t.min(), {*std::min_element(x.v.begin(), x.v.end())}, {}, dt, dev, {0, 0}, "min()");
      check(x.t.norm(), {norm_ref(x.v, 2)}, {}, dt, dev, tol, "norm()");
      check(x.t.norm(1), {norm_ref(x.v, 1)}, {}, dt, dev, tol, "norm(1)");
      check(x.t.all(), {1}, {}, kBool, dev, {0, 0}, "all()");
      check(x.t.any(), {1}, {}, kBool, dev, {0, 0}, "any()");
      check(var(x.t), {var_ref(x.v, 1)}, {}, dt, dev, tol, "var()");
      check(kiln::std(x.t), {std::sqrt(var_ref(x.v, 1))}, {}, dt, dev, tol, "std()");
      check(x.t.prod(1, true), reduce_ref(x.v, {3, 4}, {1}, true, prod_ref).first, {3, 1}, dt, dev, tol,
            "prod(1, keepdim)");
    }
  // the empty tensor: identities, and errors where there is none
  Tensor e = zeros({0, 3});
  check(e.sum(), {0}, {}, kFloat32, Device::cpu(), {0, 0}, "sum of empty");
  check(e.prod(), {1}, {}, kFloat32, Device::cpu(), {0, 0}, "prod of empty");
  check(e.all(), {1}, {}, kBool, Device::cpu(), {0, 0}, "all of empty");
  check(e.any(), {0}, {}, kBool, Device::cpu(), {0, 0}, "any of empty");
  EXPECT_TRUE(std::isnan(e.mean().item<double>()));
  EXPECT_THROW(max(e), Error);
  EXPECT_THROW(argmax(e), Error);
}

// max/min with a dim (values and indices), argmax/argmin.
TEST(OpTableReduceIndex, WithIndices) {
  struct Row {
    std::string name;
    bool is_max, has_values;
  };
  const std::vector<Row> rows = {{"max", true, true}, {"min", false, true}, {"argmax", true, false},
                                 {"argmin", false, false}};
  struct Case {
    Shape shape;
    Layout layout;
    std::vector<int64_t> dims;
  };
  const std::vector<Case> cases = {
      {{3, 4, 5}, Layout::Contig, {0, 1, 2, -1}}, {{3, 4, 5}, Layout::Transposed, {0, 1, 2}},
      {{3, 4, 5}, Layout::Sliced, {0, 2}},        {{3, 4, 5}, Layout::Permuted, {0, 1, 2}},
      {{3, 4, 5}, Layout::Expanded, {0, 1}},      {{}, Layout::Contig, {0, -1}},
      {{0, 4}, Layout::Contig, {0, 1}},
  };
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts)
      for (const Row& row : rows)
        for (const Case& c : cases)
          for (int64_t dim : c.dims)
            for (bool keepdim : {false, true}) {
              std::string what = row.name + " " + dtype_name(dt) + " " + str(c.shape, c.layout) + " dim " +
                                 std::to_string(dim) + (keepdim ? " keepdim" : "");
              run_case(what, [&] {
                // integers tie often: the first extreme wins, as in PyTorch
                Input x = make_input(c.shape, Dist::Normal, dt, dev, c.layout);
                auto pick = [&](const Vec& g) -> std::pair<double, double> {
                  size_t best = 0;
                  for (size_t i = 1; i < g.size(); ++i)
                    if (row.is_max ? g[i] > g[best] : g[i] < g[best]) best = i;
                  return {g.empty() ? kNaN : g[best], static_cast<double>(best)};
                };
                bool empty_group = false;
                auto [vals, shape] = reduce_ref(x.v, c.shape, {dim}, keepdim, [&](const Vec& g) {
                  empty_group = empty_group || g.empty();
                  return pick(g).first;
                });
                Vec idx = reduce_ref(x.v, c.shape, {dim}, keepdim, [&](const Vec& g) { return pick(g).second; }).first;
                if (empty_group) {
                  if (row.has_values) {
                    EXPECT_THROW(row.is_max ? max(x.t, dim, keepdim) : min(x.t, dim, keepdim), Error);
                  }
                  else EXPECT_THROW(row.is_max ? argmax(x.t, dim, keepdim) : argmin(x.t, dim, keepdim), Error);
                  return;
                }
                if (row.has_values) {
                  auto [v, i] = row.is_max ? x.t.max(dim, keepdim) : x.t.min(dim, keepdim);
                  check(v, vals, shape, dt, dev, {0, 0}, what + " values");
                  check(i, idx, shape, kInt64, dev, {0, 0}, what + " indices");
                } else {
                  check(row.is_max ? argmax(x.t, dim, keepdim) : x.t.argmin(dim, keepdim), idx, shape, kInt64, dev,
                        {0, 0}, what);
                }
              });
            }
  // argmax/argmin over the flattened tensor
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts)
      for (Layout l : {Layout::Contig, Layout::Transposed, Layout::Sliced}) {
        SCOPED_TRACE(std::string("argmax/argmin flat ") + dtype_name(dt) + " " + layout_name(l));
        Input x = make_input({4, 5}, Dist::Normal, dt, dev, l);
        double imax = static_cast<double>(std::max_element(x.v.begin(), x.v.end()) - x.v.begin());
        double imin = static_cast<double>(std::min_element(x.v.begin(), x.v.end()) - x.v.begin());
        check(argmax(x.t), {imax}, {}, kInt64, dev, {0, 0}, "argmax()");
        check(x.t.argmin(), {imin}, {}, kInt64, dev, {0, 0}, "argmin()");
        check(argmax(x.t, std::nullopt, true), {imax}, {1, 1}, kInt64, dev, {0, 0}, "argmax(keepdim)");
      }
}

// ==========================================================================================
// softmax and log_softmax over each dim.

TEST(OpTableSoftmax, MatchesReference) {
  const std::vector<ShapeCase> cases = {
      {{3, 4, 5}, Layout::Contig},   {{3, 4, 5}, Layout::Transposed}, {{3, 4, 5}, Layout::Sliced},
      {{3, 4, 5}, Layout::Permuted}, {{3, 4, 5}, Layout::Expanded},   {{7}, Layout::Contig},
      {{}, Layout::Contig},          {{0, 4}, Layout::Contig},        {{2, 300}, Layout::Transposed},
      {{64, 300}, Layout::Transposed},  // threaded over rows, for either dim
  };
  for (Device dev : test::devices())
    for (ScalarType dt : kFloats)
      for (bool log : {false, true})
        for (const ShapeCase& c : cases) {
          const int64_t rank = static_cast<int64_t>(c.shape.size());
          std::vector<int64_t> dims;
          for (int64_t d = 0; d < std::max<int64_t>(rank, 1); ++d) dims.push_back(d);
          dims.push_back(-1);
          for (int64_t dim : dims) {
            std::string what = std::string(log ? "log_softmax " : "softmax ") + dtype_name(dt) + " " +
                               str(c.shape, c.layout) + " dim " + std::to_string(dim);
            run_case(what, [&] {
              Input x = make_input(c.shape, Dist::Normal, dt, dev, c.layout);
              // reference: for each position, the slice along dim through it
              const int64_t d = rank == 0 ? 0 : wrap_dim_ref(dim, rank);
              Shape st = row_major(c.shape);
              Vec want(x.v.size());
              for (int64_t i = 0; i < numel_of(c.shape); ++i) {
                Shape idx = unravel(i, c.shape);
                Vec slice;
                int64_t n = rank == 0 ? 1 : c.shape[d];
                for (int64_t j = 0; j < n; ++j) {
                  int64_t off = i - (rank == 0 ? 0 : idx[d] * st[d]) + (rank == 0 ? 0 : j * st[d]);
                  slice.push_back(x.v[off]);
                }
                double lse = logsumexp_ref(slice);
                want[i] = log ? x.v[i] - lse : std::exp(x.v[i] - lse);
              }
              Tensor y = log ? log_softmax(x.t, dim) : x.t.softmax(dim);
              check(y, want, c.shape, dt, dev, sum_tol_for(dt), what);
            });
          }
        }
}

// ==========================================================================================
// NaN and infinities in the reductions and softmax, whose handling PyTorch defines, and in a
// few binary ops. The unary rows on special values are in test_op_table_elementwise.cpp.

TEST(OpTableSpecialValues, Reductions) {
  for (Device dev : test::devices())
    for (ScalarType dt : kFloats) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " on " + dev.str());
      auto T = [&](const Vec& v) { return tensor_1d(v, dt, dev); };
      const Tol exact{0, 0}, tol = tol_for(dt);
      Tensor with_nan = T({1, kNaN, 2});
      check(amax(with_nan), {kNaN}, {}, dt, dev, exact, "amax with NaN");
      check(amin(with_nan), {kNaN}, {}, dt, dev, exact, "amin with NaN");
      check(max(with_nan), {kNaN}, {}, dt, dev, exact, "max with NaN");
      auto [v, i] = max(with_nan, 0);
      check(v, {kNaN}, {}, dt, dev, exact, "max(dim) with NaN");
      check(i, {1}, {}, kInt64, dev, exact, "max(dim) index of NaN");
      auto [v2, i2] = min(T({1, 3, kNaN, 2, kNaN}), 0);
      check(v2, {kNaN}, {}, dt, dev, exact, "min(dim) with NaN");
      check(i2, {2}, {}, kInt64, dev, exact, "min(dim) index of the first NaN");
      check(argmax(with_nan), {1}, {}, kInt64, dev, exact, "argmax with NaN");
      check(argmin(with_nan), {1}, {}, kInt64, dev, exact, "argmin with NaN");
      check(sum(with_nan), {kNaN}, {}, dt, dev, exact, "sum with NaN");
      check(mean(T({kInf, 1})), {kInf}, {}, dt, dev, exact, "mean with inf");
      check(var(T({kInf, 1})), {kNaN}, {}, dt, dev, exact, "var with inf");
      check(prod(T({kInf, 0})), {kNaN}, {}, dt, dev, exact, "prod inf * 0");
      check(logsumexp(T({-kInf, -kInf}), {0}), {-kInf}, {}, dt, dev, exact, "logsumexp of -infs");
      check(logsumexp(T({kInf, 1}), {0}), {kInf}, {}, dt, dev, exact, "logsumexp with inf");
      check(logsumexp(T({kNaN, 1}), {0}), {kNaN}, {}, dt, dev, exact, "logsumexp with NaN");
      check(logsumexp(T({-kInf, 0}), {0}), {0}, {}, dt, dev, tol, "logsumexp with -inf");
      check(norm(with_nan, kInf), {kNaN}, {}, dt, dev, exact, "inf-norm with NaN");
      check(norm(T({kNaN, 1, 2}), kInf), {kNaN}, {}, dt, dev, exact, "inf-norm with NaN first");
      check(norm(with_nan, 1), {kNaN}, {}, dt, dev, exact, "1-norm with NaN");
      check(norm(T({kInf, 1})), {kInf}, {}, dt, dev, exact, "2-norm with inf");
      check(norm(T({-kInf, 1}), kInf), {kInf}, {}, dt, dev, exact, "inf-norm with -inf");
      check(any(T({kNaN})), {1}, {}, kBool, dev, exact, "any(NaN)");
      check(all(T({kNaN, -0.0})), {0}, {}, kBool, dev, exact, "all(NaN, -0)");
      check(softmax(T({-kInf, 0}), 0), {0, 1}, {2}, dt, dev, tol, "softmax with -inf");
      check(softmax(T({-kInf, -kInf}), 0), {kNaN, kNaN}, {2}, dt, dev, exact, "softmax of -infs");
      check(log_softmax(T({-kInf, 0}), 0), {-kInf, 0}, {2}, dt, dev, tol, "log_softmax with -inf");
      check(softmax(T({kNaN, 0}), 0), {kNaN, kNaN}, {2}, dt, dev, exact, "softmax with NaN");
      check(maximum(T({kNaN, 1, 2}), T({1, kNaN, 3})), {kNaN, kNaN, 3}, {3}, dt, dev, exact, "maximum NaN");
      check(minimum(T({kNaN, 1, 2}), T({1, kNaN, 3})), {kNaN, kNaN, 2}, {3}, dt, dev, exact, "minimum NaN");
      check(div(T({0, 1, -1}), 0.0), {kNaN, kInf, -kInf}, {3}, dt, dev, exact, "division by zero");
      check(pow(T({0, -1, 2}), T({-1, 0.5, kInf})), {kInf, kNaN, kInf}, {3}, dt, dev, exact, "pow special");
      check(clamp(T({kNaN, kInf, -kInf}), -1, 1), {kNaN, 1, -1}, {3}, dt, dev, exact, "clamp special");
      check(where(T({kNaN, 0}) != 0, T({1, 2}), T({3, 4})), {1, 4}, {2}, dt, dev, exact, "NaN != 0");
    }
}

}  // namespace
}  // namespace kiln::test::op_table
