// The device plumbing without a GPU: a stand-in "cuda:0" backed by host memory exercises
// tensor.to(device), cross-device copies and the CPU fallback with its counts.
#include <memory>

#include "backend/cuda/arch_support.h"
#include "backend/dispatch.h"
#include "kiln/cudnn.h"
#include "kiln/models.h"
#include "kiln/nn/functional.h"
#include "kiln/optim.h"
#include "kiln/train/device_choice.h"
#include "stand_in_device.h"
#include "test_util.h"

using namespace kiln;

namespace {

// The stand-in takes the CUDA slot (tests/stand_in_device.h), so every op goes through the fallback.
class Fallback : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present; the stand-in device is not needed";
    stand_in_ = std::make_unique<test::StandInCuda>();
  }
  void TearDown() override {
    if (!stand_in_) return;
    backend::set_shadow_mode(backend::ShadowMode::Off);
    stand_in_.reset();
  }
  std::unique_ptr<test::StandInCuda> stand_in_;
};

}  // namespace

TEST_F(Fallback, ToDeviceAndBackKeepsValues) {
  Tensor x = arange(12, kFloat32).reshape({3, 4});
  Tensor d = x.to(Device::cuda(0));
  EXPECT_EQ(d.device(), Device::cuda(0));
  EXPECT_GT(stand_in_->runtime().copies(), 0);
  test::expect_close(d.t().cpu(), test::values(x.t()), {4, 3});  // a non-contiguous device view
  EXPECT_GT(memory_stats(Device::cuda(0)).allocated, 0u);
}

// A CUDA device named without an index is the current one, as in libtorch: after set_device(1),
// "cuda", kCUDA, Device::cuda() and x.cuda() mean cuda:1 (they meant cuda:0, so a ported
// data-parallel script put every rank on GPU 0). Copies between two devices keep the values.
TEST_F(Fallback, AnIndexlessCudaDeviceIsTheCurrentOne) {
  stand_in_->runtime().devices = 2;
  struct Restore {
    ~Restore() { cuda::set_device(0); }
  } restore;
  EXPECT_FALSE(Device("cuda").has_index());
  EXPECT_EQ(Device("cuda").str(), "cuda");
  EXPECT_EQ(Device("cuda").resolved(), Device::cuda(0));
  cuda::set_device(1);
  EXPECT_EQ(Device("cuda").resolved(), Device::cuda(1));
  test::expect_error([] { (void)Device::cuda(-5).resolved(); }, "[Device] device index -5 is not a device");
  test::expect_error([] { cuda::set_device(-1); }, "device cuda:-1 does not exist (2 present)");
  const Tensor x = tensor({1.0, 2.0});
  for (const Tensor& t : {x.cuda(), x.to(Device("cuda")), x.to(kCUDA), x.to(Device::cuda(), kFloat64),
                          zeros({2}, kCUDA), empty_like(x, TensorOptions(kCUDA))}) {
    EXPECT_EQ(t.device(), Device::cuda(1));
    EXPECT_TRUE(t.is_cuda());
    EXPECT_EQ(t.get_device(), 1);
  }
  EXPECT_EQ(x.get_device(), -1);
  EXPECT_TRUE(x.is_cpu());
  nn::Linear lin(2, 2);
  lin->to(Device("cuda"));
  EXPECT_EQ(lin->weight.device(), Device::cuda(1));
  // cuda:0 to cuda:1 and back (a device-to-device copy between two devices), values kept.
  const Tensor on0 = x.to(Device::cuda(0));
  const Tensor on1 = on0.to(Device::cuda(1));
  EXPECT_EQ(on1.device(), Device::cuda(1));
  EXPECT_EQ(test::values(on1.to(Device::cuda(0))), test::values(x));
  EXPECT_TRUE(on1.to(Device("cuda")).is_same(on1));  // already on the current device
}

// torch.cuda's device context and memory functions, through the runtime (the stand-in here): the
// guard restores the device, the fields of memory_stats under torch's names, the peak of reserved
// bytes, the device's free memory and the summary.
TEST_F(Fallback, TorchCudaDeviceAndMemoryFunctions) {
  stand_in_->runtime().devices = 2;
  struct Restore {
    ~Restore() { cuda::set_device(0); }
  } restore;
  {
    cuda::DeviceGuard g(1);
    EXPECT_EQ(cuda::current_device(), 1);
    {
      cuda::DeviceGuard current(-1);
      EXPECT_EQ(cuda::current_device(), 1);
    }
    EXPECT_EQ(cuda::current_device(), 1);
  }
  EXPECT_EQ(cuda::current_device(), 0);
  test::expect_error([] { cuda::DeviceGuard g(2); }, "[cuda::DeviceGuard] device cuda:2 does not exist (2 present)");
  EXPECT_EQ(cuda::current_device(), 0);

  cuda::empty_cache();
  cuda::reset_peak_memory_stats();
  const size_t before = cuda::memory_allocated();
  constexpr size_t kBig = size_t{4} << 20;
  {
    const Tensor big = zeros({int64_t{1} << 20}, kCUDA);  // 4 MiB
    EXPECT_GE(cuda::memory_allocated(), before + kBig);
  }
  const MemoryStats m = cuda::memory_stats();
  EXPECT_EQ(cuda::memory_allocated(), m.allocated);
  EXPECT_EQ(cuda::max_memory_allocated(), m.peak);
  EXPECT_GE(m.peak, before + kBig);
  EXPECT_EQ(cuda::memory_reserved(), m.reserved);
  EXPECT_EQ(cuda::max_memory_reserved(), m.peak_reserved);
  EXPECT_GE(m.peak_reserved, kBig);
  cuda::empty_cache();
  EXPECT_LE(cuda::memory_reserved() + kBig, cuda::max_memory_reserved());  // gone; its peak stays
  cuda::reset_peak_memory_stats();
  EXPECT_EQ(cuda::max_memory_reserved(), cuda::memory_reserved());
  EXPECT_EQ(cuda::max_memory_allocated(), cuda::memory_allocated());

  const auto [free, total] = cuda::mem_get_info();
  EXPECT_EQ(total, total_memory(Device::cuda(0)));
  EXPECT_EQ(free, total - cuda::memory_reserved());  // the stand-in's: all but what is reserved
  const std::string summary = cuda::memory_summary();
  const size_t peak = cuda::max_memory_allocated();
  for (const std::string& part : std::vector<std::string>{"cuda:0 memory", "allocated", "peak " + format_bytes(peak),
                                                          "free", "of " + format_bytes(total), "out-of-memory errors"})
    EXPECT_NE(summary.find(part), std::string::npos) << part << " not in\n" << summary;
  cuda::set_device(1);
  EXPECT_EQ(cuda::memory_summary().rfind("cuda:1 memory", 0), 0u);
  cuda::set_device(0);

  // A fraction of under a byte is a limit of one byte, not none (a limit of 0 means no limit).
  cuda::set_memory_fraction(1e-15, 0);
  EXPECT_EQ(cuda::memory_stats(0).limit, 1u);
  EXPECT_THROW((void)zeros({1024}, kCUDA), OutOfMemoryError);
  set_memory_limit(Device::cuda(0), 0);
  // Sizes as printed: the unit and precision of the value once rounded.
  EXPECT_EQ(format_bytes(size_t{205} << 20), "205 MiB");
  EXPECT_EQ(format_bytes((size_t{1} << 30) - (size_t{1} << 18)), "1.00 GiB");  // 1023.75 MiB
  EXPECT_EQ(format_bytes(static_cast<size_t>(9.999 * (1 << 30))), "10.0 GiB");
  EXPECT_EQ(format_bytes(static_cast<size_t>(1.5 * (1 << 30))), "1.50 GiB");
  EXPECT_EQ(format_bytes(512), "512 bytes");
}

// A dense tensor keeps its layout across devices (PyTorch's preserve_format), a strided view
// arrives row-major; both with their values.
TEST_F(Fallback, ToDeviceKeepsADenseLayout) {
  const Tensor x = arange(2 * 3 * 4 * 5, kFloat32).reshape({2, 3, 4, 5});
  const Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
  const Tensor d = cl.to(Device::cuda(0));
  EXPECT_TRUE(d.is_contiguous(MemoryFormat::ChannelsLast));
  const Tensor back = d.cpu();
  EXPECT_EQ(back.strides(), cl.strides());
  EXPECT_EQ(test::values(back), test::values(x));
  const Tensor view = x.narrow(3, 1, 3);  // not dense
  const Tensor dv = view.to(Device::cuda(0));
  EXPECT_TRUE(dv.is_contiguous());
  EXPECT_EQ(test::values(dv.cpu()), test::values(view));
  const Tensor t = x.flatten(2).transpose(1, 2);  // dense in another order of dims
  EXPECT_EQ(t.to(Device::cuda(0)).strides(), t.strides());
  EXPECT_EQ(test::values(t.to(Device::cuda(0)).cpu()), test::values(t));
}

// A tensor's destructor must not throw (that would end the process): a free that fails, as
// CUDA's do after a device fault, is said once and the block left.
TEST_F(Fallback, AFreeThatFailsIsReportedAndTheProgramGoesOn) {
  Tensor t = ones({4}).to(Device::cuda(0));
  stand_in_->runtime().fail_frees = true;
  testing::internal::CaptureStderr();
  t = Tensor();
  const std::string err = testing::internal::GetCapturedStderr();
  stand_in_->runtime().fail_frees = false;
  EXPECT_NE(err.find("freeing memory on cuda:0 failed: [stand-in free] a device fault"), std::string::npos) << err;
}

TEST_F(Fallback, OpsWithoutDeviceKernelsRunOnTheCpuAndAreCounted) {
  Tensor a = tensor({1.0f, 2.0f, 3.0f}).to(Device::cuda(0));
  Tensor b = tensor({10.0f, 20.0f, 30.0f}).to(Device::cuda(0));
  uint64_t before = fallback_counts()["Add"];
  Tensor c = a + b;
  EXPECT_EQ(c.device(), Device::cuda(0));
  test::expect_close(c, {11, 22, 33}, {3});
  EXPECT_EQ(fallback_counts()["Add"], before + 1);
}

TEST_F(Fallback, AutogradAcrossTheDevice) {
  Tensor w = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
  Tensor loss = (w.to(Device::cuda(0)) * 3.0).sum();
  loss.backward();
  EXPECT_EQ(w.grad().device(), Device::cpu());
  test::expect_close(w.grad(), {3, 3, 3}, {3});
}

// *_like with options that name only a dtype stay on the tensor's device, as torch's; clamp's
// backward builds its mask so (it met a CPU tensor there, an error on every GPU).
TEST_F(Fallback, LikeFactoriesKeepTheDeviceAndClampDifferentiatesThere) {
  const Device d = Device::cuda(0);
  Tensor x = tensor({-2.0, -0.5, 0.5, 2.0}, kFloat32).to(d).requires_grad_();
  for (const Tensor& t : {ones_like(x, kBool), zeros_like(x, kFloat64), full_like(x, 2, kInt64), empty_like(x, kInt32),
                          rand_like(x, kFloat64), randn_like(x, kFloat64)})
    EXPECT_EQ(t.device(), d);
  EXPECT_EQ(ones_like(x, TensorOptions(kBool).device(Device::cpu())).device(), Device::cpu());
  x.clamp(-1.0, 1.0).sum().backward();
  EXPECT_EQ(x.grad().device(), d);
  test::expect_close(x.grad().cpu(), {0, 1, 1, 0}, {4});
}

TEST_F(Fallback, InPlaceOnANonContiguousDeviceView) {
  Tensor d = zeros({2, 3}).to(Device::cuda(0));
  Tensor col = d.select(1, 1);  // stride 3: written through a host mirror
  col.fill_(5);
  test::expect_close(d.cpu(), {0, 5, 0, 0, 5, 0}, {2, 3});
}

// The fallback writes back only its output's elements: between its copy to the host and the
// copy back, another writer (a thread on the other column, a kernel on another stream) fills the
// gaps, and what it wrote stays. Writing the whole storage range back undid it.
TEST_F(Fallback, AStridedOutputWritesOnlyItsOwnElementsBack) {
  backend::register_kernel(backend::Op::Copy, DeviceType::CUDA, backend::kernel_for(backend::Op::Copy, DeviceType::CPU),
                           nullptr);  // the device's own copy kernel scatters the result
  Tensor d = zeros({4, 2}).to(Device::cuda(0));
  float* data = d.data_ptr<float>();  // the stand-in's device memory is host memory
  int writes = 0;  // each write a new value: a stale copy of an older one shows
  stand_in_->runtime().after_copy_to_host = [data, &writes] {
    ++writes;
    for (int r = 0; r < 4; ++r) data[r * 2 + 1] = static_cast<float>(writes);
  };
  NoGradGuard ng;
  d.select(1, 0).add_(1);
  stand_in_->runtime().after_copy_to_host = nullptr;
  ASSERT_GT(writes, 0);
  const double w = writes;
  EXPECT_EQ(test::values(d.cpu()), (std::vector<double>{1, w, 1, w, 1, w, 1, w}));
}

TEST_F(Fallback, MixingDevicesIsAnError) {
  Tensor a = ones({2}).to(Device::cuda(0));
  test::expect_error([&] { (void)(a + ones({2})); }, "[add] expected all tensors on one device");
}

// What `kiln train --device cuda` does today: every op of a CNN training step (conv, batch norm
// with its running statistics, pooling, dropout, loss, SGD) on device tensors goes through the
// fallback and gives the CPU's numbers.
TEST_F(Fallback, CnnTrainingStepOnTheDeviceMatchesTheCpu) {
  std::vector<double> losses[2], weights[2], running[2];
  for (int k = 0; k < 2; ++k) {
    const Device d = k == 0 ? Device::cpu() : Device::cuda(0);
    manual_seed(5);
    auto model = models::small_cnn();
    model->to(d);
    optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    manual_seed(6);
    Tensor x = randn({4, 1, 28, 28}).to(d), y = tensor(std::vector<int64_t>{1, 7, 3, 0}, {4}, kInt64).to(d);
    for (int step = 0; step < 2; ++step) {
      Tensor loss = nn::functional::cross_entropy(model(x), y);
      EXPECT_EQ(loss.device(), d);
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses[k].push_back(loss.item<double>());
    }
    auto sd = model->state_dict();
    weights[k] = test::values(sd.at("features.0.weight"));
    running[k] = test::values(sd.at("features.1.running_var"));
  }
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-5);
  for (size_t i = 0; i < weights[0].size(); ++i) EXPECT_NEAR(weights[1][i], weights[0][i], 1e-5);
  for (size_t i = 0; i < running[0].size(); ++i) EXPECT_NEAR(running[1][i], running[0][i], 1e-5);
  EXPECT_GT(fallback_counts()["Conv2dBackwardWeight"], 0u);
}

// Every transformer op (embedding, layer norm, fused attention with dropout, fused linear,
// cross-entropy, the fused AdamW step) through the fallback: dropout masks come from the same
// Philox counters on both devices, so the steps agree.
TEST_F(Fallback, BertTrainingStepOnTheDeviceMatchesTheCpu) {
  const models::BertConfig cfg{.vocab_size = 50, .hidden_size = 32, .num_hidden_layers = 2, .num_attention_heads = 2,
                               .intermediate_size = 64, .max_position_embeddings = 16};
  std::vector<double> losses[2], weights[2];
  for (int k = 0; k < 2; ++k) {
    const Device d = k == 0 ? Device::cpu() : Device::cuda(0);
    manual_seed(5);
    auto model = models::bert_for_masked_lm(cfg);
    model->to(d);
    optim::AdamW opt(model->parameters(), {.lr = 1e-2});
    Tensor ids = tensor(std::vector<int64_t>{2, 7, 9, 4, 3, 0, 2, 11, 12, 13, 14, 3}, {2, 6}, kInt64).to(d);
    Tensor mask = tensor(std::vector<int64_t>{1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1}, {2, 6}, kInt64).to(d);
    Tensor labels = tensor(std::vector<int64_t>{-100, 7, -100, 4, -100, -100, -100, 11, -100, -100, 14, -100}, {2, 6},
                           kInt64).to(d);
    manual_seed(6);
    for (int step = 0; step < 2; ++step) {
      Tensor loss = model->masked_lm_loss(ids, labels, mask);
      EXPECT_EQ(loss.device(), d);
      opt.zero_grad();
      loss.backward();
      nn::utils::clip_grad_norm_(model->parameters(), 1.0);
      opt.step();
      losses[k].push_back(loss.item<double>());
    }
    weights[k] = test::values(model->state_dict().at("bert.encoder.layer.1.attention.self.query.weight"));
  }
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-5);
  for (size_t i = 0; i < weights[0].size(); ++i) EXPECT_NEAR(weights[1][i], weights[0][i], 1e-5);
  for (const char* op : {"Embedding", "LayerNormBackward", "Attention", "AttentionBackward", "AdamStep"})
    EXPECT_GT(fallback_counts()[op], 0u) << op;
}

// Shadow mode judges a float32 result at the output's scale (a sum that cancels keeps the
// rounding error of its large terms) and a TF32 convolution at TF32's precision, and still
// catches an error beyond them.
namespace {
// A "device" kernel that is the CPU's with g_shift added to its first float output element.
float g_shift = 0;
template <backend::Op kOp>
void shifted(backend::KernelArgs& a) {
  backend::kernel_for(kOp, DeviceType::CPU)(a);
  static_cast<float*>(a.outputs[0].data_ptr())[0] += g_shift;
}
}  // namespace

TEST_F(Fallback, ShadowModeJudgesAtTheOutputsScaleAndAtTf32sPrecision) {
  const bool tf32 = cudnn::allow_tf32();
  // Output channel 0 cancels to 0 (1 + 2 - 3), channel 1 is 100.
  Tensor x = tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({1, 1, 2, 2}).to(Device::cuda(0));
  Tensor w = tensor({1.0f, 1.0f, -1.0f, 0.0f, 10.0f, 10.0f, 10.0f, 10.0f}).reshape({2, 1, 2, 2}).to(Device::cuda(0));
  backend::register_kernel(backend::Op::Conv2d, DeviceType::CUDA, shifted<backend::Op::Conv2d>);
  backend::set_shadow_mode(backend::ShadowMode::Error);
  auto run = [&](bool allow_tf32, float shift) {
    cudnn::set_allow_tf32(allow_tf32);
    g_shift = shift;
    (void)conv2d(x, w);
  };
  EXPECT_NO_THROW(run(false, 1e-3f));  // 1e-5 of the output's scale, on an element that is 0
  test::expect_error([&] { run(false, 0.05f); }, "[shadow] Conv2d on cuda:0 differs from the CPU");
  EXPECT_NO_THROW(run(true, 0.4f));  // TF32: 4e-3 of the scale
  test::expect_error([&] { run(true, 1.0f); }, "[shadow] Conv2d on cuda:0 differs from the CPU");
  cudnn::set_allow_tf32(tf32);
}

TEST(Devices, MissingDeviceIsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  test::expect_error([] { (void)ones({2}).to(Device::cuda(0)); }, "cuda:0");
}

TEST(OpsWithoutKernel, NamesTheOpsADeviceLacks) {
  EXPECT_EQ(ops_without_kernel({"Add", "Conv2d", "NoSuchOp"}, DeviceType::CPU), std::vector<std::string>{"NoSuchOp"});
  for (const std::string& op : ops_without_kernel({"Add", "Conv2d"}, DeviceType::CUDA))
    EXPECT_TRUE(op == "Add" || op == "Conv2d");
}

// The trainers' default device: a present GPU only when it has a kernel for every op of the job.
TEST_F(Fallback, DefaultDeviceIsAGpuOnlyWhenItRunsTheJobNatively) {
  manual_seed(5);
  const GeneratorState before = get_rng_state();
  std::vector<std::string> probed;
  auto probe = [&] {
    Tensor x = randn({4, 3}).requires_grad_();  // draws from the generator, which is restored
    (x.relu() * 2).sum().backward();
  };
  train::DeviceChoice c = train::choose_device("", probe);
  EXPECT_EQ(get_rng_state().offset, before.offset);
  const bool native = ops_without_kernel({"Relu", "Mul", "Sum", "Uniform", "Normal"}, DeviceType::CUDA).empty();
  if (native) {
    EXPECT_EQ(c.device, Device::cuda(0));
    EXPECT_EQ(c.note, "");
  } else {
    EXPECT_EQ(c.device, Device::cpu());
    EXPECT_NE(c.note.find("cuda:0 present but lacks kernels for "), std::string::npos) << c.note;
    EXPECT_NE(c.note.find("--device cuda to use it anyway"), std::string::npos) << c.note;
  }
  EXPECT_EQ(train::choose_device("cuda", probe).device, Device::cuda(0));  // asked for: taken
  EXPECT_EQ(train::choose_device("cpu", probe).device, Device::cpu());
  test::expect_error([&] { train::choose_device("cuda:3", probe); }, "[kiln train] device cuda:3 is not present");
}

// A GPU older than every architecture the build has code for is not the default: the note says
// how to rebuild, and the job runs on the CPU.
TEST_F(Fallback, DefaultDeviceIsTheCpuOnAGpuTheBuildHasNoCodeFor) {
  stand_in_->runtime().incompatible_reason = backend::cuda::arch_list_problem("90", 80, "cuda:0 (stand-in)");
  const train::DeviceChoice c = train::choose_device("", [] { (ones({2}) * 2).sum(); });
  EXPECT_EQ(c.device, Device::cpu());
  EXPECT_EQ(c.note, "cuda:0 (stand-in) has compute capability 8.0, and this build of Kiln has GPU code for sm_90, "
                    "compute_90 only: rebuild with -DKILN_CUDA_ARCHITECTURES=\"90;80\"");
  EXPECT_EQ(train::choose_device("cuda", [] {}).device, Device::cuda(0));  // asked for: its allocations will say
}

// Shadow mode on the stand-in device: a "device" kernel registered for Add that is off by one in
// one element is caught and named; the CPU's own kernel in its place is not.
namespace {
void add_off_by_one(backend::KernelArgs& a) {
  backend::kernel_for(backend::Op::Add, DeviceType::CPU)(a);  // host memory: the CPU kernel works
  if (a.outputs[0].numel() > 2) {
    if (a.outputs[0].dtype() == kInt64) static_cast<int64_t*>(a.outputs[0].data_ptr())[2] += 1;
    else static_cast<float*>(a.outputs[0].data_ptr())[2] += 1;
  }
}
}  // namespace

// A sum that cancels is judged by its terms' magnitudes, not its result: 1000 + 1 - 1000 may be
// off by 1e-3 x 2001 in float32 (kernels add in other orders), and no more.
TEST_F(Fallback, ShadowModeJudgesACancellingSumByItsTerms) {
  Tensor x = tensor({1000.0f, 1.0f, -1000.0f}).to(Device::cuda(0));
  backend::register_kernel(backend::Op::Sum, DeviceType::CUDA, shifted<backend::Op::Sum>);
  backend::set_shadow_mode(backend::ShadowMode::Error);
  g_shift = 1.5f;
  EXPECT_NO_THROW((void)x.sum());
  g_shift = 3.0f;
  test::expect_error([&] { (void)x.sum(); },
                     "[shadow] Sum on cuda:0 differs from the CPU: output 0 (float32 [1]) element [0]: device 4, cpu 1 "
                     "(tolerance 1e-05 + 0.001 x (|cpu| + sum of |terms| 2001)");
}

// A pointwise op is judged element by element: a wrong small element beside a large one is
// caught (the output's largest element widened every element's allowance: exp(-5) written as 0.4
// next to exp(10) passed in float32, exp(0) written as 400 in bfloat16).
TEST_F(Fallback, ShadowModeJudgesAPointwiseOpElementByElement) {
  backend::register_kernel(backend::Op::Exp, DeviceType::CUDA, shifted<backend::Op::Exp>);
  backend::set_shadow_mode(backend::ShadowMode::Error);
  Tensor x = tensor({-5.0f, 0.0f, 1.0f, 10.0f}).to(Device::cuda(0));
  g_shift = 1e-8f;  // a rounding's worth
  EXPECT_NO_THROW((void)x.exp());
  g_shift = 0.4f;
  test::expect_error([&] { (void)x.exp(); },
                     "[shadow] Exp on cuda:0 differs from the CPU: output 0 (float32 [4]) element [0]: device 0.406737");
  test::expect_error([&] { (void)x.exp(); }, "(tolerance 1e-05 + 0.001 x (|cpu|); 1 of 4 elements differ)");
  backend::register_kernel(backend::Op::Exp, DeviceType::CUDA, [](backend::KernelArgs& a) {
    backend::kernel_for(backend::Op::Exp, DeviceType::CPU)(a);
    static_cast<BFloat16*>(a.outputs[0].data_ptr())[1] = BFloat16(400.0f);
  });
  test::expect_error([&] { (void)x.to(kBFloat16).exp(); }, "element [1]: device 400, cpu 1");
}

// Under a profiler session: shadow mode's own copies and |inputs| are not the program's ops, and a
// device op through the fallback waits for the device's queued work before its clock starts
// (that work has its own times; the fallback's first copy would wait for it, on its clock).
TEST_F(Fallback, TheProfilerCountsTheProgramsOpsAndTimesAFallbackAlone) {
  for (backend::Op op : {backend::Op::Matmul, backend::Op::Sum})
    backend::register_kernel(op, DeviceType::CUDA, backend::kernel_for(op, DeviceType::CPU));
  Tensor x = randn({8, 8}).to(Device::cuda(0)), w = randn({8, 8}).to(Device::cuda(0));
  backend::set_shadow_mode(backend::ShadowMode::Error);
  std::map<std::string, int64_t> counts;
  {
    profiler::Session session;
    (void)matmul(x, w).sum();
    for (const profiler::OpStat& s : session.stats()) counts[s.op] = s.count;
  }
  EXPECT_EQ(counts, (std::map<std::string, int64_t>{{"Matmul", 1}, {"Sum", 1}}));
  backend::set_shadow_mode(backend::ShadowMode::Off);
  const int syncs = stand_in_->runtime().syncs;
  {
    profiler::Session session;
    (void)x.exp();  // no kernel on the stand-in: the fallback
    ASSERT_EQ(session.stats().size(), 1u);
  }
  EXPECT_EQ(stand_in_->runtime().syncs, syncs + 1);
}

TEST_F(Fallback, ShadowModeNamesTheKernelThatDiffersFromTheCpu) {
  Tensor a = arange(6, kFloat32).reshape({2, 3}).to(Device::cuda(0)), b = full({3}, 0.5).to(Device::cuda(0));
  backend::register_kernel(backend::Op::Add, DeviceType::CUDA, backend::kernel_for(backend::Op::Add, DeviceType::CPU));
  backend::set_shadow_mode(backend::ShadowMode::Error);
  EXPECT_NO_THROW(a + b);  // the same kernel: no difference
  backend::register_kernel(backend::Op::Add, DeviceType::CUDA, add_off_by_one);
  test::expect_error([&] { (void)(a + b); },
                     "[shadow] Add on cuda:0 differs from the CPU: output 0 (float32 [2, 3]) element [0, 2]: device 3.5, cpu 2.5");
  backend::set_shadow_mode(backend::ShadowMode::Warn);
  const uint64_t before = backend::shadow_mismatches()["Add"];
  Tensor c = a + b;  // warned (once per op kind), counted, and the device's result kept
  EXPECT_EQ(backend::shadow_mismatches()["Add"], before + 1);
  EXPECT_EQ(c.cpu().to_vector<float>()[2], 3.5f);
  // Integers are compared exactly: 2^60 + 1 against 2^60, the same double, is a difference.
  backend::set_shadow_mode(backend::ShadowMode::Error);
  Tensor big = full({3}, int64_t{1} << 60, kInt64).to(Device::cuda(0));
  test::expect_error([&] { (void)(big + big.mul(0)); },
                     "element [2]: device 1152921504606846977, cpu 1152921504606846976 (integers: exact");
}

// A device kernel reads device memory only: an operand given as a C++ number (a 0-d CPU tensor,
// which may join a device op) reaches it on the device, also after the op reshaped or expanded
// it (index_select's 0-d index becomes a [1] view; masked_softmax expands its mask) — unless the
// kernel takes numbers on the host (backend::take_host_numbers): then it gets the 0-d CPU tensor.
namespace {
int g_host_operands = 0;
double g_host_number = 0;
template <backend::Op kOp>
void device_only(backend::KernelArgs& a) {
  for (const Tensor& t : a.inputs)
    if (t.defined() && t.device().is_cpu()) ++g_host_operands, g_host_number = t.item<double>();
  backend::kernel_for(kOp, DeviceType::CPU)(a);  // host memory: the CPU kernel works
}
}  // namespace

TEST_F(Fallback, DeviceKernelsGetDeviceOperandsUnlessTheyTakeNumbers) {
  using backend::Op;
  backend::register_kernel(Op::Mul, DeviceType::CUDA, device_only<Op::Mul>);
  backend::register_kernel(Op::IndexSelect, DeviceType::CUDA, device_only<Op::IndexSelect>);
  backend::register_kernel(Op::MaskedSoftmax, DeviceType::CUDA, device_only<Op::MaskedSoftmax>);
  g_host_operands = 0;
  Tensor x = arange(6, kFloat32).reshape({2, 3}).to(Device::cuda(0));
  test::expect_close((x * 2.0).cpu(), {0, 2, 4, 6, 8, 10}, {2, 3});
  test::expect_close(index_select(x, 0, full({}, 1, kInt64)).cpu(), {3, 4, 5}, {1, 3});
  Tensor keep = full({}, true, kBool);
  test::expect_close(masked_softmax(x, keep, -1).cpu().sum(std::vector<int64_t>{1}), {1, 1}, {2}, 1e-6);
  EXPECT_EQ(g_host_operands, 0);
  // Marked as taking numbers (the stand-in restores the mark): the number stays on the host.
  backend::take_host_numbers(Op::Mul, DeviceType::CUDA);
  test::expect_close((x * 2.5).cpu(), {0, 2.5, 5, 7.5, 10, 12.5}, {2, 3});
  test::expect_close((x * full({}, 3.0)).cpu(), {0, 3, 6, 9, 12, 15}, {2, 3});
  EXPECT_EQ(g_host_operands, 2);
  EXPECT_EQ(g_host_number, 3.0);
  test::expect_close((x * x).cpu(), {0, 1, 4, 9, 16, 25}, {2, 3});
  EXPECT_EQ(g_host_operands, 2);
}
