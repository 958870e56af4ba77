// Trains Kiln's small CNN on Fashion-MNIST for a few hundred steps and reports test accuracy:
// a data loader, a model, SGD with momentum under a one-cycle schedule, evaluation without grad.
// Usage: mnist_cnn [DATA_DIR [STEPS]]   (default /usr/share/datasets/fashion-mnist, 200 steps)
#include <iostream>
#include <memory>
#include <string>

#include <kiln/kiln.h>

namespace F = kiln::nn::functional;

int main(int argc, char** argv) try {
  const std::string root = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  const int64_t steps = argc > 2 ? std::stoll(argv[2]) : 200;
  kiln::manual_seed(0);
  auto normalize = [](const kiln::Tensor& x, kiln::data::SampleGenerator& g) {
    return kiln::data::transforms::Normalize({0.2860}, {0.3530})(x, g);
  };
  auto train = std::make_shared<const kiln::data::TransformDataset>(
      std::make_shared<const kiln::data::FashionMNIST>(root, true), std::vector<kiln::data::Transform>{normalize});
  auto test = std::make_shared<const kiln::data::TransformDataset>(
      std::make_shared<const kiln::data::FashionMNIST>(root, false), std::vector<kiln::data::Transform>{normalize});
  kiln::data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .num_workers = 1});
  kiln::data::DataLoader test_loader(test, {.batch_size = 500});

  auto model = kiln::models::small_cnn();
  kiln::optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
  kiln::optim::OneCycleLR sched(opt, {.max_lr = 0.05, .total_steps = steps});
  KILN_CHECK(loader.size() > 0, "mnist_cnn", "the training split in ", root, " has no images");
  int64_t step = 0;
  for (uint64_t epoch = 0; step < steps; ++epoch) {  // as many epochs as the steps take
    loader.set_epoch(epoch);
    for (kiln::data::Batch& b : loader) {
      if (step == steps) break;
      kiln::Tensor loss = F::cross_entropy(model(b.data), b.target);
      opt.zero_grad();
      loss.backward();
      opt.step();
      sched.step();
      if (++step % 50 == 0) std::cout << "step " << step << ": loss " << loss.item<double>() << "\n";
    }
  }

  kiln::NoGradGuard no_grad;
  model->eval();
  int64_t correct = 0, seen = 0;
  for (kiln::data::Batch& b : test_loader) {
    correct += kiln::argmax(model(b.data), 1).eq(b.target).sum().item<int64_t>();
    seen += b.data.size(0);
  }
  std::cout << "test accuracy " << 100.0 * static_cast<double>(correct) / static_cast<double>(seen) << "% after "
            << step << " steps\n";
} catch (const std::exception& e) {  // kiln::Error, or a STEPS that is not a number
  std::cerr << "mnist_cnn: " << e.what() << "\n";
  return 1;
}
