// Every op family once, forward and (where it has one) backward, on fixed inputs from formulas:
// the cases that tests/test_threads.cpp runs from several threads at once and
// tests/test_cuda_backend.cpp runs on a GPU against the CPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {

// Every number a training run produced, in order, for an exact comparison.
using Trace = std::vector<double>;

inline void append(Trace& trace, const Tensor& t) {
  for (double v : values(t.detach())) trace.push_back(v);
}

// One call of each op family, forward and (where it has one) backward, on fixed inputs: the
// result of an op run from 4 threads 10 times each must equal its single-thread result.
struct Case {
  std::string name;
  std::function<Trace(Device)> run;
};

// Values and gradients of `inputs` after backward of sum(out * weight) for a fixed weight.
inline Trace value_and_grads(const Tensor& out, const std::vector<Tensor>& inputs) {
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
inline Tensor input(Shape shape, int64_t seed, Device dev, bool grad = true) {
  Tensor x = (arange(shape_numel(shape), kFloat64) * (0.7 + 0.01 * seed) + seed).sin().mul(2).to(kFloat32).reshape(shape).to(dev);
  return grad ? x.requires_grad_() : x;
}

// Integers in [0, n) from a formula.
inline Tensor indices(Shape shape, int64_t n, int64_t seed, Device dev) {
  Tensor t = empty(shape, kInt64);
  int64_t* p = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = (i * 7919 + seed * 104729) % n;
  return t.to(dev);
}

inline std::vector<Case> op_families() {
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
      {"batch_norm_relu, training and evaluation, channels-last",
       [](Device d) {
         Tensor x = input({4, 16, 8, 8}, 10, d).detach().contiguous(MemoryFormat::ChannelsLast).requires_grad_();
         Tensor g = input({16}, 11, d), b = input({16}, 12, d);
         Tensor rm = input({16}, 13, d, false), rv = input({16}, 14, d, false).abs() + 0.5;
         return value_and_grads(batch_norm_relu(x, {}, {}, g, b, true) + batch_norm_relu(x, rm, rv, g, b, false),
                                {x, g, b});
       }},
      {"max, average and adaptive pooling; max pooling without indices (no grad)",
       [](Device d) {
         Tensor x = input({2, 8, 12, 12}, 13, d);
         Tensor y = max_pool2d(x, {3, 3}, {2, 2}, {1, 1}) + avg_pool2d(x, {2, 2}, {2, 2}, {0, 0}).narrow(2, 0, 6).narrow(3, 0, 6) +
                    adaptive_avg_pool2d(x, {6, 6});
         Trace t = value_and_grads(y, {x});
         NoGradGuard ng;
         append(t, max_pool2d(x.detach().contiguous(MemoryFormat::ChannelsLast), {3, 3}, {2, 2}, {1, 1}));
         return t;
       }},
      {"add_relu, broadcast, channels-last",
       [](Device d) {
         Tensor a = input({2, 8, 6, 6}, 17, d).detach().contiguous(MemoryFormat::ChannelsLast).requires_grad_();
         Tensor b = input({8, 1, 6}, 18, d);
         return value_and_grads(add_relu(a, b), {a, b});
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
      {"addcmul, addcdiv, lerp and add with alpha, broadcast",
       [](Device d) {
         Tensor s = input({31, 17}, 29, d), a = input({17}, 30, d), b = input({31, 1}, 31, d), w = input({31, 17}, 32, d);
         Tensor y = addcmul(s.t().t(), a, b, 0.5) + addcdiv(s, a, b.abs() + 1, -2) + lerp(s, a.expand({31, 17}), 0.3) +
                    lerp(s, b.expand({31, 17}), w.sigmoid()) + add(s, a, -1.5);
         return value_and_grads(y, {s, a, b, w});
       }},
      {"sort, topk, flip, roll, repeat and cumsum",
       [](Device d) {
         Tensor x = input({33, 70}, 33, d);
         auto [v, i] = sort(x, 0, true);
         Tensor y = v + std::get<0>(topk(x, 70, 1, false)) + i.to(kFloat32) + flip(x, {0, 1}) + roll(x, {5, -9}, {0, 1}) +
                    repeat(x, {1, 3}).narrow(1, 20, 70) + argsort(x, 1).to(kFloat32) + cumsum(x, 0) + cumsum(x, 1);
         return value_and_grads(y, {x});
       }},
      {"leaky_relu, elu, softplus, hardtanh",
       [](Device d) {
         Tensor x = input({37, 21}, 34, d);
         Tensor y = leaky_relu(x, 0.1) + elu(x) + softplus(x, 2, 1) + hardtanh(x, -0.5, 1.5) + relu6(x * 4);
         return value_and_grads(y, {x});
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

}  // namespace kiln::test
