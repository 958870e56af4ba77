// Sample transforms (torchvision's names): Normalize, RandomCrop, RandomHorizontalFlip.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data::transforms {

// (x - mean[c]) / std[c] for each channel c of a floating-point tensor: dim -3 is the channel dim
// of a [..., C, H, W] tensor (an image, a batch of them, a clip), as torchvision's; dim 0 of a [C]
// or [C, L] one. One mean and std may serve every channel. Returns a new tensor of the input's
// dtype (16-bit ones computed in float32 and rounded once).
class Normalize {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor operator()(const Tensor& x, SampleGenerator& gen) const;
  Tensor operator()(const Tensor& x) const;

 private:
  std::vector<double> mean_, std_;
};

// Pads the last two dims of a [..., H, W] tensor with `padding` zeros on every side, then cuts
// a size x size window at a random place: top = randint(H + 2p - size + 1), then
// left = randint(W + 2p - size + 1), as torchvision draws them.
class RandomCrop {
 public:
  explicit RandomCrop(int64_t size, int64_t padding = 0);
  Tensor operator()(const Tensor& x, SampleGenerator& gen) const;

 private:
  int64_t size_, padding_;
};

// Mirrors the last dim when one uniform draw is below p (every call draws once).
class RandomHorizontalFlip {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor operator()(const Tensor& x, SampleGenerator& gen) const;

 private:
  double p_;
};

}  // namespace kiln::data::transforms
