// The matmul epilogue kernel: out = act(out + bias) in place, in the output's compute type.
#include "backend/cuda/device/elementwise.cuh"
#include "backend/cuda/epilogue.h"
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

}  // namespace

void bias_activation(const Tensor& out, const Tensor& bias, int activation, cudaStream_t stream) {
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
