// The matmul kernels of our own: the epilogue, out = act(out + bias) in place in the output's
// compute type, and integer products.
#include "backend/cuda/device/elementwise.cuh"
#include "backend/cuda/epilogue.h"
#include "backend/cuda/integer_gemm.h"
#include "backend/cuda/launch_shape.h"
#include "backend/math.h"

namespace kiln::backend::cuda {
namespace {

struct Identity {
  template <class T>
  __device__ __forceinline__ T operator()(T x) const { return x; }
};

template <class T, class Act>
struct BiasAct {
  Act act;
  bool has_bias;
  __device__ __forceinline__ void operator()(char** p) const {
    using C = compute_t<T>;
    T* o = reinterpret_cast<T*>(p[0]);
    const C b = has_bias ? static_cast<C>(*reinterpret_cast<const T*>(p[1])) : C(0);
    *o = static_cast<T>(act(static_cast<C>(*o) + b));
  }
};

template <class T, class Act>
void launch(const Tensor& out, const Tensor& bias, Act act, cudaStream_t stream) {
  // Without a bias the second operand is the output itself (read, never used).
  const Tensor b = bias.defined() ? bias.expand(out.shape()) : out;
  launch_plan(make_plan<2>({&out, &b}), BiasAct<T, Act>{act, bias.defined()}, stream, "matmul epilogue");
}

template <class T>
__global__ void integer_gemm_kernel(const T* a, const T* w, T* out, const __grid_constant__ IntGemmGeom g,
                                    int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    integer_gemm_element(a, w, out, g, i);
}

}  // namespace

void integer_gemm(const Tensor& a, const Tensor& w, const Tensor& out, cudaStream_t stream) {
  const IntGemmGeom g = integer_gemm_geom(a, w, out);
  const int64_t total = out.numel();
  if (total == 0) return;
  auto launch_for = [&]<class T>() {
    integer_gemm_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(a.data_ptr()),
                                                                       static_cast<const T*>(w.data_ptr()),
                                                                       static_cast<T*>(out.data_ptr()), g, total);
    KILN_CUDA_LAUNCHED("matmul (integers)");
  };
  switch (out.dtype()) {
    case kUInt8:
      return launch_for.template operator()<uint8_t>();
    case kInt32:
      return launch_for.template operator()<int32_t>();
    case kInt64:
      return launch_for.template operator()<int64_t>();
    default:
      KILN_FAIL("matmul", "no integer product for ", out.dtype());
  }
}

void bias_activation(const Tensor& out, const Tensor& bias, int activation, cudaStream_t stream) {
  if (!is_floating_point(out.dtype())) {  // integers: the bias alone
    KILN_CHECK(activation == 0, "linear", "activations take floating-point tensors, got ", out.dtype());
    return visit_dtype(out.dtype(), "linear", [&]<class T>() { launch<T>(out, bias, Identity{}, stream); });
  }
  visit_float_dtype(out.dtype(), "linear", [&]<class T>() {
    switch (activation) {
      case 1: return launch<T>(out, bias, math::Relu{}, stream);
      case 2: return launch<T>(out, bias, math::GeluErf{}, stream);
      case 3: return launch<T>(out, bias, math::GeluTanh{}, stream);
      default: return launch<T>(out, bias, Identity{}, stream);
    }
  });
}

}  // namespace kiln::backend::cuda
