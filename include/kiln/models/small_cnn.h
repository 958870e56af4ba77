// SmallCNN: a two-stage convolutional net for 28x28 images (Fashion-MNIST), the default model of `kiln train`.
#pragma once

#include "kiln/nn.h"

namespace kiln::models {

struct SmallCNNOptions {
  int64_t num_classes = 10;
  int64_t in_channels = 1;
  double dropout = 0.25;
};

// features: [conv3x3(32) BN ReLU] x2 maxpool2, [conv3x3(64) BN ReLU] x2 maxpool2: 28x28 -> 7x7;
// classifier: Linear(64*7*7, 128) ReLU Dropout Linear(128, num_classes).
class SmallCNNImpl : public nn::Module {
 public:
  explicit SmallCNNImpl(SmallCNNOptions options = {});
  // x: [N, in_channels, 28, 28] -> logits [N, num_classes].
  Tensor forward(const Tensor& x);

  SmallCNNOptions options;
  nn::Sequential features{nullptr};
  nn::Sequential classifier{nullptr};
};
KILN_MODULE(SmallCNN);

SmallCNN small_cnn(SmallCNNOptions options = {});

}  // namespace kiln::models
