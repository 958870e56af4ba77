// A first end-to-end check: an op chain forward and backward against hand-computed values.
#include "test_util.h"

using namespace kiln;

TEST(Smoke, OpChainAndBackward) {
  Tensor x = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
  Tensor y = (x * x + x * 2.0).sum();
  test::expect_close(y, {1 + 2 + 4 + 4 + 9 + 6}, {});
  y.backward();
  test::expect_close(x.grad(), {4, 6, 8}, {3});
}

TEST(Smoke, MatmulMatchesLoop) {
  manual_seed(0);
  Tensor a = randn({5, 7}), b = randn({7, 3});
  Tensor c = matmul(a, b);
  auto av = test::values(a), bv = test::values(b);
  std::vector<double> ref(15, 0.0);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 7; ++k) ref[i * 3 + j] += av[i * 7 + k] * bv[k * 3 + j];
  test::expect_close(c, ref, {5, 3}, 1e-5, 1e-5);
}
