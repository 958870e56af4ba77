// kiln::models: BERT, ResNet, VGG and SmallCNN, and create() (image models) by name.
#pragma once

#include "kiln/models/bert.h"
#include "kiln/models/registry.h"
#include "kiln/models/resnet.h"
#include "kiln/models/small_cnn.h"
#include "kiln/models/vgg.h"
