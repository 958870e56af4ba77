// ResNet (He et al., "Deep Residual Learning for Image Recognition", 2015), as torchvision builds it.
#include "kiln/models/resnet.h"

// The blocks' `relu` modules stay registered, as torchvision's (a model prints and loads the same),
// while forward runs each ReLU fused into the op before it: batch_norm_relu, add_relu.

namespace kiln::models {
namespace {

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride = 1, int64_t groups = 1) {
  return nn::Conv2d(in, out, 3, {.stride = stride, .padding = 1, .groups = groups, .bias = false});
}

nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride = 1) {
  return nn::Conv2d(in, out, 1, {.stride = stride, .bias = false});
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride, nn::Sequential downsample_,
                               int64_t groups, int64_t base_width) {
  KILN_CHECK(groups == 1 && base_width == 64, "BasicBlock", "only supports groups=1 and base_width=64, got ",
             groups, " and ", base_width);
  conv1 = register_module("conv1", conv3x3(inplanes, planes, stride));
  bn1 = register_module("bn1", nn::BatchNorm2d(planes));
  relu = register_module("relu", nn::ReLU(true));
  conv2 = register_module("conv2", conv3x3(planes, planes));
  bn2 = register_module("bn2", nn::BatchNorm2d(planes));
  if (downsample_) downsample = register_module("downsample", downsample_);
}

Tensor BasicBlockImpl::forward(const Tensor& x) {
  Tensor out = bn1->forward_relu(conv1(x));
  out = bn2(conv2(out));
  Tensor identity = downsample ? downsample(x) : x;
  return add_relu(out, identity);  // relu(out + identity) in one pass
}

BottleneckImpl::BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride, nn::Sequential downsample_,
                               int64_t groups, int64_t base_width) {
  int64_t width = planes * base_width / 64 * groups;
  conv1 = register_module("conv1", conv1x1(inplanes, width));
  bn1 = register_module("bn1", nn::BatchNorm2d(width));
  conv2 = register_module("conv2", conv3x3(width, width, stride, groups));
  bn2 = register_module("bn2", nn::BatchNorm2d(width));
  conv3 = register_module("conv3", conv1x1(width, planes * expansion));
  bn3 = register_module("bn3", nn::BatchNorm2d(planes * expansion));
  relu = register_module("relu", nn::ReLU(true));
  if (downsample_) downsample = register_module("downsample", downsample_);
}

Tensor BottleneckImpl::forward(const Tensor& x) {
  Tensor out = bn1->forward_relu(conv1(x));
  out = bn2->forward_relu(conv2(out));
  out = bn3(conv3(out));
  Tensor identity = downsample ? downsample(x) : x;
  return add_relu(out, identity);  // relu(out + identity) in one pass
}

ResNetImpl::ResNetImpl(ResNetBlock block, std::array<int64_t, 4> layers, ResNetOptions options)
    : block_(block), groups_(options.groups), base_width_(options.width_per_group) {
  KILN_CHECK(options.num_classes > 0, "ResNet", "num_classes must be positive, got ", options.num_classes);
  KILN_CHECK(options.groups > 0, "ResNet", "groups must be positive, got ", options.groups);
  KILN_CHECK(options.width_per_group > 0, "ResNet", "width_per_group must be positive, got ", options.width_per_group);
  // The stem: a 7x7 stride-2 convolution and a stride-2 max pool take 224x224 to 56x56.
  conv1 = register_module("conv1", nn::Conv2d(3, inplanes_, 7, {.stride = 2, .padding = 3, .bias = false}));
  bn1 = register_module("bn1", nn::BatchNorm2d(inplanes_));
  relu = register_module("relu", nn::ReLU(true));
  maxpool = register_module("maxpool", nn::MaxPool2d(3, {.stride = 2, .padding = 1}));
  // Four stages; each after the first halves the resolution and doubles the width.
  layer1 = register_module("layer1", make_layer(64, layers[0], 1));
  layer2 = register_module("layer2", make_layer(128, layers[1], 2));
  layer3 = register_module("layer3", make_layer(256, layers[2], 2));
  layer4 = register_module("layer4", make_layer(512, layers[3], 2));
  avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
  int64_t expansion = block == ResNetBlock::Basic ? BasicBlockImpl::expansion : BottleneckImpl::expansion;
  fc = register_module("fc", nn::Linear(512 * expansion, options.num_classes));

  // He initialisation for convolutions (fan_out, ReLU); BatchNorm starts as the identity.
  for (auto& m : modules(false)) {
    if (auto* conv = dynamic_cast<nn::Conv2dImpl*>(m.get())) {
      nn::init::kaiming_normal_(conv->weight, 0.0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU);
    } else if (auto* bn = dynamic_cast<nn::BatchNorm2dImpl*>(m.get())) {
      nn::init::constant_(bn->weight, 1);
      nn::init::constant_(bn->bias, 0);
    }
  }
  if (options.zero_init_residual) {
    for (auto& m : modules(false)) {
      if (auto* b = dynamic_cast<BottleneckImpl*>(m.get())) nn::init::constant_(b->bn3->weight, 0);
      if (auto* b = dynamic_cast<BasicBlockImpl*>(m.get())) nn::init::constant_(b->bn2->weight, 0);
    }
  }
}

// One stage: `blocks` residual blocks; the first may change stride and width.
nn::Sequential ResNetImpl::make_layer(int64_t planes, int64_t blocks, int64_t stride) {
  bool basic = block_ == ResNetBlock::Basic;
  int64_t out = planes * (basic ? BasicBlockImpl::expansion : BottleneckImpl::expansion);
  // A projection shortcut where the shape changes.
  nn::Sequential downsample{nullptr};
  if (stride != 1 || inplanes_ != out)
    downsample = nn::Sequential(conv1x1(inplanes_, out, stride), nn::BatchNorm2d(out));
  auto make_block = [&](int64_t inplanes, int64_t s, nn::Sequential ds) -> nn::AnyModule {
    if (basic) return BasicBlock(inplanes, planes, s, ds, groups_, base_width_);
    return Bottleneck(inplanes, planes, s, ds, groups_, base_width_);
  };
  nn::Sequential layer;
  layer->push_back(make_block(inplanes_, stride, downsample));
  inplanes_ = out;
  for (int64_t i = 1; i < blocks; ++i) layer->push_back(make_block(inplanes_, 1, nullptr));
  return layer;
}

Tensor ResNetImpl::forward(const Tensor& x) {
  Tensor y = maxpool(bn1->forward_relu(conv1(x)));
  y = layer4(layer3(layer2(layer1(y))));
  return fc(flatten(avgpool(y), 1));
}

ResNet resnet18(ResNetOptions options) { return ResNet(ResNetBlock::Basic, std::array<int64_t, 4>{2, 2, 2, 2}, options); }
ResNet resnet34(ResNetOptions options) { return ResNet(ResNetBlock::Basic, std::array<int64_t, 4>{3, 4, 6, 3}, options); }
ResNet resnet50(ResNetOptions options) {
  return ResNet(ResNetBlock::Bottleneck, std::array<int64_t, 4>{3, 4, 6, 3}, options);
}
ResNet resnet101(ResNetOptions options) {
  return ResNet(ResNetBlock::Bottleneck, std::array<int64_t, 4>{3, 4, 23, 3}, options);
}
ResNet resnet152(ResNetOptions options) {
  return ResNet(ResNetBlock::Bottleneck, std::array<int64_t, 4>{3, 8, 36, 3}, options);
}
ResNet resnext50_32x4d(ResNetOptions options) {
  options.groups = 32;
  options.width_per_group = 4;
  return resnet50(options);
}
ResNet wide_resnet50_2(ResNetOptions options) {
  options.width_per_group = 128;
  return resnet50(options);
}

}  // namespace kiln::models
