// The op table, in place: in-place forms on contiguous tensors and views, overlapping copies, where and masked_fill.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "op_table_util.h"

namespace kiln::test::op_table {
namespace {

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
      // The out= forms, writing s's own values op other into s's memory (contiguous, a view, a
      // transpose) from a separate copy: the result must land where the in-place form puts it.
      {"add_out", [](Tensor& s, T o) { add_out(s, s.clone(), o); }, [](double s, double o) { return s + o; },
       Dist::Normal, {4}, Dist::Normal, {}, Layout::Sliced, FI},
      {"sub_out_int_into_float", [](Tensor& s, T o) { sub_out(s, s.clone(), o); },
       [](double s, double o) { return s - o; }, Dist::Normal, {3, 1}, Dist::Normal, kInt64, C, F},
      {"mul_out_scalar", [](Tensor& s, T) { mul_out(s, s.clone(), 0.5); }, [](double s, double) { return s * 0.5; },
       Dist::Normal, {}, Dist::Normal, {}, C, F},
      {"div_out", [](Tensor& s, T o) { div_out(s, s.clone(), o); }, [](double s, double o) { return s / o; },
       Dist::Normal, {3, 4}, Dist::NonZero, {}, Layout::Transposed, F},
      {"mul_out_itself", [](Tensor& s, T o) { mul_out(s, s, o); }, [](double s, double o) { return s * o; },
       Dist::Normal, {3, 1}, Dist::Normal, {}, C, FI},
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
  // [3, 4] contiguous, every other row of a [6, 4] base, and the transpose of a [4, 3] base;
  // also 0-d and empty targets.
  const std::vector<ShapeCase> targets = {{{3, 4}, Layout::Contig},
                                          {{3, 4}, Layout::Sliced},
                                          {{3, 4}, Layout::Transposed},
                                          {{}, Layout::Contig},
                                          {{0, 4}, Layout::Contig}};
  for (Device dev : test::devices())
    for (ScalarType dt : row.dtypes)
      for (const ShapeCase& tg : targets) {
        // operands that do not broadcast to a 0-d or empty target are shrunk to 0-d
        Shape oshape = row.other_shape;
        if (!broadcasts_to(oshape, tg.shape)) oshape = {};
        std::string what = row.name + " " + dtype_name(dt) + " into " + str(tg.shape, tg.layout) + " with " +
                           str(oshape) + " on " + dev.str();
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

// out= reads an operand that overlaps out (not out itself) from its old values; the result is
// cast into out's dtype; bad outputs and arguments that need a gradient are errors.
TEST(OpTableOut, OverlapDtypeAndErrors) {
  for (Device dev : test::devices()) {
    Tensor base = arange(6, TensorOptions(kFloat32).device(dev));
    Tensor tail = base.slice(0, 1, 6);
    add_out(tail, base.slice(0, 0, 5), tail);  // out[i] = base[i] + base[i + 1], all old values
    test::expect_close(base, {0, 1, 3, 5, 7, 9}, {6}, 0, 0, "add_out into a shifted view of its operand");
    Tensor out64 = zeros({3}, TensorOptions(kFloat64).device(dev));
    mul_out(out64, arange(3, TensorOptions(kFloat32).device(dev)), 1.0 / 3);
    EXPECT_EQ(out64.dtype(), kFloat64);
    test::expect_close(out64, {0, 1.0f / 3, 2.0f / 3}, {3}, 1e-7, 0, "float32 result written into float64");

    const TensorOptions o = TensorOptions(kFloat32).device(dev);
    Tensor out = zeros({2, 3}, o);
    expect_error([&] { add_out(out, ones({3, 3}, o), ones({3}, o)); },
                 "[add_out] the result of shape [3, 3] does not fit the output tensor of shape [2, 3]");
    Tensor ints = zeros({3}, TensorOptions(kInt64).device(dev));
    expect_error([&] { div_out(ints, ones({3}, o), 2); }, "[div_out] result type float32 cannot be written into");
    Tensor w = ones({2, 3}, o).requires_grad_();
    expect_error([&] { mul_out(out, w, 2); }, "[mul_out] the out= form does not record a gradient");
    {
      NoGradGuard ng;
      mul_out(out, w, 2);  // no gradient is recorded, so this is allowed
    }
    test::expect_close(out, std::vector<double>(6, 2.0), {2, 3}, 0, 0, "mul_out under NoGradGuard");
    expect_error([&] { add_out(w, out, 1); }, "[add_out] the out= form does not record a gradient");
  }
}

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
          Vec want(cv.size());
          for (size_t i = 0; i < want.size(); ++i) want[i] = cv[i] != 0 ? av[i] : bv[i];
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

}  // namespace
}  // namespace kiln::test::op_table
