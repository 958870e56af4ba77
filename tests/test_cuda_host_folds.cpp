// The reduction folds of the CUDA kernels (backend/cuda/reduce_folds.h), run on the CPU: folded in
// the merge orders the kernels use (sequential, pairwise tree, warp butterfly, random trees) they
// give the CPU ops' results; take_index agrees with / and % around 2^31 and 2^32.
#include "cuda_host_test_util.h"

using namespace kiln::test::cuda_host;

namespace {

// ---- folding a vector in the kernels' merge orders

enum class Order { kSequential, kPairwise, kWarp, kRandomTree };
const char* order_name(Order o) {
  switch (o) {
    case Order::kSequential: return "sequential";
    case Order::kPairwise: return "pairwise tree";
    case Order::kWarp: return "32 interleaved lanes, then a butterfly";
    case Order::kRandomTree: return "random parts, merged in random order";
  }
  return "?";
}
constexpr Order kOrders[] = {Order::kSequential, Order::kPairwise, Order::kWarp, Order::kRandomTree};

// The fold of x: one state stepped through every element (sequential); a state per element merged
// pairwise level by level (a shared-memory tree); 32 lanes taking every 32nd element, then
// warp_reduce's xor butterfly, lane 0's result (reduce_finish); or elements dealt to random
// parts, the parts merged two at a time in random order and argument order (any tree of lanes,
// warps and blocks).
template <class F, class T>
typename F::State fold_in_order(const F& f, const std::vector<T>& x, Order order, std::mt19937_64& rng) {
  using S = typename F::State;
  using C = compute_t<T>;
  const int64_t n = static_cast<int64_t>(x.size());
  switch (order) {
    case Order::kSequential: {
      S s = f.init();
      for (int64_t i = 0; i < n; ++i) s = f.step(s, static_cast<C>(x[i]), i);
      return s;
    }
    case Order::kPairwise: {
      std::vector<S> level;
      for (int64_t i = 0; i < n; ++i) level.push_back(f.step(f.init(), static_cast<C>(x[i]), i));
      if (level.empty()) return f.init();
      while (level.size() > 1) {
        std::vector<S> next;
        for (size_t j = 0; j < level.size(); j += 2)
          next.push_back(j + 1 < level.size() ? f.merge(level[j], level[j + 1]) : level[j]);
        level = next;
      }
      return level[0];
    }
    case Order::kWarp: {
      std::vector<S> lanes(kc::kWarp, f.init());
      for (int64_t i = 0; i < n; ++i) lanes[i % kc::kWarp] = f.step(lanes[i % kc::kWarp], static_cast<C>(x[i]), i);
      for (int off = kc::kWarp / 2; off > 0; off /= 2) {
        const std::vector<S> old = lanes;
        for (int l = 0; l < kc::kWarp; ++l) lanes[l] = f.merge(old[l], old[l ^ off]);
      }
      return lanes[0];
    }
    case Order::kRandomTree: {
      const size_t parts = 1 + rng() % 9;
      std::vector<S> pool(parts, f.init());
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = rng() % parts;
        pool[k] = f.step(pool[k], static_cast<C>(x[i]), i);
      }
      while (pool.size() > 1) {
        const size_t a = rng() % pool.size();
        size_t b = rng() % (pool.size() - 1);
        if (b >= a) ++b;
        const S m = (rng() & 1) ? f.merge(pool[a], pool[b]) : f.merge(pool[b], pool[a]);
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(std::max(a, b)));
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(std::min(a, b)));
        pool.push_back(m);
      }
      return pool[0];
    }
  }
  return f.init();
}

// What store() writes for one output: the value (as double) and the index (max/min).
template <class Out, class F>
std::pair<double, int64_t> store_one(const F& f, const typename F::State& s, int64_t count) {
  Out v{};
  int64_t index = -7;
  const kc::ReduceOut out{&v, &index};
  f.store(s, count, out, 0);
  return {static_cast<double>(static_cast<compute_t<Out>>(v)), index};
}

// Folds x in every order (several random trees) and expects `want` (and `want_index` unless
// it is -2) within tol.
template <class Out, class F, class T>
void check_orders(const F& f, const std::vector<T>& x, double want, double tol, const std::string& what,
                  int64_t want_index = -2) {
  std::mt19937_64 rng(x.size() * 7919 + 1);
  for (Order order : kOrders) {
    const int trials = order == Order::kRandomTree ? 4 : 1;
    for (int k = 0; k < trials; ++k) {
      const auto [got, index] = store_one<Out>(f, fold_in_order(f, x, order, rng), static_cast<int64_t>(x.size()));
      const std::string where = what + " (n " + std::to_string(x.size()) + ", " + order_name(order) + ")";
      expect_match(got, want, tol, where);
      if (want_index != -2) {
        EXPECT_EQ(index, want_index) << where;
      }
    }
  }
}

const std::vector<int64_t> kSizes = {1, 2, 3, 31, 32, 33, 100, 1000, 4097};

}  // namespace


// ---- take_index

TEST(CudaHostMath, TakeIndexAgreesWithDivisionAroundTwoTo31And32) {
  const int64_t t31 = int64_t{1} << 31, t32 = int64_t{1} << 32;
  std::vector<int64_t> values = {0,       1,       2,       7,       t31 - 1, t31,       t31 + 1,
                                 t32 - 2, t32 - 1, t32,     t32 + 1, t32 + 7, t31 * 3,   (int64_t{1} << 40) + 3,
                                 INT64_MAX, INT64_MAX - 1};
  std::vector<int64_t> sizes = {1, 2, 3, 7, 1000, t31 - 1, t31, t31 + 1, t32 - 1, t32, t32 + 1, (int64_t{1} << 40) + 1,
                                INT64_MAX};
  std::mt19937_64 rng(5);
  for (int k = 0; k < 2000; ++k) {
    values.push_back(static_cast<int64_t>(rng() >> (1 + rng() % 40)));
    sizes.push_back(std::max<int64_t>(1, static_cast<int64_t>(rng() >> (1 + rng() % 62))));
  }
  for (int64_t i : values)
    for (int64_t size : sizes) {
      int64_t q = i;
      const int64_t r = kc::take_index(q, size);
      ASSERT_EQ(r, i % size) << i << " % " << size;
      ASSERT_EQ(q, i / size) << i << " / " << size;
    }
}

// ---- the folds in every merge order against the CPU ops

TEST(CudaHostMath, SumAndMeanFoldsMatchTheCpuInEveryOrder) {
  for (int64_t n : kSizes) {
    const std::vector<double> v = normal_values(n, 100 + n);
    const Tensor xf = tensor_of(as<float>(v)), xd = tensor_of(v);
    check_orders<float>(kc::SumFold<float, false>::make({}), as<float>(v), item(sum(xf)), 1e-5 * sum_abs(v), "sum float");
    check_orders<double>(kc::SumFold<double, false>::make({}), v, item(sum(xd)), 1e-13 * sum_abs(v), "sum double");
    const auto mean_f = kc::SumFold<float, false>::make(attrs_with(1.0 / static_cast<double>(n)));
    check_orders<float>(mean_f, as<float>(v), item(mean(xf)), 1e-5 * sum_abs(v) / n, "mean float");

    // Dyadic data: every order is exact, so the results are the CPU's bit for bit.
    const std::vector<double> d = dyadic_values(n, 200 + n);
    check_orders<float>(kc::SumFold<float, false>::make({}), as<float>(d), item(sum(tensor_of(as<float>(d)))), 0,
                        "sum float, exact");
    check_orders<float>(mean_f, as<float>(d), item(mean(tensor_of(as<float>(d)))), 0, "mean float, exact");
    check_orders<Half>(kc::SumFold<Half, false>::make({}), as<Half>(d), item(sum(tensor_of(as<Half>(d)))), 0,
                       "sum float16, exact");
    check_orders<BFloat16>(kc::SumFold<BFloat16, false>::make({}), as<BFloat16>(d),
                           item(sum(tensor_of(as<BFloat16>(d)))), 0, "sum bfloat16, exact");
    // Integers: the op sums int32 as int64, exactly.
    std::vector<int32_t> ints;
    for (double e : d) ints.push_back(static_cast<int32_t>(e * 1000));
    check_orders<int64_t>(kc::SumFold<int64_t, false>::make({}), as<int64_t>(std::vector<double>(ints.begin(), ints.end())),
                          item(sum(tensor_of(ints))), 0, "sum int32 as int64");
  }
  // Empty: 0, and a mean of nothing is NaN (the op's scale is NaN then).
  check_orders<float>(kc::SumFold<float, false>::make({}), std::vector<float>{}, item(sum(zeros({0}))), 0, "sum empty");
  check_orders<float>(kc::SumFold<float, false>::make(attrs_with(kNaN)), std::vector<float>{}, item(mean(zeros({0}))), 0,
                      "mean empty");
  EXPECT_TRUE(std::isnan(item(mean(zeros({0})))));
}

// One thread of a sum over the batch folds thousands of elements on its own ([2^20, 1024]: 4096
// each). A float32 running sum of 2^16 values of 0.1 drifts by 1e-3 (4096 values: 3.9e-5); the
// fold's must not (the CPU's sum of the same is 6e-7 off).
TEST(CudaHostMath, SumFoldOfOneThreadsLongShareStaysAccurate) {
  const int64_t n = int64_t{1} << 16;
  auto sequential = [&]<class T>(T value) {
    const auto f = kc::SumFold<T, false>::make({});
    typename kc::SumFold<T, false>::State s = f.init();
    for (int64_t i = 0; i < n; ++i) s = f.step(s, static_cast<compute_t<T>>(value), i);
    return store_one<T>(f, s, n).first;
  };
  const double want = static_cast<double>(0.1f) * static_cast<double>(n);
  EXPECT_NEAR(sequential(0.1f), want, 1e-7 * want);
  // float16's 0.1 is 0.0999755859375: 2^16 of them are 6552 exactly, which float16 holds.
  EXPECT_EQ(sequential(Half(0.1f)), 6552.0);
}

TEST(CudaHostMath, ProdFoldMatchesTheCpuInEveryOrder) {
  for (int64_t n : kSizes) {
    std::vector<double> v = normal_values(n, 300 + n);
    for (auto& e : v) e = 1 + 0.01 * e;
    const double want = item(prod(tensor_of(as<float>(v))));
    check_orders<float>(kc::SumFold<float, true>::make({}), as<float>(v), want, 5e-5 * std::abs(want), "prod float");
    // Signs and a few factors of 2 and 3: exact in every order, in float and in int64.
    std::mt19937_64 rng(400 + n);
    std::vector<double> e(n);
    for (int64_t i = 0; i < n; ++i) e[i] = (rng() & 1) ? 1.0 : -1.0;
    for (int k = 0; k < 20 && k < n; ++k) e[rng() % n] *= (rng() & 1) ? 2.0 : 3.0;
    check_orders<float>(kc::SumFold<float, true>::make({}), as<float>(e), item(prod(tensor_of(as<float>(e)))), 0,
                        "prod float, exact");
    check_orders<int64_t>(kc::SumFold<int64_t, true>::make({}), as<int64_t>(e), item(prod(tensor_of(as<int32_t>(e)))), 0,
                          "prod int32 as int64");
  }
  check_orders<float>(kc::SumFold<float, true>::make({}), std::vector<float>{}, item(prod(zeros({0}))), 0, "prod empty");
}

TEST(CudaHostMath, AmaxAminFoldsMatchTheCpuWithNanAndInfinity) {
  for (int64_t n : kSizes) {
    std::vector<double> v = normal_values(n, 500 + n);
    auto check = [&](const std::vector<double>& x, const std::string& what) {
      const Tensor xf = tensor_of(as<float>(x));
      check_orders<float>(kc::ExtremeFold<float, true>::make({}), as<float>(x), item(amax(xf)), 0, "amax " + what);
      check_orders<float>(kc::ExtremeFold<float, false>::make({}), as<float>(x), item(amin(xf)), 0, "amin " + what);
      const Tensor xh = tensor_of(as<Half>(x));
      check_orders<Half>(kc::ExtremeFold<Half, true>::make({}), as<Half>(x), item(amax(xh)), 0, "amax float16 " + what);
    };
    check(v, "float");
    v[n / 2] = kInf;
    v[0] = -kInf;
    check(v, "with infinities");
    v[n / 3] = kNaN;
    check(v, "with a NaN");
    if (n > 2) {
      v[n - 1] = kNaN;
      check(v, "with two NaNs");
    }
    std::vector<int32_t> ints;
    for (double e : normal_values(n, 600 + n)) ints.push_back(static_cast<int32_t>(e * 1e9));
    check_orders<int32_t>(kc::ExtremeFold<int32_t, true>::make({}), ints, item(amax(tensor_of(ints))), 0, "amax int32");
    check_orders<int32_t>(kc::ExtremeFold<int32_t, false>::make({}), ints, item(amin(tensor_of(ints))), 0, "amin int32");
  }
}

TEST(CudaHostMath, AllAnyFoldsMatchTheCpu) {
  for (int64_t n : kSizes) {
    std::vector<double> v = normal_values(n, 700 + n);
    auto check = [&](const std::vector<double>& x, const std::string& what) {
      const Tensor xf = tensor_of(as<float>(x));
      check_orders<bool>(kc::LogicalFold<float, true>::make({}), as<float>(x), item(all(xf)), 0, "all " + what);
      check_orders<bool>(kc::LogicalFold<float, false>::make({}), as<float>(x), item(any(xf)), 0, "any " + what);
      std::vector<bool> b;
      for (double e : x) b.push_back(e != 0);
      const Tensor xb = tensor(b, Shape{n});
      check_orders<bool>(kc::LogicalFold<bool, true>::make({}), as<bool>(x), item(all(xb)), 0, "all bool " + what);
      check_orders<bool>(kc::LogicalFold<bool, false>::make({}), as<bool>(x), item(any(xb)), 0, "any bool " + what);
    };
    check(v, "nonzero");
    v[n - 1] = kNaN;  // NaN counts as true
    check(v, "with NaN");
    v[n / 2] = -0.0;
    check(v, "with -0");
    check(std::vector<double>(n, 0.0), "zeros");
    std::vector<double> z(n, 0.0);
    z[n / 3] = kNaN;
    check(z, "zeros and a NaN");
  }
  check_orders<bool>(kc::LogicalFold<float, true>::make({}), std::vector<float>{}, item(all(zeros({0}))), 0, "all empty");
  check_orders<bool>(kc::LogicalFold<float, false>::make({}), std::vector<float>{}, item(any(zeros({0}))), 0, "any empty");
}

// Welford steps and Chan merges of partial states give the CPU's two-pass variance.
TEST(CudaHostMath, VarFoldMatchesTheCpuForEachCorrection) {
  for (int64_t n : kSizes) {
    const std::vector<double> v = normal_values(n, 800 + n, 10, 3);  // far from 0: cancellation matters
    const Tensor xf = tensor_of(as<float>(v)), xd = tensor_of(v);
    for (int64_t corr : {0, 1, 2}) {
      const auto ff = kc::VarFold<float>::make(attrs_with(1, corr));
      const auto fd = kc::VarFold<double>::make(attrs_with(1, corr));
      const double wf = item(var(xf, {}, corr)), wd = item(var(xd, {}, corr));
      const std::string what = "var, correction " + std::to_string(corr);
      check_orders<float>(ff, as<float>(v), wf, 1e-6 * std::abs(wf), what + ", float");
      check_orders<double>(fd, v, wd, 1e-11 * std::abs(wd), what + ", double");
      if (n <= corr) {
        EXPECT_TRUE(std::isnan(wf) || std::isinf(wf)) << what << " n " << n;
      }
    }
  }
  // Constant data: exactly 0 in every order.
  check_orders<float>(kc::VarFold<float>::make(attrs_with(1, 1)), std::vector<float>(100, 2.5f),
                      item(var(full({100}, 2.5), {}, 1)), 0, "var of a constant");
  check_orders<float>(kc::VarFold<float>::make(attrs_with(1, 1)), std::vector<float>{}, item(var(zeros({0}), {}, 1)), 0,
                      "var empty");
}

TEST(CudaHostMath, LogSumExpFoldMatchesTheCpu) {
  for (int64_t n : kSizes) {
    const std::vector<double> v = normal_values(n, 900 + n, 0, 5);
    const double wf = item(logsumexp(tensor_of(as<float>(v)), {0})), wd = item(logsumexp(tensor_of(v), {0}));
    check_orders<float>(kc::LogSumExpFold<float>::make({}), as<float>(v), wf, 1e-6 * std::abs(wf) + 1e-6,
                        "logsumexp float");
    check_orders<double>(kc::LogSumExpFold<double>::make({}), v, wd, 1e-13 * std::abs(wd) + 1e-13, "logsumexp double");
  }
}

// -inf adds nothing, +inf wins, NaN wins over everything, no elements (or only -inf) give -inf,
// as the CPU's two passes give.
TEST(CudaHostMath, LogSumExpFoldSpecialValuesMatchTheCpu) {
  const std::vector<std::vector<double>> cases = {
      {},
      {-kInf},
      {-kInf, -kInf, -kInf},
      {1.0, -kInf, 2.0},
      {-kInf, 3.0},
      {kInf},
      {1.0, kInf, 2.0},
      {-kInf, kInf, -kInf},
      {kInf, kInf},
      {kNaN},
      {1.0, kNaN, 2.0},
      {kInf, kNaN},
      {kNaN, kInf},
      {-kInf, kNaN},
      {kNaN, -kInf, kInf, 1.0},
      {-1000.0, -1000.0},  // underflow of exp without the running max
      {1000.0, 999.0},     // overflow without it
  };
  for (const auto& base : cases) {
    // Pad with more of the same pattern so that the orders differ.
    std::vector<double> x;
    for (int r = 0; r < 40; ++r) x.insert(x.end(), base.begin(), base.end());
    for (const auto& v : {base, x}) {
      const double want = item(logsumexp(tensor_of(as<float>(v)), {0}));
      std::string what = "logsumexp of {";
      for (double e : base) what += std::to_string(e) + " ";
      what += "}";
      const double tol = std::isfinite(want) ? 1e-6 * std::abs(want) + 1e-6 : 0;
      check_orders<float>(kc::LogSumExpFold<float>::make({}), as<float>(v), want, tol, what);
    }
  }
}

TEST(CudaHostMath, NormFoldMatchesTheCpuForEachP) {
  for (int64_t n : kSizes) {
    std::vector<double> v = normal_values(n, 1000 + n);
    v[n / 2] = 0.0;
    if (n > 3) v[1] = -0.0;
    for (double p : {0.0, 1.0, 2.0, 3.0, 0.5, kInf}) {
      const auto f = kc::NormFold<float>::make(attrs_with(1, 0, p));
      const double want = item(norm(tensor_of(as<float>(v)), p));
      const bool exact = p == 0 || std::isinf(p);
      check_orders<float>(f, as<float>(v), want, exact ? 0 : 1e-6 * want, "norm p " + std::to_string(p));
      const auto fd = kc::NormFold<double>::make(attrs_with(1, 0, p));
      const double wd = item(norm(tensor_of(v), p));
      check_orders<double>(fd, v, wd, exact ? 0 : 1e-13 * wd, "norm double p " + std::to_string(p));
    }
    std::vector<double> w = v;
    w[n - 1] = kNaN;
    for (double p : {0.0, 1.0, 2.0, kInf}) {
      const auto f = kc::NormFold<float>::make(attrs_with(1, 0, p));
      check_orders<float>(f, as<float>(w), item(norm(tensor_of(as<float>(w)), p)), 0,
                          "norm with NaN p " + std::to_string(p));
    }
  }
  for (double p : {0.0, 1.0, 2.0, 3.0})
    check_orders<float>(kc::NormFold<float>::make(attrs_with(1, 0, p)), std::vector<float>{},
                        item(norm(zeros({0}), p)), 0, "norm empty");
}

// Ties go to the smallest index; the first NaN beats every number.
TEST(CudaHostMath, MaxMinWithIndexFoldsMatchTheCpuWithTiesAndNan) {
  for (int64_t n : kSizes) {
    std::vector<double> v = normal_values(n, 1100 + n);
    for (auto& e : v) e = std::round(e * 1.5);  // a handful of values: many ties
    auto check = [&](const std::vector<double>& x, const std::string& what) {
      const Tensor xf = tensor_of(as<float>(x));
      const auto [mv, mi] = max(xf, 0);
      const auto [nv, ni] = min(xf, 0);
      check_orders<float>(kc::ExtremeIndexFold<float, true>::make({}), as<float>(x), item(mv), 0, "max " + what,
                          mi.item<int64_t>());
      check_orders<float>(kc::ExtremeIndexFold<float, false>::make({}), as<float>(x), item(nv), 0, "min " + what,
                          ni.item<int64_t>());
      const Tensor xi = tensor_of(as<int32_t>(x));
      if (!std::any_of(x.begin(), x.end(), [](double e) { return std::isnan(e); })) {
        const auto [iv, ii] = max(xi, 0);
        check_orders<int32_t>(kc::ExtremeIndexFold<int32_t, true>::make({}), as<int32_t>(x), item(iv), 0,
                              "max int32 " + what, ii.item<int64_t>());
        const auto [jv, ji] = min(xi, 0);
        check_orders<int32_t>(kc::ExtremeIndexFold<int32_t, false>::make({}), as<int32_t>(x), item(jv), 0,
                              "min int32 " + what, ji.item<int64_t>());
      }
      const Tensor xh = tensor_of(as<Half>(x));
      const auto [hv, hi] = max(xh, 0);
      check_orders<Half>(kc::ExtremeIndexFold<Half, true>::make({}), as<Half>(x), item(hv), 0, "max float16 " + what,
                         hi.item<int64_t>());
    };
    check(v, "ties");
    if (n > 4) {
      v[n - 2] = kNaN;
      v[n / 2] = kNaN;
      check(v, "ties and NaNs");
    }
  }
  // All equal: index 0 in every order.
  check_orders<float>(kc::ExtremeIndexFold<float, true>::make({}), std::vector<float>(1000, 1.0f), 1.0, 0, "max of equals",
                      0);
}
