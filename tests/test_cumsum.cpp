// cumsum: torch's result dtypes and accumulation (cases whose results torch 2.15's CPU kernel gave),
// exact running sums along every dim on every device present, 0-d and empty tensors, bad input;
// cumprod: torch's values, dtypes and gradients (zeros included), and its GPU kernel.
// (Gradients, first and second order, are rows of tests/test_gradcheck.cpp; the stand-in GPU's
// kernel is checked in tests/test_sort.cpp.)
#include <string>
#include <vector>

#include "fixture_util.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(Cumsum, DtypesAndAccumulationAsTorch) {
  for (Device d : devices()) {
    const TensorOptions on = TensorOptions().device(d);
    const std::string where = " on " + d.str();
    // float32 adds up in double: 1e8 + 1 rounds to 1e8 only on output, and the 1 survives.
    expect_same_bits(cumsum(tensor({1e8f, 1.0f, -1e8f, 1.0f}, on), 0).cpu(), tensor({1e8f, 1e8f, 1.0f, 2.0f}),
                     "float32" + where);
    // bfloat16 adds up in float: 257 rounds to 256 on output, 259 to 260.
    expect_same_bits(cumsum(tensor({256.0, 1.0, 1.0, 1.0, 1.0}, on.dtype(kBFloat16)), 0).cpu(),
                     tensor({256.0, 256.0, 258.0, 260.0, 260.0}, kBFloat16), "bfloat16" + where);
    // Integers and bool give int64; a dtype given is the result's (uint8 wraps, as torch's).
    Tensor b = cumsum(tensor({true, false, true}, on), 0);
    EXPECT_EQ(b.dtype(), kInt64);
    EXPECT_EQ(b.cpu().to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 2}));
    EXPECT_EQ(cumsum(tensor({7, -9}, on.dtype(kInt32)), 0).dtype(), kInt64);
    Tensor u = tensor({200, 100}, on.dtype(kUInt8)).cumsum(0, kUInt8);
    EXPECT_EQ(u.cpu().to_vector<int64_t>(), (std::vector<int64_t>{200, 44}));
    EXPECT_EQ(cumsum(tensor({1, 2}, on), 0, kFloat64).dtype(), kFloat64);
  }
}

// Every dim of a [5, 7, 9] tensor (and of strided views of it): the running sums in double, each
// rounded to float32, as a loop here computes them.
TEST(Cumsum, RunningSumsAlongEveryDimOnEveryDevice) {
  const Tensor x = randn({5, 7, 9}) * 100;
  for (Device d : devices()) {
    for (const Tensor& v : {x, x.permute({2, 0, 1}), x.slice(2, 1, std::nullopt, 2)}) {
      for (int64_t dim = -3; dim < 3; ++dim) {
        const int64_t k = dim < 0 ? dim + 3 : dim;
        Tensor want = empty(v.shape());
        const Tensor vc = v.contiguous();
        const float* p = vc.data_ptr<float>();
        float* w = want.data_ptr<float>();
        const Shape s = v.shape();
        const int64_t n = s[k], inner = k == 2 ? 1 : (k == 1 ? s[2] : s[1] * s[2]), outer = v.numel() / (n * inner);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            double acc = 0;
            for (int64_t j = 0; j < n; ++j) {
              const int64_t e = (o * n + j) * inner + i;
              acc += p[e];
              w[e] = static_cast<float>(acc);
            }
          }
        expect_same_bits(cumsum(v.to(d), dim).cpu(), want, "cumsum along " + std::to_string(dim) + " on " + d.str());
      }
    }
  }
}

// Rows longer than a GPU's scan tile (2048), integer dtypes: a GPU scans them in parallel, in tiles,
// and must give the running sums exactly (int32 summed in int64 and cast back, wrapping).
TEST(Cumsum, LongIntegerRowsOnEveryDevice) {
  const int64_t rows = 3, n = 2 * 2048 + 777;
  const Tensor x = randint(-1000000, 1000000, {rows, n}, kInt32) * 1000;
  std::vector<int64_t> want(static_cast<size_t>(rows * n)), want32(want.size());
  const std::vector<int64_t> xv = x.to_vector<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t acc = 0;
    for (int64_t j = 0; j < n; ++j) {
      acc += xv[static_cast<size_t>(r * n + j)];
      want[static_cast<size_t>(r * n + j)] = acc;
      want32[static_cast<size_t>(r * n + j)] = static_cast<int32_t>(static_cast<uint32_t>(acc));
    }
  }
  const Tensor mask = x.flatten() > 0;
  const std::vector<int64_t> mv = mask.to_vector<int64_t>();
  std::vector<int64_t> counts(mv.size());
  for (size_t i = 0, c = 0; i < mv.size(); ++i) counts[i] = static_cast<int64_t>(c += static_cast<size_t>(mv[i]));
  for (Device d : devices()) {
    EXPECT_EQ(cumsum(x.to(d), 1).cpu().to_vector<int64_t>(), want) << d.str();
    EXPECT_EQ(cumsum(x.to(d), 1, kInt32).cpu().to_vector<int64_t>(), want32) << d.str();
    EXPECT_EQ(cumsum(mask.to(d), 0).cpu().to_vector<int64_t>(), counts) << d.str();
  }
}

// The gradient is cast to the input's dtype and then summed (torch's order): summed in float32, 1e8
// + 1 + 1 would lose both ones.
TEST(Cumsum, GradientIsSummedInTheInputsDtype) {
  for (Device d : devices()) {
    Tensor x = zeros({3}, TensorOptions(kFloat64).device(d)).requires_grad_();
    Tensor y = cumsum(x, 0, kFloat32);
    EXPECT_EQ(y.dtype(), kFloat32);
    y.backward(tensor({1e8f, 1.0f, 1.0f}, TensorOptions().device(d)));
    EXPECT_EQ(x.grad().dtype(), kFloat64);
    EXPECT_EQ(values(x.grad()), (std::vector<double>{100000002, 2, 1})) << d.str();
  }
}

TEST(Cumsum, ZeroDimAndZeroSize) {
  for (Device d : devices()) {
    Tensor s = scalar_tensor(3.5, TensorOptions(kFloat32).device(d));
    Tensor c = cumsum(s, -1);
    EXPECT_EQ(c.dim(), 0);
    EXPECT_EQ(c.item<double>(), 3.5);
    EXPECT_FALSE(c.storage() == s.storage());
    EXPECT_EQ(cumsum(zeros({3, 0}, TensorOptions(kFloat32).device(d)), 0).shape(), (Shape{3, 0}));
    EXPECT_EQ(cumsum(zeros({0, 4}, TensorOptions(kInt32).device(d)), 1).dtype(), kInt64);
  }
}

TEST(Cumsum, BadInputIsAnErrorNamingTheOp) {
  expect_error([] { cumsum(zeros({2, 3}), 2); }, "[cumsum]");
  expect_error([] { cumsum(Tensor(), 0); }, "[cumsum]");
}

// torch 2.15's cumprod of rows with zeros (none, one, two, and one first), and its gradients of
// sum(y * g) along dim 1 and dim 0.
TEST(Cumprod, ValuesAndGradientsWithZerosAsTorch) {
  for (Device d : devices()) {
    const TensorOptions f64 = TensorOptions(kFloat64).device(d);
    const std::string where = " on " + d.str();
    const Tensor x0 = tensor({{2.0, 0.5, 0.0, 3.0, 0.0, 4.0}, {1.5, -2.0, 0.25, 1.0, 2.0, -1.0}, {0.0, 3.0, 2.0, 0.5, 1.0, 1.0}}, f64);
    const Tensor g = arange(18, f64).view({3, 6}) / 4 + 1;
    Tensor x = x0.detach().requires_grad_();
    const Tensor y = cumprod(x, 1);
    EXPECT_EQ(values(y), (std::vector<double>{2, 1, 0, 0, 0, 0, 1.5, -3, -0.75, -0.75, -1.5, 1.5, 0, 0, 0, 0, 0, 0}))
        << where;
    y.backward(g);
    EXPECT_EQ(values(x.grad()), (std::vector<double>{1.625, 2.5, 6.75, 0, 0, 0, -5.875, 6.28125, -17.25, -2.0625,
                                                     0.1875, -5.625, 88.75, 0, 0, 0, 0, 0}))
        << where;
    x = x0.detach().requires_grad_();
    x.cumprod(0).backward(g);
    EXPECT_EQ(values(x.grad()), (std::vector<double>{4.75, -29.75, 4.5, 7.375, 19, -6.75, 5, 7.75, 0, 16.875, 0, 36, 12,
                                                     -4.25, 0, 14.25, 0, -21}))
        << where;
    EXPECT_EQ(cumprod(tensor({true, true, false, true}, TensorOptions().device(d)), 0).cpu().to_vector<int64_t>(),
              (std::vector<int64_t>{1, 1, 0, 0}));
    const Tensor i = cumprod(tensor({3, 4, 5}, TensorOptions(kInt32).device(d)), 0);
    EXPECT_EQ(i.dtype(), kInt64);
    EXPECT_EQ(i.cpu().to_vector<int64_t>(), (std::vector<int64_t>{3, 12, 60}));
    // float32 multiplies in double, each output rounded once.
    const Tensor f = cumprod(tensor({1.1f, 1.1f, 1.1f}, TensorOptions().device(d)), 0);
    const double a = 1.1f;
    EXPECT_EQ(f.cpu().to_vector<float>()[2], static_cast<float>(a * a * a)) << where;
  }
  auto fn = [](const std::vector<Tensor>& v) { return cumprod(v[0], 1); };
  Tensor z = randn({2, 5}, kFloat64);
  z.index_fill_(1, tensor({2}, kInt64), 0);
  const std::vector<Tensor> in{z.requires_grad_()};
  EXPECT_TRUE(autograd::gradcheck(fn, in));
  EXPECT_TRUE(autograd::gradgradcheck(fn, in));
  expect_error([] { cumprod(zeros({2}), 1); }, "[cumprod]");
}

TEST(Cumprod, HasCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: the tests above run there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  Tensor x = randn({3, 4}).to(Device::cuda(0)).requires_grad_();
  cumprod(x, 1).sum().backward();
  EXPECT_EQ(x.grad().device(), Device::cuda(0));
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
}

}  // namespace
}  // namespace kiln::test
