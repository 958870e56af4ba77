// MNIST and Fashion-MNIST (same file format): IDX files from a directory as a Dataset.
#pragma once

#include <string>

#include "kiln/data/dataset.h"

namespace kiln::data {

// Reads {train,t10k}-images-idx3-ubyte and {train,t10k}-labels-idx1-ubyte from `root`, each
// either raw or gzip-compressed with ".gz" appended (Debian's dataset-fashion-mnist installs
// the .gz files in /usr/share/datasets/fashion-mnist). Checks that the images are N x 28 x 28
// uint8, the labels N uint8 below 10, and that the counts agree. Examples are float32
// [1, 28, 28] images in [0, 1] (pixel / 255) with 0-d int64 labels.
class MNIST : public Dataset {
 public:
  explicit MNIST(const std::string& root, bool train = true);
  using Dataset::get;
  int64_t size() const override { return images_.size(0); }
  Example get(int64_t index) const override;
  // All images as stored (uint8 [N, 28, 28]) and all labels (int64 [N]).
  const Tensor& images() const { return images_; }
  const Tensor& targets() const { return targets_; }
  bool is_train() const { return train_; }

 private:
  Tensor images_, targets_;
  bool train_;
};

// Fashion-MNIST uses MNIST's file names and format; a name of its own for readable code.
class FashionMNIST : public MNIST {
 public:
  using MNIST::MNIST;
};

}  // namespace kiln::data
