// Ops from several threads at once: N threads each training their own model give exactly the
// sequential results (small CNN, a ResNet block, a BERT layer; forward and backward, on every
// device), and each op family run from 4 threads at once gives its single-thread result.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// Runs job(i) for i in [0, n), each on its own std::thread with one OpenMP thread (so that the
// numbers depend only on the data, not on how the threads were scheduled): one after another,
// or all at once. Exceptions in a job are rethrown here.
template <class R>
std::vector<R> run_jobs(int n, bool concurrent, const std::function<R(int)>& job) {
  std::vector<R> out(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  auto body = [&](int i) {
    try {
      set_num_threads(1);
      out[static_cast<size_t>(i)] = job(i);
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  };
  if (concurrent) {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) threads.emplace_back(body, i);
    for (auto& t : threads) t.join();
  } else {
    for (int i = 0; i < n; ++i) std::thread(body, i).join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

// Every number a training run produced, in order, for an exact comparison.
using Trace = std::vector<double>;

void append(Trace& trace, const Tensor& t) {
  for (double v : values(t.detach())) trace.push_back(v);
}

// The sequential traces equal the concurrent ones exactly, over a few rounds (a race that
// strikes rarely still shows in one of them).
void expect_same_concurrently(int n, const std::function<Trace(int)>& job, const std::string& what) {
  const std::vector<Trace> sequential = run_jobs<Trace>(n, false, job);
  for (const Trace& t : sequential) ASSERT_FALSE(t.empty()) << what;
  for (int round = 0; round < 3; ++round) {
    const std::vector<Trace> concurrent = run_jobs<Trace>(n, true, job);
    for (int i = 0; i < n; ++i) {
      const Trace &a = sequential[static_cast<size_t>(i)], &b = concurrent[static_cast<size_t>(i)];
      ASSERT_EQ(a.size(), b.size()) << what;
      size_t differ = 0, first = a.size();
      for (size_t k = 0; k < a.size(); ++k)
        if (a[k] != b[k] && !(std::isnan(a[k]) && std::isnan(b[k]))) {
          if (first == a.size()) first = k;
          ++differ;
        }
      EXPECT_EQ(differ, 0u) << what << ": job " << i << " round " << round << ": " << differ << " of " << a.size()
                            << " numbers differ, the first at " << first << " (" << a[first] << " sequential, "
                            << b[first] << " concurrent)";
    }
  }
}

// Three SGD steps of a model on fixed data: the losses, then every parameter and gradient.
template <class Model, class Forward>
Trace train_steps(Model& model, const Forward& forward, int steps) {
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  Trace trace;
  for (int s = 0; s < steps; ++s) {
    Tensor loss = forward();
    opt.zero_grad();
    loss.backward();
    opt.step();
    trace.push_back(loss.item<double>());
  }
  for (const Tensor& p : model->parameters()) {
    append(trace, p);
    append(trace, p.grad());
  }
  return trace;
}

constexpr int kJobs = 4;

// A job's starting point: initial weights and data, made on the test's thread before any job
// runs (draws from the shared generator would interleave between concurrent jobs, as they do in
// PyTorch), and copied into each run so that runs never share a tensor.
struct Start {
  std::map<std::string, Tensor> state;
  std::vector<Tensor> data;
};

template <class Module>
std::vector<Start> starts(uint64_t seed, const std::function<Module()>& make, const std::function<std::vector<Tensor>()>& data) {
  std::vector<Start> out;
  for (int i = 0; i < kJobs; ++i) {
    manual_seed(seed + i);
    out.push_back({make()->state_dict(), data()});
  }
  return out;
}

// A fresh module holding a copy of `start`'s weights on `dev`.
template <class Module>
Module restore(const std::function<Module()>& make, const Start& start, Device dev) {
  Module m = make();
  std::map<std::string, Tensor> copy;
  for (const auto& [k, v] : start.state) copy[k] = v.clone();
  m->load_state_dict(copy);
  m->to(dev);
  return m;
}

TEST(Threads, SmallCnnTrainingEqualsSequential) {
  using M = models::SmallCNN;
  // No dropout: its masks come from the shared generator, whose draws interleave between jobs.
  const std::function<M()> make = [] { return models::small_cnn({.dropout = 0}); };
  const auto start = starts<M>(100, make, [] { return std::vector<Tensor>{randn({16, 1, 28, 28}), randint(0, 10, {16})}; });
  for (Device dev : devices()) {
    expect_same_concurrently(
        kJobs,
        [&](int i) {
          const Start& s = start[static_cast<size_t>(i)];
          M model = restore(make, s, dev);
          Tensor x = s.data[0].to(dev), y = s.data[1].to(dev);
          return train_steps(model, [&] { return nn::functional::cross_entropy(model(x), y); }, 3);
        },
        "small_cnn on " + dev.str());
  }
}

TEST(Threads, ResNetBlockTrainingEqualsSequential) {
  using M = models::BasicBlock;
  const std::function<M()> make = [] { return M(64, 64); };
  const auto start = starts<M>(200, make, [] { return std::vector<Tensor>{randn({2, 64, 16, 16})}; });
  for (Device dev : devices()) {
    expect_same_concurrently(
        kJobs,
        [&](int i) {
          const Start& s = start[static_cast<size_t>(i)];
          M block = restore(make, s, dev);
          Tensor x = s.data[0].contiguous(MemoryFormat::ChannelsLast).to(dev);
          return train_steps(block, [&] { return block(x).square().mean(); }, 3);
        },
        "BasicBlock on " + dev.str());
  }
}

TEST(Threads, BertLayerTrainingEqualsSequential) {
  using M = models::BertLayer;
  models::BertConfig cfg = models::BertConfig::tiny();
  cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0;
  const std::function<M()> make = [cfg] { return M(cfg); };
  const auto start = starts<M>(300, make, [&] { return std::vector<Tensor>{randn({2, 16, cfg.hidden_size})}; });
  Tensor mask = ones({2, 1, 1, 16}, kBool);
  mask.narrow(0, 1, 1).narrow(3, 11, 5).fill_(false);  // the second sequence is padded
  for (Device dev : devices()) {
    expect_same_concurrently(
        kJobs,
        [&](int i) {
          const Start& s = start[static_cast<size_t>(i)];
          M layer = restore(make, s, dev);
          Tensor h = s.data[0].to(dev), m = mask.to(dev);
          return train_steps(layer, [&] { return layer->forward(h, m).square().mean(); }, 3);
        },
        "BertLayer on " + dev.str());
  }
}

// One call of each op family, forward and (where it has one) backward, on fixed inputs: the
// result of an op run from 4 threads 10 times each must equal its single-thread result.
struct Case {
  std::string name;
  std::function<Trace(Device)> run;
};

// Values and gradients of `inputs` after backward of sum(out * weight) for a fixed weight.
Trace value_and_grads(const Tensor& out, const std::vector<Tensor>& inputs) {
  Trace t;
  append(t, out);
  if (!inputs.empty()) {
    Tensor w = arange(out.numel(), TensorOptions(out.dtype()).device(out.device())).reshape(out.shape()).sin();
    (out * w).sum().backward();
    for (const Tensor& x : inputs) append(t, x.grad());
  }
  return t;
}

// Inputs from a formula, not from the shared generator (whose draws would interleave between
// threads): values in [-2, 2] that differ from element to element and from seed to seed.
Tensor input(Shape shape, int64_t seed, Device dev, bool grad = true) {
  Tensor x = (arange(shape_numel(shape), kFloat64) * (0.7 + 0.01 * seed) + seed).sin().mul(2).to(kFloat32).reshape(shape).to(dev);
  return grad ? x.requires_grad_() : x;
}

// Integers in [0, n) from a formula.
Tensor indices(Shape shape, int64_t n, int64_t seed, Device dev) {
  Tensor t = empty(shape, kInt64);
  int64_t* p = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = (i * 7919 + seed * 104729) % n;
  return t.to(dev);
}

std::vector<Case> op_families() {
  namespace F = nn::functional;
  return {
      {"conv2d 1->32 channels, no grad",
       [](Device d) {
         NoGradGuard ng;
         Tensor x = input({8, 1, 28, 28}, 1, d, false), w = input({32, 1, 3, 3}, 2, d, false),
                b = input({32}, 3, d, false);
         return value_and_grads(conv2d(x, w, b, {1, 1}, {1, 1}), {});
       }},
      {"conv2d forward and backward, channels-last, stride 2",
       [](Device d) {
         Tensor x = input({2, 32, 16, 16}, 4, d).detach().contiguous(MemoryFormat::ChannelsLast).requires_grad_();
         Tensor w = input({64, 32, 3, 3}, 5, d);
         return value_and_grads(conv2d(x, w, {}, {2, 2}, {1, 1}), {x, w});
       }},
      {"matmul and linear with gelu",
       [](Device d) {
         Tensor a = input({64, 96}, 6, d), b = input({96, 80}, 7, d), w = input({48, 80}, 8, d), bias = input({48}, 9, d);
         return value_and_grads(linear(matmul(a, b), w, bias, Activation::GELU), {a, b, w, bias});
       }},
      {"batch_norm training",
       [](Device d) {
         Tensor x = input({4, 16, 8, 8}, 10, d), g = input({16}, 11, d), b = input({16}, 12, d);
         return value_and_grads(batch_norm(x, {}, {}, g, b, true), {x, g, b});
       }},
      {"max, average and adaptive pooling",
       [](Device d) {
         Tensor x = input({2, 8, 12, 12}, 13, d);
         Tensor y = max_pool2d(x, {3, 3}, {2, 2}, {1, 1}) + avg_pool2d(x, {2, 2}, {2, 2}, {0, 0}).narrow(2, 0, 6).narrow(3, 0, 6) +
                    adaptive_avg_pool2d(x, {6, 6});
         return value_and_grads(y, {x});
       }},
      {"layer_norm, softmax, log_softmax, masked_softmax",
       [](Device d) {
         Tensor x = input({6, 10, 32}, 14, d), w = input({32}, 15, d), b = input({32}, 16, d);
         Tensor mask = (arange(32).to(d) < 20).reshape({1, 1, 32});
         Tensor y = layer_norm(x, {32}, w, b) + softmax(x, -1) + log_softmax(x, 1) + masked_softmax(x, mask, -1);
         return value_and_grads(y, {x, w, b});
       }},
      {"scaled_dot_product_attention, masked and causal",
       [](Device d) {
         Tensor q = input({2, 2, 24, 16}, 17, d), k = input({2, 2, 24, 16}, 18, d), v = input({2, 2, 24, 16}, 19, d);
         Tensor mask = (arange(24).to(d) < 19).reshape({1, 1, 1, 24});
         Tensor y = scaled_dot_product_attention(q, k, v, mask) + scaled_dot_product_attention(q, k, v, {}, 0.0, true);
         return value_and_grads(y, {q, k, v});
       }},
      {"embedding and cross_entropy",
       [](Device d) {
         Tensor table = input({50, 32}, 20, d), logits = input({12, 50}, 21, d);
         Tensor ids = indices({3, 12}, 50, 22, d), target = indices({12}, 50, 23, d);
         Tensor loss = cross_entropy(logits, target, {}, Reduction::Mean, -100, 0.1) +
                       cross_entropy(matmul(embedding(table, ids).mean({0}), table.t()), target);
         return value_and_grads(loss, {table, logits});
       }},
      {"reductions",
       [](Device d) {
         Tensor x = input({9, 33, 17}, 23, d);
         Tensor y = x.sum(std::vector<int64_t>{0, 2}) + x.var(std::vector<int64_t>{1, 2}).sum() + logsumexp(x, {1}).mean({1}).sum() +
                    amax(x, {0}).mean({1}).sum() + x.norm();
         return value_and_grads(y, {x});
       }},
      {"elementwise with broadcasting and non-contiguous views",
       [](Device d) {
         Tensor a = input({31, 17}, 24, d), b = input({17}, 25, d);
         Tensor y = (gelu(a.t().t() * b) + silu(a) - tanh(a / (b.abs() + 1)) + where(a > 0, a, b.expand({31, 17}))).clamp(-2, 2);
         return value_and_grads(y, {a, b});
       }},
      {"indexing and joining",
       [](Device d) {
         Tensor x = input({20, 8}, 26, d);
         Tensor idx = indices({30}, 20, 27, d), gidx = indices({20, 8}, 8, 28, d);
         Tensor y = cat({index_select(x, 0, idx), gather(x, 1, gidx)}, 0);
         Tensor z = scatter_add(zeros({20, 8}, TensorOptions().device(d)), 0,
                                idx.narrow(0, 0, 20).unsqueeze(1).expand({20, 8}).contiguous(), x);
         return value_and_grads(cat({y, z}, 0).tril(), {x});
       }},
      {"AdamW step",
       [](Device d) {
         Tensor p = input({64, 33}, 28, d).detach().requires_grad_();
         optim::AdamW opt({p}, {.lr = 1e-2, .weight_decay = 0.1});
         Trace t;
         for (int s = 0; s < 3; ++s) {
           opt.zero_grad();
           (p * p).sum().backward();
           opt.step();
           append(t, p);
         }
         return t;
       }},
  };
}

TEST(Threads, EveryOpFamilyFromFourThreadsMatchesOneThread) {
  for (Device dev : devices()) {
    for (const Case& c : op_families()) {
      const Trace want = run_jobs<Trace>(1, false, [&](int) { return c.run(dev); })[0];
      ASSERT_FALSE(want.empty()) << c.name;
      const std::vector<Trace> got = run_jobs<Trace>(4, true, [&](int) {
        Trace all;
        for (int rep = 0; rep < 10; ++rep) {
          Trace t = c.run(dev);
          all.insert(all.end(), t.begin(), t.end());
        }
        return all;
      });
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].size(), want.size() * 10) << c.name;
        size_t differ = 0;
        for (size_t k = 0; k < got[i].size(); ++k)
          if (got[i][k] != want[k % want.size()] && !(std::isnan(want[k % want.size()]) && std::isnan(got[i][k])))
            ++differ;
        EXPECT_EQ(differ, 0u) << c.name << " on " << dev.str() << ", thread " << i << ": " << differ << " of "
                              << got[i].size() << " numbers differ from the single-thread result";
      }
    }
  }
}

}  // namespace
}  // namespace kiln::test
