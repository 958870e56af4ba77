// kiln::models: state_dict names, kinds, dtypes and shapes equal torchvision's; forward shapes; create().
#include <fstream>
#include <sstream>

#include "kiln/models.h"
#include "test_util.h"


namespace kiln::test {
namespace {

namespace nn = kiln::nn;

std::string fixture_path(const std::string& model) {
#ifdef KILN_SOURCE_DIR
  std::string root = KILN_SOURCE_DIR;
#else
  std::string root = std::string(__FILE__).substr(0, std::string(__FILE__).rfind("/tests/"));
#endif
  return root + "/tests/fixtures/models/" + model + ".txt";
}

std::string shape_text(const Shape& s) {
  if (s.empty()) return "-";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out;
}

// Lines "<name> <param|buffer> <dtype> <shape>" in state_dict order, as the fixture script writes them.
std::vector<std::string> describe(const nn::AnyModule& model) {
  std::vector<std::string> out;
  auto params = model->named_parameters();
  auto is_param = [&](const std::string& name) {
    for (auto& [n, t] : params)
      if (n == name) return true;
    return false;
  };
  for (auto& [name, t] : model->ordered_state_dict()) {
    std::ostringstream os;
    os << name << " " << (is_param(name) ? "param" : "buffer") << " " << t.dtype() << " " << shape_text(t.shape());
    out.push_back(os.str());
  }
  return out;
}

nn::AnyModule vgg_without_init(const std::string& name) {
  models::VGGOptions o{.num_classes = 10, .init_weights = false};
  if (name == "vgg11") return models::vgg11(o);
  if (name == "vgg13") return models::vgg13(o);
  if (name == "vgg16") return models::vgg16(o);
  if (name == "vgg19") return models::vgg19(o);
  if (name == "vgg11_bn") return models::vgg11_bn(o);
  if (name == "vgg13_bn") return models::vgg13_bn(o);
  if (name == "vgg16_bn") return models::vgg16_bn(o);
  return models::vgg19_bn(o);
}

class TorchvisionKeys : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchvisionKeys, StateDictEqualsTorchvision) {
  const std::string name = GetParam();
  std::ifstream in(fixture_path(name));
  ASSERT_TRUE(in) << "missing fixture " << fixture_path(name) << " (tests/fixtures/make_model_key_fixtures.py)";
  std::vector<std::string> expected;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) expected.push_back(line);
  ASSERT_GT(expected.size(), 10u);
  // The fixtures use num_classes = 10. VGG's own initialisation is skipped: it changes no
  // shape, and drawing 120M normal numbers again would only make the test slow.
  nn::AnyModule model = name.starts_with("vgg") ? vgg_without_init(name) : models::create(name, 10);
  std::vector<std::string> got = describe(model);
  ASSERT_EQ(got.size(), expected.size()) << name;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expected[i]) << name << " entry " << i;
}

INSTANTIATE_TEST_SUITE_P(Models, TorchvisionKeys,
                         ::testing::Values("resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                                           "resnext50_32x4d", "wide_resnet50_2", "vgg11", "vgg13", "vgg16",
                                           "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn"));

// The whole module tree prints as PyTorch prints torchvision's model.
TEST(Models, PrintsLikeTorchvision) {
  for (const std::string name : {"resnet50", "vgg11_bn"}) {
    std::ifstream in(fixture_path(name + ".repr"));
    ASSERT_TRUE(in) << fixture_path(name + ".repr");
    std::stringstream want;
    want << in.rdbuf();
    auto model = name == "resnet50" ? models::create(name, 10) : vgg_without_init(name);
    std::ostringstream got;
    got << model;
    EXPECT_EQ(got.str(), want.str()) << name;
  }
}

TEST(Models, CreateListsKnownNamesForAnUnknownOne) {
  expect_error([] { models::create("resnet17", 10); },
               "[models::create] unknown model \"resnet17\"; known models: small_cnn, resnet18, resnet34, resnet50, "
               "resnet101, resnet152, resnext50_32x4d, wide_resnet50_2, vgg11, vgg13, vgg16, vgg19, vgg11_bn, vgg13_bn, "
               "vgg16_bn, vgg19_bn");
  expect_error([] { models::resnet50({.groups = 0}); }, "[ResNet] groups must be positive, got 0");
  expect_error([] { models::resnet50({.width_per_group = 0}); }, "[ResNet] width_per_group must be positive, got 0");
  expect_error([] { models::create("small_cnn", 0); }, "[models::create] num_classes must be positive, got 0");
  EXPECT_EQ(models::model_names().size(), 16u);
}

TEST(Models, ResNetInitialisationFollowsTorchvision) {
  manual_seed(0);
  auto net = models::resnet50({.num_classes = 7, .zero_init_residual = true});
  // conv1: kaiming_normal_(fan_out = 64 * 7 * 7, relu) -> std sqrt(2 / 3136).
  Tensor w = net->conv1->weight;
  double n = static_cast<double>(w.numel());
  double sd = std::sqrt(values(w.square().mean()).at(0));
  EXPECT_NEAR(sd, std::sqrt(2.0 / 3136.0), 0.03 * std::sqrt(2.0 / 3136.0)) << n;
  EXPECT_EQ(values(net->bn1->weight), std::vector<double>(64, 1.0));
  auto block = net->layer2->ptr<models::BottleneckImpl>(0);
  EXPECT_EQ(values(block->bn3->weight), std::vector<double>(512, 0.0));  // zero_init_residual
  EXPECT_EQ(values(block->bn2->weight), std::vector<double>(128, 1.0));
  EXPECT_EQ(net->fc->weight.shape(), (Shape{7, 2048}));
  // fc keeps Linear's default U(-1/sqrt(2048), 1/sqrt(2048)).
  EXPECT_LE(values(net->fc->weight.abs().max()).at(0), 1.0 / std::sqrt(2048.0));
}

TEST(Models, VGGInitialisationFollowsTorchvision) {
  manual_seed(0);
  auto net = models::vgg11({.num_classes = 3, .dropout = 0.2});
  auto fc = net->classifier->ptr<nn::LinearImpl>(6);
  EXPECT_EQ(fc->weight.shape(), (Shape{3, 4096}));
  EXPECT_EQ(values(fc->bias), std::vector<double>(3, 0.0));
  double sd = std::sqrt(values(net->classifier->ptr<nn::LinearImpl>(3)->weight.square().mean()).at(0));
  EXPECT_NEAR(sd, 0.01, 0.0005);  // normal_(0, 0.01)
  auto conv = net->features->ptr<nn::Conv2dImpl>(0);
  EXPECT_EQ(values(conv->bias), std::vector<double>(64, 0.0));
  EXPECT_DOUBLE_EQ(net->classifier->ptr<nn::DropoutImpl>(2)->p, 0.2);
  // The adaptive pool takes a 32x32 input's 1x1 feature map to the 7x7 the classifier expects.
  net->eval();
  EXPECT_EQ(net(randn({1, 3, 32, 32})).shape(), (Shape{1, 3}));
}

TEST(Models, ForwardShapes) {
  manual_seed(1);
  Tensor x = randn({2, 3, 64, 64});
  for (const char* name : {"resnet18", "resnet50"}) {
    nn::AnyModule m = models::create(name, 10);
    EXPECT_EQ(m(x).shape(), (Shape{2, 10})) << name;
    m->eval();
    EXPECT_EQ(m(x).shape(), (Shape{2, 10})) << name;
  }
}

TEST(Models, StateDictRoundTripGivesTheSameOutputs) {
  manual_seed(3);
  auto a = models::resnet18({.num_classes = 4});
  manual_seed(4);
  auto b = models::resnet18({.num_classes = 4});
  Tensor x = randn({2, 3, 32, 32});
  a->train();
  a(x);  // moves a's running statistics and num_batches_tracked away from their initial values
  a->eval();
  b->eval();
  b->load_state_dict(a->state_dict());
  EXPECT_EQ(values(b(x)), values(a(x)));
  EXPECT_EQ(b->bn1->num_batches_tracked.item<int64_t>(), 1);
}

TEST(Models, SmallCNNShapesAndTraining) {
  manual_seed(2);
  auto net = models::small_cnn();
  Tensor x = randn({8, 1, 28, 28});
  EXPECT_EQ(net(x).shape(), (Shape{8, 10}));
  expect_error([&] { net(randn({8, 3, 28, 28})); }, "[SmallCNN] expected input [N, 1, 28, 28], got [8, 3, 28, 28]");
  std::vector<std::string> names;
  for (auto& [n, t] : net->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"features.0.weight", "features.1.weight", "features.1.bias",
                                             "features.3.weight", "features.4.weight", "features.4.bias",
                                             "features.7.weight", "features.8.weight", "features.8.bias",
                                             "features.10.weight", "features.11.weight", "features.11.bias",
                                             "classifier.0.weight", "classifier.0.bias", "classifier.3.weight",
                                             "classifier.3.bias"}));
  // A few SGD steps on one fixed batch drive its loss down.
  Tensor y = randint(0, 10, {8});
  double first = 0, last = 0;
  for (int step = 0; step < 15; ++step) {
    net->zero_grad();
    Tensor loss = nn::functional::cross_entropy(net(x), y);
    loss.backward();
    {
      NoGradGuard g;
      for (auto& p : net->parameters()) p.sub_(p.grad() * 0.05);
    }
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.5 * first) << first << " -> " << last;
}

}  // namespace
}  // namespace kiln::test
