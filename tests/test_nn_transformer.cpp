// kiln::nn Embedding, LayerNorm, GELU, MultiheadAttention, TransformerEncoderLayer/Encoder:
// outputs and gradients against torch.nn (tests/fixtures/transformer, made by
// tests/fixtures/make_transformer_fixture.py), PyTorch's state_dict names, initialisation, errors.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "fixture_weights.h"
#include "kiln/io.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "fixture_util.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

namespace nn = kiln::nn;
namespace F = kiln::nn::functional;

const Tensor& want(const std::string& key) { return test::fixture_tensor("transformer/expected.safetensors", key); }

// Elements [start, start + numel) of formula("input", (400,)), as the fixture script takes them.
Tensor fixture_input(int64_t start, const Shape& shape, ScalarType dtype = kFloat64) {
  return formula_input({400}, dtype).slice(0, start, start + shape_numel(shape, "fixture_input")).reshape(shape);
}

void load_formula(nn::Module& m, ScalarType dtype) {
  m.to(dtype);
  m.load_state_dict(formula_state_dict(m.state_dict()));
}

Tensor half_sum_of_squares(const Tensor& y) { return sum(mul(y, y)) / 2.0; }

Tensor param(nn::Module& m, const std::string& name) {
  for (auto& [n, t] : m.named_parameters())
    if (n == name) return t;
  throw std::runtime_error("no parameter " + name);
}

// ---- Embedding

TEST(NnEmbedding, InitLookupAndPaddingRow) {
  manual_seed(3);
  nn::Embedding emb(1000, 16, {.padding_idx = -1});
  EXPECT_EQ(emb->options.padding_idx, 999);
  EXPECT_EQ(emb->weight.shape(), (Shape{1000, 16}));
  std::vector<double> w = values(emb->weight);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(w[999 * 16 + j], 0.0);
  double m = 0, s = 0;
  for (size_t i = 0; i < 999 * 16; ++i) m += w[i], s += w[i] * w[i];
  m /= 999 * 16, s = std::sqrt(s / (999 * 16) - m * m);
  EXPECT_NEAR(m, 0.0, 0.05);  // N(0, 1), as PyTorch
  EXPECT_NEAR(s, 1.0, 0.05);

  Tensor ids = tensor({{3, 999}, {0, 3}}, kInt64);
  Tensor y = emb(ids);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 16}));
  std::vector<double> got = values(y);
  const int rows[] = {3, 999, 0, 3};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 16; ++j) ASSERT_EQ(got[i * 16 + j], w[rows[i] * 16 + j]);
  EXPECT_EQ(values(F::embedding(ids, emb->weight, {.padding_idx = -1})), got);

  std::ostringstream os;
  os << *emb;
  EXPECT_EQ(os.str(), "Embedding(1000, 16, padding_idx=999)");
  auto sd = emb->state_dict();
  ASSERT_EQ(sd.size(), 1u);
  EXPECT_TRUE(sd.count("weight"));
  expect_error([] { nn::Embedding(4, 2, {.padding_idx = 4}); }, "[Embedding] padding_idx must be within num_embeddings 4, got 4");
}

TEST(NnEmbedding, FromPretrainedFreezes) {
  Tensor table = tensor({{1.0f, 2.0f}, {3.0f, 4.0f}, {5.0f, 6.0f}});
  auto frozen = nn::Embedding::from_pretrained(table);
  EXPECT_FALSE(frozen->weight.requires_grad());
  EXPECT_EQ(values(frozen(tensor({2, 0}, kInt64))), (std::vector<double>{5, 6, 1, 2}));
  auto trainable = nn::Embedding::from_pretrained(table, false);
  EXPECT_TRUE(trainable->weight.requires_grad());
  Tensor loss = sum(trainable(tensor({1, 1}, kInt64)));
  loss.backward();
  EXPECT_EQ(values(trainable->weight.grad()), (std::vector<double>{0, 0, 2, 2, 0, 0}));
  // No random table is drawn first: the generator is where it was (it moved, so every layer made
  // afterwards had other weights than in PyTorch).
  manual_seed(5);
  const std::vector<double> next = values(randn({4}));
  manual_seed(5);
  (void)nn::Embedding::from_pretrained(table, true, {.padding_idx = 1});
  EXPECT_EQ(values(randn({4})), next);
  expect_error([&] { nn::Embedding::from_pretrained(table, true, {.padding_idx = 3}); },
               "padding_idx must be within num_embeddings 3, got 3");
}

// ---- LayerNorm and GELU

TEST(NnLayerNorm, NormalisesTrailingDimsAndPrints) {
  nn::LayerNorm ln(Shape{2, 3}, {.eps = 1e-3});
  EXPECT_EQ(values(ln->weight), std::vector<double>(6, 1.0));
  EXPECT_EQ(values(ln->bias), std::vector<double>(6, 0.0));
  {
    NoGradGuard g;
    ln->weight.copy_(tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}).reshape({2, 3}));
    ln->bias.fill_(0.5);
  }
  Tensor x = arange(12, kFloat64).reshape({2, 2, 3}).square() * 0.1;
  ln->to(kFloat64);
  std::vector<double> xs = values(x), expected;
  for (int b = 0; b < 2; ++b) {
    double m = 0, v = 0;
    for (int i = 0; i < 6; ++i) m += xs[b * 6 + i] / 6;
    for (int i = 0; i < 6; ++i) v += (xs[b * 6 + i] - m) * (xs[b * 6 + i] - m) / 6;
    for (int i = 0; i < 6; ++i) expected.push_back((xs[b * 6 + i] - m) / std::sqrt(v + 1e-3) * (i + 1) + 0.5);
  }
  expect_close(ln(x), expected, {2, 2, 3}, 1e-12, 1e-12);
  expect_close(F::layer_norm(x, {.normalized_shape = {2, 3}, .weight = ln->weight, .bias = ln->bias, .eps = 1e-3}),
               expected, {2, 2, 3}, 1e-12, 1e-12);

  nn::LayerNorm plain(4, {.elementwise_affine = false});
  EXPECT_TRUE(plain->parameters().empty());
  nn::LayerNorm no_bias(4, {.bias = false});
  EXPECT_EQ(no_bias->state_dict().size(), 1u);
  std::ostringstream os;
  os << *nn::LayerNorm(768);
  EXPECT_EQ(os.str(), "LayerNorm((768,), eps=1e-05, elementwise_affine=True)");
}

TEST(NnGELU, ErfAndTanhForms) {
  Tensor x = tensor({-3.0, -0.5, 0.0, 0.7, 2.5}, kFloat64);
  std::vector<double> xs = values(x), erf_form, tanh_form;
  for (double v : xs) {
    erf_form.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    tanh_form.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
  }
  expect_close(nn::GELU()(x), erf_form, {5}, 1e-12, 1e-12);
  expect_close(nn::GELU({.approximate = "tanh"})(x), tanh_form, {5}, 1e-12, 1e-12);
  expect_close(F::gelu(x, {.approximate = "tanh"}), tanh_form, {5}, 1e-12, 1e-12);
  std::ostringstream os;
  os << *nn::GELU({.approximate = "tanh"});
  EXPECT_EQ(os.str(), "GELU(approximate='tanh')");
  expect_error([] { nn::GELU({.approximate = "fast"}); }, "[GELU] approximate must be \"none\" or \"tanh\", got \"fast\"");
}

// ---- MultiheadAttention

TEST(NnMultiheadAttention, InitialisedAsPyTorch) {
  manual_seed(1);
  nn::MultiheadAttention mha(64, 4);
  EXPECT_EQ(mha->in_proj_weight.shape(), (Shape{192, 64}));
  EXPECT_EQ(values(mha->in_proj_bias), std::vector<double>(192, 0.0));
  EXPECT_EQ(values(mha->out_proj->bias), std::vector<double>(64, 0.0));
  // xavier_uniform: U(-b, b), b = sqrt(6 / (64 + 192)).
  double b = std::sqrt(6.0 / 256.0), mx = 0;
  for (double v : values(mha->in_proj_weight)) mx = std::max(mx, std::abs(v));
  EXPECT_LE(mx, b);
  EXPECT_GT(mx, 0.9 * b);
  std::vector<std::string> names;
  for (auto& [n, t] : mha->ordered_state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
}

TEST(NnMultiheadAttention, CrossAttentionWithMasksAndWeightsEqualsPyTorch) {
  nn::MultiheadAttention mha(8, 2, {.kdim = 6, .vdim = 4});
  load_formula(*mha, kFloat64);
  Tensor q = fixture_input(0, {3, 2, 8}).requires_grad_(), k = fixture_input(100, {5, 2, 6}),
         v = fixture_input(200, {5, 2, 4});
  Tensor attn_mask = fixture_input(300, {3, 5}) * 0.5;
  auto [out, w] = mha(q, k, v, want("key_padding_mask"), true, attn_mask);
  expect_rel(out, want("mha.out"), 1e-10, "out");
  expect_rel(w, want("mha.weights"), 1e-10, "weights");
  half_sum_of_squares(out).backward();
  for (auto n : {"q_proj_weight", "k_proj_weight", "in_proj_bias", "out_proj.weight"})
    expect_rel(param(*mha, n).grad(), want(std::string("mha.grad.") + n), 1e-10, n);
  expect_rel(q.grad(), want("mha.grad.query"), 1e-10, "query grad");

  // Without the weights, the fused attention op gives the same output.
  auto [fused, none] = mha(q, k, v, want("key_padding_mask"), false, attn_mask);
  EXPECT_FALSE(none.defined());
  expect_rel(fused, want("mha.out"), 1e-10, "fused out");
}

TEST(NnMultiheadAttention, BatchFirstUnbatchedAndBoolMasksAgree) {
  manual_seed(4);
  nn::MultiheadAttention seq_first(8, 2);
  nn::MultiheadAttention batch_first(8, 2, {.batch_first = true});
  batch_first->load_state_dict(seq_first->state_dict());
  Tensor x = randn({2, 5, 8});
  Tensor pad = tensor({false, false, false, true, true, false, false, false, false, false}).reshape({2, 5});
  Tensor a = std::get<0>(batch_first(x, x, x, pad));
  Tensor xt = x.transpose(0, 1);
  Tensor b = std::get<0>(seq_first(xt, xt, xt, pad)).transpose(0, 1);
  expect_close(a, values(b), {2, 5, 8}, 1e-5, 1e-6);
  // A float padding mask (-inf where padded) is the same mask.
  Tensor fpad = zeros({2, 5}).masked_fill(pad, -INFINITY);
  expect_close(std::get<0>(batch_first(x, x, x, fpad)), values(a), {2, 5, 8}, 1e-5, 1e-6);
  // Unbatched input is batch 1.
  Tensor x1 = x.select(0, 1);
  expect_close(std::get<0>(batch_first(x1, x1, x1)), values(a.select(0, 1)), {5, 8}, 1e-5, 1e-6);
  // A bool attn_mask masking keys 3 and 4 for every query equals the padding mask for batch 0.
  Tensor am = tensor({false, false, false, true, true}).reshape({1, 5}).expand({5, 5}).contiguous();
  Tensor x0 = x.select(0, 0).unsqueeze(0);
  Tensor with_am = std::get<0>(batch_first(x0, x0, x0, {}, false, am));
  Tensor pad0 = pad.select(0, 0).unsqueeze(0);
  expect_close(with_am, values(std::get<0>(batch_first(x0, x0, x0, pad0))), {1, 5, 8}, 1e-5, 1e-6);
}

TEST(NnMultiheadAttention, BadArgumentsAreClearErrors) {
  expect_error([] { nn::MultiheadAttention(10, 3); }, "[MultiheadAttention] embed_dim 10 must be divisible by num_heads 3");
  nn::MultiheadAttention mha(8, 2, {.batch_first = true});
  Tensor x = randn({2, 5, 8});
  expect_error([&] { mha(x, x, x, ones({2, 4}, kBool)); }, "[MultiheadAttention::forward] key_padding_mask must be [2, 5], got [2, 4]");
  expect_error([&] { mha(x, x, x, {}, false, ones({5, 4}, kBool)); }, "attn_mask must be [5, 5] or [4, 5, 5], got [5, 4]");
  expect_error([&] { mha(x, x, x, ones({2, 5}, kInt64)); }, "key_padding_mask must be bool or floating point, got int64");
  Tensor bad = randn({2, 5, 7});
  expect_error([&] { mha(bad, bad, bad); }, "expected feature sizes (8, 8, 8), got query [2, 5, 7]");
}

// ---- TransformerEncoderLayer and TransformerEncoder

const std::vector<std::string> kLayerGrads = {"self_attn.in_proj_weight", "self_attn.in_proj_bias", "linear1.weight",
                                              "linear2.bias", "norm1.weight", "norm2.bias"};

class NnEncoderLayer : public ::testing::TestWithParam<std::string> {};

TEST_P(NnEncoderLayer, EqualsPyTorchWithPaddingMask) {
  const std::string tag = GetParam();
  const bool pre = tag == "pre";
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .activation = pre ? "gelu" : "relu",
                                           .batch_first = true, .norm_first = pre});
  load_formula(*layer, kFloat64);
  Tensor x = fixture_input(0, {2, 5, 8}).requires_grad_();
  Tensor y = layer(x, {}, want("key_padding_mask"));
  expect_rel(y, want(tag + ".out"), 1e-10, tag + " out");
  half_sum_of_squares(y).backward();
  for (const auto& n : kLayerGrads) expect_rel(param(*layer, n).grad(), want(tag + ".grad." + n), 1e-10, n);
  expect_rel(x.grad(), want(tag + ".grad.input"), 1e-10, "input grad");

  // float32 within the relative error float32 PyTorch has.
  layer->to(kFloat32);
  expect_rel(layer(fixture_input(0, {2, 5, 8}, kFloat32), {}, want("key_padding_mask")), want(tag + ".out"), 1e-5,
             tag + " float32 out");
}

INSTANTIATE_TEST_SUITE_P(PostAndPreNorm, NnEncoderLayer, ::testing::Values("post", "pre"));

TEST(NnTransformerEncoder, TwoLayersCausalAndPaddingEqualPyTorch) {
  nn::TransformerEncoder enc(nn::TransformerEncoderLayer(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true}),
                             2, nn::LayerNorm(8));
  load_formula(*enc, kFloat64);
  Tensor causal = triu(ones({5, 5}, kBool), 1);
  Tensor x = fixture_input(0, {2, 5, 8}).requires_grad_();
  Tensor y = enc(x, causal, want("key_padding_mask"));
  expect_rel(y, want("enc.out"), 1e-10, "out");
  half_sum_of_squares(y).backward();
  for (auto n : {"layers.0.self_attn.in_proj_weight", "layers.1.linear1.weight", "norm.weight"})
    expect_rel(param(*enc, n).grad(), want(std::string("enc.grad.") + n), 1e-10, n);
  expect_rel(x.grad(), want("enc.grad.input"), 1e-10, "input grad");
}

TEST(NnTransformerEncoder, GradcheckThroughAPreNormLayerWithPadding) {
  manual_seed(12);
  nn::TransformerEncoderLayer layer(4, 2, {.dim_feedforward = 6, .dropout = 0.0, .activation = "gelu",
                                           .batch_first = true, .norm_first = true});
  layer->to(kFloat64);
  Tensor pad = tensor({false, false, true, false, false, false}).reshape({2, 3});
  Tensor x = randn({2, 3, 4}, kFloat64).requires_grad_();
  // gradcheck perturbs its inputs in place, so a parameter can be one: the weights path too.
  Tensor w = layer->self_attn->in_proj_weight;
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return layer(in[0], {}, pad); }, {x}));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>&) {
        auto [out, weights] = layer->self_attn->forward(x, x, x, pad, true, {}, false);
        return add(sum(out), sum(mul(weights, weights)));
      },
      {w}));
}

TEST(NnTransformerEncoder, StateDictNamesAndShapesArePyTorchs) {
  std::ifstream in(fixture_path("transformer/state_dict_keys.txt"));
  ASSERT_TRUE(in.good());
  std::map<std::string, std::vector<std::string>> want_keys;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string which, name, shape;
    ss >> which >> name >> shape;
    want_keys[which].push_back(name + " " + shape);
  }
  auto describe = [](const nn::Module& m) {
    std::vector<std::string> out;
    for (auto& [n, t] : m.ordered_state_dict()) {
      std::string s;
      for (int64_t d : t.shape()) {
        if (!s.empty()) s += 'x';
        s += std::to_string(d);
      }
      out.push_back(n + " " + s);
    }
    return out;
  };
  nn::MultiheadAttention mha(8, 2, {.kdim = 6, .vdim = 4});
  EXPECT_EQ(describe(*mha), want_keys["mha"]);
  nn::TransformerEncoder enc(nn::TransformerEncoderLayer(8, 2, {.dim_feedforward = 16}), 2, nn::LayerNorm(8));
  EXPECT_EQ(describe(*enc), want_keys["enc"]);
  EXPECT_EQ(static_cast<int64_t>(enc->state_dict().size()), want("enc.keys").item<int64_t>());
}

TEST(NnTransformerEncoder, CopiesStartEqualAndTrainingReducesLoss) {
  manual_seed(7);
  nn::TransformerEncoderLayer proto(16, 4, {.dim_feedforward = 32, .dropout = 0.1, .batch_first = true});
  nn::TransformerEncoder enc(proto, 2);
  EXPECT_EQ(values(param(*enc, "layers.0.linear1.weight")), values(proto->linear1->weight));
  EXPECT_EQ(values(param(*enc, "layers.1.linear1.weight")), values(proto->linear1->weight));
  EXPECT_FALSE(param(*enc, "layers.1.linear1.weight").is_same(proto->linear1->weight));

  // Learn to copy each token's features to a target that depends on the whole (unpadded) sequence.
  nn::Linear head(16, 16);
  std::vector<Tensor> params = enc->parameters();
  for (auto& p : head->parameters()) params.push_back(p);
  optim::SGD opt(params, {.lr = 0.05, .momentum = 0.9});
  Tensor x = randn({4, 6, 16});
  Tensor target = mean(x, {1}, true).expand({4, 6, 16}).contiguous();
  Tensor pad = zeros({4, 6}, kBool);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    Tensor loss = mean(square(head(enc(x, {}, pad)) - target));
    loss.backward();
    for (auto& p : params) ASSERT_TRUE(p.grad().defined());
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
}

// PyTorch deep-copies the layer: a float64 prototype with a frozen parameter gives float64
// copies with that parameter frozen and the rest trainable; a GPU prototype, copies on the GPU.
TEST(NnTransformerEncoder, CopiesKeepDtypeDeviceAndRequiresGrad) {
  manual_seed(3);
  nn::TransformerEncoderLayer proto(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true});
  proto->to(kFloat64);
  proto->norm1->weight.requires_grad_(false);
  nn::TransformerEncoder enc(proto, 2);
  ASSERT_EQ(enc->parameters().size(), 2 * proto->parameters().size());
  for (auto& [n, t] : enc->named_parameters()) {
    EXPECT_EQ(t.dtype(), kFloat64) << n;
    EXPECT_EQ(t.requires_grad(), !n.ends_with("norm1.weight")) << n;
  }
  EXPECT_EQ(values(param(*enc, "layers.1.linear1.weight")), values(proto->linear1->weight));
  EXPECT_EQ(enc(randn({2, 3, 8}, kFloat64)).dtype(), kFloat64);

  std::optional<test::StandInCuda> stand_in;
  if (!cuda::is_available()) stand_in.emplace();
  {
    nn::TransformerEncoderLayer on_gpu(8, 2, {.dim_feedforward = 16});
    on_gpu->to(Device::cuda(0));
    nn::TransformerEncoder genc(on_gpu, 2);
    for (auto& [n, t] : genc->named_parameters()) EXPECT_EQ(t.device(), Device::cuda(0)) << n;
    EXPECT_EQ(values(param(*genc, "layers.1.linear1.weight")), values(on_gpu->linear1->weight));
  }
}

TEST(NnFunctional, ScaledDotProductAttentionIsSoftmaxOfMaskedScores) {
  manual_seed(9);
  Tensor q = randn({2, 3, 4, 8}, kFloat64), k = randn({2, 3, 6, 8}, kFloat64), v = randn({2, 3, 6, 5}, kFloat64);
  std::vector<bool> keep_v;
  for (int i = 0; i < 24; ++i) keep_v.push_back(i % 6 == 0 || (i * 7) % 5 < 3);  // key 0 always kept
  Tensor keep = tensor(std::vector<uint8_t>(keep_v.begin(), keep_v.end()), {4, 6}).to(kBool);
  Tensor got = F::scaled_dot_product_attention(q, k, v, {.attn_mask = keep, .scale = 0.3});
  // Reference: explicit loops over batch, head, query.
  std::vector<double> qs = values(q), ks = values(k), vs = values(v), out;
  for (int bh = 0; bh < 6; ++bh)
    for (int i = 0; i < 4; ++i) {
      std::vector<double> p(6, 0.0);
      double mx = -1e300, z = 0;
      for (int j = 0; j < 6; ++j) {
        if (!keep_v[i * 6 + j]) continue;
        double s = 0;
        for (int e = 0; e < 8; ++e) s += qs[(bh * 4 + i) * 8 + e] * ks[(bh * 6 + j) * 8 + e];
        p[j] = 0.3 * s;
        mx = std::max(mx, p[j]);
      }
      for (int j = 0; j < 6; ++j) z += keep_v[i * 6 + j] ? std::exp(p[j] - mx) : 0.0;
      for (int c = 0; c < 5; ++c) {
        double acc = 0;
        for (int j = 0; j < 6; ++j)
          if (keep_v[i * 6 + j]) acc += std::exp(p[j] - mx) / z * vs[(bh * 6 + j) * 5 + c];
        out.push_back(acc);
      }
    }
  expect_close(got, out, {2, 3, 4, 5}, 1e-10, 1e-12);
}

}  // namespace
}  // namespace kiln::test
