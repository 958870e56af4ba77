// Everything a Kiln user includes, as <torch/torch.h> is for libtorch: tensors, ops, autograd,
// random numbers, the runtime, autocast, the profiler, nn, optim, models, data, io and text.
#pragma once

#include "kiln/amp.h"
#include "kiln/autocast.h"
#include "kiln/autograd.h"
#include "kiln/cuda.h"
#include "kiln/data.h"
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/io.h"
#include "kiln/models.h"
#include "kiln/nn.h"
#include "kiln/ops.h"
#include "kiln/optim.h"
#include "kiln/profiler.h"
#include "kiln/random.h"
#include "kiln/runtime.h"
#include "kiln/scalar.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"
#include "kiln/text.h"
