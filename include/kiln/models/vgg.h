// VGG-11/13/16/19, with and without batch norm (Simonyan & Zisserman 2014), as torchvision builds them.
#pragma once

#include <vector>

#include "kiln/nn.h"

namespace kiln::models {

// Fields in torchvision's VGG argument order.
struct VGGOptions {
  int64_t num_classes = 1000;
  bool init_weights = true;
  double dropout = 0.5;
};

// features (convolutions and pools), avgpool (adaptive to 7x7), classifier (three Linear layers).
class VGGImpl : public nn::Module {
 public:
  VGGImpl(nn::Sequential features, VGGOptions options = {});
  Tensor forward(const Tensor& x);

  nn::Sequential features{nullptr};
  nn::AdaptiveAvgPool2d avgpool{nullptr};
  nn::Sequential classifier{nullptr};
};
KILN_MODULE(VGG);

// torchvision's make_layers: a number is a 3x3 convolution to that many channels (followed by
// BatchNorm when batch_norm) and ReLU; kMaxPool is a 2x2 stride-2 max pool.
inline constexpr int64_t kMaxPool = -1;
nn::Sequential make_vgg_layers(const std::vector<int64_t>& cfg, bool batch_norm);

VGG vgg11(VGGOptions options = {});
VGG vgg13(VGGOptions options = {});
VGG vgg16(VGGOptions options = {});
VGG vgg19(VGGOptions options = {});
VGG vgg11_bn(VGGOptions options = {});
VGG vgg13_bn(VGGOptions options = {});
VGG vgg16_bn(VGGOptions options = {});
VGG vgg19_bn(VGGOptions options = {});

}  // namespace kiln::models
