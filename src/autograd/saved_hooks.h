// The saved-tensor hooks in effect on this thread (kiln/autograd/graph.h), for function.cpp.
#pragma once

#include <memory>

#include "kiln/autograd/graph.h"

namespace kiln::autograd::detail {

struct SavedHooks {
  graph::SavedTensorsHooks::PackHook pack;
  graph::SavedTensorsHooks::UnpackHook unpack;
};

// The innermost SavedTensorsHooks alive on this thread; nullptr when none.
std::shared_ptr<const SavedHooks> current_saved_hooks();

}  // namespace kiln::autograd::detail
