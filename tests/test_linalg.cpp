// einsum, outer, addmm and baddbmm (src/ops/linalg.cpp): against the ops they stand for (mm, bmm,
// matmul, transpose, sum) and values worked out here, on every device present; broadcasting, the
// implicit output, diagonals, three operands; bad input. (Gradients are rows of
// tests/test_gradcheck.cpp.)
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fixture_util.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

void expect_near(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  expect_close(got.cpu(), values(want), want.shape(), 1e-5, 1e-5, what);
}

TEST(Einsum, CommonEquationsEqualTheirOps) {
  const Tensor a = randn({3, 4}), b = randn({4, 5}), c = randn({5, 2}), v = randn({4}), w = randn({6});
  const Tensor q = randn({2, 3, 7, 8}), k = randn({2, 3, 6, 8}), sq = randn({4, 4}), bx = randn({2, 3, 4}),
               by = randn({2, 4, 5});
  for (Device d : devices()) {
    const std::string on = " on " + d.str();
    const auto D = [&](const Tensor& t) { return t.to(d); };
    expect_near(einsum("ij,jk->ik", {D(a), D(b)}), mm(a, b), "ij,jk->ik" + on);
    expect_near(einsum("ij,jk", {D(a), D(b)}), mm(a, b), "ij,jk (implicit)" + on);
    expect_near(einsum("bij,bjk->bik", {D(bx), D(by)}), bmm(bx, by), "bij,bjk->bik" + on);
    expect_near(einsum("bhqd,bhkd->bhqk", {D(q), D(k)}), matmul(q, k.transpose(-1, -2)), "attention scores" + on);
    expect_near(einsum("ij,jk,kl->il", {D(a), D(b), D(c)}), mm(mm(a, b), c), "three operands" + on);
    expect_near(einsum("i,j->ij", {D(v), D(w)}), outer(v, w), "outer" + on);
    expect_near(einsum("i,i", {D(v), D(v)}), sum(v * v), "dot" + on);
    expect_near(einsum("ij,k->i", {D(a), D(w)}), sum(a, {1}) * sum(w), "labels of one operand summed" + on);
    // Exact rearrangements: no arithmetic.
    expect_same_bits(einsum("ij->ji", {D(a)}).cpu(), a.t().contiguous(), "ij->ji" + on);
    expect_same_bits(einsum("bA", {D(a)}).cpu(), a.t().contiguous(), "implicit order: A before b" + on);
    expect_same_bits(einsum("...ij->...ji", {D(bx)}).cpu(), bx.transpose(1, 2).contiguous(), "...ij->...ji" + on);
    const std::vector<double> s = values(sq);
    expect_same_bits(einsum("ii->i", {D(sq)}).cpu(), tensor(std::vector<double>{s[0], s[5], s[10], s[15]}, {4}, kFloat32),
                     "diagonal" + on);
    expect_near(einsum("ii", {D(sq)}), scalar_tensor(s[0] + s[5] + s[10] + s[15]), "trace" + on);
    // "..." broadcasts (2, 1 against 3) and is summed when the output leaves it out.
    const Tensor e1 = randn({2, 1, 3, 4}), e2 = randn({5, 4, 2});
    expect_near(einsum("...ij,...jk->...ik", {D(e1), D(e2)}), matmul(e1, e2), "... broadcast" + on);
    expect_near(einsum("...ij->ij", {D(e1)}), sum(e1, {0, 1}), "... summed" + on);
    expect_near(einsum("i...->...", {D(bx)}), sum(bx, {0}), "i...->..." + on);
    // A contracted label of size 1 broadcasts: out[i, k] = a[i, 0] sum_j b[j, k].
    const Tensor a1 = randn({2, 1});
    expect_near(einsum("ij,jk", {D(a1), D(b)}), a1 * sum(b, {0}, true), "size-1 label" + on);
  }
}

TEST(Einsum, BadInputIsAnErrorNamingTheOp) {
  const Tensor a = randn({3, 4}), b = randn({4, 5});
  expect_error([&] { einsum("ij,jk->ik", {a}); }, "[einsum] \"ij,jk->ik\" has 2 operand subscripts for 1 operands");
  expect_error([&] { einsum("i1,jk", {a, b}); }, "'1' is not a letter");
  expect_error([&] { einsum("ijk,jk", {a, b}); }, "operand 0 has 2 dims but its subscripts name 3");
  expect_error([&] { einsum("ij,jk->ii", {a, b}); }, "output subscript i appears more than once");
  expect_error([&] { einsum("ij,jk->iz", {a, b}); }, "output subscript z is in no operand");
  expect_error([&] { einsum("ij,kj", {a, b}); }, "subscript j has sizes 4 and 5");
  expect_error([&] { einsum("ii", {a}); }, "subscript i is repeated in operand 0 with sizes 3 and 4");
  expect_error([&] { einsum("ij,jk", {a, b.to(kFloat64)}); }, "operands have float32 and float64");
  expect_error([&] { einsum("i..j..", {a}); }, "one \"...\" per operand");
  expect_error([] { einsum("i", {}); }, "[einsum] needs at least one operand");
  expect_error([] { einsum("i,i->i", {tensor({true}), tensor({false})}); }, "[einsum] is not defined for bool tensors");
}

TEST(Linalg, OuterAddmmBaddbmm) {
  const Tensor v = randn({3}), w = randn({4}), m1 = randn({3, 5}), m2 = randn({5, 4}), bias = randn({4});
  const Tensor b1 = randn({2, 3, 5}), b2 = randn({2, 5, 4}), self3 = randn({2, 1, 4});
  for (Device d : devices()) {
    const std::string on = " on " + d.str();
    expect_same_bits(outer(v.to(d), w.to(d)).cpu(), v.unsqueeze(1) * w.unsqueeze(0), "outer" + on);
    EXPECT_EQ(outer(tensor({1, 2}), tensor({0.5})).dtype(), kFloat32);
    expect_near(addmm(bias.to(d), m1.to(d), m2.to(d)), bias + mm(m1, m2), "addmm" + on);
    expect_near(bias.to(d).addmm(m1.to(d), m2.to(d), 0.5, 2), bias * 0.5 + mm(m1, m2) * 2, "addmm beta alpha" + on);
    expect_near(baddbmm(self3.to(d), b1.to(d), b2.to(d), 1, -1), self3 - bmm(b1, b2), "baddbmm" + on);
    // beta 0: self is left out, its NaN too.
    const Tensor nan = full({3, 4}, std::numeric_limits<double>::quiet_NaN());
    expect_near(addmm(nan.to(d), m1.to(d), m2.to(d), 0), mm(m1, m2), "addmm beta 0" + on);
  }
  // Integers keep integer beta and alpha.
  const Tensor i1 = tensor({{1, 2}, {3, 4}}), i2 = tensor({{1, 0}, {0, 1}});
  EXPECT_EQ(addmm(tensor({10, 20}), i1, i2, 2, 3).to_vector<int64_t>(), (std::vector<int64_t>{23, 46, 29, 52}));
  expect_error([&] { addmm(tensor({1, 2}), i1, i2, 0.5); }, "[addmm] beta and alpha must be integers for int64 tensors");
  expect_error([&] { addmm(zeros({5, 4}), m1, m2); }, "[addmm] shapes [5, 4] and [3, 4] cannot be broadcast together");
  expect_error([&] { addmm(zeros({2, 3, 4}), m1, m2); },
               "[addmm] self of shape [2, 3, 4] does not broadcast to the product's shape [3, 4]");
  expect_error([&] { addmm(bias, v, m2); }, "[addmm] expects 2-D matrices, got 1-D and 2-D");
  expect_error([&] { baddbmm(bias, m1, m2); }, "[baddbmm] expects 3-D batches");
  expect_error([&] { outer(m1, w); }, "[outer] expects two 1-D tensors, got 2-D and 1-D");
  expect_error([&] { addmm(bias.to(kFloat64), m1, m2); },
               "[addmm] self and the matrices must have one dtype, got float64, float32 and float32");
  // beta 0: self gets a zero gradient (it is in the graph, its values are not).
  Tensor s = full({4}, std::numeric_limits<double>::infinity()).requires_grad_();
  Tensor a1 = m1.clone().requires_grad_();
  addmm(s, a1, m2, 0).sum().backward();
  EXPECT_EQ(values(s.grad()), (std::vector<double>(4, 0.0)));
  EXPECT_TRUE(a1.grad().defined());
  // Under autocast all three go to the autocast dtype, as torch's.
  {
    AutocastGuard autocast(kBFloat16);
    EXPECT_EQ(addmm(bias, m1, m2).dtype(), kBFloat16);
  }
}

// On the stand-in GPU einsum's steps (permute, reshape, bmm, sum, index_select) all have CUDA
// kernels: no fallback, forward and backward.
TEST(Einsum, HasCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: the tests above run there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  Tensor a = randn({2, 3, 3}).to(Device::cuda(0)).requires_grad_(), b = randn({2, 3, 4}).to(Device::cuda(0));
  (einsum("bii,bij->bj", {a, b}).sum() + addmm(randn({4}).to(Device::cuda(0)), a[0], b[0]).sum()).backward();
  EXPECT_EQ(a.grad().device(), Device::cuda(0));
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
}

}  // namespace
}  // namespace kiln::test
