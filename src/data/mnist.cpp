// MNIST / Fashion-MNIST: finds the IDX files, checks their shapes and labels, serves examples.
#include "kiln/data/mnist.h"

#include <filesystem>

#include "kiln/data/idx.h"

namespace kiln::data {
namespace {

constexpr int64_t kSide = 28;
constexpr int64_t kClasses = 10;

// The path of `name` or `name`.gz under root; an error naming both and the directory if neither.
std::string find_file(const std::filesystem::path& root, const std::string& name) {
  std::error_code ec;
  for (const std::string& candidate : {name, name + ".gz"}) {
    auto path = root / candidate;
    if (std::filesystem::is_regular_file(path, ec)) return path.string();
  }
  KILN_CHECK(!std::filesystem::is_regular_file(root, ec), "MNIST", root.string(),
             " is a file; MNIST data is a directory of IDX files (train-images-idx3-ubyte[.gz] and the others)");
  KILN_CHECK(std::filesystem::is_directory(root, ec), "MNIST", "directory ", root.string(),
             " does not exist (Fashion-MNIST: apt install dataset-fashion-mnist puts it in "
             "/usr/share/datasets/fashion-mnist)");
  KILN_FAIL("MNIST", "missing ", name, " (or ", name, ".gz) in directory ", root.string());
}

}  // namespace

MNIST::MNIST(const std::string& root, bool train) : train_(train) {
  std::string prefix = train ? "train" : "t10k";
  std::string image_path = find_file(root, prefix + "-images-idx3-ubyte");
  std::string label_path = find_file(root, prefix + "-labels-idx1-ubyte");
  Tensor images = read_idx(image_path);
  Tensor labels = read_idx(label_path);
  KILN_CHECK(images.dtype() == kUInt8 && images.dim() == 3 && images.size(1) == kSide && images.size(2) == kSide,
             "MNIST", image_path, ": expected uint8 images [N, 28, 28], got ", images.dtype(), " ", images.shape());
  KILN_CHECK(labels.dtype() == kUInt8 && labels.dim() == 1, "MNIST", label_path, ": expected uint8 labels [N], got ",
             labels.dtype(), " ", labels.shape());
  KILN_CHECK(images.size(0) == labels.size(0), "MNIST", image_path, " has ", images.size(0), " images but ",
             label_path, " has ", labels.size(0), " labels");
  const uint8_t* l = labels.data_ptr<uint8_t>();
  targets_ = empty({labels.size(0)}, kInt64);
  int64_t* t = targets_.data_ptr<int64_t>();
  for (int64_t i = 0; i < labels.size(0); ++i) {
    KILN_CHECK(l[i] < kClasses, "MNIST", label_path, ": label ", int{l[i]}, " at index ", i, " is not below 10");
    t[i] = l[i];
  }
  images_ = images;
}

Example MNIST::get(int64_t index) const {
  check_index(index, size(), "MNIST");
  Tensor image = empty({1, kSide, kSide}, kFloat32);
  const uint8_t* src = images_.data_ptr<uint8_t>() + index * kSide * kSide;
  float* dst = image.data_ptr<float>();
  for (int64_t i = 0; i < kSide * kSide; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  Tensor target = empty({}, kInt64);
  *target.data_ptr<int64_t>() = targets_.data_ptr<int64_t>()[index];
  return {image, target};
}

}  // namespace kiln::data
