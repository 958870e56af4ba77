// VGG (Simonyan & Zisserman, "Very Deep Convolutional Networks for Large-Scale Image Recognition", 2014).
#include "kiln/models/vgg.h"

namespace kiln::models {
namespace {

constexpr int64_t M = kMaxPool;
// The paper's configurations A (11 layers), B (13), D (16) and E (19).
const std::vector<int64_t> kCfgA = {64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
const std::vector<int64_t> kCfgB = {64, 64, M, 128, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
const std::vector<int64_t> kCfgD = {64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M};
const std::vector<int64_t> kCfgE = {64,  64,  M,   128, 128, M,   256, 256, 256, 256, M,
                                    512, 512, 512, 512, M,   512, 512, 512, 512, M};

VGG vgg(const std::vector<int64_t>& cfg, bool batch_norm, VGGOptions options) {
  return VGG(make_vgg_layers(cfg, batch_norm), options);
}

}  // namespace

nn::Sequential make_vgg_layers(const std::vector<int64_t>& cfg, bool batch_norm) {
  nn::Sequential layers;
  int64_t in_channels = 3;
  for (int64_t v : cfg) {
    if (v == kMaxPool) {
      layers->push_back(nn::MaxPool2d(2, {.stride = 2}));
      continue;
    }
    KILN_CHECK(v > 0, "make_vgg_layers", "channel counts must be positive or kMaxPool, got ", v);
    layers->push_back(nn::Conv2d(in_channels, v, 3, {.padding = 1}));
    if (batch_norm) layers->push_back(nn::BatchNorm2d(v));
    layers->push_back(nn::ReLU(true));
    in_channels = v;
  }
  return layers;
}

VGGImpl::VGGImpl(nn::Sequential features_, VGGOptions options) {
  KILN_CHECK(options.num_classes > 0, "VGG", "num_classes must be positive, got ", options.num_classes);
  features = register_module("features", features_);
  avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(7));
  classifier = register_module(
      "classifier", nn::Sequential(nn::Linear(512 * 7 * 7, 4096), nn::ReLU(true), nn::Dropout(options.dropout),
                                   nn::Linear(4096, 4096), nn::ReLU(true), nn::Dropout(options.dropout),
                                   nn::Linear(4096, options.num_classes)));
  if (!options.init_weights) return;
  for (auto& m : modules(false)) {
    if (auto* conv = dynamic_cast<nn::Conv2dImpl*>(m.get())) {
      nn::init::kaiming_normal_(conv->weight, 0.0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU);
      if (conv->bias.defined()) nn::init::constant_(conv->bias, 0);
    } else if (auto* bn = dynamic_cast<nn::BatchNorm2dImpl*>(m.get())) {
      nn::init::constant_(bn->weight, 1);
      nn::init::constant_(bn->bias, 0);
    } else if (auto* fc = dynamic_cast<nn::LinearImpl*>(m.get())) {
      nn::init::normal_(fc->weight, 0, 0.01);
      nn::init::constant_(fc->bias, 0);
    }
  }
}

Tensor VGGImpl::forward(const Tensor& x) { return classifier(flatten(avgpool(features(x)), 1)); }

VGG vgg11(VGGOptions options) { return vgg(kCfgA, false, options); }
VGG vgg13(VGGOptions options) { return vgg(kCfgB, false, options); }
VGG vgg16(VGGOptions options) { return vgg(kCfgD, false, options); }
VGG vgg19(VGGOptions options) { return vgg(kCfgE, false, options); }
VGG vgg11_bn(VGGOptions options) { return vgg(kCfgA, true, options); }
VGG vgg13_bn(VGGOptions options) { return vgg(kCfgB, true, options); }
VGG vgg16_bn(VGGOptions options) { return vgg(kCfgD, true, options); }
VGG vgg19_bn(VGGOptions options) { return vgg(kCfgE, true, options); }

}  // namespace kiln::models
