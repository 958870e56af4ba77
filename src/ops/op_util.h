// Helpers every op family shares: device checks, type promotion, output allocation, dispatch.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "autograd/function.h"
#include "backend/dispatch.h"
#include "core/tensor_util.h"
#include "kiln/ops.h"
#include "kiln/random.h"

namespace kiln::ops {

using backend::Op;

inline void check_defined(const Tensor& t, const char* op) {
  KILN_CHECK(t.defined(), op, "got an undefined tensor");
}

// All operands on one device; a 0-d CPU tensor may join any device, as in PyTorch.
Device common_device(std::initializer_list<const Tensor*> ts, const char* op);

// A 0-d CPU tensor holding a C++ number, marked as a wrapped number for type promotion.
Tensor wrap_scalar(Scalar s, ScalarType dtype);

// t converted to dtype (t itself when it already has it).
inline Tensor cast(const Tensor& t, ScalarType dtype) { return t.dtype() == dtype ? t : t.to(dtype); }

// The float type an integer input turns into for exp, log, mean, ... (itself if floating).
inline ScalarType float_type(ScalarType t) { return is_floating_point(t) ? t : kDefaultFloat; }

// The values an integer type holds (uint8, int32, int64), as int64.
inline std::pair<int64_t, int64_t> integer_range(ScalarType t) {
  return t == kUInt8 ? std::pair<int64_t, int64_t>{0, 255}
         : t == kInt32 ? std::pair<int64_t, int64_t>{INT32_MIN, INT32_MAX}
                       : std::pair<int64_t, int64_t>{INT64_MIN, INT64_MAX};
}

// Tests: the most elements a convolution's input or output may have before it runs over chunks of
// the batch (INT32_MAX, what cuDNN takes); returns the previous value.
int64_t set_conv_split_elements(int64_t elements);

// Runs one kernel with one output.
inline void run1(Op op, Device device, std::initializer_list<Tensor> in, Tensor& out,
                 const void* attrs = nullptr) {
  backend::run(op, device, std::span<const Tensor>(in.begin(), in.size()), std::span<Tensor>(&out, 1), attrs);
}

// Runs one kernel into `out` with its output in dtype `kt` (what it computes in): through a
// temporary and a copy where out has another dtype (an out= tensor, a 16-bit tensor updated in
// place from float32 operands).
void run_as(Op op, std::span<const Tensor> in, Tensor& out, ScalarType kt, const void* attrs = nullptr);

// The checks of a result (device dev, dtype rt, shape) written into an existing tensor, in place or
// out=: the same device, a dtype that holds it (no float into an integer tensor, nothing but bool
// into a bool one), the same shape. `what` names out in the message ("tensor", "output tensor").
void check_result_fits(const char* op, const Tensor& out, Device dev, ScalarType rt, const Shape& shape,
                       const char* what);

// A backward helper kernel (ReluBackward, ...): f(g, saved) elementwise in saved's dtype, where g
// broadcasts to saved's shape. Differentiable itself (create_graph), in g and in saved.
Tensor backward_helper(Op op, const Tensor& g, const Tensor& saved);

// create_graph through an op whose backward is a fused kernel: the gradients of `forward` (the op
// written in differentiable ops) at `inputs` (saved with their history) for the output gradient
// g, recorded themselves; undefined for inputs that do not require grad.
std::vector<Tensor> recomputed_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& forward,
                                         const std::vector<Tensor>& inputs, const Tensor& g);

// dropout() with the Philox counters starting at `state` instead of the generator's next ones:
// the same mask as the dropout() call (or fused attention) that drew them (differentiable).
Tensor dropout_with(const Tensor& x, double p, const GeneratorState& state);

// A backward of a pick along d (gather, index_select, embedding under create_graph): zeros(shape)
// plus g's elements at idx (scatter_add, differentiable in g), in float32 for 16-bit data and
// rounded once; scatter_add in 16 bits rounds every add (a bfloat16 sum of ones stops at 256), and
// on a GPU in the atomics' changing order.
Tensor sum_at(const Shape& shape, int64_t d, const Tensor& idx, const Tensor& g);

// The ScatterAdd kernel into `out` in place (its contract in dispatch.h: index of src's shape, on
// out's device like src; no checks, no autograd): out[.. index ..] += src, or = src with overwrite.
void scatter_into(Tensor out, int64_t d, const Tensor& index, const Tensor& src, bool overwrite);

// Strides for viewing (sizes, strides) as new_sizes without copying, if possible (PyTorch's
// rule: each run of old dims that is contiguous in memory maps onto a run of new dims; view.cpp).
std::optional<Shape> view_strides(const Shape& old_sizes, const Shape& old_strides, const Shape& new_sizes);

// The positions of m's true elements (m bool, 1-D), in order, int64 [n] (select.cpp); n is read on
// the host (a wait on a GPU).
Tensor true_positions(const Tensor& m);

// Bumps the version counter after an in-place change.
inline void bump_version(const Tensor& t) { t.storage()->version.fetch_add(1, std::memory_order_relaxed); }

// A 2-D parameter (stride, padding, ...) given as one value for both dims or as two; each at
// least `min`.
inline void pair_param(const char* op, const Shape& v, const char* what, int64_t out[2], int64_t min) {
  KILN_CHECK(v.size() == 1 || v.size() == 2, op, what, " must have 1 or 2 values, got ", v);
  out[0] = v[0];
  out[1] = v.size() == 2 ? v[1] : v[0];
  KILN_CHECK(out[0] >= min && out[1] >= min, op, what, " must be at least ", min, ", got ", v);
  // torch takes these as int; past it a window's span d * (k - 1) + 1 overflows.
  KILN_CHECK(out[0] <= INT32_MAX && out[1] <= INT32_MAX, op, what, " must be at most ", INT32_MAX, ", got ", v);
}

ScalarType result_type_of(std::initializer_list<const Tensor*> ts);
// The same with a C++ number as the second operand (no tensor is made for it).
ScalarType result_type_of(const Tensor& t, Scalar s);
// The number as a wrapped 0-d tensor of the type an op on (t, s) computes in.
Tensor wrap_for(const Tensor& t, Scalar s);
// Whether v has an exact value in float16 or bfloat16 (t); true for any other t.
bool exact_in(double v, ScalarType t);
// A value filled into a tensor of dtype t (full, fill_, masked_fill) must fit it, as PyTorch's
// checked conversion: an error naming op, not 300 stored in uint8 as 44 or -inf in int32 as 0.
void check_fill_value(Scalar v, ScalarType t, const char* op);

// Shape of the reduced result, and the dims mask the kernels take (dims empty = all).
struct ReduceDims {
  uint64_t mask = 0;
  Shape keep_shape;  // input rank, size 1 on reduced dims
  Shape out_shape;   // keep_shape, or with the reduced dims removed
  int64_t count = 1; // elements reduced into each output
};
ReduceDims reduce_dims(const Tensor& x, const Shape& dims, bool keepdim, const char* op);
// g spread evenly over the elements `hit` marks in each group r reduces (the ties of amax, amin,
// the inf-norm, median), the count taken in float32 (in a 16-bit dtype, 70,000 tied zeros would
// count as inf).
Tensor spread_evenly(const Tensor& g, const Tensor& hit, const ReduceDims& r, const Tensor& xv);

}  // namespace kiln::ops

namespace kiln::detail {
// randint's body: uniform integers in [low, high) from the global Philox generator.
Tensor random_int(const Shape& shape, int64_t low, int64_t high, TensorOptions options);
}  // namespace kiln::detail
