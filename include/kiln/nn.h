// kiln::nn: modules, containers, layers, initialisers and the functional ops (torch::nn).
#pragma once

#include "kiln/nn/activation.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/batchnorm.h"
#include "kiln/nn/container.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/expanding_array.h"
#include "kiln/nn/functional.h"
#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/normalization.h"
#include "kiln/nn/pimpl.h"
#include "kiln/nn/pooling.h"
#include "kiln/nn/transformer.h"
#include "kiln/nn/utils.h"
