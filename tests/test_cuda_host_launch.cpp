// The thread mappings of the CUDA kernels, run on the CPU: reduce.cu's, simulated on the host over
// its real geometry, launch shape and offsets (reduce_plan.h), folds every element exactly once and
// matches the CPU ops; softmax's rows and mask offsets, the optimizer's chunks, layer norm's column
// tiles, the row kernels' blocks and the vectorised elementwise kernel cover every element exactly
// once.
#include "cuda_host_test_util.h"

using namespace kiln::test::cuda_host;

// ---- reduce.cu: geometry, offsets and launch shape

namespace {

uint64_t mask_of(const Shape& dims) {
  uint64_t m = 0;
  for (int64_t d : dims) m |= uint64_t{1} << d;
  return m;
}
Shape keep_shape(const Tensor& x, const Shape& dims) {
  Shape s = x.shape();
  for (int64_t d : dims) s[d] = 1;
  return s;
}

// Every coordinate of `shape`, row-major.
void for_each_coord(const Shape& shape, const std::function<void(const Shape&)>& fn) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Shape c(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    fn(c);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++c[d] < shape[d]) break;
      c[d] = 0;
    }
  }
}

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// (slot, lane) over a block's threads is a bijection onto [0, slots) x [0, group).
void expect_bijection(const kc::ThreadGroups& tg, int threads, const std::string& what) {
  ASSERT_EQ(tg.group * tg.slots, threads) << what;
  ASSERT_TRUE(is_pow2(tg.group) && is_pow2(tg.slots)) << what << ": group " << tg.group << " slots " << tg.slots;
  std::vector<int> seen(static_cast<size_t>(threads), 0);
  for (int t = 0; t < threads; ++t) {
    const int s = tg.slot(static_cast<unsigned>(t)), l = tg.lane(static_cast<unsigned>(t));
    ASSERT_TRUE(s >= 0 && s < tg.slots && l >= 0 && l < tg.group) << what << " thread " << t;
    ++seen[static_cast<size_t>(s * tg.group + l)];
  }
  for (int k = 0; k < threads; ++k) ASSERT_EQ(seen[static_cast<size_t>(k)], 1) << what;
}

// group_reduce (device/block_reduce.cuh) over a block's thread values, on the host: the same
// shuffle butterflies, block reduction through one value per warp, or shared-memory tree.
template <class S, class Op>
std::vector<S> group_reduce_host(std::vector<S> v, const kc::ThreadGroups& g, Op op, S identity) {
  const int n = static_cast<int>(v.size());
  auto butterfly = [&](int from) {
    for (int off = from; off > 0; off /= 2) {
      const std::vector<S> old = v;
      for (int t = 0; t < n; ++t) v[t] = op(old[t], old[t ^ off]);
    }
  };
  if (g.group == 1) return v;
  if (!g.interleaved && g.group <= kc::kWarp) {
    butterfly(g.group / 2);
    return v;
  }
  if (!g.interleaved && g.group == n) {
    const int warps = n / kc::kWarp;
    butterfly(kc::kWarp / 2);
    std::vector<S> shared(static_cast<size_t>(warps));
    for (int w = 0; w < warps; ++w) shared[w] = v[w * kc::kWarp];
    for (int t = 0; t < n; ++t) v[t] = t % kc::kWarp < warps ? shared[t % kc::kWarp] : identity;
    butterfly(kc::kWarp / 2);
    return v;
  }
  const int stride = g.interleaved ? g.slots : 1;
  std::vector<S> shared = v;
  for (int s = g.group / 2; s > 0; s /= 2)
    for (int t = 0; t < n; ++t)
      if (g.lane(static_cast<unsigned>(t)) < s) shared[t] = op(shared[t], shared[t + s * stride]);
  for (int t = 0; t < n; ++t) v[t] = shared[t - g.lane(static_cast<unsigned>(t)) * stride];
  return v;
}

// reduce.cu's launch, on the host: reduce_kernel over its grid (min(out_blocks, 2^20) x splits
// blocks of kThreads threads, each thread stepping through its reduced indices, then
// group_reduce), then reduce_finish (a warp per output merging the splits' partial states).
// Writes into `values` (and `indices`) through their strides, as the kernels do, and expects
// every (output, reduced index) folded exactly once and every output stored exactly once.
template <class F>
void simulate_reduce(const Tensor& in, const Tensor& values, const Tensor* indices, uint64_t mask, const F& f,
                     const std::string& what) {
  using S = typename F::State;
  using C = compute_t<typename F::In>;
  const kc::ReduceGeom g = kc::make_geom(in, values, mask);
  if (g.outer == 0) return;
  const kc::LaunchShape c = kc::launch_shape(g);
  expect_bijection(c.tg, kc::kThreads, what);
  ASSERT_GE(c.splits, 1) << what;
  ASSERT_LE(c.splits, kc::kMaxSplits) << what;
  const auto* x = static_cast<const typename F::In*>(in.data_ptr());
  const kc::ReduceOut out{values.data_ptr(), indices ? indices->data_ptr<int64_t>() : nullptr};
  const int64_t grid_x = std::min<int64_t>(c.out_blocks, int64_t{1} << 20);
  std::vector<int> folded(static_cast<size_t>(g.outer * g.inner), 0), stored(static_cast<size_t>(g.outer), 0);
  std::vector<S> partial(static_cast<size_t>(c.splits > 1 ? c.splits * g.outer : 0), f.init());
  std::vector<int> partial_set(partial.size(), 0);
  const auto merge = [&f](const S& a, const S& b) { return f.merge(a, b); };
  for (int64_t by = 0; by < c.splits; ++by)
    for (int64_t bx = 0; bx < grid_x; ++bx)
      for (int64_t ob = bx; ob < c.out_blocks; ob += grid_x) {
        std::vector<S> acc(kc::kThreads, f.init());
        std::vector<int64_t> out_off(kc::kThreads, 0);
        for (int t = 0; t < kc::kThreads; ++t) {
          const int slot = c.tg.slot(static_cast<unsigned>(t)), lane = c.tg.lane(static_cast<unsigned>(t));
          const int64_t o = ob * c.tg.slots + slot;
          if (o >= g.outer) continue;
          int64_t in_off;
          kc::kept_offsets(g, o, in_off, out_off[t]);
          for (int64_t r = by * c.tg.group + lane; r < g.inner; r += c.splits * c.tg.group) {
            ++folded[static_cast<size_t>(o * g.inner + r)];
            acc[t] = f.step(acc[t], static_cast<C>(x[in_off + kc::reduced_offset(g, r)]), r);
          }
        }
        acc = group_reduce_host(acc, c.tg, merge, f.init());
        for (int t = 0; t < kc::kThreads; ++t) {
          const int64_t o = ob * c.tg.slots + c.tg.slot(static_cast<unsigned>(t));
          if (c.tg.lane(static_cast<unsigned>(t)) != 0 || o >= g.outer) continue;
          if (c.splits > 1) {
            partial[static_cast<size_t>(by * g.outer + o)] = acc[t];
            ++partial_set[static_cast<size_t>(by * g.outer + o)];
          } else {
            f.store(acc[t], g.inner, out, out_off[t]);
            ++stored[static_cast<size_t>(o)];
          }
        }
      }
  if (c.splits > 1) {
    for (int v : partial_set) ASSERT_EQ(v, 1) << what << ": a partial state written " << v << " times";
    const int64_t warps = static_cast<int64_t>(kc::blocks_for(g.outer * kc::kWarp)) * (kc::kThreads / kc::kWarp);
    for (int64_t w = 0; w < warps; ++w)
      for (int64_t o = w; o < g.outer; o += warps) {
        std::vector<S> lanes(kc::kWarp, f.init());
        for (int l = 0; l < kc::kWarp; ++l)
          for (int64_t s = l; s < c.splits; s += kc::kWarp) lanes[l] = f.merge(lanes[l], partial[s * g.outer + o]);
        for (int off = kc::kWarp / 2; off > 0; off /= 2) {
          const std::vector<S> old = lanes;
          for (int l = 0; l < kc::kWarp; ++l) lanes[l] = f.merge(old[l], old[l ^ off]);
        }
        int64_t in_off, off;
        kc::kept_offsets(g, o, in_off, off);
        f.store(lanes[0], g.inner, out, off);
        ++stored[static_cast<size_t>(o)];
      }
  }
  for (int v : folded) ASSERT_EQ(v, 1) << what << ": an element folded " << v << " times";
  for (int v : stored) ASSERT_EQ(v, 1) << what << ": an output stored " << v << " times";
}

// The simulated kernels' result for x over dims (keep-shaped, contiguous as the op layer makes it).
template <class F>
Tensor run_reduce(const Tensor& x, const Shape& dims, const F& f, ScalarType out_dtype, const std::string& what,
                  Tensor* indices = nullptr) {
  const Shape ks = keep_shape(x, dims);
  Tensor values = make_empty(ks, out_dtype, Device::cpu());
  if (indices) *indices = make_empty(ks, kInt64, Device::cpu());
  simulate_reduce(x, values, indices, mask_of(dims), f, what);
  return values;
}

void expect_tensors_match(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  const std::vector<double> g = test::values(got), w = test::values(want);
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = (rtol == 0 && atol == 0) ? 0 : atol + rtol * std::abs(w[i]);
    expect_match(g[i], w[i], tol, what + " element " + std::to_string(i));
    if (testing::Test::HasFailure()) return;  // one message per case is enough
  }
}

struct ReduceCase {
  std::string name;
  Shape base;
  std::function<Tensor(const Tensor&)> view;
  Shape dims;
};

const Tensor& same(const Tensor& t) { return t; }

std::vector<ReduceCase> reduce_cases() {
  return {
      {"short rows (a thread per output)", {7, 5}, same, {1}},
      {"rows (a warp per output)", {6, 100}, same, {1}},
      {"long rows (a block per output, split)", {2, 70000}, same, {1}},
      {"whole tensor (split across blocks)", {300000}, same, {0}},
      {"columns (interleaved lanes, split)", {1000, 40}, same, {0}},
      {"a batch sum (interleaved, split)", {513, 64}, same, {0}},
      {"few long columns", {50000, 3}, same, {0}},
      {"middle and last dims", {4, 64, 33}, same, {0, 2}},
      {"permuted 4-d", {6, 4, 7, 5}, [](const Tensor& t) { return t.permute({1, 3, 0, 2}); }, {1, 3}},
      {"expanded (stride 0)", {1, 8, 1}, [](const Tensor& t) { return t.expand({300, 8, 20}); }, {0, 2}},
      {"transposed", {30, 20}, [](const Tensor& t) { return t.t(); }, {1}},
      {"narrowed", {10, 40}, [](const Tensor& t) { return t.narrow(1, 3, 30); }, {0}},
      {"ten dims of 2, permuted", Shape(10, 2),
       [](const Tensor& t) { return t.permute({9, 0, 8, 1, 7, 2, 6, 3, 5, 4}); }, {1, 2, 5, 7, 8}},
      {"0-d", {}, same, {}},
  };
}

template <class T>
Tensor data_tensor(const Shape& shape, const std::vector<double>& v) {
  return tensor(as<T>(v), shape);
}
int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  return n;
}

}  // namespace

// Every output's input offsets (kept_offsets plus reduced_offset over its reduced indices) are
// exactly the input elements with that output's coordinates, for any strides.
TEST(CudaHostMath, ReduceOffsetsAddressExactlyTheElementsOfEachOutput) {
  std::vector<ReduceCase> cases = reduce_cases();
  cases.push_back({"overlapping unit strides", {30}, [](const Tensor& t) { return make_view(t, {5, 4, 3}, {2, 1, 1}, 1); },
                   {0, 2}});
  cases.push_back({"keep dims coalescing", {3, 4, 5, 6}, same, {3}});
  cases.push_back({"reduce the first dim of 3", {3, 4, 5}, same, {0}});
  for (const auto& rc : cases) {
    const Tensor x = rc.view(zeros(rc.base));
    for (bool transposed_out : {false, true}) {
      const Shape ks = keep_shape(x, rc.dims);
      Tensor out = make_empty(ks, kFloat32, Device::cpu());
      if (transposed_out && ks.size() >= 2) {  // an output with reversed strides
        Shape rev(ks.rbegin(), ks.rend()), perm;
        for (int64_t d = static_cast<int64_t>(ks.size()) - 1; d >= 0; --d) perm.push_back(d);
        out = make_empty(rev, kFloat32, Device::cpu()).permute(perm);
      }
      const kc::ReduceGeom g = kc::make_geom(x, out, mask_of(rc.dims));
      std::map<int64_t, std::vector<int64_t>> want;  // output offset -> input offsets
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < x.dim(); ++d) (mask_of(rc.dims) >> d & 1 ? inner : outer) *= x.size(d);
      for_each_coord(x.shape(), [&](const Shape& c) {
        int64_t in_off = 0, out_off = 0;
        for (size_t d = 0; d < c.size(); ++d) {
          in_off += c[d] * x.stride(static_cast<int64_t>(d));
          if (!(mask_of(rc.dims) >> d & 1)) out_off += c[d] * out.stride(static_cast<int64_t>(d));
        }
        want[out_off].push_back(in_off);
      });
      const std::string what = rc.name + (transposed_out ? ", transposed output" : "");
      ASSERT_EQ(g.outer, outer) << what;
      ASSERT_EQ(g.inner, inner) << what;
      ASSERT_LE(g.nk, kc::kMaxReduceDims);
      std::map<int64_t, std::vector<int64_t>> got;
      for (int64_t o = 0; o < g.outer; ++o) {
        int64_t in_off, out_off;
        kc::kept_offsets(g, o, in_off, out_off);
        ASSERT_EQ(got.count(out_off), 0u) << what << ": two outputs at offset " << out_off;
        auto& offs = got[out_off];
        for (int64_t r = 0; r < g.inner; ++r) offs.push_back(in_off + kc::reduced_offset(g, r));
      }
      if (g.inner > 0) {
        for (auto& [k, v] : want) std::sort(v.begin(), v.end());
        for (auto& [k, v] : got) std::sort(v.begin(), v.end());
        EXPECT_EQ(got, want) << what;
      }
      // One reduced dim: flat reduced index r is the position along it (max/min report it).
      if (rc.dims.size() == 1 && x.size(rc.dims[0]) > 1 && g.inner > 0) {
        for (int64_t r = 0; r < g.inner; ++r) ASSERT_EQ(kc::reduced_offset(g, r), r * x.stride(rc.dims[0])) << what;
      }
    }
  }
}

TEST(CudaHostMath, ReduceLaunchShapeIsConsistent) {
  const std::vector<int64_t> outers = {1, 2, 3, 31, 32, 33, 200, 511, 512, 1000, 100000, int64_t{1} << 28};
  const std::vector<int64_t> inners = {0, 1, 2, 16, 17, 100, 1023, 1024, 5000, 16384, 70000, int64_t{1} << 31};
  for (int64_t outer : outers)
    for (int64_t inner : inners)
      for (bool columns : {false, true}) {
        kc::ReduceGeom g;
        g.outer = outer;
        g.inner = inner;
        g.nk = outer > 1 ? 1 : 0;
        g.nr = inner > 1 ? 1 : 0;
        g.keep_size[0] = outer, g.red_size[0] = inner;
        g.keep_in[0] = columns ? 1 : std::max<int64_t>(inner, 1), g.keep_out[0] = 1;
        g.red_in[0] = columns ? outer : 1;
        const kc::LaunchShape c = kc::launch_shape(g);
        const std::string what = "outer " + std::to_string(outer) + " inner " + std::to_string(inner) +
                                 (columns ? " columns" : " rows");
        expect_bijection(c.tg, kc::kThreads, what);
        const bool lanes_across = g.nk > 0 && (g.nr == 0 || columns);
        if (inner <= 16) {
          EXPECT_EQ(c.tg.group, 1) << what;
        }
        else EXPECT_EQ(c.tg.interleaved, lanes_across) << what;
        EXPECT_GE(c.out_blocks * c.tg.slots, outer) << what;
        EXPECT_LT((c.out_blocks - 1) * c.tg.slots, outer) << what;
        EXPECT_GE(c.splits, 1) << what;
        EXPECT_LE(c.splits, kc::kMaxSplits) << what;
        EXPECT_LE(c.splits, 65535) << what;  // gridDim.y
        if (c.splits > 1) {
          EXPECT_GT(c.tg.group, 1) << what;
          EXPECT_LT(c.out_blocks, kc::kTargetBlocks / 2) << what;
          // Every split still has at least kMinPerThread elements per thread.
          EXPECT_GE(inner, c.splits * c.tg.group * kc::kMinPerThread) << what;
        }
      }
}

TEST(CudaHostMath, ThreadGroupsSplitABlockExactly) {
  for (int threads : {32, 256, 1024})
    for (int group = 1; group <= threads; group *= 2)
      for (bool interleaved : {false, true})
        expect_bijection({group, threads / group, interleaved}, threads,
                         "group " + std::to_string(group) + (interleaved ? " interleaved" : ""));
  // Interleaved groups: a warp spans 32 neighbouring slots; contiguous: consecutive lanes.
  const kc::ThreadGroups inter{8, 32, true}, contig{32, 8, false};
  for (unsigned t = 0; t < 32; ++t) {
    EXPECT_EQ(inter.slot(t), static_cast<int>(t));
    EXPECT_EQ(inter.lane(t), 0);
    EXPECT_EQ(contig.slot(t), 0);
    EXPECT_EQ(contig.lane(t), static_cast<int>(t));
  }
}

// reduce.cu's kernels simulated on the host over real tensors: every element folded once, and
// the CPU ops' results (exactly where the data make every order exact).
TEST(CudaHostMath, SimulatedReduceKernelsMatchTheCpuOps) {
  uint64_t seed = 1;
  for (const auto& rc : reduce_cases()) {
    const int64_t n = numel_of(rc.base);
    const std::vector<double> dy = dyadic_values(n, ++seed);
    const Tensor x = rc.view(data_tensor<float>(rc.base, dy));
    const Tensor xd = rc.view(data_tensor<double>(rc.base, dy));
    const Shape& dims = rc.dims;
    int64_t count = 1;
    for (int64_t d : dims) count *= x.size(d);
    const double sqrt_count = std::sqrt(static_cast<double>(std::max<int64_t>(count, 1)));
    auto name = [&](const char* op) { return std::string(op) + ", " + rc.name; };

    expect_tensors_match(run_reduce(x, dims, kc::SumFold<float, false>::make({}), kFloat32, name("sum")),
                         sum(x, dims, true), 0, 0, name("sum"));
    expect_tensors_match(
        run_reduce(x, dims, kc::SumFold<float, false>::make(attrs_with(1.0 / static_cast<double>(count))), kFloat32,
                   name("mean")),
        mean(x, dims, true), 0, 0, name("mean"));
    const Tensor xh = rc.view(data_tensor<Half>(rc.base, dy));
    expect_tensors_match(run_reduce(xh, dims, kc::SumFold<Half, false>::make({}), kFloat16, name("sum float16")),
                         sum(xh, dims, true), 0, 0, name("sum float16"));
    const Tensor xi = rc.view(data_tensor<int32_t>(rc.base, dyadic_values(n, ++seed, 1000)));
    expect_tensors_match(run_reduce(xi.to(kInt64), dims, kc::SumFold<int64_t, false>::make({}), kInt64, name("sum int")),
                         sum(xi, dims, true), 0, 0, name("sum int"));
    std::vector<double> near_one = normal_values(n, ++seed);
    for (auto& e : near_one) e = 1 + 0.004 * e;
    const Tensor xp = rc.view(data_tensor<float>(rc.base, near_one));
    expect_tensors_match(run_reduce(xp, dims, kc::SumFold<float, true>::make({}), kFloat32, name("prod")),
                         prod(xp, dims, true), 3e-6 * sqrt_count, 0, name("prod"));
    for (int64_t corr : {0, 1}) {
      expect_tensors_match(run_reduce(x, dims, kc::VarFold<float>::make(attrs_with(1, corr)), kFloat32, name("var")),
                           var(x, dims, corr, true), 1e-6, 1e-9, name("var"));
      expect_tensors_match(run_reduce(xd, dims, kc::VarFold<double>::make(attrs_with(1, corr)), kFloat64,
                                      name("var double")),
                           var(xd, dims, corr, true), 1e-11, 1e-14, name("var double"));
    }
    expect_tensors_match(run_reduce(x, dims, kc::LogSumExpFold<float>::make({}), kFloat32, name("logsumexp")),
                         logsumexp(x, dims, true), 1e-6, 1e-6, name("logsumexp"));
    for (double p : {0.0, 1.0, 2.0}) {
      expect_tensors_match(run_reduce(x, dims, kc::NormFold<float>::make(attrs_with(1, 0, p)), kFloat32, name("norm")),
                           norm(x, p, dims, true), 0, 0, name("norm") + " p " + std::to_string(p));
    }
    std::vector<double> sparse = dyadic_values(n, ++seed, 1);  // about a third zeros
    if (n > 10) sparse[n / 7] = kNaN;
    const Tensor xs = rc.view(data_tensor<float>(rc.base, sparse));
    expect_tensors_match(run_reduce(xs, dims, kc::LogicalFold<float, true>::make({}), kBool, name("all")),
                         all(xs, dims, true), 0, 0, name("all"));
    expect_tensors_match(run_reduce(xs, dims, kc::LogicalFold<float, false>::make({}), kBool, name("any")),
                         any(xs, dims, true), 0, 0, name("any"));
    if (count == 0) continue;  // max and min have no identity
    std::vector<double> ties = dyadic_values(n, ++seed, 1.5);
    if (n > 10) ties[n / 3] = kNaN;
    const Tensor xt = rc.view(data_tensor<float>(rc.base, ties));
    expect_tensors_match(run_reduce(xt, dims, kc::ExtremeFold<float, true>::make({}), kFloat32, name("amax")),
                         amax(xt, dims, true), 0, 0, name("amax"));
    expect_tensors_match(run_reduce(xt, dims, kc::ExtremeFold<float, false>::make({}), kFloat32, name("amin")),
                         amin(xt, dims, true), 0, 0, name("amin"));
    expect_tensors_match(run_reduce(x, dims, kc::NormFold<float>::make(attrs_with(1, 0, kInf)), kFloat32, name("norm")),
                         norm(x, kInf, dims, true), 0, 0, name("norm inf"));
    if (dims.size() != 1) continue;  // max/min with indices: one dim
    Tensor idx;
    const auto [mv, mi] = max(xt, dims[0], true);
    expect_tensors_match(run_reduce(xt, dims, kc::ExtremeIndexFold<float, true>::make({}), kFloat32, name("max"), &idx),
                         mv, 0, 0, name("max"));
    expect_tensors_match(idx, mi, 0, 0, name("max indices"));
    const auto [nv, ni] = min(xt, dims[0], true);
    expect_tensors_match(run_reduce(xt, dims, kc::ExtremeIndexFold<float, false>::make({}), kFloat32, name("min"), &idx),
                         nv, 0, 0, name("min"));
    expect_tensors_match(idx, ni, 0, 0, name("min indices"));
    const Tensor xti = rc.view(data_tensor<int32_t>(rc.base, dyadic_values(n, ++seed, 1.5)));
    const auto [iv, ii] = max(xti, dims[0], true);
    expect_tensors_match(run_reduce(xti, dims, kc::ExtremeIndexFold<int32_t, true>::make({}), kInt32, name("max int"),
                                    &idx),
                         iv, 0, 0, name("max int"));
    expect_tensors_match(idx, ii, 0, 0, name("max int indices"));
  }
}

// An empty reduction stores each fold's identity result; an empty output launches nothing.
TEST(CudaHostMath, SimulatedEmptyReductions) {
  const Tensor x = zeros({3, 0});
  expect_tensors_match(run_reduce(x, {1}, kc::SumFold<float, false>::make({}), kFloat32, "sum"), sum(x, {1}, true), 0, 0,
                       "empty sum");
  expect_tensors_match(run_reduce(x, {1}, kc::SumFold<float, true>::make({}), kFloat32, "prod"), prod(x, {1}, true), 0, 0,
                       "empty prod");
  expect_tensors_match(run_reduce(x, {1}, kc::SumFold<float, false>::make(attrs_with(kNaN)), kFloat32, "mean"),
                       mean(x, {1}, true), 0, 0, "empty mean");
  expect_tensors_match(run_reduce(x, {1}, kc::VarFold<float>::make(attrs_with(1, 1)), kFloat32, "var"),
                       var(x, {1}, 1, true), 0, 0, "empty var");
  expect_tensors_match(run_reduce(x, {1}, kc::LogSumExpFold<float>::make({}), kFloat32, "logsumexp"),
                       logsumexp(x, {1}, true), 0, 0, "empty logsumexp");
  expect_tensors_match(run_reduce(x, {1}, kc::NormFold<float>::make(attrs_with(1, 0, 2)), kFloat32, "norm"),
                       norm(x, 2.0, {1}, true), 0, 0, "empty norm");
  expect_tensors_match(run_reduce(x, {1}, kc::LogicalFold<float, true>::make({}), kBool, "all"), all(x, {1}, true), 0, 0,
                       "empty all");
  expect_tensors_match(run_reduce(x, {1}, kc::LogicalFold<float, false>::make({}), kBool, "any"), any(x, {1}, true), 0, 0,
                       "empty any");
  const Tensor y = zeros({0, 4});
  const kc::ReduceGeom g = kc::make_geom(y, make_empty({0, 1}, kFloat32, Device::cpu()), mask_of({1}));
  EXPECT_EQ(g.outer, 0);
}

// ---- softmax.cu

namespace {

// softmax_forward's mapping on the host: block rb (grid-striding over row blocks) has row
// rb * slots + slot, lane l takes elements l, l + group, ... Returns each element's visits.
std::vector<int> softmax_visits(const Tensor& x, int64_t dim) {
  kc::RowGeom g = kc::rows_of(x, dim);
  kc::ThreadGroups tg;
  const int threads = kc::plan_rows(g, tg);
  const std::string what = "softmax over dim " + std::to_string(dim) + " of " + std::to_string(x.numel());
  expect_bijection(tg, threads, what);
  EXPECT_TRUE(threads == kc::kThreads || threads == 1024) << what;
  EXPECT_EQ(g.row_blocks, (g.rows + tg.slots - 1) / tg.slots) << what;
  std::vector<int> visits(static_cast<size_t>(x.numel()), 0);
  const unsigned grid = kc::grid_for(g);
  for (unsigned bx = 0; bx < grid; ++bx)
    for (int64_t rb = bx; rb < g.row_blocks; rb += grid)
      for (int t = 0; t < threads; ++t) {
        const int64_t r = rb * tg.slots + tg.slot(static_cast<unsigned>(t));
        if (r >= g.rows) continue;
        for (int64_t i = tg.lane(static_cast<unsigned>(t)); i < g.n; i += tg.group)
          ++visits[static_cast<size_t>(g.row_base(r) + i * g.inner)];
      }
  return visits;
}

}  // namespace

TEST(CudaHostMath, SoftmaxRowsCoverEveryElementOnce) {
  const std::vector<Shape> shapes = {{}, {1}, {5}, {33}, {4, 1024}, {3, 1025}, {2, 16384}, {1, 20000},
                                     {8, 3, 5}, {2, 16, 9}, {2, 17, 40}, {3, 100, 7}, {1000, 2}, {2, 3, 4, 5}};
  for (const Shape& s : shapes) {
    const Tensor x = zeros(s);
    for (int64_t dim = 0; dim < std::max<int64_t>(x.dim(), 1); ++dim) {
      const std::vector<int> v = softmax_visits(x, dim);
      for (size_t k = 0; k < v.size(); ++k) ASSERT_EQ(v[k], 1) << "shape rank " << s.size() << " dim " << dim << " element " << k;
    }
  }
}

// Row r's base and the mask offset of its element i are those of the coordinates they stand for,
// for masks broadcast from any shape or with any strides.
TEST(CudaHostMath, SoftmaxRowAndMaskOffsetsMatchCoordinates) {
  const Shape xs = {2, 3, 4, 5};
  const std::vector<std::function<Tensor()>> masks = {
      [&] { return zeros(xs); },
      [&] { return zeros({2, 1, 4, 5}).expand(xs); },
      [&] { return zeros({1, 3, 1, 5}).expand(xs); },
      [&] { return zeros({5}).expand(xs); },
      [&] { return zeros({4, 1}).expand(xs); },
      [&] { return zeros({5, 4, 3, 2}).permute({3, 2, 1, 0}); },
      [&] { return zeros({2, 3, 10, 5}).narrow(2, 3, 4); },
      [&] { return make_view(zeros({40}), xs, {4, 4, 1, 1}, 0); },  // overlapping: equal strides side by side
  };
  const Tensor x = zeros(xs);
  for (size_t mk = 0; mk < masks.size(); ++mk) {
    const Tensor mask = masks[mk]();
    for (int64_t dim = 0; dim < x.dim(); ++dim) {
      const kc::RowGeom g = kc::rows_of(x, dim);
      const kc::MaskGeom mg = kc::mask_geom(x, mask, dim);
      for_each_coord(xs, [&](const Shape& c) {
        int64_t r = 0, linear = 0, moff = 0;
        for (int64_t d = 0; d < x.dim(); ++d) {
          linear = linear * xs[d] + c[d];
          moff += c[d] * mask.stride(d);
          if (d != dim) r = r * xs[d] + c[d];
        }
        const int64_t i = c[dim];
        ASSERT_EQ(g.row_base(r) + i * g.inner, linear) << "mask " << mk << " dim " << dim;
        ASSERT_EQ(kc::mask_offset(mg, r) + i * mg.step, moff) << "mask " << mk << " dim " << dim;
      });
    }
  }
  const Tensor s = zeros({});
  const kc::MaskGeom mg = kc::mask_geom(s, s, 0);
  EXPECT_EQ(mg.nd, 0);
  EXPECT_EQ(mg.step, 0);
  EXPECT_EQ(kc::mask_offset(mg, 0), 0);
}

// ---- optim.cu: a param group's tensors cut into chunks, one block each

TEST(CudaHostMath, OptimChunksCoverEveryElementOnce) {
  std::mt19937_64 rng(3);
  std::vector<std::vector<int64_t>> lists = {{1},
                                             {kc::kChunk},
                                             {kc::kChunk + 1},
                                             {kc::kChunk - 1, 1, kc::kChunk, 3 * kc::kChunk + 5},
                                             {100000, 7, 20000}};
  std::vector<int64_t> full;
  for (int k = 0; k < kc::kMaxTensors; ++k) full.push_back(1 + static_cast<int64_t>(rng() % (3 * kc::kChunk)));
  lists.push_back(full);
  for (const auto& sizes : lists) {
    kc::Chunks c;
    for (int64_t n : sizes) c.add(n);
    ASSERT_EQ(c.count, static_cast<int>(sizes.size()));
    std::vector<std::vector<int>> seen;
    int64_t want_blocks = 0;
    for (int64_t n : sizes) {
      seen.emplace_back(static_cast<size_t>(n), 0);
      want_blocks += (n + kc::kChunk - 1) / kc::kChunk;
    }
    ASSERT_EQ(c.blocks(), want_blocks);
    for (int64_t b = 0; b < c.blocks(); ++b) {
      int64_t begin, end;
      const int t = kc::block_tensor(c, b, begin, end);
      ASSERT_TRUE(t >= 0 && t < c.count) << "block " << b;
      ASSERT_TRUE(0 <= begin && begin < end && end <= sizes[t] && end - begin <= kc::kChunk) << "block " << b;
      for (int tid = 0; tid < kc::kThreads; ++tid)  // adam_kernel's loop
        for (int64_t i = begin + tid; i < end; i += kc::kThreads) ++seen[t][static_cast<size_t>(i)];
    }
    for (size_t t = 0; t < seen.size(); ++t)
      for (size_t i = 0; i < seen[t].size(); ++i) ASSERT_EQ(seen[t][i], 1) << "tensor " << t << " element " << i;
  }
}

// ---- layer_norm.cu: the weight and bias gradients' column tiles and row chunks

TEST(CudaHostMath, LayerNormParamChunksCoverEveryRowOnce) {
  for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{1000}, int64_t{65536},
                       int64_t{1000003}})
    for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{1000}, int64_t{70000},
                      int64_t{1} << 20}) {
      const kc::ColumnChunks p = kc::column_chunks(rows, n);
      const std::string what = "rows " + std::to_string(rows) + " n " + std::to_string(n);
      EXPECT_EQ(p.tiles, (n + kc::kWarp - 1) / kc::kWarp) << what;
      ASSERT_GE(p.rows_per_chunk, 1) << what;
      ASSERT_GE(p.chunks, 1) << what;
      EXPECT_LE(p.chunks, 65535) << what;  // gridDim.y
      EXPECT_LE(p.tiles * p.chunks, std::max<int64_t>(2048, p.tiles)) << what;
      if (rows > 0) {
        EXPECT_GE(p.chunks * p.rows_per_chunk, rows) << what;        // every row in a chunk
        EXPECT_LT((p.chunks - 1) * p.rows_per_chunk, rows) << what;  // no chunk empty
      }
      if ((rows + 31) / 32 <= 2048 / p.tiles) {
        EXPECT_LE(p.rows_per_chunk, 32) << what;
      }
    }
  // layer_norm_param_partial_kernel's mapping: (tile, chunk) blocks of 32 x 8 threads.
  for (int64_t rows : {1, 33, 250})
    for (int64_t n : {1, 40, 100}) {
      const kc::ColumnChunks p = kc::column_chunks(rows, n);
      std::vector<int> seen(static_cast<size_t>(rows * n), 0);
      for (int64_t tx = 0; tx < p.tiles; ++tx)
        for (int64_t cy = 0; cy < p.chunks; ++cy)
          for (int ty = 0; ty < 8; ++ty)
            for (int lx = 0; lx < kc::kWarp; ++lx) {
              const int64_t col = tx * kc::kWarp + lx, r0 = cy * p.rows_per_chunk;
              if (col >= n) continue;
              for (int64_t r = r0 + ty; r < std::min(rows, r0 + p.rows_per_chunk); r += 8) ++seen[r * n + col];
            }
      for (int v : seen) ASSERT_EQ(v, 1) << "rows " << rows << " n " << n;
    }
}

// ---- the row kernels (device/row_group.cuh): a warp or a block per row

TEST(CudaHostMath, RowBlocksCoverEveryRowOnce) {
  for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{1000}, (int64_t{1} << 23) + 5})
    for (bool warp_rows : {true, false}) {
      const unsigned grid = kc::row_blocks(rows, warp_rows);
      const int64_t per_block = warp_rows ? kc::kThreads / kc::kWarp : 1;  // RowGroup's rows per block
      EXPECT_LE(grid, 1u << 20);
      std::vector<int> seen(static_cast<size_t>(rows), 0);
      for (int64_t first = 0; first < static_cast<int64_t>(grid) * per_block; ++first)  // first_row() of each group
        for (int64_t r = first; r < rows; r += static_cast<int64_t>(grid) * per_block) ++seen[static_cast<size_t>(r)];
      for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(seen[static_cast<size_t>(r)], 1) << "rows " << rows << " row " << r;
    }
}

// ---- the vectorised elementwise kernel (device/elementwise.cuh, vector_plan.h)

// Dense aligned operands take the vectorised kernel; a broadcast operand, a strided or
// misaligned one (a view at an odd offset), several dims or a tiny tensor do not.
TEST(CudaHostMath, VectorWidthOnlyForDenseAlignedOperands) {
  Tensor a = empty({1000}), b = empty({1000}), h = empty({1000}, kFloat16), d = empty({1000}, kFloat64);
  Tensor m = empty({1000}, kBool), row = empty({1}), big = empty({20, 50});
  auto width = [](const std::vector<const Tensor*>& ops) {
    if (ops.size() == 2) {
      const auto p = kiln::backend::make_plan<2>({ops[0], ops[1]});
      return kc::vector_width(p, std::array<int, 2>{static_cast<int>(ops[0]->element_size()),
                                                    static_cast<int>(ops[1]->element_size())});
    }
    const auto p = kiln::backend::make_plan<3>({ops[0], ops[1], ops[2]});
    return kc::vector_width(p, std::array<int, 3>{static_cast<int>(ops[0]->element_size()),
                                                  static_cast<int>(ops[1]->element_size()),
                                                  static_cast<int>(ops[2]->element_size())});
  };
  EXPECT_EQ(width({&a, &b}), kc::kVector);
  EXPECT_EQ(width({&m, &a, &b}), kc::kVector);  // a comparison: bool output, float inputs
  EXPECT_EQ(width({&a, &h}), kc::kVector);      // a cast
  EXPECT_EQ(width({&d, &d, &d}), kc::kVector);
  const Tensor bt = big.t();
  EXPECT_EQ(width({&a, &row}), 1);  // broadcast: stride 0
  const Tensor odd = a.narrow(0, 1, 999), odd_out = b.narrow(0, 0, 999);
  EXPECT_EQ(width({&odd_out, &odd}), 1);  // misaligned by one element
  const Tensor four = a.narrow(0, 4, 996), four_out = b.narrow(0, 0, 996);
  EXPECT_EQ(width({&four_out, &four}), kc::kVector);  // a vector's worth further on: aligned again
  const Tensor strided = a.slice(0, 0, 1000, 2), strided_out = b.narrow(0, 0, 500);
  EXPECT_EQ(width({&strided_out, &strided}), 1);
  const Tensor big_out = empty({50, 20});
  EXPECT_EQ(width({&big_out, &bt}), 1);  // a transpose: two dims
  const Tensor tiny = empty({3}), tiny_out = empty({3});
  EXPECT_EQ(width({&tiny_out, &tiny}), 1);
}

// The kernel's split: vectors over a grid-stride loop, then the tail one per thread of the first
// threads of the grid; every element exactly once, whatever numel and grid.
TEST(CudaHostMath, VectorSplitCoversEveryElementOnce) {
  for (int64_t numel : {int64_t{4}, int64_t{5}, int64_t{7}, int64_t{8}, int64_t{1023}, int64_t{4096}, int64_t{100003}}) {
    const kc::VectorSplit split = kc::vector_split(numel, kc::kVector);
    EXPECT_LT(split.tail, kc::kVector);
    const int64_t threads = static_cast<int64_t>(kc::blocks_for(split.vectors)) * kc::kThreads;
    std::vector<int> seen(static_cast<size_t>(numel), 0);
    for (int64_t g = 0; g < threads; ++g) {
      for (int64_t v = g; v < split.vectors; v += threads)
        for (int j = 0; j < kc::kVector; ++j) ++seen[static_cast<size_t>(v * kc::kVector + j)];
      if (g < split.tail) ++seen[static_cast<size_t>(split.tail_begin + g)];
    }
    for (int64_t i = 0; i < numel; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "numel " << numel << " element " << i;
  }
}

// ---- small shared pieces

TEST(CudaHostMath, LaunchSizesAndCombineOps) {
  EXPECT_EQ(kc::blocks_for(0), 1u);
  EXPECT_EQ(kc::blocks_for(1), 1u);
  EXPECT_EQ(kc::blocks_for(kc::kThreads), 1u);
  EXPECT_EQ(kc::blocks_for(kc::kThreads + 1), 2u);
  EXPECT_EQ(kc::blocks_for(int64_t{1} << 40), 1u << 20);
  EXPECT_EQ(kc::blocks_for(1000, 100), 10u);
  for (int64_t n : {-3, 0, 1}) EXPECT_EQ(kc::pow2_at_least(n), 1);
  EXPECT_EQ(kc::pow2_at_least(2), 2);
  EXPECT_EQ(kc::pow2_at_least(3), 4);
  EXPECT_EQ(kc::pow2_at_least(1024), 1024);
  EXPECT_EQ(kc::pow2_at_least(1025), 2048);

  // NaN wins on either side, as the CPU's amax/amin; otherwise max/min.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(kc::MaxOp{}(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(kc::MaxOp{}(1.0f, nan)));
  EXPECT_TRUE(std::isnan(kc::MinOp{}(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(kc::MinOp{}(1.0f, nan)));
  EXPECT_EQ(kc::MaxOp{}(-inf, 2.0f), 2.0f);
  EXPECT_EQ(kc::MaxOp{}(3.0, -1.0), 3.0);
  EXPECT_EQ(kc::MinOp{}(-inf, 2.0f), -inf);
  EXPECT_EQ(kc::MinOp{}(3, -1), -1);
  EXPECT_EQ(kc::SumOp{}(2.5, 0.25), 2.75);

  // The float overloads stay in float.
  static_assert(std::is_same_v<decltype(kc::dev_exp(1.0f)), float>);
  static_assert(std::is_same_v<decltype(kc::dev_log(1.0f)), float>);
  static_assert(std::is_same_v<decltype(kc::dev_sqrt(1.0f)), float>);
  static_assert(std::is_same_v<decltype(kc::dev_exp(1.0)), double>);
  EXPECT_EQ(kc::dev_exp(0.5f), std::exp(0.5f));
  EXPECT_EQ(kc::dev_log(3.0f), std::log(3.0f));
  EXPECT_EQ(kc::dev_sqrt(2.0f), std::sqrt(2.0f));
  EXPECT_EQ(kc::dev_sqrt(2.0), std::sqrt(2.0));
}
