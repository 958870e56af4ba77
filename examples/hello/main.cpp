// The README's example: tensors, an op chain, backward.
#include <iostream>

#include <kiln/kiln.h>

int main() {
  kiln::manual_seed(0);
  kiln::Tensor w = kiln::randn({3, 2}).requires_grad_();
  kiln::Tensor x = kiln::tensor({{1.0f, 2.0f, 3.0f}, {4.0f, 5.0f, 6.0f}});
  kiln::Tensor loss = kiln::tanh(kiln::matmul(x, w)).pow(2).mean();
  loss.backward();
  std::cout << "loss = " << loss.item<float>() << "\n" << "grad of w:\n" << w.grad() << "\n";
}
