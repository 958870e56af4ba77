// A differentiable op written by the user (kiln::autograd::Function, as torch::autograd::Function):
// Swish with a hand-written backward, checked against finite differences (first and second
// derivatives) and used in training.
#include <iostream>

#include <kiln/kiln.h>

using kiln::Tensor;
using kiln::autograd::AutogradContext;

// swish(x) = x * sigmoid(beta * x);  d/dx = s + beta * x * s * (1 - s), s = sigmoid(beta * x).
struct Swish : kiln::autograd::Function<Swish> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double beta) {
    ctx->save_for_backward({x});
    ctx->saved_data["beta"] = beta;
    return x * kiln::sigmoid(x * beta);
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> grad_outputs) {
    const Tensor x = ctx->get_saved_variables()[0];
    const double beta = ctx->saved_data["beta"];
    const Tensor s = kiln::sigmoid(x * beta);
    return {grad_outputs[0] * (s + x * beta * s * (1 - s)), Tensor()};  // none for beta
  }
};

int main() try {
  kiln::manual_seed(0);
  Tensor x = kiln::randn({4, 5}, kiln::kFloat64).requires_grad_();
  auto swish = [](const std::vector<Tensor>& in) { return Swish::apply(in[0], 1.7); };
  const bool ok = kiln::autograd::gradcheck(swish, {x});
  std::cout << "gradcheck " << (ok ? "passed" : "FAILED") << "\n";
  // Its backward is made of differentiable ops, so it has a second derivative too (create_graph:
  // gradient penalties, Hessian-vector products), checked against finite differences of the first.
  const bool ok2 = kiln::autograd::gradgradcheck(swish, {x});
  std::cout << "gradgradcheck " << (ok2 ? "passed" : "FAILED") << "\n";

  // A two-layer net with the custom activation learns y = sin(x).
  Tensor xs = kiln::linspace(-3, 3, 64).reshape({64, 1}), ys = kiln::sin(xs);
  kiln::nn::Linear l1(1, 32), l2(32, 1);
  std::vector<Tensor> params = l1->parameters();
  for (const Tensor& p : l2->parameters()) params.push_back(p);
  kiln::optim::Adam opt(params, {.lr = 1e-2});
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor loss = kiln::nn::functional::mse_loss(l2(Swish::apply(l1(xs), 1.0)), ys);
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::cout << "mse " << first << " -> " << last << "\n";
  return ok && ok2 && last < first / 10 ? 0 : 1;
} catch (const kiln::Error& e) {
  std::cerr << "custom_function: " << e.what() << "\n";
  return 1;
}
