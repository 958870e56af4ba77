// The host-side decisions of the cuDNN convolutions (src/backend/cuda/conv_plan.h), without a GPU
// or cuDNN: which layout a call runs in, which operands are copied dense first (checked against
// Tensor::is_contiguous on real tensors), the math types, a plan key that tells apart any two
// calls differing in one size or attribute, the order in which ranked algorithms (and the graph
// API's engines) are tried, and what the plan cache keeps after a run.
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <vector>

#include "backend/cuda/conv_plan.h"
#include "kiln/kiln.h"

namespace kiln::test {
namespace {

namespace cp = backend::cuda::conv_plan;
using cp::Layout;
using cp::Math;

cp::Dims dims_of(const Tensor& t) { return {t.size(0), t.size(1), t.size(2), t.size(3)}; }
cp::Dims strides_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

TEST(CudnnHost, PackedStridesAreNchwAndNhwc) {
  EXPECT_EQ(cp::packed_strides({2, 3, 4, 5}, Layout::NCHW), (cp::Dims{60, 20, 5, 1}));
  EXPECT_EQ(cp::packed_strides({2, 3, 4, 5}, Layout::NHWC), (cp::Dims{60, 1, 15, 3}));
  // What kiln makes for channels-last tensors.
  const Shape s{2, 3, 4, 5};
  const Shape cl = channels_last_strides(s);
  EXPECT_EQ(cp::packed_strides({2, 3, 4, 5}, Layout::NHWC), (cp::Dims{cl[0], cl[1], cl[2], cl[3]}));
  EXPECT_EQ(cp::other(Layout::NHWC), Layout::NCHW);
  EXPECT_EQ(cp::other(Layout::NCHW), Layout::NHWC);
}

// is_packed agrees with Tensor::is_contiguous for both formats on every kind of view.
TEST(CudnnHost, PackedMeansWhatIsContiguousMeans) {
  std::vector<Tensor> ts;
  for (const Shape& s : {Shape{2, 3, 4, 5}, Shape{2, 1, 4, 5}, Shape{2, 8, 1, 1}, Shape{1, 3, 4, 1}, Shape{6, 1, 3, 3},
                         Shape{1, 1, 1, 1}}) {
    Tensor t = zeros(s);
    ts.push_back(t);
    ts.push_back(t.contiguous(MemoryFormat::ChannelsLast));
    ts.push_back(t.permute({0, 1, 3, 2}));  // H and W swapped: neither layout unless one of them is 1
    ts.push_back(t.permute({1, 0, 2, 3}));
  }
  Tensor big = zeros({3, 6, 8, 10});
  ts.push_back(big.narrow(0, 1, 2));           // an offset, still dense
  ts.push_back(big.slice(3, 0, 10, 2));        // every other column
  ts.push_back(big.narrow(1, 2, 3));           // a channel slice
  ts.push_back(big.contiguous(MemoryFormat::ChannelsLast).narrow(1, 0, 4));  // channels-last channel slice
  for (const Tensor& t : ts) {
    EXPECT_EQ(cp::is_packed(dims_of(t), strides_of(t), Layout::NCHW), t.is_contiguous())
        << t.shape() << " strides " << t.strides();
    EXPECT_EQ(cp::is_packed(dims_of(t), strides_of(t), Layout::NHWC), t.is_contiguous(MemoryFormat::ChannelsLast))
        << t.shape() << " strides " << t.strides();
  }
}

TEST(CudnnHost, OperandsAreCopiedWhenNotDenseInTheLayoutOrMisaligned) {
  const cp::Dims d{2, 4, 6, 6};
  const cp::Dims nchw = cp::packed_strides(d, Layout::NCHW), nhwc = cp::packed_strides(d, Layout::NHWC);
  EXPECT_FALSE(cp::needs_copy(d, nchw, 256, Layout::NCHW));
  EXPECT_TRUE(cp::needs_copy(d, nchw, 256, Layout::NHWC));
  EXPECT_FALSE(cp::needs_copy(d, nhwc, 256, Layout::NHWC));
  EXPECT_TRUE(cp::needs_copy(d, nhwc, 256, Layout::NCHW));
  EXPECT_TRUE(cp::needs_copy(d, nhwc, 256 + 4, Layout::NHWC));  // a float32 view one element in
  EXPECT_FALSE(cp::needs_copy(d, nhwc, 256 + 16, Layout::NHWC));
  // A depthwise weight [C, 1, kH, kW] and a 1x1 weight are both layouts at once: never copied.
  const cp::Dims dw{8, 1, 3, 3}, pw{16, 8, 1, 1};
  EXPECT_FALSE(cp::needs_copy(dw, cp::packed_strides(dw, Layout::NCHW), 0, Layout::NHWC));
  EXPECT_FALSE(cp::needs_copy(pw, cp::packed_strides(pw, Layout::NCHW), 0, Layout::NHWC));
}

TEST(CudnnHost, LayoutAndMathTypePerDtype) {
  for (ScalarType t : {kFloat32, kFloat16, kBFloat16}) EXPECT_EQ(cp::preferred_layout(t), Layout::NHWC) << t;
  EXPECT_EQ(cp::preferred_layout(kFloat64), Layout::NCHW);

  EXPECT_EQ(cp::base_math(kFloat32, true), Math::Default);  // TF32 allowed
  EXPECT_EQ(cp::base_math(kFloat32, false), Math::Fma);     // TF32 forbidden
  EXPECT_EQ(cp::base_math(kFloat16, false), Math::TensorOp);
  EXPECT_EQ(cp::base_math(kBFloat16, true), Math::TensorOp);
  EXPECT_EQ(cp::base_math(kFloat64, true), Math::Default);

  // float32 without TF32 never runs with another math type, whatever cuDNN reports.
  for (Math m : {Math::Default, Math::TensorOp, Math::TensorOpAllowConversion, Math::Fma})
    EXPECT_EQ(cp::candidate_math(kFloat32, false, m), Math::Fma);
  // float32 with TF32 is never converted down to half.
  EXPECT_EQ(cp::candidate_math(kFloat32, true, Math::TensorOpAllowConversion), Math::Default);
  EXPECT_EQ(cp::candidate_math(kFloat32, true, Math::TensorOp), Math::TensorOp);
  EXPECT_EQ(cp::candidate_math(kFloat16, false, Math::Default), Math::Default);
  EXPECT_EQ(cp::candidate_math(kBFloat16, true, Math::TensorOpAllowConversion), Math::TensorOpAllowConversion);

  EXPECT_EQ(cp::math_from(3), Math::Fma);
  EXPECT_EQ(cp::math_from(7), Math::Default);
  EXPECT_EQ(cp::math_from(-1), Math::Default);
}

// Each size, attribute and setting changed alone gives a key of its own.
TEST(CudnnHost, PlanKeysDifferInEveryField) {
  struct Call {
    cp::Kind kind = cp::Kind::Forward;
    int device = 0;
    ScalarType dtype = kFloat32;
    Math math = Math::Default;
    bool benchmark = false;
    bool deterministic = true;
    cp::Geometry g{2, 8, 10, 10, 16, 8, 3, 3, 10, 10};
    backend::ConvAttrs a{};
    cp::PlanKey key() const { return cp::plan_key(kind, device, dtype, math, benchmark, deterministic, g, a); }
  };
  Call base;
  base.a.padding[0] = base.a.padding[1] = 1;
  std::vector<Call> calls(1, base);
  auto vary = [&](auto&& change) {
    Call c = base;
    change(c);
    calls.push_back(c);
  };
  vary([](Call& c) { c.kind = cp::Kind::BackwardData; });
  vary([](Call& c) { c.kind = cp::Kind::BackwardFilter; });
  vary([](Call& c) { c.device = 1; });
  vary([](Call& c) { c.dtype = kFloat16; });
  vary([](Call& c) { c.dtype = kBFloat16; });
  vary([](Call& c) { c.dtype = kFloat64; });
  vary([](Call& c) { c.math = Math::Fma; });
  vary([](Call& c) { c.benchmark = true; });
  vary([](Call& c) { c.deterministic = false; });
  for (int64_t cp::Geometry::*f : {&cp::Geometry::n, &cp::Geometry::c_in, &cp::Geometry::h, &cp::Geometry::w,
                                    &cp::Geometry::c_out, &cp::Geometry::c_in_group, &cp::Geometry::kh,
                                    &cp::Geometry::kw, &cp::Geometry::oh, &cp::Geometry::ow})
    vary([f](Call& c) { c.g.*f += 1; });
  for (int i = 0; i < 2; ++i) {
    vary([i](Call& c) { c.a.stride[i] = 2; });
    vary([i](Call& c) { c.a.padding[i] = 2; });
    vary([i](Call& c) { c.a.dilation[i] = 2; });
  }
  vary([](Call& c) { c.a.groups = 2; });
  // Two calls whose tensors match in every size and which differ in padding and dilation only.
  vary([](Call& c) { c.a.padding[0] = c.a.padding[1] = 2, c.a.dilation[0] = c.a.dilation[1] = 2; });
  std::set<cp::PlanKey> keys;
  for (const Call& c : calls) keys.insert(c.key());
  EXPECT_EQ(keys.size(), calls.size());
  EXPECT_EQ(base.key(), Call(base).key());
  // inference says nothing cuDNN sees: the same plan.
  Call inference = base;
  inference.a.inference = true;
  EXPECT_EQ(inference.key(), base.key());
}

TEST(CudnnHost, CandidatesKeepCudnnsOrderDeterministicFirst) {
  using R = cp::Ranked;
  const std::vector<R> ranked = {
      {7, true, false, Math::TensorOp},  // the fastest, but not deterministic: after the others
      {1, true, true, Math::TensorOp},
      {2, false, true, Math::TensorOp},  // refused by cuDNN
      {1, true, true, Math::TensorOp},   // listed twice
      {1, true, true, Math::Fma},        // the same algorithm with another math type is another choice
      {3, true, true, Math::Default},    // its workspace is too large
      {4, true, true, Math::Default},    // the workspace query refuses it
      {5, true, true, Math::Default},
  };
  std::vector<std::pair<int, Math>> asked;
  auto workspace = [&](int algo, Math m) -> std::optional<size_t> {
    asked.push_back({algo, m});
    if (algo == 4) return std::nullopt;
    return algo == 3 ? size_t{2000} : size_t(algo) * 10;
  };
  const std::vector<cp::Candidate> got = cp::select_candidates(ranked, kFloat16, true, true, 1000, workspace);
  const std::vector<cp::Candidate> want = {
      {1, Math::TensorOp, 10}, {1, Math::Fma, 10}, {5, Math::Default, 50}, {7, Math::TensorOp, 70}};
  EXPECT_EQ(got, want);
  // Refused and repeated entries are not even asked about.
  EXPECT_EQ(asked.size(), 6u);

  // Nondeterministic algorithms allowed (kiln::cudnn::set_deterministic(false)): cuDNN's order.
  const std::vector<cp::Candidate> any = cp::select_candidates(ranked, kFloat16, true, false, 1000, workspace);
  const std::vector<cp::Candidate> want_any = {
      {7, Math::TensorOp, 70}, {1, Math::TensorOp, 10}, {1, Math::Fma, 10}, {5, Math::Default, 50}};
  EXPECT_EQ(any, want_any);

  // float32 without TF32: every candidate FMA-only, so the two math types of algorithm 1 are one.
  const std::vector<cp::Candidate> fma = cp::select_candidates(ranked, kFloat32, false, true, 1000, workspace);
  const std::vector<cp::Candidate> want_fma = {{1, Math::Fma, 10}, {5, Math::Fma, 50}, {7, Math::Fma, 70}};
  EXPECT_EQ(fma, want_fma);

  EXPECT_TRUE(cp::select_candidates({}, kFloat32, true, true, 1000, workspace).empty());
  EXPECT_TRUE(cp::select_candidates({{0, false, true, Math::Default}}, kFloat32, true, true, 1000, workspace).empty());
}

// After a run the plan starts at the candidate that ran, also when one before it was skipped for
// want of workspace memory (PyTorch's try_all): left first, it would ask for that memory on every
// call, each time a device sync and a flush of the allocator's cache.
TEST(CudnnHost, ThePlanKeptAfterARunStartsAtTheCandidateThatRan) {
  for (const bool cached : {false, true}) {
    SCOPED_TRACE(cached ? "a kept plan" : "a fresh plan");
    EXPECT_EQ(cp::kept_from({2, true}, cached), std::optional<size_t>(2));  // 0 and 1 lacked memory
    EXPECT_EQ(cp::kept_from({2, false}, cached), std::optional<size_t>(2));  // 0 and 1 were refused
    EXPECT_EQ(cp::kept_from({-1, true}, cached), std::nullopt);              // none ran: nothing kept
    EXPECT_EQ(cp::kept_from({-1, false}, cached), std::nullopt);
  }
  EXPECT_EQ(cp::kept_from({0, false}, false), std::optional<size_t>(0));
  EXPECT_EQ(cp::kept_from({0, false}, true), std::nullopt);  // a kept plan whose first ran stays
}

// The graph API's engines under the legacy path's rules: float32 takes TF32 engines only when
// allowed; no type has its inputs converted down; 16-bit types never sum in 16 bits; deterministic
// first.
TEST(CudnnHost, GraphEnginesFollowTheLegacyRulesDeterministicFirst) {
  const cp::EngineNotes plain{}, tf32{.tensor_core = true}, down{.tensor_core = true, .down_convert = true},
      half_sum{.tensor_core = true, .reduced_precision_reduction = true}, racy{.nondeterministic = true},
      racy_tc{.tensor_core = true, .nondeterministic = true};
  EXPECT_TRUE(cp::engine_allowed(kFloat32, false, plain));
  EXPECT_FALSE(cp::engine_allowed(kFloat32, false, tf32));
  EXPECT_TRUE(cp::engine_allowed(kFloat32, true, tf32));
  EXPECT_FALSE(cp::engine_allowed(kFloat32, true, down));
  for (ScalarType t : {kFloat16, kBFloat16}) {
    EXPECT_TRUE(cp::engine_allowed(t, false, tf32));
    EXPECT_FALSE(cp::engine_allowed(t, false, down));
    EXPECT_FALSE(cp::engine_allowed(t, true, half_sum));
  }
  const std::vector<cp::EngineNotes> ranked{racy, tf32, down, plain, racy_tc, half_sum};
  EXPECT_EQ(cp::engine_order(kFloat32, true, true, ranked), (std::vector<size_t>{1, 3, 5, 0, 4}));
  EXPECT_EQ(cp::engine_order(kFloat32, false, true, ranked), (std::vector<size_t>{3, 0}));
  EXPECT_EQ(cp::engine_order(kBFloat16, false, true, ranked), (std::vector<size_t>{1, 3, 0, 4}));
  EXPECT_TRUE(cp::engine_order(kFloat32, false, true, {tf32, down}).empty());
  // Nondeterministic engines allowed: cuDNN's order among the allowed ones.
  EXPECT_EQ(cp::engine_order(kFloat32, true, false, ranked), (std::vector<size_t>{0, 1, 3, 4, 5}));
  EXPECT_EQ(cp::engine_order(kFloat32, false, false, ranked), (std::vector<size_t>{0, 3}));
}

TEST(CudnnHost, LegacyApiLimitsAreIntRange) {
  EXPECT_TRUE(cp::fits_int(0));
  EXPECT_TRUE(cp::fits_int(int64_t{1} << 30));
  EXPECT_TRUE(cp::fits_int(INT_MAX));
  EXPECT_FALSE(cp::fits_int(int64_t{INT_MAX} + 1));
  EXPECT_FALSE(cp::fits_int(-1));
  backend::ConvAttrs a;
  EXPECT_TRUE(cp::attrs_fit(a));
  a.dilation[1] = int64_t{1} << 40;
  EXPECT_FALSE(cp::attrs_fit(a));
  a = {};
  a.groups = int64_t{1} << 33;
  EXPECT_FALSE(cp::attrs_fit(a));
}

}  // namespace
}  // namespace kiln::test
