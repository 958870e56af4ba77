// gradcheck (backward against central finite differences in float64) for every differentiable op.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "test_util.h"

namespace {

using namespace kiln;
using Vec = std::vector<double>;
using Inputs = std::vector<Tensor>;
using V = const Inputs&;
constexpr double inf = std::numeric_limits<double>::infinity();

std::mt19937_64& rng() {
  static std::mt19937_64 g(7);
  return g;
}

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// A float64 leaf that requires grad, with the given values.
Tensor leaf(const Vec& v, const Shape& shape) {
  return tensor(v, shape, kFloat64).requires_grad_();
}

// Uniform in [lo, hi], keeping at least `gap` away from each point in `avoid` (kinks, bounds).
Tensor U(const Shape& shape, double lo = -1, double hi = 1, const Vec& avoid = {}, double gap = 0.05) {
  Vec v(static_cast<size_t>(numel_of(shape)));
  for (double& x : v) {
    do {
      x = std::uniform_real_distribution<double>(lo, hi)(rng());
    } while (std::any_of(avoid.begin(), avoid.end(), [&](double a) { return std::abs(x - a) < gap; }));
  }
  return leaf(v, shape);
}
Tensor positive(const Shape& shape) { return U(shape, 0.5, 2.0); }
Tensor away_from_zero(const Shape& shape) { return U(shape, -1.5, 1.5, {0.0}, 0.25); }
// Distinct values (and distinct absolute values) 0.17 apart, in random order: no ties for max/min.
Tensor distinct(const Shape& shape, double offset = 0) {
  Vec v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = offset + 0.17 * static_cast<double>(i) - 0.4;
  std::shuffle(v.begin(), v.end(), rng());
  return leaf(v, shape);
}
// A 2-D leaf whose memory is transposed (strides [1, rows]).
Tensor noncontig(const Shape& shape, double lo = -1, double hi = 1) {
  Tensor base = U({shape[1], shape[0]}, lo, hi).detach();
  return base.t().detach().requires_grad_();
}
Tensor idx(const std::vector<int64_t>& v, const Shape& shape) { return tensor(v, shape, kInt64); }
Tensor mask(const std::vector<bool>& v, const Shape& shape) { return tensor(v, shape, kBool); }

struct GradRow {
  std::string name;
  std::function<Inputs()> inputs;
  std::function<Tensor(V)> fn;
  autograd::GradcheckOptions options = {};
};
void PrintTo(const GradRow& r, std::ostream* os) { *os << r.name; }

// An in-place op applied to a non-leaf copy of x[0] (in-place changes to leaves that require grad
// are refused).
template <class F>
std::function<Tensor(V)> inplace(F f) {
  return [f](V x) {
    Tensor y = x[0] * 1.0;
    f(y, x);
    return y;
  };
}

std::vector<GradRow> rows() {
  auto in = [](auto... t) { return [=] { return Inputs{t()...}; }; };
  auto u = [](Shape s) { return [s] { return U(s); }; };
  auto pos = [](Shape s) { return [s] { return positive(s); }; };
  auto nz = [](Shape s) { return [s] { return away_from_zero(s); }; };
  auto dist = [](Shape s) { return [s] { return distinct(s); }; };
  auto nc = [](Shape s) { return [s] { return noncontig(s); }; };
  auto vals = [](Vec v, Shape s) { return [v, s] { return leaf(v, s); }; };
  auto constant = [](Vec v, Shape s) { return [v, s] { return tensor(v, s, kFloat64); }; };
  return {
      // ---- two operands, broadcasting, scalars on either side
      {"add", in(u({2, 3}), u({2, 3})), [](V x) { return add(x[0], x[1]); }},
      {"add_broadcast", in(u({3, 1, 2}), u({2, 2})), [](V x) { return x[0] + x[1]; }},
      {"add_0d", in(u({}), u({2, 3})), [](V x) { return add(x[0], x[1]); }},
      {"add_noncontig", in(nc({2, 3}), u({3})), [](V x) { return x[0] + x[1]; }},
      {"add_scalar", in(u({2, 3})), [](V x) { return add(x[0], 2.5); }},
      {"scalar_add", in(u({2, 3})), [](V x) { return 2.5 + x[0]; }},
      {"add_constant_operand", in(u({2, 3}), constant({1, 2, 3}, {3})), [](V x) { return x[0] + x[1]; }},
      {"sub", in(u({2, 3}), u({2, 3})), [](V x) { return sub(x[0], x[1]); }},
      {"sub_broadcast", in(u({2, 1}), u({1, 3})), [](V x) { return x[0] - x[1]; }},
      {"sub_scalar", in(u({3})), [](V x) { return x[0] - 1; }},
      {"scalar_sub", in(u({2, 3})), [](V x) { return sub(2.0, x[0]); }},
      {"mul", in(u({2, 3}), u({2, 3})), [](V x) { return mul(x[0], x[1]); }},
      {"mul_broadcast", in(u({2, 1, 3}), u({2, 1})), [](V x) { return x[0] * x[1]; }},
      {"mul_same_tensor", in(u({2, 3})), [](V x) { return x[0] * x[0]; }},
      {"mul_scalar", in(u({2, 3})), [](V x) { return x[0] * -1.5; }},
      {"scalar_mul", in(u({2, 3})), [](V x) { return mul(3, x[0]); }},
      {"div", in(u({2, 3}), nz({2, 3})), [](V x) { return div(x[0], x[1]); }},
      {"div_broadcast", in(u({3, 1}), nz({2})), [](V x) { return x[0] / x[1]; }},
      {"div_scalar", in(u({2, 3})), [](V x) { return x[0] / 4.0; }},
      {"scalar_div", in(nz({2, 3})), [](V x) { return div(3.0, x[0]); }},
      // a / b at least 0.14 from an integer: no jump within the finite differences' step
      {"remainder", in(vals({0.3, 1.4, -0.6, 2.2, -1.8, 0.75}, {2, 3}), vals({0.7, 1.1, -0.9}, {3})),
       [](V x) { return remainder(x[0], x[1]); }},
      {"fmod", in(vals({0.3, 1.4, -0.6, 2.2, -1.8, 0.75}, {2, 3}), vals({0.7, -1.1, 0.9}, {3})),
       [](V x) { return x[0].fmod(x[1]); }},
      {"remainder_scalar", in(vals({0.3, 1.3, -0.6}, {3})), [](V x) { return x[0] % 0.7; }},
      {"atan2", in(u({2, 3}), nz({2, 3})), [](V x) { return atan2(x[0], x[1]); }},
      {"atan2_broadcast", in(nz({3, 1}), u({2})), [](V x) { return x[0].atan2(x[1]); }},
      {"einsum_bmm", in(u({2, 3, 4}), u({2, 4, 2})), [](V x) { return einsum("bij,bjk->bik", {x[0], x[1]}); }},
      {"einsum_three", in(u({2, 3}), u({3, 4}), u({4, 2})), [](V x) { return einsum("ij,jk,kl", {x[0], x[1], x[2]}); }},
      {"einsum_diagonal", in(u({2, 3, 3})), [](V x) { return einsum("bii->bi", {x[0]}); }},
      {"einsum_broadcast", in(u({2, 1, 3, 2}), u({4, 2, 3})), [](V x) { return einsum("...ij,...jk", {x[0], x[1]}); }},
      {"addmm", in(u({3}), u({2, 4}), u({4, 3})), [](V x) { return addmm(x[0], x[1], x[2], 0.5, -2); }},
      {"masked_select_broadcast", in(u({2, 3})),
       [](V x) { return masked_select(x[0], mask({true, false, true}, {3})); }},
      {"baddbmm", in(u({2, 1, 3}), u({2, 2, 4}), u({2, 4, 3})), [](V x) { return x[0].baddbmm(x[1], x[2]); }},
      {"pow", in(pos({2, 3}), u({2, 3})), [](V x) { return pow(x[0], x[1]); }},
      {"pow_broadcast", in(pos({2, 3}), u({3})), [](V x) { return x[0].pow(x[1]); }},
      {"pow_zero_base", in(vals({0.0, 0.0, 0.7}, {3}), vals({2.0, 3.0, 1.5}, {3})),
       [](V x) { return pow(x[0], x[1]); }},
      {"pow_float_scalar", in(pos({2, 3})), [](V x) { return pow(x[0], 2.5); }},
      {"pow_int_scalar", in(u({2, 3})), [](V x) { return x[0].pow(3); }},
      {"pow_zero_exponent", in(u({2, 3})), [](V x) { return pow(x[0], 0); }},
      {"scalar_pow", in(u({2, 3})), [](V x) { return pow(2.0, x[0]); }},
      {"maximum", in(vals({0.1, -0.5, 0.9, 0.7, 0.3, -0.2}, {2, 3}), vals({0.4, 0.0, 0.5}, {3})),
       [](V x) { return maximum(x[0], x[1]); }},
      {"minimum", in(vals({0.1, -0.5, 0.9, 0.7, 0.3, -0.2}, {2, 3}), vals({0.4, 0.0, 0.5}, {3})),
       [](V x) { return x[0].minimum(x[1]); }},
      // at a tie the gradient is split evenly, which is what central differences see too
      {"maximum_ties", in(vals({0.5, -1, 2}, {3}), vals({0.5, 1, 2}, {3})), [](V x) { return maximum(x[0], x[1]); }},
      {"minimum_ties", in(vals({0.5, -1, 2}, {3}), vals({0.5, 1, 2}, {3})), [](V x) { return minimum(x[0], x[1]); }},
      {"maximum_scalar", in(vals({0.1, -0.5, 0.9}, {3})), [](V x) { return maximum(x[0], 0.25); }},

      // ---- one operand
      {"neg", in(u({2, 3})), [](V x) { return neg(x[0]); }},
      {"neg_operator", in(nc({2, 3})), [](V x) { return -x[0]; }},
      {"abs", in(nz({2, 3})), [](V x) { return abs(x[0]); }},
      {"sign", in(nz({2, 3})), [](V x) { return sign(x[0]) * x[0]; }},
      {"exp", in(u({2, 3})), [](V x) { return exp(x[0]); }},
      {"exp_noncontig", in(nc({3, 2})), [](V x) { return x[0].exp(); }},
      {"log", in(pos({2, 3})), [](V x) { return log(x[0]); }},
      {"log1p", in([] { return U({2, 3}, -0.5, 1); }), [](V x) { return log1p(x[0]); }},
      {"expm1", in(u({2, 3})), [](V x) { return expm1(x[0]); }},
      {"sqrt", in(pos({2, 3})), [](V x) { return sqrt(x[0]); }},
      {"rsqrt", in(pos({2, 3})), [](V x) { return rsqrt(x[0]); }},
      {"square", in(u({2, 3})), [](V x) { return square(x[0]); }},
      {"reciprocal", in(nz({2, 3})), [](V x) { return reciprocal(x[0]); }},
      {"tanh", in(u({2, 3})), [](V x) { return tanh(x[0]); }},
      {"sigmoid", in(u({2, 3})), [](V x) { return sigmoid(x[0]); }},
      {"relu", in(nz({2, 3})), [](V x) { return relu(x[0]); }},
      {"gelu_none", in(u({2, 3})), [](V x) { return gelu(x[0]); }},
      {"gelu_tanh", in(u({2, 3})), [](V x) { return gelu(x[0], "tanh"); }},
      {"silu", in(u({2, 3})), [](V x) { return silu(x[0]); }},
      {"sin", in(u({2, 3})), [](V x) { return sin(x[0]); }},
      {"erf", in(u({2, 3})), [](V x) { return erf(x[0] * 2); }},
      {"log2", in(pos({2, 3})), [](V x) { return log2(x[0]); }},
      {"log10", in(pos({2, 3})), [](V x) { return x[0].log10(); }},
      {"exp2", in(u({2, 3})), [](V x) { return exp2(x[0]); }},
      {"floor_and_round", in([] { return U({2, 3}, -2, 2, {-1.5, -1, -0.5, 0, 0.5, 1, 1.5}); }),
       [](V x) { return floor(x[0]) * x[0] + round(x[0]) * x[0] + x[0].ceil() + trunc(x[0]) * 3; }},
      {"cos", in(u({2, 3})), [](V x) { return cos(x[0]); }},
      {"unary_0d", in(u({})), [](V x) { return sigmoid(exp(x[0])); }},
      {"clamp", in([] { return U({2, 4}, -1, 1, {-0.5, 0.5}); }), [](V x) { return clamp(x[0], -0.5, 0.5); }},
      {"clamp_min", in([] { return U({2, 4}, -1, 1, {0.2}); }), [](V x) { return clamp_min(x[0], 0.2); }},
      {"clamp_max", in([] { return U({2, 4}, -1, 1, {-0.2}); }), [](V x) { return x[0].clamp(std::nullopt, -0.2); }},
      {"where", in(u({2, 3}), u({})), [](V x) { return where(mask({true, false, true}, {3}), x[0], x[1]); }},
      {"where_broadcast_both", in(u({2, 1}), u({3})),
       [](V x) { return where(mask({true, false, false, true, true, false}, {2, 3}), x[0], x[1]); }},
      {"where_scalar", in(u({2, 3})), [](V x) { return where(mask({false, true, true}, {3}), x[0], 0.5); }},
      {"scalar_where", in(u({2, 3})), [](V x) { return where(mask({false, true, true}, {3}), -1, x[0]); }},
      {"masked_fill", in(u({2, 3})), [](V x) { return masked_fill(x[0], mask({true, false}, {2, 1}), 2.0); }},
      {"addcmul", in(u({2, 3}), u({2, 3}), u({2, 3})), [](V x) { return addcmul(x[0], x[1], x[2], 0.7); }},
      {"addcmul_broadcast", in(u({3}), u({2, 1}), u({2, 3})), [](V x) { return addcmul(x[0], x[1], x[2], -2); }},
      {"addcmul_same_tensor", in(u({2, 3}), u({3})), [](V x) { return x[0].addcmul(x[1], x[1]); }},
      {"addcdiv", in(u({2, 3}), u({2, 3}), nz({2, 3})), [](V x) { return addcdiv(x[0], x[1], x[2], 0.7); }},
      {"addcdiv_broadcast", in(u({2, 1}), u({3}), nz({2, 3})), [](V x) { return x[0].addcdiv(x[1], x[2], -1.5); }},
      {"add_alpha", in(u({2, 3}), u({3})), [](V x) { return add(x[0], x[1], -0.25); }},
      {"sub_alpha", in(u({2, 1}), u({2, 3})), [](V x) { return x[0].sub(x[1], 3); }},
      {"lerp_small_weight", in(u({2, 3}), u({3})), [](V x) { return lerp(x[0], x[1], 0.3); }},
      {"lerp_large_weight", in(u({2, 3}), u({2, 3})), [](V x) { return x[0].lerp(x[1], 0.8); }},
      {"lerp_tensor_weight", in(u({2, 3}), u({2, 3}), u({2, 3})), [](V x) { return lerp(x[0], x[1], x[2]); }},
      {"lerp_tensor_weight_broadcast", in(u({3}), nc({2, 3}), [] { return U({2, 1}, -1, 2); }),
       [](V x) { return lerp(x[0], x[1], x[2]); }},

      // ---- reductions
      {"sum", in(u({2, 3})), [](V x) { return x[0].sum(); }},
      {"sum_dims", in(u({2, 3, 2})), [](V x) { return sum(x[0], {0, 2}); }},
      {"sum_keepdim", in(u({2, 3, 2})), [](V x) { return sum(x[0], {1}, true); }},
      {"sum_0d", in(u({})), [](V x) { return sum(x[0], {0}); }},
      {"mean", in(u({2, 3})), [](V x) { return x[0].mean(); }},
      {"mean_dims", in(u({2, 3, 2})), [](V x) { return mean(x[0], {-1, 0}, true); }},
      {"var_correction1", in(u({2, 4})), [](V x) { return var(x[0], {1}); }},
      {"var_correction0", in(u({2, 4})), [](V x) { return var(x[0], {}, 0); }},
      {"var_keepdim", in(u({3, 2, 2})), [](V x) { return x[0].var({0, 2}, 1, true); }},
      {"std_correction1", in(u({2, 4})), [](V x) { return kiln::std(x[0], {0}); }},
      {"std_correction0", in(u({2, 4})), [](V x) { return x[0].std({1}, 0, true); }},
      {"prod", in([] { return U({2, 3}, 0.5, 1.5); }), [](V x) { return x[0].prod(); }},
      {"prod_dim", in(u({2, 3})), [](V x) { return x[0].prod(1); }},
      {"prod_one_zero", in(vals({0.5, 0.0, -1.5, 2.0}, {4})), [](V x) { return prod(x[0]); }},
      {"prod_zeros_by_dim", in(vals({0.5, 0.0, -1.5, 0.0, 0.0, 2.0, 3.0, 1.2, 0.7}, {3, 3})),
       [](V x) { return prod(x[0], {1}, true); }},
      // Groups (over dims 0 and 2) holding two, three and one zeros.
      {"prod_zeros_over_two_dims",
       in(vals({0.0, 0.5, 0.0, 0.0, 1.5, -0.5, 0.0, 2.0, 0.0, 1.1, 0.8, 0.0}, {2, 3, 2})),
       [](V x) { return prod(x[0], {0, 2}); }},
      {"prod_zeros_long_group", in(vals({1.1, 0.0, -0.9, 1.3, 0.0, 0.8, -1.2, 0.0, 1.05}, {9})),
       [](V x) { return prod(x[0]); }},
      {"amax", in(dist({2, 3, 2})), [](V x) { return amax(x[0], {0, 2}); }},
      {"amin", in(dist({2, 3})), [](V x) { return x[0].amin({1}, true); }},
      {"amax_tie", in(vals({1.0, 3.0, 3.0, -2.0}, {4})), [](V x) { return amax(x[0]); }},
      {"max_all", in(dist({2, 3})), [](V x) { return max(x[0]); }},
      {"min_all", in(dist({2, 3})), [](V x) { return x[0].min(); }},
      {"max_dim", in(dist({2, 3, 2})), [](V x) { return std::get<0>(max(x[0], 1)); }},
      {"min_dim_keepdim", in(dist({2, 3})), [](V x) { return std::get<0>(x[0].min(0, true)); }},
      {"max_dim_noncontig", in([] { return distinct({3, 2}).t().detach().requires_grad_(); }),
       [](V x) { return std::get<0>(max(x[0], -1)); }},
      {"sort", in(dist({3, 4})), [](V x) { return std::get<0>(sort(x[0])); }},
      {"sort_dim0_descending", in(dist({3, 2, 2})), [](V x) { return std::get<0>(x[0].sort(0, true)); }},
      {"sort_noncontig", in([] { return distinct({3, 2}).t().detach().requires_grad_(); }),
       [](V x) { return std::get<0>(sort(x[0], 0)); }},
      {"topk", in(dist({2, 5})), [](V x) { return std::get<0>(topk(x[0], 3)); }},
      {"topk_smallest_dim0", in(dist({4, 3})), [](V x) { return std::get<0>(x[0].topk(2, 0, false)); }},
      {"leaky_relu", in(nz({2, 3})), [](V x) { return leaky_relu(x[0], 0.2) * x[0]; }},
      {"elu", in(nz({2, 3})), [](V x) { return elu(x[0], 0.7) * x[0]; }},
      {"softplus", in([] { return U({2, 3}, -2, 2, {1.5}, 0.1); }), [](V x) { return softplus(x[0], 2.0, 3.0); }},
      {"hardtanh", in([] { return U({2, 3}, -1.5, 1.5, {-0.5, 0.6}, 0.1); }), [](V x) { return hardtanh(x[0], -0.5, 0.6) * x[0]; }},
      {"kthvalue", in(dist({3, 4})), [](V x) { return std::get<0>(kthvalue(x[0], 2)); }},
      {"median_dim_keepdim", in(dist({4, 3})), [](V x) { return std::get<0>(x[0].median(0, true)); }},
      {"median_all", in(dist({2, 3})), [](V x) { return median(x[0]); }},
      {"nanmedian_dim", in(dist({3, 5})), [](V x) { return std::get<0>(nanmedian(x[0], 1)); }},
      {"cumsum", in(u({3, 4})), [](V x) { return cumsum(x[0], 1); }},
      {"cumsum_dim0_noncontig", in(nc({3, 2})), [](V x) { return x[0].cumsum(0) * x[0]; }},
      {"cumsum_0d", in(u({})), [](V x) { return cumsum(x[0], 0); }},
      {"logsumexp", in(u({2, 3})), [](V x) { return logsumexp(x[0], {1}); }},
      {"logsumexp_all_keepdim", in(u({2, 3})), [](V x) { return x[0].logsumexp({}, true); }},
      {"norm_p1", in(nz({2, 3})), [](V x) { return norm(x[0], 1); }},
      {"norm_p2", in(u({2, 3})), [](V x) { return x[0].norm(); }},
      {"norm_p3", in(nz({2, 3})), [](V x) { return norm(x[0], 3); }},
      {"norm_pinf", in(dist({2, 3})), [](V x) { return norm(x[0], inf); }},
      {"norm_p2_dims", in(u({2, 3})), [](V x) { return norm(x[0], 2, {1}, true); }},
      {"norm_p3_dims", in(nz({2, 3})), [](V x) { return norm(x[0], 3, {0}); }},
      {"norm_pinf_dims", in(dist({2, 3})), [](V x) { return norm(x[0], inf, {1}); }},
      {"norm_p2_zero_group", in(vals({0, 0, 0.5, -1}, {2, 2})), [](V x) { return norm(x[0], 2, {1}); }},

      // ---- softmax
      {"softmax_dim0", in(u({2, 3})), [](V x) { return softmax(x[0], 0); }},
      {"softmax_dim1", in(u({2, 3})), [](V x) { return x[0].softmax(1); }},
      {"softmax_3d_middle", in(u({2, 3, 2})), [](V x) { return softmax(x[0], -2); }},
      {"softmax_noncontig", in(nc({3, 2})), [](V x) { return softmax(x[0], -1); }},
      {"log_softmax_dim0", in(u({2, 3})), [](V x) { return log_softmax(x[0], 0); }},
      {"log_softmax_dim1", in(u({2, 3})), [](V x) { return x[0].log_softmax(-1); }},
      {"log_softmax_3d", in(u({2, 2, 3})), [](V x) { return log_softmax(x[0], 1); }},

      // ---- matmul
      {"matmul_dot", in(u({3}), u({3})), [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_2d", in(u({2, 3}), u({3, 2})), [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_vec_mat", in(u({3}), u({3, 2})), [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_mat_vec", in(u({2, 3}), u({3})), [](V x) { return x[0].matmul(x[1]); }},
      {"matmul_batched_broadcast", in(u({2, 1, 2, 3}), u({2, 3, 2})), [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_bmm", in(u({2, 2, 3}), u({2, 3, 2})), [](V x) { return bmm(x[0], x[1]); }},
      {"matmul_linear", in(u({2, 2, 3}), u({3, 2})), [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_mat_batched", in(u({2, 3}), u({2, 3, 2})), [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_vec_batched", in(u({3}), u({2, 3, 2})), [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_batched_vec", in(u({2, 2, 3}), u({3})), [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_transposed", in(u({3, 2}), u({2, 3})), [](V x) { return matmul(x[0].t(), x[1].t()); }},
      {"matmul_noncontig_leaves", in(nc({2, 3}), nc({3, 2})), [](V x) { return mm(x[0], x[1]); }},
      {"matmul_linear_transposed", in(u({2, 3, 2}), u({2, 3})),
       [](V x) { return matmul(x[0].transpose(-1, -2), x[1].t()); }},
      {"matmul_k0", in(u({2, 0}), u({0, 3})), [](V x) { return matmul(x[0], x[1]) + 1.0; }},
      {"matmul_one_side", in(u({2, 3}), constant({1, 2, 3, 4, 5, 6}, {3, 2})), [](V x) { return matmul(x[0], x[1]); }},

      // ---- joining and splitting
      {"cat_dim0", in(u({1, 3}), u({2, 3})), [](V x) { return cat({x[0], x[1]}, 0); }},
      {"cat_dim1", in(u({2, 1}), nc({2, 2})), [](V x) { return cat({x[0], x[1] * 2.0}, -1); }},
      {"cat_with_constant", in(u({2}), constant({5, 6}, {2}), u({1})), [](V x) { return cat({x[0], x[1], x[2]}); }},
      {"cat_same_tensor", in(u({2})), [](V x) { return cat({x[0], x[0] * 3.0}); }},
      {"stack_dim0", in(u({2, 3}), u({2, 3})), [](V x) { return stack({x[0], x[1]}); }},
      {"flip", in(u({2, 3, 2})), [](V x) { return flip(x[0], {0, -1}); }},
      {"flip_noncontig", in(nc({2, 3})), [](V x) { return x[0].flip({1}) * x[0]; }},
      {"roll", in(u({3, 4})), [](V x) { return roll(x[0], {1, -5}, {0, 1}); }},
      {"roll_flattened", in(u({2, 3})), [](V x) { return x[0].roll({4}); }},
      {"repeat", in(u({2, 3})), [](V x) { return repeat(x[0], {2, 1, 3}); }},
      {"repeat_noncontig", in(nc({2, 3})), [](V x) { return x[0].repeat({3, 2}); }},
      {"stack_dim1", in(u({2, 3}), u({2, 3})), [](V x) { return stack({x[0], x[1] * x[1]}, 1); }},
      {"stack_last", in(u({2, 3}), nc({2, 3})), [](V x) { return stack({x[0], x[1]}, -1); }},
      {"split", in(u({5, 2})),
       [](V x) {
         auto p = split(x[0], 2);
         return cat({p[0] * 1.0, p[1] * 2.0, p[2] * 3.0});
       }},
      {"split_sizes", in(u({2, 5})),
       [](V x) {
         auto p = split(x[0], std::vector<int64_t>{1, 3, 1}, 1);
         return p[1].exp() + p[2];
       }},
      {"chunk", in(u({2, 7})),
       [](V x) {
         auto p = x[0].chunk(3, -1);
         return cat({p[2], p[0] * p[1]}, 1);
       }},

      // ---- indexing
      {"index_select", in(u({4, 2})), [](V x) { return index_select(x[0], 0, idx({2, 0, 2}, {3})); }},
      {"index_select_dim1", in(u({2, 4})), [](V x) { return x[0].index_select(1, idx({3, 3, 1}, {3}).to(kInt32)); }},
      {"gather", in(u({3, 4})), [](V x) { return gather(x[0], 1, idx({0, 0, 3, 2, 1, 1}, {3, 2})); }},
      {"gather_dim0", in(u({3, 2})), [](V x) { return gather(x[0], 0, idx({2, 2, 0, 1}, {2, 2})); }},
      {"scatter_add", in(u({3, 4}), u({3, 2})),
       [](V x) { return scatter_add(x[0], 1, idx({0, 0, 3, 2, 1, 1}, {3, 2}), x[1]); }},
      {"scatter_add_larger_src", in(u({2, 3}), u({3, 4})),
       [](V x) { return x[0].scatter_add(0, idx({1, 0, 1, 1}, {2, 2}), x[1]); }},
      {"tril", in(u({3, 4})), [](V x) { return tril(x[0]); }},
      {"tril_minus1", in(u({3, 4})), [](V x) { return x[0].tril(-1); }},
      {"tril_plus1_batched", in(u({2, 3, 3})), [](V x) { return tril(x[0], 1); }},
      {"triu", in(u({3, 4})), [](V x) { return triu(x[0]); }},
      {"triu_minus1", in(nc({3, 3})), [](V x) { return triu(x[0], -1); }},
      {"triu_plus1", in(u({4, 3})), [](V x) { return x[0].triu(1); }},

      // ---- views, and gradients flowing through non-contiguous views and broadcasting
      {"view", in(u({2, 3})), [](V x) { return x[0].view({3, 2}) * 2.0; }},
      {"view_infer", in(u({2, 3})), [](V x) { return x[0].view({-1}).exp(); }},
      {"reshape", in(u({2, 3})), [](V x) { return x[0].reshape({3, 1, 2}) * 2.0; }},
      {"reshape_noncontig", in(u({2, 3})), [](V x) { return x[0].t().reshape({-1}) * x[0].reshape({6}); }},
      {"permute", in(u({2, 3, 2})), [](V x) { return x[0].permute({2, 0, 1}).exp(); }},
      {"transpose", in(u({2, 3, 2})), [](V x) { return x[0].transpose(0, 1) * 3.0; }},
      {"t", in(u({2, 3})), [](V x) { return x[0].t().sin(); }},
      {"slice_step", in(u({3, 5})), [](V x) { return x[0].slice(1, 0, std::nullopt, 2).exp(); }},
      {"slice_negative", in(u({5})), [](V x) { return x[0].slice(0, -3, -1) * 2.0; }},
      {"select", in(u({3, 4})), [](V x) { return x[0].select(1, 2) * x[0].select(0, -1).narrow(0, 1, 3); }},
      {"narrow", in(u({3, 4})), [](V x) { return x[0].narrow(1, 1, 2).square(); }},
      {"index_operator", in(u({3, 2})), [](V x) { return x[0][1].exp(); }},
      {"expand", in(u({3, 1})), [](V x) { return x[0].expand({2, 3, 4}).sin(); }},
      {"expand_as", in(u({3}), u({2, 3})), [](V x) { return x[0].expand_as(x[1]) * x[1]; }},
      {"squeeze", in(u({2, 1, 3, 1})), [](V x) { return x[0].squeeze().exp(); }},
      {"squeeze_dim", in(u({2, 1, 3})), [](V x) { return squeeze(x[0], 1) * 2.0; }},
      {"unsqueeze", in(u({2, 3})), [](V x) { return x[0].unsqueeze(1).exp(); }},
      {"flatten", in(u({2, 3, 2})), [](V x) { return x[0].flatten(1) * 2.0; }},
      {"flatten_noncontig", in(u({2, 3, 2})), [](V x) { return x[0].transpose(0, 2).flatten().exp(); }},
      {"view_chain", in(u({4, 3}), u({2})),
       [](V x) { return x[0].t().slice(1, 1, std::nullopt, 2).unsqueeze(0).expand({2, 3, 2}) * x[1]; }},
      {"noncontig_broadcast", in(u({3, 2}), u({3}), u({2, 1})),
       [](V x) { return (x[0].t() * x[1] + x[2]).sum({0}); }},
      {"to_dtype_round_trip", in(u({2, 3})), [](V x) { return x[0].to(kFloat32).to(kFloat64) * x[0]; },
       {1e-3, 1e-4, 1e-3, true}},
      {"to_same_dtype", in(u({2, 3})), [](V x) { return x[0].to(kFloat64).exp(); }},
      {"clone", in(u({2, 3})), [](V x) { return x[0].clone() * x[0]; }},
      {"contiguous", in(u({2, 3})), [](V x) { return x[0].t().contiguous().exp(); }},

      // ---- in-place forms on non-leaf tensors
      {"add_", in(u({2, 3}), u({3})), inplace([](Tensor& y, V x) { y.add_(x[1]); })},
      {"add_scalar_", in(u({2, 3})), inplace([](Tensor& y, V) { y += 2.0; })},
      {"sub_", in(u({2, 3}), u({2, 3})), inplace([](Tensor& y, V x) { y -= x[1]; })},
      {"mul_", in(u({2, 3}), u({2, 1})), inplace([](Tensor& y, V x) { y.mul_(x[1]); })},
      {"mul_scalar_", in(u({2, 3})), inplace([](Tensor& y, V) { y *= -3; })},
      {"div_", in(u({2, 3}), nz({3})), inplace([](Tensor& y, V x) { y.div_(x[1]); })},
      {"div_scalar_", in(u({2, 3})), inplace([](Tensor& y, V) { y /= 4.0; })},
      {"clamp_", in([] { return U({2, 4}, -1, 1, {-0.5, 0.5}); }), inplace([](Tensor& y, V) { y.clamp_(-0.5, 0.5); })},
      {"add_alpha_", in(u({2, 3}), u({3})), inplace([](Tensor& y, V x) { y.add_(x[1], 0.5); })},
      {"sub_alpha_", in(u({2, 3}), u({2, 3})), inplace([](Tensor& y, V x) { y.sub_(x[1], -2); })},
      {"addcmul_", in(u({2, 3}), u({3}), u({2, 1})), inplace([](Tensor& y, V x) { y.addcmul_(x[1], x[2], 0.5); })},
      {"addcmul_self", in(u({2, 3}), u({3})), inplace([](Tensor& y, V x) { y.addcmul_(y, x[1], 2); })},
      {"addcdiv_", in(u({2, 3}), u({2, 3}), nz({3})), inplace([](Tensor& y, V x) { y.addcdiv_(x[1], x[2], -0.5); })},
      {"lerp_", in(u({2, 3}), u({3})), inplace([](Tensor& y, V x) { y.lerp_(x[1], 0.6); })},
      {"lerp_tensor_weight_", in(u({2, 3}), u({2, 3}), u({3})), inplace([](Tensor& y, V x) { y.lerp_(x[1], x[2]); })},
      {"lerp_end_a_view_of_self", in(u({2, 3}), u({2, 3})), inplace([](Tensor& y, V x) { y.lerp_(y[0], x[1]); })},
      {"relu_", in(nz({2, 3})), inplace([](Tensor& y, V) { y.relu_(); })},
      {"neg_", in(u({2, 3})), inplace([](Tensor& y, V) { y.neg_(); })},
      {"exp_", in(u({2, 3})), inplace([](Tensor& y, V) { y.exp_(); })},
      {"sqrt_", in(pos({2, 3})), inplace([](Tensor& y, V) { y.sqrt_(); })},
      {"masked_fill_", in(u({2, 3})),
       inplace([](Tensor& y, V) { y.masked_fill_(mask({false, true, true}, {3}), 0.5); })},
      {"copy_", in(u({2, 3}), u({3})), inplace([](Tensor& y, V x) { y.copy_(x[1] * 2.0); })},
      {"fill_", in(u({2, 3})), [](V x) {
         Tensor y = x[0] * 2.0;
         y.fill_(1.5);
         return y * x[0];
       }},
      {"zero_", in(u({2, 3})), [](V x) {
         Tensor y = x[0] + 1.0;
         y.zero_();
         return y + x[0];
       }},
      {"inplace_chain", in(u({2, 3}), u({3})), inplace([](Tensor& y, V x) {
         y.mul_(x[1]);
         y.add_(x[1]);
         y.exp_();
       })},
  };
}

class GradcheckOps : public ::testing::TestWithParam<GradRow> {};

TEST_P(GradcheckOps, MatchesFiniteDifferences) {
  const GradRow& row = GetParam();
  Inputs inputs = row.inputs();
  try {
    EXPECT_TRUE(autograd::gradcheck(row.fn, inputs, row.options));
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  // The gradients also come back in each input's shape and dtype, and the inputs are intact.
  std::vector<Tensor> wrt;
  std::vector<std::vector<double>> before;
  for (const Tensor& t : inputs)
    if (t.requires_grad()) {
      wrt.push_back(t);
      before.push_back(test::values(t));
    }
  Tensor y = row.fn(inputs);
  auto grads = autograd::grad({y}, wrt, {ones_like(y)}, false, /*allow_unused=*/true);
  ASSERT_EQ(grads.size(), wrt.size());
  for (size_t i = 0; i < wrt.size(); ++i) {
    if (!grads[i].defined()) continue;
    EXPECT_EQ(grads[i].shape(), wrt[i].shape()) << "input " << i;
    EXPECT_EQ(grads[i].dtype(), kFloat64) << "input " << i;
    test::expect_close(wrt[i], before[i], wrt[i].shape(), 0, 0, "input unchanged");
  }
}

INSTANTIATE_TEST_SUITE_P(Gradcheck, GradcheckOps, ::testing::ValuesIn(rows()),
                         [](const auto& info) { return info.param.name; });

// The same ops' second derivatives (backward with create_graph) against finite differences of
// their first: every op of the table has one, except at the rows' points where the first
// derivative itself jumps (ties, zeros of a norm, a zero base with its log), where finite
// differences mean nothing.
class GradgradcheckOps : public ::testing::TestWithParam<GradRow> {};

TEST_P(GradgradcheckOps, MatchesFiniteDifferences) {
  const GradRow& row = GetParam();
  for (const char* kink : {"pow_zero_base", "maximum_ties", "minimum_ties", "amax_tie", "norm_p2_zero_group"})
    if (row.name == kink) GTEST_SKIP() << "the first derivative is not continuous at this row's point";
  Inputs inputs = row.inputs();
  try {
    EXPECT_TRUE(autograd::gradgradcheck(row.fn, inputs, row.options));
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Gradgradcheck, GradgradcheckOps, ::testing::ValuesIn(rows()),
                         [](const auto& info) { return info.param.name; });

}  // namespace

namespace {

// Gradients come back in each input's own dtype when an op mixes dtypes or computes in another
// one (finite differences need float64, so these compare with values worked out here).
TEST(GradcheckDtypes, GradientsTakeTheInputsDtype) {
  struct Row {
    std::string name;
    std::function<Inputs()> inputs;
    std::function<Tensor(V)> fn;
    std::vector<Vec> want;  // the gradient of fn(...).sum() for each input
    double tol;
  };
  auto leaf_of = [](Vec v, Shape s, ScalarType dt) { return tensor(v, s, dt).requires_grad_(); };
  const double z = std::exp(0.5) + std::exp(-1.0) + std::exp(2.0);
  const Vec s = {std::exp(0.5) / z, std::exp(-1.0) / z, std::exp(2.0) / z};  // softmax of {0.5, -1, 2}
  const std::vector<Row> rows = {
      {"float32 * float64 (broadcast)",
       [&] { return Inputs{leaf_of({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat32), leaf_of({0.5, -1, 2}, {3}, kFloat64)}; },
       [](V x) { return x[0] * x[1]; }, {{0.5, -1, 2, 0.5, -1, 2}, {5, 7, 9}}, 1e-6},
      {"float16 + 0-d float64",
       [&] { return Inputs{leaf_of({1, 2, 3}, {3}, kFloat16), scalar_tensor(0.5, kFloat64).requires_grad_()}; },
       [](V x) { return (x[0] + x[1]) * 2.0; }, {{2, 2, 2}, {6}}, 1e-3},
      {"bfloat16 exp", [&] { return Inputs{leaf_of({0, 1, -1}, {3}, kBFloat16)}; }, [](V x) { return x[0].exp(); },
       {{1, std::exp(1.0), std::exp(-1.0)}}, 2e-2},
      {"where(float16, float32)",
       [&] { return Inputs{leaf_of({1, 2}, {2}, kFloat16), leaf_of({3, 4}, {2}, kFloat32)}; },
       [](V x) { return where(tensor(std::vector<bool>{true, false}, {2}), x[0], x[1]) * 3.0; }, {{3, 0}, {0, 3}},
       1e-6},
      {"cat(float32, float64)", [&] { return Inputs{leaf_of({1}, {1}, kFloat32), leaf_of({2, 3}, {2}, kFloat64)}; },
       [](V x) { Tensor c = cat({x[0], x[1]}); return c * c; }, {{2}, {4, 6}}, 1e-6},
      {"to(float64)", [&] { return Inputs{leaf_of({1, 2}, {2}, kFloat32)}; },
       [](V x) { return x[0].to(kFloat64).square(); }, {{2, 4}}, 1e-6},
      {"matmul float32",
       [&] { return Inputs{leaf_of({1, 2, 3, 4}, {2, 2}, kFloat32), leaf_of({1, -1}, {2}, kFloat32)}; },
       [](V x) { return matmul(x[0], x[1]); }, {{1, -1, 1, -1}, {4, 6}}, 1e-6},
      {"softmax float16", [&] { return Inputs{leaf_of({0.5, -1, 2}, {3}, kFloat16)}; },
       [](V x) { return softmax(x[0], 0) * tensor({1.0, 0.0, 0.0}, kFloat16); },
       {{s[0] * (1 - s[0]), -s[0] * s[1], -s[0] * s[2]}}, 5e-3},  // d s_0 / d x_j = s_0 (delta_0j - s_j)
      {"sum(dtype=float64) of float32", [&] { return Inputs{leaf_of({1, 2}, {2}, kFloat32)}; },
       [](V x) { return sum(x[0], {}, false, kFloat64) * 2.0; }, {{2, 2}}, 1e-6},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    Inputs in = row.inputs();
    row.fn(in).sum().backward();
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_TRUE(in[i].grad().defined()) << "input " << i;
      EXPECT_EQ(in[i].grad().dtype(), in[i].dtype()) << "input " << i;
      test::expect_close(in[i].grad(), row.want[i], in[i].shape(), row.tol, row.tol, "input " + std::to_string(i));
    }
  }
}

}  // namespace
