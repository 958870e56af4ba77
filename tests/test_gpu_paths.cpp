// The GPU training paths, checked without a GPU: a stand-in "cuda:0" backed by host memory whose
// kernels are the CPU's, registered exactly for the ops that have a CUDA kernel in this build and
// offered to them through the CUDA kernels' own `supports` rules (tests/stand_in_device.h). What
// this proves about a real GPU:
//  - every op the trainers and the seed's models dispatch has a CUDA kernel that takes its case
//    (zero CPU fallbacks, what KILN_FALLBACK=error asks of issues 13 and 14), in float32,
//    bfloat16 and float16 autocast, training and evaluation;
//  - the op layer's device paths compute what its CPU paths do (the same kernels run, so a
//    training run on the stand-in equals the CPU's bit for bit, random numbers included);
//  - how often a training step reads device memory from the host (each read waits for the GPU).
// It does not check the CUDA kernels themselves: the Cuda.* tests do, on a GPU.
#include <memory>
#include <string>
#include <vector>

#include "data_util.h"
#include "kiln/amp.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/dataset.h"
#include "kiln/models.h"
#include "kiln/nn/functional.h"
#include "kiln/nn/utils.h"
#include "kiln/optim.h"
#include "kiln/train/image_classification.h"
#include "kiln/train/masked_lm.h"
#include "stand_in_device.h"
#include "test_util.h"
#include "tools/kiln/bench_runner.h"

namespace kiln::test {
namespace {

namespace F = nn::functional;

std::string describe_fallbacks(const std::map<std::string, uint64_t>& before) {
  std::string s;
  for (const auto& [op, count] : fallback_counts())
    if (auto it = before.find(op); count != (it == before.end() ? 0 : it->second))
      s += " " + op + " x" + std::to_string(count - (it == before.end() ? 0 : it->second));
  return s.empty() ? "none" : s;
}

class GpuPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: the Cuda.* tests run these paths there";
    stand_in_ = std::make_unique<StandInCuda>(StandInCuda::Kernels::CpuWhereCudaHasOne);
    if (stand_in_->native_ops() == 0) {
      stand_in_.reset();  // nothing ran: TearDown has nothing to check
      GTEST_SKIP() << "built without CUDA kernels";
    }
    fallbacks_ = fallback_counts();
  }
  void TearDown() override {
    if (stand_in_) {
      EXPECT_EQ(describe_fallbacks(fallbacks_), "none") << "ops that would fall back to the CPU";
    }
    stand_in_.reset();
  }
  HostBackedRuntime& runtime() { return stand_in_->runtime(); }

  std::unique_ptr<StandInCuda> stand_in_;
  std::map<std::string, uint64_t> fallbacks_;
};

struct TrainingRun {
  std::vector<double> losses;
  std::vector<int> reads;  // the host's reads of device memory in each step
  train::EvalResult eval;
};

// The losses are read after the run: reading one in a step is a read of device memory.
TrainingRun fit(train::Task& task, HostBackedRuntime* rt) {
  train::Trainer trainer(task);
  TrainingRun run;
  std::vector<train::StepInfo> steps;
  int before = rt ? rt->to_host : 0;
  trainer.fit({.on_step =
                   [&](const train::StepInfo& s) {
                     steps.push_back(s);
                     if (rt) run.reads.push_back(rt->to_host - before), before = rt->to_host;
                   },
               .on_epoch = [&](int64_t, const train::EvalResult& r) { run.eval = r; }});
  for (const train::StepInfo& s : steps) run.losses.push_back(s.loss_value());
  return run;
}

// A short bert-tiny run on dir's corpus, and a short image run on dir's MNIST-like files.
train::MaskedLMOptions mlm_options(const TempDir& dir, const std::string& device, const std::string& amp) {
  train::MaskedLMOptions o;
  o.model = "bert-tiny";
  o.data = dir.file("corpus");
  o.checkpoint_dir = dir.file("ck-mlm-" + device + amp);
  o.vocab_size = 100;
  o.seq_len = 32;
  o.batch_size = 8;
  o.epochs = 1;
  o.max_steps = 3;
  o.eval_every = 0;
  o.device = device;
  o.amp = amp;
  o.seed = 3;
  return o;
}

train::ImageClassificationOptions image_options(const TempDir& dir, const std::string& device, const std::string& amp,
                                                const std::string& model = "small_cnn") {
  train::ImageClassificationOptions o;
  o.model = model;
  o.data = dir.str();
  o.checkpoint_dir = dir.file("ck-image-" + model + device + amp);
  o.epochs = 1;
  o.batch_size = 8;
  o.workers = 0;
  o.device = device;
  o.amp = amp;
  return o;
}

// A CUDA kernel whose supports rule does not take the arguments (a sum over 26 dims, past the
// reduce plan's 25) falls back to the CPU with a warning that says so and names the arguments,
// not "has no kernel"; the result is the CPU's.
TEST(FallbackReason, ARefusedKernelIsReportedWithItsArguments) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  Shape shape(26, 1);
  shape[0] = 3, shape[25] = 2;
  Tensor x = arange(6, kFloat32).reshape(shape);
  const uint64_t before = fallback_counts()["Sum"];
  testing::internal::CaptureStderr();
  Tensor s = x.to(Device::cuda(0)).sum();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.cpu().item<float>(), 15.0f);
  EXPECT_EQ(fallback_counts()["Sum"], before + 1);
  // Warned once per op and reason in a process: another test may have warned first.
  if (!err.empty()) {
    EXPECT_NE(err.find("[Sum] the cuda:0 kernel does not take these arguments (float32 [3, 1, 1,"), std::string::npos)
        << err;
  }
}

// A data set of GPU tensors with workers is an error naming the way out: a worker's thread would
// make the batch on its own stream, unordered with the training loop's. Without workers it works.
TEST(DataLoaderDevice, WorkersRefuseGpuBatchesAndTheLoopThreadTakesThem) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  data::TensorDataset ds(arange(12, kFloat32).reshape({6, 2}).to(Device::cuda(0)), arange(6, kInt64).to(Device::cuda(0)));
  data::DataLoader with_workers(ds, {.batch_size = 4, .num_workers = 1});
  expect_error(
      [&] {
        for (data::Batch& b : with_workers) (void)b;
      },
      "workers (num_workers > 0) build batches on the CPU, but batch 0 is on cuda:0");
  data::DataLoader in_loop(ds, {.batch_size = 4});
  int64_t rows = 0;
  for (data::Batch& b : in_loop) {
    EXPECT_EQ(b.data.device(), Device::cuda(0));
    rows += b.data.size(0);
  }
  EXPECT_EQ(rows, 6);
}

// AutocastGuard(kCUDA, ...) is torch.autocast("cuda"): the GPU's matmul and loss follow it, a CPU
// metric computed in the same region keeps its float32 (on a real GPU or the stand-in).
TEST(AutocastDevice, ACudaGuardChangesOnlyOpsOnCudaTensors) {
  std::unique_ptr<StandInCuda> stand_in;
  if (!cuda::is_available()) stand_in = std::make_unique<StandInCuda>(StandInCuda::Kernels::CpuWhereCudaHasOne);
  manual_seed(5);
  Tensor a = randn({3, 4}), b = randn({4, 5});
  const Tensor ga = a.to(Device::cuda(0)), gb = b.to(Device::cuda(0));
  AutocastGuard guard(kCUDA, kBFloat16);
  Tensor logits = matmul(ga, gb);
  EXPECT_EQ(logits.dtype(), kBFloat16);
  EXPECT_EQ(nn::functional::cross_entropy(logits, arange(3, kInt64).to(Device::cuda(0))).dtype(), kFloat32);
  EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
  EXPECT_EQ(softmax(a.to(kBFloat16), 1).dtype(), kBFloat16);
  EXPECT_EQ(softmax(ga.to(kBFloat16), 1).dtype(), kFloat32);
}

// The masked-LM trainer (kiln train --model bert-*): AdamW, dropout, padding masks, clipping,
// warm-up, held-out evaluation; in float32 and both autocast types (fp16 with a GradScaler).
TEST_F(GpuPaths, TheMaskedLmTrainerRunsOnTheGpuAsOnTheCpu) {
  TempDir dir;
  write_grammar_corpus(dir.file("corpus"), 40);
  for (const char* amp : {"", "bf16", "fp16"}) {
    SCOPED_TRACE(std::string("amp ") + amp);
    train::MaskedLM on_cpu(mlm_options(dir, "cpu", amp)), on_gpu(mlm_options(dir, "cuda", amp));
    const TrainingRun cpu = fit(on_cpu, nullptr), gpu = fit(on_gpu, &runtime());
    EXPECT_EQ(on_gpu.model()->parameters()[0].device(), Device::cuda(0));
    ASSERT_EQ(gpu.losses.size(), 3u);
    EXPECT_EQ(gpu.losses, cpu.losses);
    EXPECT_EQ(gpu.eval.loss, cpu.eval.loss);
    // A step waits for the GPU only with fp16, for GradScaler's inf/NaN flag (once, in unscale_;
    // torch's GradScaler.step reads it too): the masked positions are found in the host's labels,
    // the clipping norm stays a tensor, and the loss is the caller's to read.
    for (int reads : gpu.reads) EXPECT_EQ(reads, std::string(amp) == "fp16" ? 1 : 0);
  }
}

// The image trainer (kiln train, the main job): the data loader's pinned batches, SGD with
// momentum and weight decay, the one-cycle schedule, evaluation.
TEST_F(GpuPaths, TheImageTrainerRunsOnTheGpuAsOnTheCpu) {
  TempDir dir;
  write_mnist_like(dir, "train", 16);
  write_mnist_like(dir, "t10k", 8);
  for (const char* amp : {"", "fp16"}) {
    SCOPED_TRACE(std::string("amp ") + amp);
    train::ImageClassification on_cpu(image_options(dir, "cpu", amp)), on_gpu(image_options(dir, "cuda", amp));
    const TrainingRun cpu = fit(on_cpu, nullptr), gpu = fit(on_gpu, &runtime());
    ASSERT_EQ(gpu.losses.size(), 2u);
    EXPECT_EQ(gpu.losses, cpu.losses);
    EXPECT_EQ(gpu.eval.accuracy, cpu.eval.accuracy);
    EXPECT_EQ(gpu.eval.loss, cpu.eval.loss);
    // Only fp16's GradScaler flag.
    for (int reads : gpu.reads) EXPECT_EQ(reads, std::string(amp) == "fp16" ? 1 : 0);
  }
}

// One training step and one evaluation of each CNN family of the seed's benchmark (ResNet-50 and
// VGG-16 use the ops of their small siblings), channels-last, with GradScaler's path.
TEST_F(GpuPaths, TheSeedsCnnsTrainAndEvaluateWithoutFallback) {
  for (const char* name : {"resnet18", "vgg11_bn"}) {
    // VGG's ops in 16 bits are ResNet's and BERT's (whose linear layers and dropout run above).
    for (ScalarType dtype : {kFloat32, kBFloat16, kFloat16}) {
      if (std::string(name) == "vgg11_bn" && dtype != kFloat32) continue;
      SCOPED_TRACE(std::string(name) + " " + dtype_name(dtype));
      auto step = [&](Device device) {
        manual_seed(4);
        nn::AnyModule net = models::create(name, 10);
        net.ptr()->to(device);
        optim::SGD opt(net.ptr()->parameters(), {.lr = 1e-3, .momentum = 0.9, .weight_decay = 1e-4});
        amp::GradScaler scaler;
        const Tensor x = randn({2, 3, 32, 32}).to(device).contiguous(MemoryFormat::ChannelsLast);
        const Tensor y = randint(0, 10, {2}, kInt64).to(device);
        Tensor loss;
        {
          AutocastGuard autocast(dtype == kFloat32 ? kBFloat16 : dtype, dtype != kFloat32);
          loss = F::cross_entropy(net(x), y);
        }
        const int reads = runtime().to_host;
        scaler.scale(loss).backward();
        scaler.unscale_(opt);
        scaler.step(opt);
        scaler.update();
        if (device.is_cuda()) {
          EXPECT_EQ(runtime().to_host - reads, 1);  // GradScaler's flag, once
        }
        net.ptr()->eval();
        NoGradGuard ng;
        AutocastGuard autocast(dtype == kFloat32 ? kBFloat16 : dtype, dtype != kFloat32);
        return std::vector<Tensor>{loss.cpu(), net(x).cpu(), net.ptr()->parameters()[0].detach().cpu()};
      };
      const std::vector<Tensor> cpu = step(Device::cpu()), gpu = step(Device::cuda(0));
      for (size_t i = 0; i < cpu.size(); ++i) EXPECT_EQ(values(gpu[i]), values(cpu[i])) << i;
    }
  }
}

// Shadow mode (KILN_SHADOW=cpu, gpu-check.sh's shadowed steps) over whole training runs: every
// device op runs again on the CPU and is compared; here the "device" kernels are the CPU's, so
// any mismatch is shadow mode's own (an in-place op, a view, an op with several outputs).
TEST_F(GpuPaths, ShadowModeFollowsWholeTrainingRuns) {
  backend::set_shadow_mode(backend::ShadowMode::Error);
  struct Off {
    ~Off() { backend::set_shadow_mode(backend::ShadowMode::Off); }
  } off;
  TempDir dir;
  write_grammar_corpus(dir.file("corpus"), 20);
  write_mnist_like(dir, "train", 16);
  write_mnist_like(dir, "t10k", 8);
  const int reads = runtime().to_host;
  const auto mismatches = backend::shadow_mismatches();  // earlier tests' planted ones, in one process
  for (const char* amp : {"", "fp16"}) {  // fp16: GradScaler's in-place multi-tensor unscale
    SCOPED_TRACE(std::string("amp ") + amp);
    train::MaskedLM mlm(mlm_options(dir, "cuda", amp));
    EXPECT_NO_THROW(fit(mlm, nullptr));
    if (*amp) continue;  // the CNN's ops in float16 are its float32 ones in structure
    train::ImageClassification cnn(image_options(dir, "cuda", amp, "resnet18"));
    EXPECT_NO_THROW(fit(cnn, nullptr));
  }
  EXPECT_EQ(backend::shadow_mismatches(), mismatches);
  EXPECT_GT(runtime().to_host - reads, 2000) << "shadow mode copied few device results to compare";
}

// The loader's workers pin batches for the GPU with that GPU current in their own threads (with
// none current, each pinned allocation would make a context on GPU 0).
TEST_F(GpuPaths, PinningWorkersMakeTheGpuCurrent) {
  data::DataLoader loader(data::TensorDataset(arange(40, kFloat32).reshape({10, 4}), arange(10, kInt64)),
                          {.batch_size = 4, .num_workers = 2, .pin_memory = true});
  ASSERT_TRUE(loader.options().pin_memory);
  int64_t batches = 0;
  for (auto& batch : loader) {
    EXPECT_TRUE(batch.data.is_pinned());
    EXPECT_TRUE(batch.target.is_pinned());
    EXPECT_EQ(values(batch.data.to(Device::cuda(0)).cpu()), values(batch.data));
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  EXPECT_GE(runtime().worker_device_sets.load(), 3);  // before each batch's pinning
}

// kiln bench --devices cuda: the benchmark's workloads (BERT's, ResNet's, the attention's, ResNet's batch norm and
// max pooling alone) in each of its dtypes,
// with a per-op profile, on the GPU path (a CNN in float16 is left out: 224-pixel images in
// float16 take long on a CPU, and the CNN test above runs its ops).
TEST_F(GpuPaths, TheBenchmarksWorkloadsRunWithoutFallback) {
  for (const char* model : {"bert-tiny", "resnet18", "sdpa", "bn-relu", "maxpool"}) {
    for (const char* mode : {"train", "eval"}) {
      for (const char* dtype : {"fp32", "tf32", "bf16", "fp16"}) {
        if (std::string(model) == "resnet18" && std::string(dtype) == "fp16") continue;
        SCOPED_TRACE(std::string(model) + " " + mode + " " + dtype);
        cli::bench::RunSpec spec{model, mode, "cuda:0", dtype};
        spec.batch = 2;
        spec.seq = 16;
        spec.warmup = 0;
        spec.steps = 1;
        spec.profile = std::string(dtype) == "fp32";
        const cli::bench::RunResult r = cli::bench::run(spec);
        ASSERT_EQ(r.step_s.size(), 1u);
        EXPECT_EQ(r.gpu.value_or(""), "host-backed test device");
        EXPECT_GT(r.peak_bytes, 0);
        EXPECT_EQ(r.profile.empty(), !spec.profile);
      }
    }
  }
}

}  // namespace
}  // namespace kiln::test
