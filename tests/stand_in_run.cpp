// KILN_TEST_CUDA_STAND_IN=1 on a machine without a GPU: the whole test run sees the stand-in
// cuda:0 (tests/stand_in_device.h: host memory, the CPU's kernels for the ops that have a CUDA
// kernel, offered to them through the CUDA kernels' own `supports` rules), so the Cuda.* tests
// and the device-parameterised suites run on it. A dry run of the GPU tests' own logic (dtypes,
// devices, shapes, what they expect of the op layer and of the kernels' `supports` rules), before
// a GPU runs them:
//   KILN_TEST_CUDA_STAND_IN=1 build/tests/kiln_tests --gtest_filter='Cuda.*:OpTable*'
// (ctest's gpu_tests_dry_run runs Cuda.*, CudaConv.* and NnOpsDevices.* so in CUDA builds.)
// What needs the CUDA runtime itself (NCCL, cuda::Stream and Event) fails there, and tests of the
// machine without a GPU skip or fail.
#include <cstdlib>
#include <string>

#include "kiln/kiln.h"
#include "stand_in_device.h"

namespace {

// Installed before GoogleTest builds its parameterised suites from test::devices(): static
// initialisers of the test executable run after libkiln's (its kernel table is complete).
[[maybe_unused]] const bool g_stand_in = [] {
  const char* v = std::getenv("KILN_TEST_CUDA_STAND_IN");
  if (v == nullptr || std::string(v) != "1" || kiln::cuda::is_available()) return false;
  static kiln::test::StandInCuda stand_in(kiln::test::StandInCuda::Kernels::CpuWhereCudaHasOne);
  return true;
}();

}  // namespace
