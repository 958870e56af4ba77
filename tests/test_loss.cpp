// nll_loss and cross_entropy: PyTorch fixtures, a float64 reference loop, gradchecks and errors.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "test_util.h"

namespace {

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;
using Vec = std::vector<double>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The repository root: KILN_SOURCE_DIR when the build defines it, otherwise the first folder
// above the test executable (or the working directory) that holds tests/fixtures.
std::string source_dir() {
#ifdef KILN_SOURCE_DIR
  return KILN_SOURCE_DIR;
#else
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::path start : {fs::read_symlink("/proc/self/exe", ec).parent_path(), fs::current_path(ec)})
    for (fs::path p = start; !p.empty(); p = p.parent_path()) {
      if (fs::exists(p / "tests/fixtures/loss/cases.txt", ec)) return p.string();
      if (p == p.parent_path()) break;
    }
  std::string f = __FILE__;
  return f.substr(0, f.rfind("tests/"));
#endif
}

// ---- the PyTorch fixtures (tests/fixtures/make_loss_fixtures.py)

struct FixtureCase {
  std::string name, op, reduction;
  int64_t ignore_index = -100;
  double label_smoothing = 0;
  Tensor input, target, weight, gout, loss, grad;
};

Tensor read_tensor(std::istringstream& in, ScalarType dtype) {
  int64_t rank = 0;
  in >> rank;
  Shape shape(static_cast<size_t>(rank));
  int64_t n = 1;
  for (auto& d : shape) {
    in >> d;
    n *= d;
  }
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) {
    std::string s;
    in >> s;
    x = s == "nan" ? kNaN : std::stod(s);
  }
  return tensor(v, shape, kFloat64).to(dtype);
}

std::vector<FixtureCase> read_fixtures() {
  std::ifstream f(source_dir() + "/tests/fixtures/loss/cases.txt");
  EXPECT_TRUE(f.good()) << "missing tests/fixtures/loss/cases.txt";
  std::vector<FixtureCase> cases;
  std::string line;
  FixtureCase c;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "case") in >> c.name;
    else if (key == "op") in >> c.op;
    else if (key == "options") in >> c.reduction >> c.ignore_index >> c.label_smoothing;
    else if (key == "input") c.input = read_tensor(in, kFloat64);
    else if (key == "target") {
      std::string kind;
      in >> kind;
      c.target = read_tensor(in, kind == "int" ? kInt64 : kFloat64);
    } else if (key == "weight") {
      int64_t n = 0;
      in >> n;
      Vec v(static_cast<size_t>(n));
      for (auto& x : v) in >> x;
      c.weight = n ? tensor(v, kFloat64) : Tensor();
    } else if (key == "gout") c.gout = read_tensor(in, kFloat64);
    else if (key == "loss") c.loss = read_tensor(in, kFloat64);
    else if (key == "grad") c.grad = read_tensor(in, kFloat64);
    else if (key == "end") cases.push_back(std::exchange(c, FixtureCase{}));
  }
  return cases;
}

Reduction reduction_of(const std::string& s) {
  return s == "none" ? Reduction::None : s == "sum" ? Reduction::Sum : Reduction::Mean;
}

TEST(Loss, MatchesPyTorchFixtures) {
  auto cases = read_fixtures();
  ASSERT_GE(cases.size(), 19u);
  for (auto& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = c.input.detach().requires_grad_();
    Reduction r = reduction_of(c.reduction);
    Tensor loss = c.op == "nll_loss" ? nll_loss(x, c.target, c.weight, r, c.ignore_index)
                                     : cross_entropy(x, c.target, c.weight, r, c.ignore_index, c.label_smoothing);
    expect_close(loss, test::values(c.loss), c.loss.shape(), 1e-10, 1e-12, "loss");
    loss.backward(c.gout);
    expect_close(x.grad(), test::values(c.grad), c.grad.shape(), 1e-9, 1e-12, "grad");
  }
}

// ---- a float64 reference loop: input [N, C, S] (S = spatial elements), any options

struct RefCase {
  int64_t n, c, s;
  Vec x;           // logits (cross_entropy) or log-probabilities (nll_loss)
  std::vector<int64_t> t;  // class indices, [N, S]
  Vec w;           // empty: no weight
  int64_t ignore = -100;
  double eps = 0;
};

// Per-target losses, and the sum of the weights of the targets not ignored.
std::pair<Vec, double> reference(const RefCase& r, bool softmax_first) {
  Vec out;
  double wsum = 0;
  for (int64_t i = 0; i < r.n; ++i)
    for (int64_t k = 0; k < r.s; ++k) {
      auto at = [&](int64_t cls) { return r.x[static_cast<size_t>((i * r.c + cls) * r.s + k)]; };
      double lse = 0, mx = -INFINITY;
      for (int64_t cls = 0; cls < r.c; ++cls) mx = std::max(mx, at(cls));
      for (int64_t cls = 0; cls < r.c; ++cls) lse += std::exp(at(cls) - mx);
      lse = mx + std::log(lse);
      auto logp = [&](int64_t cls) { return softmax_first ? at(cls) - lse : at(cls); };
      auto wc = [&](int64_t cls) { return r.w.empty() ? 1.0 : r.w[static_cast<size_t>(cls)]; };
      const int64_t tgt = r.t[static_cast<size_t>(i * r.s + k)];
      if (tgt == r.ignore) {
        out.push_back(0);
        continue;
      }
      double smooth = 0;
      for (int64_t cls = 0; cls < r.c; ++cls) smooth -= wc(cls) * logp(cls);
      out.push_back((1 - r.eps) * -wc(tgt) * logp(tgt) + r.eps / static_cast<double>(r.c) * smooth);
      wsum += wc(tgt);
    }
  return {out, wsum};
}

TEST(Loss, MatchesFloat64ReferenceLoop) {
  std::mt19937_64 g(11);
  std::normal_distribution<double> nd;
  struct Spec { Shape shape; bool weight; int64_t ignore; double eps; };
  const std::vector<Spec> specs = {{{7, 5}, false, -100, 0.0}, {{7, 5}, true, 3, 0.0},   {{6, 4, 3}, true, -100, 0.2},
                                   {{2, 3, 2, 3}, false, 1, 0.1}, {{2, 3, 2, 3}, true, 0, 0.05}, {{64, 40}, true, 7, 0.1}};
  for (const auto& sp : specs)
    for (ScalarType dt : {kFloat32, kFloat64})
      for (bool ce : {false, true})
        for (Reduction red : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
          SCOPED_TRACE(testing::Message() << sp.shape << " weight " << sp.weight << " ignore " << sp.ignore << " eps "
                                          << sp.eps << " " << dt << " ce " << ce << " reduction " << int(red));
          if (!ce && sp.eps > 0) continue;
          RefCase r{sp.shape[0], sp.shape[1], 1, {}, {}, {}, sp.ignore, sp.eps};
          for (size_t d = 2; d < sp.shape.size(); ++d) r.s *= sp.shape[d];
          for (int64_t i = 0; i < r.n * r.c * r.s; ++i) r.x.push_back(nd(g));
          for (int64_t i = 0; i < r.n * r.s; ++i) r.t.push_back(static_cast<int64_t>(g() % r.c));
          if (sp.weight)
            for (int64_t i = 0; i < r.c; ++i) r.w.push_back(0.3 + static_cast<double>(g() % 100) / 50.0);
          Tensor x = tensor(r.x, sp.shape, kFloat64).to(dt);
          if (!ce) x = log_softmax(x, 1);  // nll_loss takes log-probabilities
          r.x = test::values(x);
          Shape ts = sp.shape;
          ts.erase(ts.begin() + 1);
          Tensor t = tensor(r.t, ts);
          Tensor w = sp.weight ? tensor(r.w, kFloat64).to(dt) : Tensor();
          auto [per, wsum] = reference(r, ce);
          Tensor got = ce ? cross_entropy(x, t, w, red, sp.ignore, sp.eps) : nll_loss(x, t, w, red, sp.ignore);
          const double tol = dt == kFloat32 ? 2e-5 : 1e-12;
          EXPECT_EQ(got.dtype(), dt);
          if (red == Reduction::None) {
            expect_close(got, per, ts, tol, tol);
          } else {
            double total = 0;
            for (double v : per) total += v;
            expect_close(got, {red == Reduction::Sum ? total : total / wsum}, {}, tol, tol);
          }
        }
}

TEST(Loss, ProbabilityTargetsMatchReference) {
  // -sum_c w_c q_c log p_c per sample, q = target (1 - eps) + eps / C; the mean divides by N.
  Tensor x = tensor({{0.2, -1.0, 0.5}, {1.5, 0.3, -0.7}}, kFloat64);
  Tensor q = tensor({{0.1, 0.6, 0.3}, {0.0, 0.0, 1.0}}, kFloat64);
  Tensor w = tensor({0.5, 2.0, 1.0}, kFloat64);
  const double eps = 0.3;
  Vec per;
  auto xv = test::values(x), qv = test::values(q), wv = test::values(w);
  for (int i = 0; i < 2; ++i) {
    double lse = 0;
    for (int c = 0; c < 3; ++c) lse += std::exp(xv[i * 3 + c]);
    lse = std::log(lse);
    double l = 0;
    for (int c = 0; c < 3; ++c) l -= wv[c] * (qv[i * 3 + c] * (1 - eps) + eps / 3) * (xv[i * 3 + c] - lse);
    per.push_back(l);
  }
  expect_close(cross_entropy(x, q, w, Reduction::None, -100, eps), per, {2}, 1e-12, 1e-12);
  expect_close(cross_entropy(x, q, w, Reduction::Sum, -100, eps), {per[0] + per[1]}, {}, 1e-12, 1e-12);
  expect_close(cross_entropy(x, q, w, Reduction::Mean, -100, eps), {(per[0] + per[1]) / 2}, {}, 1e-12, 1e-12);
}

TEST(Loss, EdgeCases) {
  Tensor lp = log_softmax(tensor({{0.1, 0.2, 0.3}, {1.0, -1.0, 0.0}}, kFloat64), 1);
  // all targets ignored: the mean is NaN (0 / 0), the sum 0, and the gradient zero, as in PyTorch
  Tensor x = lp.detach().requires_grad_();
  Tensor all_ignored = tensor({-100, -100});
  Tensor m = nll_loss(x, all_ignored);
  EXPECT_TRUE(std::isnan(m.item<double>()));
  m.backward();
  expect_close(x.grad(), Vec(6, 0.0), {2, 3});
  EXPECT_EQ(nll_loss(lp, all_ignored, {}, Reduction::Sum).item<double>(), 0.0);
  // an ignored target next to -inf log-probabilities contributes 0, not NaN
  Tensor with_inf = tensor({{-INFINITY, 0.0}, {-0.5, -0.9}}, kFloat64);
  expect_close(nll_loss(with_inf, tensor({1, -100}), {}, Reduction::None), {-0.0, 0.0}, {2});
  // int32 targets work like int64
  expect_close(nll_loss(lp, tensor({2, 0}, kInt32)), test::values(nll_loss(lp, tensor({2, 0}))), {});
  // an empty batch: the mean is NaN, the sum 0
  Tensor empty_in = zeros({0, 3}, kFloat64), empty_t = zeros({0}, kInt64);
  EXPECT_TRUE(std::isnan(cross_entropy(empty_in, empty_t).item<double>()));
  EXPECT_EQ(cross_entropy(empty_in, empty_t, {}, Reduction::Sum).item<double>(), 0.0);
  EXPECT_EQ(cross_entropy(empty_in, empty_t, {}, Reduction::None).shape(), Shape{0});
  // label_smoothing 1: only the smoothing term remains
  Tensor logits = tensor({{0.3, -0.2, 1.1}}, kFloat64);
  Tensor lsm = log_softmax(logits, 1);
  double uniform = -(test::values(lsm)[0] + test::values(lsm)[1] + test::values(lsm)[2]) / 3;
  expect_close(cross_entropy(logits, tensor({1}), {}, Reduction::Mean, -100, 1.0), {uniform}, {}, 1e-12, 1e-12);
  // large logits stay finite (log_softmax, not log(softmax))
  Tensor big = tensor({{1000.0, 0.0}, {0.0, 1000.0}}, kFloat32);
  expect_close(cross_entropy(big, tensor({1, 1}), {}, Reduction::None), {1000.0, 0.0}, {2}, 1e-6, 1e-4);
  // a +inf logit makes its row's loss and gradient NaN (log_softmax's inf - inf), as torch's; the
  // fused path (2-D, no smoothing) and the composed one (3-D) agree; a row of -inf is NaN too
  for (ScalarType dt : {kFloat32, kFloat64}) {
    Tensor inf_row = tensor({{INFINITY, 0.0, 1.0}, {0.5, -0.5, 2.0}, {-INFINITY, -INFINITY, -INFINITY}}, dt);
    for (const bool composed : {false, true}) {
      Tensor xi = (composed ? inf_row.unsqueeze(2) : inf_row).detach().requires_grad_();
      Tensor ti = composed ? tensor({1, 2, 0}).unsqueeze(1) : tensor({1, 2, 0});
      const std::vector<double> per = test::values(cross_entropy(xi, ti, {}, Reduction::None).to(kFloat64));
      const std::string what = std::string(dtype_name(dt)) + (composed ? " composed" : " fused");
      EXPECT_TRUE(std::isnan(per[0])) << what << ": " << per[0];
      EXPECT_TRUE(std::isfinite(per[1])) << what << ": " << per[1];
      EXPECT_TRUE(std::isnan(per[2])) << what << ": " << per[2];
      cross_entropy(xi, ti, {}, Reduction::Sum).backward();
      const std::vector<double> g = test::values(xi.grad().to(kFloat64));
      for (size_t j = 0; j < 3; ++j) {
        EXPECT_TRUE(std::isnan(g[j])) << what << " grad [0, " << j << "]: " << g[j];
        EXPECT_TRUE(std::isfinite(g[3 + j])) << what << " grad [1, " << j << "]: " << g[3 + j];
      }
    }
  }
}

// ---- gradchecks: every option

Tensor leaf(const Shape& s, uint64_t seed, double lo = -1.5, double hi = 1.5) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(static_cast<size_t>(shape_numel(s)));
  for (auto& x : v) x = u(g);
  return tensor(v, s, kFloat64).requires_grad_();
}

TEST(Loss, Gradcheck) {
  using Inputs = std::vector<Tensor>;
  Tensor w4 = tensor({0.5, 1.5, 1.0, 2.0}, kFloat64);
  Tensor t2 = tensor({1, 3, 0, 2, 3});
  Tensor t2i = tensor({1, -100, 0, 3, 3});
  Tensor t4 = tensor(std::vector<int64_t>{0, 3, 2, 1, 1, 0, 3, 2, 2, 2, 0, 1}, {2, 3, 2});
  struct Row { std::string name; Tensor target; std::function<Tensor(const Tensor&)> fn; Shape shape; };
  std::vector<Row> rows;
  for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
    const std::string rn = r == Reduction::None ? "_none" : r == Reduction::Sum ? "_sum" : "_mean";
    rows.push_back({"nll" + rn, t2, [=](const Tensor& x) { return nll_loss(x, t2, {}, r); }, {5, 4}});
    rows.push_back({"nll_weight_ignore" + rn, t2i, [=](const Tensor& x) { return nll_loss(x, t2i, w4, r); }, {5, 4}});
    rows.push_back({"nll_ignore_3" + rn, t2, [=](const Tensor& x) { return nll_loss(x, t2, w4, r, 3); }, {5, 4}});
    rows.push_back({"nll_spatial" + rn, t4, [=](const Tensor& x) { return nll_loss(x, t4, w4, r); }, {2, 4, 3, 2}});
    rows.push_back({"ce" + rn, t2, [=](const Tensor& x) { return cross_entropy(x, t2, {}, r); }, {5, 4}});
    rows.push_back({"ce_weight_ignore_ls" + rn, t2i,
                    [=](const Tensor& x) { return cross_entropy(x, t2i, w4, r, -100, 0.2); }, {5, 4}});
    rows.push_back({"ce_ls" + rn, t2, [=](const Tensor& x) { return cross_entropy(x, t2, {}, r, 3, 0.3); }, {5, 4}});
    rows.push_back({"ce_spatial_weight_ls" + rn, t4,
                    [=](const Tensor& x) { return cross_entropy(x, t4, w4, r, 2, 0.1); }, {2, 4, 3, 2}});
    rows.push_back({"ce_single" + rn, Tensor(),
                    [=](const Tensor& x) { return cross_entropy(x, tensor({2}).reshape({}), w4, r, -100, 0.1); }, {4}});
  }
  for (const auto& row : rows) {
    SCOPED_TRACE(row.name);
    EXPECT_TRUE(autograd::gradcheck([&](const Inputs& in) { return row.fn(in[0]); }, {leaf(row.shape, 3)}));
  }
  // probability targets: gradients reach both the logits and the target
  for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean})
    for (double eps : {0.0, 0.25}) {
      SCOPED_TRACE(testing::Message() << "probs reduction " << int(r) << " eps " << eps);
      auto fn = [&](const Inputs& in) { return cross_entropy(in[0], in[1], w4, r, -100, eps); };
      EXPECT_TRUE(autograd::gradcheck(fn, {leaf({3, 4}, 5), leaf({3, 4}, 6, 0.0, 1.0)}));
      EXPECT_TRUE(autograd::gradcheck(fn, {leaf({2, 4, 2, 2}, 7), leaf({2, 4, 2, 2}, 8, 0.0, 1.0)}));
    }
}

TEST(Loss, Errors) {
  Tensor x = randn({10, 10}), lp = log_softmax(x, 1);
  Tensor t = tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, 12});
  expect_error([&] { nll_loss(lp, t); }, "[nll_loss] target 12 is out of range for 10 classes");
  expect_error([&] { cross_entropy(x, tensor({0, 1, 2, 3, 4, 5, 6, 7, -3, 1})); },
               "[cross_entropy] target -3 is out of range for 10 classes");
  // ignore_index itself is fine even out of range; a negative ignore_index is not out of range
  EXPECT_NO_THROW(nll_loss(lp, tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, -100})));
  expect_error([&] { nll_loss(lp, tensor({0, 1, 2})); }, "[nll_loss] input of shape [10, 10] needs a target of shape [10]");
  expect_error([&] { nll_loss(lp, t.to(kFloat32)); }, "[nll_loss] target must hold class indices (int64), got float32");
  expect_error([&] { nll_loss(lp, t, ones({9})); }, "[nll_loss] weight must have shape [10]");
  expect_error([&] { nll_loss(lp, tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), ones({10}, kFloat64)); },
               "[nll_loss] weight has dtype float64 but input has float32");
  expect_error([&] { nll_loss(tensor({1, 2}), tensor({0, 1})); }, "[nll_loss] input must be floating point");
  expect_error([&] { nll_loss(scalar_tensor(1.0), tensor({0})); }, "[nll_loss] input must have at least 1 dim");
  expect_error([&] { cross_entropy(x, tensor({1}), {}, Reduction::Mean, -100, 1.5); },
               "[cross_entropy] label_smoothing must be in [0, 1], got 1.5");
  expect_error([&] { cross_entropy(x, tensor({1}), {}, Reduction::Mean, -100, -0.1); },
               "[cross_entropy] label_smoothing must be in [0, 1]");
  expect_error([&] { cross_entropy(x, zeros({10, 10}), {}, Reduction::Mean, 3); },
               "[cross_entropy] ignore_index (3) is not supported with class-probability targets");
  expect_error([&] { cross_entropy(x, zeros({10, 10}, kInt64)); }, "[cross_entropy] a target of the input's shape");
  expect_error([&] { cross_entropy(x, zeros({10, 3}, kInt64)); },
               "[cross_entropy] input of shape [10, 10] needs a target of shape [10], got [10, 3]");
  expect_error([&] { cross_entropy(x, zeros({10, 3})); },
               "[cross_entropy] a class-probability target must have the input's shape [10, 10], got [10, 3]");
  expect_error([&] { cross_entropy(x, Tensor()); }, "[cross_entropy] got an undefined tensor");
}

}  // namespace

namespace kiln::test {
namespace {

TEST(MseLoss, ValuesReductionsGradientAndErrors) {
  Tensor x = tensor({1.0, 2.0, 4.0}, TensorOptions(kFloat64)).requires_grad_();
  Tensor y = tensor({0.0, 2.0, 1.0}, TensorOptions(kFloat64));
  expect_close(mse_loss(x, y), {(1.0 + 0.0 + 9.0) / 3}, {});
  expect_close(mse_loss(x, y, Reduction::Sum), {10.0}, {});
  expect_close(mse_loss(x, y, Reduction::None), {1.0, 0.0, 9.0}, {3});
  nn::functional::mse_loss(x, y).backward();
  expect_close(x.grad(), {2.0 / 3, 0.0, 2.0}, {3});  // 2 (x - y) / n
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); },
                                  {x.detach().requires_grad_(), y.detach().requires_grad_()}));
  expect_error([&] { mse_loss(x, ones({2}, kFloat64)); }, "[mse_loss]");
  expect_error([&] { mse_loss(ones({3}, kFloat64), ones({2, 3}, kFloat64)); }, "does not broadcast to the input's");
  expect_error([&] { mse_loss(ones({3}, kInt64), ones({3}, kInt64)); }, "floating-point");
}

// binary_cross_entropy_with_logits against torch 2.15 (float64): logits of 0 (the gradient there
// is sigmoid's 1/2 - y), and of +-50 (no overflow), soft targets, weight and pos_weight.
TEST(BceWithLogits, MatchesTorchAtZeroAndLargeLogits) {
  const TensorOptions f64(kFloat64);
  Tensor x = tensor({0.0, 2.0, -3.0, 50.0, -50.0, 0.5}, f64).reshape({2, 3}).requires_grad_();
  Tensor y = tensor({1.0, 0.0, 1.0, 0.0, 1.0, 0.3}, f64).reshape({2, 3});
  Tensor w = tensor({1.0, 2.0, 0.5}, f64), pw = tensor({3.0, 1.0, 2.0}, f64);
  struct Case {
    Tensor weight, pos_weight;
    double loss;
    std::vector<double> grad;
  };
  const std::vector<Case> cases = {
      {{}, {}, 17.782123254559462, {-0.08333333333333333, 0.14679951299631372, -0.15876235447040554, 0.16666666666666666, -0.16666666666666666, 0.05374322186697577}},
      {w, {}, 26.147222561753797, {-0.08333333333333333, 0.29359902599262744, -0.07938117723520277, 0.16666666666666666, -0.3333333333333333, 0.026871610933487885}},
      {{}, pw, 18.544974055884072, {-0.25, 0.14679951299631372, -0.3175247089408111, 0.16666666666666666, -0.16666666666666666, 0.03486618842706851}},
      {w, pw, 26.644172492509437, {-0.25, 0.29359902599262744, -0.15876235447040554, 0.16666666666666666, -0.3333333333333333, 0.017433094213534256}}};
  for (const Case& c : cases) {
    x.set_grad(Tensor());
    Tensor loss = nn::functional::binary_cross_entropy_with_logits(x, y, {.weight = c.weight, .pos_weight = c.pos_weight});
    EXPECT_NEAR(loss.item<double>(), c.loss, 1e-12);
    loss.backward();
    expect_close(x.grad(), c.grad, {2, 3}, 1e-12, 1e-12);
  }
  expect_close(binary_cross_entropy_with_logits(x, y, {}, {}, Reduction::None),
               {0.6931471805599453, 2.1269280110429727, 3.048587351573742, 50.0, 50.0, 0.8240769841801067}, {2, 3}, 1e-12, 1e-12);
  EXPECT_NEAR(binary_cross_entropy_with_logits(x, y, {}, {}, Reduction::Sum).item<double>(), 106.69273952735676, 1e-11);
  // The module keeps weight and pos_weight as buffers; the target's gradient is checked too.
  nn::BCEWithLogitsLoss criterion(nn::BCEWithLogitsLossOptions{.weight = w, .pos_weight = pw});
  EXPECT_EQ(criterion->buffers().size(), 2u);
  EXPECT_NEAR(criterion(x, y).item<double>(), 26.644172492509437, 1e-12);
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], in[1], w, pw); },
      {tensor({0.3, -1.2, 2.5}, f64).requires_grad_(), tensor({0.2, 1.0, 0.0}, f64).requires_grad_()}));
  expect_error([&] { binary_cross_entropy_with_logits(x, ones({3}, kFloat64)); },
               "[binary_cross_entropy_with_logits] the target's shape [3] must be the input's [2, 3]");
  expect_error([&] { binary_cross_entropy_with_logits(x, y, ones({4}, kFloat64)); },
               "shapes [2, 3] and [4] cannot be broadcast together");
  expect_error([&] { binary_cross_entropy_with_logits(x, y, {}, ones({2, 2, 3}, kFloat64)); },
               "the pos_weight of shape [2, 2, 3] does not broadcast to the input's [2, 3]");
  expect_error([&] { binary_cross_entropy_with_logits(x, y.to(kInt64)); }, "floating-point");
}

}  // namespace
}  // namespace kiln::test
