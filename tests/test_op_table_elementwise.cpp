// The op table, elementwise: unary ops and scalar operands, binary ops, special values, type promotion.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "op_table_util.h"

namespace kiln::test::op_table {
namespace {

// Reference math of the unary rows.
double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double sign_ref(double x) { return (x > 0) - (x < 0); }
// Python's a // b as torch computes it: through fmod, so inf // 3 is NaN and -2 // inf is -1.
double floor_divide_ref(double a, double b) {
  if (b == 0) return a / b;
  const double m = std::fmod(a, b);
  double q = (a - m) / b;
  if (m != 0 && (b < 0) != (m < 0)) q -= 1;
  if (q == 0) return std::copysign(0.0, a / b);
  const double f = std::floor(q);
  return q - f > 0.5 ? f + 1 : f;
}

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
      {"erf", [](T x) { return erf(x); }, [](double x) { return std::erf(x); }, Dist::Normal, Out::Float, FI},
      {"log2", [](T x) { return log2(x); }, [](double x) { return std::log2(x); }, Dist::Positive, Out::Float, FI},
      {"log10", [](T x) { return x.log10(); }, [](double x) { return std::log10(x); }, Dist::Positive, Out::Float, FI},
      {"exp2", [](T x) { return exp2(x); }, [](double x) { return std::exp2(x); }, Dist::Normal, Out::Float, FI},
      {"floor", [](T x) { return floor(x); }, [](double x) { return std::floor(x); }, Dist::Normal, Out::Same, FI},
      {"ceil", [](T x) { return x.ceil(); }, [](double x) { return std::ceil(x); }, Dist::Normal, Out::Same, FI},
      {"round", [](T x) { return round(x); }, [](double x) { return std::nearbyint(x); }, Dist::Normal, Out::Same,
       FI},
      {"trunc", [](T x) { return trunc(x); }, [](double x) { return std::trunc(x); }, Dist::Normal, Out::Same, FI},
      {"isnan", [](T x) { return isnan(log(x)); }, [](double x) { return b2d(std::isnan(std::log(x))); }, Dist::Normal,
       Out::Bool, F},
      {"isinf", [](T x) { return isinf(x / (x > 0)); }, [](double x) { return b2d(std::isinf(x / (x > 0))); },
       Dist::Normal, Out::Bool, F},
      {"isfinite", [](T x) { return (x / (x > 0)).isfinite(); }, [](double x) { return b2d(std::isfinite(x / (x > 0))); },
       Dist::Normal, Out::Bool, F},
      {"logical_not", [](T x) { return logical_not(x); }, [](double x) { return b2d(x == 0); }, Dist::SmallInt,
       Out::Bool, FI + std::vector<ScalarType>{kBool}},
      {"logical_not_operator", [](T x) { return !x; }, [](double x) { return b2d(x == 0); }, Dist::SmallInt,
       Out::Bool, {kFloat32, kBool}},
      {"bitwise_not", [](T x) { return ~x; }, [](double x) { return static_cast<double>(~static_cast<int64_t>(x)); },
       Dist::SmallInt, Out::Same, {kInt64, kInt32}},
      {"bitwise_not_bool", [](T x) { return x.bitwise_not(); }, [](double x) { return b2d(x == 0); }, Dist::SmallInt,
       Out::Same, {kBool}},
      {"remainder_scalar", [](T x) { return x % 1.5; }, [](double x) { return x - 1.5 * std::floor(x / 1.5); },
       Dist::Normal, Out::Float, FI},
      {"floor_divide_int_scalar", [](T x) { return floor_divide(x, -3); }, [](double x) { return floor_divide_ref(x, -3); },
       Dist::Normal, Out::Same, FI},
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
      // the exponents the CPU runs without libm's pow (products, sqrt, division)
      {"pow_rsqrt", [](T x) { return pow(x, -0.5); }, [](double x) { return std::pow(x, -0.5); }, Dist::Positive,
       Out::Float, F},
      {"pow_reciprocal", [](T x) { return pow(x, -1.0); }, [](double x) { return 1 / x; }, Dist::NonZero, Out::Float,
       F},
      {"pow_neg_two", [](T x) { return x.pow(-2.0); }, [](double x) { return 1 / (x * x); }, Dist::NonZero,
       Out::Float, F},
      {"pow_one", [](T x) { return pow(x, 1.0); }, [](double x) { return x; }, Dist::Normal, Out::Float, F},
      {"pow_zero", [](T x) { return pow(x, 0.0); }, [](double x) { return 1.0; }, Dist::Normal, Out::Float, F},
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
        std::string what = row.name + " " + dtype_name(dt) + " " + str(c.shape, c.layout) + " on " + dev.str();
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
      {"floor_divide", [](T a, T b) { return floor_divide(a, b); },
       floor_divide_ref, Dist::Normal, Dist::NonZero, Out::Same, FI},
      {"remainder", [](T a, T b) { return a % b; }, [](double a, double b) { return a - b * std::floor(a / b); },
       Dist::Normal, Dist::NonZero, Out::Same, FI},
      {"fmod", [](T a, T b) { return fmod(a, b); }, [](double a, double b) { return std::fmod(a, b); },
       Dist::Normal, Dist::NonZero, Out::Same, FI},
      // float32 and 16-bit quotients round before trunc (2.99999999 is 3): torch's bits are
      // tests/test_division.cpp's; here the dtypes whose quotient the double reference has
      {"div_trunc", [](T a, T b) { return div(a, b, "trunc"); }, [](double a, double b) { return std::trunc(a / b); },
       Dist::Normal, Dist::NonZero, Out::Same, {kFloat64, kInt64, kInt32}},
      {"atan2", [](T a, T b) { return atan2(a, b); }, [](double a, double b) { return std::atan2(a, b); },
       Dist::Normal, Dist::Normal, Out::Float, FI},
      {"bitwise_and", [](T a, T b) { return a & b; },
       [](double a, double b) { return static_cast<double>(static_cast<int64_t>(a) & static_cast<int64_t>(b)); },
       Dist::SmallInt, Dist::SmallInt, Out::Same, {kInt64, kInt32, kBool}},
      {"bitwise_or", [](T a, T b) { return a | b; },
       [](double a, double b) { return static_cast<double>(static_cast<int64_t>(a) | static_cast<int64_t>(b)); },
       Dist::SmallInt, Dist::SmallInt, Out::Same, {kInt64, kInt32, kBool}},
      {"bitwise_xor", [](T a, T b) { return a.bitwise_xor(b); },
       [](double a, double b) { return static_cast<double>(static_cast<int64_t>(a) ^ static_cast<int64_t>(b)); },
       Dist::SmallInt, Dist::SmallInt, Out::Same, {kInt64, kInt32, kBool}},
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
        std::string what = row.name + " " + dtype_name(dt) + " " + str(c.a, c.la) + " with " + str(c.b, c.lb) + " on " +
                           dev.str();
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
// NaN, infinities and signed zeros: every row of the unary table on them (in the float types
// that hold them). The reductions on them are in test_op_table_reduce.cpp.

TEST(OpTableSpecialValues, ElementwiseRows) {
  const Vec specials = {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -1.0, 2.0};
  for (Device dev : test::devices())
    for (const UnaryRow& row : unary_rows()) {
      if (row.name.rfind("gelu", 0) == 0) continue;  // PyTorch's gelu(inf) is NaN: not a rule to copy
      for (ScalarType dt : {kFloat32, kFloat64, kFloat16}) {
        if (std::find(row.dtypes.begin(), row.dtypes.end(), dt) == row.dtypes.end()) continue;
        std::string what = row.name + " " + dtype_name(dt) + " on special values on " + dev.str();
        run_case(what, [&] {
          Tensor x = tensor_1d(specials, dt, dev);
          Vec want(specials.size());
          for (size_t i = 0; i < want.size(); ++i) want[i] = row.ref(specials[i]);
          ScalarType ot = out_dtype(row.out, dt);
          check(row.fn(x), want, x.shape(), ot, dev, tol_for(ot), what);
        });
      }
    }
}

// pow with one exponent: the products, sqrt and divisions for the common exponents (math.h's
// with_pow_exponent, on the CPU and for a number on CUDA) keep pow's results at signed zeros and
// infinities (pow(-0, 0.5) is +0, pow(-inf, 0.5) is +inf, pow(-0, -0.5) is +inf), and are within
// an ulp of it elsewhere; an exponent tensor of one element broadcast to more dims agrees. Other
// exponents call the device's pow (CUDA's powf: within 4 ulp).
TEST(OpTableSpecialValues, PowWithOneExponentKeepsPowsResults) {
  const Vec xs = {0.0, -0.0, kInf, -kInf, kNaN, 1.0, -1.0, 0.5, -2.0, 3.0, 1e-30, -1e30, 7.25};
  for (Device dev : test::devices())
    for (double e : {2.0, 3.0, 1.0, 0.0, -1.0, -2.0, 0.5, -0.5, 2.5}) {
      for (ScalarType dt : {kFloat32, kFloat64}) {
        const std::string what = "pow(x, " + std::to_string(e) + ") " + dtype_name(dt) + " on " + dev.str();
        const Tensor x = tensor_1d(xs, dt, dev);
        const double eps = dt == kFloat32 ? 1.2e-7 : 2.3e-16;
        const double rtol = e == 2.5 ? 4 * eps : eps;
        const Vec got = test::values(pow(x, e));
        // On a GPU an exponent tensor on the device takes the device's pow (reading it would wait).
        const Vec got_tensor = test::values(pow(x, full({1, 1}, e, TensorOptions(dt).device(dev))).reshape({-1}));
        for (size_t i = 0; i < xs.size(); ++i) {
          double want = std::pow(xs[i], e);
          if (dt == kFloat32) want = static_cast<float>(std::pow(static_cast<float>(xs[i]), static_cast<float>(e)));
          const double g = got[i];
          const bool same = got_tensor[i] == g || (std::isnan(got_tensor[i]) && std::isnan(g));
          if (dev.is_cpu()) {
            EXPECT_TRUE(same) << what << " with a [1, 1] exponent at " << xs[i] << ": " << got_tensor[i];
          }
          else EXPECT_TRUE(same || std::abs(got_tensor[i] - g) <= 4 * eps * std::abs(g))
              << what << " with a [1, 1] exponent at " << xs[i] << ": " << got_tensor[i] << ", not " << g;
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(g)) << what << " at " << xs[i];
            continue;
          }
          EXPECT_EQ(std::signbit(g), std::signbit(want)) << what << " at " << xs[i];
          if (std::isinf(want) || want == 0) {
            EXPECT_EQ(g, want) << what << " at " << xs[i];
          }
          else EXPECT_NEAR(g, want, rtol * std::abs(want)) << what << " at " << xs[i];
        }
      }
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
  auto T = [](std::initializer_list<double> v, ScalarType dt, Device d) { return tensor_1d(Vec(v), dt, d); };
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
}  // namespace kiln::test::op_table
