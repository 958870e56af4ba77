// softmax and log_softmax on the CPU's vectorised paths: rows longer than a vector (the last dim)
// and blocks of columns (another dim), forward and backward, against float64 loops written here;
// NaN and infinities inside the vectors as well as in the tails. The op table's tests cover the
// short rows and the devices.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "op_table_util.h"
#include "test_util.h"

using namespace kiln;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// [outer, n, inner] around dim: softmax (or log_softmax) of x along n in float64, and the backward
// formula's gradient from the output y that the op saved (in its dtype, as the kernel reads it).
struct Reference {
  std::vector<double> y, gx;
};
Reference reference(const std::vector<double>& x, const std::vector<double>& saved_y, const std::vector<double>& g,
                    int64_t outer, int64_t n, int64_t inner, bool log) {
  Reference r{std::vector<double>(x.size()), std::vector<double>(x.size())};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t i) { return static_cast<size_t>((o * n + i) * inner + j); };
      double mx = -kInf, sum = 0, dot = 0;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[at(i)]);
      for (int64_t i = 0; i < n; ++i) sum += std::exp(x[at(i)] - mx);
      for (int64_t i = 0; i < n; ++i) {
        r.y[at(i)] = log ? x[at(i)] - mx - std::log(sum) : std::exp(x[at(i)] - mx) / sum;
        dot += log ? g[at(i)] : g[at(i)] * saved_y[at(i)];
      }
      for (int64_t i = 0; i < n; ++i) {
        const double y = saved_y[at(i)];
        r.gx[at(i)] = log ? g[at(i)] - std::exp(y) * dot : y * (g[at(i)] - dot);
      }
    }
  return r;
}
}  // namespace

TEST(Softmax, LongRowsAndColumnBlocksMatchFloat64) {
  struct Case {
    Shape shape;
    int64_t dim;
  };
  // rows of 1000 (vectors and a tail); 70 columns of 37 (one block with a tail); 1000 rows of
  // 100 columns (blocks of 64 and 36); 19 rows of 3 (narrower than a vector).
  const std::vector<Case> cases = {{{5, 1000}, -1}, {{3, 37, 70}, 1}, {{2, 1000, 100}, 1}, {{19, 3}, 0}};
  for (ScalarType dt : {kFloat32, kFloat64, kBFloat16})
    for (const Case& c : cases)
      for (bool log : {false, true}) {
        const std::string what = std::string(log ? "log_softmax " : "softmax ") + dtype_name(dt) + " " +
                                 test::op_table::str(c.shape) + " dim " + std::to_string(c.dim);
        manual_seed(3);
        Tensor x = (randn(c.shape) * 3.0).to(dt).requires_grad_();
        Tensor g = randn(c.shape).to(dt);
        const int64_t d = c.dim < 0 ? c.dim + static_cast<int64_t>(c.shape.size()) : c.dim;
        int64_t outer = 1, inner = 1;
        for (int64_t k = 0; k < d; ++k) outer *= c.shape[k];
        for (size_t k = d + 1; k < c.shape.size(); ++k) inner *= c.shape[k];
        Tensor y = log ? log_softmax(x, c.dim) : softmax(x, c.dim);
        y.backward(g);
        const Reference want =
            reference(test::values(x), test::values(y), test::values(g), outer, c.shape[d], inner, log);
        const double rtol = dt == kBFloat16 ? 1e-2 : dt == kFloat32 ? 2e-5 : 1e-12;
        const double atol = dt == kBFloat16 ? 1e-2 : dt == kFloat32 ? 2e-6 : 1e-12;
        test::expect_close(y, want.y, c.shape, rtol, atol, what);
        test::expect_close(x.grad(), want.gx, c.shape, rtol, atol, what + " gradient");
      }
}

TEST(Softmax, NanAndInfinitiesAnywhereInARowOrColumn) {
  const int64_t n = 40;  // two float32 vectors of 16 (or five of 8) and a tail
  for (ScalarType dt : {kFloat32, kFloat64, kBFloat16})
    for (int64_t at : {int64_t{5}, int64_t{37}}) {  // in a vector, in the tail
      const std::string where = std::string(dtype_name(dt)) + " at " + std::to_string(at);
      auto row = [&](double special, double rest) {
        std::vector<double> v(n, rest);
        v[static_cast<size_t>(at)] = special;
        return v;
      };
      // A row (the last dim) and the same values as a column of a [n, 17] tensor (dim 0).
      for (bool column : {false, true}) {
        auto make = [&](const std::vector<double>& v) {
          Tensor t = tensor(v, {n}, kFloat64).to(dt);
          return column ? t.reshape({n, 1}).expand({n, 17}).contiguous() : t;
        };
        // column 0 is in a vector of the column blocks, column 16 in their tail
        for (int64_t col : column ? std::vector<int64_t>{0, 16} : std::vector<int64_t>{0}) {
          auto values = [&](const Tensor& t) { return test::values(column ? t.select(1, col) : t); };
          const std::string w = where + (column ? " column " + std::to_string(col) : " row");
          for (double v : values(softmax(make(row(kNaN, 0.5)), 0))) EXPECT_TRUE(std::isnan(v)) << "NaN " << w;
          for (double v : values(softmax(make(row(kInf, 0.5)), 0))) EXPECT_TRUE(std::isnan(v)) << "+inf " << w;
          for (double v : values(softmax(make(row(-kInf, -kInf)), 0))) EXPECT_TRUE(std::isnan(v)) << "all -inf " << w;
          for (double v : values(log_softmax(make(row(kNaN, 0.5)), 0))) EXPECT_TRUE(std::isnan(v)) << "log NaN " << w;
          // masked_softmax's unmasked +inf or NaN: NaN everywhere, as softmax
          const Tensor keep_all = ones(column ? Shape{n, 17} : Shape{n}, kBool);
          for (double v : values(masked_softmax(make(row(kInf, 0.5)), keep_all, 0)))
            EXPECT_TRUE(std::isnan(v)) << "masked +inf " << w;
          for (double v : values(masked_softmax(make(row(kNaN, -kInf)), keep_all, 0)))
            EXPECT_TRUE(std::isnan(v)) << "masked NaN among -inf " << w;
          std::vector<double> p = values(softmax(make(row(-kInf, 0.5)), 0));
          std::vector<double> lp = values(log_softmax(make(row(-kInf, 0.5)), 0));
          for (int64_t i = 0; i < n; ++i) {
            const double want = i == at ? 0.0 : 1.0 / (n - 1);
            EXPECT_NEAR(p[static_cast<size_t>(i)], want, 1e-2 * want) << "-inf " << w << " element " << i;
            if (i == at)
              EXPECT_EQ(lp[static_cast<size_t>(i)], -kInf) << "log -inf " << w;
            else
              EXPECT_NEAR(lp[static_cast<size_t>(i)], -std::log(n - 1.0), 1e-2) << "log -inf " << w;
          }
        }
      }
    }
}
