#include "backend/attention_float.h"

#include <vector>

#include "core/tensor_util.h"
#include "kiln/autograd.h"

namespace kiln::backend {
namespace {

// t in float32, its broadcast dims (stride 0) converted once and expanded again.
Tensor to_float(const Tensor& t) {
  Tensor base = t;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1) base = base.narrow(d, 0, 1);
  return base.to(kFloat32).expand(t.shape());
}

}  // namespace

void attention_in_float(KernelArgs& a, bool backward, Kernel kernel) {
  NoGradGuard no_grad;
  std::vector<Tensor> in(a.inputs.begin(), a.inputs.end());
  for (size_t x = 0; x < 3; ++x) in[x] = to_float(in[x]);
  if (!backward) {
    KernelArgs f{in, a.outputs, a.attrs, a.stream};
    return kernel(f);
  }
  in.back() = to_float(in.back());  // grad_out
  std::vector<Tensor> grads;
  for (const Tensor& g : a.outputs) grads.push_back(make_empty(g.shape(), kFloat32, g.device()));
  KernelArgs f{in, grads, a.attrs, a.stream};
  kernel(f);
  for (size_t x = 0; x < grads.size(); ++x) a.outputs[x].copy_(grads[x]);
}

}  // namespace kiln::backend
