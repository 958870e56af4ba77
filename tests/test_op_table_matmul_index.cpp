// The op table: matmul, joining and splitting (cat, stack, split, chunk), and indexing ops.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "op_table_util.h"

namespace kiln::test::op_table {
namespace {

// ==========================================================================================
// matmul: every shape rule, transposed and expanded operands, K = 0.

// PyTorch's matmul rules, as loops: 1-D operands gain a dim, batch dims broadcast.
std::pair<Vec, Shape> matmul_ref(const Vec& a, Shape sa, const Vec& b, Shape sb) {
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), 1);
  if (b1) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  Shape batch = broadcast_shape(ba, bb);
  Shape fa = batch, fb = batch;
  fa.insert(fa.end(), {M, K});
  fb.insert(fb.end(), {K, N});
  Vec A = broadcast_to(a, sa, fa), B = broadcast_to(b, sb, fb);
  const int64_t nb = numel_of(batch);
  Vec out(static_cast<size_t>(nb * M * N), 0.0);
  for (int64_t p = 0; p < nb; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += A[(p * M + i) * K + k] * B[(p * K + k) * N + j];
        out[(p * M + i) * N + j] = s;
      }
  Shape shape = batch;
  if (!a1) shape.push_back(M);
  if (!b1) shape.push_back(N);
  return {out, shape};
}

TEST(OpTableMatmul, MatchesReference) {
  struct Case {
    Shape a, b;
    Layout la, lb;
  };
  const std::vector<Case> cases = {
      {{5}, {5}, Layout::Contig, Layout::Contig},                   // dot
      {{5}, {5}, Layout::Sliced, Layout::Sliced},
      {{3, 5}, {5, 4}, Layout::Contig, Layout::Contig},             // 2-D
      {{3, 5}, {5, 4}, Layout::Transposed, Layout::Transposed},
      {{3, 5}, {5, 4}, Layout::Sliced, Layout::Transposed},
      {{5}, {5, 4}, Layout::Contig, Layout::Contig},                // 1-D @ 2-D
      {{5}, {5, 4}, Layout::Contig, Layout::Transposed},
      {{3, 5}, {5}, Layout::Contig, Layout::Contig},                // 2-D @ 1-D
      {{3, 5}, {5}, Layout::Transposed, Layout::Sliced},
      {{2, 1, 3, 4}, {5, 4, 6}, Layout::Contig, Layout::Contig},    // broadcast batch
      {{2, 1, 3, 4}, {5, 4, 6}, Layout::Transposed, Layout::Permuted},
      {{2, 3, 4}, {2, 4, 6}, Layout::Contig, Layout::Contig},       // bmm
      {{2, 3, 4}, {2, 4, 6}, Layout::Transposed, Layout::Transposed},
      {{2, 3, 4}, {2, 4, 6}, Layout::Expanded, Layout::Sliced},
      {{2, 3, 4}, {4, 6}, Layout::Contig, Layout::Contig},          // [B, S, K] @ [K, N]
      {{2, 3, 4}, {4, 6}, Layout::Transposed, Layout::Transposed},
      {{3, 2, 3, 4}, {4, 6}, Layout::Sliced, Layout::Contig},
      {{4, 6}, {2, 6, 3}, Layout::Contig, Layout::Contig},          // [M, K] @ [B, K, N]
      {{4}, {2, 4, 6}, Layout::Contig, Layout::Contig},             // 1-D @ batched
      {{2, 3, 4}, {4}, Layout::Contig, Layout::Contig},             // batched @ 1-D
      {{3, 0}, {0, 4}, Layout::Contig, Layout::Contig},             // K = 0
      {{2, 3, 0}, {0, 5}, Layout::Contig, Layout::Contig},
      {{0}, {0}, Layout::Contig, Layout::Contig},
      {{0, 4}, {4, 3}, Layout::Contig, Layout::Contig},             // M = 0
      {{2, 4}, {4, 0}, Layout::Contig, Layout::Contig},             // N = 0
      {{0, 3, 4}, {4, 2}, Layout::Contig, Layout::Contig},          // B = 0
      {{3, 5}, {5, 4}, Layout::Expanded, Layout::Expanded},         // stride-0 rows
      {{5}, {5, 4}, Layout::Expanded, Layout::Expanded},
      {{3, 5}, {5}, Layout::Transposed, Layout::Expanded},
      {{2, 3, 4}, {4, 6}, Layout::Expanded, Layout::Expanded},
      {{40, 70}, {70, 50}, Layout::Transposed, Layout::Contig},     // larger, several threads
  };
  for (Device dev : test::devices())
    for (ScalarType dt : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32})
      for (const Case& c : cases) {
        std::string what = std::string("matmul ") + dtype_name(dt) + " " + str(c.a, c.la) + " @ " + str(c.b, c.lb) +
                           " on " + dev.str();
        run_case(what, [&] {
          Input a = make_input(c.a, Dist::Normal, dt, dev, c.la);
          Input b = make_input(c.b, Dist::Normal, dt, dev, c.lb);
          auto [want, shape] = matmul_ref(a.v, c.a, b.v, c.b);
          const int64_t K = c.a.back();
          Tol tol = sum_tol_for(dt);
          tol.atol *= std::max<double>(1.0, std::sqrt(static_cast<double>(K)) / 2);
          check(matmul(a.t, b.t), want, shape, dt, dev, tol, what);
          if (c.a.size() == 2 && c.b.size() == 2) check(mm(a.t, b.t), want, shape, dt, dev, tol, what + " (mm)");
          if (c.a.size() == 3 && c.b.size() == 3) check(bmm(a.t, b.t), want, shape, dt, dev, tol, what + " (bmm)");
        });
      }
}

// ==========================================================================================
// Joining and splitting.

// The part of row-major v (shape s) with dim d restricted to [start, start + len).
Vec narrow_ref(const Vec& v, const Shape& s, int64_t d, int64_t start, int64_t len) {
  Shape out_shape = s;
  out_shape[d] = len;
  Vec out;
  for (int64_t i = 0; i < numel_of(out_shape); ++i) {
    Shape idx = unravel(i, out_shape);
    idx[d] += start;
    out.push_back(v[ravel(idx, s)]);
  }
  return out;
}

TEST(OpTableJoin, Cat) {
  struct Case {
    std::vector<Shape> shapes;
    std::vector<Layout> layouts;
    int64_t dim;
  };
  const std::vector<Case> cases = {
      {{{2, 3}, {4, 3}}, {Layout::Contig, Layout::Contig}, 0},
      {{{2, 3}, {2, 1}, {2, 4}}, {Layout::Contig, Layout::Contig, Layout::Transposed}, 1},
      {{{2, 3, 4}, {2, 3, 2}}, {Layout::Permuted, Layout::Sliced}, -1},
      {{{3, 4}, {0, 4}, {2, 4}}, {Layout::Transposed, Layout::Contig, Layout::Expanded}, 0},
      {{{3}, {0}, {2}}, {Layout::Sliced, Layout::Contig, Layout::Contig}, 0},
      {{{2, 3}, {0}, {1, 3}}, {Layout::Contig, Layout::Contig, Layout::Contig}, 0},  // legacy: 1-D empty skipped
      {{{2, 3}}, {Layout::Transposed}, 1},
      {{{0, 3}, {0, 2}}, {Layout::Contig, Layout::Contig}, 1},
  };
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts + std::vector<ScalarType>{kBool})
      for (const Case& c : cases) {
        std::string what = std::string("cat ") + dtype_name(dt) + " dim " + std::to_string(c.dim);
        for (const Shape& s : c.shapes) what.append(" ").append(str(s));
        run_case(what, [&] {
          std::vector<Input> ins;
          std::vector<Tensor> ts;
          std::vector<const Input*> parts;
          for (size_t i = 0; i < c.shapes.size(); ++i) {
            ins.push_back(make_input(c.shapes[i], Dist::Normal, dt, dev, c.layouts[i]));
          }
          for (const Input& in : ins) {
            ts.push_back(in.t);
            if (!(in.shape.size() == 1 && in.shape[0] == 0) || c.shapes.size() == 1) parts.push_back(&in);
          }
          const int64_t rank = static_cast<int64_t>(parts[0]->shape.size());
          const int64_t d = wrap_dim_ref(c.dim, rank);
          Shape shape = parts[0]->shape;
          shape[d] = 0;
          for (const Input* p : parts) shape[d] += p->shape[d];
          // reference: walk the output, find the part each position falls in
          Vec want;
          for (int64_t i = 0; i < numel_of(shape); ++i) {
            Shape idx = unravel(i, shape);
            int64_t pos = idx[d];
            for (const Input* p : parts) {
              if (pos < p->shape[d]) {
                idx[d] = pos;
                want.push_back(p->v[ravel(idx, p->shape)]);
                break;
              }
              pos -= p->shape[d];
            }
          }
          check(cat(ts, c.dim), want, shape, dt, dev, {0, 0}, what);
        });
      }
  // mixed dtypes promote, as in PyTorch
  Tensor mixed = cat({tensor({1, 2}), tensor({0.5})}, 0);
  check(mixed, {1, 2, 0.5}, {3}, kFloat32, Device::cpu(), {0, 0}, "cat int64 with float32");
  check(cat({tensor({1.0}, kFloat64), tensor({2.0})}), {1, 2}, {2}, kFloat64, Device::cpu(), {0, 0},
        "cat float64 with float32");
  // a skipped 1-D empty tensor still takes part in the dtype (it was left out)
  check(cat({empty({0}, kFloat64), ones({2, 1})}), {1, 1}, {2, 1}, kFloat64, Device::cpu(), {0, 0},
        "cat empty float64 with float32");
  check(cat({empty({0}, kInt64), empty({0}, kFloat32)}), {}, {0}, kFloat32, Device::cpu(), {0, 0},
        "cat of empty tensors only");
}

TEST(OpTableJoin, Stack) {
  const std::vector<ShapeCase> cases = {{{2, 3}, Layout::Contig}, {{2, 3}, Layout::Transposed},
                                        {{3}, Layout::Sliced},    {{}, Layout::Contig},
                                        {{0, 2}, Layout::Contig}, {{2, 3, 4}, Layout::Permuted}};
  for (Device dev : test::devices())
    for (ScalarType dt : {kFloat32, kFloat64, kBFloat16, kInt64})
      for (const ShapeCase& c : cases) {
        const int64_t rank = static_cast<int64_t>(c.shape.size());
        for (int64_t dim = -(rank + 1); dim <= rank; ++dim) {
          std::string what = std::string("stack ") + dtype_name(dt) + " 3 x " + str(c.shape, c.layout) + " dim " +
                             std::to_string(dim);
          run_case(what, [&] {
            std::vector<Input> ins;
            for (int k = 0; k < 3; ++k) ins.push_back(make_input(c.shape, Dist::Normal, dt, dev, c.layout));
            const int64_t d = wrap_dim_ref(dim, rank + 1);
            Shape shape = c.shape;
            shape.insert(shape.begin() + d, 3);
            Vec want;
            for (int64_t i = 0; i < numel_of(shape); ++i) {
              Shape idx = unravel(i, shape);
              int64_t k = idx[d];
              idx.erase(idx.begin() + d);
              want.push_back(ins[k].v[ravel(idx, c.shape)]);
            }
            check(stack({ins[0].t, ins[1].t, ins[2].t}, dim), want, shape, dt, dev, {0, 0}, what);
          });
        }
      }
}

TEST(OpTableJoin, SplitAndChunk) {
  struct Case {
    Shape shape;
    Layout layout;
    int64_t dim;
    std::string how;                    // "split", "split_sizes" or "chunk"
    int64_t arg;                        // split_size or chunks
    std::vector<int64_t> sizes;         // split_sizes' argument
    std::vector<int64_t> want_lengths;  // length along dim of each piece
  };
  const std::vector<Case> cases = {
      {{5, 4}, Layout::Contig, 0, "split", 2, {}, {2, 2, 1}},
      {{5, 4}, Layout::Transposed, 1, "split", 3, {}, {3, 1}},
      {{5, 4}, Layout::Sliced, -1, "split", 4, {}, {4}},
      {{5, 4}, Layout::Contig, 0, "split", 7, {}, {5}},
      {{5, 4}, Layout::Contig, 0, "split_sizes", 0, {1, 3, 1}, {1, 3, 1}},
      {{5, 4}, Layout::Permuted, 1, "split_sizes", 0, {0, 4}, {0, 4}},
      {{2, 6, 3}, Layout::Permuted, 1, "split_sizes", 0, {2, 4}, {2, 4}},
      {{0, 3}, Layout::Contig, 0, "split", 2, {}, {0}},
      {{5}, Layout::Contig, 0, "chunk", 3, {}, {2, 2, 1}},
      {{6, 2}, Layout::Transposed, 0, "chunk", 4, {}, {2, 2, 2}},
      {{6, 2}, Layout::Contig, 1, "chunk", 2, {}, {1, 1}},
      {{6, 2}, Layout::Contig, 1, "chunk", 5, {}, {1, 1}},
      {{2, 7}, Layout::Sliced, -1, "chunk", 3, {}, {3, 3, 1}},
      {{0, 2}, Layout::Contig, 0, "chunk", 3, {}, {0, 0, 0}},  // PyTorch keeps the number of chunks
  };
  for (Device dev : test::devices())
    for (ScalarType dt : {kFloat32, kInt64, kFloat16})
      for (const Case& c : cases) {
        std::string what = c.how + " " + dtype_name(dt) + " " + str(c.shape, c.layout) + " dim " +
                           std::to_string(c.dim) + " arg " + std::to_string(c.arg);
        run_case(what, [&] {
          Input x = make_input(c.shape, Dist::Normal, dt, dev, c.layout);
          std::vector<Tensor> pieces = c.how == "split"         ? split(x.t, c.arg, c.dim)
                                       : c.how == "split_sizes" ? split(x.t, c.sizes, c.dim)
                                                                : x.t.chunk(c.arg, c.dim);
          ASSERT_EQ(pieces.size(), c.want_lengths.size()) << what;
          const int64_t d = wrap_dim_ref(c.dim, static_cast<int64_t>(c.shape.size()));
          int64_t start = 0;
          for (size_t i = 0; i < pieces.size(); ++i) {
            Shape shape = c.shape;
            shape[d] = c.want_lengths[i];
            check(pieces[i], narrow_ref(x.v, c.shape, d, start, c.want_lengths[i]), shape, dt, dev, {0, 0},
                  what + " piece " + std::to_string(i));
            EXPECT_EQ(pieces[i].storage(), x.t.storage()) << what << ": pieces are views";
            start += c.want_lengths[i];
          }
        });
      }
  // the method form
  Tensor t = arange(7);
  auto pieces = t.split(3);
  ASSERT_EQ(pieces.size(), 3u);
  check(pieces[2], {6}, {1}, kInt64, Device::cpu(), {0, 0}, "Tensor::split");
}

// ==========================================================================================
// Indexing: index_select, gather, scatter_add, one_hot, tril/triu.

TEST(OpTableIndex, IndexSelect) {
  struct Case {
    Shape shape;
    Layout layout;
    int64_t dim;
    std::vector<int64_t> index;
    bool index_is_0d = false;
  };
  const std::vector<Case> cases = {
      {{4, 5}, Layout::Contig, 0, {3, 0, 3}},        {{4, 5}, Layout::Transposed, 1, {4, 1}},
      {{3, 4, 5}, Layout::Permuted, 1, {2, 2, 0, 1}}, {{3, 4, 5}, Layout::Sliced, -1, {0}},
      {{4, 5}, Layout::Contig, 0, {}},               {{6}, Layout::Expanded, 0, {5, 0}},
      {{4, 5}, Layout::Contig, 1, {2}, true},        {{0, 3}, Layout::Contig, 1, {1, 1}},
  };
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts + std::vector<ScalarType>{kBool})
      for (ScalarType it : {kInt64, kInt32})
        for (const Case& c : cases) {
          std::string what = std::string("index_select ") + dtype_name(dt) + " " + str(c.shape, c.layout) + " dim " +
                             std::to_string(c.dim) + " index " + str(c.index) + " " + dtype_name(it);
          run_case(what, [&] {
            Input x = make_input(c.shape, Dist::Normal, dt, dev, c.layout);
            Tensor index = tensor(c.index, Shape{static_cast<int64_t>(c.index.size())}, TensorOptions(it).device(dev));
            if (c.index_is_0d) index = index.reshape({});
            const int64_t d = wrap_dim_ref(c.dim, static_cast<int64_t>(c.shape.size()));
            Shape shape = c.shape;
            shape[d] = static_cast<int64_t>(c.index.size());
            Vec want;
            for (int64_t i = 0; i < numel_of(shape); ++i) {
              Shape idx = unravel(i, shape);
              idx[d] = c.index[idx[d]];
              want.push_back(x.v[ravel(idx, c.shape)]);
            }
            check(index_select(x.t, c.dim, index), want, shape, dt, dev, {0, 0}, what);
          });
        }
  // large enough for the threaded path
  for (Device dev : test::devices()) {
    Input x = make_input({300, 200}, Dist::Normal, kFloat32, dev, Layout::Transposed);
    std::vector<int64_t> iv(300);
    for (int64_t& v : iv) v = std::uniform_int_distribution<int64_t>(0, 199)(rng());
    Vec want;
    for (int64_t r = 0; r < 300; ++r)
      for (int64_t j = 0; j < 300; ++j) want.push_back(x.v[r * 200 + iv[j]]);
    check(index_select(x.t, 1, tensor(iv, TensorOptions(kInt64).device(dev))), want, {300, 300}, kFloat32, dev,
          {0, 0}, "index_select [300, 200] dim 1 with 300 indices");
  }
  // A 0-d input takes one index (PyTorch's rule), not several written past its one element.
  for (Device dev : test::devices()) {
    Tensor s = full({}, 3.5).to(dev);
    EXPECT_EQ(index_select(s, 0, tensor(std::vector<int64_t>{0}, TensorOptions(kInt64).device(dev))).item<double>(), 3.5);
    test::expect_error([&] { (void)index_select(s, 0, tensor(std::vector<int64_t>{0, 0, 0}, TensorOptions(kInt64).device(dev))); },
                       "[index_select] a 0-d input takes exactly one index, got 3");
    // gather and scatter_add with a 0-d input and a 0-d index: the index is checked as well.
    Tensor i0 = full({}, 0, kInt64).to(dev), i3 = full({}, 3, kInt64).to(dev);
    EXPECT_EQ(gather(s, 0, i0).item<double>(), 3.5);
    // On a GPU the bad index surfaces at the next synchronising call (here the copy to the CPU).
    test::expect_error([&] { (void)gather(s, 0, i3).cpu(); }, "[gather] index 3 is out of range for a dim of size 1");
    test::expect_error([&] { (void)scatter_add(s, 0, i3, full({}, 1.0).to(dev)).cpu(); },
                       "[scatter_add] index 3 is out of range for a dim of size 1");
  }
}

// index_select's gradient: each slice of x sums the gradient slices that picked it (repeats,
// unpicked slices 0), in float32 for 16-bit data and rounded once, along any dim and with a
// non-contiguous incoming gradient, on every device.
TEST(OpTableIndex, IndexSelectGradientSumsThePicksOfEachSlice) {
  struct Case {
    Shape shape;
    int64_t dim;
    std::vector<int64_t> index;
  };
  const std::vector<Case> cases = {
      {{5, 3}, 0, {3, 0, 3, 3, 1}}, {{4, 6}, 1, {5, 5, 0}}, {{3, 4, 5}, 1, {2, 2, 0, 2, 2, 2}},
      {{3, 4, 5}, 2, {4}},          {{7}, 0, {6, 6, 2}},     {{4, 5}, 0, {}},
      {{0, 3}, 1, {1, 1}},          {{300, 64}, 0, std::vector<int64_t>(500, 7)},
  };
  for (Device dev : test::devices())
    for (ScalarType dt : kFloats)
      for (const Case& c : cases) {
        const std::string what = std::string("index_select backward ") + dtype_name(dt) + " " + str(c.shape) +
                                 " dim " + std::to_string(c.dim) + " on " + dev.str();
        run_case(what, [&] {
          Input x = make_input(c.shape, Dist::Normal, dt, dev);
          Tensor xg = x.t.detach().requires_grad_(true);
          Tensor index = tensor(c.index, Shape{static_cast<int64_t>(c.index.size())}, TensorOptions(kInt64).device(dev));
          Tensor y = index_select(xg, c.dim, index);
          // The incoming gradient as the transpose of a contiguous tensor, where it has two dims.
          Shape gshape = y.shape();
          Tensor g;
          if (gshape.size() >= 2) {
            std::swap(gshape[0], gshape[1]);
            g = make_input(gshape, Dist::Normal, dt, dev).t.transpose(0, 1);
          } else {
            g = make_input(gshape, Dist::Normal, dt, dev).t;
          }
          y.backward(g);
          const Vec gv = test::values(g);
          Vec want(static_cast<size_t>(numel_of(c.shape)), 0.0);
          for (int64_t i = 0; i < numel_of(y.shape()); ++i) {
            Shape idx = unravel(i, y.shape());
            idx[c.dim] = c.index[idx[c.dim]];
            want[ravel(idx, c.shape)] += gv[i];
          }
          // Rounded once to the dtype: sums of a few 16-bit values are exact in float32 (500 are not).
          const Tensor want_t = tensor(want, c.shape, TensorOptions(kFloat64)).to(dt);
          const Tol tol = c.index.size() > 8 ? sum_tol_for(dt) : dt == kFloat32 ? Tol{1e-6, 1e-6} : Tol{0, 0};
          check(xg.grad(), test::values(want_t), c.shape, dt, dev, tol, what);
        });
      }
}

// gather's gradient adds repeated picks in float32 for 16-bit data, rounded once, on every device:
// 1000 picks of one element, each with gradient 0.01, give 10 (bfloat16 adds gave 4; a bfloat16
// sum of ones stopped at 256).
TEST(OpTableIndex, GatherGradientSumsRepeatedPicksInFloat32) {
  for (Device dev : test::devices())
    for (ScalarType dt : {kBFloat16, kFloat16, kFloat32}) {
      const TensorOptions opts = TensorOptions(dt).device(dev);
      Tensor x = zeros({4, 3}, opts).requires_grad_(true);
      const Tensor index = zeros({1000, 3}, TensorOptions(kInt64).device(dev));
      const Tensor g = full({1000, 3}, 0.01, opts);
      gather(x, 0, index).backward(g);
      const double one = test::values(g)[0];  // 0.01 in the dtype
      const double sum = test::values(full({}, one * 1000, TensorOptions(kFloat64)).to(dt))[0];
      const Vec got = test::values(x.grad());
      for (size_t i = 0; i < got.size(); ++i) {
        const double want = i < 3 ? sum : 0.0;  // float32: 1000 adds, each rounded
        EXPECT_NEAR(got[i], want, dt == kFloat32 ? 1e-3 : 0.0) << dtype_name(dt) << " on " << dev.str() << " at " << i;
      }
      // Picks of ones: the bfloat16 sum that stopped at 256.
      Tensor y = zeros({2}, opts).requires_grad_(true);
      gather(y, 0, zeros({1000}, TensorOptions(kInt64).device(dev))).sum().backward();
      EXPECT_EQ(test::values(y.grad())[0], 1000.0) << dtype_name(dt) << " on " << dev.str();
    }
}

// embedding's weight gradient under create_graph (scatter_add, differentiable) sums as its fused
// kernel does: 1000 picks of one row, each with gradient 0.01, give 10 in bfloat16 too (not 4).
TEST(OpTableIndex, EmbeddingGradientUnderCreateGraphSumsInFloat32) {
  for (Device dev : test::devices())
    for (ScalarType dt : {kBFloat16, kFloat16}) {
      const TensorOptions opts = TensorOptions(dt).device(dev);
      Tensor w = zeros({4, 2}, opts).requires_grad_(true);
      const Tensor idx = zeros({1000}, TensorOptions(kInt64).device(dev));
      const Tensor g = full({1000, 2}, 0.01, opts).requires_grad_(true);
      const Tensor gw = autograd::grad({embedding(w, idx)}, {w}, {g}, /*retain_graph=*/true, /*allow_unused=*/false,
                                       /*create_graph=*/true)[0];
      const double one = test::values(g)[0];
      const double sum = test::values(full({}, one * 1000, TensorOptions(kFloat64)).to(dt))[0];
      const Vec got = test::values(gw);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(got[i], i < 2 ? sum : 0.0) << dtype_name(dt) << " on " << dev.str() << " at " << i;
    }
}

TEST(OpTableIndex, GatherAndScatterAdd) {
  struct Case {
    Shape x;
    Layout lx;
    int64_t dim;
    Shape index;   // values random in [0, x.size(dim))
    Shape src;     // for scatter_add (at least index's shape)
    Layout lsrc;
  };
  const std::vector<Case> cases = {
      {{3, 4}, Layout::Contig, 1, {3, 2}, {3, 2}, Layout::Contig},
      {{3, 4}, Layout::Transposed, 0, {5, 4}, {5, 4}, Layout::Transposed},
      {{3, 4}, Layout::Sliced, 1, {2, 6}, {3, 6}, Layout::Sliced},  // index smaller than x/src elsewhere
      {{2, 3, 4}, Layout::Permuted, 2, {2, 2, 3}, {2, 3, 3}, Layout::Permuted},
      {{2, 3, 4}, Layout::Contig, -2, {1, 4, 2}, {2, 4, 4}, Layout::Expanded},
      {{5}, Layout::Contig, 0, {8}, {8}, Layout::Contig},
      {{3, 4}, Layout::Contig, 1, {3, 0}, {3, 0}, Layout::Contig},
      // the CPU's parallel split: blocks of 1024 inner elements; rows of outer coordinates
      {{6, 3000}, Layout::Contig, 0, {40, 3000}, {40, 3000}, Layout::Transposed},
      {{300, 7, 5}, Layout::Permuted, 1, {300, 9, 5}, {300, 9, 5}, Layout::Contig},
  };
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts)
      for (const Case& c : cases) {
        std::string what = std::string(dtype_name(dt)) + " x " + str(c.x, c.lx) + " dim " + std::to_string(c.dim) +
                           " index " + str(c.index) + " src " + str(c.src);
        run_case(what, [&] {
          const int64_t rank = static_cast<int64_t>(c.x.size());
          const int64_t d = wrap_dim_ref(c.dim, rank);
          Input x = make_input(c.x, Dist::SmallInt, dt, dev, c.lx);
          std::vector<int64_t> iv(static_cast<size_t>(numel_of(c.index)));
          for (int64_t& v : iv) v = std::uniform_int_distribution<int64_t>(0, c.x[d] - 1)(rng());
          Tensor index = tensor(iv, c.index, TensorOptions(kInt64).device(dev));
          auto x_offset = [&](Shape idx, int64_t p) {
            idx[d] = iv[p];
            return ravel(idx, c.x);
          };
          // gather: out[p] = x[p with dim replaced by index[p]]
          Vec want;
          for (int64_t p = 0; p < numel_of(c.index); ++p) want.push_back(x.v[x_offset(unravel(p, c.index), p)]);
          check(gather(x.t, c.dim, index), want, c.index, dt, dev, {0, 0}, "gather " + what);
          // scatter_add: out = x; out[p with dim replaced by index[p]] += src[p], p over index's shape
          Input src = make_input(c.src, Dist::SmallInt, dt, dev, c.lsrc);
          Vec out = x.v;
          for (int64_t p = 0; p < numel_of(c.index); ++p) {
            Shape idx = unravel(p, c.index);
            out[x_offset(idx, p)] += src.v[ravel(idx, c.src)];
          }
          check(scatter_add(x.t, c.dim, index, src.t), out, c.x, dt, dev, {0, 0}, "scatter_add " + what);
          check(x.t.scatter_add(c.dim, index.to(kInt32), src.t), out, c.x, dt, dev, {0, 0},
                "scatter_add int32 index " + what);
          test::expect_close(x.t, x.v, c.x, 0, 0, "scatter_add leaves self alone");
        });
      }
}

TEST(OpTableIndex, OneHot) {
  for (Device dev : test::devices())
    for (ScalarType it : {kInt64, kInt32}) {
      SCOPED_TRACE(std::string("one_hot ") + dtype_name(it) + " on " + dev.str());
      TensorOptions o = TensorOptions(it).device(dev);
      check(one_hot(tensor({2, 0, 1, 2}, o)), {0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1}, {4, 3}, kInt64, dev, {0, 0},
            "inferred classes");
      check(one_hot(tensor({1, 3}, o), 5), {0, 1, 0, 0, 0, 0, 0, 0, 1, 0}, {2, 5}, kInt64, dev, {0, 0},
            "given classes");
      check(one_hot(tensor({{0, 1}, {1, 1}}, o).t(), 2), {1, 0, 0, 1, 0, 1, 0, 1}, {2, 2, 2}, kInt64, dev, {0, 0},
            "2-D transposed");
      check(one_hot(scalar_tensor(1, o), 3), {0, 1, 0}, {3}, kInt64, dev, {0, 0}, "0-d");
      check(one_hot(zeros({0}, o), 4), {}, {0, 4}, kInt64, dev, {0, 0}, "empty");
    }
}

TEST(OpTableIndex, TrilTriu) {
  const std::vector<ShapeCase> cases = {{{4, 5}, Layout::Contig},      {{5, 3}, Layout::Transposed},
                                        {{2, 3, 4}, Layout::Permuted}, {{3, 4}, Layout::Sliced},
                                        {{2, 3, 3}, Layout::Expanded}, {{0, 3}, Layout::Contig},
                                        {{2, 0, 3}, Layout::Contig},   {{1, 1}, Layout::Contig},
                                        {{64, 300}, Layout::Contig}};  // threaded over rows
  for (Device dev : test::devices())
    for (ScalarType dt : kFloatsInts + std::vector<ScalarType>{kBool})
      for (const ShapeCase& c : cases)
        for (int64_t k : {-1, 0, 1, -5, 5})
          for (bool upper : {false, true}) {
            std::string what = std::string(upper ? "triu " : "tril ") + dtype_name(dt) + " " + str(c.shape, c.layout) +
                               " diagonal " + std::to_string(k);
            run_case(what, [&] {
              Input x = make_input(c.shape, Dist::Normal, dt, dev, c.layout);
              const int64_t rows = c.shape[c.shape.size() - 2], cols = c.shape.back();
              Vec want(x.v.size());
              for (size_t i = 0; i < want.size(); ++i) {
                int64_t col = static_cast<int64_t>(i) % cols, row = static_cast<int64_t>(i) / cols % rows;
                bool keep = upper ? col - row >= k : col - row <= k;
                want[i] = keep ? x.v[i] : 0.0;
              }
              check(upper ? triu(x.t, k) : x.t.tril(k), want, c.shape, dt, dev, {0, 0}, what);
            });
          }
}

}  // namespace
}  // namespace kiln::test::op_table
