// kiln::optim: optimizers (SGD, Adam, AdamW) and learning-rate schedulers, as torch::optim.
#pragma once

#include "kiln/optim/adam.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/sgd.h"
