// ResNet-18 from formula weights against PyTorch (tests/fixtures/resnet, made by
// tests/fixtures/make_resnet_fixture.py in float64): eval forward, and a 3-step SGD run.
//
// PENDING: rename to tests/test_resnet_fixture.cpp once kiln::models::resnet18, kiln::nn and
// kiln::optim are on main (the header names below may need adjusting to what lands).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "fixture_weights.h"
#include "kiln/models.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "test_util.h"

namespace kiln::test {
namespace {

struct Expected {
  Shape shape;
  std::vector<double> values;
};

// expected.txt: "name AxB: v v v ..." per line (float64, repr precision), '#' comments.
std::map<std::string, Expected> read_expected() {
  std::string path = fixture_path("resnet/expected.txt");
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::map<std::string, Expected> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string name, shape;
    ss >> name >> shape;
    shape.pop_back();  // the ':'
    Expected e;
    std::istringstream dims(shape);
    for (std::string d; std::getline(dims, d, 'x');) e.shape.push_back(std::stoll(d));
    for (double v; ss >> v;) e.values.push_back(v);
    EXPECT_EQ(static_cast<int64_t>(e.values.size()), shape_numel(e.shape)) << name;
    out[name] = std::move(e);
  }
  return out;
}

// max |got - want| <= rtol * max |want|: the measure the Python script prints for float32
// PyTorch (per-element relative error is meaningless for logits near zero).
void expect_rel(const Tensor& got, const Expected& want, double rtol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.values.size())) << what;
  std::vector<double> g = values(got);
  double scale = 0, err = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    scale = std::max(scale, std::abs(want.values[i]));
    err = std::max(err, std::abs(g[i] - want.values[i]));
  }
  EXPECT_LE(err, rtol * scale) << what << ": max |diff| " << err << ", max |expected| " << scale;
}

// The first n values of a tensor, flattened.
Tensor first(const Tensor& t, int64_t n) { return t.detach().contiguous().flatten().slice(0, 0, n); }

// resnet18(num_classes = 10) with every state_dict entry set by the fixture formula.
auto formula_resnet18() {
  auto model = kiln::models::resnet18({.num_classes = 10});
  auto like = model->state_dict();
  EXPECT_EQ(like.size(), 122u);  // torchvision's resnet18 state_dict has 122 entries
  model->load_state_dict(formula_state_dict(like));
  return model;
}

TEST(ResNetFixture, EvalForwardMatchesPyTorch) {
  auto want = read_expected();
  auto model = formula_resnet18();
  model->eval();
  Tensor x = formula_input({2, 3, 64, 64});
  NoGradGuard no_grad;
  Tensor y = model->forward(x);
  ASSERT_EQ(y.shape(), (Shape{2, 10}));
  expect_rel(y, want["eval_logits"], 1e-4, "eval logits");
}

TEST(ResNetFixture, SgdTrainingMatchesPyTorch) {
  auto want = read_expected();
  auto model = formula_resnet18();
  model->train();
  Tensor x = formula_input({2, 3, 64, 64});
  Tensor labels = tensor({3, 7}, kInt64);
  kiln::optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4});
  const Expected& losses = want["train_losses"];
  const Expected& step_logits = want["train_step_logits"];  // [3, 2, 10]
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor logits = model->forward(x);
    Tensor loss = kiln::nn::functional::cross_entropy(logits, labels);
    loss.backward();
    opt.step();
    double l = loss.item<double>();
    double l_want = losses.values[static_cast<size_t>(step)];
    EXPECT_NEAR(l, l_want, 1e-3 * std::abs(l_want)) << "loss of step " << step;
    Expected e{{2, 10}, {step_logits.values.begin() + step * 20, step_logits.values.begin() + (step + 1) * 20}};
    expect_rel(logits, e, 1e-3, std::string("train-mode logits of step ") + std::to_string(step));
  }
  // Batch-norm running statistics after three train-mode forwards (unbiased variance, momentum 0.1).
  auto sd = model->state_dict();
  EXPECT_EQ(sd.at("bn1.num_batches_tracked").item<int64_t>(), 3);
  for (const char* k : {"bn1.running_mean", "bn1.running_var", "layer4.1.bn2.running_mean", "layer4.1.bn2.running_var"})
    expect_rel(first(sd.at(k), 8), want[std::string(k) + ".first8"], 1e-3, k);
  // Parameters after three SGD steps with momentum and weight decay.
  expect_rel(first(sd.at("conv1.weight"), 8), want["conv1.weight.first8"], 1e-3, "conv1.weight");
  expect_rel(first(sd.at("fc.weight"), 8), want["fc.weight.first8"], 1e-3, "fc.weight");
  expect_rel(sd.at("fc.bias"), want["fc.bias"], 1e-3, "fc.bias");
  // And the trained model's eval-mode output (uses the updated running statistics).
  model->eval();
  NoGradGuard no_grad;
  expect_rel(model->forward(x), want["trained_eval_logits"], 1e-3, "eval logits after training");
}

// In float64 Kiln should agree with the float64 reference almost exactly: the weights are the
// same float32-rounded values, so only summation order differs.
TEST(ResNetFixture, Float64EvalForwardMatchesPyTorchClosely) {
  auto want = read_expected();
  auto model = kiln::models::resnet18({.num_classes = 10});
  model->to(kFloat64);
  model->load_state_dict(formula_state_dict(model->state_dict()));  // float64 entries, same values
  model->eval();
  Tensor x = formula_input({2, 3, 64, 64}, kFloat64);
  NoGradGuard no_grad;
  Tensor y;
  try {
    y = model->forward(x);
  } catch (const Error& e) {
    GTEST_SKIP() << "no float64 CNN kernels here: " << e.what();
  }
  expect_rel(y, want["eval_logits"], 1e-10, "float64 eval logits");
}

}  // namespace
}  // namespace kiln::test
