// SmallCNN: two conv-BN-ReLU-pool stages and a two-layer classifier, sized to train in minutes on two cores.
#include "kiln/models/small_cnn.h"

namespace kiln::models {

SmallCNNImpl::SmallCNNImpl(SmallCNNOptions options) : options(options) {
  KILN_CHECK(options.num_classes > 0, "SmallCNN", "num_classes must be positive, got ", options.num_classes);
  KILN_CHECK(options.in_channels > 0, "SmallCNN", "in_channels must be positive, got ", options.in_channels);
  // BatchNorm after each convolution lets plain SGD take large steps from the first batch.
  features = register_module(
      "features",
      nn::Sequential(nn::Conv2d(options.in_channels, 32, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(32),
                     nn::ReLU(true), nn::Conv2d(32, 32, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(32),
                     nn::ReLU(true), nn::MaxPool2d(2),  // 28x28 -> 14x14
                     nn::Conv2d(32, 64, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(64), nn::ReLU(true),
                     nn::Conv2d(64, 64, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(64), nn::ReLU(true),
                     nn::MaxPool2d(2)));  // 14x14 -> 7x7
  classifier = register_module("classifier", nn::Sequential(nn::Linear(64 * 7 * 7, 128), nn::ReLU(true),
                                                            nn::Dropout(options.dropout),
                                                            nn::Linear(128, options.num_classes)));
}

Tensor SmallCNNImpl::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() == 4 && x.size(1) == options.in_channels && x.size(2) == 28 && x.size(3) == 28,
             "SmallCNN", "expected input [N, ", options.in_channels, ", 28, 28], got ",
             x.defined() ? x.shape() : Shape{});
  return classifier(flatten(features(x), 1));
}

SmallCNN small_cnn(SmallCNNOptions options) { return SmallCNN(options); }

}  // namespace kiln::models
