// Helpers of the CPU tests of the CUDA kernels' host-callable parts (test_cuda_host_*.cpp): value
// generators, tensors from vectors, a NaN-aware match.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/channel_sums_plan.h"
#include "backend/cuda/float_math.h"
#include "backend/cuda/index_math.h"
#include "backend/cuda/launch_shape.h"
#include "backend/cuda/optim_plan.h"
#include "backend/cuda/reduce_folds.h"
#include "backend/cuda/reduce_ops.h"
#include "backend/cuda/reduce_plan.h"
#include "backend/cuda/softmax_plan.h"
#include "backend/cuda/vector_plan.h"
#include "core/tensor_util.h"
#include "test_util.h"

using namespace kiln;
namespace kc = kiln::backend::cuda;
using backend::compute_t;
using backend::ReduceAttrs;

namespace kiln::test::cuda_host {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// got == want (NaN matching NaN) when tol is 0, else |got - want| <= tol (infinities must match).
inline void expect_match(double got, double want, double tol, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got << ", want NaN";
  } else if (tol == 0 || std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_NEAR(got, want, tol) << what;
  }
}

inline std::vector<double> normal_values(int64_t n, uint64_t seed, double mean = 0, double sd = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(mean, sd);
  std::vector<double> v(n);
  for (auto& e : v) e = dist(rng);
  return v;
}
// Multiples of 1/16 of moderate size: float (and half) sums of up to 10^6 of them are exact in
// any order, so a GPU-order fold must equal the CPU's result exactly.
inline std::vector<double> dyadic_values(int64_t n, uint64_t seed, double scale = 16) {
  std::vector<double> v = normal_values(n, seed);
  for (auto& e : v) e = std::round(e * scale) / scale;
  return v;
}
template <class T>
inline std::vector<T> as(const std::vector<double>& v) {
  std::vector<T> r;
  r.reserve(v.size());
  for (double e : v) r.push_back(static_cast<T>(e));
  return r;
}
template <class T>
inline Tensor tensor_of(const std::vector<T>& v) {
  return tensor(v, Shape{static_cast<int64_t>(v.size())});
}
inline double sum_abs(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += std::abs(e);
  return s;
}
inline double item(const Tensor& t) { return t.item<double>(); }

inline ReduceAttrs attrs_with(double scale = 1.0, int64_t correction = 0, double p = 2.0) {
  ReduceAttrs a;
  a.scale = scale;
  a.correction = correction;
  a.p = p;
  return a;
}

}  // namespace kiln::test::cuda_host
