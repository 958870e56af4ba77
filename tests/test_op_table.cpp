// The op table: every op on every device, on random inputs of many layouts, against float64 loops.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "test_util.h"

namespace {

using namespace kiln;
using Vec = std::vector<double>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ------------------------------------------------------------------------------------------
// Shapes and index arithmetic, done here rather than with Kiln so the reference is independent.

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape row_major(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

// The multi-index of flat row-major position `flat` in shape s.
Shape unravel(int64_t flat, const Shape& s) {
  Shape idx(s.size());
  for (size_t i = s.size(); i-- > 0;) {
    idx[i] = flat % s[i];
    flat /= s[i];
  }
  return idx;
}

Shape broadcast_shape(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 0; i < from.size(); ++i) {
    int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1) return false;
  }
  return true;
}

// v (row-major, shape `from`) broadcast to shape `to`.
Vec broadcast_to(const Vec& v, const Shape& from, const Shape& to) {
  Vec out(static_cast<size_t>(numel_of(to)));
  Shape st = row_major(from);
  const size_t lead = to.size() - from.size();
  for (int64_t i = 0; i < numel_of(to); ++i) {
    Shape idx = unravel(i, to);
    int64_t off = 0;
    for (size_t d = 0; d < from.size(); ++d) off += (from[d] == 1 ? 0 : idx[d + lead]) * st[d];
    out[i] = v[off];
  }
  return out;
}

std::string str(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// ------------------------------------------------------------------------------------------
// Random inputs in several layouts.

enum class Dist { Normal, Positive, Unit, NonZero, NearOne, SmallInt, Bool };
enum class Layout { Contig, Transposed, Sliced, Expanded, Permuted };

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contig: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::Sliced: return "sliced(step 2)";
    case Layout::Expanded: return "expanded";
    case Layout::Permuted: return "permuted";
  }
  return "?";
}

std::mt19937_64& rng() {
  static std::mt19937_64 g(20240531);
  return g;
}

// One random value of distribution d, representable in dtype dt (integers for integer dtypes).
double draw(Dist d, ScalarType dt) {
  auto& g = rng();
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g); };
  auto int_in = [&](int lo, int hi) { return static_cast<double>(std::uniform_int_distribution<int>(lo, hi)(g)); };
  auto sign = [&] { return std::bernoulli_distribution(0.5)(g) ? 1.0 : -1.0; };
  if (dt == kBool || d == Dist::Bool) return int_in(0, 1);
  const bool integral = !is_floating_point(dt);
  switch (d) {
    case Dist::Normal: return integral ? int_in(-4, 4) : std::normal_distribution<double>(0, 1)(g);
    case Dist::Positive: return integral ? int_in(1, 5) : uni(0.2, 3.0);
    case Dist::Unit: return integral ? int_in(0, 2) : uni(-0.9, 0.9);
    case Dist::NonZero: return sign() * (integral ? int_in(1, 4) : uni(0.5, 2.0));
    case Dist::NearOne: return sign() * (integral ? 1.0 : uni(0.9, 1.1));
    case Dist::SmallInt: return int_in(-2, 2);
    case Dist::Bool: break;
  }
  return 0;
}

// A tensor of logical shape `shape` whose memory layout is `layout`, with its values as the
// test expects them (v, row-major) and where each element lives in its base tensor (map).
struct Input {
  Tensor t, base;
  Vec v, base_v;
  std::vector<int64_t> map;  // logical position -> flat index into base
  Shape shape;
};

Input make_input(const Shape& shape, Dist dist, ScalarType dt, Device dev, Layout layout = Layout::Contig) {
  const size_t rank = shape.size();
  if ((layout == Layout::Transposed && rank < 2) || (layout == Layout::Sliced && rank < 1) ||
      (layout == Layout::Expanded && (rank < 1 || shape[0] <= 1)) || (layout == Layout::Permuted && rank < 3))
    layout = Layout::Contig;
  Shape base_shape = shape;
  if (layout == Layout::Transposed) std::swap(base_shape[rank - 2], base_shape[rank - 1]);
  if (layout == Layout::Sliced) base_shape[0] = 2 * shape[0];
  if (layout == Layout::Expanded) base_shape[0] = 1;
  if (layout == Layout::Permuted) std::reverse(base_shape.begin(), base_shape.end());

  Input in;
  in.shape = shape;
  Vec raw(static_cast<size_t>(numel_of(base_shape)));
  for (double& x : raw) x = draw(dist, dt);
  in.base = tensor(raw, base_shape, TensorOptions(dt).device(dev));
  in.base_v = test::values(in.base);  // as stored in dt

  // The view, and the strides (in base elements) this test expects it to have.
  Shape st = row_major(base_shape);
  int64_t offset = 0;
  switch (layout) {
    case Layout::Contig:
      in.t = in.base;
      break;
    case Layout::Transposed:
      in.t = in.base.transpose(-2, -1);
      std::swap(st[rank - 2], st[rank - 1]);
      break;
    case Layout::Sliced:
      in.t = in.base.slice(0, 1, std::nullopt, 2);
      offset = st[0];
      st[0] *= 2;
      break;
    case Layout::Expanded:
      in.t = in.base.expand(shape);
      st[0] = 0;
      break;
    case Layout::Permuted: {
      Shape perm(rank);
      for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(rank - 1 - i);
      in.t = in.base.permute(perm);
      std::reverse(st.begin(), st.end());
      break;
    }
  }
  // the layout is the one intended (size-1 dims may have any stride)
  for (size_t d = 0; d < rank; ++d) {
    if (shape[d] > 1) {
      EXPECT_EQ(in.t.stride(static_cast<int64_t>(d)), st[d]) << layout_name(layout) << " " << shape;
    }
  }
  const int64_t n = numel_of(shape);
  if (n > 0) {
    EXPECT_EQ(in.t.storage_offset() - in.base.storage_offset(), offset) << layout_name(layout);
  }
  in.v.resize(static_cast<size_t>(n));
  in.map.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    Shape idx = unravel(i, shape);
    int64_t off = offset;
    for (size_t d = 0; d < rank; ++d) off += idx[d] * st[d];
    in.map[i] = off;
    in.v[i] = in.base_v[off];
  }
  return in;
}

// ------------------------------------------------------------------------------------------
// Tolerances and checks.

struct Tol {
  double rtol, atol;
};

// Results are computed in (at least) float32 from the stored inputs and rounded once to the
// output dtype, so the tolerance is that dtype's rounding plus float32 arithmetic.
Tol tol_for(ScalarType t) {
  switch (t) {
    case kFloat64: return {1e-10, 1e-12};
    case kFloat32: return {2e-5, 2e-6};
    case kBFloat16: return {1.6e-2, 1e-2};
    case kFloat16: return {2e-3, 1e-3};
    default: return {0, 0};
  }
}
// Reductions and matmul add up many float32 terms: a little more slack.
Tol sum_tol_for(ScalarType t) {
  Tol r = tol_for(t);
  if (t == kFloat32) return {1e-4, 1e-4};
  if (t == kBFloat16) return {2e-2, 5e-2};
  if (t == kFloat16) return {4e-3, 1e-2};
  return r;
}

// test::expect_close, with a quick pass first so that large tensors that match cost little.
void expect_close(const Tensor& got, const Vec& want, const Shape& shape, Tol tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  if (got.shape() == shape) {
    Vec v = test::values(got);
    bool ok = v.size() == want.size();
    for (size_t i = 0; ok && i < v.size(); ++i) {
      if (std::isnan(want[i])) ok = std::isnan(v[i]);
      else if (std::isinf(want[i])) ok = v[i] == want[i];
      else ok = std::abs(v[i] - want[i]) <= tol.atol + tol.rtol * std::abs(want[i]);
    }
    if (ok) return;
  }
  test::expect_close(got, want, shape, tol.rtol, tol.atol, what);  // reports the mismatches
}

void check(const Tensor& got, const Vec& want, const Shape& shape, ScalarType dtype, Device dev, Tol tol,
           const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  EXPECT_EQ(got.dtype(), dtype) << what;
  EXPECT_EQ(got.device(), dev) << what;
  expect_close(got, want, shape, tol, what);
}

// Runs one case of a row: a failure names the case, and an exception fails that case only.
template <class F>
void run_case(const std::string& what, F&& body) {
  SCOPED_TRACE(what);
  try {
    body();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw " << e.what();
  }
}

enum class Out { Same, Float, Bool, SumLike, Int64 };
ScalarType out_dtype(Out o, ScalarType in) {
  switch (o) {
    case Out::Same: return in;
    case Out::Float: return is_floating_point(in) ? in : kFloat32;
    case Out::Bool: return kBool;
    case Out::SumLike: return is_floating_point(in) ? in : kInt64;
    case Out::Int64: return kInt64;
  }
  return in;
}

const std::vector<ScalarType> kFloats = {kFloat32, kFloat64, kBFloat16, kFloat16};
const std::vector<ScalarType> kFloatsInts = {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32};

std::vector<ScalarType> operator+(std::vector<ScalarType> a, const std::vector<ScalarType>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Reference math.
double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double sign_ref(double x) { return (x > 0) - (x < 0); }
double b2d(bool b) { return b ? 1.0 : 0.0; }
// NaN-propagating, as torch.maximum/minimum and clamp are.
double max_ref(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b); }
double min_ref(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b); }

// ==========================================================================================
// Elementwise ops of one tensor (including a tensor with a scalar, in either order).

struct UnaryRow {
  std::string name;
  std::function<Tensor(const Tensor&)> fn;
  std::function<double(double)> ref;
  Dist dist;
  Out out;
  std::vector<ScalarType> dtypes;
};
void PrintTo(const UnaryRow& r, std::ostream* os) { *os << r.name; }

std::vector<UnaryRow> unary_rows() {
  using T = const Tensor&;
  const auto F = kFloats, FI = kFloatsInts;
  return {
      {"neg", [](T x) { return neg(x); }, [](double x) { return -x; }, Dist::Normal, Out::Same, FI},
      {"neg_operator", [](T x) { return -x; }, [](double x) { return -x; }, Dist::Normal, Out::Same, FI},
      {"abs", [](T x) { return abs(x); }, [](double x) { return std::abs(x); }, Dist::Normal, Out::Same, FI},
      {"sign", [](T x) { return sign(x); }, sign_ref, Dist::SmallInt, Out::Same, FI},
      {"exp", [](T x) { return exp(x); }, [](double x) { return std::exp(x); }, Dist::Normal, Out::Float, FI},
      {"log", [](T x) { return log(x); }, [](double x) { return std::log(x); }, Dist::Positive, Out::Float, FI},
      {"log1p", [](T x) { return log1p(x); }, [](double x) { return std::log1p(x); }, Dist::Unit, Out::Float, FI},
      {"expm1", [](T x) { return expm1(x); }, [](double x) { return std::expm1(x); }, Dist::Normal, Out::Float, FI},
      {"sqrt", [](T x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, Dist::Positive, Out::Float, FI},
      {"rsqrt", [](T x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, Dist::Positive, Out::Float,
       FI},
      {"square", [](T x) { return square(x); }, [](double x) { return x * x; }, Dist::Normal, Out::Same, FI},
      {"reciprocal", [](T x) { return reciprocal(x); }, [](double x) { return 1 / x; }, Dist::NonZero, Out::Float, FI},
      {"tanh", [](T x) { return tanh(x); }, [](double x) { return std::tanh(x); }, Dist::Normal, Out::Float, FI},
      {"sigmoid", [](T x) { return sigmoid(x); }, sigmoid_ref, Dist::Normal, Out::Float, FI},
      {"relu", [](T x) { return relu(x); }, [](double x) { return max_ref(x, 0.0); }, Dist::Normal, Out::Same, FI},
      {"gelu_none", [](T x) { return gelu(x); }, gelu_ref, Dist::Normal, Out::Float, F},
      {"gelu_tanh", [](T x) { return gelu(x, "tanh"); }, gelu_tanh_ref, Dist::Normal, Out::Float, F},
      {"silu", [](T x) { return silu(x); }, [](double x) { return x * sigmoid_ref(x); }, Dist::Normal, Out::Float, F},
      {"sin", [](T x) { return sin(x); }, [](double x) { return std::sin(x); }, Dist::Normal, Out::Float, FI},
      {"cos", [](T x) { return cos(x); }, [](double x) { return std::cos(x); }, Dist::Normal, Out::Float, FI},
      {"logical_not", [](T x) { return logical_not(x); }, [](double x) { return b2d(x == 0); }, Dist::SmallInt,
       Out::Bool, FI + std::vector<ScalarType>{kBool}},
      {"logical_not_operator", [](T x) { return !x; }, [](double x) { return b2d(x == 0); }, Dist::SmallInt,
       Out::Bool, {kFloat32, kBool}},
      // clamp with both bounds, one bound, integer bounds; and the method form
      {"clamp", [](T x) { return clamp(x, -0.5, 0.5); }, [](double x) { return std::clamp(x, -0.5, 0.5); },
       Dist::Normal, Out::Float, F},
      {"clamp_min", [](T x) { return clamp_min(x, 0.25); }, [](double x) { return max_ref(x, 0.25); },
       Dist::Normal, Out::Float, F},
      {"clamp_max_only", [](T x) { return clamp(x, std::nullopt, -0.25); },
       [](double x) { return min_ref(x, -0.25); }, Dist::Normal, Out::Float, F},
      {"clamp_max", [](T x) { return clamp_max(x, 1); }, [](double x) { return min_ref(x, 1.0); }, Dist::Normal,
       Out::Same, FI},
      {"clamp_min_above_max", [](T x) { return clamp(x, 0.5, -0.5); },
       [](double x) { return min_ref(max_ref(x, 0.5), -0.5); },
       Dist::Normal, Out::Float, F},
      {"clamp_int_bounds", [](T x) { return x.clamp(-1, 2); }, [](double x) { return std::clamp(x, -1.0, 2.0); },
       Dist::Normal, Out::Same, FI},
      // a tensor and a scalar, in both orders, as functions, methods and operators
      {"add_scalar", [](T x) { return add(x, 2.5); }, [](double x) { return x + 2.5; }, Dist::Normal, Out::Float, FI},
      {"scalar_add", [](T x) { return add(2.5, x); }, [](double x) { return 2.5 + x; }, Dist::Normal, Out::Float, FI},
      {"add_int_scalar", [](T x) { return x.add(3); }, [](double x) { return x + 3; }, Dist::Normal, Out::Same, FI},
      {"add_operator", [](T x) { return x + 1.5; }, [](double x) { return x + 1.5; }, Dist::Normal, Out::Float, FI},
      {"radd_operator", [](T x) { return 2 + x; }, [](double x) { return 2 + x; }, Dist::Normal, Out::Same, FI},
      {"sub_scalar", [](T x) { return sub(x, 0.75); }, [](double x) { return x - 0.75; }, Dist::Normal, Out::Float, FI},
      {"scalar_sub", [](T x) { return sub(2.0, x); }, [](double x) { return 2.0 - x; }, Dist::Normal, Out::Float, FI},
      {"rsub_int_operator", [](T x) { return 3 - x; }, [](double x) { return 3 - x; }, Dist::Normal, Out::Same, FI},
      {"sub_operator", [](T x) { return x - 2; }, [](double x) { return x - 2; }, Dist::Normal, Out::Same, FI},
      {"mul_scalar", [](T x) { return mul(x, -1.5); }, [](double x) { return x * -1.5; }, Dist::Normal, Out::Float, FI},
      {"scalar_mul", [](T x) { return mul(0.5, x); }, [](double x) { return 0.5 * x; }, Dist::Normal, Out::Float, FI},
      {"mul_operator", [](T x) { return x * 3; }, [](double x) { return x * 3; }, Dist::Normal, Out::Same, FI},
      {"rmul_operator", [](T x) { return 2.0 * x; }, [](double x) { return 2.0 * x; }, Dist::Normal, Out::Float, FI},
      {"div_scalar", [](T x) { return div(x, 4.0); }, [](double x) { return x / 4.0; }, Dist::Normal, Out::Float, FI},
      {"div_int_scalar", [](T x) { return x.div(2); }, [](double x) { return x / 2; }, Dist::Normal, Out::Float, FI},
      {"scalar_div", [](T x) { return div(3.0, x); }, [](double x) { return 3.0 / x; }, Dist::NonZero, Out::Float, FI},
      {"div_operator", [](T x) { return x / 8; }, [](double x) { return x / 8; }, Dist::Normal, Out::Float, FI},
      {"rdiv_operator", [](T x) { return 1 / x; }, [](double x) { return 1.0 / x; }, Dist::NonZero, Out::Float, FI},
      {"pow_int_scalar", [](T x) { return pow(x, 2); }, [](double x) { return x * x; }, Dist::Normal, Out::Same, FI},
      {"pow_cube", [](T x) { return x.pow(3); }, [](double x) { return x * x * x; }, Dist::SmallInt, Out::Same, FI},
      {"pow_half", [](T x) { return pow(x, 0.5); }, [](double x) { return std::pow(x, 0.5); }, Dist::Positive,
       Out::Float, FI},
      {"pow_neg_float", [](T x) { return pow(x, -1.5); }, [](double x) { return std::pow(x, -1.5); },
       Dist::Positive, Out::Float, F},
      {"scalar_pow", [](T x) { return pow(2.0, x); }, [](double x) { return std::pow(2.0, x); }, Dist::Normal,
       Out::Float, FI},
      {"maximum_scalar", [](T x) { return maximum(x, 0.25); }, [](double x) { return max_ref(x, 0.25); },
       Dist::Normal, Out::Float, FI},
      {"scalar_minimum", [](T x) { return minimum(1, x); }, [](double x) { return min_ref(1.0, x); }, Dist::Normal,
       Out::Same, FI},
      {"eq_scalar", [](T x) { return eq(x, 1); }, [](double x) { return b2d(x == 1); }, Dist::SmallInt, Out::Bool, FI},
      {"scalar_eq", [](T x) { return eq(0.0, x); }, [](double x) { return b2d(x == 0); }, Dist::SmallInt, Out::Bool,
       FI},
      {"eq_operator", [](T x) { return x == -1; }, [](double x) { return b2d(x == -1); }, Dist::SmallInt, Out::Bool,
       FI},
      {"ne_scalar", [](T x) { return x.ne(0); }, [](double x) { return b2d(x != 0); }, Dist::SmallInt, Out::Bool, FI},
      {"ne_operator", [](T x) { return x != 2; }, [](double x) { return b2d(x != 2); }, Dist::SmallInt, Out::Bool, FI},
      {"lt_scalar", [](T x) { return lt(x, 0.5); }, [](double x) { return b2d(x < 0.5); }, Dist::SmallInt, Out::Bool,
       FI},
      {"scalar_lt", [](T x) { return lt(0.5, x); }, [](double x) { return b2d(0.5 < x); }, Dist::SmallInt, Out::Bool,
       FI},
      {"lt_operator", [](T x) { return x < 1; }, [](double x) { return b2d(x < 1); }, Dist::SmallInt, Out::Bool, FI},
      {"le_scalar", [](T x) { return x.le(1); }, [](double x) { return b2d(x <= 1); }, Dist::SmallInt, Out::Bool, FI},
      {"le_operator", [](T x) { return x <= 0; }, [](double x) { return b2d(x <= 0); }, Dist::SmallInt, Out::Bool, FI},
      {"gt_scalar", [](T x) { return gt(x, -1); }, [](double x) { return b2d(x > -1); }, Dist::SmallInt, Out::Bool,
       FI},
      {"scalar_gt", [](T x) { return gt(0, x); }, [](double x) { return b2d(0 > x); }, Dist::SmallInt, Out::Bool, FI},
      {"gt_operator", [](T x) { return x > 0; }, [](double x) { return b2d(x > 0); }, Dist::SmallInt, Out::Bool, FI},
      {"ge_scalar", [](T x) { return x.ge(1.5); }, [](double x) { return b2d(x >= 1.5); }, Dist::SmallInt, Out::Bool,
       FI},
      {"ge_operator", [](T x) { return x >= 0; }, [](double x) { return b2d(x >= 0); }, Dist::SmallInt, Out::Bool, FI},
      {"logical_and_scalar", [](T x) { return logical_and(x, true); }, [](double x) { return b2d(x != 0); },
       Dist::SmallInt, Out::Bool, FI + std::vector<ScalarType>{kBool}},
      {"scalar_logical_or", [](T x) { return logical_or(0, x); }, [](double x) { return b2d(x != 0); },
       Dist::SmallInt, Out::Bool, FI + std::vector<ScalarType>{kBool}},
  };
}

struct ShapeCase {
  Shape shape;
  Layout layout;
};
const std::vector<ShapeCase> kUnaryCases = {
    {{2, 3, 4}, Layout::Contig},   {{2, 3, 4}, Layout::Transposed}, {{4, 3, 2}, Layout::Sliced},
    {{3, 2, 4}, Layout::Expanded}, {{2, 3, 4}, Layout::Permuted},   {{}, Layout::Contig},
    {{7}, Layout::Sliced},         {{0, 3}, Layout::Contig},        {{2, 0, 3}, Layout::Transposed},
    {{1, 1}, Layout::Contig},      {{180, 200}, Layout::Transposed},  // large enough for the threaded path
};

class OpTableUnary : public ::testing::TestWithParam<UnaryRow> {};

TEST_P(OpTableUnary, MatchesReference) {
  const UnaryRow& row = GetParam();
  for (Device dev : test::devices())
    for (ScalarType dt : row.dtypes)
      for (const ShapeCase& c : kUnaryCases) {
        std::string what = row.name + " " + dtype_name(dt) + " " + str(c.shape) + " " + layout_name(c.layout) +
                           " on " + dev.str();
        run_case(what, [&] {
          Input x = make_input(c.shape, row.dist, dt, dev, c.layout);
          Vec want(x.v.size());
          for (size_t i = 0; i < want.size(); ++i) want[i] = row.ref(x.v[i]);
          ScalarType ot = out_dtype(row.out, dt);
          Tensor y = row.fn(x.t);
          check(y, want, c.shape, ot, dev, tol_for(ot), what);
          // the input is left alone
          expect_close(x.t, x.v, c.shape, {0, 0}, what + " (input unchanged)");
        });
      }
}

INSTANTIATE_TEST_SUITE_P(OpTable, OpTableUnary, ::testing::ValuesIn(unary_rows()),
                         [](const auto& info) { return info.param.name; });

// ==========================================================================================
// Elementwise ops of two tensors, with broadcasting.

struct BinaryRow {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  std::function<double(double, double)> ref;
  Dist da, db;
  Out out;
  std::vector<ScalarType> dtypes;
};
void PrintTo(const BinaryRow& r, std::ostream* os) { *os << r.name; }

std::vector<BinaryRow> binary_rows() {
  using T = const Tensor&;
  const auto F = kFloats, FI = kFloatsInts;
  const auto FIB = kFloatsInts + std::vector<ScalarType>{kBool};
  return {
      {"add", [](T a, T b) { return add(a, b); }, [](double a, double b) { return a + b; }, Dist::Normal,
       Dist::Normal, Out::Same, FI},
      {"add_operator", [](T a, T b) { return a + b; }, [](double a, double b) { return a + b; }, Dist::Normal,
       Dist::Normal, Out::Same, FI},
      {"sub", [](T a, T b) { return sub(a, b); }, [](double a, double b) { return a - b; }, Dist::Normal,
       Dist::Normal, Out::Same, FI},
      {"sub_method", [](T a, T b) { return a.sub(b); }, [](double a, double b) { return a - b; }, Dist::Normal,
       Dist::Normal, Out::Same, FI},
      {"mul", [](T a, T b) { return mul(a, b); }, [](double a, double b) { return a * b; }, Dist::Normal,
       Dist::Normal, Out::Same, FI},
      {"mul_operator", [](T a, T b) { return a * b; }, [](double a, double b) { return a * b; }, Dist::Normal,
       Dist::Normal, Out::Same, FI},
      {"div", [](T a, T b) { return div(a, b); }, [](double a, double b) { return a / b; }, Dist::Normal,
       Dist::NonZero, Out::Float, FI},
      {"div_operator", [](T a, T b) { return a / b; }, [](double a, double b) { return a / b; }, Dist::Normal,
       Dist::NonZero, Out::Float, FI},
      {"pow", [](T a, T b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); },
       Dist::Positive, Dist::Normal, Out::Same, F},
      {"pow_int", [](T a, T b) { return a.pow(b); }, [](double a, double b) { return std::pow(a, b); },
       Dist::SmallInt, Dist::Unit, Out::Same, {kInt64, kInt32}},
      {"maximum", [](T a, T b) { return maximum(a, b); }, max_ref,
       Dist::SmallInt, Dist::SmallInt, Out::Same, FI},
      {"minimum", [](T a, T b) { return a.minimum(b); }, min_ref,
       Dist::SmallInt, Dist::SmallInt, Out::Same, FI},
      {"eq", [](T a, T b) { return eq(a, b); }, [](double a, double b) { return b2d(a == b); }, Dist::SmallInt,
       Dist::SmallInt, Out::Bool, FIB},
      {"ne", [](T a, T b) { return a != b; }, [](double a, double b) { return b2d(a != b); }, Dist::SmallInt,
       Dist::SmallInt, Out::Bool, FIB},
      {"lt", [](T a, T b) { return lt(a, b); }, [](double a, double b) { return b2d(a < b); }, Dist::SmallInt,
       Dist::SmallInt, Out::Bool, FIB},
      {"le", [](T a, T b) { return a <= b; }, [](double a, double b) { return b2d(a <= b); }, Dist::SmallInt,
       Dist::SmallInt, Out::Bool, FIB},
      {"gt", [](T a, T b) { return a.gt(b); }, [](double a, double b) { return b2d(a > b); }, Dist::SmallInt,
       Dist::SmallInt, Out::Bool, FIB},
      {"ge", [](T a, T b) { return ge(a, b); }, [](double a, double b) { return b2d(a >= b); }, Dist::SmallInt,
       Dist::SmallInt, Out::Bool, FIB},
      {"logical_and", [](T a, T b) { return logical_and(a, b); },
       [](double a, double b) { return b2d(a != 0 && b != 0); }, Dist::SmallInt, Dist::SmallInt, Out::Bool, FIB},
      {"logical_or", [](T a, T b) { return a || b; }, [](double a, double b) { return b2d(a != 0 || b != 0); },
       Dist::SmallInt, Dist::SmallInt, Out::Bool, FIB},
      {"logical_and_operator", [](T a, T b) { return a && b; },
       [](double a, double b) { return b2d(a != 0 && b != 0); }, Dist::SmallInt, Dist::SmallInt, Out::Bool, FIB},
      {"bool_add", [](T a, T b) { return add(a, b); }, [](double a, double b) { return b2d(a != 0 || b != 0); },
       Dist::Bool, Dist::Bool, Out::Same, {kBool}},
      {"bool_mul", [](T a, T b) { return a * b; }, [](double a, double b) { return b2d(a != 0 && b != 0); },
       Dist::Bool, Dist::Bool, Out::Same, {kBool}},
      {"where_as_select", [](T a, T b) { return where(a > b, a, b); },
       [](double a, double b) { return a > b ? a : b; }, Dist::Normal, Dist::Normal, Out::Same, FI},
  };
}

struct BinaryCase {
  Shape a, b;
  Layout la, lb;
};
const std::vector<BinaryCase> kBinaryCases = {
    {{2, 3, 4}, {2, 3, 4}, Layout::Contig, Layout::Contig},
    {{3, 1, 4}, {2, 4}, Layout::Contig, Layout::Contig},
    {{4}, {3, 1, 4}, Layout::Contig, Layout::Contig},
    {{3, 1}, {1, 5}, Layout::Contig, Layout::Contig},
    {{2, 3, 4}, {}, Layout::Contig, Layout::Contig},
    {{}, {2, 3}, Layout::Contig, Layout::Contig},
    {{}, {}, Layout::Contig, Layout::Contig},
    {{0, 3}, {0, 3}, Layout::Contig, Layout::Contig},
    {{2, 0, 4}, {4}, Layout::Contig, Layout::Contig},
    {{3, 4}, {3, 4}, Layout::Transposed, Layout::Sliced},
    {{3, 4}, {4}, Layout::Expanded, Layout::Sliced},
    {{2, 3, 4}, {2, 3, 4}, Layout::Permuted, Layout::Transposed},
    {{3, 1, 4}, {2, 4}, Layout::Sliced, Layout::Transposed},
    {{5, 6}, {5, 6}, Layout::Transposed, Layout::Transposed},
    {{200, 190}, {200, 190}, Layout::Transposed, Layout::Contig},  // threaded path
    {{200, 190}, {190}, Layout::Contig, Layout::Contig},
};

class OpTableBinary : public ::testing::TestWithParam<BinaryRow> {};

TEST_P(OpTableBinary, MatchesReference) {
  const BinaryRow& row = GetParam();
  for (Device dev : test::devices())
    for (ScalarType dt : row.dtypes)
      for (const BinaryCase& c : kBinaryCases) {
        std::string what = row.name + " " + dtype_name(dt) + " " + str(c.a) + " " + layout_name(c.la) + " with " +
                           str(c.b) + " " + layout_name(c.lb) + " on " + dev.str();
        run_case(what, [&] {
          Input a = make_input(c.a, row.da, dt, dev, c.la);
          Input b = make_input(c.b, row.db, dt, dev, c.lb);
          Shape shape = broadcast_shape(c.a, c.b);
          Vec av = broadcast_to(a.v, c.a, shape), bv = broadcast_to(b.v, c.b, shape);
          Vec want(av.size());
          for (size_t i = 0; i < want.size(); ++i) want[i] = row.ref(av[i], bv[i]);
          ScalarType ot = out_dtype(row.out, dt);
          check(row.fn(a.t, b.t), want, shape, ot, dev, tol_for(ot), what);
        });
      }
}

INSTANTIATE_TEST_SUITE_P(OpTable, OpTableBinary, ::testing::ValuesIn(binary_rows()),
                         [](const auto& info) { return info.param.name; });

// ==========================================================================================
// where and masked_fill: a bool condition with broadcasting.

TEST(OpTableWhere, MatchesReference) {
  struct Case {
    Shape c, a, b;
    Layout lc, la, lb;
  };
  const std::vector<Case> cases = {
      {{2, 3}, {2, 3}, {2, 3}, Layout::Contig, Layout::Contig, Layout::Contig},
      {{3, 1, 4}, {2, 4}, {4}, Layout::Contig, Layout::Contig, Layout::Contig},
      {{4}, {3, 1}, {}, Layout::Contig, Layout::Contig, Layout::Contig},
      {{}, {2, 3}, {2, 3}, Layout::Contig, Layout::Contig, Layout::Contig},
      {{3, 4}, {3, 4}, {3, 4}, Layout::Transposed, Layout::Sliced, Layout::Expanded},
      {{0, 4}, {4}, {0, 1}, Layout::Contig, Layout::Contig, Layout::Contig},
  };
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts)
      for (const Case& k : cases) {
        std::string what = std::string("where ") + dtype_name(dt) + " " + str(k.c) + " " + str(k.a) + " " + str(k.b);
        run_case(what, [&] {
          Input c = make_input(k.c, Dist::Bool, kBool, dev, k.lc);
          Input a = make_input(k.a, Dist::Normal, dt, dev, k.la);
          Input b = make_input(k.b, Dist::Normal, dt, dev, k.lb);
          Shape shape = broadcast_shape(broadcast_shape(k.c, k.a), k.b);
          Vec cv = broadcast_to(c.v, k.c, shape), av = broadcast_to(a.v, k.a, shape);
          Vec bv = broadcast_to(b.v, k.b, shape);
          Vec want(cv.size()), want_s1(cv.size()), want_s2(cv.size());
          for (size_t i = 0; i < want.size(); ++i) {
            want[i] = cv[i] != 0 ? av[i] : bv[i];
            want_s1[i] = cv[i] != 0 ? av[i] : -2.0;
            want_s2[i] = cv[i] != 0 ? 3.0 : bv[i];
          }
          check(where(c.t, a.t, b.t), want, shape, dt, dev, tol_for(dt), what);
          Shape sa = broadcast_shape(k.c, k.a), sb = broadcast_shape(k.c, k.b);
          Vec ca = broadcast_to(c.v, k.c, sa), aa = broadcast_to(a.v, k.a, sa);
          Vec cb = broadcast_to(c.v, k.c, sb), bb = broadcast_to(b.v, k.b, sb);
          Vec w1(ca.size()), w2(cb.size());
          for (size_t i = 0; i < w1.size(); ++i) w1[i] = ca[i] != 0 ? aa[i] : -2.0;
          for (size_t i = 0; i < w2.size(); ++i) w2[i] = cb[i] != 0 ? 3.0 : bb[i];
          check(where(c.t, a.t, -2), w1, sa, dt, dev, tol_for(dt), what + " (scalar other)");
          check(where(c.t, 3, b.t), w2, sb, dt, dev, tol_for(dt), what + " (scalar self)");
        });
      }
}

TEST(OpTableMaskedFill, MatchesReference) {
  struct Case {
    Shape x, mask;
    Layout lx, lm;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {2, 3, 4}, Layout::Contig, Layout::Contig},
      {{2, 3, 4}, {3, 1}, Layout::Contig, Layout::Contig},
      {{2, 3, 4}, {4}, Layout::Transposed, Layout::Sliced},
      {{3, 4}, {}, Layout::Sliced, Layout::Contig},
      {{}, {}, Layout::Contig, Layout::Contig},
      {{0, 4}, {4}, Layout::Contig, Layout::Contig},
      {{3, 4}, {3, 4}, Layout::Expanded, Layout::Transposed},
  };
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts + std::vector<ScalarType>{kBool})
      for (const Case& k : cases) {
        std::string what = std::string("masked_fill ") + dtype_name(dt) + " " + str(k.x) + " mask " + str(k.mask);
        run_case(what, [&] {
          Input x = make_input(k.x, Dist::Normal, dt, dev, k.lx);
          Input m = make_input(k.mask, Dist::Bool, kBool, dev, k.lm);
          Vec mv = broadcast_to(m.v, k.mask, k.x);
          const double fill = dt == kBool ? 1.0 : -3.0;
          Vec want(x.v.size());
          for (size_t i = 0; i < want.size(); ++i) want[i] = mv[i] != 0 ? fill : x.v[i];
          if (dt == kBool) {
            check(masked_fill(x.t, m.t, true), want, k.x, dt, dev, {0, 0}, what);
          } else {
            check(masked_fill(x.t, m.t, -3), want, k.x, dt, dev, {0, 0}, what);
            check(x.t.masked_fill(m.t, -3.0), want, k.x, dt, dev, {0, 0}, what + " (method)");
          }
        });
      }
}

// ==========================================================================================
// Reductions over sets of dims, with keepdim.

// Reduces v (shape `shape`) over `dims` (empty = all) with f applied to each group, whose values
// are in row-major order of the reduced dims. Returns the values and the output shape.
std::pair<Vec, Shape> reduce_ref(const Vec& v, const Shape& shape, const Shape& dims, bool keepdim,
                                 const std::function<double(const Vec&)>& f) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> red(shape.size(), dims.empty());
  for (int64_t d : dims)
    if (rank > 0) red[d < 0 ? d + rank : d] = true;
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
      {"prod", [](T x, S d, bool k) { return prod(x, d, k); },
       [](const Vec& g) { return std::accumulate(g.begin(), g.end(), 1.0, std::multiplies<>()); }, Dist::NearOne,
       Out::SumLike, FIB},
      {"logsumexp", [](T x, S d, bool k) { return logsumexp(x, d, k); }, logsumexp_ref, Dist::Normal, Out::Float, FI},
      {"amax", [](T x, S d, bool k) { return amax(x, d, k); }, extreme(true), Dist::Normal, Out::Same, FIB, true},
      {"amin", [](T x, S d, bool k) { return x.amin(d, k); }, extreme(false), Dist::Normal, Out::Same, FIB, true},
      {"all", [](T x, S d, bool k) { return all(x, d, k); },
       [](const Vec& g) { return b2d(std::all_of(g.begin(), g.end(), [](double v) { return v != 0; })); },
       Dist::NearOne, Out::Bool, FIB},
      {"all_with_zeros", [](T x, S d, bool k) { return all(x, d, k); },
       [](const Vec& g) { return b2d(std::all_of(g.begin(), g.end(), [](double v) { return v != 0; })); },
       Dist::SmallInt, Out::Bool, FIB},
      {"any", [](T x, S d, bool k) { return any(x, d, k); },
       [](const Vec& g) { return b2d(std::any_of(g.begin(), g.end(), [](double v) { return v != 0; })); },
       Dist::SmallInt, Out::Bool, FIB},
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
            std::string what = row.name + " " + dtype_name(dt) + " " + str(c.shape) + " " + layout_name(c.layout) +
                               " dims " + str(dims) + (keepdim ? " keepdim" : "") + " on " + dev.str();
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
      check(x.t.prod(), {std::accumulate(x.v.begin(), x.v.end(), 1.0, std::multiplies<>())}, {}, dt, dev, tol,
            "prod()");
      check(max(x.t), {*std::max_element(x.v.begin(), x.v.end())}, {}, dt, dev, {0, 0}, "max()");
      check(x.t.min(), {*std::min_element(x.v.begin(), x.v.end())}, {}, dt, dev, {0, 0}, "min()");
      check(x.t.norm(), {norm_ref(x.v, 2)}, {}, dt, dev, tol, "norm()");
      check(x.t.norm(1), {norm_ref(x.v, 1)}, {}, dt, dev, tol, "norm(1)");
      check(x.t.all(), {1}, {}, kBool, dev, {0, 0}, "all()");
      check(x.t.any(), {1}, {}, kBool, dev, {0, 0}, "any()");
      check(var(x.t), {var_ref(x.v, 1)}, {}, dt, dev, tol, "var()");
      check(kiln::std(x.t), {std::sqrt(var_ref(x.v, 1))}, {}, dt, dev, tol, "std()");
      check(x.t.prod(1, true), reduce_ref(x.v, {3, 4}, {1}, true, [](const Vec& g) {
              return std::accumulate(g.begin(), g.end(), 1.0, std::multiplies<>());
            }).first, {3, 1}, dt, dev, tol, "prod(1, keepdim)");
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
              std::string what = row.name + " " + dtype_name(dt) + " " + str(c.shape) + " " + layout_name(c.layout) +
                                 " dim " + std::to_string(dim) + (keepdim ? " keepdim" : "");
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
                  if (row.has_values) EXPECT_THROW(row.is_max ? max(x.t, dim, keepdim) : min(x.t, dim, keepdim), Error);
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
            std::string what = std::string(log ? "log_softmax " : "softmax ") + dtype_name(dt) + " " + str(c.shape) +
                               " " + layout_name(c.layout) + " dim " + std::to_string(dim);
            run_case(what, [&] {
              Input x = make_input(c.shape, Dist::Normal, dt, dev, c.layout);
              // reference: for each position, the slice along dim through it
              const int64_t d = rank == 0 ? 0 : (dim < 0 ? dim + rank : dim);
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
// matmul: every shape rule, transposed and expanded operands, K = 0.

// PyTorch's matmul rules, as loops: 1-D operands gain a dim, batch dims broadcast.
std::pair<Vec, Shape> matmul_ref(const Vec& a, Shape sa, const Vec& b, Shape sb) {
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), 1);
  if (b1) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  Shape batch = broadcast_shape(ba, bb);
  Shape fa = batch, fb = batch;
  fa.insert(fa.end(), {M, K});
  fb.insert(fb.end(), {K, N});
  Vec A = broadcast_to(a, sa, fa), B = broadcast_to(b, sb, fb);
  const int64_t nb = numel_of(batch);
  Vec out(static_cast<size_t>(nb * M * N), 0.0);
  for (int64_t p = 0; p < nb; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += A[(p * M + i) * K + k] * B[(p * K + k) * N + j];
        out[(p * M + i) * N + j] = s;
      }
  Shape shape = batch;
  if (!a1) shape.push_back(M);
  if (!b1) shape.push_back(N);
  return {out, shape};
}

TEST(OpTableMatmul, MatchesReference) {
  struct Case {
    Shape a, b;
    Layout la, lb;
  };
  const std::vector<Case> cases = {
      {{5}, {5}, Layout::Contig, Layout::Contig},                   // dot
      {{5}, {5}, Layout::Sliced, Layout::Sliced},
      {{3, 5}, {5, 4}, Layout::Contig, Layout::Contig},             // 2-D
      {{3, 5}, {5, 4}, Layout::Transposed, Layout::Transposed},
      {{3, 5}, {5, 4}, Layout::Sliced, Layout::Transposed},
      {{5}, {5, 4}, Layout::Contig, Layout::Contig},                // 1-D @ 2-D
      {{5}, {5, 4}, Layout::Contig, Layout::Transposed},
      {{3, 5}, {5}, Layout::Contig, Layout::Contig},                // 2-D @ 1-D
      {{3, 5}, {5}, Layout::Transposed, Layout::Sliced},
      {{2, 1, 3, 4}, {5, 4, 6}, Layout::Contig, Layout::Contig},    // broadcast batch
      {{2, 1, 3, 4}, {5, 4, 6}, Layout::Transposed, Layout::Permuted},
      {{2, 3, 4}, {2, 4, 6}, Layout::Contig, Layout::Contig},       // bmm
      {{2, 3, 4}, {2, 4, 6}, Layout::Transposed, Layout::Transposed},
      {{2, 3, 4}, {2, 4, 6}, Layout::Expanded, Layout::Sliced},
      {{2, 3, 4}, {4, 6}, Layout::Contig, Layout::Contig},          // [B, S, K] @ [K, N]
      {{2, 3, 4}, {4, 6}, Layout::Transposed, Layout::Transposed},
      {{3, 2, 3, 4}, {4, 6}, Layout::Sliced, Layout::Contig},
      {{4, 6}, {2, 6, 3}, Layout::Contig, Layout::Contig},          // [M, K] @ [B, K, N]
      {{4}, {2, 4, 6}, Layout::Contig, Layout::Contig},             // 1-D @ batched
      {{2, 3, 4}, {4}, Layout::Contig, Layout::Contig},             // batched @ 1-D
      {{3, 0}, {0, 4}, Layout::Contig, Layout::Contig},             // K = 0
      {{2, 3, 0}, {0, 5}, Layout::Contig, Layout::Contig},
      {{0}, {0}, Layout::Contig, Layout::Contig},
      {{0, 4}, {4, 3}, Layout::Contig, Layout::Contig},             // M = 0
      {{2, 4}, {4, 0}, Layout::Contig, Layout::Contig},             // N = 0
      {{0, 3, 4}, {4, 2}, Layout::Contig, Layout::Contig},          // B = 0
      {{3, 5}, {5, 4}, Layout::Expanded, Layout::Expanded},         // stride-0 rows
      {{5}, {5, 4}, Layout::Expanded, Layout::Expanded},
      {{3, 5}, {5}, Layout::Transposed, Layout::Expanded},
      {{2, 3, 4}, {4, 6}, Layout::Expanded, Layout::Expanded},
      {{40, 70}, {70, 50}, Layout::Transposed, Layout::Contig},     // larger, several threads
  };
  for (Device dev : test::devices())
    for (ScalarType dt : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32})
      for (const Case& c : cases) {
        std::string what = std::string("matmul ") + dtype_name(dt) + " " + str(c.a) + " " + layout_name(c.la) + " @ " +
                           str(c.b) + " " + layout_name(c.lb) + " on " + dev.str();
        run_case(what, [&] {
          Input a = make_input(c.a, Dist::Normal, dt, dev, c.la);
          Input b = make_input(c.b, Dist::Normal, dt, dev, c.lb);
          auto [want, shape] = matmul_ref(a.v, c.a, b.v, c.b);
          const int64_t K = c.a.back();
          Tol tol = sum_tol_for(dt);
          tol.atol *= std::max<double>(1.0, std::sqrt(static_cast<double>(K)) / 2);
          check(matmul(a.t, b.t), want, shape, dt, dev, tol, what);
          if (c.a.size() == 2 && c.b.size() == 2) check(mm(a.t, b.t), want, shape, dt, dev, tol, what + " (mm)");
          if (c.a.size() == 3 && c.b.size() == 3) check(bmm(a.t, b.t), want, shape, dt, dev, tol, what + " (bmm)");
        });
      }
}

// ==========================================================================================
// Joining and splitting.

// The part of row-major v (shape s) with dim d restricted to [start, start + len).
Vec narrow_ref(const Vec& v, const Shape& s, int64_t d, int64_t start, int64_t len) {
  Shape out_shape = s;
  out_shape[d] = len;
  Shape st = row_major(s);
  Vec out;
  for (int64_t i = 0; i < numel_of(out_shape); ++i) {
    Shape idx = unravel(i, out_shape);
    idx[d] += start;
    int64_t off = 0;
    for (size_t k = 0; k < s.size(); ++k) off += idx[k] * st[k];
    out.push_back(v[off]);
  }
  return out;
}

TEST(OpTableJoin, Cat) {
  struct Case {
    std::vector<Shape> shapes;
    std::vector<Layout> layouts;
    int64_t dim;
  };
  const std::vector<Case> cases = {
      {{{2, 3}, {4, 3}}, {Layout::Contig, Layout::Contig}, 0},
      {{{2, 3}, {2, 1}, {2, 4}}, {Layout::Contig, Layout::Contig, Layout::Transposed}, 1},
      {{{2, 3, 4}, {2, 3, 2}}, {Layout::Permuted, Layout::Sliced}, -1},
      {{{3, 4}, {0, 4}, {2, 4}}, {Layout::Transposed, Layout::Contig, Layout::Expanded}, 0},
      {{{3}, {0}, {2}}, {Layout::Sliced, Layout::Contig, Layout::Contig}, 0},
      {{{2, 3}, {0}, {1, 3}}, {Layout::Contig, Layout::Contig, Layout::Contig}, 0},  // legacy: 1-D empty skipped
      {{{2, 3}}, {Layout::Transposed}, 1},
      {{{0, 3}, {0, 2}}, {Layout::Contig, Layout::Contig}, 1},
  };
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts + std::vector<ScalarType>{kBool})
      for (const Case& c : cases) {
        std::string what = std::string("cat ") + dtype_name(dt) + " dim " + std::to_string(c.dim);
        for (const Shape& s : c.shapes) what.append(" ").append(str(s));
        run_case(what, [&] {
          std::vector<Input> ins;
          std::vector<Tensor> ts;
          std::vector<const Input*> parts;
          for (size_t i = 0; i < c.shapes.size(); ++i) {
            ins.push_back(make_input(c.shapes[i], Dist::Normal, dt, dev, c.layouts[i]));
          }
          for (const Input& in : ins) {
            ts.push_back(in.t);
            if (!(in.shape.size() == 1 && in.shape[0] == 0) || c.shapes.size() == 1) parts.push_back(&in);
          }
          const int64_t rank = static_cast<int64_t>(parts[0]->shape.size());
          const int64_t d = c.dim < 0 ? c.dim + rank : c.dim;
          Shape shape = parts[0]->shape;
          shape[d] = 0;
          for (const Input* p : parts) shape[d] += p->shape[d];
          // reference: walk the output, find the part each position falls in
          Vec want;
          for (int64_t i = 0; i < numel_of(shape); ++i) {
            Shape idx = unravel(i, shape);
            int64_t pos = idx[d];
            for (const Input* p : parts) {
              if (pos < p->shape[d]) {
                idx[d] = pos;
                Shape st = row_major(p->shape);
                int64_t off = 0;
                for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * st[k];
                want.push_back(p->v[off]);
                break;
              }
              pos -= p->shape[d];
            }
          }
          check(cat(ts, c.dim), want, shape, dt, dev, {0, 0}, what);
        });
      }
  // mixed dtypes promote, as in PyTorch
  Tensor mixed = cat({tensor({1, 2}), tensor({0.5})}, 0);
  check(mixed, {1, 2, 0.5}, {3}, kFloat32, Device::cpu(), {0, 0}, "cat int64 with float32");
  check(cat({tensor({1.0}, kFloat64), tensor({2.0})}), {1, 2}, {2}, kFloat64, Device::cpu(), {0, 0},
        "cat float64 with float32");
}

TEST(OpTableJoin, Stack) {
  const std::vector<ShapeCase> cases = {{{2, 3}, Layout::Contig}, {{2, 3}, Layout::Transposed},
                                        {{3}, Layout::Sliced},    {{}, Layout::Contig},
                                        {{0, 2}, Layout::Contig}, {{2, 3, 4}, Layout::Permuted}};
  for (Device dev : test::devices())
    for (ScalarType dt : {kFloat32, kFloat64, kBFloat16, kInt64})
      for (const ShapeCase& c : cases) {
        const int64_t rank = static_cast<int64_t>(c.shape.size());
        for (int64_t dim = -(rank + 1); dim <= rank; ++dim) {
          std::string what = std::string("stack ") + dtype_name(dt) + " 3 x " + str(c.shape) + " " +
                             layout_name(c.layout) + " dim " + std::to_string(dim);
          run_case(what, [&] {
            std::vector<Input> ins;
            for (int k = 0; k < 3; ++k) ins.push_back(make_input(c.shape, Dist::Normal, dt, dev, c.layout));
            const int64_t d = dim < 0 ? dim + rank + 1 : dim;
            Shape shape = c.shape;
            shape.insert(shape.begin() + d, 3);
            Vec want;
            for (int64_t i = 0; i < numel_of(shape); ++i) {
              Shape idx = unravel(i, shape);
              int64_t k = idx[d];
              idx.erase(idx.begin() + d);
              Shape st = row_major(c.shape);
              int64_t off = 0;
              for (size_t j = 0; j < idx.size(); ++j) off += idx[j] * st[j];
              want.push_back(ins[k].v[off]);
            }
            check(stack({ins[0].t, ins[1].t, ins[2].t}, dim), want, shape, dt, dev, {0, 0}, what);
          });
        }
      }
}

TEST(OpTableJoin, SplitAndChunk) {
  struct Case {
    Shape shape;
    Layout layout;
    int64_t dim;
    std::string how;                    // "split", "split_sizes" or "chunk"
    int64_t arg;                        // split_size or chunks
    std::vector<int64_t> sizes;         // split_sizes' argument
    std::vector<int64_t> want_lengths;  // length along dim of each piece
  };
  const std::vector<Case> cases = {
      {{5, 4}, Layout::Contig, 0, "split", 2, {}, {2, 2, 1}},
      {{5, 4}, Layout::Transposed, 1, "split", 3, {}, {3, 1}},
      {{5, 4}, Layout::Sliced, -1, "split", 4, {}, {4}},
      {{5, 4}, Layout::Contig, 0, "split", 7, {}, {5}},
      {{5, 4}, Layout::Contig, 0, "split_sizes", 0, {1, 3, 1}, {1, 3, 1}},
      {{5, 4}, Layout::Permuted, 1, "split_sizes", 0, {0, 4}, {0, 4}},
      {{2, 6, 3}, Layout::Permuted, 1, "split_sizes", 0, {2, 4}, {2, 4}},
      {{0, 3}, Layout::Contig, 0, "split", 2, {}, {0}},
      {{5}, Layout::Contig, 0, "chunk", 3, {}, {2, 2, 1}},
      {{6, 2}, Layout::Transposed, 0, "chunk", 4, {}, {2, 2, 2}},
      {{6, 2}, Layout::Contig, 1, "chunk", 2, {}, {1, 1}},
      {{6, 2}, Layout::Contig, 1, "chunk", 5, {}, {1, 1}},
      {{2, 7}, Layout::Sliced, -1, "chunk", 3, {}, {3, 3, 1}},
      {{0, 2}, Layout::Contig, 0, "chunk", 3, {}, {0, 0, 0}},  // PyTorch keeps the number of chunks
  };
  for (Device dev : test::devices())
    for (ScalarType dt : {kFloat32, kInt64, kFloat16})
      for (const Case& c : cases) {
        std::string what = c.how + " " + dtype_name(dt) + " " + str(c.shape) + " " + layout_name(c.layout) + " dim " +
                           std::to_string(c.dim) + " arg " + std::to_string(c.arg);
        run_case(what, [&] {
          Input x = make_input(c.shape, Dist::Normal, dt, dev, c.layout);
          std::vector<Tensor> pieces = c.how == "split"         ? split(x.t, c.arg, c.dim)
                                       : c.how == "split_sizes" ? split(x.t, c.sizes, c.dim)
                                                                : x.t.chunk(c.arg, c.dim);
          ASSERT_EQ(pieces.size(), c.want_lengths.size()) << what;
          const int64_t d = c.dim < 0 ? c.dim + static_cast<int64_t>(c.shape.size()) : c.dim;
          int64_t start = 0;
          for (size_t i = 0; i < pieces.size(); ++i) {
            Shape shape = c.shape;
            shape[d] = c.want_lengths[i];
            check(pieces[i], narrow_ref(x.v, c.shape, d, start, c.want_lengths[i]), shape, dt, dev, {0, 0},
                  what + " piece " + std::to_string(i));
            EXPECT_EQ(pieces[i].storage(), x.t.storage()) << what << ": pieces are views";
            start += c.want_lengths[i];
          }
        });
      }
  // the method form
  Tensor t = arange(7);
  auto pieces = t.split(3);
  ASSERT_EQ(pieces.size(), 3u);
  check(pieces[2], {6}, {1}, kInt64, Device::cpu(), {0, 0}, "Tensor::split");
}

// ==========================================================================================
// Indexing: index_select, gather, scatter_add, one_hot, tril/triu.

TEST(OpTableIndex, IndexSelect) {
  struct Case {
    Shape shape;
    Layout layout;
    int64_t dim;
    std::vector<int64_t> index;
    bool index_is_0d = false;
  };
  const std::vector<Case> cases = {
      {{4, 5}, Layout::Contig, 0, {3, 0, 3}},        {{4, 5}, Layout::Transposed, 1, {4, 1}},
      {{3, 4, 5}, Layout::Permuted, 1, {2, 2, 0, 1}}, {{3, 4, 5}, Layout::Sliced, -1, {0}},
      {{4, 5}, Layout::Contig, 0, {}},               {{6}, Layout::Expanded, 0, {5, 0}},
      {{4, 5}, Layout::Contig, 1, {2}, true},        {{0, 3}, Layout::Contig, 1, {1, 1}},
  };
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts + std::vector<ScalarType>{kBool})
      for (ScalarType it : {kInt64, kInt32})
        for (const Case& c : cases) {
          std::string what = std::string("index_select ") + dtype_name(dt) + " " + str(c.shape) + " " +
                             layout_name(c.layout) + " dim " + std::to_string(c.dim) + " index " + str(c.index) +
                             " " + dtype_name(it);
          run_case(what, [&] {
            Input x = make_input(c.shape, Dist::Normal, dt, dev, c.layout);
            Tensor index = tensor(c.index, Shape{static_cast<int64_t>(c.index.size())}, TensorOptions(it).device(dev));
            if (c.index_is_0d) index = index.reshape({});
            const int64_t d = c.dim < 0 ? c.dim + static_cast<int64_t>(c.shape.size()) : c.dim;
            Shape shape = c.shape;
            shape[d] = static_cast<int64_t>(c.index.size());
            Vec want;
            for (int64_t i = 0; i < numel_of(shape); ++i) {
              Shape idx = unravel(i, shape);
              idx[d] = c.index[idx[d]];
              Shape st = row_major(c.shape);
              int64_t off = 0;
              for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * st[k];
              want.push_back(x.v[off]);
            }
            check(index_select(x.t, c.dim, index), want, shape, dt, dev, {0, 0}, what);
          });
        }
  // large enough for the threaded path
  for (Device dev : test::devices()) {
    Input x = make_input({300, 200}, Dist::Normal, kFloat32, dev, Layout::Transposed);
    std::vector<int64_t> iv(300);
    for (int64_t& v : iv) v = std::uniform_int_distribution<int64_t>(0, 199)(rng());
    Vec want;
    for (int64_t r = 0; r < 300; ++r)
      for (int64_t j = 0; j < 300; ++j) want.push_back(x.v[r * 200 + iv[j]]);
    check(index_select(x.t, 1, tensor(iv, TensorOptions(kInt64).device(dev))), want, {300, 300}, kFloat32, dev,
          {0, 0}, "index_select [300, 200] dim 1 with 300 indices");
  }
}

TEST(OpTableIndex, GatherAndScatterAdd) {
  struct Case {
    Shape x;
    Layout lx;
    int64_t dim;
    Shape index;   // values random in [0, x.size(dim))
    Shape src;     // for scatter_add (at least index's shape)
    Layout lsrc;
  };
  const std::vector<Case> cases = {
      {{3, 4}, Layout::Contig, 1, {3, 2}, {3, 2}, Layout::Contig},
      {{3, 4}, Layout::Transposed, 0, {5, 4}, {5, 4}, Layout::Transposed},
      {{3, 4}, Layout::Sliced, 1, {2, 6}, {3, 6}, Layout::Sliced},  // index smaller than x/src elsewhere
      {{2, 3, 4}, Layout::Permuted, 2, {2, 2, 3}, {2, 3, 3}, Layout::Permuted},
      {{2, 3, 4}, Layout::Contig, -2, {1, 4, 2}, {2, 4, 4}, Layout::Expanded},
      {{5}, Layout::Contig, 0, {8}, {8}, Layout::Contig},
      {{3, 4}, Layout::Contig, 1, {3, 0}, {3, 0}, Layout::Contig},
  };
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts)
      for (const Case& c : cases) {
        std::string what = std::string(dtype_name(dt)) + " x " + str(c.x) + " " + layout_name(c.lx) + " dim " +
                           std::to_string(c.dim) + " index " + str(c.index) + " src " + str(c.src);
        run_case(what, [&] {
          const int64_t rank = static_cast<int64_t>(c.x.size());
          const int64_t d = c.dim < 0 ? c.dim + rank : c.dim;
          Input x = make_input(c.x, Dist::SmallInt, dt, dev, c.lx);
          std::vector<int64_t> iv(static_cast<size_t>(numel_of(c.index)));
          for (int64_t& v : iv) v = std::uniform_int_distribution<int64_t>(0, c.x[d] - 1)(rng());
          Tensor index = tensor(iv, c.index, TensorOptions(kInt64).device(dev));
          Shape xst = row_major(c.x);
          auto x_offset = [&](Shape idx, int64_t p) {
            idx[d] = iv[p];
            int64_t off = 0;
            for (int64_t k = 0; k < rank; ++k) off += idx[k] * xst[k];
            return off;
          };
          // gather: out[p] = x[p with dim replaced by index[p]]
          Vec want;
          for (int64_t p = 0; p < numel_of(c.index); ++p) want.push_back(x.v[x_offset(unravel(p, c.index), p)]);
          check(gather(x.t, c.dim, index), want, c.index, dt, dev, {0, 0}, "gather " + what);
          // scatter_add: out = x; out[p with dim replaced by index[p]] += src[p], p over index's shape
          Input src = make_input(c.src, Dist::SmallInt, dt, dev, c.lsrc);
          Vec out = x.v;
          Shape sst = row_major(c.src);
          for (int64_t p = 0; p < numel_of(c.index); ++p) {
            Shape idx = unravel(p, c.index);
            int64_t soff = 0;
            for (int64_t k = 0; k < rank; ++k) soff += idx[k] * sst[k];
            out[x_offset(idx, p)] += src.v[soff];
          }
          check(scatter_add(x.t, c.dim, index, src.t), out, c.x, dt, dev, {0, 0}, "scatter_add " + what);
          check(x.t.scatter_add(c.dim, index.to(kInt32), src.t), out, c.x, dt, dev, {0, 0},
                "scatter_add int32 index " + what);
          test::expect_close(x.t, x.v, c.x, 0, 0, "scatter_add leaves self alone");
        });
      }
}

TEST(OpTableIndex, OneHot) {
  for (Device dev : test::devices())
    for (ScalarType it : {kInt64, kInt32}) {
      SCOPED_TRACE(std::string("one_hot ") + dtype_name(it) + " on " + dev.str());
      TensorOptions o = TensorOptions(it).device(dev);
      check(one_hot(tensor({2, 0, 1, 2}, o)), {0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1}, {4, 3}, kInt64, dev, {0, 0},
            "inferred classes");
      check(one_hot(tensor({1, 3}, o), 5), {0, 1, 0, 0, 0, 0, 0, 0, 1, 0}, {2, 5}, kInt64, dev, {0, 0},
            "given classes");
      check(one_hot(tensor({{0, 1}, {1, 1}}, o).t(), 2), {1, 0, 0, 1, 0, 1, 0, 1}, {2, 2, 2}, kInt64, dev, {0, 0},
            "2-D transposed");
      check(one_hot(scalar_tensor(1, o), 3), {0, 1, 0}, {3}, kInt64, dev, {0, 0}, "0-d");
      check(one_hot(zeros({0}, o), 4), {}, {0, 4}, kInt64, dev, {0, 0}, "empty");
    }
}

TEST(OpTableIndex, TrilTriu) {
  const std::vector<ShapeCase> cases = {{{4, 5}, Layout::Contig},      {{5, 3}, Layout::Transposed},
                                        {{2, 3, 4}, Layout::Permuted}, {{3, 4}, Layout::Sliced},
                                        {{2, 3, 3}, Layout::Expanded}, {{0, 3}, Layout::Contig},
                                        {{2, 0, 3}, Layout::Contig},   {{1, 1}, Layout::Contig},
                                        {{64, 300}, Layout::Contig}};  // threaded over rows
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts + std::vector<ScalarType>{kBool})
      for (const ShapeCase& c : cases)
        for (int64_t k : {-1, 0, 1, -5, 5})
          for (bool upper : {false, true}) {
            std::string what = std::string(upper ? "triu " : "tril ") + dtype_name(dt) + " " + str(c.shape) + " " +
                               layout_name(c.layout) + " diagonal " + std::to_string(k);
            run_case(what, [&] {
              Input x = make_input(c.shape, Dist::Normal, dt, dev, c.layout);
              const int64_t rows = c.shape[c.shape.size() - 2], cols = c.shape.back();
              Vec want(x.v.size());
              for (size_t i = 0; i < want.size(); ++i) {
                int64_t col = static_cast<int64_t>(i) % cols, row = static_cast<int64_t>(i) / cols % rows;
                bool keep = upper ? col - row >= k : col - row <= k;
                want[i] = keep ? x.v[i] : 0.0;
              }
              check(upper ? triu(x.t, k) : x.t.tril(k), want, c.shape, dt, dev, {0, 0}, what);
            });
          }
}

// ==========================================================================================
// In-place forms, on contiguous tensors and on non-contiguous views of a larger base.

struct InplaceRow {
  std::string name;
  std::function<void(Tensor& self, const Tensor& other)> fn;
  std::function<double(double self, double other)> ref;
  Dist self_dist;
  Shape other_shape;  // broadcast to the target's [3, 4]; unused by rows without an operand
  Dist other_dist;
  std::optional<ScalarType> other_dtype;  // the target's dtype if unset
  Layout other_layout;
  std::vector<ScalarType> dtypes;
};
void PrintTo(const InplaceRow& r, std::ostream* os) { *os << r.name; }

std::vector<InplaceRow> inplace_rows() {
  using T = const Tensor&;
  const auto F = kFloats, FI = kFloatsInts;
  const Layout C = Layout::Contig;
  return {
      {"add_", [](Tensor& s, T o) { s.add_(o); }, [](double s, double o) { return s + o; }, Dist::Normal, {3, 4},
       Dist::Normal, {}, C, FI},
      {"add_broadcast", [](Tensor& s, T o) { s.add_(o); }, [](double s, double o) { return s + o; }, Dist::Normal,
       {4}, Dist::Normal, {}, Layout::Sliced, FI},
      {"add_0d", [](Tensor& s, T o) { s += o; }, [](double s, double o) { return s + o; }, Dist::Normal, {},
       Dist::Normal, {}, C, FI},
      {"add_int_into_float", [](Tensor& s, T o) { s.add_(o); }, [](double s, double o) { return s + o; },
       Dist::Normal, {3, 1}, Dist::Normal, kInt64, C, F},
      {"add_scalar", [](Tensor& s, T) { s.add_(2); }, [](double s, double) { return s + 2; }, Dist::Normal, {},
       Dist::Normal, {}, C, FI},
      {"add_float_scalar", [](Tensor& s, T) { s += 2.5; }, [](double s, double) { return s + 2.5; }, Dist::Normal, {},
       Dist::Normal, {}, C, F},
      {"sub_", [](Tensor& s, T o) { s.sub_(o); }, [](double s, double o) { return s - o; }, Dist::Normal, {3, 4},
       Dist::Normal, {}, Layout::Transposed, FI},
      {"sub_scalar", [](Tensor& s, T) { s -= 1; }, [](double s, double) { return s - 1; }, Dist::Normal, {},
       Dist::Normal, {}, C, FI},
      {"mul_", [](Tensor& s, T o) { s *= o; }, [](double s, double o) { return s * o; }, Dist::Normal, {3, 1},
       Dist::Normal, {}, C, FI},
      {"mul_scalar", [](Tensor& s, T) { s.mul_(-3); }, [](double s, double) { return s * -3; }, Dist::Normal, {},
       Dist::Normal, {}, C, FI},
      {"div_", [](Tensor& s, T o) { s.div_(o); }, [](double s, double o) { return s / o; }, Dist::Normal, {4},
       Dist::NonZero, {}, C, F},
      {"div_scalar", [](Tensor& s, T) { s /= 4; }, [](double s, double) { return s / 4; }, Dist::Normal, {},
       Dist::Normal, {}, C, F},
      {"zero_", [](Tensor& s, T) { s.zero_(); }, [](double, double) { return 0.0; }, Dist::Normal, {}, Dist::Normal,
       {}, C, FI + std::vector<ScalarType>{kBool}},
      {"fill_", [](Tensor& s, T) { s.fill_(2.5); }, [](double, double) { return 2.5; }, Dist::Normal, {},
       Dist::Normal, {}, C, F},
      {"fill_int", [](Tensor& s, T) { s.fill_(-7); }, [](double, double) { return -7.0; }, Dist::Normal, {},
       Dist::Normal, {}, C, FI},
      {"copy_", [](Tensor& s, T o) { s.copy_(o); }, [](double, double o) { return o; }, Dist::Normal, {3, 4},
       Dist::Normal, {}, Layout::Transposed, FI},
      {"copy_broadcast_int64", [](Tensor& s, T o) { s.copy_(o); }, [](double, double o) { return o; }, Dist::Normal,
       {4}, Dist::Normal, kInt64, C, FI},
      {"copy_from_float64", [](Tensor& s, T o) { s.copy_(o); }, [](double, double o) { return o; }, Dist::Normal,
       {3, 1}, Dist::Normal, kFloat64, C, F},
      {"copy_float64_into_int", [](Tensor& s, T o) { s.copy_(o); }, [](double, double o) { return std::trunc(o); },
       Dist::Normal, {3, 1}, Dist::Normal, kFloat64, Layout::Transposed, {kInt64, kInt32}},
      {"copy_from_bool", [](Tensor& s, T o) { s.copy_(o); }, [](double, double o) { return o; }, Dist::Normal, {3, 4},
       Dist::Bool, kBool, Layout::Sliced, FI},
      {"copy_from_bfloat16", [](Tensor& s, T o) { s.copy_(o); }, [](double, double o) { return o; }, Dist::Normal,
       {}, Dist::Normal, kBFloat16, C, F},
      {"clamp_", [](Tensor& s, T) { s.clamp_(-0.5, 0.5); }, [](double s, double) { return std::clamp(s, -0.5, 0.5); },
       Dist::Normal, {}, Dist::Normal, {}, C, F},
      {"clamp_min_only", [](Tensor& s, T) { s.clamp_(0); }, [](double s, double) { return std::max(s, 0.0); },
       Dist::Normal, {}, Dist::Normal, {}, C, FI},
      {"clamp_max_only", [](Tensor& s, T) { s.clamp_(std::nullopt, 1); },
       [](double s, double) { return std::min(s, 1.0); }, Dist::Normal, {}, Dist::Normal, {}, C, FI},
      {"relu_", [](Tensor& s, T) { s.relu_(); }, [](double s, double) { return std::max(s, 0.0); }, Dist::Normal, {},
       Dist::Normal, {}, C, FI},
      {"neg_", [](Tensor& s, T) { s.neg_(); }, [](double s, double) { return -s; }, Dist::Normal, {}, Dist::Normal, {},
       C, FI},
      {"exp_", [](Tensor& s, T) { s.exp_(); }, [](double s, double) { return std::exp(s); }, Dist::Normal, {},
       Dist::Normal, {}, C, F},
      {"sqrt_", [](Tensor& s, T) { s.sqrt_(); }, [](double s, double) { return std::sqrt(s); }, Dist::Positive, {},
       Dist::Normal, {}, C, F},
      {"masked_fill_", [](Tensor& s, T m) { s.masked_fill_(m, -1); },
       [](double s, double m) { return m != 0 ? -1 : s; },
       Dist::Normal, {4}, Dist::Bool, kBool, C, FI},
      {"masked_fill_full_mask", [](Tensor& s, T m) { s.masked_fill_(m, 0.5); },
       [](double s, double m) { return m != 0 ? 0.5 : s; }, Dist::Normal, {3, 4}, Dist::Bool, kBool,
       Layout::Transposed, F},
  };
}

class OpTableInplace : public ::testing::TestWithParam<InplaceRow> {};

TEST_P(OpTableInplace, MatchesReference) {
  const InplaceRow& row = GetParam();
  struct Target {
    Shape shape;
    Layout layout;
  };
  // [3, 4] contiguous, every other row of a [6, 4] base, and the transpose of a [4, 3] base;
  // also 0-d and empty targets.
  const std::vector<Target> targets = {{{3, 4}, Layout::Contig},
                                       {{3, 4}, Layout::Sliced},
                                       {{3, 4}, Layout::Transposed},
                                       {{}, Layout::Contig},
                                       {{0, 4}, Layout::Contig}};
  for (Device dev : test::devices())
    for (ScalarType dt : row.dtypes)
      for (const Target& tg : targets) {
        // operands that do not broadcast to a 0-d or empty target are shrunk to 0-d
        Shape oshape = row.other_shape;
        if (!broadcasts_to(oshape, tg.shape)) oshape = {};
        std::string what = row.name + " " + dtype_name(dt) + " into " + str(tg.shape) + " " + layout_name(tg.layout) +
                           " with " + str(oshape) + " on " + dev.str();
        run_case(what, [&] {
          Input self = make_input(tg.shape, row.self_dist, dt, dev, tg.layout);
          Input other = make_input(oshape, row.other_dist, row.other_dtype.value_or(dt), dev, row.other_layout);
          Vec ov = broadcast_to(other.v, oshape, tg.shape);
          Vec want(self.v.size()), want_base = self.base_v;
          for (size_t i = 0; i < want.size(); ++i) {
            want[i] = row.ref(self.v[i], ov[i]);
            want_base[self.map[i]] = want[i];
          }
          const uint64_t version = self.t.version();
          Tensor handle = self.t;
          row.fn(self.t, other.t);
          EXPECT_TRUE(self.t.is_same(handle)) << what;
          EXPECT_EQ(self.t.dtype(), dt) << what;
          Tol tol = tol_for(dt);
          expect_close(self.t, want, tg.shape, tol, what);
          expect_close(self.base, want_base, self.base.shape(), tol, what + " (base)");
          EXPECT_GT(self.t.version(), version) << what << ": the version counter moves";
          expect_close(other.t, other.v, oshape, {0, 0}, what + " (operand unchanged)");
        });
      }
}

INSTANTIATE_TEST_SUITE_P(OpTable, OpTableInplace, ::testing::ValuesIn(inplace_rows()),
                         [](const auto& info) { return info.param.name; });

// copy_ from a view of the same storage that overlaps the destination reads the old values.
TEST(OpTableInplaceOverlap, CopyFromOverlappingView) {
  for (Device dev : test::devices()) {
    Tensor base = arange(6, TensorOptions(kFloat32).device(dev));
    base.slice(0, 1, 6).copy_(base.slice(0, 0, 5));
    test::expect_close(base, {0, 0, 1, 2, 3, 4}, {6}, 0, 0, "shift right by one");
    Tensor m = arange(9, TensorOptions(kFloat64).device(dev)).reshape({3, 3});
    m.copy_(m.t());
    test::expect_close(m, {0, 3, 6, 1, 4, 7, 2, 5, 8}, {3, 3}, 0, 0, "copy_ of its own transpose");
  }
}

// ==========================================================================================
// NaN, infinities and signed zeros: every elementwise row of the table on them (in the float
// types that hold them), and the reductions whose NaN and inf handling PyTorch defines.

TEST(OpTableSpecialValues, ElementwiseRows) {
  const Vec specials = {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -1.0, 2.0};
  for (Device dev : test::devices())
    for (const UnaryRow& row : unary_rows()) {
      if (row.name.rfind("gelu", 0) == 0) continue;  // PyTorch's gelu(inf) is NaN: not a rule to copy
      for (ScalarType dt : {kFloat32, kFloat64, kFloat16}) {
        if (std::find(row.dtypes.begin(), row.dtypes.end(), dt) == row.dtypes.end()) continue;
        std::string what = row.name + " " + dtype_name(dt) + " on special values on " + dev.str();
        run_case(what, [&] {
          Tensor x = tensor(specials, Shape{static_cast<int64_t>(specials.size())}, TensorOptions(dt).device(dev));
          Vec want(specials.size());
          for (size_t i = 0; i < want.size(); ++i) want[i] = row.ref(specials[i]);
          ScalarType ot = out_dtype(row.out, dt);
          check(row.fn(x), want, x.shape(), ot, dev, tol_for(ot), what);
        });
      }
    }
}

TEST(OpTableSpecialValues, Reductions) {
  for (Device dev : test::devices())
    for (ScalarType dt : kFloats) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " on " + dev.str());
      auto T = [&](Vec v) { return tensor(v, Shape{static_cast<int64_t>(v.size())}, TensorOptions(dt).device(dev)); };
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

// ==========================================================================================
// Type promotion follows PyTorch's result_type.

TEST(OpTablePromotion, ResultDtypes) {
  struct Row {
    std::string what;
    std::function<Tensor(Device)> fn;
    ScalarType want;
    Vec values;  // checked when not empty
  };
  auto T = [](std::initializer_list<double> v, ScalarType dt, Device d) {
    return tensor(Vec(v), Shape{static_cast<int64_t>(v.size())}, TensorOptions(dt).device(d));
  };
  auto S = [](double v, ScalarType dt, Device d) { return scalar_tensor(v, TensorOptions(dt).device(d)); };
  const std::vector<Row> rows = {
      {"int64 + 2.5", [&](Device d) { return T({1, 2}, kInt64, d) + 2.5; }, kFloat32, {3.5, 4.5}},
      {"2.5 + int64", [&](Device d) { return add(2.5, T({1, 2}, kInt64, d)); }, kFloat32, {3.5, 4.5}},
      {"int32 + 5", [&](Device d) { return T({1, 2}, kInt32, d) + 5; }, kInt32, {6, 7}},
      {"int32 + int64", [&](Device d) { return T({1, 2}, kInt32, d) + T({1, 1}, kInt64, d); }, kInt64, {2, 3}},
      {"uint8 + int32", [&](Device d) { return T({1, 2}, kUInt8, d) + T({1, 1}, kInt32, d); }, kInt32, {2, 3}},
      {"uint8 + 3", [&](Device d) { return T({1, 2}, kUInt8, d) + 3; }, kUInt8, {4, 5}},
      {"float16 * 2.0", [&](Device d) { return T({1, 2}, kFloat16, d) * 2.0; }, kFloat16, {2, 4}},
      {"bfloat16 + 1", [&](Device d) { return T({1, 2}, kBFloat16, d) + 1; }, kBFloat16, {2, 3}},
      {"float16 + bfloat16", [&](Device d) { return T({1, 2}, kFloat16, d) + T({1, 2}, kBFloat16, d); }, kFloat32,
       {2, 4}},
      {"float32 + float64", [&](Device d) { return T({1}, kFloat32, d) + T({2}, kFloat64, d); }, kFloat64, {3}},
      {"int64 + float16", [&](Device d) { return T({1}, kInt64, d) + T({2}, kFloat16, d); }, kFloat16, {3}},
      {"bool + bool (add)", [&](Device d) { return add(T({1, 0, 0}, kBool, d), T({1, 1, 0}, kBool, d)); }, kBool,
       {1, 1, 0}},
      {"bool * bool", [&](Device d) { return T({1, 0, 1}, kBool, d) * T({1, 1, 0}, kBool, d); }, kBool, {1, 0, 0}},
      {"bool + 1", [&](Device d) { return T({1, 0}, kBool, d) + 1; }, kInt64, {2, 1}},
      {"bool + 1.5", [&](Device d) { return T({1, 0}, kBool, d) + 1.5; }, kFloat32, {2.5, 1.5}},
      {"bool + int32", [&](Device d) { return T({1, 0}, kBool, d) + T({2, 2}, kInt32, d); }, kInt32, {3, 2}},
      {"float32 + true", [&](Device d) { return T({1, 0}, kFloat32, d) + true; }, kFloat32, {2, 1}},
      {"int / int", [&](Device d) { return T({1, 3}, kInt64, d) / T({2, 2}, kInt64, d); }, kFloat32, {0.5, 1.5}},
      {"int32 / 2", [&](Device d) { return T({1, 3}, kInt32, d) / 2; }, kFloat32, {0.5, 1.5}},
      {"bool / bool", [&](Device d) { return div(T({1, 0}, kBool, d), T({1, 1}, kBool, d)); }, kFloat32, {1, 0}},
      {"int64 == 1.5", [&](Device d) { return T({1, 2}, kInt64, d) == 1.5; }, kBool, {0, 0}},
      {"int64 < float32", [&](Device d) { return T({1, 2}, kInt64, d) < T({1.5, 1.5}, kFloat32, d); }, kBool, {1, 0}},
      {"float16 >= float64", [&](Device d) { return T({1, 2}, kFloat16, d) >= T({2, 2}, kFloat64, d); }, kBool,
       {0, 1}},
      {"0-d float64 + float32", [&](Device d) { return S(0.5, kFloat64, d) + T({1, 2}, kFloat32, d); }, kFloat32,
       {1.5, 2.5}},
      {"float32 + 0-d float64", [&](Device d) { return T({1, 2}, kFloat32, d) + S(0.5, kFloat64, d); }, kFloat32,
       {1.5, 2.5}},
      {"0-d int64 + int32", [&](Device d) { return S(2, kInt64, d) + T({1, 2}, kInt32, d); }, kInt32, {3, 4}},
      {"0-d float64 + int32", [&](Device d) { return S(0.5, kFloat64, d) + T({1, 2}, kInt32, d); }, kFloat64,
       {1.5, 2.5}},
      {"0-d float32 + float16", [&](Device d) { return S(0.5, kFloat32, d) + T({1, 2}, kFloat16, d); }, kFloat16,
       {1.5, 2.5}},
      {"0-d float64 + 0-d float32", [&](Device d) { return S(0.5, kFloat64, d) + S(1, kFloat32, d); }, kFloat64,
       {1.5}},
      {"0-d int64 + 2.5", [&](Device d) { return S(1, kInt64, d) + 2.5; }, kFloat32, {3.5}},
      {"0-d float16 + 2.5", [&](Device d) { return S(1, kFloat16, d) + 2.5; }, kFloat16, {3.5}},
      {"pow(int64, 2)", [&](Device d) { return pow(T({2, 3}, kInt64, d), 2); }, kInt64, {4, 9}},
      {"pow(int64, 0.5)", [&](Device d) { return pow(T({4, 9}, kInt64, d), 0.5); }, kFloat32, {2, 3}},
      {"pow(2, int64)", [&](Device d) { return pow(2, T({2, 3}, kInt64, d)); }, kInt64, {4, 8}},
      {"pow(2.5, int64)", [&](Device d) { return pow(2.5, T({1, 2}, kInt64, d)); }, kFloat32, {2.5, 6.25}},
      {"maximum(int32, float16)", [&](Device d) { return maximum(T({1, 3}, kInt32, d), T({2, 2}, kFloat16, d)); },
       kFloat16, {2, 3}},
      {"where(cond, int64, 2.5)", [&](Device d) { return where(T({1, 0}, kBool, d), T({1, 2}, kInt64, d), 2.5); },
       kFloat32, {1, 2.5}},
      {"where(cond, float16, float32)",
       [&](Device d) { return where(T({1, 0}, kBool, d), T({1, 2}, kFloat16, d), T({3, 4}, kFloat32, d)); },
       kFloat32, {1, 4}},
      {"masked_fill(int64, 2.5)", [&](Device d) { return masked_fill(T({1, 2}, kInt64, d), T({1, 0}, kBool, d), 2.5); },
       kInt64, {2, 2}},
      {"clamp(int64, 0, 3)", [&](Device d) { return clamp(T({-1, 5}, kInt64, d), 0, 3); }, kInt64, {0, 3}},
      {"clamp(int64, 0.5)", [&](Device d) { return clamp(T({0, 5}, kInt64, d), 0.5); }, kFloat32, {0.5, 5}},
      {"exp(int64)", [&](Device d) { return exp(T({0}, kInt64, d)); }, kFloat32, {1}},
      {"sqrt(bool)", [&](Device d) { return sqrt(T({1, 0}, kBool, d)); }, kFloat32, {1, 0}},
      {"sigmoid(int32)", [&](Device d) { return sigmoid(T({0}, kInt32, d)); }, kFloat32, {0.5}},
      {"neg(int32)", [&](Device d) { return neg(T({1}, kInt32, d)); }, kInt32, {-1}},
      {"abs(uint8)", [&](Device d) { return abs(T({200}, kUInt8, d)); }, kUInt8, {200}},
      {"sum(int32)", [&](Device d) { return sum(T({1, 2}, kInt32, d)); }, kInt64, {3}},
      {"sum(bool)", [&](Device d) { return sum(T({1, 1, 0}, kBool, d)); }, kInt64, {2}},
      {"sum(uint8)", [&](Device d) { return sum(T({200, 100}, kUInt8, d)); }, kInt64, {300}},
      {"sum(int32, dtype=float64)", [&](Device d) { return sum(T({1, 2}, kInt32, d), {}, false, kFloat64); },
       kFloat64, {3}},
      {"prod(int32)", [&](Device d) { return prod(T({2, 3}, kInt32, d)); }, kInt64, {6}},
      {"mean(float16)", [&](Device d) { return mean(T({1, 2}, kFloat16, d)); }, kFloat16, {1.5}},
      {"amax(int32)", [&](Device d) { return amax(T({1, 7}, kInt32, d)); }, kInt32, {7}},
      {"logsumexp(int64)", [&](Device d) { return logsumexp(T({0, 0}, kInt64, d), {0}); }, kFloat32, {std::log(2.0)}},
      {"any(float32)", [&](Device d) { return any(T({0, 0.5}, kFloat32, d)); }, kBool, {1}},
      {"argmax(float16)", [&](Device d) { return argmax(T({0, 0.5}, kFloat16, d)); }, kInt64, {1}},
      {"one_hot", [&](Device d) { return one_hot(T({1}, kInt64, d), 2); }, kInt64, {0, 1}},
      {"cat(int32, int64)", [&](Device d) { return cat({T({1}, kInt32, d), T({2}, kInt64, d)}); }, kInt64, {1, 2}},
      {"float32 0-d on the CPU + float64 tensor",
       [&](Device d) { return S(1, kFloat32, Device::cpu()) + T({1}, kFloat64, d); },
       kFloat64, {2}},
  };
  for (Device dev : test::devices())
    for (const Row& r : rows) {
      SCOPED_TRACE(r.what + " on " + dev.str());
      Tensor y = r.fn(dev);
      EXPECT_EQ(y.dtype(), r.want) << r.what;
      EXPECT_EQ(y.device(), dev) << r.what;
      if (!r.values.empty()) test::expect_close(y, r.values, y.shape(), 1e-6, 1e-6, r.what);
    }
  // result_type itself
  EXPECT_EQ(result_type(ones({2}, kInt64), 2.5), kFloat32);
  EXPECT_EQ(result_type(ones({2}, kInt32), 5), kInt32);
  EXPECT_EQ(result_type(ones({2}, kFloat16), 2.0), kFloat16);
  EXPECT_EQ(result_type(ones({2}, kBool), true), kBool);
  EXPECT_EQ(result_type(scalar_tensor(1.0, kFloat64), ones({2}, kFloat32)), kFloat32);
  EXPECT_EQ(result_type(ones({2}, kBFloat16), ones({2}, kFloat16)), kFloat32);
  EXPECT_EQ(result_type(scalar_tensor(1, kInt64), ones({2}, kUInt8)), kUInt8);
  // in place: the result must fit the destination
  Tensor i = ones({2}, kInt64);
  EXPECT_THROW(i.add_(2.5), Error);
  EXPECT_THROW(i.div_(2), Error);
  EXPECT_THROW(i.clamp_(0.5, 2.5), Error);
  i.clamp_(2, 3);
  test::expect_close(i, {2, 2}, {2});
  Tensor f = ones({2}, kFloat16);
  f.add_(ones({2}, kFloat64));
  EXPECT_EQ(f.dtype(), kFloat16);
  test::expect_close(f, {2, 2}, {2});
}

}  // namespace
