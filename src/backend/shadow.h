// Shadow mode: a device op checked against the CPU kernel on copies of its inputs.
#pragma once

#include <span>
#include <string>

#include "backend/dispatch.h"

namespace kiln::backend::detail {

// Runs `device_kernel` on args, then `cpu_kernel` on host copies of the inputs (and of the
// outputs as they were before, for ops that update them in place), and compares the outputs.
void run_shadowed(Op op, Kernel device_kernel, Kernel cpu_kernel, KernelArgs& args);

// Nonzero while shadow mode's own ops run (its copies to the host, |inputs|, the comparison): a
// profiler session does not count them as the program's.
extern thread_local int t_shadow_helpers;

// "float32 [4, 4], bool [4], none": the dtypes and shapes of an op's operands, for messages.
std::string describe_operands(std::span<const Tensor> ts);

}  // namespace kiln::backend::detail
