// diagonal (a view), diag and trace: torch 2.15's values, gradients (through the view, and of
// diag's matrix), dims in either order, offsets past the matrix, and bad input.
#include <vector>

#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Diagonal, ValuesAsTorchOnEveryDevice) {
  for (Device d : devices()) {
    const Tensor x = arange(24, TensorOptions(kFloat32).device(d)).view({2, 3, 4});
    EXPECT_EQ(values(x.diagonal(0, 1, 2)), (std::vector<double>{0, 5, 10, 12, 17, 22})) << d.str();
    EXPECT_EQ(values(diagonal(x, 1, 1, 2)), (std::vector<double>{1, 6, 11, 13, 18, 23})) << d.str();
    EXPECT_EQ(values(diagonal(x, -1, 1, 2)), (std::vector<double>{4, 9, 16, 21})) << d.str();
    const Tensor swapped = diagonal(x, 0, 2, 0);  // dims in either order: the first's index runs along
    EXPECT_EQ(swapped.shape(), (Shape{3, 2}));
    EXPECT_EQ(values(swapped), (std::vector<double>{0, 13, 4, 17, 8, 21})) << d.str();
    EXPECT_EQ(diagonal(x, 5, 1, 2).shape(), (Shape{2, 0}));
    EXPECT_EQ(x.diagonal().shape(), (Shape{4, 2}));  // dims 0 and 1 by default
    EXPECT_EQ(x.diagonal(0, 1, 2).storage(), x.storage()) << "diagonal is a view";
    EXPECT_EQ(values(diag(tensor({1.0f, 2.0f}, TensorOptions().device(d)), 1)),
              (std::vector<double>{0, 1, 0, 0, 0, 2, 0, 0, 0}));
    EXPECT_EQ(values(diag(arange(9, TensorOptions(kFloat32).device(d)).view({3, 3}), -1)), (std::vector<double>{3, 7}));
    EXPECT_EQ(trace(arange(12, TensorOptions(kFloat32).device(d)).view({3, 4})).item<double>(), 15);
    // A write through the view lands on the diagonal.
    Tensor m = zeros({3, 3}, TensorOptions().device(d));
    m.diagonal().fill_(2);
    EXPECT_EQ(values(m), (std::vector<double>{2, 0, 0, 0, 2, 0, 0, 0, 2}));
  }
}

TEST(Diagonal, Gradients) {
  Tensor x = arange(12, kFloat64).view({3, 4}).requires_grad_();
  (diagonal(x, 1) * tensor({1.0, 2.0, 3.0}, kFloat64)).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3}));
  Tensor v = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  (diag(v, -1) * arange(9, kFloat64).view({3, 3})).sum().backward();
  EXPECT_EQ(values(v.grad()), (std::vector<double>{3, 7}));
  auto fn = [](const std::vector<Tensor>& t) { return diag(t[0]) * trace(t[1]) + diagonal(t[1], -1).sum(); };
  const std::vector<Tensor> in{randn({3}, kFloat64).requires_grad_(), randn({3, 3}, kFloat64).requires_grad_()};
  EXPECT_TRUE(autograd::gradcheck(fn, in));
  EXPECT_TRUE(autograd::gradgradcheck(fn, in));
}

TEST(Diagonal, BadInputIsAnErrorNamingTheOp) {
  expect_error([] { zeros({2, 3, 4}).diagonal(0, 1, 1); }, "[diagonal] diagonal dimensions cannot be identical 1, 1");
  expect_error([] { zeros({3}).diagonal(); }, "[diagonal] expected a tensor of at least 2 dims");
  expect_error([] { zeros({2, 3, 4}).diagonal(0, 0, 3); }, "[diagonal]");
  expect_error([] { trace(zeros({2, 3, 4})); }, "[trace] expected a matrix, got shape [2, 3, 4]");
  expect_error([] { diag(zeros({2, 3, 4})); }, "[diag] expected a 1-D or 2-D tensor, got shape [2, 3, 4]");
}

TEST(Diagonal, HasCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: the tests above run there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  Tensor x = randn({3, 3}).to(Device::cuda(0)).requires_grad_();
  (trace(x) + diag(diag(x)).sum() + x.diagonal(1).sum()).backward();
  EXPECT_EQ(x.grad().device(), Device::cuda(0));
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
}

}  // namespace
}  // namespace kiln::test
