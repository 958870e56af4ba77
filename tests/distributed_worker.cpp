// One rank of the multi-process tests (tests/test_distributed.cpp starts it under mpirun): runs the
// case named on the command line against answers it computes locally, prints "rank R: ok" on
// success, and exits non-zero with the first difference otherwise.
//   collectives  every collective, each dtype, odd sizes, non-contiguous inputs, async forms
//   mismatch     different shapes, dtypes and collectives (and DDP models) on the ranks: an error on every rank
//   ddp          DistributedDataParallel (SGD and AdamW, bucketed, no_sync accumulation) equals
//                one process training on the ranks' batches together; kept gradients stay; no_sync
//                counts at forward
//   average      DDP's average of float32, float64 and bfloat16 gradients for any world size (the
//                float types divided on the way into the buckets, bfloat16 after the sum), and
//                with the buckets sent as float16 or bfloat16 (register_builtin_comm_hook)
//   buffers      rank 0's buffers reach every rank before each forward
//   unused       an unused parameter is an error naming it, or fine with find_unused_parameters
//   sampler      DistributedSampler shares through a DataLoader: disjoint, covering, per epoch
//   throw        rank 1 throws mid-step: the job ends, non-zero, with the error once
//   late         rank 1 reaches a collective past KILN_DISTRIBUTED_TIMEOUT: the job ends with that error
//   early_end    rank 1 ends (finalize) while rank 0 is in a collective: the job ends at once, naming it
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"

namespace dist = kiln::distributed;
using namespace kiln;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", dist::rank(), what.c_str());
    ++failures;
  }
}

// Rank r's tensor: small integers that depend on the rank and the element (exact in every
// dtype and in any sum over a few ranks).
std::vector<double> rank_values(int r, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>((i * 3 + r * 7 + 1) % 11 - 5);
  return v;
}
Tensor rank_tensor(int r, Shape shape, ScalarType dtype) {
  Tensor t = tensor(rank_values(r, shape_numel(shape)), kFloat64).reshape(shape);
  if (dtype == kBool) return t.gt(0);
  if (dtype == kUInt8) return t.add(5).to(kUInt8);
  return t.to(dtype);
}

std::string what_of(const std::string& op, ScalarType dtype, int64_t n, bool strided) {
  return op + " " + dtype_name(dtype) + " n=" + std::to_string(n) + (strided ? " (non-contiguous)" : "");
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to(kFloat64).to_vector<double>() == b.to(kFloat64).to_vector<double>();
}

// A non-contiguous tensor holding rank_tensor's values: a transposed copy's transpose.
Tensor maybe_strided(Tensor t, bool strided) {
  if (!strided) return t;
  const int64_t n = t.numel();
  Tensor wide = zeros({n, 2}, t.dtype());
  wide.narrow(1, 1, 1).copy_(t.reshape({n, 1}));
  return wide.narrow(1, 1, 1).squeeze(1);  // stride 2
}

void collectives() {
  const int world = dist::world_size(), me = dist::rank();
  for (ScalarType dtype : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1001}})
      for (bool strided : {false, true}) {
        auto mine = [&] { return maybe_strided(rank_tensor(me, {n}, dtype), strided); };
        std::vector<Tensor> all;
        for (int r = 0; r < world; ++r) all.push_back(rank_tensor(r, {n}, dtype));
        for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Max, dist::ReduceOp::Min, dist::ReduceOp::Average}) {
          if (op == dist::ReduceOp::Average && !is_floating_point(dtype)) continue;
          Tensor want;
          if (dtype == kBool) {
            want = all[0];
            for (int r = 1; r < world; ++r) want = op == dist::ReduceOp::Min ? (want && all[r]) : (want || all[r]);
          } else {
            Tensor acc = all[0].to(kFloat64);
            for (int r = 1; r < world; ++r) {
              Tensor x = all[r].to(kFloat64);
              acc = op == dist::ReduceOp::Max ? maximum(acc, x) : op == dist::ReduceOp::Min ? minimum(acc, x) : acc + x;
            }
            if (op == dist::ReduceOp::Average) acc = acc / static_cast<double>(world);
            want = acc.to(dtype);
          }
          Tensor t = mine();
          dist::all_reduce(t, op);
          expect(same(t, want), what_of("all_reduce op " + std::to_string(static_cast<int>(op)), dtype, n, strided));
          Tensor a = mine();
          dist::Work w = dist::all_reduce_async(a, op);
          w.wait();
          expect(w.is_completed() && same(a, want), what_of("all_reduce_async", dtype, n, strided));
        }
        Tensor b = mine();
        dist::broadcast(b, world - 1);
        expect(same(b, all[static_cast<size_t>(world - 1)]), what_of("broadcast", dtype, n, strided));
        const std::vector<Tensor> got = dist::all_gather(mine());
        bool ok = got.size() == static_cast<size_t>(world);
        for (int r = 0; ok && r < world; ++r) ok = same(got[static_cast<size_t>(r)], all[static_cast<size_t>(r)]);
        expect(ok, what_of("all_gather", dtype, n, strided));
        if (dtype != kBool) {
          // reduce_scatter of [world * n]: rank r's share is the sum of the ranks' part r.
          Tensor in = cat(std::vector<Tensor>(static_cast<size_t>(world), rank_tensor(me, {n}, dtype)), 0);
          Tensor share = dist::reduce_scatter(in, dist::ReduceOp::Sum);
          Tensor want = all[0].to(kFloat64);
          for (int r = 1; r < world; ++r) want = want + all[static_cast<size_t>(r)].to(kFloat64);
          expect(same(share, want.to(dtype)), what_of("reduce_scatter", dtype, n, strided));
        }
      }
  // A 2-D non-contiguous tensor (a transpose) keeps its shape and gets the sum in place.
  Tensor m = rank_tensor(me, {3, 5}, kFloat32).t();
  Tensor want = rank_tensor(0, {3, 5}, kFloat32).t();
  for (int r = 1; r < world; ++r) want = want + rank_tensor(r, {3, 5}, kFloat32).t();
  dist::all_reduce(m);
  expect(same(m, want) && !m.is_contiguous(), "all_reduce of a transposed matrix");
  // Several asynchronous collectives in flight at once complete in order.
  std::vector<Tensor> ts;
  std::vector<dist::Work> works;
  for (int k = 0; k < 5; ++k) ts.push_back(full({100}, static_cast<double>(me + k), kFloat64));
  for (Tensor& t : ts) works.push_back(dist::all_reduce_async(t));
  for (dist::Work& w : works) w.wait();
  for (int k = 0; k < 5; ++k) {
    double s = 0;
    for (int r = 0; r < world; ++r) s += r + k;
    expect(ts[static_cast<size_t>(k)].to_vector<double>()[99] == s, "asynchronous all_reduce " + std::to_string(k));
  }
  // Collectives on one tensor see each other's results in call order, staged ones (16-bit floats,
  // a non-contiguous tensor: the result reaches the tensor at wait()) too: the second sum read
  // the value from before the first (world, not world^2).
  for (ScalarType dt : {kFloat16, kBFloat16, kFloat32})
    for (bool strided : {false, true}) {
      Tensor t = maybe_strided(ones({4}, dt), strided);
      dist::Work w1 = dist::all_reduce_async(t), w2 = dist::all_reduce_async(t);
      w1.wait();
      w2.wait();
      expect(t.to(kFloat64).to_vector<double>() == std::vector<double>(4, world * world),
             what_of("two all_reduce_async in a row", dt, 4, strided));
      Tensor u = maybe_strided(ones({3}, dt), strided);
      dist::Work w3 = dist::all_reduce_async(u);
      const std::vector<Tensor> parts = dist::all_gather(u);  // after the sum, as called
      expect(parts[0].to(kFloat64).to_vector<double>() == std::vector<double>(3, world),
             what_of("all_gather after all_reduce_async", dt, 3, strided));
      w3.wait();
    }
  dist::barrier();
}

void expect_error(const std::function<void()>& fn, const std::string& needle, const std::string& what) {
  try {
    fn();
    expect(false, what + ": no error");
  } catch (const Error& e) {
    expect(std::string(e.what()).find(needle) != std::string::npos, what + ": got '" + e.what() + "'");
  }
}

void mismatch() {
  const int me = dist::rank();
  expect_error([&] { Tensor t = zeros({me == 0 ? 10 : 12}); dist::all_reduce(t); }, "disagree", "shapes");
  expect_error([&] { Tensor t = zeros({4}, me == 0 ? kFloat32 : kFloat64); dist::all_reduce(t); }, "disagree", "dtypes");
  expect_error([&] {
    Tensor t = zeros({4});
    if (me == 0) dist::all_reduce(t);
    else dist::broadcast(t, 0);
  }, "rank 1 called broadcast", "collectives");
  expect_error([&] { Tensor t = zeros({4}); dist::broadcast(t, me); }, "disagree", "roots");
  // Shapes that differ only past the eighth dim (the header keeps eight for its messages).
  expect_error([&] {
    Tensor t = zeros(me == 0 ? Shape{1, 1, 1, 1, 1, 1, 1, 1, 2, 3} : Shape{1, 1, 1, 1, 1, 1, 1, 1, 3, 2});
    dist::all_reduce(t);
  }, "disagree", "shapes past the eighth dim");
  {  // each wait of a failed collective throws, not the first only
    Tensor t = zeros({me == 0 ? 5 : 6});
    dist::Work w = dist::all_reduce_async(t, dist::ReduceOp::Sum);
    expect_error([&] { w.wait(); }, "disagree", "a failed collective's first wait");
    expect_error([&] { w.wait(); }, "disagree", "a failed collective's second wait");
  }
  {  // is_completed() means the result is in the tensor, a staged (float16) one included
    Tensor h = ones({4}, kFloat16);
    dist::Work w = dist::all_reduce_async(h, dist::ReduceOp::Sum);
    while (!w.is_completed()) std::this_thread::yield();
    expect(h.to_vector<double>()[0] == dist::world_size(), "a float16 all_reduce polled to completion");
  }
  for (int round = 0; round < 4; ++round) {  // two threads waiting on one work both see the result
    Tensor h = ones({1 << 24}, kFloat16);  // staged: its result is copied in by the first waiter
    dist::Work w = dist::all_reduce_async(h, dist::ReduceOp::Sum);
    std::atomic<int> right = 0;
    auto waiter = [&] {
      w.wait();
      // The last elements first: a copy still under way writes them last (per thread).
      const int64_t n = h.numel();
      bool ok = h.narrow(0, n - 1, 1).item<double>() == dist::world_size() &&
                h.narrow(0, n / 2 - 1, 1).item<double>() == dist::world_size();
      const std::vector<double> v = h.to_vector<double>();
      ok = ok && std::all_of(v.begin(), v.end(), [](double x) { return x == dist::world_size(); });
      right += ok;
    };
    std::thread other(waiter);
    waiter();
    other.join();
    expect(right == 2, "a float16 all_reduce waited for on two threads");
  }
  {  // different models: DDP's error on every rank, naming the first tensor that differs (it was a
     // bare "[broadcast] the processes disagree")
    nn::Sequential net = me == 0 ? nn::Sequential(nn::Linear(4, 4), nn::Linear(4, 2)) : nn::Sequential(nn::Linear(4, 2));
    expect_error([&] { nn::parallel::DistributedDataParallel model(net); },
                 "[DistributedDataParallel] every process must hold the same module", "DDP over different models");
    if (me == 1)
      expect_error([&] { nn::parallel::DistributedDataParallel model(net); },
                   "tensor 0 is parameter 0.weight float32 [4, 4] on rank 0 but parameter 0.weight float32 [2, 4] on rank 1",
                   "DDP names the tensor");
    else
      expect_error([&] { nn::parallel::DistributedDataParallel model(net); }, "another process's differs", "DDP on rank 0");
  }
  // After those, the group still works.
  Tensor t = ones({3});
  dist::all_reduce(t);
  expect(t.to_vector<double>()[2] == dist::world_size(), "a collective after the errors");
  expect_error([] { Tensor t = arange(4, kInt64); dist::all_reduce(t, dist::ReduceOp::Average); }, "floating-point",
               "average of integers");
  expect_error([] { Tensor t = zeros({4}); dist::broadcast(t, 7); }, "root 7", "a root outside the world");
}

// ---- DistributedDataParallel against one process training on all ranks' samples

nn::Sequential small_net() {
  manual_seed(3);
  return nn::Sequential(nn::Conv2d(2, 4, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), nn::Flatten(),
                        nn::Linear(4 * 6 * 6, 16), nn::ReLU(), nn::Linear(16, 5));
}

struct Data {
  Tensor x, y;  // the global batch of step s: [16, 2, 6, 6], [16]
};
Data global_batch(int64_t step) {
  manual_seed(100 + step);
  Data d{randn({16, 2, 6, 6}), empty({16}, kInt64)};
  for (int64_t i = 0; i < 16; ++i) d.y.data_ptr<int64_t>()[i] = (i * 7 + step) % 5;
  return d;
}

std::vector<double> flat_params(nn::Module& m) {
  std::vector<double> v;
  for (const Tensor& p : m.parameters()) {
    const std::vector<double> x = p.to(kFloat64).contiguous().to_vector<double>();
    v.insert(v.end(), x.begin(), x.end());
  }
  return v;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = a.size() == b.size() ? 0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1e-3, std::abs(b[i])));
  return worst;
}

template <class Opt, class Options>
void ddp_matches_one_process(const Options& opt_options, const char* name, bool accumulate, double bucket_mb) {
  const int world = dist::world_size(), me = dist::rank();
  const int64_t per_rank = 16 / world;
  const int steps = 4;
  // The reference: one process, the whole batch of 16.
  std::vector<double> ref_losses;
  nn::Sequential ref = small_net();
  {
    Opt opt(ref->parameters(), opt_options);
    for (int s = 0; s < steps; ++s) {
      Data d = global_batch(s);
      opt.zero_grad();
      Tensor loss = nn::functional::cross_entropy(ref(d.x), d.y);
      loss.backward();
      opt.step();
      ref_losses.push_back(loss.item<double>());
    }
  }
  // DDP: each rank its share of every batch, a different seed so that only the broadcast makes
  // the replicas equal.
  manual_seed(1000 + me);
  nn::Sequential local = small_net();
  if (me != 0) {
    NoGradGuard ng;
    for (Tensor& p : local->parameters()) p.add_(0.5);
  }
  nn::parallel::DistributedDataParallel ddp(local, {.bucket_cap_mb = bucket_mb});
  Opt opt(local->parameters(), opt_options);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    Data d = global_batch(s);
    Tensor x = d.x.narrow(0, me * per_rank, per_rank), y = d.y.narrow(0, me * per_rank, per_rank);
    opt.zero_grad();
    Tensor loss;
    if (accumulate) {
      // Two micro-batches: the first under no_sync (local accumulation only), each loss halved.
      const int64_t h = per_rank / 2;
      {
        auto guard = ddp.no_sync();
        (nn::functional::cross_entropy(ddp(x.narrow(0, 0, h)), y.narrow(0, 0, h)) * 0.5).backward();
      }
      loss = nn::functional::cross_entropy(ddp(x.narrow(0, h, h)), y.narrow(0, h, h)) * 0.5;
      loss.backward();
    } else {
      loss = nn::functional::cross_entropy(ddp(x), y);
      loss.backward();
    }
    opt.step();
    Tensor l = loss.detach().reshape({1});
    dist::all_reduce(l, dist::ReduceOp::Average);
    losses.push_back(l.item<double>());
  }
  const std::string what = std::string(name) + (accumulate ? " with no_sync accumulation" : "") + ", buckets " +
                           std::to_string(ddp.bucket_names().size());
  expect(max_rel_diff(flat_params(*local), flat_params(*ref)) < 1e-5, what + ": weights differ from one process's");
  if (!accumulate)
    expect(max_rel_diff(losses, ref_losses) < 1e-5, what + ": losses differ from one process's");
  // And the replicas are equal to each other.
  Tensor mine = tensor(flat_params(*local), kFloat64);
  const std::vector<Tensor> all = dist::all_gather(mine);
  for (const Tensor& t : all) expect(same(t, all[0]), what + ": replicas differ");
}

void ddp() {
  ddp_matches_one_process<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3}, "SGD", false, 25);
  ddp_matches_one_process<optim::AdamW>(optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.01}, "AdamW", false, 25);
  // Tiny buckets: several buckets in flight during backward.
  ddp_matches_one_process<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9}, "SGD", false, 0.001);
  ddp_matches_one_process<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9}, "SGD", true, 0.001);
  {  // a gradient kept from one step is not overwritten by the next (torch's default), unless the
     // gradients are the buckets' views (gradient_as_bucket_view, which saves the copy)
    for (const bool view : {false, true}) {
      nn::Linear lin(2, 1, /*bias=*/false);
      nn::parallel::DistributedDataParallel model(lin, {.gradient_as_bucket_view = view});
      std::vector<Tensor> kept;
      for (int s = 0; s < 2; ++s) {
        lin->weight.set_grad(Tensor());
        model(full({1, 2}, 10.0 * (s + 1))).sum().backward();
        kept.push_back(lin->weight.grad());
      }
      expect(kept[0].to_vector<float>()[0] == (view ? 20.0f : 10.0f),
             std::string("a gradient kept from step 0, gradient_as_bucket_view = ") + (view ? "true" : "false"));
      expect(kept[1].to_vector<float>()[0] == 20.0f, "the gradient of step 1");
    }
  }
  {  // no_sync counts where the forward ran, as torch's: a forward under it, backward outside,
     // accumulates locally; a forward outside, backward under it, averages
    const int world = dist::world_size(), me = dist::rank();
    nn::Linear lin(1, 1, /*bias=*/false);
    nn::parallel::DistributedDataParallel model(lin);
    const double mean_rank = (world + 1) / 2.0;
    Tensor out;
    {
      auto guard = model.no_sync();
      out = model(full({1, 1}, me + 1.0));
    }
    out.sum().backward();
    expect(lin->weight.grad().item<double>() == me + 1.0, "a forward under no_sync, backward outside: local");
    lin->weight.set_grad(Tensor());
    out = model(full({1, 1}, me + 1.0));
    {
      auto guard = model.no_sync();
      out.sum().backward();
    }
    expect(lin->weight.grad().item<double>() == mean_rank, "a forward outside no_sync, backward under it: averaged");
  }
  {  // a model converted after wrapping: DDP's own error, naming the parameter
    nn::Sequential net = small_net();
    nn::parallel::DistributedDataParallel model(net);
    net->to(kFloat64);
    expect_error([&] { model.forward(randn({2, 2, 6, 6}, kFloat64)); }, "bias is float64 on cpu but was float32 on cpu when the module was wrapped",
                 "a model converted after wrapping");
  }
}

// Each rank's gradient is (rank + 1) * v for fixed v: the average is mean(rank + 1) * v, which
// in bfloat16 must be the float average rounded once (dividing by 1/3 rounded to bfloat16 first,
// 0.334, misses it for three ranks).
void average() {
  struct Params : nn::Module {
    Params() {
      for (ScalarType dt : {kFloat32, kFloat64, kBFloat16})
        ps.push_back(register_parameter(std::string("p_") + dtype_name(dt), zeros({5}, dt)));
    }
    std::vector<Tensor> ps;
  };
  auto m = std::make_shared<Params>();
  nn::parallel::DistributedDataParallel ddp(m);
  // Values where the bfloat16 average of three ranks comes out one step higher through 1/3 in
  // bfloat16 than through the float sum (found by search over [1, 2) in steps of 1/128).
  const Tensor v = tensor({1.0078125, -1.0390625, 1.0703125, 1.1015625, -1.1328125}, kFloat64);
  const double r = dist::rank() + 1.0, world = dist::world_size();
  ddp.forward_with([&] {
       Tensor loss = zeros({1}, kFloat64);
       for (const Tensor& p : m->ps) loss = loss + (p.to(kFloat64) * v * r).sum();
       return loss;
     })
      .backward();
  const Tensor want = v * ((world + 1) / 2);
  for (const Tensor& p : m->ps) {
    const std::string what = std::string("the average of ") + dtype_name(p.dtype()) + " gradients";
    if (p.dtype() == kBFloat16)
      expect(same(p.grad(), want.to(kFloat32).to(kBFloat16)), what);
    else
      expect((p.grad().to(kFloat64) - want).abs().max().item<double>() <= 1e-6 * 7 * world, what);
  }
  // Compressed buckets (register_builtin_comm_hook): each rank's share rounded to 16 bits and
  // summed in 16 bits, each step rounded (in an order MPI picks: any order's result is right);
  // 16-bit gradients go as they are. Values with float32's 24 bits, whose average 16 bits cannot
  // hold.
  using nn::parallel::BuiltinCommHook;
  const Tensor u = tensor({1.2345678, -2.7182818, 0.3183099, 3.1415927, -0.5772157}, kFloat64);
  const Tensor exact = u * ((world + 1) / 2);
  for (const BuiltinCommHook hook : {BuiltinCommHook::Fp16Compress, BuiltinCommHook::Bf16Compress}) {
    const ScalarType wire = hook == BuiltinCommHook::Fp16Compress ? kFloat16 : kBFloat16;
    const std::string what = std::string("gradients sent as ") + dtype_name(wire) + ": ";
    auto c = std::make_shared<Params>();
    nn::parallel::DistributedDataParallel compressed(c);
    compressed.register_builtin_comm_hook(hook);
    expect_error([&] { compressed.register_builtin_comm_hook(hook); }, "can be called once", what + "a second hook");
    compressed.forward_with([&] {
         Tensor loss = zeros({1}, kFloat64);
         for (const Tensor& p : c->ps) loss = loss + (p.to(kFloat64) * (p.dtype() == kBFloat16 ? v : u) * r).sum();
         return loss;
       })
        .backward();
    for (const Tensor& p : c->ps) {
      if (p.dtype() == kBFloat16) {
        expect(same(p.grad(), want.to(kFloat32).to(kBFloat16)), what + "bfloat16 ones as they are (as above)");
        continue;
      }
      std::vector<std::vector<float>> shares;  // [rank][element], each rounded to 16 bits
      for (int q = 0; q < world; ++q)
        shares.push_back(mul((u * (q + 1.0)).to(p.dtype()), 1.0 / world).to(wire).to(kFloat32).to_vector<float>());
      const auto round16 = [&](float x) {
        return wire == kFloat16 ? static_cast<float>(Half(x)) : static_cast<float>(BFloat16(x));
      };
      const std::vector<double> got = p.grad().to(kFloat64).to_vector<double>();
      bool in_some_order = true;
      for (size_t i = 0; i < got.size(); ++i) {
        std::vector<int> order(static_cast<size_t>(world));
        for (int q = 0; q < world; ++q) order[static_cast<size_t>(q)] = q;
        bool found = false;
        do {  // every order of a left fold: every way three (or two) terms can be added
          float acc = shares[static_cast<size_t>(order[0])][i];
          for (size_t j = 1; j < order.size(); ++j) acc = round16(acc + shares[static_cast<size_t>(order[j])][i]);
          found = found || static_cast<double>(acc) == got[i];
        } while (std::next_permutation(order.begin(), order.end()));
        in_some_order = in_some_order && found;
      }
      expect(world > 3 || in_some_order, what + dtype_name(p.dtype()) + " ones summed in 16 bits");
      expect(!same(p.grad(), exact.to(p.dtype())), what + dtype_name(p.dtype()) + " ones not sent uncompressed");
      const std::vector<Tensor> all = dist::all_gather(p.grad());
      for (const Tensor& t : all) expect(same(t, all[0]), what + "every process gets the same sum");
    }
  }
}

void buffers() {
  manual_seed(5);
  // Two batch norms: float32 statistics and int64 counts, broadcast one group per dtype.
  nn::Sequential net(nn::Conv2d(2, 3, 3), nn::BatchNorm2d(3), nn::Conv2d(3, 4, 1), nn::BatchNorm2d(4), nn::Flatten());
  nn::parallel::DistributedDataParallel ddp(net);
  {
    NoGradGuard ng;
    for (Tensor& b : net->buffers()) b.add_(dist::rank() + 1);  // replicas now differ
  }
  net->eval();
  (void)ddp(randn({2, 2, 5, 5}));
  for (const Tensor& b : net->buffers()) {
    const std::vector<Tensor> all = dist::all_gather(b);
    expect(same(all[0], all.back()), "buffers equal rank 0's after a forward");
  }
}

void unused() {
  struct TwoHeads : nn::Module {
    TwoHeads() : a(register_module("a", nn::Linear(4, 3))), b(register_module("b", nn::Linear(4, 3))) {}
    Tensor forward(const Tensor& x) { return a(x); }
    nn::Linear a, b;
  };
  manual_seed(1);
  auto model = std::make_shared<TwoHeads>();
  {
    nn::parallel::DistributedDataParallel ddp(model);
    expect_error([&] { ddp.forward_with([&] { return model->forward(randn({2, 4})); }).sum().backward(); },
                 "b.weight", "an unused parameter without find_unused_parameters");
  }
  model->zero_grad();
  nn::parallel::DistributedDataParallel ddp(model, {.find_unused_parameters = true});
  manual_seed(10 + dist::rank());
  ddp.forward_with([&] { return model->forward(randn({2, 4})); }).sum().backward();
  const std::vector<Tensor> all = dist::all_gather(model->a->weight.grad());
  expect(same(all[0], all.back()), "with find_unused_parameters the used parameters are averaged");
  // b, which no process used, keeps no gradient (as without DDP: the optimizer skips it).
  expect(!model->b->weight.grad().defined() && !model->b->bias.grad().defined(),
         "a parameter no process used has no gradient");
  // b used by rank 0 only: every process gets rank 0's gradient / world (the others count as 0).
  model->zero_grad();
  Tensor x = full({2, 4}, 1.0);
  ddp.forward_with([&] { return dist::rank() == 0 ? model->a(x) + model->b(x) : model->a(x); }).sum().backward();
  expect(model->b->bias.grad().defined(), "a parameter one process used has a gradient everywhere");
  const double want = 2.0 / dist::world_size();  // d(sum of b(x)) / d bias = batch 2, averaged
  expect((model->b->bias.grad() - want).abs().max().item<double>() < 1e-6, "its average counts the others as 0");
  // b used only in an accumulation step under no_sync, then a synchronised step through a alone:
  // b was used since the last sync, so it is averaged too (each rank's own gradient differs).
  model->zero_grad();
  {
    nn::parallel::DistributedDataParallel::NoSync quiet(ddp);
    Tensor xr = full({2, 4}, 1.0 + dist::rank());
    ddp.forward_with([&] { return model->b(xr); }).sum().backward();
  }
  ddp.forward_with([&] { return model->a(x); }).sum().backward();
  const std::vector<Tensor> bw = dist::all_gather(model->b->weight.grad());
  expect(same(bw[0], bw.back()), "a parameter used under no_sync is averaged at the next sync");
}

void sampler() {
  const int world = dist::world_size(), me = dist::rank();
  data::TensorDataset ds(arange(23, kFloat32).reshape({23, 1}), arange(23, kInt64));
  for (bool pad : {true, false}) {
    auto s = std::make_shared<data::DistributedSampler>(23, data::DistributedSamplerOptions{.seed = 9, .pad = pad});
    data::DataLoader loader(ds, {.batch_size = 4, .sampler = s});
    std::vector<std::vector<int64_t>> epochs;
    for (int e = 0; e < 2; ++e) {
      std::vector<int64_t> seen;
      for (data::Batch& b : loader)
        for (int64_t v : b.target.to_vector<int64_t>()) seen.push_back(v);
      // Gather every rank's indices (padded to the longest share with -1).
      Tensor t = full({12}, -1.0, kInt64);
      for (size_t i = 0; i < seen.size(); ++i) t.data_ptr<int64_t>()[i] = seen[i];
      std::multiset<int64_t> all;
      for (const Tensor& r : dist::all_gather(t))
        for (int64_t v : r.to_vector<int64_t>())
          if (v >= 0) all.insert(v);
      std::set<int64_t> distinct(all.begin(), all.end());
      expect(distinct.size() == 23, "the shares cover the data set");
      expect(pad ? all.size() == 24u : all.size() == 23u, "padding to equal shares, or each index once");
      epochs.push_back(seen);
    }
    expect(epochs[0] != epochs[1], "the next epoch reshuffles");
    (void)world;
    (void)me;
  }
}

void throw_mid_step() {
  nn::Sequential net = small_net();
  nn::parallel::DistributedDataParallel ddp(net);
  for (int s = 0; s < 3; ++s) {
    Data d = global_batch(s);
    if (s == 1 && dist::rank() == 1) throw std::runtime_error("a planted failure in step 1");
    nn::functional::cross_entropy(ddp(d.x.narrow(0, 0, 4)), d.y.narrow(0, 0, 4)).backward();
  }
}

// Rank 1 comes to a collective 6 s late, past a 1 s KILN_DISTRIBUTED_TIMEOUT: rank 0's
// collective fails saying so, and the job ends (rank 1 is killed, not waited for).
void late_rank() {
  setenv("KILN_DISTRIBUTED_TIMEOUT", "1", 1);  // read at the first collective after init
  if (dist::rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(6));
  Tensor t = ones({3});
  dist::all_reduce(t);
}

// Rank 1 ends its process group while rank 0 calls one more all_reduce (a loop that ran one
// step more on rank 0): the job ends at once with an error naming both, under a timeout (600 s)
// that the test's 30 s limit would catch.
void early_end() {
  setenv("KILN_DISTRIBUTED_TIMEOUT", "600", 1);
  if (dist::rank() == 1) {
    dist::finalize();
    std::exit(0);
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));  // rank 1 is in finalize by now
  Tensor t = ones({3});
  dist::all_reduce(t);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: distributed_worker CASE\n");
    return 2;
  }
  dist::init();
  const std::string c = argv[1];
  if (c == "collectives") collectives();
  else if (c == "mismatch") mismatch();
  else if (c == "ddp") ddp();
  else if (c == "average") average();
  else if (c == "buffers") buffers();
  else if (c == "unused") unused();
  else if (c == "sampler") sampler();
  else if (c == "throw") throw_mid_step();
  else if (c == "late") late_rank();
  else if (c == "early_end") early_end();
  else {
    std::fprintf(stderr, "unknown case %s\n", c.c_str());
    return 2;
  }
  // Every rank reports; the job fails if any did.
  Tensor f = full({1}, static_cast<double>(failures), kFloat64);
  dist::all_reduce(f);
  if (failures == 0) std::printf("rank %d: ok\n", dist::rank());
  const int rank = dist::rank();
  dist::finalize();
  // A collective after finalize() is an error, not a silent world of one.
  std::string refused;
  try {
    Tensor g = ones({1});
    dist::all_reduce(g);
  } catch (const Error& e) {
    refused = e.what();
  }
  if (refused.find("the process group has ended (finalize() was called)") == std::string::npos) {
    std::fprintf(stderr, "rank %d: a collective after finalize(): '%s'\n", rank, refused.c_str());
    return 1;
  }
  return f.item<double>() == 0 ? 0 : 1;
}
