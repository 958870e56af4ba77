// kiln::data, all of it: IDX files, datasets, MNIST, transforms and the DataLoader.
#pragma once

#include "kiln/data/dataloader.h"
#include "kiln/data/dataset.h"
#include "kiln/data/idx.h"
#include "kiln/data/mnist.h"
#include "kiln/data/sampler.h"
#include "kiln/data/transforms.h"
