// What the CUDA test files share: the fallback count, the fixture that skips without a GPU,
// cuDNN's switches restored after a test, and a comparison scaled by the reference's magnitude.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::test {

inline uint64_t total_fallbacks() {
  uint64_t n = 0;
  for (const auto& [op, count] : fallback_counts()) n += count;
  return n;
}

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// Restores kiln::cudnn's switches when a test ends.
struct CudnnSettings {
  bool tf32 = cudnn::allow_tf32(), bench = cudnn::benchmark(), deterministic = cudnn::deterministic();
  ~CudnnSettings() {
    cudnn::set_allow_tf32(tf32);
    cudnn::set_benchmark(bench);
    cudnn::set_deterministic(deterministic);
  }
};

// Every number of `got` within tol x the largest magnitude in `want`.
inline void expect_scaled_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (want.empty()) return;
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  size_t bad = 0, worst = 0;
  double worst_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (!(err <= tol * scale)) ++bad;
    if (!(err <= worst_err)) worst_err = err, worst = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size() << " numbers beyond " << tol << " x " << scale
                     << "; worst #" << worst << ": " << got[worst] << " vs " << want[worst];
}

}  // namespace kiln::test
