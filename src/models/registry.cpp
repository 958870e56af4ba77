// kiln::models::create: the table from model names to constructors.
#include "kiln/models/registry.h"

#include <functional>
#include <utility>

#include "kiln/models.h"

namespace kiln::models {
namespace {

using Factory = std::function<nn::AnyModule(int64_t)>;

const std::vector<std::pair<std::string, Factory>>& table() {
  static const std::vector<std::pair<std::string, Factory>> t = {
      {"small_cnn", [](int64_t n) { return nn::AnyModule(small_cnn({.num_classes = n})); }},
      {"resnet18", [](int64_t n) { return nn::AnyModule(resnet18({.num_classes = n})); }},
      {"resnet34", [](int64_t n) { return nn::AnyModule(resnet34({.num_classes = n})); }},
      {"resnet50", [](int64_t n) { return nn::AnyModule(resnet50({.num_classes = n})); }},
      {"resnet101", [](int64_t n) { return nn::AnyModule(resnet101({.num_classes = n})); }},
      {"resnet152", [](int64_t n) { return nn::AnyModule(resnet152({.num_classes = n})); }},
      {"resnext50_32x4d", [](int64_t n) { return nn::AnyModule(resnext50_32x4d({.num_classes = n})); }},
      {"wide_resnet50_2", [](int64_t n) { return nn::AnyModule(wide_resnet50_2({.num_classes = n})); }},
      {"vgg11", [](int64_t n) { return nn::AnyModule(vgg11({.num_classes = n})); }},
      {"vgg13", [](int64_t n) { return nn::AnyModule(vgg13({.num_classes = n})); }},
      {"vgg16", [](int64_t n) { return nn::AnyModule(vgg16({.num_classes = n})); }},
      {"vgg19", [](int64_t n) { return nn::AnyModule(vgg19({.num_classes = n})); }},
      {"vgg11_bn", [](int64_t n) { return nn::AnyModule(vgg11_bn({.num_classes = n})); }},
      {"vgg13_bn", [](int64_t n) { return nn::AnyModule(vgg13_bn({.num_classes = n})); }},
      {"vgg16_bn", [](int64_t n) { return nn::AnyModule(vgg16_bn({.num_classes = n})); }},
      {"vgg19_bn", [](int64_t n) { return nn::AnyModule(vgg19_bn({.num_classes = n})); }},
  };
  return t;
}

}  // namespace

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, f] : table()) out.push_back(name);
    return out;
  }();
  return names;
}

nn::AnyModule create(const std::string& name, int64_t num_classes) {
  KILN_CHECK(num_classes > 0, "models::create", "num_classes must be positive, got ", num_classes);
  for (const auto& [n, factory] : table())
    if (n == name) return factory(num_classes);
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  KILN_FAIL("models::create", "unknown model \"", name, "\"; known models: ", known);
}

}  // namespace kiln::models
