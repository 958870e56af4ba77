// matmul (with PyTorch's 1-D, 2-D and broadcast-batched rules), mm and bmm, with gradients.
#include <algorithm>

#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;

// out[..., M, N] = a[..., M, K] @ b[..., K, N], both of rank >= 2, batch dims broadcast.
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  KILN_CHECK(b.size(-2) == K, "matmul", "shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied (",
             K, " != ", b.size(-2), ")");
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  const int64_t B = shape_numel(batch);
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = make_empty(out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  auto as3 = [&](const Tensor& t, const Shape& tb, int64_t r, int64_t c) {
    if (shape_numel(tb) == 1) return t.reshape({1, r, c});
    Shape full = batch;
    full.push_back(r);
    full.push_back(c);
    return t.expand(full).reshape({B, r, c});
  };
  Tensor a3, b3;
  if (shape_numel(bb) == 1 && a.dim() > 2) {
    // [..., M, K] @ [K, N]: fold the batch into M, one large GEMM (linear layers).
    a3 = a.reshape({1, B * M, K});
    b3 = b.reshape({1, K, N});
    Tensor o3 = out.view({1, B * M, N});
    ops::run1(Op::Matmul, a.device(), {a3, b3}, o3);
    return out;
  }
  a3 = as3(a, ba, M, K);
  b3 = as3(b, bb, K, N);
  Tensor o3 = out.view({B, M, N});
  ops::run1(Op::Matmul, a.device(), {a3, b3}, o3);
  return out;
}

Tensor matmul_with_grad(const Tensor& a, const Tensor& b);

// Gradient of the weight in x[..., K] @ w[K, N] without materialising the batch.
Tensor weight_grad(const Tensor& x, const Tensor& g) {
  const int64_t K = x.size(-1), N = g.size(-1);
  return matmul_with_grad(x.reshape({-1, K}).t(), g.reshape({-1, N}));
}

// matmul_nd, recorded when an operand requires grad (the gradients' own products, under
// create_graph).
Tensor matmul_with_grad(const Tensor& a, const Tensor& b) {
  Tensor out;
  {
    NoGradGuard ng;
    out = matmul_nd(a, b);
  }
  if (autograd::needs_grad({&a, &b})) {
    autograd::record("MatmulBackward", {&a, &b}, out,
                     [sa = SavedTensor(b.requires_grad() ? a : Tensor()), sb = SavedTensor(a.requires_grad() ? b : Tensor()),
                      sha = a.shape(), shb = b.shape()](const Tensor& g) -> TensorList {
                       Tensor ga, gb;
                       if (sb.defined()) ga = autograd::sum_to(matmul_with_grad(g, sb.get("MatmulBackward").transpose(-1, -2)), sha);
                       if (sa.defined()) {
                         Tensor av = sa.get("MatmulBackward");
                         if (shb.size() == 2 && av.dim() > 2) gb = weight_grad(av, g);
                         else gb = autograd::sum_to(matmul_with_grad(av.transpose(-1, -2), g), shb);
                       }
                       return {ga, gb};
                     });
  }
  return out;
}

void check_operands(const Tensor& a, const Tensor& b, const char* op) {
  ops::check_defined(a, op);
  ops::check_defined(b, op);
  ops::common_device({&a, &b}, op);
  KILN_CHECK(a.dim() > 0 && b.dim() > 0, op, "both arguments need at least 1 dim, got shapes ", a.shape(), " and ",
             b.shape());
  KILN_CHECK(a.dtype() == b.dtype(), op, "expects one dtype, got ", a.dtype(), " and ", b.dtype());
  KILN_CHECK(a.dtype() != kBool, op, "is not defined for bool tensors");
}

// The shape rules, checked on the shapes as given, so that messages show those rather than the
// matrices that vectors become.
void check_shapes(const Tensor& a, const Tensor& b, const char* op) {
  const int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  KILN_CHECK(ka == kb, op, "shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied (", ka, " != ", kb, ")");
  Shape ba(a.shape().begin(), a.shape().end() - std::min<int64_t>(a.dim(), 2));
  Shape bb(b.shape().begin(), b.shape().end() - std::min<int64_t>(b.dim(), 2));
  for (size_t i = 1; i <= std::min(ba.size(), bb.size()); ++i) {
    const int64_t da = ba[ba.size() - i], db = bb[bb.size() - i];
    KILN_CHECK(da == db || da == 1 || db == 1, op, "shapes ", a.shape(), " and ", b.shape(),
               " cannot be multiplied: batch dims ", ba, " and ", bb, " cannot be broadcast together");
  }
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = ops::autocast_lower(a_in), b = ops::autocast_lower(b_in);
  check_operands(a, b, "matmul");
  check_shapes(a, b, "matmul");
  if (a.dim() == 1 && b.dim() == 1) {
    return matmul_with_grad(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  }
  if (a.dim() == 1) return matmul_with_grad(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return matmul_with_grad(a, b.unsqueeze(1)).squeeze(-1);
  return matmul_with_grad(a, b);
}

Tensor mm(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = ops::autocast_lower(a_in), b = ops::autocast_lower(b_in);
  check_operands(a, b, "mm");
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "mm", "expects two 2-D tensors, got shapes ", a.shape(), " and ", b.shape());
  check_shapes(a, b, "mm");
  return matmul_with_grad(a, b);
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = ops::autocast_lower(a_in), b = ops::autocast_lower(b_in);
  check_operands(a, b, "bmm");
  KILN_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0), "bmm",
             "expects two 3-D tensors with one batch size, got shapes ", a.shape(), " and ", b.shape());
  check_shapes(a, b, "bmm");
  return matmul_with_grad(a, b);
}

}  // namespace kiln
