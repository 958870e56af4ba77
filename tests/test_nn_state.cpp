// kiln::nn state_dict / load_state_dict: round trips and the one-message errors.
#include "kiln/nn.h"
#include "test_util.h"

namespace kiln::test {
namespace {

namespace nn = kiln::nn;

// conv [8, 3, 3, 3] + bias, bn(8), fc Linear(8, 10): the names of a tiny torchvision-like net.
struct TinyImpl : nn::Module {
  TinyImpl() {
    conv = register_module("conv", nn::Conv2d(3, 8, 3));
    bn = register_module("bn", nn::BatchNorm2d(8));
    fc = register_module("fc", nn::Linear(8, 10));
  }
  nn::Conv2d conv{nullptr};
  nn::BatchNorm2d bn{nullptr};
  nn::Linear fc{nullptr};
};
KILN_MODULE(Tiny);

TEST(NnState, StateDictHoldsParametersAndBuffers) {
  Tiny net;
  auto sd = net->state_dict();
  std::vector<std::string> keys;
  for (auto& [k, v] : sd) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"bn.bias", "bn.num_batches_tracked", "bn.running_mean",
                                            "bn.running_var", "bn.weight", "conv.bias", "conv.weight",
                                            "fc.bias", "fc.weight"}));
  EXPECT_EQ(sd["conv.weight"].shape(), (Shape{8, 3, 3, 3}));
  EXPECT_FALSE(sd["conv.weight"].requires_grad());  // detached, as PyTorch's state_dict
  // Detached views share storage with the parameters (PyTorch's state_dict does too).
  EXPECT_EQ(sd["fc.weight"].data_ptr(), net->fc->weight.data_ptr());
}

TEST(NnState, LoadStateDictCopiesValuesIntoTheSameTensors) {
  manual_seed(1);
  Tiny a;
  manual_seed(2);
  Tiny b;
  ASSERT_NE(values(a->fc->weight), values(b->fc->weight));
  {
    NoGradGuard g;
    a->bn->running_mean.fill_(0.5);
    a->bn->num_batches_tracked.fill_(7);
  }
  Tensor b_weight = b->fc->weight;
  auto params = b->parameters();
  auto result = b->load_state_dict(a->state_dict());
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  for (auto& [k, v] : a->state_dict()) EXPECT_EQ(values(b->state_dict()[k]), values(v)) << k;
  EXPECT_EQ(b->bn->num_batches_tracked.item<int64_t>(), 7);
  EXPECT_TRUE(b_weight.is_same(b->fc->weight));
  EXPECT_TRUE(b->fc->weight.requires_grad());
  EXPECT_TRUE(b->fc->weight.is_leaf());
  // Copies, not aliases: changing a afterwards leaves b alone.
  {
    NoGradGuard g;
    a->fc->weight.fill_(3.0);
  }
  EXPECT_NE(values(b->fc->weight), values(a->fc->weight));
}

TEST(NnState, LoadReportsEveryProblemInOneError) {
  Tiny net;
  auto sd = net->state_dict();
  sd.erase("conv.bias");
  sd.erase("bn.running_var");
  sd["extra.weight"] = zeros({1});
  sd["fc.weight"] = zeros({1000, 8});
  sd["fc.bias"] = zeros({10}, kInt64);
  std::vector<double> before = values(net->conv->weight);
  expect_error([&] { net->load_state_dict(sd); },
               "[load_state_dict] missing keys: conv.bias, bn.running_var; unexpected keys: extra.weight; "
               "shape mismatch for fc.weight: expected [10, 8], got [1000, 8]; "
               "dtype mismatch for fc.bias: expected float32, got int64");
  // Nothing was copied by the failed load.
  EXPECT_EQ(values(net->conv->weight), before);
}

// Another float type is cast on the way in, as PyTorch's copy_ does (a float64 or bfloat16
// checkpoint into a float32 model); the model keeps its dtype.
TEST(NnState, LoadCastsOtherFloatTypes) {
  Tiny net, other;
  other->to(kFloat64);
  {
    NoGradGuard g;
    other->fc->weight.fill_(0.1);
  }
  net->load_state_dict(other->state_dict());
  EXPECT_EQ(net->fc->weight.dtype(), kFloat32);
  EXPECT_EQ(values(net->fc->weight), std::vector<double>(80, static_cast<double>(0.1f)));
  auto sd = net->state_dict();
  sd["fc.bias"] = full({10}, 0.5, kBFloat16);
  net->load_state_dict(sd);
  EXPECT_EQ(values(net->fc->bias), std::vector<double>(10, 0.5));
}

TEST(NnState, NonStrictLoadReturnsMissingAndUnexpectedKeys) {
  Tiny net;
  auto sd = net->state_dict();
  sd.erase("fc.bias");
  sd["head.weight"] = zeros({2});
  Tensor new_weight = full({10, 8}, 0.25);
  sd["fc.weight"] = new_weight;
  auto r = net->load_state_dict(sd, false);
  EXPECT_EQ(r.missing_keys, std::vector<std::string>{"fc.bias"});
  EXPECT_EQ(r.unexpected_keys, std::vector<std::string>{"head.weight"});
  EXPECT_EQ(values(net->fc->weight), std::vector<double>(80, 0.25));
  // Shapes are checked even when not strict (as in PyTorch).
  sd["fc.weight"] = zeros({3});
  expect_error([&] { net->load_state_dict(sd, false); }, "shape mismatch for fc.weight: expected [10, 8], got [3]");
}

TEST(NnState, NumBatchesTrackedIsAcceptedAndMayBeAbsent) {
  Tiny net;
  auto sd = net->state_dict();
  sd["bn.num_batches_tracked"] = scalar_tensor(int64_t{42}, kInt64);
  net->load_state_dict(sd);
  EXPECT_EQ(net->bn->num_batches_tracked.item<int64_t>(), 42);
  sd.erase("bn.num_batches_tracked");  // checkpoints from before PyTorch 0.4.1 lack it
  EXPECT_NO_THROW(net->load_state_dict(sd));
  sd["bn.num_batches_tracked"] = zeros({}, kFloat32);
  expect_error([&] { net->load_state_dict(sd); },
               "dtype mismatch for bn.num_batches_tracked: expected int64, got float32");
  sd["bn.num_batches_tracked"] = Tensor();
  expect_error([&] { net->load_state_dict(sd); }, "undefined tensor for bn.num_batches_tracked");
}

TEST(NnState, LoadAcceptsNonContiguousValues) {
  Tiny net;
  auto sd = net->state_dict();
  Tensor t = arange(80, kFloat32).reshape({8, 10}).t();  // [10, 8], transposed strides
  sd["fc.weight"] = t;
  net->load_state_dict(sd);
  EXPECT_EQ(values(net->fc->weight), values(t));
}

}  // namespace
}  // namespace kiln::test
