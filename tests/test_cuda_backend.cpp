// The CUDA backend. Without a GPU (CI): pinning memory is a clear error (tests/test_gpu_paths.cpp
// checks that every op of the training paths has a CUDA kernel that takes its case). With a GPU: every op family
// (CNN ops included) gives the CPU's numbers with no fallback, the same seed gives the same
// random numbers on both devices, 16-bit attention (both paths) follows the CPU's, pinned batches travel, BERT-tiny trains as on the CPU, and
// cuDNN's convolutions (forward and both gradients; NCHW and channels-last; groups, depthwise,
// stride, padding, dilation, bias; float32 with and without TF32, float64, float16, bfloat16;
// benchmark mode) match the CPU's float64 with no fallback.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "cuda_test_util.h"
#include "op_families.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// One masked-LM training step of BERT-tiny (padding, dropout on, AdamW, gradient clipping) on
// `device`; returns the loss.
double bert_step(models::BertForMaskedLM& model, optim::AdamW& opt, Device device, int64_t step) {
  const int64_t B = 2, T = 16, V = models::BertConfig::tiny().vocab_size;
  Tensor ids = indices({B, T}, V, 40 + step, device);
  Tensor mask = ones({B, T}, kBool);
  mask.narrow(0, 1, 1).narrow(1, 12, 4).fill_(false);
  Tensor labels = full({B, T}, -100, kInt64);
  labels.narrow(1, 3, 5).copy_(indices({B, 5}, V, 50 + step, Device::cpu()));
  opt.zero_grad();
  Tensor loss = model->masked_lm_loss(ids, labels.to(device), mask.to(device));
  loss.backward();
  nn::utils::clip_grad_norm_(model->parameters(), 1.0);
  opt.step();
  return loss.item<double>();
}

TEST(CudaPinned, WithoutAGpuPinningIsAClearErrorAndTheLoaderDoesNotPin) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  expect_error([] { (void)arange(4, kFloat32).pin_memory(); }, "[pin_memory] needs a CUDA device");
  EXPECT_FALSE(arange(4, kFloat32).is_pinned());
  data::TensorDataset ds(arange(12, kFloat32).reshape({6, 2}), arange(6, kInt64));
  data::DataLoader loader(ds, {.batch_size = 4, .pin_memory = true});
  EXPECT_FALSE(loader.options().pin_memory);  // with a warning, as PyTorch
  for (data::Batch& b : loader) EXPECT_FALSE(b.data.is_pinned());
}

// ---- with a GPU

TEST_F(Cuda, EveryOpFamilyMatchesTheCpuWithoutFallback) {
  const Device gpu = Device::cuda(0);
  // The families include convolutions, judged at float32 accuracy here: cuDNN without TF32.
  CudnnSettings restore;
  cudnn::set_allow_tf32(false);
  for (const Case& c : op_families()) {
    const Trace want = c.run(Device::cpu());
    const uint64_t before = total_fallbacks();
    const Trace got = c.run(gpu);
    EXPECT_EQ(total_fallbacks(), before) << c.name << " ran an op through the CPU fallback";
    ASSERT_EQ(got.size(), want.size()) << c.name;
    double scale = 0;
    for (double v : want)
      if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
    size_t bad = 0, worst = 0;
    double worst_err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double err = std::isnan(want[i]) && std::isnan(got[i]) ? 0 : std::abs(got[i] - want[i]);
      if (!(err <= 1e-4 * scale + 1e-5)) {
        ++bad;
        if (!(err <= worst_err)) worst_err = err, worst = i;
      }
    }
    EXPECT_EQ(bad, 0u) << c.name << ": " << bad << " of " << want.size() << " numbers differ from the CPU's; worst #"
                       << worst << ": " << got[worst] << " vs " << want[worst];
  }
}

TEST_F(Cuda, TheSameSeedGivesTheSameRandomNumbersOnBothDevices) {
  const Device gpu = Device::cuda(0);
  for (auto make : {+[](Device d) { return rand({1000}, TensorOptions().device(d)); },
                    +[](Device d) { return randn({1001}, TensorOptions().device(d)); },
                    +[](Device d) { return randint(0, 7, {999}, TensorOptions(kInt64).device(d)); },
                    // 64-bit integers (not through a double): the top 53 bits as doubles, then
                    // the low 32 (the same draw, wrapped to int32)
                    +[](Device d) { return randint(INT64_MIN, INT64_MAX, {999}, TensorOptions(kInt64).device(d)); },
                    +[](Device d) {
                      return randint(INT64_MIN, INT64_MAX, {999}, TensorOptions(kInt64).device(d)).to(kInt32);
                    },
                    +[](Device d) { return dropout(ones({513}, TensorOptions().device(d)), 0.3); },
                    // float64 affine steps, rounded twice on both devices (no fused multiply-add)
                    +[](Device d) { return empty({1000}, TensorOptions(kFloat64).device(d)).uniform_(-0.37, 0.71); },
                    +[](Device d) { return empty({1000}, TensorOptions().device(d)).normal_(0.3, 1.7); },
                    // Box-Muller's logarithm, sine and cosine are core/philox.h's own on both
                    // devices (not libm's and CUDA's, which differ by an ulp or two): float64 too
                    +[](Device d) { return empty({100003}, TensorOptions(kFloat64).device(d)).normal_(0.3, 1.7); },
                    +[](Device d) { return randn({1 << 20}, TensorOptions().device(d)); },
                    +[](Device d) { return arange(0.1, 300.0, 0.3, TensorOptions(kFloat64).device(d)); }}) {
    manual_seed(123);
    const std::vector<double> cpu = values(make(Device::cpu()));
    manual_seed(123);
    EXPECT_EQ(values(make(gpu).cpu()), cpu);
  }
}

// linear through cuBLASLt: bias and every activation in every dtype, the bias fused as an
// epilogue where cuBLASLt takes it and added by our kernel where not (float64; a bias sliced at
// an offset that is no multiple of 16 bytes), with no fallback.
TEST_F(Cuda, LinearAppliesItsBiasAndActivationInEveryDtype) {
  const uint64_t before = total_fallbacks();
  for (ScalarType dt : {kFloat64, kFloat32, kBFloat16, kFloat16}) {
    for (Activation act : {Activation::None, Activation::ReLU, Activation::GELU, Activation::GELUTanh}) {
      for (int64_t offset : {0, 1}) {
        auto run = [&](Device d) {
          Tensor x = input({24, 40}, 31, d).detach().to(dt), w = input({36, 40}, 32, d).detach().to(dt);
          Tensor b = input({37}, 33, d).detach().to(dt).narrow(0, offset, 36);
          return values(linear(x, w, b, act).to(kFloat64).cpu());
        };
        const double tol = dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-5 : 2e-2;
        expect_scaled_close(run(Device::cuda(0)), run(Device::cpu()), tol,
                            std::string(dtype_name(dt)) + " activation " + std::to_string(static_cast<int>(act)) +
                                " bias offset " + std::to_string(offset));
      }
    }
  }
  EXPECT_EQ(total_fallbacks(), before);
}

// Integer products (cuBLASLt has none): matmul over strided and broadcast batches and linear
// with a bias, on our own kernel, equal to the CPU's (uint8 wrapping as there), with no fallback.
TEST_F(Cuda, IntegerMatmulAndLinearMatchTheCpuWithoutFallback) {
  const uint64_t before = total_fallbacks();
  for (ScalarType dt : {kInt64, kInt32, kUInt8}) {
    auto run = [&](Device d) {
      Tensor a = input({3, 6, 9}, 34, d, false).mul(4).to(kInt64).to(dt);
      Tensor b = input({9, 5}, 35, d, false).mul(4).to(kInt64).to(dt);
      Tensor w = input({4, 9}, 36, d, false).mul(4).to(kInt64).to(dt),
             bias = input({4}, 37, d, false).mul(9).to(kInt64).to(dt);
      std::vector<double> v = values(matmul(a, b).cpu());
      for (double x : values(matmul(a.transpose(1, 2).contiguous().transpose(1, 2), b.t().contiguous().t()).cpu()))
        v.push_back(x);
      for (double x : values(linear(a, w, bias).cpu())) v.push_back(x);
      return v;
    };
    EXPECT_EQ(run(Device::cuda(0)), run(Device::cpu())) << dtype_name(dt);
  }
  EXPECT_EQ(total_fallbacks(), before);
}

// GradScaler's unscale as one kernel per dtype on the GPU: the CPU's gradients bit for bit and
// the same inf/NaN verdict, with no fallback.
TEST_F(Cuda, GradScalerUnscalesAsOnTheCpu) {
  const uint64_t before = total_fallbacks();
  for (bool bad : {false, true}) {
    auto run = [&](Device d) {
      std::vector<Tensor> params = {input({5000}, 34, d).detach(), input({9}, 35, d).detach().to(kBFloat16),
                                    input({3, 4}, 36, d).detach().to(kFloat64)};
      optim::SGD opt(params, {.lr = 0.0});
      for (Tensor& p : params) {
        p.requires_grad_();
        p.set_grad(p.detach() * 1000.0);
      }
      if (bad) params[1].grad().narrow(0, 7, 1).fill_(std::numeric_limits<float>::quiet_NaN());
      amp::GradScaler s({.init_scale = 3.0});
      s.unscale_(opt);
      Trace t{static_cast<double>(s.step(opt))};
      for (const Tensor& p : params) append(t, p.grad().cpu());
      return t;
    };
    const Trace gpu = run(Device::cuda(0)), cpu = run(Device::cpu());
    ASSERT_EQ(gpu.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (!(std::isnan(cpu[i]) && std::isnan(gpu[i]))) {
        EXPECT_EQ(gpu[i], cpu[i]) << i;
      }
    }
    EXPECT_EQ(cpu[0], bad ? 0.0 : 1.0);
  }
  EXPECT_EQ(total_fallbacks(), before);
}

// clip_grad_norm_'s multi-tensor norms and scaling on the GPU (more than one launch's 48
// tensors, an empty one, several chunks, three dtypes): the CPU's total and gradients, no fallback.
TEST_F(Cuda, ClipGradNormMatchesTheCpu) {
  const uint64_t before = total_fallbacks();
  for (double p : {2.0, std::numeric_limits<double>::infinity(), 1.0}) {
    auto run = [&](Device d) {
      std::vector<Tensor> params;
      for (int i = 0; i < 70; ++i) {
        const ScalarType dt = i % 10 == 3 ? kFloat64 : i % 10 == 7 ? kBFloat16 : kFloat32;
        const Shape shape = i == 5 ? Shape{0} : i == 9 ? Shape{20000} : Shape{i % 6 + 1, 5};
        Tensor g = input(shape, 40 + i, d).detach().to(dt);
        params.push_back(zeros(shape, TensorOptions(dt).device(d)).requires_grad_());
        params.back().set_grad(g);
      }
      Trace t{nn::utils::clip_grad_norm_(params, 0.5, p)};
      for (const Tensor& q : params) append(t, q.grad().cpu());
      return t;
    };
    const Trace gpu = run(Device::cuda(0)), cpu = run(Device::cpu());
    EXPECT_NEAR(gpu[0], cpu[0], 1e-5 * cpu[0]) << "total norm, p = " << p;
    expect_scaled_close(gpu, cpu, 1e-2, "clipped gradients, p = " + std::to_string(p));
  }
  EXPECT_EQ(total_fallbacks(), before);
}

// create_graph on the GPU: a gradient penalty (WGAN-GP's) of a small critic with convolution,
// batch norm, max pooling, layer norm, attention and GELU — each op's second derivative on the
// device — and the weights' gradients from it, as on the CPU, with no fallback.
TEST_F(Cuda, AGradientPenaltyMatchesTheCpuWithoutFallback) {
  const uint64_t before = total_fallbacks();
  auto run = [](Device d) {
    auto leaf = [&](Shape s, int64_t seed) { return input(s, seed, d, false).to(kFloat64).mul(0.5).requires_grad_(); };
    Tensor x = leaf({2, 3, 8, 8}, 1), w1 = leaf({4, 3, 3, 3}, 2), b1 = leaf({4}, 3), bn_w = leaf({4}, 4);
    Tensor bn_b = leaf({4}, 5), ln_w = leaf({16}, 6), wq = leaf({16, 16}, 7), head = leaf({1, 64}, 8);
    Tensor h = conv2d(x, w1, b1, {1, 1}, {1, 1});
    h = max_pool2d(batch_norm(h, {}, {}, bn_w, bn_b, true), {2, 2});  // [2, 4, 4, 4]
    h = layer_norm(h.reshape({2, 4, 16}), {16}, ln_w);
    h = gelu(scaled_dot_product_attention(linear(h, wq), h, h));
    Tensor critic = linear(h.reshape({2, 64}), head).sum();
    Tensor gx = autograd::grad({critic}, {x}, {}, false, false, /*create_graph=*/true)[0];
    Tensor penalty = (gx.square().sum().sqrt() - 1.0).square();
    std::vector<Tensor> params{w1, b1, bn_w, bn_b, ln_w, wq, head};
    std::vector<Tensor> grads = autograd::grad({penalty}, params);
    Trace t{penalty.item<double>()};
    for (const Tensor& g : grads) append(t, g.cpu());
    return t;
  };
  const Trace gpu = run(Device::cuda(0)), cpu = run(Device::cpu());
  EXPECT_NEAR(gpu[0], cpu[0], 1e-9 * std::abs(cpu[0]));
  expect_scaled_close(gpu, cpu, 1e-8, "the penalty's gradients in the weights");
  EXPECT_EQ(total_fallbacks(), before);
}

// dropout's fused kernels: values, gradient and the generator's next numbers bit for bit the
// CPU's in every float dtype, channels-last and an odd length (a partial Philox counter), with no
// fallback.
TEST_F(Cuda, DropoutIsTheCpusBitForBit) {
  const uint64_t before = total_fallbacks();
  for (ScalarType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    auto run = [&](Device d) {
      Tensor x = input({2, 8, 6, 6}, 20, d).detach().to(dt).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
      manual_seed(21);
      Tensor y = dropout(x, 0.3);
      (y * x.detach()).sum().backward();
      Trace t;
      append(t, y);
      append(t, x.grad());
      append(t, dropout(x.detach().reshape({-1}).narrow(0, 1, 501), 0.6));
      append(t, rand({5}, TensorOptions().device(d)));
      return t;
    };
    EXPECT_EQ(run(Device::cuda(0)), run(Device::cpu()));
  }
  EXPECT_EQ(total_fallbacks(), before);
}

// C++ numbers (and 0-d CPU tensors) reach the binary kernels as kernel arguments, on either
// side, in place or not, with the CPU's results in every dtype; dense operands (the vectorised
// kernels, 185 elements: a tail of 1), misaligned and strided ones alike.
TEST_F(Cuda, NumbersGoToBinaryKernelsByValueWithTheCpusResults) {
  const uint64_t before = total_fallbacks();
  manual_seed(5);
  const Tensor base = randn({37, 5}).mul(4);
  for (ScalarType dt : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64}) {
    SCOPED_TRACE(dtype_name(dt));
    auto results = [&](Device d) {
      Tensor a = base.to(dt).to(d).t();  // non-contiguous
      Tensor inplace = a.clone();
      inplace.mul_(3).sub_(1);
      if (dt != kInt64) inplace.div_(2);
      Tensor c = base.to(dt).to(d), odd = c.flatten().narrow(0, 1, 183);  // dense (vectorised) and misaligned
      std::vector<Tensor> r{a * 3, 2 - a, a + 1, a / 4, 7 / (a.abs() + 1), a > 1, a <= 0, a + full({}, 2.0),
                            a.maximum(zeros({}, dt)), inplace, c * 3, c + c, c > 0, -c, odd * odd, odd + 1,
                            c.to(kFloat32), c.to(kFloat16),
                            // numbers with no exact 16-bit value stay float32 (PyTorch's opmath)
                            a * 0.1, a / 65536, 0.3 / (a.abs() + 1), c * 1e-3};
      std::vector<std::vector<double>> v;
      for (const Tensor& t : r) v.push_back(values(t.cpu()));
      return v;
    };
    const auto cpu = results(Device::cpu()), gpu = results(Device::cuda(0));
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_EQ(gpu[i], cpu[i]) << "expression " << i;
  }
  EXPECT_EQ(total_fallbacks(), before);
}

TEST_F(Cuda, PinnedTensorsAndBatchesTravelToTheGpu) {
  Tensor x = arange(24, kFloat32).reshape({4, 6}).t();
  Tensor p = x.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_TRUE(p.pin_memory().is_same(p));
  EXPECT_EQ(values(p), values(x));
  EXPECT_EQ(values(p.to(Device::cuda(0)).cpu()), values(x));
  data::TensorDataset ds(arange(12, kFloat32).reshape({6, 2}), arange(6, kInt64));
  data::DataLoader loader(ds, {.batch_size = 4, .num_workers = 1, .pin_memory = true});
  for (data::Batch& b : loader) {
    EXPECT_TRUE(b.data.is_pinned());
    EXPECT_EQ(values(b.data.to(Device::cuda(0)).cpu()), values(b.data));
  }
}

// torch's stream rule for backward: each op's backward runs on the stream its forward ran on
// (a side stream here), whatever stream backward() is called on, and when backward returns the
// caller's stream may read .grad(). The stand-in device checks the waits themselves
// (tests/test_backward_streams.cpp). Its own suite: the stand-in's dry run (Cuda.*) has no streams.
class CudaStreams : public Cuda {};
TEST_F(CudaStreams, BackwardRunsEachOpOnTheStreamItsForwardRanOn) {
  const cuda::Stream side = cuda::Stream::create();
  manual_seed(7);
  Tensor host = randn({192, 192}, kFloat64);
  Tensor x = host.to(Device::cuda(0)).requires_grad_();
  Tensor y;
  {
    cuda::StreamGuard guard(side);
    y = x.matmul(x).tanh();
  }
  cuda::current_stream().wait(side);  // the caller's stream reads y (the sum) after the forward
  void* seen = nullptr;
  y.register_hook([&](const Tensor&) { seen = cuda::current_stream().native(); });
  y.sum().backward();
  EXPECT_EQ(seen, side.native());
  EXPECT_EQ(cuda::current_stream(), cuda::Stream::default_stream());
  Tensor xr = host.clone().requires_grad_();
  xr.matmul(xr).tanh().sum().backward();
  expect_scaled_close(values(x.grad().cpu()), values(xr.grad()), 1e-10, "x.grad");
}

// Attention on each path against the CPU with no fallback, in every float dtype: the composed
// path (cuBLASLt products; for 16-bit inputs on the tensor cores, float32 scores, probabilities
// and score gradients rounded to 16 bits), the same in several chunks of heads, and the fused
// kernels (16-bit inputs on float32 copies), the last two reached with small shapes by lowering
// KILN_ATTENTION_SCORE_BUDGET; bool and float masks, causality, dropout (the same kept scores on
// both devices), broadcast keys.
TEST_F(Cuda, AttentionOnEveryPathMatchesTheCpuWithoutFallback) {
  struct Shapes {
    const char* name;
    Shape q, kv;
    const char* budget;  // KILN_ATTENTION_SCORE_BUDGET, bytes (nullptr: the default)
  };
  // 40 x 56 scores hold at most 26880 bytes a head in backward (float64: 43008): 50 kB takes one
  // or two heads a chunk; 520 x 512 scores are over 1 MB a head in every dtype.
  const Shapes shapes[] = {{"composed", {2, 3, 40, 32}, {2, 3, 56, 32}, nullptr},
                           {"composed, one key head for all", {2, 3, 40, 32}, {2, 1, 56, 32}, nullptr},
                           {"composed in chunks of heads", {2, 3, 40, 32}, {2, 3, 56, 32}, "50000"},
                           {"fused", {1, 2, 520, 64}, {1, 2, 512, 64}, "1000000"}};
  const uint64_t before = total_fallbacks();
  for (ScalarType dt : {kFloat64, kFloat32, kBFloat16, kFloat16}) {
    // 16-bit: the composed path rounds P and dS to 16 bits for its tensor-core products, as flash
    // attention does; emulated in numpy on these inputs that alone puts bfloat16's grad q 3.8% of
    // its largest element from float64's (the CPU's float32 reference: 0.3%), as the H200 showed.
    const double tol = dt == kFloat64 ? 1e-10 : dt == kFloat32 ? 1e-4 : dt == kBFloat16 ? 5e-2 : 1e-2;
    for (const Shapes& sh : shapes) {
      ScopedEnv budget("KILN_ATTENTION_SCORE_BUDGET", sh.budget);
      for (int variant = 0; variant < 4; ++variant) {
        auto run = [&](Device d) {
          Tensor q = input(sh.q, 61, d).detach().to(dt).requires_grad_();
          Tensor k = input(sh.kv, 62, d).detach().to(dt).requires_grad_();
          Tensor v = input(sh.kv, 63, d).detach().to(dt).requires_grad_();
          const int64_t L = sh.q[2], S = sh.kv[2];
          Tensor mask;
          if (variant == 1) mask = (arange(S).to(d) < S - 7).reshape({1, 1, 1, S});
          if (variant == 2) mask = input({L, S}, 64, d, false).mul(0.5).to(dt);  // bool or q's dtype, as torch
          manual_seed(5);
          Tensor y = scaled_dot_product_attention(q, k, v, mask, variant == 3 ? 0.2 : 0.0, variant == 1);
          Tensor w = input(y.shape(), 65, d, false).to(dt);
          (y * w).sum().backward();
          std::vector<std::vector<double>> parts;
          for (const Tensor& t : {y, q.grad(), k.grad(), v.grad()}) parts.push_back(values(t.to(kFloat64).cpu()));
          return parts;
        };
        const auto got = run(Device::cuda(0)), want = run(Device::cpu());
        const char* part_names[] = {"output", "grad q", "grad k", "grad v"};
        for (size_t i = 0; i < 4; ++i)
          expect_scaled_close(got[i], want[i], tol,
                              std::string(dtype_name(dt)) + " " + sh.name + " variant " + std::to_string(variant) +
                                  " " + part_names[i]);
      }
    }
  }
  EXPECT_EQ(total_fallbacks(), before);
}

// Embedding's gradient where rows are picked thousands of times (as token_type_ids put 8192
// positions on two rows), which the GPU sums in parallel segments: the CPU's bits, in every float dtype,
// with and without a padding row, and index_select's backward (the same kernel).
TEST_F(Cuda, EmbeddingGradientOfFrequentRowsIsTheCpusBitForBit) {
  const uint64_t before = total_fallbacks();
  // Row 0 at every 7th position (1,171), row 2 + j % 28 at every 13th (few each), row 1 elsewhere.
  std::vector<int64_t> id_values(8192);
  for (int64_t j = 0; j < 8192; ++j) id_values[static_cast<size_t>(j)] = j % 7 == 0 ? 0 : j % 13 == 0 ? 2 + j % 28 : 1;
  const Tensor ids_cpu = tensor(id_values, {64, 128}, kInt64);
  for (ScalarType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    for (const int64_t padding : {int64_t{-1}, int64_t{1}}) {
      auto run = [&](Device d) {
        Tensor table = input({30, 96}, 71, d).detach().to(dt).requires_grad_();
        Tensor ids = ids_cpu.to(d);
        Tensor g = input({64, 128, 96}, 73, d, false).to(dt);
        embedding(table, ids, padding).backward(g);
        Tensor rows = input({8192, 96}, 74, d).detach().to(dt).requires_grad_();
        rows.index_select(0, ids.reshape({8192}).add(5)).backward(g.reshape({8192, 96}));
        return std::vector<std::vector<double>>{values(table.grad().to(kFloat64).cpu()),
                                                values(rows.grad().to(kFloat64).cpu())};
      };
      const auto got = run(Device::cuda(0)), want = run(Device::cpu());
      EXPECT_EQ(got[0], want[0]) << dtype_name(dt) << " embedding, padding " << padding;
      EXPECT_EQ(got[1], want[1]) << dtype_name(dt) << " index_select";
    }
  }
  EXPECT_EQ(total_fallbacks(), before);
}

// A NaN in q (one row) or in k (key 0, which every causal row sees) gives NaN exactly where the
// CPU gives it, on the composed path and on the fused kernels (whose running maximum once passed
// NaN scores over, giving zeros), in float32 and bfloat16.
TEST_F(Cuda, AttentionGivesNaNWhereTheCpuDoes) {
  for (const char* budget : {static_cast<const char*>(nullptr), "1000000"}) {
    ScopedEnv env("KILN_ATTENTION_SCORE_BUDGET", budget);
    for (ScalarType dt : {kFloat32, kBFloat16}) {
      for (const bool in_key : {false, true}) {
        auto run = [&](Device d) {
          Tensor q = input({1, 2, 520, 64}, 81, d).detach(), k = input({1, 2, 512, 64}, 82, d).detach();
          Tensor v = input({1, 2, 512, 64}, 83, d).detach();
          (in_key ? k.narrow(2, 0, 1) : q.narrow(2, 5, 1)).narrow(1, 0, 1).narrow(3, 0, 1).fill_(NAN);
          q = q.to(dt).requires_grad_();
          Tensor y = scaled_dot_product_attention(q, k.to(dt), v.to(dt), {}, 0.0, in_key);
          y.sum().backward();
          std::vector<bool> nan;
          for (const Tensor& t : {y, q.grad()})
            for (double x : values(t.to(kFloat64).cpu())) nan.push_back(std::isnan(x));
          return nan;
        };
        const std::vector<bool> got = run(Device::cuda(0)), want = run(Device::cpu());
        EXPECT_EQ(got, want) << (budget ? "fused" : "composed") << " " << dtype_name(dt)
                             << (in_key ? " NaN key" : " NaN query");
        EXPECT_TRUE(std::find(want.begin(), want.end(), true) != want.end());
      }
    }
  }
}

TEST_F(Cuda, BertTinyTrainsAsOnTheCpuWithoutFallback) {
  std::vector<double> losses[2];
  int k = 0;
  for (Device d : {Device::cpu(), Device::cuda(0)}) {
    manual_seed(7);
    models::BertForMaskedLM model = models::bert_for_masked_lm(models::BertConfig::tiny());
    model->to(d);
    optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
    const uint64_t before = total_fallbacks();
    for (int64_t s = 0; s < 5; ++s) losses[k].push_back(bert_step(model, opt, d, s));
    if (d.is_cuda()) {
      EXPECT_EQ(total_fallbacks(), before) << "BERT training ran ops through the CPU fallback";
    }
    ++k;
  }
  for (size_t s = 0; s < losses[0].size(); ++s)
    EXPECT_NEAR(losses[1][s], losses[0][s], 1e-3 * std::abs(losses[0][s])) << "step " << s;
}

// ---- convolutions through cuDNN

struct ConvCase {
  const char* name;
  Shape x, w;  // input [N, C, H, W], weight [C_out, C_in / groups, kH, kW]
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};

std::vector<ConvCase> conv_cases() {
  return {{"3x3", {2, 4, 9, 9}, {6, 4, 3, 3}, 1, 1, 1, 1},
          {"groups 2", {2, 4, 8, 8}, {6, 2, 3, 3}, 1, 1, 1, 2},
          {"depthwise", {2, 8, 7, 7}, {8, 1, 3, 3}, 1, 1, 1, 8},
          {"depthwise, two outputs per channel", {2, 4, 7, 7}, {8, 1, 3, 3}, 1, 0, 1, 4},
          {"stride 2", {2, 6, 11, 11}, {8, 6, 3, 3}, 2, 1, 1, 1},
          {"dilation 2", {2, 4, 12, 12}, {5, 4, 3, 3}, 1, 2, 2, 1},
          {"1x1, stride 2", {3, 8, 6, 6}, {16, 8, 1, 1}, 2, 0, 1, 1},
          {"5x5 on one input channel", {4, 1, 10, 10}, {4, 1, 5, 5}, 1, 2, 1, 1}};
}

// Where the operands live: everything NCHW; the input channels-last with the weight as
// nn::Conv2d makes it (Kiln's usual case); both channels-last.
enum class ConvLayout { Nchw, InputChannelsLast, AllChannelsLast };
const char* layout_name(ConvLayout l) {
  return l == ConvLayout::Nchw ? "NCHW" : l == ConvLayout::InputChannelsLast ? "channels-last input" : "all channels-last";
}
constexpr ConvLayout kConvLayouts[] = {ConvLayout::Nchw, ConvLayout::InputChannelsLast, ConvLayout::AllChannelsLast};

struct ConvResult {
  std::vector<double> y, gx, gw, gb;
};

// conv2d's output and the gradients of input, weight and bias after backward of sum(y * r), on
// `device` in `dtype`. The inputs and r are drawn in float64 and rounded through `rounding`
// first, so that a float64 run on the rounded inputs is the exact answer a lower precision run
// aims at.
ConvResult conv_run(const ConvCase& c, bool bias, ConvLayout layout, ScalarType rounding, ScalarType dtype,
                    Device device) {
  manual_seed(11);
  const Tensor x64 = randn(c.x, kFloat64), w64 = randn(c.w, kFloat64), b64 = randn({c.w[0]}, kFloat64);
  auto prepare = [&](const Tensor& t, bool channels_last) {
    Tensor d = t.to(rounding).to(dtype).to(device);
    if (channels_last) d = d.contiguous(MemoryFormat::ChannelsLast);
    return d.detach().requires_grad_();
  };
  Tensor x = prepare(x64, layout != ConvLayout::Nchw), w = prepare(w64, layout == ConvLayout::AllChannelsLast),
         b = bias ? prepare(b64, false) : Tensor();
  Tensor y = conv2d(x, w, b, {c.stride, c.stride}, {c.padding, c.padding}, {c.dilation, c.dilation}, c.groups);
  manual_seed(12);
  const Tensor r = randn(y.shape(), kFloat64).to(rounding).to(dtype).to(device);
  (y * r).sum().backward();
  ConvResult out{values(y), values(x.grad()), values(w.grad()), {}};
  if (bias) out.gb = values(b.grad());
  return out;
}

void expect_conv_close(const ConvResult& got, const ConvResult& want, double tol, const std::string& what) {
  expect_scaled_close(got.y, want.y, tol, what + ", output");
  expect_scaled_close(got.gx, want.gx, tol, what + ", input gradient");
  expect_scaled_close(got.gw, want.gw, tol, what + ", weight gradient");
  expect_scaled_close(got.gb, want.gb, tol, what + ", bias gradient");
}

class CudaConv : public Cuda {
 protected:
  void SetUp() override {
    Cuda::SetUp();
    if (IsSkipped()) return;
    if (cuda::cudnn_version().empty()) GTEST_SKIP() << "built without cuDNN: convolutions run on the CPU";
  }
  CudnnSettings restore_;
};

TEST_F(CudaConv, Float32WithAndWithoutTf32AndFloat64MatchTheCpuWithoutFallback) {
  const Device cpu = Device::cpu(), gpu = Device::cuda(0);
  cudnn::set_benchmark(false);
  for (const ConvCase& c : conv_cases())
    for (bool bias : {true, false})
      for (ConvLayout layout : kConvLayouts) {
        const std::string what = std::string(c.name) + (bias ? ", bias, " : ", no bias, ") + layout_name(layout);
        const ConvResult want32 = conv_run(c, bias, layout, kFloat32, kFloat64, cpu);
        for (bool tf32 : {true, false}) {
          cudnn::set_allow_tf32(tf32);
          const uint64_t before = total_fallbacks();
          const ConvResult got = conv_run(c, bias, layout, kFloat32, kFloat32, gpu);
          EXPECT_EQ(total_fallbacks(), before) << what << " ran an op through the CPU fallback";
          // TF32 rounds each product's operands to 10 mantissa bits (PyTorch's default for convs).
          expect_conv_close(got, want32, tf32 ? 1e-2 : 1e-4, what + (tf32 ? ", float32 (TF32)" : ", float32"));
        }
        const uint64_t before = total_fallbacks();
        const ConvResult got64 = conv_run(c, bias, layout, kFloat64, kFloat64, gpu);
        EXPECT_EQ(total_fallbacks(), before) << what << " (float64) ran an op through the CPU fallback";
        expect_conv_close(got64, conv_run(c, bias, layout, kFloat64, kFloat64, cpu), 1e-10, what + ", float64");
      }
}

TEST_F(CudaConv, HalfPrecisionMatchesTheCpuWithoutFallback) {
  const std::vector<ConvCase> cases = {{"3x3", {2, 16, 8, 8}, {32, 16, 3, 3}, 1, 1, 1, 1},
                                       {"groups 2, stride 2", {2, 16, 9, 9}, {16, 8, 3, 3}, 2, 1, 1, 2},
                                       {"depthwise, dilation 2", {2, 16, 10, 10}, {16, 1, 3, 3}, 1, 2, 2, 16}};
  for (ScalarType t : {kFloat16, kBFloat16})
    for (const ConvCase& c : cases)
      for (ConvLayout layout : {ConvLayout::InputChannelsLast, ConvLayout::Nchw}) {
        std::ostringstream what;
        what << c.name << ", " << layout_name(layout) << ", " << t;
        const uint64_t before = total_fallbacks();
        const ConvResult got = conv_run(c, true, layout, t, t, Device::cuda(0));
        EXPECT_EQ(total_fallbacks(), before) << what.str() << " ran an op through the CPU fallback";
        // float32 sums; results rounded to 11 (float16) or 8 (bfloat16) significant bits.
        expect_conv_close(got, conv_run(c, true, layout, t, kFloat64, Device::cpu()), t == kBFloat16 ? 2e-2 : 1e-2,
                          what.str());
      }
}

// Benchmark mode, and cuDNN's first choice with nondeterministic algorithms allowed (PyTorch's
// default), each planned (rep 0) and from its kept plan (rep 1).
TEST_F(CudaConv, BenchmarkModeAndNondeterministicAlgorithmsMatchTheCpu) {
  cudnn::set_allow_tf32(false);
  const std::vector<ConvCase> cases = conv_cases();
  for (const bool bench : {true, false})
    for (const bool deterministic : {true, false}) {
      if (!bench && deterministic) continue;  // the other tests' setting
      cudnn::set_benchmark(bench);
      cudnn::set_deterministic(deterministic);
      const std::string mode = std::string(bench ? "benchmark mode" : "heuristics") +
                               (deterministic ? ", deterministic" : ", nondeterministic allowed");
      for (int rep = 0; rep < 2; ++rep)
        for (size_t i : {size_t{0}, size_t{2}, size_t{4}}) {
          const ConvCase& c = cases[i];
          const uint64_t before = total_fallbacks();
          const ConvResult got =
              conv_run(c, true, ConvLayout::InputChannelsLast, kFloat32, kFloat32, Device::cuda(0));
          EXPECT_EQ(total_fallbacks(), before) << c.name << " ran an op through the CPU fallback";
          expect_conv_close(got, conv_run(c, true, ConvLayout::InputChannelsLast, kFloat32, kFloat64, Device::cpu()),
                            1e-4, std::string(c.name) + ", " + mode + ", rep " + std::to_string(rep));
        }
    }
}

// Two convolutions whose tensors have the same shapes and strides and whose attributes differ in
// padding and dilation only, in turns: a plan cache keyed too loosely would mix them up.
TEST_F(CudaConv, ConvolutionsDifferingOnlyInDilationKeepTheirOwnPlans) {
  cudnn::set_allow_tf32(false);
  const ConvCase a{"padding 1, dilation 1", {2, 8, 10, 10}, {8, 8, 3, 3}, 1, 1, 1, 1};
  const ConvCase b{"padding 2, dilation 2", {2, 8, 10, 10}, {8, 8, 3, 3}, 1, 2, 2, 1};
  const ConvLayout cl = ConvLayout::InputChannelsLast;
  const ConvResult want_a = conv_run(a, false, cl, kFloat32, kFloat64, Device::cpu());
  const ConvResult want_b = conv_run(b, false, cl, kFloat32, kFloat64, Device::cpu());
  for (int rep = 0; rep < 2; ++rep) {
    expect_conv_close(conv_run(a, false, cl, kFloat32, kFloat32, Device::cuda(0)), want_a, 1e-4, a.name);
    expect_conv_close(conv_run(b, false, cl, kFloat32, kFloat32, Device::cuda(0)), want_b, 1e-4, b.name);
  }
}

// An input that is neither NCHW nor channels-last (every other column) at an offset: operands
// cuDNN cannot take as they are go through a dense copy.
TEST_F(CudaConv, StridedInputsAtAnOffsetAreCopiedDense) {
  cudnn::set_allow_tf32(false);
  manual_seed(21);
  const Tensor x64 = randn({3, 6, 12, 14}, kFloat64), w64 = randn({4, 6, 3, 3}, kFloat64), b64 = randn({4}, kFloat64);
  auto view = [](const Tensor& t) { return t.narrow(0, 1, 2).slice(3, 1, 13, 2); };  // [2, 6, 12, 6]
  auto rounded = [](const Tensor& t) { return t.to(kFloat32).to(kFloat64); };
  const Tensor want = conv2d(view(rounded(x64)), rounded(w64), rounded(b64), {1, 1}, {1, 1});
  const Device gpu = Device::cuda(0);
  const uint64_t before = total_fallbacks();
  const Tensor got = conv2d(view(x64.to(gpu, kFloat32)), w64.to(gpu, kFloat32), b64.to(gpu, kFloat32), {1, 1}, {1, 1});
  EXPECT_EQ(total_fallbacks(), before);
  expect_scaled_close(values(got), values(want), 1e-4, "strided input at an offset");
}

}  // namespace
}  // namespace kiln::test
