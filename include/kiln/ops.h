// The ops: free functions in kiln::, with NumPy broadcasting and PyTorch's type promotion.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// ---- elementwise, two operands (Tensor or Scalar on either side)
#define KILN_DECLARE_BINARY(name)                 \
  Tensor name(const Tensor& a, const Tensor& b);  \
  Tensor name(const Tensor& a, Scalar b);         \
  Tensor name(Scalar a, const Tensor& b);
KILN_DECLARE_BINARY(add)
KILN_DECLARE_BINARY(sub)
KILN_DECLARE_BINARY(mul)
KILN_DECLARE_BINARY(div)
KILN_DECLARE_BINARY(pow)
KILN_DECLARE_BINARY(maximum)
KILN_DECLARE_BINARY(minimum)
// relu(a + b) in one pass (ResNet's residual join): the same values and gradients.
KILN_DECLARE_BINARY(add_relu)
KILN_DECLARE_BINARY(eq)
KILN_DECLARE_BINARY(ne)
KILN_DECLARE_BINARY(lt)
KILN_DECLARE_BINARY(le)
KILN_DECLARE_BINARY(gt)
KILN_DECLARE_BINARY(ge)
KILN_DECLARE_BINARY(logical_and)
KILN_DECLARE_BINARY(logical_or)
// Division that rounds (src/ops/binary.cpp), integers staying integers, as torch's: floor_divide
// rounds the quotient down and remainder takes the divisor's sign (Python's // and %); fmod takes
// the dividend's sign (C's %). An integer divided by zero gives 0 (NumPy's answer; torch's CPU
// raises and its GPU gives garbage), a float one inf or NaN. Bool tensors are refused. remainder
// and fmod have torch's gradients (1, and minus the rounded quotient); the quotients' are zero.
KILN_DECLARE_BINARY(floor_divide)
KILN_DECLARE_BINARY(remainder)
KILN_DECLARE_BINARY(fmod)
// The angle of the point (b, a) in (-pi, pi], as std::atan2; integers give float32 (as div).
KILN_DECLARE_BINARY(atan2)
// Bitwise and, or, xor of integer and bool tensors (bool: logical), as torch's & | ^; floating-point
// tensors are refused. bitwise_not (~) is the complement (bool: logical not).
KILN_DECLARE_BINARY(bitwise_and)
KILN_DECLARE_BINARY(bitwise_or)
KILN_DECLARE_BINARY(bitwise_xor)
#undef KILN_DECLARE_BINARY
Tensor bitwise_not(const Tensor& x);
// torch.div with a rounding mode: "trunc" (toward zero, C's /) or "floor" (floor_divide); the
// result keeps the operands' promoted dtype (integers stay integers) and its gradient is zero.
Tensor div(const Tensor& a, const Tensor& b, std::string_view rounding_mode);
Tensor div(const Tensor& a, Scalar b, std::string_view rounding_mode);
// a + alpha * b and a - alpha * b (torch.add and torch.sub with alpha), each element one fused
// multiply-add as torch's; alpha must be an integer for integer tensors and fit the dtype (as
// torch, a 16-bit tensor's alpha is rounded to its dtype first).
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha);
// out = a op b without a new tensor (PyTorch's out= forms, torch::mul_out): out must have the
// broadcast shape and a dtype that holds the result; no autograd (an error when an argument
// requires grad).
Tensor& add_out(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& add_out(Tensor& out, const Tensor& a, Scalar b);
Tensor& sub_out(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& sub_out(Tensor& out, const Tensor& a, Scalar b);
Tensor& mul_out(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& mul_out(Tensor& out, const Tensor& a, Scalar b);
Tensor& div_out(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& div_out(Tensor& out, const Tensor& a, Scalar b);

// ---- elementwise, one operand
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate: "none" (the erf form) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor silu(const Tensor& x);
// Activations with parameters (src/ops/activation.cpp), torch.nn.functional's formulas and defaults:
// leaky_relu x > 0 ? x : slope x; elu x > 0 ? x : alpha (e^x - 1); softplus log(1 + e^(beta x)) /
// beta, x where beta x > threshold; hardtanh x clamped to [min_val, max_val] (gradient 0 at the
// ends); relu6 hardtanh(x, 0, 6). Floating-point tensors.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor relu6(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor logical_not(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor log2(const Tensor& x);
Tensor log10(const Tensor& x);
Tensor exp2(const Tensor& x);
// To an integer value (integer tensors are returned as they are); round is half to even, as
// torch.round. Their gradient is zero.
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);
Tensor trunc(const Tensor& x);
// Bool tensors: NaN; +-inf; neither (integers are finite).
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
Tensor clamp_min(const Tensor& x, Scalar min);
Tensor clamp_max(const Tensor& x, Scalar max);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, Scalar b);
Tensor where(const Tensor& condition, Scalar a, const Tensor& b);
// The result has the broadcast shape of x and mask (masked_fill_ keeps x's shape); a value given
// as a 0-d tensor gets a gradient (the sum over the filled elements), as torch's.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value);

// ---- elementwise, three operands (broadcast together), as torch's
// self + value * tensor1 * tensor2, and self + value * tensor1 / tensor2 (addcdiv refuses
// integer tensor1 and tensor2; an integer value with integer tensors), with torch's roundings:
// addcmul's product goes into the sum in one fused multiply-add, and 16-bit tensors compute in
// float32, rounded once (the optimizers' updates).
Tensor addcmul(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2, Scalar value = 1);
Tensor addcdiv(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2, Scalar value = 1);
// start + weight * (end - start), floating point, all of one dtype (a 0-d weight tensor of
// another dtype is cast to start's, as torch 2.15); computed from end for |weight| >= 0.5, so
// that weight 1 gives end exactly.
Tensor lerp(const Tensor& start, const Tensor& end, Scalar weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);

// ---- reductions: dims empty means all dims
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false,
           std::optional<ScalarType> dtype = std::nullopt);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// Sorting along dim (src/ops/sort.cpp), in torch's order: NaN above every number (last ascending,
// first descending), -0 equal to 0. Always stable (equal elements keep their order, as torch's
// stable=true), so the CPU and a GPU give the same indices. Values carry the gradient.
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
// The k-th smallest along dim (k from 1; NaN above every number) and its index: the stable sort's,
// so among equal elements the first (torch's quickselect may name another).
std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1, bool keepdim = false);
// The lower median (of an even count, the smaller middle element): of all elements, or along dim
// with its index. A NaN makes it NaN (the first NaN's index); nanmedian leaves NaN out (NaN where
// all are). Empty floating-point tensors have median NaN.
Tensor median(const Tensor& x);
std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor nanmedian(const Tensor& x);
std::tuple<Tensor, Tensor> nanmedian(const Tensor& x, int64_t dim, bool keepdim = false);
// The k largest (or smallest) along dim, sorted whatever `sorted` says: the stable sort's first k, so
// ties (0 and -0 among them) go to the first position, where torch.topk may pick another.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);
// The running sum along dim (src/ops/cumsum.cpp), in dtype if given, else in x's (int64 for
// integers and bool, as torch's); accumulated in double for float32/float64 and in float for
// 16-bit floats, as torch's CPU kernel, each output rounded from the running sum.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype = std::nullopt);
// The running product, in the same types (torch's cumprod); its gradient is torch's, zeros included.
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype = std::nullopt);
Tensor all(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// The p-norm over dims (p = 2 by default; inf gives the max of |x|).
Tensor norm(const Tensor& x, double p = 2.0, const Shape& dims = {}, bool keepdim = false);

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- linear algebra: PyTorch's matmul (1-D, 2-D and batched with broadcasting)
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
// Products with a sum (src/ops/linalg.cpp), torch's: outer(a, b) of 1-D tensors is [a.size, b.size];
// addmm beta self + alpha (m1 @ m2) with m1, m2 2-D and self broadcast to the product; baddbmm
// the same with 3-D batches (bmm). beta 0 ignores self (NaN in it too), as torch's.
// torch.diag: a 1-D x as the matrix with x on its `diagonal`-th diagonal, or a 2-D x's diagonal
// (a copy); trace: the sum of a matrix's diagonal.
Tensor diag(const Tensor& x, int64_t diagonal = 0);
Tensor trace(const Tensor& x);
Tensor outer(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& self, const Tensor& m1, const Tensor& m2, Scalar beta = 1, Scalar alpha = 1);
Tensor baddbmm(const Tensor& self, const Tensor& b1, const Tensor& b2, Scalar beta = 1, Scalar alpha = 1);
// Einstein summation (torch.einsum): "ij,jk->ik", "bhqd,bhkd->bhqk", "...ij->...ji", "ii->i". Labels
// are letters; "..." stands for the dims no label names (broadcast between operands); without "->"
// the output is the labels used once, in alphabetical order, after the "..." dims. Pairs of
// operands contract through bmm, left to right; a label repeated in one operand takes its diagonal.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);
// The cosine of the angle between x1 and x2 (broadcast together) along dim, torch's: each divided
// by its 2-norm, the norms raised to eps first (a value only: the gradient is as if unclamped).
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);

// ---- joining and splitting
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// Copies that move elements (src/ops/rearrange.cpp), as torch's: flip reverses the order along
// each of dims; roll moves element j along dims[i] to (j + shifts[i]) mod size (no dims: over the
// flattened tensor, one shift); repeat tiles x repeats[i] times along dim i (repeats may have
// more dims than x: x gets leading dims of size 1).
Tensor flip(const Tensor& x, const Shape& dims);
Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims = {});
Tensor repeat(const Tensor& x, const Shape& repeats);
// Each element (along dim, or of the flattened tensor) `repeats` times in a row, as
// torch.repeat_interleave: [1, 2] twice is [1, 1, 2, 2]; repeats a number, or an integer tensor of a
// count per element along dim (or one count for all). repeat_interleave(counts) repeats each
// position i counts[i] times. A tensor of counts sizes the result: on a GPU it is read (a wait).
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim = std::nullopt);
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt);
Tensor repeat_interleave(const Tensor& repeats);
// torch.nn.functional.pad: `pad` holds (before, after) amounts for the last dim, then the one
// before it, and so on; mode "constant" (filled with value), "reflect" (mirrored, the edge not
// repeated: each amount below the dim's size), "replicate" (the edge repeated) or "circular"
// (wrapped: at most the dim's size). A negative amount crops.
Tensor pad(const Tensor& x, const Shape& pad, std::string_view mode = "constant", double value = 0);

// ---- indexing
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// Slices of x along dim named by a 0-d or 1-D index (src/ops/index_update.cpp), as torch's:
// index_add adds alpha * source's slices (an index named twice adds twice), index_copy copies
// them (the last one for an index named twice; the index is read on the host), index_fill sets
// them to value (negative indices count from the end). source has x's dtype and shape but along
// dim, where it has one slice per index.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha = 1);
Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
Tensor index_fill(const Tensor& x, int64_t dim, const Tensor& index, Scalar value);
Tensor one_hot(const Tensor& x, int64_t num_classes = -1);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// Selection by value (src/ops/select.cpp), as torch's, in row-major order: nonzero (and argwhere)
// gives the int64 coordinates [n, x.dim()] of x's nonzero elements; masked_select the elements of
// x where mask (bool, broadcast with x) is true, 1-D, with a gradient to x; count_nonzero the
// number of nonzero elements over dims (all by default), int64. The size of nonzero's and
// masked_select's result depends on the data: on a GPU they wait for it, as torch's do.
Tensor nonzero(const Tensor& x);
Tensor argwhere(const Tensor& x);
Tensor masked_select(const Tensor& x, const Tensor& mask);
Tensor count_nonzero(const Tensor& x, const Shape& dims = {});
// Where values would go in sorted rows to keep them sorted (torch.searchsorted): for each value the
// first position whose element is >= it (the first > it with right, or side "right"), int64 (int32
// with out_int32). sorted_sequence is 1-D (one sequence for every value, values of any shape) or
// has values' shape but in its last dim (a sequence per row); sorter, if given, holds the positions
// that sort each row (argsort's), and the sequence is read through it. Rows must be sorted (as
// torch, this is not checked); NaN is above every number. bucketize(input, boundaries) is
// searchsorted(boundaries, input) for 1-D boundaries.
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32 = false, bool right = false,
                    std::optional<std::string_view> side = std::nullopt, const Tensor& sorter = {});
Tensor searchsorted(const Tensor& sorted_sequence, Scalar value, bool out_int32 = false, bool right = false,
                    std::optional<std::string_view> side = std::nullopt, const Tensor& sorter = {});
Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool out_int32 = false, bool right = false);
Tensor bucketize(Scalar input, const Tensor& boundaries, bool out_int32 = false, bool right = false);
// The distinct values of x (flattened), sorted (as torch's kernels give them whatever `sorted`
// says), and when asked each element's index among them (x's shape, int64) and each value's count;
// unique_consecutive the same for runs of equal neighbours, in order. NaNs are each distinct, 0 and
// -0 one value, as torch's. Tensors not asked for are undefined.
std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x, bool sorted = true, bool return_inverse = false,
                                          bool return_counts = false);
std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& x, bool return_inverse = false,
                                                      bool return_counts = false);

// ---- views as free functions
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor diagonal(const Tensor& x, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);

// ---- neural-network ops (src/ops/conv.cpp, pool.cpp, norm.cpp, loss.cpp, dropout.cpp,
// linear.cpp). 4-D activations are logical NCHW; results of conv, pooling and batch norm are
// channels-last (NHWC strides), the layout the CPU and GPU libraries are fastest in.

// x [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias [C_out] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, const Shape& stride = {1, 1},
              const Shape& padding = {0, 0}, const Shape& dilation = {1, 1}, int64_t groups = 1);
// The gradient of conv2d's input as an op (torch.nn.functional.conv_transpose2d, "deconvolution"):
// x [N, C_in, H, W], weight [C_in, C_out / groups, kH, kW], bias [C_out]; the output is
// [N, C_out, (H - 1) * stride - 2 * padding + dilation * (kH - 1) + output_padding + 1, ...].
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, const Shape& stride = {1, 1},
                        const Shape& padding = {0, 0}, const Shape& output_padding = {0, 0}, int64_t groups = 1,
                        const Shape& dilation = {1, 1});
// stride empty means stride = kernel_size, as in PyTorch.
Tensor max_pool2d(const Tensor& x, const Shape& kernel_size, const Shape& stride = {},
                  const Shape& padding = {0, 0}, const Shape& dilation = {1, 1}, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& x, const Shape& kernel_size, const Shape& stride = {},
                  const Shape& padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, const Shape& output_size);
// Each instance's channels normalised over their own elements (torch.nn.functional.instance_norm):
// x [N, C, *] with weight and bias [C]; with running statistics, use_input_stats updates them by
// momentum with the instances' average, and use_input_stats=false normalises by them instead.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = {}, const Tensor& running_var = {},
                     const Tensor& weight = {}, const Tensor& bias = {}, bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);
// x [N, C, *spatial] (1 to 3 spatial dims) resampled to `size`, or to floor(in * scale_factor)
// (one value, or one per spatial dim), as torch.nn.functional.interpolate: modes nearest,
// nearest-exact, linear (3-D), bilinear and bicubic (4-D), trilinear (5-D) and area (3-D, 4-D);
// align_corners for the interpolating modes (default false). With a scale factor the source
// positions use 1 / scale_factor unless recompute_scale_factor, as torch's.
Tensor interpolate(const Tensor& x, const Shape& size, const std::vector<double>& scale_factor = {},
                   std::string_view mode = "nearest", std::optional<bool> align_corners = std::nullopt,
                   std::optional<bool> recompute_scale_factor = std::nullopt);
// Over dim 1 of a [N, C, ...] input. In training, updates running_mean/running_var in place
// (unbiased variance, running = (1 - momentum) * running + momentum * batch) when defined.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);
// relu(batch_norm(...)) in one pass over the activation (and one over its gradient in backward,
// the ReLU's mask recomputed from x): the same values and gradients, a pass fewer each way.
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                       double eps = 1e-5);
// Zeroes elements with probability p from the Philox generator and scales the rest by 1/(1-p).
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);
// x [..., in] @ weight[out, in]^T + bias[out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// BatchMean (the sum over the first dim's size) is kl_div's only; the other losses refuse it.
enum class Reduction { None, Mean, Sum, BatchMean };
// input [N, C] or [N, C, d1, ...] log-probabilities; target [N] / [N, d1, ...] class indices.
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
// input logits; target class indices (integer) or class probabilities (float, input's shape).
Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                     Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
// (input - target)^2, reduced; target broadcasts to input's shape (PyTorch warns there; Kiln
// requires the broadcast shape to be input's).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// torch's regression losses of d = input - target (the target broadcast to the input's shape,
// floating point, on torch.autocast's float32 list as mse_loss): l1_loss |d|; smooth_l1_loss
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta >= 0; 0 is l1_loss); huber_loss
// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (delta > 0).
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                  double delta = 1.0);
// torch's binary_cross_entropy of probabilities x in [0, 1] (checked on the CPU) and targets of x's
// shape: -w [y log x + (1 - y) log(1 - x)], each logarithm at least -100; weight broadcasts to x.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            Reduction reduction = Reduction::Mean);
// torch's kl_div: the pointwise KL divergence target * (log(target) - input) of log-probabilities
// `input` from probabilities `target` (0 where target is 0), or exp(target) * (target - input)
// with log_target (the target as log-probabilities too); broadcast together, floating point.
// BatchMean (the true KL divergence per sample, as torch advises) divides the sum by input's first
// dim; Mean divides by the element count.
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
              bool log_target = false);
// torch's binary_cross_entropy_with_logits: -[pw y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))]
// per element, computed without overflow for any logit, times `weight` (broadcast to the input);
// `pos_weight` (broadcast too, e.g. one per class over the last dim) weights the positive term.
// The target has the input's shape and may hold probabilities; its gradient is given too.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                                        const Tensor& pos_weight = {}, Reduction reduction = Reduction::Mean);

// ---- transformer ops (src/ops/embedding.cpp, layer_norm.cpp, softmax.cpp, attention.cpp, linear.cpp)
// Rows of weight [num_embeddings, dim] picked by integer indices of any shape: [..., dim].
// An index outside [0, num_embeddings) is an error. The gradient of weight is dense; the row
// padding_idx gets none (it is still read). padding_idx in [0, num_embeddings) marks that row and
// any negative value means none: unlike PyTorch, negatives do not count from the end (-1 is the
// "none" default); padding_idx >= num_embeddings is an error.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);
// Normalizes over the last normalized_shape.size() dims (biased variance), then scales by weight
// and shifts by bias (each normalized_shape, or undefined).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// Over groups of channels of x [N, C, *] (torch.nn.functional.group_norm): each of num_groups groups
// of C / num_groups channels is normalised as one (biased variance), then scaled by weight [C] and
// shifted by bias [C] where defined.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// softmax over dim of x + mask (float mask) or of x where mask is true (bool mask, true = keep);
// the mask broadcasts to x and gets no gradient. A row with every element masked gives zeros.
Tensor masked_softmax(const Tensor& x, const Tensor& mask, int64_t dim);
// q [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev]: softmax(q k^T * scale + mask) v,
// leading dims broadcast. attn_mask is bool (true = attend) or float (added to the scores),
// broadcastable to [..., L, S]; is_causal masks j > i. scale defaults to 1/sqrt(E). One fused op:
// the S x S score matrix is never materialised (memory linear in sequence length), and dropout
// masks come from Philox counters so the backward regenerates them (the same scores dropout() on
// the softmax would drop, for the same generator state). A query row with every key masked gives
// zeros. A float attn_mask that requires grad (a learned position bias) gets its gradient
// through PyTorch's math path instead (the composed ops, scores materialised; a fully masked row
// gives zeros there too). float16/bfloat16 inputs are computed in float32.
// Unlike PyTorch, attn_mask and is_causal may be given together (both apply).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = std::nullopt);
enum class Activation { None, ReLU, GELU, GELUTanh };
// activation(linear(x, weight, bias)), fused into the matmul where the backend allows.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation);

// The type an op on these operands computes in (PyTorch's result_type).
ScalarType result_type(const Tensor& a, const Tensor& b);
ScalarType result_type(const Tensor& a, Scalar b);

}  // namespace kiln
