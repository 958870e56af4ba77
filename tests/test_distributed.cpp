// kiln::distributed, DistributedDataParallel and DistributedSampler. In this process (a world of
// one, no init()): collectives leave tensors as they are, DDP is the module, and the sampler's
// shares are checked for any world size. Across processes: each test starts
// `mpirun --oversubscribe -np 2 kiln_distributed_worker CASE` (tests/distributed_worker.cpp,
// which checks its results against answers computed locally) and reads its exit status and output.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <string>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

namespace dist = kiln::distributed;

TEST(DistributedWorldOfOne, CollectivesLeaveTensorsAsTheyAre) {
  ASSERT_FALSE(dist::is_initialized());
  EXPECT_EQ(dist::rank(), 0);
  EXPECT_EQ(dist::world_size(), 1);
  EXPECT_EQ(dist::local_rank(), 0);
  Tensor t = arange(6, kFloat32).reshape({2, 3}).t();
  const std::vector<double> before = values(t);
  dist::all_reduce(t, dist::ReduceOp::Average);
  dist::broadcast(t, 0);
  dist::all_reduce_async(t).wait();
  EXPECT_EQ(values(t), before);
  const std::vector<Tensor> g = dist::all_gather(t);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(values(g[0]), before);
  EXPECT_EQ(values(dist::reduce_scatter(t)), before);
  dist::barrier();
  expect_error([] { Tensor i = arange(3, kInt64); dist::all_reduce(i, dist::ReduceOp::Average); },
               "[all_reduce] average needs a floating-point tensor, got int64");
  expect_error([&] { dist::broadcast(t, 1); }, "[broadcast] root 1 is not a rank of this world of 1");
}

// torchrun's variables with no MPI launcher: an error, not a world of one in every process.
TEST(DistributedWorldOfOne, TorchrunsVariablesWithoutMpiAreAnError) {
  ScopedEnv world("WORLD_SIZE", "2"), rank("RANK", "1");
  expect_error([] { dist::init(); }, "[distributed::init] WORLD_SIZE=2 is set (by torchrun?) but no MPI launcher");
  EXPECT_FALSE(dist::is_initialized());
}

TEST(DistributedWorldOfOne, DistributedDataParallelIsTheModule) {
  manual_seed(2);
  nn::Linear a(3, 2);
  manual_seed(2);
  nn::Linear b(3, 2);
  nn::parallel::DistributedDataParallel ddp(b, {.bucket_cap_mb = 0.00001});
  EXPECT_EQ(ddp.bucket_names().size(), 2u);  // weight and bias: each over the cap alone
  EXPECT_EQ(ddp.bucket_names()[0], std::vector<std::string>{"bias"});  // reverse registration order
  Tensor x = randn({4, 3});
  a(x).pow(2).sum().backward();
  ddp(x).pow(2).sum().backward();
  EXPECT_EQ(values(b->weight.grad()), values(a->weight.grad()));
  EXPECT_EQ(values(b->bias.grad()), values(a->bias.grad()));
}

// ---- DistributedSampler for any world size (explicit num_replicas and rank)

std::vector<std::vector<int64_t>> shares(int64_t n, int64_t world, data::DistributedSamplerOptions o, uint64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < world; ++r) {
    o.num_replicas = world;
    o.rank = r;
    data::DistributedSampler s(n, o);
    out.push_back(s.indices(epoch));
    EXPECT_EQ(static_cast<int64_t>(out.back().size()), s.size());
  }
  return out;
}

// The transports built in, named with their versions, before any init().
TEST(DistributedWorldOfOne, TransportsNameTheBuiltLibraries) {
  const std::string t = distributed::transports();
#if defined(KILN_MPIEXEC)
  EXPECT_EQ(t.rfind("MPI (", 0), 0u) << t;
  EXPECT_EQ(t.find("MPI ()"), std::string::npos) << t;
#endif
  if (t.find("MPI") == std::string::npos && t.find("NCCL") == std::string::npos) {
    EXPECT_EQ(t, "none (a world of one only)");
  }
  EXPECT_FALSE(distributed::is_initialized());
}

TEST(DistributedSampler, SharesAreDisjointCoverTheDataAndFollowTheEpoch) {
  for (int64_t n : {0, 1, 7, 10, 23, 100})
    for (int64_t world : {1, 2, 3, 4})
      for (bool shuffle : {false, true}) {
        const std::string what = "n " + std::to_string(n) + " world " + std::to_string(world);
        // Padded (training): equal shares, every index at least once, the padding repeats the start.
        auto padded = shares(n, world, {.shuffle = shuffle, .seed = 4}, 0);
        std::multiset<int64_t> all;
        for (const auto& s : padded) {
          EXPECT_EQ(static_cast<int64_t>(s.size()), (n + world - 1) / world) << what;
          all.insert(s.begin(), s.end());
        }
        EXPECT_EQ(static_cast<int64_t>(std::set<int64_t>(all.begin(), all.end()).size()), n) << what;
        // Unpadded (evaluation): every index exactly once.
        auto exact = shares(n, world, {.shuffle = shuffle, .seed = 4, .pad = false}, 0);
        std::multiset<int64_t> once;
        for (const auto& s : exact) once.insert(s.begin(), s.end());
        EXPECT_EQ(static_cast<int64_t>(once.size()), n) << what;
        EXPECT_EQ(static_cast<int64_t>(std::set<int64_t>(once.begin(), once.end()).size()), n) << what;
        // drop_last: equal shares of n / world, all distinct.
        auto dropped = shares(n, world, {.shuffle = shuffle, .seed = 4, .drop_last = true}, 0);
        std::set<int64_t> distinct;
        for (const auto& s : dropped) {
          EXPECT_EQ(static_cast<int64_t>(s.size()), n / world) << what;
          distinct.insert(s.begin(), s.end());
        }
        EXPECT_EQ(static_cast<int64_t>(distinct.size()), n / world * world) << what;
        if (shuffle && n >= 10) {
          EXPECT_NE(shares(n, world, {.seed = 4}, 1), padded) << what << ": epoch 1 reshuffles";
          EXPECT_EQ(shares(n, world, {.seed = 4}, 0), padded) << what << ": the same epoch, the same order";
          EXPECT_NE(shares(n, world, {.seed = 5}, 0), padded) << what << ": another seed, another order";
        }
      }
  // PyTorch's unshuffled layout: rank r takes r, r + world, ...; the padding wraps to the start.
  EXPECT_EQ(shares(5, 2, {.shuffle = false}, 0), (std::vector<std::vector<int64_t>>{{0, 2, 4}, {1, 3, 0}}));
}

TEST(DistributedSampler, TheLoaderTakesItAndBadSettingsAreErrors) {
  data::TensorDataset ds(arange(10, kFloat32).reshape({10, 1}), arange(10, kInt64));
  auto s = std::make_shared<data::DistributedSampler>(
      10, data::DistributedSamplerOptions{.num_replicas = 3, .rank = 1, .shuffle = false, .pad = false});
  data::DataLoader loader(ds, {.batch_size = 2, .sampler = s});
  EXPECT_EQ(loader.size(), 2);
  std::vector<int64_t> seen;
  for (data::Batch& b : loader)
    for (int64_t v : b.target.to_vector<int64_t>()) seen.push_back(v);
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 4, 7}));
  expect_error([&] { data::DataLoader bad(ds, {.batch_size = 2, .shuffle = true, .sampler = s}); },
               "[DataLoader] shuffle must be false with a sampler");
  expect_error([] { data::DistributedSampler(10, {.num_replicas = 2, .rank = 2}); }, "rank 2 is not in [0, 2)");
  // Only -1 means "the process group's": -2 is a mistake, not rank 0.
  expect_error([] { data::DistributedSampler(10, {.num_replicas = 2, .rank = -2}); },
               "[DistributedSampler] rank must be -1 (the process group's) or >= 0, got -2");
  expect_error([] { data::DistributedSampler(10, {.num_replicas = -3}); }, "num_replicas must be -1");
  auto big = std::make_shared<data::DistributedSampler>(20, data::DistributedSamplerOptions{.num_replicas = 1, .rank = 0});
  data::DataLoader wrong(ds, {.batch_size = 2, .sampler = big});
  expect_error([&] { for (data::Batch& b : wrong) (void)b; }, "the sampler gave index");
  // A sampler of the user's own whose indices are fewer than its size() says (the loader counts
  // batches by size()): an error, not a batch past the end.
  struct Liar : data::Sampler {
    std::vector<int64_t> indices(uint64_t) const override { return {0, 1, 2}; }
    int64_t size() const override { return 6; }
  };
  data::DataLoader liar(ds, {.batch_size = 2, .sampler = std::make_shared<Liar>()});
  EXPECT_EQ(liar.size(), 3);
  expect_error([&] { for (data::Batch& b : liar) (void)b; },
               "[DataLoader] the sampler gave 3 indices for epoch 0 but its size() is 6");
}

// In a process of an MPI job, a sampler made before distributed::init() would be a world of one
// on every process (each taking the whole data set, in the same order): an error, as torch's.
TEST(DistributedSampler, DefaultsBeforeInitUnderAnMpiLauncherAreAnErrorAsAreCollectives) {
  ASSERT_FALSE(distributed::is_initialized());
  ScopedEnv launched("OMPI_COMM_WORLD_SIZE", "4");
  expect_error([] { data::DistributedSampler(10); }, "distributed::init() has not been called yet");
  expect_error([] { data::DistributedSampler(10, {.num_replicas = 4}); }, "call it before making the sampler");
  EXPECT_EQ(data::DistributedSampler(10, {.num_replicas = 4, .rank = 3}).size(), 3);  // explicit: fine
  // Collectives and DDP too, as torch's "default process group has not been initialized" (each
  // process alone, nothing averaged).
  Tensor t = ones({2});
  expect_error([&] { dist::all_reduce(t); }, "[all_reduce] an MPI launcher started this process but distributed::init()");
  expect_error([&] { dist::barrier(); }, "[barrier] an MPI launcher started this process");
  expect_error([] { nn::parallel::DistributedDataParallel ddp(nn::Linear(2, 2)); }, "[DistributedDataParallel] an MPI launcher");
}

// DistributedSampler::set_epoch decides the loader's next pass, as in PyTorch: a resumed run that
// sets only the sampler's epoch runs that epoch, not the loader's epoch 0 again.
TEST(DistributedSampler, ItsSetEpochDecidesTheLoadersPass) {
  data::TensorDataset ds(arange(12, kFloat32).reshape({12, 1}), arange(12, kInt64));
  auto s = std::make_shared<data::DistributedSampler>(12, data::DistributedSamplerOptions{.num_replicas = 2, .rank = 1});
  data::DataLoader loader(ds, {.batch_size = 6, .sampler = s});
  EXPECT_EQ((*loader.begin()).target.to_vector<int64_t>(), s->indices(0));  // no epoch chosen: the loader's 0
  s->set_epoch(5);
  EXPECT_EQ((*loader.begin()).target.to_vector<int64_t>(), s->indices(5));
  EXPECT_NE(s->indices(5), s->indices(1));
  EXPECT_EQ(loader.epoch(), 6u);
  // PyTorch's loop: set_epoch before each pass.
  for (uint64_t e = 0; e < 3; ++e) {
    s->set_epoch(e);
    EXPECT_EQ((*loader.begin()).target.to_vector<int64_t>(), s->indices(e)) << e;
  }
  // The loader's set_epoch and the sampler's must agree.
  loader.set_epoch(7);
  expect_error([&] { loader.begin(); }, "[DataLoader] set_epoch chose epoch 7 but the sampler's set_epoch chose epoch 2");
  loader.set_epoch(2);
  EXPECT_EQ((*loader.begin()).target.to_vector<int64_t>(), s->indices(2));
}

// ---- two processes under mpirun

struct Job {
  int status = -1;
  std::string output;
  double seconds = 0;
};

#if defined(KILN_MPIEXEC)
Job run_job(const std::string& which, const std::string& mca = "", int ranks = 2) {
  // Root may run it (CI does); one OpenMP thread per rank on this 2-core machine; no leak
  // checks on MPI's own allocations under the sanitizers.
  std::string cmd =
      std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 ") +
      "timeout 120 " + KILN_MPIEXEC + " --oversubscribe --bind-to none -np " + std::to_string(ranks) +
      " -x OMP_NUM_THREADS=1 -x ASAN_OPTIONS " + mca + " " + KILN_DISTRIBUTED_WORKER + " " + which + " 2>&1";
  Job job;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return job;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) job.output.append(buf, n);
  const int rc = pclose(p);
  job.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return job;
}
#endif

class TwoRanks : public ::testing::Test {
 protected:
  void SetUp() override {
#if !defined(KILN_MPIEXEC)
    GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
#endif
  }
  void expect_ok(const std::string& which, const std::string& mca = "", int ranks = 2) {
#if defined(KILN_MPIEXEC)
    const Job job = run_job(which, mca, ranks);
    EXPECT_EQ(job.status, 0) << job.output;
    EXPECT_NE(job.output.find("rank 0: ok"), std::string::npos) << job.output;
    EXPECT_NE(job.output.find("rank 1: ok"), std::string::npos) << job.output;
#endif
  }
};

TEST_F(TwoRanks, EveryCollectiveEveryDtypeOddSizesAndNonContiguousInputs) { expect_ok("collectives"); }
// Past MPI's int counts (2^30 elements) collectives go in pieces: the same suite with pieces of 3
// elements or bytes (all_gather and reduce_scatter were refused past 2^30).
TEST_F(TwoRanks, EveryCollectiveInPiecesAsPastMpisIntCounts) { expect_ok("collectives", "-x KILN_TEST_MPI_MAX_COUNT=3"); }
TEST_F(TwoRanks, MismatchedCollectivesAreAnErrorOnEveryRank) { expect_ok("mismatch"); }
TEST_F(TwoRanks, DistributedDataParallelEqualsOneProcessOnTheSameSamples) { expect_ok("ddp"); }
// The transport a job across machines uses: TCP over the loopback interface, no shared memory.
TEST_F(TwoRanks, DistributedDataParallelOverTcpLoopback) {
  expect_ok("ddp", "--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo");
}
// Three ranks: a world size whose inverse no float type holds exactly.
TEST_F(TwoRanks, DistributedDataParallelAveragesEveryFloatTypeInAWorldOfThree) { expect_ok("average", "", 3); }
TEST_F(TwoRanks, BuffersComeFromRankZeroBeforeEachForward) { expect_ok("buffers"); }
TEST_F(TwoRanks, UnusedParametersAreNamedUnlessAllowed) { expect_ok("unused"); }
TEST_F(TwoRanks, DistributedSamplerSharesThroughTheLoader) { expect_ok("sampler"); }

TEST_F(TwoRanks, ARankThatThrowsEndsTheWholeJobWithItsError) {
#if defined(KILN_MPIEXEC)
  const Job job = run_job("throw");
  EXPECT_NE(job.status, 0) << job.output;
  EXPECT_LT(job.seconds, 30) << job.output;
  const std::string line = "[distributed] rank 1 failed: a planted failure in step 1";
  const size_t first = job.output.find(line);
  ASSERT_NE(first, std::string::npos) << job.output;
  EXPECT_EQ(job.output.find(line, first + 1), std::string::npos) << "printed more than once:\n" << job.output;
#endif
}

// A process that does not come to a collective within KILN_DISTRIBUTED_TIMEOUT ends the job with
// that error, instead of leaving the others waiting for ever.
TEST_F(TwoRanks, AProcessThatNeverComesEndsTheJobAfterTheTimeout) {
#if defined(KILN_MPIEXEC)
  const Job job = run_job("late");
  EXPECT_NE(job.status, 0) << job.output;
  EXPECT_LT(job.seconds, 30) << job.output;
  EXPECT_NE(job.output.find("not every process reached this collective within 1 s"), std::string::npos) << job.output;
#endif
}

// A process that ends while another is in a collective ends the job at once, naming both,
// instead of leaving that one waiting for the timeout (here 600 s).
TEST_F(TwoRanks, AProcessThatEndsWhileAnotherIsInACollectiveEndsTheJob) {
#if defined(KILN_MPIEXEC)
  const Job job = run_job("early_end");
  EXPECT_NE(job.status, 0) << job.output;
  EXPECT_LT(job.seconds, 30) << job.output;
  EXPECT_NE(job.output.find("rank 0 called all_reduce of float32 [3] (sum); rank 1 called finalize (its process is "
                            "ending)"),
            std::string::npos)
      << job.output;
#endif
}

}  // namespace
}  // namespace kiln::test
