// The tensor runtime: random numbers, printing, memory statistics and limits, threads and devices.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

using namespace kiln;
using test::expect_error;
using test::values;

namespace {

// Restores the thread count a test changed.
struct ThreadGuard {
  int saved = get_num_threads();
  ~ThreadGuard() { set_num_threads(saved); }
};

// Lifts a memory limit a test set, even when an assertion fails.
// Restores the CPU's limit (the default, 90% of memory) when the test is done.
struct LimitGuard {
  size_t saved = memory_stats(Device::cpu()).limit;
  ~LimitGuard() { set_memory_limit(Device::cpu(), saved); }
};

}  // namespace

// ---------------------------------------------------------------- random numbers

TEST(TensorRandom, SameSeedSameValues) {
  manual_seed(123);
  Tensor r1 = rand({50});
  Tensor n1 = randn({51});
  Tensor i1 = randint(0, 1000, {52});
  manual_seed(123);
  Tensor r2 = rand({50});
  Tensor n2 = randn({51});
  Tensor i2 = randint(0, 1000, {52});
  EXPECT_EQ(values(r1), values(r2));
  EXPECT_EQ(values(n1), values(n2));
  EXPECT_EQ(values(i1), values(i2));

  // Successive draws and different seeds differ.
  manual_seed(123);
  Tensor a = rand({50});
  Tensor b = rand({50});
  EXPECT_NE(values(a), values(b));
  manual_seed(124);
  EXPECT_NE(values(rand({50})), values(a));
  manual_seed(124);
  EXPECT_NE(values(randn({51})), values(n1));
  manual_seed(124);
  EXPECT_NE(values(randint(0, 1000, {52})), values(i1));

  // The seed also fixes in-place fills, float64 draws included.
  manual_seed(5);
  Tensor u1 = empty({20}, kFloat64).uniform_(-2, 3);
  manual_seed(5);
  Tensor u2 = empty({20}, kFloat64).uniform_(-2, 3);
  EXPECT_EQ(values(u1), values(u2));
}

TEST(TensorRandom, Distributions) {
  manual_seed(2024);
  const int64_t n = 100000;
  std::vector<double> u = values(rand({n}));
  double umin = *std::min_element(u.begin(), u.end()), umax = *std::max_element(u.begin(), u.end());
  EXPECT_GE(umin, 0.0);
  EXPECT_LT(umax, 1.0);
  double umean = std::accumulate(u.begin(), u.end(), 0.0) / n;
  EXPECT_NEAR(umean, 0.5, 0.01);

  std::vector<double> z = values(randn({n}));
  double mean = std::accumulate(z.begin(), z.end(), 0.0) / n;
  double var = 0;
  for (double v : z) var += (v - mean) * (v - mean);
  double sd = std::sqrt(var / (n - 1));
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(sd, 1.0, 0.02);
  for (double v : z) EXPECT_TRUE(std::isfinite(v));

  std::vector<double> g = values(empty({n}).normal_(3.0, 2.0));
  double gmean = std::accumulate(g.begin(), g.end(), 0.0) / n;
  double gvar = 0;
  for (double v : g) gvar += (v - gmean) * (v - gmean);
  EXPECT_NEAR(gmean, 3.0, 0.04);
  EXPECT_NEAR(std::sqrt(gvar / (n - 1)), 2.0, 0.04);

  // The 16-bit floats too: rounding must not reach the open upper end.
  for (ScalarType t : {kBFloat16, kFloat16}) {
    std::vector<double> h = values(rand({n}, t));
    EXPECT_GE(*std::min_element(h.begin(), h.end()), 0.0) << dtype_name(t);
    EXPECT_LT(*std::max_element(h.begin(), h.end()), 1.0) << dtype_name(t);
    EXPECT_NEAR(std::accumulate(h.begin(), h.end(), 0.0) / n, 0.5, 0.01) << dtype_name(t);
    std::vector<double> w = values(empty({n}, t).uniform_(-2.0, 2.0));
    EXPECT_GE(*std::min_element(w.begin(), w.end()), -2.0) << dtype_name(t);
    EXPECT_LT(*std::max_element(w.begin(), w.end()), 2.0) << dtype_name(t);
  }

  std::vector<double> r = values(empty({n}, kFloat64).uniform_(-1.0, 3.0));
  EXPECT_GE(*std::min_element(r.begin(), r.end()), -1.0);
  EXPECT_LT(*std::max_element(r.begin(), r.end()), 3.0);
  EXPECT_NEAR(std::accumulate(r.begin(), r.end(), 0.0) / n, 1.0, 0.03);

  // A non-contiguous target is filled through its view.
  Tensor base = zeros({4, 6});
  Tensor t = base.t();
  t.uniform_(5.0, 6.0);
  for (double v : values(base)) {
    EXPECT_GE(v, 5.0);
    EXPECT_LT(v, 6.0);
  }
}

TEST(TensorRandom, RngStateReplay) {
  manual_seed(77);
  rand({10});
  GeneratorState s = get_rng_state();
  EXPECT_EQ(s.seed, 77u);
  EXPECT_GT(s.offset, 0u);
  Tensor a = randn({33});
  Tensor ai = randint(0, 100, {7});
  EXPECT_GT(get_rng_state().offset, s.offset);
  set_rng_state(s);
  Tensor b = randn({33});
  Tensor bi = randint(0, 100, {7});
  EXPECT_EQ(values(a), values(b));
  EXPECT_EQ(values(ai), values(bi));

  manual_seed(77);
  EXPECT_EQ(get_rng_state().offset, 0u);
}

TEST(TensorRandom, ValuesDoNotDependOnTheThreadCount) {
  ThreadGuard guard;
  const int64_t n = 300000;  // large enough to be split across threads
  set_num_threads(1);
  manual_seed(99);
  std::vector<double> r1 = values(rand({n})), n1 = values(randn({n})), i1 = values(randint(0, 50, {n}));
  set_num_threads(2);
  manual_seed(99);
  std::vector<double> r2 = values(rand({n})), n2 = values(randn({n})), i2 = values(randint(0, 50, {n}));
  EXPECT_EQ(r1, r2);
  EXPECT_EQ(n1, n2);
  EXPECT_EQ(i1, i2);
}

// ---------------------------------------------------------------- printing

TEST(TensorPrint, ShowsValuesShapeDtypeDevice) {
  Tensor t = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  std::ostringstream os;
  os << t;
  std::string s = os.str();
  EXPECT_EQ(s, t.to_string());
  EXPECT_NE(s.find("shape=[2, 3]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=float32"), std::string::npos) << s;
  EXPECT_NE(s.find("device=cpu"), std::string::npos) << s;
  for (const char* v : {"1.", "2.", "3.", "4.", "5.", "6."}) EXPECT_NE(s.find(v), std::string::npos) << v << " in " << s;
  EXPECT_EQ(s.rfind("tensor(", 0), 0u) << s;
  EXPECT_EQ(s.find("requires_grad"), std::string::npos) << s;

  std::string f = tensor({1.5, -2.25}).to_string();
  EXPECT_NE(f.find("1.5000"), std::string::npos) << f;
  EXPECT_NE(f.find("-2.2500"), std::string::npos) << f;

  std::string i = tensor({1, 2, 3}).to_string();
  EXPECT_NE(i.find("[1, 2, 3]"), std::string::npos) << i;
  EXPECT_NE(i.find("dtype=int64"), std::string::npos) << i;

  std::string b = tensor({true, false}).to_string();
  EXPECT_NE(b.find("True"), std::string::npos) << b;
  EXPECT_NE(b.find("False"), std::string::npos) << b;
  EXPECT_NE(b.find("dtype=bool"), std::string::npos) << b;

  EXPECT_EQ(scalar_tensor(5).to_string(), "tensor(5, shape=[], dtype=int64, device=cpu)");
  std::string g = tensor({1.0}).requires_grad_().to_string();
  EXPECT_NE(g.find("requires_grad=True"), std::string::npos) << g;
  EXPECT_NE(zeros({0}).to_string().find("shape=[0]"), std::string::npos);
  EXPECT_EQ(Tensor().to_string(), "tensor(undefined)");

  // Views print their own elements.
  std::string tv = arange(6).view({2, 3}).t().to_string();
  EXPECT_NE(tv.find("[0, 3]"), std::string::npos) << tv;
  EXPECT_NE(tv.find("shape=[3, 2]"), std::string::npos) << tv;
}

TEST(TensorPrint, SummarisesLargeTensors) {
  std::string s = arange(2000).to_string();
  EXPECT_NE(s.find("..."), std::string::npos) << s;
  EXPECT_NE(s.find("1999"), std::string::npos) << s;
  EXPECT_NE(s.find("..., 1997, 1998, 1999]"), std::string::npos) << s;
  EXPECT_EQ(s.find("1000"), std::string::npos) << s;
  EXPECT_LT(s.size(), 200u) << s;
  EXPECT_NE(s.find("shape=[2000]"), std::string::npos) << s;

  std::string m = zeros({100, 100}).to_string();
  EXPECT_NE(m.find("..."), std::string::npos);
  EXPECT_LT(m.size(), 1000u);
  // Only the edges are read; each row and column shows its own: first and last rows, 3 each end.
  std::string e = arange(10000).view({100, 100}).to_string();
  EXPECT_NE(e.find("[[   0,    1,    2, ...,   97,   98,   99],"), std::string::npos) << e;
  EXPECT_NE(e.find("[9900, 9901, 9902, ..., 9997, 9998, 9999]]"), std::string::npos) << e;
  // Integers print exactly, past 2^53 too.
  std::string big = tensor(std::vector<int64_t>{9007199254740993LL}).to_string();
  EXPECT_NE(big.find("[9007199254740993]"), std::string::npos) << big;

  // At the threshold nothing is left out.
  std::string full = arange(1000).to_string();
  EXPECT_EQ(full.find("..."), std::string::npos);
  EXPECT_NE(full.find("500"), std::string::npos);
}

// ---------------------------------------------------------------- memory, threads, devices

TEST(TensorMemory, AllocatedGoesUpAndBackDown) {
  const Device cpu = Device::cpu();
  const size_t before = memory_stats(cpu).allocated;
  {
    Tensor t = empty({1024, 256});  // 1 MiB
    MemoryStats during = memory_stats(cpu);
    EXPECT_GE(during.allocated, before + (1u << 20));
    EXPECT_GE(during.reserved, during.allocated);
    EXPECT_GE(during.peak, during.allocated);
    Tensor v = t.view({-1});  // a view allocates nothing
    EXPECT_EQ(memory_stats(cpu).allocated, during.allocated);
  }
  EXPECT_EQ(memory_stats(cpu).allocated, before);

  reset_peak_memory_stats(cpu);
  EXPECT_EQ(memory_stats(cpu).peak, memory_stats(cpu).allocated);
  {
    Tensor big = empty({4 << 20}, kUInt8);
    (void)big;
  }
  MemoryStats after = memory_stats(cpu);
  EXPECT_GE(after.peak, before + (4u << 20));
  EXPECT_EQ(after.allocated, before);
}

TEST(TensorMemory, SteadyStateLoopDoesNotGoToTheOs) {
  const Device cpu = Device::cpu();
  if (!memory_stats(cpu).caching) GTEST_SKIP() << "KILN_ALLOCATOR=system: every block comes from the OS";
  manual_seed(0);
  Tensor x = randn({128, 96});
  Tensor w = randn({96, 64});
  uint64_t after_first = 0;
  for (int it = 0; it < 6; ++it) {
    Tensor y = (matmul(x, w).relu() * 2.0 + 1.0).sum(std::vector<int64_t>{1});
    Tensor z = y.exp().mean();
    (void)z;
    if (it == 0) after_first = memory_stats(cpu).os_allocations;
  }
  EXPECT_EQ(memory_stats(cpu).os_allocations, after_first);
}

TEST(TensorMemory, MemoryLimit) {
  const Device cpu = Device::cpu();
  {
    LimitGuard guard;
    empty_cache(cpu);  // so that freeing the cache cannot make room for the large block
    set_memory_limit(cpu, memory_stats(cpu).reserved + (1u << 20));
    EXPECT_GT(memory_stats(cpu).limit, 0u);
    const uint64_t ooms = memory_stats(cpu).out_of_memory;
    try {
      Tensor t = empty({64 << 20}, kUInt8);
      ADD_FAILURE() << "a 64 MiB allocation passed a limit of about 1 MiB above use";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[cpu] out of memory: asked 64.0 MiB, limit ", 0), 0u) << msg;
      EXPECT_NE(msg.find(" in use, "), std::string::npos) << msg;
      EXPECT_NE(msg.find(" reserved"), std::string::npos) << msg;
    }
    EXPECT_EQ(memory_stats(cpu).out_of_memory, ooms + 1);
    Tensor small = empty({1024});  // within the limit: fine
    EXPECT_EQ(small.numel(), 1024);
    set_memory_limit(cpu, 0);
    EXPECT_EQ(memory_stats(cpu).limit, 0u);
    Tensor t = empty({64 << 20}, kUInt8);  // unlimited
    EXPECT_EQ(t.numel(), 64 << 20);
  }
}

TEST(TensorMemory, TheCpuHasADefaultLimitBelowItsMemory) {
  const size_t total = total_memory(Device::cpu());
  EXPECT_GT(total, size_t{1} << 28);
  if (std::getenv("KILN_MEMORY_LIMIT")) GTEST_SKIP() << "KILN_MEMORY_LIMIT sets the limit";
  EXPECT_EQ(memory_stats(Device::cpu()).limit, total / 10 * 9);
  // A tensor larger than the machine is the clear error, not the kernel's OOM killer.
  expect_error([&] { empty({static_cast<int64_t>(total / 4 + 1)}, kFloat32); }, "[cpu] out of memory: asked ");
}

TEST(TensorMemory, ParseMemoryLimit) {
  const size_t g = size_t{1} << 30;
  EXPECT_EQ(parse_memory_limit("20G", 0), 20 * g);
  EXPECT_EQ(parse_memory_limit("1.5GiB", 0), 3 * g / 2);
  EXPECT_EQ(parse_memory_limit("512M", 0), size_t{512} << 20);
  EXPECT_EQ(parse_memory_limit("4096", 0), 4096u);
  EXPECT_EQ(parse_memory_limit("80%", 10 * g), 8 * g);
  EXPECT_EQ(parse_memory_limit("0", 10 * g), 0u);
  EXPECT_EQ(parse_memory_limit("+20G", 0), 20 * g);  // a sign, as strtod took it
  // Whatever the locale: under a decimal-comma one strtod read "1.5G" as 1 and then ".5G".
  {
    test::CommaDecimalLocale comma;
    EXPECT_EQ(parse_memory_limit("1.5G", 0), 3 * g / 2);
  }
  for (const char* bad : {"", "lots", "-1G", "12X", "inf", "nan", "1e30", "G", "+-1G", "++1G"})
    expect_error([&] { parse_memory_limit(bad, g, "--memory-limit"); }, "[--memory-limit] expected a size");
  // A limit that rounds to 0 bytes would mean none at all; more than all the memory is no share.
  expect_error([&] { parse_memory_limit("0.5", g, "--memory-limit"); }, "'0.5' is less than one byte (0 means no");
  expect_error([&] { parse_memory_limit("1e-12%", g, "--memory-limit"); }, "less than one byte");
  expect_error([&] { parse_memory_limit("200%", g, "--memory-limit"); }, "at most 100%, got '200%'");
  EXPECT_EQ(parse_memory_limit("100%", g), g);
}

TEST(TensorRuntime, NumThreads) {
  ThreadGuard guard;
  EXPECT_GE(get_num_threads(), 1);
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(2);
  EXPECT_EQ(get_num_threads(), 2);
  // Results agree across thread counts.
  Tensor a = arange(100000, kFloat64);
  double s2 = a.sum().item<double>();
  set_num_threads(1);
  EXPECT_EQ(a.sum().item<double>(), s2);
  expect_error([] { set_num_threads(0); }, "[set_num_threads]");
}

TEST(TensorDevice, Parsing) {
  Device c("cpu");
  EXPECT_TRUE(c.is_cpu());
  EXPECT_EQ(c, Device::cpu());
  EXPECT_EQ(c.str(), "cpu");

  Device g("cuda:1");
  EXPECT_TRUE(g.is_cuda());
  EXPECT_EQ(g.index, 1);
  EXPECT_EQ(g, Device::cuda(1));
  EXPECT_EQ(g.str(), "cuda:1");
  EXPECT_EQ(Device("cuda"), Device::cuda());  // index -1: the current device, fixed where used
  EXPECT_EQ(Device("cuda").index, -1);
  EXPECT_EQ(Device("cuda").str(), "cuda");
  EXPECT_EQ(Device(kCUDA), Device::cuda());
  EXPECT_FALSE(Device("cuda") == Device::cuda(0));  // as torch.device("cuda") != "cuda:0"
  EXPECT_EQ(Device("cpu:0"), Device::cpu());
  EXPECT_FALSE(Device::cuda(0) == Device::cuda(1));

  std::ostringstream os;
  os << Device::cuda(2);
  EXPECT_EQ(os.str(), "cuda:2");

  for (const char* bad : {"gpu", "", "cuda:", "cuda:x", "cuda:-1", "cpu:1", "cuda:1:2", " cpu"}) {
    SCOPED_TRACE(bad);
    expect_error([&] { Device d{std::string(bad)}; }, "[Device]");
  }
}

TEST(TensorDevice, NoCudaHere) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present; this checks the behaviour without one";
  EXPECT_EQ(cuda::device_count(), 0);
  Tensor x = tensor({1.0, 2.0});
  expect_error([&] { x.to(Device::cuda(0)); }, "cuda:0");
  expect_error([&] { x.cuda(); }, "[to]");
  expect_error([&] { empty({2}, Device::cuda(0)); }, "cuda");
  expect_error([] { memory_stats(Device::cuda(0)); }, "[memory_stats]");
  // to(cpu) on a CPU tensor is the tensor itself.
  EXPECT_TRUE(x.to(Device::cpu()).is_same(x));
  EXPECT_TRUE(x.cpu().is_same(x));
}
