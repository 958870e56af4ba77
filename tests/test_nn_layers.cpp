// kiln::nn layers and containers: forward against the ops, Sequential/ModuleList, a tiny training loop.
#include <cmath>
#include <sstream>

#include "kiln/nn.h"
#include "test_util.h"

namespace kiln::test {
namespace {

namespace nn = kiln::nn;
namespace F = kiln::nn::functional;

TEST(NnLayers, LinearForwardIsXWtPlusB) {
  nn::Linear lin(3, 2);
  Tensor x = tensor({{1.0, 2.0, 3.0}, {-1.0, 0.5, 0.0}});
  std::vector<double> w = values(lin->weight), b = values(lin->bias), xs = values(x), expected;
  for (int i = 0; i < 2; ++i)
    for (int o = 0; o < 2; ++o) {
      double acc = b[o];
      for (int k = 0; k < 3; ++k) acc += xs[i * 3 + k] * w[o * 3 + k];
      expected.push_back(acc);
    }
  expect_close(lin(x), expected, {2, 2});
  expect_close(F::linear(x, lin->weight, lin->bias), expected, {2, 2});
  nn::Linear no_bias(3, 2, false);
  EXPECT_FALSE(no_bias->bias.defined());
  EXPECT_EQ(no_bias->parameters().size(), 1u);
}

TEST(NnLayers, FlattenReluDropoutIdentity) {
  Tensor x = arange(24, kFloat32).reshape({2, 3, 2, 2}) - 10.0;
  EXPECT_EQ(nn::Flatten()(x).shape(), (Shape{2, 12}));
  EXPECT_EQ(nn::Flatten(0, 1)(x).shape(), (Shape{6, 2, 2}));
  EXPECT_EQ(F::flatten(x).shape(), (Shape{24}));
  EXPECT_EQ(values(nn::ReLU()(x)), values(relu(x)));
  EXPECT_EQ(values(F::relu(x)), values(relu(x)));
  EXPECT_EQ(values(nn::Identity()(x)), values(x));

  nn::Dropout drop(0.5);
  drop->eval();
  EXPECT_EQ(values(drop(x)), values(x));  // eval: identity
  drop->train();
  manual_seed(5);
  Tensor y = drop(ones({1000}));
  std::vector<double> v = values(y);
  int zeros = 0;
  for (double e : v) {
    EXPECT_TRUE(e == 0.0 || std::abs(e - 2.0) < 1e-6) << e;
    zeros += e == 0.0;
  }
  EXPECT_GT(zeros, 400);
  EXPECT_LT(zeros, 600);
  EXPECT_EQ(values(F::dropout(x, {.p = 0.3, .training = false})), values(x));
  expect_error([] { nn::Dropout(1.5); }, "[Dropout] probability must be in [0, 1], got 1.5");
}

// Sequential runs a BatchNorm2d and the ReLU after it as one batch_norm_relu (its autograd node
// says so), with the values and gradients of the two modules one after the other.
TEST(NnLayers, SequentialFusesBatchNormAndRelu) {
  manual_seed(3);
  nn::Conv2d conv(3, 4, 3, {.padding = 1});
  nn::BatchNorm2d bn(4);
  nn::Sequential seq(conv, bn, nn::ReLU(true));
  Tensor x = randn({2, 3, 6, 6});
  Tensor y = seq(x);
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "NativeBatchNormReluBackward");
  y.sum().backward();
  const Tensor fused_grad = conv->weight.grad().clone(), fused_mean = bn->running_mean.clone();
  conv->weight.set_grad(Tensor());
  bn->reset_running_stats();
  Tensor y2 = relu(bn(conv(x)));
  EXPECT_EQ(y2.grad_fn()->name(), "ReluBackward");
  y2.sum().backward();
  EXPECT_EQ(values(y), values(y2));
  EXPECT_EQ(values(conv->weight.grad()), values(fused_grad));
  EXPECT_EQ(values(bn->running_mean), values(fused_mean));
  // A ReLU not after a batch norm, or a batch norm last, runs as it is.
  nn::Sequential tail(nn::ReLU(), bn);
  EXPECT_EQ(tail(randn({2, 4, 6, 6})).grad_fn()->name(), "NativeBatchNormBackward");
}

TEST(NnLayers, SequentialRunsInOrder) {
  manual_seed(2);
  nn::Linear a(4, 8), b(8, 3);
  nn::Sequential seq(a, nn::ReLU(), b);
  Tensor x = randn({5, 4});
  EXPECT_EQ(values(seq(x)), values(b(relu(a(x)))));
  EXPECT_EQ(seq->size(), 3u);
  EXPECT_EQ(seq->ptr<nn::LinearImpl>(0).get(), a.get());
  EXPECT_EQ(seq[2].get<nn::LinearImpl>(), b.get());
  EXPECT_EQ(seq[1].get<nn::LinearImpl>(), nullptr);
  expect_error([&] { seq->ptr<nn::LinearImpl>(1); }, "[Sequential::ptr] module 1 is a ReLU");
  expect_error([&] { seq[7]; }, "[Sequential] index 7 is out of range for 3 modules");
  seq->push_back(nn::Linear(3, 1));
  seq->push_back("named", nn::Flatten(0));
  EXPECT_EQ(seq(x).shape(), (Shape{5}));
  std::vector<std::string> names;
  for (auto& [n, p] : seq->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"}));
  nn::AnyModule any = seq;
  EXPECT_EQ(values(any(x)), values(seq(x)));
  EXPECT_EQ(any->parameters().size(), 6u);
}

TEST(NnLayers, ModuleListRegistersItsModules) {
  nn::ModuleList list(nn::Linear(2, 2), nn::ReLU());
  list->push_back(nn::Linear(2, 3, false));
  EXPECT_EQ(list->size(), 3u);
  std::vector<std::string> names;
  for (auto& [n, p] : list->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight"}));
  EXPECT_EQ(list->ptr<nn::LinearImpl>(2)->out_features, 3);
  expect_error([&] { list->ptr<nn::LinearImpl>(1); }, "[ModuleList::ptr] module 1 is a ReLU");
}

TEST(NnLayers, LossFunctionalsForwardTheirOptions) {
  Tensor logits = tensor({{2.0, 0.5, -1.0}, {0.1, 0.2, 3.0}});
  Tensor labels = tensor({0, 2}, kInt64);
  Tensor logp = log_softmax(logits, 1);
  std::vector<double> lp = values(logp);
  double expected = -(lp[0] + lp[5]) / 2;
  expect_close(F::cross_entropy(logits, labels), {expected}, {});
  expect_close(F::nll_loss(F::log_softmax(logits, 1), labels), {expected}, {});
  expect_close(F::softmax(logits, 1), values(softmax(logits, 1)), {2, 3});
}

// Two-layer net on a separable problem: the loss must fall well below its start.
TEST(NnLayers, TinyTrainingLoopDecreasesTheLoss) {
  manual_seed(7);
  nn::Sequential net(nn::Linear(2, 16), nn::ReLU(), nn::Linear(16, 2));
  Tensor x = randn({64, 2});
  // Label: which side of the line x0 + x1 = 0 a point lies on.
  Tensor y = gt(x.sum({1}), 0.0).to(kInt64);
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    net->zero_grad();
    Tensor loss = F::cross_entropy(net(x), y);
    loss.backward();
    {
      NoGradGuard g;
      for (auto& p : net->parameters()) p.sub_(p.grad() * 0.5);
    }
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace kiln::test

namespace kiln::test {
namespace {

namespace nn = kiln::nn;
namespace F = kiln::nn::functional;

TEST(NnLayers, ConvAndPoolModulesForwardToTheOps) {
  manual_seed(4);
  Tensor x = randn({2, 4, 9, 9});
  nn::Conv2d conv(4, 6, {3, 2}, {.stride = {2, 1}, .padding = 1, .dilation = 1, .groups = 2});
  Tensor expected = F::conv2d(x, conv->weight, {.bias = conv->bias, .stride = {2, 1}, .padding = 1, .groups = 2});
  EXPECT_EQ(conv(x).shape(), (Shape{2, 6, 5, 10}));
  EXPECT_EQ(values(conv(x)), values(expected));
  EXPECT_EQ(values(nn::MaxPool2d(3, {.stride = 2, .padding = 1})(x)),
            values(F::max_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1})));
  EXPECT_EQ(nn::MaxPool2d(2)(x).shape(), (Shape{2, 4, 4, 4}));  // stride defaults to the kernel size
  EXPECT_EQ(nn::MaxPool2d(2, {.ceil_mode = true})(x).shape(), (Shape{2, 4, 5, 5}));
  EXPECT_EQ(values(nn::AvgPool2d(2)(x)), values(F::avg_pool2d(x, {.kernel_size = 2})));
  EXPECT_EQ(values(nn::AdaptiveAvgPool2d({1, 3})(x)), values(F::adaptive_avg_pool2d(x, {1, 3})));
  // A 1x1 adaptive pool is the mean over H and W.
  expect_close(nn::AdaptiveAvgPool2d(1)(x), values(x.mean({2, 3}, true)), {2, 4, 1, 1});
  // Gradients reach the conv's parameters.
  conv(x).sum().backward();
  EXPECT_EQ(conv->weight.grad().shape(), conv->weight.shape());
  EXPECT_EQ(conv->bias.grad().shape(), (Shape{6}));
}

TEST(NnLayers, BatchNormTrainingUpdatesRunningStatisticsAndEvalUsesThem) {
  manual_seed(6);
  nn::BatchNorm2d bn(3);
  Tensor x = randn({4, 3, 5, 5}) * 2.0 + 1.0;
  Tensor y = bn(x);
  // Training: each channel normalised with the batch's statistics.
  Tensor m = y.mean({0, 2, 3});
  for (double v : values(m)) EXPECT_NEAR(v, 0.0, 1e-5);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  // running = 0.9 * running + 0.1 * batch (unbiased variance).
  expect_close(bn->running_mean, values(x.mean({0, 2, 3}) * 0.1), {3}, 1e-5, 1e-6);
  expect_close(bn->running_var, values(x.var({0, 2, 3}) * 0.1 + 0.9), {3}, 1e-4, 1e-6);
  // Eval: (x - running_mean) / sqrt(running_var + eps), statistics left alone.
  bn->eval();
  std::vector<double> rm = values(bn->running_mean), rv = values(bn->running_var);
  Tensor z = bn(x);
  expect_close(z, values((x - bn->running_mean.reshape({1, 3, 1, 1})) / (bn->running_var.reshape({1, 3, 1, 1}) + 1e-5).sqrt()),
               {4, 3, 5, 5}, 1e-4, 1e-5);
  EXPECT_EQ(values(bn->running_mean), rm);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  EXPECT_EQ(values(F::batch_norm(x, bn->running_mean, bn->running_var, {.weight = bn->weight, .bias = bn->bias})),
            values(z));
}

// PyTorch reads track_running_stats when called: turned off after construction, training
// normalises with the batch's statistics and leaves the buffers alone; eval still uses them.
TEST(NnLayers, BatchNormTrackRunningStatsTurnedOffLaterUpdatesNothing) {
  manual_seed(8);
  nn::BatchNorm2d bn(3);
  bn->options.track_running_stats = false;
  Tensor x = randn({4, 3, 5, 5}) * 2.0 + 1.0;
  Tensor y = bn(x);
  for (double v : values(y.mean({0, 2, 3}))) EXPECT_NEAR(v, 0.0, 1e-5);
  EXPECT_EQ(values(bn->running_mean), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values(bn->running_var), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
  nn::Sequential fused(bn, nn::ReLU());  // the batch_norm_relu path too
  fused(x);
  EXPECT_EQ(values(bn->running_mean), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
  bn->eval();  // the buffers exist, so eval normalises with them: x / sqrt(1 + eps)
  expect_close(bn(x), values(x / std::sqrt(1.0 + 1e-5)), {4, 3, 5, 5}, 1e-5, 1e-6);
}

TEST(NnLayers, BatchNormWithoutMomentumAveragesAllBatches) {
  nn::BatchNorm2d bn(2, {.momentum = std::nullopt});
  Tensor a = full({2, 2, 2, 2}, 1.0), b = full({2, 2, 2, 2}, 3.0);
  bn(a);
  bn(b);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
  expect_close(bn->running_mean, {2.0, 2.0}, {2});  // the average of 1 and 3
  nn::BatchNorm2d stateless(2, {.track_running_stats = false});
  stateless->eval();
  // No running statistics: eval mode normalises with the batch's own.
  Tensor y = stateless(randn({3, 2, 4, 4}));
  for (double v : values(y.mean({0, 2, 3}))) EXPECT_NEAR(v, 0.0, 1e-5);
  expect_error([&] { bn(zeros({2, 2})); }, "[BatchNorm2d] expected 4D input, got 2D input");
  // bias = false: a learned scale only (PyTorch's keyword-only bias).
  nn::BatchNorm2d scale_only(2, {.bias = false});
  EXPECT_EQ(scale_only->parameters().size(), 1u);
  EXPECT_FALSE(scale_only->bias.defined());
  {
    NoGradGuard g;
    scale_only->weight.fill_(2.0);
  }
  Tensor z = scale_only(randn({3, 2, 4, 4}));
  for (double v : values(z.var({0, 2, 3}, 0))) EXPECT_NEAR(v, 4.0, 1e-3);
}

// BatchNorm1d: [N, C] and [N, C, L], statistics over all but dim 1, as torch's.
TEST(NnLayers, BatchNorm1dNormalisesTwoAndThreeDimInputs) {
  nn::BatchNorm1d bn(2);
  Tensor x = tensor({{1.0f, 10.0f}, {3.0f, 30.0f}});
  Tensor y = bn(x);
  expect_close(y, {-1, -1, 1, 1}, {2, 2}, 1e-4, 1e-4);  // (x - mean) / sqrt(biased var + eps)
  expect_close(bn->running_mean, {0.2, 2.0}, {2}, 1e-6, 1e-6);  // 0.1 * the batch mean
  expect_close(bn->running_var, {1.1, 20.9}, {2}, 1e-5, 1e-5);  // 0.9 + 0.1 * the unbiased var
  Tensor seq = arange(12, kFloat32).reshape({2, 2, 3});  // [N, C, L]: channel 0 has 0..2 and 6..8
  Tensor z = bn(seq);
  EXPECT_NEAR(values(z.select(1, 0).mean())[0], 0.0, 1e-5);
  EXPECT_NEAR(values(z.select(1, 1).var({}, 0))[0], 1.0, 1e-3);
  bn->eval();
  expect_close(bn(x), values(batch_norm(x, bn->running_mean, bn->running_var, bn->weight, bn->bias, false, 0.1, 1e-5)),
               {2, 2});
  expect_error([&] { bn(zeros({2, 2, 2, 2})); }, "[BatchNorm1d] expected 2D or 3D input, got 4D input");
  std::ostringstream os;
  os << *bn;
  EXPECT_EQ(os.str(), "BatchNorm1d(2, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)");
  std::vector<std::string> names;
  for (auto& [n, t] : bn->state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"bias", "num_batches_tracked", "running_mean", "running_var", "weight"}));
}

TEST(NnLayers, ActivationModulesForwardTheirFunctions) {
  Tensor x = tensor({{-2.0f, 0.5f, 3.0f}, {1.0f, -1.0f, 0.0f}});
  EXPECT_EQ(values(nn::Tanh()(x)), values(tanh(x)));
  EXPECT_EQ(values(nn::Sigmoid()(x)), values(sigmoid(x)));
  EXPECT_EQ(values(nn::SiLU()(x)), values(silu(x)));
  EXPECT_EQ(values(nn::Softmax(1)(x)), values(softmax(x, 1)));
  EXPECT_EQ(values(nn::LogSoftmax(0)(x)), values(log_softmax(x, 0)));
  nn::Sequential net(nn::Linear(3, 4), nn::Tanh(), nn::Linear(4, 2), nn::LogSoftmax(1));
  std::ostringstream os;
  os << *net;
  EXPECT_NE(os.str().find("(1): Tanh()"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("(3): LogSoftmax(dim=1)"), std::string::npos) << os.str();
  EXPECT_EQ(net(x).shape(), (Shape{2, 2}));
}

// The loss modules call their functions with the options kept; a class weight is a buffer that
// to() moves with the module, as torch's.
TEST(NnLayers, LossModulesKeepTheirOptions) {
  Tensor logits = tensor({{2.0f, 0.5f, -1.0f}, {0.1f, 0.2f, 3.0f}, {1.0f, 1.0f, 1.0f}});
  Tensor labels = tensor({0, 2, -100}, kInt64);
  Tensor w = tensor({1.0f, 2.0f, 0.5f});
  nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions{.weight = w, .label_smoothing = 0.1});
  EXPECT_EQ(values(ce(logits, labels)),
            values(F::cross_entropy(logits, labels, {.weight = w, .label_smoothing = 0.1})));
  EXPECT_EQ(values(nn::CrossEntropyLoss()(logits, labels)), values(F::cross_entropy(logits, labels)));
  ASSERT_EQ(ce->named_buffers().size(), 1u);
  EXPECT_EQ(ce->named_buffers()[0].first, "weight");
  ce->to(kFloat64);
  EXPECT_EQ(ce->options.weight.dtype(), kFloat64);
  EXPECT_EQ(ce(logits.to(kFloat64), labels).dtype(), kFloat64);
  nn::NLLLoss nll(nn::NLLLossOptions{.reduction = Reduction::Sum});
  EXPECT_EQ(values(nll(log_softmax(logits, 1), labels)),
            values(F::nll_loss(log_softmax(logits, 1), labels, {.reduction = Reduction::Sum})));
  EXPECT_EQ(values(nn::MSELoss()(logits, zeros({3, 3}))), values(F::mse_loss(logits, zeros({3, 3}))));
  expect_error([] { nn::CrossEntropyLoss(nn::CrossEntropyLossOptions{.label_smoothing = 1.5}); },
               "[CrossEntropyLoss] label_smoothing must be in [0, 1], got 1.5");
}

// ModuleDict: children under their keys, in the order inserted; a key inserted again replaces its
// module in place, as torch's dict[key] = m.
TEST(NnLayers, ModuleDictRegistersItsModulesUnderTheirKeys) {
  nn::ModuleDict heads(std::vector<nn::ModuleDictImpl::Item>{{"cls", nn::Linear(4, 2).ptr()}, {"reg", nn::Linear(4, 1).ptr()}});
  heads->insert("act", nn::ReLU());
  EXPECT_EQ(heads->keys(), (std::vector<std::string>{"cls", "reg", "act"}));
  EXPECT_TRUE(heads->contains("reg"));
  EXPECT_FALSE(heads->contains("nope"));
  EXPECT_EQ(heads->ptr<nn::LinearImpl>("reg")->out_features, 1);
  heads->insert("cls", nn::Linear(4, 5));
  EXPECT_EQ(heads->keys(), (std::vector<std::string>{"cls", "reg", "act"}));
  EXPECT_EQ(heads->ptr<nn::LinearImpl>("cls")->out_features, 5);
  std::vector<std::string> names;
  for (auto& [n, p] : heads->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"cls.weight", "cls.bias", "reg.weight", "reg.bias"}));
  EXPECT_EQ(heads->ptr<nn::LinearImpl>("cls")->weight.size(0), 5);
  expect_error([&] { (void)heads["nope"]; }, "[ModuleDict] no module \"nope\"");
  expect_error([&] { heads->ptr<nn::LinearImpl>("act"); }, "[ModuleDict::ptr] module \"act\" is a ReLU");
}

}  // namespace
}  // namespace kiln::test
