// kiln::optim: optimizers (SGD) and learning-rate schedulers, as torch::optim.
#pragma once

#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/sgd.h"
