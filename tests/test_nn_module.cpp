// kiln::nn::Module: registration and PyTorch's dotted names, holders, train/eval, to(), zero_grad.
#include <sstream>

#include "kiln/nn.h"
#include "kiln/optim.h"
#include "test_util.h"

namespace kiln::test {
namespace {

namespace nn = kiln::nn;

// The PyTorch net these tests mirror:
//   class Block(nn.Module): fc = Linear(4, 4); bn = BatchNorm2d(4)
//   class Net(nn.Module): stem = Linear(3, 4); layers = Sequential(Block(), Block()); head = Linear(4, 2, bias=False)
struct BlockImpl : nn::Module {
  BlockImpl() {
    fc = register_module("fc", nn::Linear(4, 4));
    bn = register_module("bn", nn::BatchNorm2d(4));
  }
  Tensor forward(const Tensor& x) { return relu(fc(x)); }
  nn::Linear fc{nullptr};
  nn::BatchNorm2d bn{nullptr};
};
KILN_MODULE(Block);

struct NetImpl : nn::Module {
  NetImpl() {
    stem = register_module("stem", nn::Linear(3, 4));
    layers = register_module("layers", nn::Sequential(Block(), Block()));
    head = register_module("head", nn::Linear(4, 2, false));
  }
  Tensor forward(const Tensor& x) { return head(layers(relu(stem(x)))); }
  nn::Linear stem{nullptr}, head{nullptr};
  nn::Sequential layers{nullptr};
};
KILN_MODULE(Net);

std::vector<std::string> names_of(const nn::NamedTensors& list) {
  std::vector<std::string> out;
  for (const auto& [n, t] : list) out.push_back(n);
  return out;
}

TEST(NnModule, NamedParametersUseTorchDottedNamesInOrder) {
  Net net;
  std::vector<std::string> params = {"stem.weight",        "stem.bias",          "layers.0.fc.weight",
                                     "layers.0.fc.bias",   "layers.0.bn.weight", "layers.0.bn.bias",
                                     "layers.1.fc.weight", "layers.1.fc.bias",   "layers.1.bn.weight",
                                     "layers.1.bn.bias",   "head.weight"};
  EXPECT_EQ(names_of(net->named_parameters()), params);
  EXPECT_EQ(net->parameters().size(), params.size());
  EXPECT_EQ(names_of(net->named_parameters(false)), std::vector<std::string>{});
  EXPECT_EQ(names_of(net->named_buffers()),
            (std::vector<std::string>{"layers.0.bn.running_mean", "layers.0.bn.running_var",
                                      "layers.0.bn.num_batches_tracked", "layers.1.bn.running_mean",
                                      "layers.1.bn.running_var", "layers.1.bn.num_batches_tracked"}));
  // state_dict order: each module's parameters, then its buffers, then its children.
  auto ordered = names_of(net->ordered_state_dict());
  std::vector<std::string> expected = {"stem.weight",
                                       "stem.bias",
                                       "layers.0.fc.weight",
                                       "layers.0.fc.bias",
                                       "layers.0.bn.weight",
                                       "layers.0.bn.bias",
                                       "layers.0.bn.running_mean",
                                       "layers.0.bn.running_var",
                                       "layers.0.bn.num_batches_tracked",
                                       "layers.1.fc.weight",
                                       "layers.1.fc.bias",
                                       "layers.1.bn.weight",
                                       "layers.1.bn.bias",
                                       "layers.1.bn.running_mean",
                                       "layers.1.bn.running_var",
                                       "layers.1.bn.num_batches_tracked",
                                       "head.weight"};
  EXPECT_EQ(ordered, expected);
  EXPECT_EQ(net->state_dict().size(), expected.size());
  // The member handles are the registered tensors.
  EXPECT_TRUE(net->named_parameters()[0].second.is_same(net->stem->weight));
  auto block1 = net->layers->ptr<BlockImpl>(1);
  EXPECT_TRUE(net->named_buffers()[3].second.is_same(block1->bn->running_mean));
  EXPECT_EQ(block1->bn->num_batches_tracked.dtype(), kInt64);
  EXPECT_EQ(block1->bn->num_batches_tracked.dim(), 0);
}

TEST(NnModule, ChildrenAndModules) {
  Net net;
  std::vector<std::string> children;
  for (auto& [n, m] : net->named_children()) children.push_back(n + ":" + m->name());
  EXPECT_EQ(children, (std::vector<std::string>{"stem:Linear", "layers:Sequential", "head:Linear"}));
  std::vector<std::string> all;
  for (auto& [n, m] : net->named_modules()) all.push_back(n);
  EXPECT_EQ(all, (std::vector<std::string>{"", "stem", "layers", "layers.0", "layers.0.fc", "layers.0.bn",
                                           "layers.1", "layers.1.fc", "layers.1.bn", "head"}));
  EXPECT_EQ(net->modules().size(), 10u);
  EXPECT_EQ(net->modules(false).size(), 9u);
  EXPECT_EQ(net->children().size(), 3u);
}

// PyTorch's remove_duplicate: seq = Sequential(lin, lin) lists lin's parameters once, under
// "0."; state_dict() keeps every name.
TEST(NnModule, SharedModulesAndParametersAreListedOnce) {
  nn::Linear lin(3, 3);
  nn::Sequential seq(lin, lin);
  EXPECT_EQ(names_of(seq->named_parameters()), (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_EQ(seq->parameters().size(), 2u);
  std::vector<std::string> mods;
  for (auto& [n, m] : seq->named_modules()) mods.push_back(n);
  EXPECT_EQ(mods, (std::vector<std::string>{"", "0"}));
  EXPECT_EQ(seq->modules(false).size(), 1u);
  EXPECT_EQ(seq->state_dict().size(), 4u);
  EXPECT_NO_THROW({ optim::SGD opt(seq->parameters(), optim::SGDOptions{.lr = 0.1}); });

  // A parameter registered again under another name: the first name wins.
  nn::Module m;
  m.register_parameter("tied", lin->weight);
  m.register_module("lin", lin);
  EXPECT_EQ(names_of(m.named_parameters()), (std::vector<std::string>{"tied", "lin.bias"}));
  EXPECT_EQ(m.state_dict().size(), 3u);

  nn::BatchNorm2d bn(2);
  nn::Module holder;
  holder.register_module("a", bn);
  holder.register_module("b", bn);
  EXPECT_EQ(names_of(holder.named_buffers()),
            (std::vector<std::string>{"a.running_mean", "a.running_var", "a.num_batches_tracked"}));
  EXPECT_EQ(holder.buffers().size(), 3u);

  // Gradient clipping counts a shared gradient once: the norm of [3, 4] is 5, not 5 * sqrt(2).
  nn::Linear tiny(2, 1, false);
  nn::Sequential twice(tiny, tiny);
  tiny->weight.set_grad(tensor({{3.0, 4.0}}));
  EXPECT_NEAR(nn::utils::clip_grad_norm_(twice->parameters(), 1.0), 5.0, 1e-6);
  expect_close(tiny->weight.grad(), {0.6, 0.8}, Shape{1, 2}, 1e-5, 1e-6, "clipped once");
}

TEST(NnModule, ApplyVisitsEveryModule) {
  Net net;
  int linears = 0;
  net->apply([&](nn::Module& m) {
    if (auto* lin = dynamic_cast<nn::LinearImpl*>(&m)) {
      nn::init::zeros_(lin->weight);
      ++linears;
    }
  });
  EXPECT_EQ(linears, 4);
  EXPECT_EQ(values(net->layers->ptr<BlockImpl>(1)->fc->weight), std::vector<double>(16, 0.0));
  std::vector<std::string> names;
  net->apply([&](const std::string& name, nn::Module& m) { names.push_back(name + "=" + m.name()); });
  EXPECT_EQ(names, (std::vector<std::string>{"=Net", "stem=Linear", "layers=Sequential", "layers.0=Block",
                                             "layers.0.fc=Linear", "layers.0.bn=BatchNorm2d", "layers.1=Block",
                                             "layers.1.fc=Linear", "layers.1.bn=BatchNorm2d", "head=Linear"}));
}

// A module registered under two names is one child: children() lists it once and apply() visits
// it once (it halved a weight twice), as PyTorch's; printing still shows both names.
TEST(NnModule, ASharedChildIsListedAndVisitedOnce) {
  nn::Linear shared(2, 2);
  nn::Sequential twice(shared, shared);
  EXPECT_EQ(twice->children().size(), 1u);
  EXPECT_EQ(twice->named_children()[0].first, "0");
  const std::vector<double> before = values(shared->weight);
  twice->apply([](nn::Module& m) {
    if (auto* lin = dynamic_cast<nn::LinearImpl*>(&m)) {
      NoGradGuard no_grad;
      lin->weight.mul_(0.5);
    }
  });
  const std::vector<double> after = values(shared->weight);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i], before[i] * 0.5);
  std::ostringstream os;
  os << *twice;
  EXPECT_NE(os.str().find("(1): Linear"), std::string::npos) << os.str();
}

// replace_module puts a new submodule where the old one was (libtorch's): its parameters are the
// ones listed, saved and moved. Assigning the member alone left the old one registered.
TEST(NnModule, ReplaceModuleSwapsTheRegisteredSubmodule) {
  Net net;
  const std::vector<std::string> names_before = [&] {
    std::vector<std::string> n;
    for (auto& [k, t] : net->named_parameters()) n.push_back(k);
    return n;
  }();
  nn::Linear fresh(4, 2, false);
  net->head = net->replace_module("head", fresh);
  std::vector<std::string> names_after;
  for (auto& [k, t] : net->named_parameters()) names_after.push_back(k);
  EXPECT_EQ(names_after, names_before);  // same names, same order
  EXPECT_TRUE(net->state_dict().at("head.weight").storage() == fresh->weight.storage());
  net->to(kFloat64);
  EXPECT_EQ(fresh->weight.dtype(), kFloat64);
  expect_error([&] { net->replace_module("tail", nn::Linear(1, 1)); },
               "[replace_module] no submodule \"tail\" to replace (it has: stem, layers, head)");
}

// A non-persistent buffer moves with the module but is not saved or expected by load_state_dict,
// as PyTorch's register_buffer(..., persistent=False).
TEST(NnModule, ANonPersistentBufferIsNotInTheStateDict) {
  nn::Linear lin(2, 2);
  lin->register_buffer("table", ones({3}), false);
  lin->register_buffer("kept", ones({1}));
  EXPECT_FALSE(lin->state_dict().count("table"));
  EXPECT_TRUE(lin->state_dict().count("kept"));
  EXPECT_EQ(lin->named_buffers().size(), 2u);
  auto sd = lin->state_dict();
  lin->load_state_dict(sd);  // strict: "table" is not missing
  lin->to(kFloat64);
  EXPECT_EQ(lin->find_buffer("table")->dtype(), kFloat64);
  sd["table"] = zeros({3});
  expect_error([&] { lin->load_state_dict(sd); }, "unexpected keys: table");
  lin->register_buffer("table", ones({3}));  // registered again as persistent
  EXPECT_TRUE(lin->state_dict().count("table"));
}

TEST(NnModule, RegistrationErrors) {
  nn::LinearImpl lin(2, 2);
  expect_error([&] { lin.register_buffer("weight", zeros({1})); }, "[register_buffer] \"weight\" is already registered");
  expect_error([&] { lin.register_module("bias", nn::ReLU()); }, "[register_module] \"bias\" is already registered");
  expect_error([&] { lin.register_buffer("a.b", zeros({1})); }, "[register_buffer] the name must not contain '.'");
  expect_error([&] { lin.register_module("", nn::ReLU()); }, "[register_module] the name must not be empty");
  nn::Linear empty{nullptr};
  EXPECT_TRUE(empty.is_empty());
  expect_error([&] { empty->forward(zeros({1, 2})); }, "[ModuleHolder] accessing an empty module holder");
  expect_error([&] { lin.register_module("sub", empty); }, "[register_module] submodule \"sub\" is empty");
}

// Registering a parameter again under its name replaces it (Python's register_parameter): a
// decoder tied to an embedding lists the embedding's weight once, and both uses add to its grad.
TEST(NnModule, RegisteringAParameterAgainReplacesItToTieWeights) {
  nn::Embedding emb(5, 3);
  nn::Linear head(3, 5, false);
  head->weight = head->register_parameter("weight", emb->weight);
  nn::Sequential both(emb, head);
  EXPECT_EQ(both->parameters().size(), 1u);
  EXPECT_TRUE(both->named_parameters()[0].second.is_same(emb->weight));
  EXPECT_EQ(both->state_dict().size(), 2u);  // both names, as torch's state_dict
  both->forward(tensor(std::vector<int64_t>{1, 2})).sum().backward();
  EXPECT_TRUE(emb->weight.grad().defined());
  EXPECT_GT(values(emb->weight.grad().abs().sum())[0], 0.0);
}

TEST(NnModule, RegisterParameterMakesALeafThatRequiresGrad) {
  nn::Module m;
  Tensor x = ones({2}, TensorOptions().requires_grad(true));
  Tensor p = m.register_parameter("p", x * 2);  // a non-leaf is detached
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
  Tensor frozen = m.register_parameter("frozen", zeros({2}), false);
  EXPECT_FALSE(frozen.requires_grad());
  EXPECT_EQ(m.parameters().size(), 2u);
  m.register_parameter("absent", Tensor());  // like bias=None: registered, never listed
  EXPECT_EQ(m.parameters().size(), 2u);
}

TEST(NnModule, HolderCopiesShareTheModule) {
  nn::Linear a(3, 2);
  nn::Linear b = a;
  EXPECT_EQ(a.get(), b.get());
  Tensor y = a(ones({5, 3}));
  EXPECT_EQ(y.shape(), (Shape{5, 2}));
  std::shared_ptr<nn::Module> base = a;
  EXPECT_EQ(base.get(), static_cast<nn::Module*>(a.get()));
}

TEST(NnModule, TrainAndEvalRecurse) {
  Net net;
  EXPECT_TRUE(net->is_training());
  net->eval();
  for (auto& m : net->modules()) EXPECT_FALSE(m->is_training()) << m->name();
  net->train();
  for (auto& m : net->modules()) EXPECT_TRUE(m->is_training()) << m->name();
  net->layers->train(false);
  EXPECT_TRUE(net->is_training());
  EXPECT_FALSE(net->layers->ptr<BlockImpl>(0)->fc->is_training());
}

TEST(NnModule, ToDtypeConvertsFloatingTensorsBehindTheSameHandles) {
  manual_seed(1);
  Net net;
  Tensor weight = net->stem->weight;           // a handle taken before, as an optimizer holds it
  auto params_before = net->parameters();
  std::vector<double> before = values(weight);
  net->stem->weight.sum().backward();
  ASSERT_TRUE(weight.grad().defined());

  net->to(kFloat64);
  EXPECT_EQ(weight.dtype(), kFloat64);
  EXPECT_TRUE(weight.is_same(net->stem->weight));
  EXPECT_TRUE(weight.is_same(net->named_parameters()[0].second));
  EXPECT_EQ(values(weight), before);           // float32 values are exact in float64
  EXPECT_TRUE(weight.is_leaf());
  EXPECT_TRUE(weight.requires_grad());
  EXPECT_EQ(weight.grad().dtype(), kFloat64);  // the gradient follows, as in PyTorch
  for (auto& p : params_before) EXPECT_EQ(p.dtype(), kFloat64);
  auto bn = net->layers->ptr<BlockImpl>(0)->bn;
  EXPECT_EQ(bn->running_var.dtype(), kFloat64);
  EXPECT_EQ(bn->num_batches_tracked.dtype(), kInt64);  // integer buffers keep their dtype

  // The converted parameters still train: gradients reach the same leaves.
  net->zero_grad();
  Tensor out = net(ones({2, 3}, kFloat64));
  EXPECT_EQ(out.dtype(), kFloat64);
  out.sum().backward();
  EXPECT_EQ(weight.grad().dtype(), kFloat64);
  EXPECT_EQ(weight.grad().shape(), (Shape{4, 3}));
  expect_error([&] { net->to(kInt64); }, "[Module::to] only floating-point dtypes are accepted");
}

TEST(NnModule, ToDeviceKeepsHandles) {
  for (Device d : devices()) {
    Net net;
    Tensor w = net->head->weight;
    net->to(d);
    EXPECT_EQ(w.device(), d);
    EXPECT_EQ(net->layers->ptr<BlockImpl>(1)->bn->num_batches_tracked.device(), d);
    EXPECT_TRUE(w.is_same(net->head->weight));
    Tensor y = net(ones({1, 3}, d));
    EXPECT_EQ(y.device(), d);
  }
}

// to(MemoryFormat::ChannelsLast) lays out 4-D floating tensors (and their gradients) channels-last
// behind the same handles, leaves the others alone, and the model computes and trains as before:
// the same outputs, conv weight gradients in the weights' layout, SGD with momentum keeping its
// state in that layout.
TEST(NnModule, ToChannelsLastKeepsHandlesValuesAndTraining) {
  auto make = [] {
    manual_seed(3);
    return nn::Sequential(nn::Conv2d(3, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::ReLU(), nn::Flatten(),
                          nn::Linear(8 * 6 * 6, 4));
  };
  nn::Sequential plain = make(), cl = make();
  auto conv = cl->ptr<nn::Conv2dImpl>(0);
  Tensor w = conv->weight;  // a handle taken before, as an optimizer holds it
  w.sum().backward();
  const std::vector<double> before = values(w);
  cl->to(MemoryFormat::ChannelsLast);
  EXPECT_TRUE(w.is_same(conv->weight));
  EXPECT_TRUE(w.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_FALSE(w.is_contiguous());
  EXPECT_TRUE(w.grad().is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_EQ(values(w), before);
  EXPECT_TRUE(w.is_leaf() && w.requires_grad());
  EXPECT_TRUE(cl->ptr<nn::LinearImpl>(4)->weight.is_contiguous());  // not 4-D: unchanged
  cl->zero_grad();

  optim::SGD opt_plain(plain->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt_cl(cl->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    const Tensor x = randn({2, 3, 6, 6}).contiguous(MemoryFormat::ChannelsLast);
    Tensor y_plain = plain(x), y_cl = cl(x);
    expect_close(y_cl, values(y_plain), y_plain.shape(), 1e-5, 1e-6, "output");
    y_plain.square().sum().backward();
    y_cl.square().sum().backward();
    EXPECT_TRUE(w.grad().is_contiguous(MemoryFormat::ChannelsLast)) << "step " << step;
    opt_plain.step();
    opt_cl.step();
    opt_plain.zero_grad();
    opt_cl.zero_grad();
  }
  EXPECT_TRUE(w.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_TRUE(opt_cl.state(w).at("momentum_buffer").is_contiguous(MemoryFormat::ChannelsLast));
  expect_close(w, values(plain->ptr<nn::Conv2dImpl>(0)->weight), w.shape(), 1e-5, 1e-6, "weights after 3 steps");
  cl->to(MemoryFormat::Contiguous);
  EXPECT_TRUE(w.is_contiguous());
}

TEST(NnModule, ZeroGrad) {
  nn::Linear lin(3, 2);
  lin(ones({4, 3})).sum().backward();
  ASSERT_TRUE(lin->weight.grad().defined());
  lin->zero_grad(false);
  ASSERT_TRUE(lin->weight.grad().defined());
  EXPECT_EQ(values(lin->weight.grad()), std::vector<double>(6, 0.0));
  EXPECT_EQ(values(lin->bias.grad()), std::vector<double>(2, 0.0));
  lin(ones({4, 3})).sum().backward();
  EXPECT_EQ(values(lin->bias.grad()), std::vector<double>(2, 4.0));
  lin->zero_grad();
  EXPECT_FALSE(lin->weight.grad().defined());
  EXPECT_FALSE(lin->bias.grad().defined());
}

TEST(NnModule, PrintsLikePyTorch) {
  nn::Sequential seq(nn::Linear(2, 3), nn::ReLU(true), nn::Dropout(0.25), nn::Linear(3, 1, false), nn::Flatten());
  std::ostringstream os;
  os << seq;
  EXPECT_EQ(os.str(),
            "Sequential(\n"
            "  (0): Linear(in_features=2, out_features=3, bias=True)\n"
            "  (1): ReLU(inplace=True)\n"
            "  (2): Dropout(p=0.25, inplace=False)\n"
            "  (3): Linear(in_features=3, out_features=1, bias=False)\n"
            "  (4): Flatten(start_dim=1, end_dim=-1)\n"
            ")");
  // Numbers as Python's repr writes floats: 0.0 and 1.0, not 0 and 1.
  std::ostringstream numbers;
  numbers << nn::Sequential(nn::Dropout(0.0), nn::BatchNorm2d(2, {.momentum = 1.0}));
  EXPECT_NE(numbers.str().find("Dropout(p=0.0, inplace=False)"), std::string::npos) << numbers.str();
  EXPECT_NE(numbers.str().find("BatchNorm2d(2, eps=1e-05, momentum=1.0,"), std::string::npos) << numbers.str();
  Net net;
  std::ostringstream nested;
  nested << *net;
  EXPECT_NE(nested.str().find("  (layers): Sequential(\n    (0): Block(\n      (fc): Linear(in_features=4"),
            std::string::npos)
      << nested.str();
  EXPECT_NE(nested.str().find("(bn): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)"),
            std::string::npos)
      << nested.str();
}

}  // namespace
}  // namespace kiln::test
