// The CUDA backend. Without a GPU (CI): every op that BERT pre-training dispatches has a CUDA
// kernel in a CUDA build, and pinning memory is a clear error. With a GPU: every op family of
// the transformer path gives the CPU's numbers with no fallback, the same seed gives the same
// random numbers on both devices, pinned batches travel, and BERT-tiny trains as on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kiln/kiln.h"
#include "op_families.h"
#include "test_util.h"

namespace kiln::test {
namespace {

uint64_t total_fallbacks() {
  uint64_t n = 0;
  for (const auto& [op, count] : fallback_counts()) n += count;
  return n;
}

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

TEST(CudaKernelTable, EveryOpOfBertPretrainingHasACudaKernel) {
  if (!build_info().cuda) GTEST_SKIP() << "built without CUDA";
  std::vector<std::string> ops;
  {
    manual_seed(0);
    models::BertForMaskedLM model = models::bert_for_masked_lm(models::BertConfig::tiny());
    optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
    profiler::Session session({.timing = false});
    bert_step(model, opt, Device::cpu(), 0);
    for (const profiler::OpStat& s : session.stats()) ops.push_back(s.op);
  }
  ASSERT_GT(ops.size(), 10u);
  const std::vector<std::string> missing = ops_without_kernel(ops, DeviceType::CUDA);
  std::string names;
  for (const auto& m : missing) names += " " + m;
  EXPECT_TRUE(missing.empty()) << missing.size() << " of the " << ops.size()
                               << " op kinds of a BERT training step have no CUDA kernel:" << names;
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

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(Cuda, EveryTransformerOpFamilyMatchesTheCpuWithoutFallback) {
  const Device gpu = Device::cuda(0);
  for (const Case& c : op_families()) {
    const Trace want = c.run(Device::cpu());
    const uint64_t before = total_fallbacks();
    const Trace got = c.run(gpu);
    if (c.transformer_path)
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
                    +[](Device d) { return dropout(ones({513}, TensorOptions().device(d)), 0.3); }}) {
    manual_seed(123);
    const std::vector<double> cpu = values(make(Device::cpu()));
    manual_seed(123);
    EXPECT_EQ(values(make(gpu).cpu()), cpu);
  }
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
    if (d.is_cuda()) EXPECT_EQ(total_fallbacks(), before) << "BERT training ran ops through the CPU fallback";
    ++k;
  }
  for (size_t s = 0; s < losses[0].size(); ++s)
    EXPECT_NEAR(losses[1][s], losses[0][s], 1e-3 * std::abs(losses[0][s])) << "step " << s;
}

}  // namespace
}  // namespace kiln::test
