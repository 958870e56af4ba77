// ResNet-18/34/50/101 (He et al. 2015) with torchvision's module names, shapes and initialisation.
#pragma once

#include <array>

#include "kiln/nn.h"

namespace kiln::models {

// Fields in torchvision's ResNet argument order.
struct ResNetOptions {
  int64_t num_classes = 1000;
  // Start each residual branch's last BatchNorm at zero, so every block begins as the identity.
  bool zero_init_residual = false;
  int64_t groups = 1;
  int64_t width_per_group = 64;
};

// Two 3x3 convolutions (ResNet-18/34).
class BasicBlockImpl : public nn::Module {
 public:
  static constexpr int64_t expansion = 1;
  BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride = 1, nn::Sequential downsample = nullptr,
                 int64_t groups = 1, int64_t base_width = 64);
  Tensor forward(const Tensor& x);

  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::ReLU relu{nullptr};
  nn::Sequential downsample{nullptr};  // empty when the shortcut is the identity
};
KILN_MODULE(BasicBlock);

// 1x1 reduce, 3x3 (carrying the stride: torchvision's "ResNet v1.5"), 1x1 expand (ResNet-50/101).
class BottleneckImpl : public nn::Module {
 public:
  static constexpr int64_t expansion = 4;
  BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride = 1, nn::Sequential downsample = nullptr,
                 int64_t groups = 1, int64_t base_width = 64);
  Tensor forward(const Tensor& x);

  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  nn::ReLU relu{nullptr};
  nn::Sequential downsample{nullptr};
};
KILN_MODULE(Bottleneck);

enum class ResNetBlock { Basic, Bottleneck };

class ResNetImpl : public nn::Module {
 public:
  // layers: the number of blocks in each of the four stages.
  ResNetImpl(ResNetBlock block, std::array<int64_t, 4> layers, ResNetOptions options = {});
  Tensor forward(const Tensor& x);

  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  nn::ReLU relu{nullptr};
  nn::MaxPool2d maxpool{nullptr};
  nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  nn::AdaptiveAvgPool2d avgpool{nullptr};
  nn::Linear fc{nullptr};

 private:
  nn::Sequential make_layer(int64_t planes, int64_t blocks, int64_t stride);

  ResNetBlock block_;
  int64_t inplanes_ = 64;
  int64_t groups_, base_width_;
};
KILN_MODULE(ResNet);

ResNet resnet18(ResNetOptions options = {});
ResNet resnet34(ResNetOptions options = {});
ResNet resnet50(ResNetOptions options = {});
ResNet resnet101(ResNetOptions options = {});
ResNet resnet152(ResNetOptions options = {});
// torchvision's ResNeXt-50 (32 groups of 4 channels) and Wide ResNet-50-2 (bottlenecks twice as
// wide): ResNet-50 with groups and width_per_group set (options' own are replaced).
ResNet resnext50_32x4d(ResNetOptions options = {});
ResNet wide_resnet50_2(ResNetOptions options = {});

}  // namespace kiln::models
