// Misuse throws kiln::Error whose message starts with the op's name in brackets and shows what
// the op got: shapes, dtypes, dims, indices, devices and option strings.
#include <initializer_list>
#include <string>

#include "test_util.h"

using namespace kiln;

namespace {

// Expects fn to throw kiln::Error whose message starts with "[op] " and contains every needle.
template <class F>
void expect_op_error(const std::string& op, F&& fn, std::initializer_list<std::string> needles = {}) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error from [" << op << "]";
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::string prefix = "[";
    prefix += op;
    prefix += "] ";
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << "message: " << msg;
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "\"" << n << "\" not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected kiln::Error from [" << op << "], got another exception: " << e.what();
  }
}

}  // namespace

TEST(ErrorsShapes, MismatchedElementwiseShapesShowBoth) {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  expect_op_error("add", [&] { add(a, b); }, {"[2, 3]", "[4, 5]", "broadcast"});
  expect_op_error("add", [&] { (void)(a + b); }, {"[2, 3]", "[4, 5]"});
  expect_op_error("sub", [&] { (void)(a - b); }, {"[2, 3]", "[4, 5]"});
  expect_op_error("mul", [&] { a.mul(zeros({3, 2})); }, {"[2, 3]", "[3, 2]"});
  expect_op_error("div", [&] { div(zeros({3}), zeros({4})); }, {"[3]", "[4]"});
  expect_op_error("maximum", [&] { maximum(a, b); });
  expect_op_error("eq", [&] { (void)(a == b); });
  expect_op_error("where", [&] { where(zeros({2, 3}, kBool), a, b); }, {"[4, 5]"});
  // In place: the result must fit the destination.
  expect_op_error("add_", [&] { zeros({3}).add_(zeros({2, 3})); }, {"[2, 3]", "[3]"});
  expect_op_error("copy_", [&] { zeros({2, 3}).copy_(zeros({3, 2})); }, {"[3, 2]", "[2, 3]"});
}

TEST(ErrorsShapes, Matmul) {
  expect_op_error("matmul", [] { matmul(zeros({2, 3}), zeros({4, 5})); },
                  {"shapes [2, 3] and [4, 5] cannot be multiplied"});
  try {
    zeros({2, 3}).matmul(zeros({4, 5}));
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[matmul] shapes [2, 3] and [4, 5] cannot be multiplied", 0), 0u) << e.what();
  }
  // Vectors are reported as given, not as the matrices they are promoted to.
  expect_op_error("matmul", [] { matmul(zeros({3}), zeros({4})); }, {"shapes [3] and [4] cannot be multiplied"});
  expect_op_error("matmul", [] { matmul(zeros({2, 3}), zeros({4})); }, {"shapes [2, 3] and [4] cannot be multiplied"});
  expect_op_error("matmul", [] { matmul(zeros({3}), zeros({4, 5})); }, {"shapes [3] and [4, 5] cannot be multiplied"});
  expect_op_error("matmul", [] { matmul(zeros({2, 2, 3}), zeros({2, 4, 5})); },
                  {"shapes [2, 2, 3] and [2, 4, 5] cannot be multiplied"});
  expect_op_error("matmul", [] { matmul(zeros({3, 2, 3}), zeros({2, 3, 5})); }, {"[3, 2, 3]", "[2, 3, 5]"});
  expect_op_error("matmul", [] { matmul(scalar_tensor(1.0), zeros({2})); }, {"at least 1 dim"});
  expect_op_error("mm", [] { mm(zeros({2, 3, 4}), zeros({4, 5})); }, {"[2, 3, 4]"});
  expect_op_error("mm", [] { mm(zeros({2, 3}), zeros({4, 5})); }, {"[2, 3]", "[4, 5]"});
  expect_op_error("bmm", [] { bmm(zeros({2, 2, 3}), zeros({3, 3, 5})); }, {"[2, 2, 3]", "[3, 3, 5]"});
  expect_op_error("bmm", [] { bmm(zeros({2, 2, 3}), zeros({2, 4, 5})); },
                  {"shapes [2, 2, 3] and [2, 4, 5] cannot be multiplied"});
}

TEST(ErrorsDtypes, Mismatches) {
  expect_op_error("matmul", [] { matmul(zeros({2, 3}), zeros({3, 4}, kFloat64)); }, {"float32", "float64"});
  expect_op_error("matmul", [] { matmul(zeros({2, 3}, kBool), zeros({3, 4}, kBool)); }, {"bool"});
  expect_op_error("add_", [] { tensor({1, 2}).add_(2.5); }, {"float32", "int64"});
  expect_op_error("mul_", [] { tensor({1, 2}).mul_(tensor({0.5, 1.5})); }, {"float32", "int64"});
  expect_op_error("add_", [] { tensor({true, false}).add_(1); }, {"int64", "bool"});
  expect_op_error("div_", [] { tensor({4, 2}).div_(2); }, {"float32", "int64"});  // true division
  expect_op_error("sub", [] { tensor({true}) - tensor({false}); }, {"bool"});
  expect_op_error("requires_grad_", [] { tensor({1, 2}).requires_grad_(); }, {"int64"});
  expect_op_error("requires_grad_", [] { zeros({2}, TensorOptions(kInt32).requires_grad(true)); }, {"int32"});
  expect_op_error("mean", [] { tensor({1, 2}).mean(); }, {"int64"});
  expect_op_error("var", [] { tensor({1, 2}).var({0}); }, {"int64"});
  expect_op_error("uniform_", [] { zeros({2}, kInt64).uniform_(); }, {"int64"});
  expect_op_error("normal_", [] { zeros({2}, kInt32).normal_(); }, {"int32"});
  expect_op_error("index_select", [] { zeros({3}).index_select(0, tensor({0.0})); }, {"float32"});
  expect_op_error("scatter_add", [] { scatter_add(zeros({3}), 0, tensor({0}), zeros({1}, kFloat64)); },
                  {"float64", "float32"});
  expect_op_error("data_ptr", [] { zeros({2}).data_ptr<int32_t>(); }, {"int32", "float32"});
  expect_op_error("neg", [] { neg(tensor({true})); }, {"bool"});
  expect_op_error("neg_", [] { tensor({true}).neg_(); }, {"bool"});
  expect_op_error("exp_", [] { tensor({1, 2}).exp_(); }, {"int64"});
  expect_op_error("sqrt_", [] { tensor({1, 2}).sqrt_(); }, {"int64"});
  expect_op_error("randint", [] { randint(0, 2, {3}, kBool); }, {"bool"});
}

TEST(ErrorsDims, OutOfRange) {
  Tensor x = zeros({2, 3});
  expect_op_error("sum", [&] { sum(x, {5}); }, {"dim 5", "rank 2"});
  expect_op_error("sum", [&] { x.sum({-3}); }, {"dim -3", "rank 2"});
  expect_op_error("sum", [&] { x.sum({0, 0}); }, {"more than once"});
  expect_op_error("mean", [&] { x.mean({2}); }, {"dim 2"});
  expect_op_error("amax", [&] { x.amax({2}); }, {"dim 2"});
  expect_op_error("max", [&] { x.max(2); }, {"dim 2"});
  expect_op_error("argmax", [&] { x.argmax(-3); }, {"dim -3"});
  expect_op_error("softmax", [&] { x.softmax(2); }, {"dim 2"});
  expect_op_error("log_softmax", [&] { x.log_softmax(-3); }, {"dim -3"});
  expect_op_error("transpose", [&] { x.transpose(0, 2); }, {"dim 2", "rank 2"});
  expect_op_error("transpose", [&] { transpose(x, -3, 0); }, {"dim -3"});
  expect_op_error("permute", [&] { x.permute({0}); }, {"rank 2"});
  expect_op_error("permute", [&] { x.permute({0, 0}); }, {"repeats"});
  expect_op_error("permute", [&] { x.permute({0, 2}); }, {"dim 2"});
  expect_op_error("t", [] { zeros({2, 3, 4}).t(); }, {"[2, 3, 4]"});
  expect_op_error("squeeze", [&] { x.squeeze(2); }, {"dim 2"});
  expect_op_error("unsqueeze", [&] { x.unsqueeze(3); }, {"dim 3"});
  expect_op_error("flatten", [&] { x.flatten(2); }, {"dim 2"});
  expect_op_error("flatten", [] { zeros({2, 3, 4}).flatten(2, 1); }, {"start_dim"});
  expect_op_error("slice", [&] { x.slice(2, 0, 1); }, {"dim 2"});
  expect_op_error("slice", [&] { x.slice(0, 0, 1, 0); }, {"step"});
  expect_op_error("slice", [] { scalar_tensor(1.0).slice(0); }, {"0-d"});
  expect_op_error("cat", [&] { cat({x, x}, 2); }, {"dim 2"});
  expect_op_error("stack", [&] { stack({x, x}, 3); }, {"dim 3"});
  expect_op_error("size", [&] { x.size(2); }, {"dim 2"});
  expect_op_error("tril", [] { zeros({3}).tril(); }, {"[3]"});
  expect_op_error("chunk", [&] { x.chunk(0); }, {"0"});
  expect_op_error("split", [&] { split(x, std::vector<int64_t>{1, 1}, 1); }, {"[1, 1]", "3"});
}

TEST(ErrorsIndices, OutOfRange) {
  Tensor x = arange(6.0).view({2, 3});
  expect_op_error("select", [&] { x.select(0, 2); }, {"index 2", "size 2"});
  expect_op_error("select", [&] { x.select(1, -4); }, {"index -4", "size 3"});
  expect_op_error("select", [&] { (void)x[5]; }, {"index 5"});
  expect_op_error("select", [] { scalar_tensor(1.0).select(0, 0); }, {"0-d"});
  expect_op_error("narrow", [&] { x.narrow(1, 1, 5); }, {"length 5", "size 3"});
  expect_op_error("narrow", [&] { x.narrow(1, 4, 0); }, {"start 4"});
  expect_op_error("narrow", [&] { x.narrow(0, 0, -1); }, {"length -1"});
  expect_op_error("index_select", [&] { x.index_select(1, tensor({0, 10})); }, {"index 10", "size 3"});
  expect_op_error("index_select", [&] { x.index_select(0, tensor({-3})); }, {"index -3"});
  expect_op_error("index_select", [&] { x.index_select(0, tensor({-1})); }, {"index -1"});  // as PyTorch
  expect_op_error("gather", [&] { x.gather(1, tensor({{0, -1}, {1, 2}})); }, {"index -1"});
  expect_op_error("index_select", [&] { x.index_select(0, tensor({{0, 1}})); }, {"[1, 2]"});
  expect_op_error("gather", [&] { x.gather(1, tensor({{0, 3}, {1, 2}})); }, {"index 3", "size 3"});
  expect_op_error("gather", [&] { x.gather(1, tensor({0, 1})); }, {"rank"});
  expect_op_error("scatter_add", [&] { x.scatter_add(0, tensor({{0, 2, 0}}), ones({1, 3})); }, {"index 2"});
  expect_op_error("one_hot", [] { one_hot(tensor({0, 3}), 3); }, {"3"});
  // Nothing was written by the failing ops.
  test::expect_close(x, {0, 1, 2, 3, 4, 5}, {2, 3});
}

TEST(ErrorsViews, WrongSizesAndLayouts) {
  Tensor x = zeros({2, 3});
  expect_op_error("view", [&] { x.view({4}); }, {"[4]", "6 elements"});
  expect_op_error("view", [&] { x.view({-1, 4}); }, {"[-1, 4]", "6 elements"});
  expect_op_error("view", [&] { x.view({-1, -1}); }, {"only one dimension can be -1"});
  expect_op_error("view", [&] { x.view({-2, 3}); }, {"-2"});
  expect_op_error("reshape", [&] { x.reshape({5}); }, {"[5]", "6 elements"});
  // A layout that cannot be viewed: the message says why and suggests reshape().
  expect_op_error("view", [&] { x.t().view({6}); }, {"[3, 2]", "[1, 3]", "[6]", "reshape"});
  expect_op_error("expand", [&] { x.expand({3}); }, {"[3]", "[2, 3]"});
  expect_op_error("expand", [&] { x.expand({4, 3}); }, {"[4, 3]", "[2, 3]"});
  expect_op_error("expand", [&] { x.expand({-1, 2, 3}); }, {"-1"});
  expect_op_error("tensor", [] { tensor(std::vector<float>{1, 2, 3}, {2, 2}); }, {"[2, 2]", "4", "3"});
  expect_op_error("empty", [] { empty({2, -1}); }, {"[2, -1]"});
  expect_op_error("empty_strided", [] { empty_strided({2, 2}, {1}); }, {"[2, 2]", "[1]"});
}

TEST(ErrorsAutograd, Misuse) {
  expect_op_error("backward", [] { zeros({2}).sum().backward(); }, {"does not require grad"});
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  expect_op_error("backward", [&] { (w * 2.0).backward(); }, {"[2]"});
  expect_op_error("backward", [&] { (w * 2.0).backward(ones({3})); }, {"[3]", "[2]"});
  expect_op_error("requires_grad_", [&] { (w * 2.0).requires_grad_(false); }, {"non-leaf", "detach()"});
  expect_op_error("retain_grad", [] { zeros({2}).retain_grad(); }, {"does not require grad"});
  expect_op_error("set_grad", [&] { w.set_grad(zeros({3})); }, {"[3]", "[2]"});
  expect_op_error("add_", [&] { w.add_(1.0); }, {"leaf"});
  expect_op_error("autograd::grad", [&] { autograd::grad({zeros({1})}, {w}); }, {"does not require grad"});
  expect_op_error("autograd::grad", [&] { autograd::grad({(w * 2.0).sum()}, {w}, {ones({}), ones({})}); }, {"2"});
  expect_op_error("gradcheck", [&] { autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0] * 2.0; }, {w}); },
                  {"float32"});
}

TEST(ErrorsValues, ItemCatReductionsWhere) {
  expect_op_error("item", [] { zeros({2}).item<float>(); }, {"[2]"});
  expect_op_error("item", [] { zeros({0}).item(); }, {"[0]"});
  expect_op_error("cat", [] { cat({zeros({2, 3}), zeros({2, 4})}, 0); }, {"[2, 4]", "[2, 3]"});
  expect_op_error("cat", [] { cat({zeros({2, 3}), zeros({3})}); }, {"rank"});
  expect_op_error("cat", [] { cat({}); }, {"at least one"});
  expect_op_error("stack", [] { stack({zeros({2}), zeros({3})}); }, {"[3]", "[2]"});

  // Reductions with no identity over an empty range.
  expect_op_error("max", [] { max(zeros({0})); }, {"[0]"});
  expect_op_error("max", [] { zeros({0}).max(); }, {"empty"});
  expect_op_error("min", [] { zeros({2, 0}).min(); }, {"[2, 0]"});
  expect_op_error("amax", [] { amax(zeros({0, 3}), {0}); }, {"[0, 3]"});
  expect_op_error("max", [] { zeros({0, 3}).max(0); }, {"[0, 3]"});
  expect_op_error("argmax", [] { zeros({0}).argmax(); }, {"empty"});
  EXPECT_EQ(zeros({0}).sum().item<double>(), 0.0);  // sum has an identity: fine
  EXPECT_EQ(zeros({0}).prod().item<double>(), 1.0);

  expect_op_error("where", [] { where(zeros({2}), zeros({2}), ones({2})); }, {"bool", "float32"});
  expect_op_error("where", [] { where(tensor({1, 0}), zeros({2}), 1.0); }, {"int64"});
  expect_op_error("masked_fill", [] { masked_fill(zeros({2}), ones({2}), 1.0); }, {"float32"});
  expect_op_error("masked_fill", [] { masked_fill(zeros({2}), ones({3}, kBool), 1.0); }, {"[3]"});
  expect_op_error("clamp", [] { clamp(zeros({2}), std::nullopt, std::nullopt); }, {"min", "max"});
  expect_op_error("norm", [] { norm(zeros({2}), -1.0); }, {"-1"});
  expect_op_error("var", [] { zeros({3}).var({0}, -1); }, {"-1"});

  // Integer bounds must fit an integer tensor (through a double, INT64_MAX became 2^63, and the
  // cast to int64 gave INT64_MIN everywhere); integers to negative integer powers.
  expect_op_error("clamp", [] { clamp(tensor({1, 2}, kUInt8), -1, std::nullopt); }, {"-1", "uint8"});
  expect_op_error("clamp_", [] { tensor({1, 2}, kInt32).clamp_(std::nullopt, int64_t{1} << 40); }, {"int32"});
  Tensor big = tensor(std::vector<int64_t>{INT64_MAX - 1, -5, INT64_MAX});
  EXPECT_EQ(clamp_max(big, INT64_MAX).to_vector<int64_t>(), big.to_vector<int64_t>());
  EXPECT_EQ(clamp_min(big, INT64_MAX - 1).to_vector<int64_t>(),
            (std::vector<int64_t>{INT64_MAX - 1, INT64_MAX - 1, INT64_MAX}));
  expect_op_error("pow", [] { pow(tensor({2, 3}), -1); }, {"negative integer powers", "int64", "-1"});
  EXPECT_EQ(pow(tensor({2, 3}), 2).to_vector<int64_t>(), (std::vector<int64_t>{4, 9}));
  EXPECT_EQ(pow(tensor({2.0f}), -1).item<float>(), 0.5f);
}

// Results with no elements: reductions that keep an empty dim, softmax over an empty tensor
// (both divided by zero in the CPU kernels' plans: SIGFPE).
TEST(ErrorsValues, EmptyResultsAreEmptyTensors) {
  for (Tensor r : {sum(zeros({5, 0}), {0}), mean(zeros({3, 5, 0}), {1}), amax(zeros({5, 0}), {0}),
                   prod(zeros({5, 0}), {0}), norm(zeros({5, 0}), 2.0, {0})})
    EXPECT_EQ(r.numel(), 0);
  EXPECT_EQ(sum(zeros({5, 0}), {0}).shape(), (Shape{0}));
  EXPECT_EQ(std::get<0>(zeros({5, 0}).max(0)).shape(), (Shape{0}));
  Tensor x = zeros({2, 3, 0}).requires_grad_();
  Tensor s = softmax(x, 1);
  EXPECT_EQ(s.shape(), (Shape{2, 3, 0}));
  EXPECT_EQ(log_softmax(x, 1).shape(), (Shape{2, 3, 0}));
  s.sum().backward();
  EXPECT_EQ(x.grad().shape(), (Shape{2, 3, 0}));
}

TEST(ErrorsOptions, DevicesStringsAndFactories) {
  expect_op_error("Device", [] { Device("tpu"); }, {"tpu"});
  expect_op_error("Device", [] { Device("cuda:abc"); }, {"cuda:abc"});
  expect_op_error("Device", [] { Device("cpu:3"); }, {"cpu:3"});
  expect_op_error("gelu", [] { gelu(zeros({2}), "fast"); }, {"\"fast\"", "none", "tanh"});
  expect_op_error("linspace", [] { linspace(0, 1, -1); }, {"-1"});
  expect_op_error("arange", [] { arange(0, 10, -1); }, {"step -1"});
  expect_op_error("arange", [] { arange(0.0, 1.0, 0.0); }, {"nonzero"});
  expect_op_error("arange", [] { arange(0.0, INFINITY); }, {"finite"});
  expect_op_error("arange", [] { arange(0, 1e300, 1); }, {"more than a tensor can hold"});  // not "[empty] negative size"
  expect_op_error("arange", [] { arange(0.0, 1.0, 1e-300); }, {"more than a tensor can hold"});
  expect_op_error("eye", [] { eye(-1); }, {"-1"});
  expect_op_error("randint", [] { randint(5, 5, {2}); }, {"5"});
  expect_op_error("uniform_", [] { zeros({2}).uniform_(1.0, 0.0); }, {"1", "0"});
  expect_op_error("normal_", [] { zeros({2}).normal_(0.0, -1.0); }, {"-1"});
  expect_op_error("set_num_threads", [] { set_num_threads(-2); }, {"-2"});
  if (!cuda::is_available()) expect_op_error("to", [] { zeros({2}).to(Device::cuda(0)); }, {"cuda:0"});
}

TEST(ErrorsUndefined, UndefinedTensorsAreNamedErrors) {
  Tensor u;
  Tensor x = zeros({2});
  expect_op_error("add", [&] { add(u, x); }, {"undefined"});
  expect_op_error("mul", [&] { mul(x, u); }, {"undefined"});
  expect_op_error("exp", [&] { exp(u); }, {"undefined"});
  expect_op_error("sum", [&] { sum(u); }, {"undefined"});
  expect_op_error("view", [&] { u.view({2}); }, {"undefined"});
  expect_op_error("clone", [&] { u.clone(); }, {"undefined"});
  expect_op_error("item", [&] { u.item(); }, {"undefined"});
  expect_op_error("matmul", [&] { matmul(u, x); }, {"undefined"});
  expect_op_error("cat", [&] { cat({x, u}); }, {"undefined"});
  expect_op_error("backward", [&] { u.backward(); }, {"undefined"});
  expect_op_error("requires_grad_", [&] { u.requires_grad_(); }, {"undefined"});
}

TEST(ErrorsSizes, AllocationsTooLargeToAddressAreRefused) {
  test::expect_error([] { (void)empty({int64_t{1} << 62, 4}); }, "too many elements");
  // A zero size must not hide the overflow of the other sizes (their strides would overflow).
  test::expect_error([] { (void)empty({0, int64_t{1} << 62, int64_t{1} << 62}); }, "too many elements");
  test::expect_error([] { (void)empty({int64_t{1} << 61}, kFloat64); }, "more bytes than can be addressed");
  test::expect_error([] { (void)empty_strided({3, 3}, {int64_t{1} << 62, 1}); }, "spans too many elements");
  test::expect_error([] { (void)empty({int64_t{1} << 40}); }, "[cpu] out of memory: asked 4.00 TiB");  // no crash
  EXPECT_THROW((void)empty({int64_t{1} << 40}), OutOfMemoryError);
}
