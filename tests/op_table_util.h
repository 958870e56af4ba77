// The op table's shared machinery: float64 reference loops, input layouts, random inputs, tolerances, checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace kiln::test::op_table {

using Vec = std::vector<double>;
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// ------------------------------------------------------------------------------------------
// Shapes and index arithmetic, done here rather than with Kiln so the reference is independent.

inline int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

inline Shape row_major(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

// The multi-index of flat row-major position `flat` in shape s.
inline Shape unravel(int64_t flat, const Shape& s) {
  Shape idx(s.size());
  for (size_t i = s.size(); i-- > 0;) {
    idx[i] = flat % s[i];
    flat /= s[i];
  }
  return idx;
}

// The flat row-major position of multi-index idx in shape s (the inverse of unravel).
inline int64_t ravel(const Shape& idx, const Shape& s) {
  Shape st = row_major(s);
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * st[d];
  return off;
}

// dim counted from the end when negative, as PyTorch takes it, for a tensor of rank `rank`.
inline int64_t wrap_dim_ref(int64_t dim, int64_t rank) { return dim < 0 ? dim + rank : dim; }

inline Shape broadcast_shape(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

inline bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 0; i < from.size(); ++i) {
    int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1) return false;
  }
  return true;
}

// v (row-major, shape `from`) broadcast to shape `to`.
inline Vec broadcast_to(const Vec& v, const Shape& from, const Shape& to) {
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

inline std::string str(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// ------------------------------------------------------------------------------------------
// Random inputs in several layouts.

enum class Dist { Normal, Positive, Unit, NonZero, NearOne, SmallInt, Bool };
enum class Layout { Contig, Transposed, Sliced, Expanded, Permuted };

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contig: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::Sliced: return "sliced(step 2)";
    case Layout::Expanded: return "expanded";
    case Layout::Permuted: return "permuted";
  }
  return "?";
}

// A logical shape and the layout of the input that has it.
struct ShapeCase {
  Shape shape;
  Layout layout;
};

// "[2, 3] transposed": how a failure message names a case's shape and layout.
inline std::string str(const Shape& s, Layout l) { return str(s) + " " + layout_name(l); }

// The one generator of every op table input, fixed-seeded so that a run reproduces.
inline std::mt19937_64& rng() {
  static std::mt19937_64 g(20240531);
  return g;
}

// One random value of distribution d, representable in dtype dt (integers for integer dtypes).
inline double draw(Dist d, ScalarType dt) {
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

inline Input make_input(const Shape& shape, Dist dist, ScalarType dt, Device dev, Layout layout = Layout::Contig) {
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

// The 1-D tensor of values v, of dtype dt on dev.
inline Tensor tensor_1d(const Vec& v, ScalarType dt, Device dev) {
  return tensor(v, Shape{static_cast<int64_t>(v.size())}, TensorOptions(dt).device(dev));
}

// ------------------------------------------------------------------------------------------
// Tolerances and checks.

struct Tol {
  double rtol, atol;
};

// Results are computed in (at least) float32 from the stored inputs and rounded once to the
// output dtype, so the tolerance is that dtype's rounding plus float32 arithmetic.
inline Tol tol_for(ScalarType t) {
  switch (t) {
    case kFloat64: return {1e-10, 1e-12};
    case kFloat32: return {2e-5, 2e-6};
    case kBFloat16: return {1.6e-2, 1e-2};
    case kFloat16: return {2e-3, 1e-3};
    default: return {0, 0};
  }
}
// Reductions and matmul add up many float32 terms: a little more slack.
inline Tol sum_tol_for(ScalarType t) {
  Tol r = tol_for(t);
  if (t == kFloat32) return {1e-4, 1e-4};
  if (t == kBFloat16) return {2e-2, 5e-2};
  if (t == kFloat16) return {4e-3, 1e-2};
  return r;
}

inline void expect_close(const Tensor& got, const Vec& want, const Shape& shape, Tol tol, const std::string& what) {
  test::expect_close(got, want, shape, tol.rtol, tol.atol, what);
}

inline void check(const Tensor& got, const Vec& want, const Shape& shape, ScalarType dtype, Device dev, Tol tol,
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

// The output dtype of a row, from its input dtype.
enum class Out { Same, Float, Bool, SumLike, Int64 };
inline ScalarType out_dtype(Out o, ScalarType in) {
  switch (o) {
    case Out::Same: return in;
    case Out::Float: return is_floating_point(in) ? in : kFloat32;
    case Out::Bool: return kBool;
    case Out::SumLike: return is_floating_point(in) ? in : kInt64;
    case Out::Int64: return kInt64;
  }
  return in;
}

// ------------------------------------------------------------------------------------------
// Dtype lists and reference math shared by the tables.

inline const std::vector<ScalarType> kFloats = {kFloat32, kFloat64, kBFloat16, kFloat16};
inline const std::vector<ScalarType> kFloatsInts = {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32};

inline std::vector<ScalarType> operator+(std::vector<ScalarType> a, const std::vector<ScalarType>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline double b2d(bool b) { return b ? 1.0 : 0.0; }
// NaN-propagating, as torch.maximum/minimum and clamp are.
inline double max_ref(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b); }
inline double min_ref(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b); }

}  // namespace kiln::test::op_table
