// The cost of data parallelism, measured under mpirun (docs/perf.md has the commands and results):
//   bench_ddp step MODEL BATCH [PAIRS]  training steps of MODEL (resnet50, bert-base, ...) at BATCH
//        per process through DistributedDataParallel, alternating with the same step under
//        no_sync() (no communication at all), PAIRS pairs (3 by default); prints the median step
//        time, the samples/s of the whole job, and what communication adds to a step (the median,
//        least and most of the pairs' ratios).
//   bench_ddp reduce MIB [fp16|bf16]   the all-reduce inside DDP: backward of a graph that gives
//        MIB MiB of float32 gradients (1 MiB parameters) at once, with DDP and without; the
//        difference is DDP's bucketing, copies and all-reduce; prints the bandwidth (gradient bytes
//        / that time). fp16, bf16: the buckets sent compressed (register_builtin_comm_hook).
//   bench_ddp mpi MIB       a plain MPI_Allreduce of the same bytes in one call (no Kiln), the
//        reference for `reduce`.
//   bench_ddp buffers MODEL  what DDP does before each forward with broadcast_buffers (rank 0's
//        buffers, batch norm's statistics, to every process), alone: the median of 20.
// Each prints one JSON line from rank 0.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;
namespace dist = kiln::distributed;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Each step's time on its slowest process (a step is as slow as that), and their median.
std::vector<double> slowest(const std::vector<double>& times) {
  Tensor t = tensor(times, kFloat64);
  dist::all_reduce(t, dist::ReduceOp::Max);
  return t.to_vector<double>();
}
double job_median(const std::vector<double>& times) { return median(slowest(times)); }

int step(const std::string& model, int64_t batch, int pairs) {
  dist::init();
  const bool bert = model.rfind("bert", 0) == 0;
  manual_seed(1);
  std::shared_ptr<nn::Module> module;
  nn::AnyModule cnn;
  models::BertForMaskedLM mlm{nullptr};
  if (bert) {
    mlm = models::bert_for_masked_lm(models::BertConfig::preset(model.substr(5)));
    module = mlm.ptr();
  } else {
    cnn = models::create(model, 1000);
    module = cnn.ptr();
  }
  // KILN_BENCH_BUCKET_MB: another bucket size, to see what overlap buys.
  nn::parallel::DistributedDataParallelOptions ddp_options;
  if (const char* mb = std::getenv("KILN_BENCH_BUCKET_MB")) ddp_options.bucket_cap_mb = std::stod(mb);
  auto ddp = bert ? std::make_unique<nn::parallel::DistributedDataParallel>(module, ddp_options)
                  : std::make_unique<nn::parallel::DistributedDataParallel>(cnn, ddp_options);
  optim::SGD opt(module->parameters(), {.lr = 1e-3, .momentum = 0.9});
  manual_seed(2 + dist::rank());
  const int64_t seq = 128;
  Tensor x = bert ? randint(0, 30522, {batch, seq}, kInt64) : randn({batch, 3, 224, 224}).contiguous(MemoryFormat::ChannelsLast);
  Tensor y = bert ? randint(0, 30522, {batch, seq}, kInt64) : randint(0, 1000, {batch}, kInt64);
  // One step through DDP (comm) or of the bare module with DDP's hooks silenced (no_sync): the
  // same work with no communication at all.
  auto one_step = [&](bool comm) {
    opt.zero_grad();
    std::optional<nn::parallel::DistributedDataParallel::NoSync> quiet;
    if (!comm) quiet.emplace(*ddp);
    Tensor loss;
    if (bert) {
      auto f = [&] { return mlm->masked_lm_loss(x, y); };
      loss = comm ? ddp->forward_with(f) : f();
    } else {
      loss = nn::functional::cross_entropy(comm ? (*ddp)(x) : cnn(x), y);
    }
    loss.backward();
    opt.step();
  };
  one_step(true);  // warm-up
  one_step(false);
  // Pairs in the order c n, n c, c n, ... so that a drift of the machine's speed hits both alike;
  // every step starts together on every process.
  std::vector<double> with, without, ratio;
  for (int i = 0; i < pairs; ++i) {
    double t[2];
    for (int k = 0; k < 2; ++k) {
      const bool comm = (k == 0) == (i % 2 == 0);
      dist::barrier();
      const auto t0 = Clock::now();
      one_step(comm);
      t[comm ? 1 : 0] = seconds_since(t0);
    }
    without.push_back(t[0]);
    with.push_back(t[1]);
  }
  with = slowest(with);
  without = slowest(without);
  for (int i = 0; i < pairs; ++i) ratio.push_back(with[static_cast<size_t>(i)] / without[static_cast<size_t>(i)] - 1);
  const double m = median(with);
  if (dist::rank() == 0)
    std::printf("{\"bench\": \"ddp_step\", \"model\": \"%s\", \"batch_per_process\": %lld, \"processes\": %d, "
                "\"threads\": %d, \"pairs\": %d, \"median_s\": %.4f, \"median_no_comm_s\": %.4f, "
                "\"overhead_median\": %.4f, \"overhead_min\": %.4f, \"overhead_max\": %.4f, \"samples_per_s\": %.2f}\n",
                model.c_str(), static_cast<long long>(batch), dist::world_size(), get_num_threads(), pairs, m,
                median(without), median(ratio), *std::min_element(ratio.begin(), ratio.end()),
                *std::max_element(ratio.begin(), ratio.end()), static_cast<double>(batch) * dist::world_size() / m);
  return 0;
}

int reduce(double mib, int reps, const std::string& hook) {
  dist::init();
  // Many parameters (as a model has) of 1 MiB each: DDP buckets them as it would a model's.
  const int64_t per = 262144, count = std::max<int64_t>(1, static_cast<int64_t>(mib));
  auto holder = std::make_shared<nn::Module>("Params");
  std::vector<Tensor> ps;
  for (int64_t i = 0; i < count; ++i) ps.push_back(holder->register_parameter("p" + std::to_string(i), zeros({per})));
  // The same backward without DDP first: what DDP adds to it is the reduction's time.
  auto time_backward = [&](nn::parallel::DistributedDataParallel* ddp) {
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {
      Tensor loss = zeros({1});
      for (const Tensor& p : ps) loss = loss + p.sum();  // every gradient is ones, made at once
      dist::barrier();
      const auto t0 = Clock::now();
      (ddp ? ddp->forward_with([&] { return loss; }) : loss).backward();
      if (r > 0) times.push_back(seconds_since(t0));
      holder->zero_grad();
    }
    return job_median(times);
  };
  const double plain = time_backward(nullptr);
  nn::parallel::DistributedDataParallel ddp(holder);
  if (hook == "fp16") ddp.register_builtin_comm_hook(nn::parallel::BuiltinCommHook::Fp16Compress);
  if (hook == "bf16") ddp.register_builtin_comm_hook(nn::parallel::BuiltinCommHook::Bf16Compress);
  const double with_ddp = time_backward(&ddp);
  const double bytes = static_cast<double>(count * per * 4), m = with_ddp - plain;
  if (dist::rank() == 0)
    std::printf("{\"bench\": \"ddp_reduce\", \"mib\": %.0f, \"hook\": \"%s\", \"processes\": %d, "
                "\"backward_s\": %.5f, \"backward_with_ddp_s\": %.5f, \"reduction_s\": %.5f, \"gb_per_s\": %.3f}\n",
                bytes / 1048576, hook.empty() ? "allreduce" : hook.c_str(), dist::world_size(), plain, with_ddp, m,
                bytes / m / 1e9);
  return 0;
}

int buffers(const std::string& model) {
  dist::init();
  nn::AnyModule cnn = models::create(model, 1000);
  nn::parallel::DistributedDataParallel ddp(cnn);
  const size_t count = cnn.ptr()->named_buffers().size();
  std::vector<double> times;
  for (int r = 0; r < 21; ++r) {
    dist::barrier();
    const auto t0 = Clock::now();
    ddp.forward_with([] { return Tensor(); });  // the buffers' broadcast, and no forward
    if (r > 0) times.push_back(seconds_since(t0));
  }
  const double m = job_median(times);
  if (dist::rank() == 0)
    std::printf("{\"bench\": \"ddp_buffers\", \"model\": \"%s\", \"buffers\": %zu, \"processes\": %d, "
                "\"median_s\": %.6f}\n",
                model.c_str(), count, dist::world_size(), m);
  return 0;
}

int mpi(double mib, int reps) {
  MPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int64_t n = static_cast<int64_t>(mib * 262144);
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = seconds_since(t0);
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r > 0) times.push_back(t);
  }
  const double m = median(times), bytes = static_cast<double>(n * 4);
  if (rank == 0)
    std::printf("{\"bench\": \"mpi_allreduce\", \"mib\": %.0f, \"processes\": %d, \"median_s\": %.5f, \"gb_per_s\": %.3f}\n",
                bytes / 1048576, size, m, bytes / m / 1e9);
  MPI_Finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "step" && (argc == 4 || argc == 5)) return step(argv[2], std::stoll(argv[3]), argc == 5 ? std::stoi(argv[4]) : 3);
    if (mode == "reduce" && (argc == 3 || argc == 4)) {
      const std::string hook = argc == 4 ? argv[3] : "";
      if (hook.empty() || hook == "fp16" || hook == "bf16") return reduce(std::stod(argv[2]), 5, hook);
    }
    if (mode == "mpi" && argc == 3) return mpi(std::stod(argv[2]), 5);
    if (mode == "buffers" && argc == 3) return buffers(argv[2]);
  } catch (const std::exception& e) {
    dist::abort(e.what());
  }
  std::fprintf(stderr, "usage: bench_ddp step MODEL BATCH [PAIRS] | reduce MIB [fp16|bf16] | mpi MIB | buffers MODEL   (under mpirun)\n");
  return 2;
}
