// CPU matmul and linear kernels: oneDNN for float32/bfloat16/float16 (primitives cached by
// geometry; linear's bias and activation as post-ops), a blocked loop and an epilogue pass for
// the other dtypes and for builds without oneDNN.
#include "backend/cpu/loops.h"
#include "backend/cpu/onednn.h"
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

// Floating-point sums over k run in blocks of this many terms, each block's sum then added to the
// total: a sum of K terms in order loses about sqrt(K) roundings, in blocks about sqrt(kKBlock) +
// sqrt(K / kKBlock), which keeps float32 products over a vocabulary (K = 30522: the gradient of a
// tied decoder) near oneDNN's accuracy.
constexpr int64_t kKBlock = 128;

// out[b] = a[b or 0] @ w[b or 0]; a [Ba, M, K], w [Bb, K, N], out [B, M, N] contiguous.
template <class T>
void gemm_loop(const Tensor& a, const Tensor& w, const Tensor& out) {
  using A = std::conditional_t<std::is_integral_v<compute_t<T>>, int64_t, compute_t<T>>;
  constexpr bool kBlocked = std::is_floating_point_v<A>;
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  const int64_t sa0 = a.size(0) == 1 ? 0 : a.stride(0), sa1 = a.stride(1), sa2 = a.stride(2);
  const int64_t sw0 = w.size(0) == 1 ? 0 : w.stride(0), sw1 = w.stride(1), sw2 = w.stride(2);
  const T* ap = static_cast<const T*>(a.data_ptr());
  const T* wp = static_cast<const T*>(w.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  parallel_for(B * M, std::max<int64_t>(1, 65536 / std::max<int64_t>(N * K, 1)), [&](int64_t b0, int64_t e0) {
    std::vector<A> acc(static_cast<size_t>(N)), block(kBlocked && K > kKBlock ? static_cast<size_t>(N) : 0);
    for (int64_t r = b0; r < e0; ++r) {
      const int64_t b = r / M, i = r % M;
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t k0 = 0; k0 < K; k0 += kKBlock) {
        std::vector<A>& sum = block.empty() ? acc : block;
        if (!block.empty()) std::fill(block.begin(), block.end(), A(0));
        for (int64_t k = k0; k < std::min(K, k0 + kKBlock); ++k) {
          const A av = static_cast<A>(ap[b * sa0 + i * sa1 + k * sa2]);
          const T* wr = wp + b * sw0 + k * sw1;
          if (sw2 == 1) {
            for (int64_t j = 0; j < N; ++j) sum[j] += av * static_cast<A>(wr[j]);
          } else {
            for (int64_t j = 0; j < N; ++j) sum[j] += av * static_cast<A>(wr[j * sw2]);
          }
        }
        if (!block.empty())
          for (int64_t j = 0; j < N; ++j) acc[j] += block[j];
      }
      T* orow = op + (b * M + i) * N;
      for (int64_t j = 0; j < N; ++j) orow[j] = static_cast<T>(acc[j]);
    }
  });
}

void matmul(KernelArgs& args) {
  const Tensor& a = args.inputs[0];
  const Tensor& w = args.inputs[1];
  const Tensor& out = args.outputs[0];
  if (out.numel() == 0) return;
  if (a.size(2) == 0) {
    visit_dtype(out.dtype(), "matmul", [&]<class T>() {
      std::fill_n(static_cast<T*>(out.data_ptr()), out.numel(), T(0));
    });
    return;
  }
  if (onednn_matmul(a, w, out)) return;
  visit_dtype(out.dtype(), "matmul", [&]<class T>() { gemm_loop<T>(a, w, out); });
}

// out = act(out + bias) row by row: the epilogue of the linear kernel when oneDNN did not fuse it.
template <class T, class F>
void epilogue(const Tensor& out, const T* bias, const F& act) {
  using A = compute_t<T>;
  const int64_t n = out.size(2);
  T* op = out.data_ptr<T>();
  parallel_for(out.numel() / std::max<int64_t>(n, 1), std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1)),
               [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      T* row = op + r * n;
      for (int64_t j = 0; j < n; ++j)
        row[j] = static_cast<T>(act(static_cast<A>(row[j]) + (bias ? static_cast<A>(bias[j]) : A(0))));
    }
  });
}

// inputs {x [1, M, K], weight^T [1, K, N], bias [N]?} -> {out [1, M, N]} = act(x @ w^T + bias).
void linear(KernelArgs& args) {
  const auto& at = *static_cast<const LinearAttrs*>(args.attrs);
  const Tensor& a = args.inputs[0];
  const Tensor& w = args.inputs[1];
  const Tensor bias = at.has_bias ? args.inputs[2] : Tensor();
  const Tensor& out = args.outputs[0];
  if (out.numel() == 0) return;
  if (a.size(2) > 0 && onednn_matmul(a, w, out, bias, at.activation)) return;
  matmul(args);  // oneDNN without the epilogue where it took the matmul but not the post-ops, or the loop
  if (!bias.defined() && at.activation == 0) return;
  visit_dtype(out.dtype(), "linear", [&]<class T>() {
    const T* bp = bias.defined() ? bias.data_ptr<T>() : nullptr;
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      switch (at.activation) {
        case 1: return epilogue<T>(out, bp, math::Relu{});
        case 2: return epilogue<T>(out, bp, math::GeluErf{});
        case 3: return epilogue<T>(out, bp, math::GeluTanh{});
        default: break;
      }
    } else {
      KILN_CHECK(at.activation == 0, "linear", "activations take floating-point tensors, got ", out.dtype());
    }
    epilogue<T>(out, bp, [](auto v) { return v; });
  });
}

KILN_REGISTER_KERNEL(Op::Matmul, DeviceType::CPU, matmul);
KILN_REGISTER_KERNEL(Op::Linear, DeviceType::CPU, linear);

}  // namespace
}  // namespace kiln::backend::cpu
