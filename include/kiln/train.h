// kiln::train, all of it: the Trainer and its Task interface, the image-classification and
// masked-LM tasks, mixed precision, the device choice and the checkpoint helpers.
#pragma once

#include "kiln/train/checkpoint.h"
#include "kiln/train/device_choice.h"
#include "kiln/train/image_classification.h"
#include "kiln/train/masked_lm.h"
#include "kiln/train/mixed_precision.h"
#include "kiln/train/trainer.h"
