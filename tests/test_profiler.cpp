// kiln::profiler: op counts and FLOPs against hand counts (matmul, a conv net forward and
// backward, attention, a BERT-shaped MLM), session lifetime, nesting, reset, threads, the table.
#include <gtest/gtest.h>

#include <thread>

#include "kiln/kiln.h"
#include "kiln/models/bert.h"
#include "kiln/profiler.h"

namespace kiln::test {
namespace {

using profiler::OpStat;
using profiler::Session;

// The stat of `op`, or a zero one when the session saw no such call.
OpStat find(const std::vector<OpStat>& stats, const std::string& op) {
  for (const OpStat& s : stats)
    if (s.op == op) return s;
  return OpStat{op, 0, 0, 0};
}

TEST(Profiler, OneMatmul) {
  Tensor a = randn({2, 3, 5}), b = randn({2, 5, 7});
  Session s;
  Tensor c = matmul(a, b);
  const OpStat mm = find(s.stats(), "Matmul");
  EXPECT_EQ(mm.count, 1);
  EXPECT_EQ(mm.flops, 2.0 * 2 * 3 * 7 * 5);  // 2 B M N K
  EXPECT_EQ(s.total_flops(), 420.0);         // nothing else dispatched has FLOPs
}

TEST(Profiler, NothingRecordedOutsideASession) {
  Tensor a = randn({4, 4});
  EXPECT_FALSE(profiler::recording());
  Tensor before = matmul(a, a);  // runs before the session: not counted
  Session s;
  EXPECT_TRUE(profiler::recording());
  EXPECT_TRUE(s.stats().empty());
  EXPECT_EQ(s.total_flops(), 0.0);
  Tensor c = a + a;
  const auto stats = s.stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].op, "Add");
  EXPECT_EQ(stats[0].count, 1);
  EXPECT_EQ(stats[0].flops, 0.0);  // elementwise ops count no FLOPs
}

TEST(Profiler, NotRecordingAfterTheSessionEnds) {
  Tensor a = randn({4, 4});
  {
    Session s;
    EXPECT_TRUE(profiler::recording());
  }
  EXPECT_FALSE(profiler::recording());
  Session later;
  EXPECT_TRUE(later.stats().empty());  // nothing ran in between that anyone could see
}

// conv 3 -> 8, kernel 3, no padding, on 1 x 3 x 8 x 8: output 1 x 8 x 6 x 6 = 288 values, each
// 3 * 3 * 3 = 27 multiply-adds: 2 * 288 * 27 = 15552 FLOPs (the bias is not counted). Then a
// linear 288 -> 10 on one row: 2 * 1 * 10 * 288 = 5760. Forward: 21312.
constexpr double kConvFwd = 2.0 * 288 * 27, kLinearFwd = 2.0 * 1 * 10 * 288;

struct ConvNet {
  Tensor w = randn({8, 3, 3, 3}).requires_grad_(), b = randn({8}).requires_grad_();
  Tensor lw = randn({10, 288}).requires_grad_(), lb = randn({10}).requires_grad_();
  Tensor operator()(const Tensor& x) const { return linear(relu(conv2d(x, w, b)).reshape({1, 288}), lw, lb); }
};

TEST(Profiler, ConvNetForwardFlops) {
  ConvNet net;
  Tensor x = randn({1, 3, 8, 8});
  Session s;
  {
    NoGradGuard ng;
    Tensor y = net(x);
  }
  const auto stats = s.stats();
  EXPECT_EQ(find(stats, "Conv2d").count, 1);
  EXPECT_EQ(find(stats, "Conv2d").flops, kConvFwd);
  EXPECT_EQ(find(stats, "Linear").count, 1);
  EXPECT_EQ(find(stats, "Linear").flops, kLinearFwd);
  EXPECT_EQ(find(stats, "Relu").count, 1);
  EXPECT_EQ(s.total_flops(), 21312.0);
}

// Backward: the conv's input and weight gradients cost what its forward did (15552 each); the
// linear's are two matmuls, g [1, 10] @ W [10, 288] and g^T [10, 1] @ x [1, 288], 5760 each.
TEST(Profiler, ConvNetForwardBackwardFlops) {
  ConvNet net;
  Tensor x = randn({1, 3, 8, 8}).requires_grad_();
  Tensor y = net(x).sum();
  Session s;
  y.backward();
  const auto stats = s.stats();
  EXPECT_EQ(find(stats, "Conv2dBackwardInput").count, 1);
  EXPECT_EQ(find(stats, "Conv2dBackwardInput").flops, kConvFwd);
  EXPECT_EQ(find(stats, "Conv2dBackwardWeight").count, 1);
  EXPECT_EQ(find(stats, "Conv2dBackwardWeight").flops, kConvFwd);
  EXPECT_EQ(find(stats, "Matmul").count, 2);
  EXPECT_EQ(find(stats, "Matmul").flops, 2 * kLinearFwd);
  EXPECT_EQ(s.total_flops(), 2 * kConvFwd + 2 * kLinearFwd);
  ASSERT_TRUE(x.grad().defined());
}

// q [2, 3, 5, 4], k [2, 3, 7, 4], v [2, 3, 7, 6]: 6 batch-heads, L 5, S 7, E 4, Ev 6.
// Forward: 6 * (2 L S E + 2 L S Ev) = 6 * (280 + 420) = 4200.
// Backward: 6 * 2 L S (3 E + 2 Ev) = 6 * 70 * 24 = 10080.
TEST(Profiler, AttentionForwardBackwardFlops) {
  Tensor q = randn({2, 3, 5, 4}).requires_grad_(), k = randn({2, 3, 7, 4}).requires_grad_(),
         v = randn({2, 3, 7, 6}).requires_grad_();
  Session s;
  Tensor out = scaled_dot_product_attention(q, k, v);
  out.sum().backward();
  const auto stats = s.stats();
  EXPECT_EQ(find(stats, "Attention").count, 1);
  EXPECT_EQ(find(stats, "Attention").flops, 4200.0);
  EXPECT_EQ(find(stats, "AttentionBackward").count, 1);
  EXPECT_EQ(find(stats, "AttentionBackward").flops, 10080.0);
}

// Causal attention counts the full L x S (torch.utils.flop_counter's convention).
TEST(Profiler, CausalAttentionCountsTheFullScores) {
  Tensor q = randn({1, 2, 6, 4}), k = randn({1, 2, 6, 4}), v = randn({1, 2, 6, 4});
  Session s;
  Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  EXPECT_EQ(find(s.stats(), "Attention").flops, 2 * (2.0 * 6 * 6 * 4 + 2.0 * 6 * 6 * 4));
}

// A BERT-shaped MLM: hidden H 32, 2 layers, 2 heads, intermediate I 64, vocab V 100, on B 2 x
// S 8, so T = 16 token rows. Per layer: q, k, v and attention-output projections 4 * 2 T H H =
// 131072, intermediate and output 2 * 2 T H I = 131072 (all Linear ops), attention
// 2 heads * B * (2 S S dh + 2 S S dh) with dh 16 = 4 B S S H = 16384. MLM head: transform
// 2 T H H = 32768 and the tied decoder 2 T H V = 102400. Linear: 2 * 262144 + 135168 = 659456;
// Attention: 2 * 16384 = 32768; in all 692224.
TEST(Profiler, BertMlmForwardFlops) {
  models::BertConfig cfg{.vocab_size = 100, .hidden_size = 32, .num_hidden_layers = 2, .num_attention_heads = 2,
                         .intermediate_size = 64, .max_position_embeddings = 16};
  auto model = models::bert_for_masked_lm(cfg);
  model->eval();
  Tensor ids = randint(0, 100, {2, 8});
  Session s;
  Tensor logits;
  {
    NoGradGuard ng;
    logits = model(ids);
  }
  ASSERT_EQ(logits.shape(), (Shape{2, 8, 100}));
  const auto stats = s.stats();
  EXPECT_EQ(find(stats, "Linear").count, 2 * 6 + 2);
  EXPECT_EQ(find(stats, "Linear").flops, 659456.0);
  EXPECT_EQ(find(stats, "Attention").count, 2);
  EXPECT_EQ(find(stats, "Attention").flops, 32768.0);
  EXPECT_EQ(find(stats, "Matmul").count, 0);
  EXPECT_EQ(s.total_flops(), 692224.0);
}

TEST(Profiler, SessionsNestAndReset) {
  Tensor a = randn({3, 3});
  Session outer;
  Tensor c1 = matmul(a, a);
  {
    Session inner;
    Tensor c2 = matmul(a, a);
    EXPECT_EQ(find(inner.stats(), "Matmul").count, 1);  // only what ran in its own lifetime
    EXPECT_EQ(find(outer.stats(), "Matmul").count, 2);  // the outer one sees the inner one's ops
  }
  EXPECT_TRUE(profiler::recording());
  Tensor c3 = matmul(a, a);
  EXPECT_EQ(find(outer.stats(), "Matmul").count, 3);
  outer.reset();
  EXPECT_TRUE(outer.stats().empty());
  Tensor c4 = matmul(a, a);
  EXPECT_EQ(find(outer.stats(), "Matmul").count, 1);
  EXPECT_EQ(outer.total_flops(), 2.0 * 3 * 3 * 3);
}

TEST(Profiler, WithoutTimingCountsButDoesNotTime) {
  Tensor a = randn({8, 8});
  Session s(profiler::SessionOptions{.timing = false});
  Tensor c = matmul(a, a);
  const OpStat mm = find(s.stats(), "Matmul");
  EXPECT_EQ(mm.count, 1);
  EXPECT_EQ(mm.flops, 2.0 * 8 * 8 * 8);
  EXPECT_EQ(mm.seconds, 0.0);
  EXPECT_EQ(s.total_seconds(), 0.0);
}

TEST(Profiler, CountsOpsFromOtherThreads) {
  Tensor a = randn({4, 4});
  Session s;
  std::thread worker([&] {
    for (int i = 0; i < 5; ++i) Tensor c = matmul(a, a);
  });
  worker.join();
  EXPECT_EQ(find(s.stats(), "Matmul").count, 5);
}

TEST(Profiler, StatsAreSortedByTimeAndTheTableNamesThem) {
  ConvNet net;
  Tensor x = randn({1, 3, 8, 8}).requires_grad_();
  Session s;
  net(x).sum().backward();
  const auto stats = s.stats();
  ASSERT_GE(stats.size(), 4u);
  double sum = 0;
  for (size_t i = 0; i < stats.size(); ++i) {
    EXPECT_GT(stats[i].count, 0);
    EXPECT_GE(stats[i].seconds, 0.0);
    if (i > 0) {
      EXPECT_GE(stats[i - 1].seconds, stats[i].seconds) << stats[i].op;
    }
    sum += stats[i].seconds;
  }
  EXPECT_DOUBLE_EQ(s.total_seconds(), sum);
  const std::string table = profiler::format_table(stats);
  for (const char* needle : {"op", "count", "total ms", "mean us", "share %", "GFLOP", "GFLOP/s", "Conv2d",
                             "Conv2dBackwardWeight", "Linear", "Matmul", "total (kernels)"})
    EXPECT_NE(table.find(needle), std::string::npos) << needle << "\n" << table;
  const std::string with_wall = profiler::format_table(stats, 1.0);
  EXPECT_NE(with_wall.find("outside kernels"), std::string::npos) << with_wall;
  EXPECT_NE(profiler::format_table({}).find("total (kernels)"), std::string::npos);
}

// Ops on several threads (data-loader workers) can sum to more than the wall time: the table
// says so rather than showing 0 s outside the kernels.
TEST(Profiler, TheTableNotesKernelTimeBeyondTheWallTime) {
  const std::vector<OpStat> stats{{"Matmul", 40, 0.072, 0}};
  const std::string overlapping = profiler::format_table(stats, 0.043);
  EXPECT_EQ(overlapping.find("outside kernels"), std::string::npos) << overlapping;
  EXPECT_NE(overlapping.find("summed over the threads that ran them"), std::string::npos) << overlapping;
  const std::string serial = profiler::format_table(stats, 0.1);
  EXPECT_NE(serial.find("outside kernels"), std::string::npos) << serial;
  EXPECT_EQ(serial.find("summed over"), std::string::npos) << serial;
}

}  // namespace
}  // namespace kiln::test
