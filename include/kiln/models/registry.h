// kiln::models::create: a model by its torchvision name ("resnet18", "vgg16_bn", "small_cnn").
#pragma once

#include <string>
#include <vector>

#include "kiln/nn/container.h"

namespace kiln::models {

// The names create() knows, in a fixed order.
const std::vector<std::string>& model_names();
// A freshly initialised model; `m(x)` runs it and `m->parameters()` reaches its Module.
// An unknown name is a kiln::Error listing the known ones.
nn::AnyModule create(const std::string& name, int64_t num_classes);

}  // namespace kiln::models
