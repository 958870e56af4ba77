// kiln::optim: optimizers (SGD, Adam, AdamW, RMSprop, Adagrad) and learning-rate schedulers, as
// torch::optim.
#pragma once

#include "kiln/optim/adam.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/sgd.h"
