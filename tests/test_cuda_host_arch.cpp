// Which GPUs a build's device code runs on (backend/cuda/arch_support.h), checked on the CPU: a
// GPU outside the build's architectures is refused with a rebuild hint instead of failing at its
// first kernel with "no kernel image is available".
#include <gtest/gtest.h>

#include "backend/cuda/arch_support.h"

using namespace kiln::backend::cuda;
using Names = std::vector<std::string>;

TEST(CudaHostArch, NamesFollowCMakesEntries) {
  EXPECT_EQ(arch_names("90"), (Names{"sm_90", "compute_90"}));
  EXPECT_EQ(arch_names("80-real;90"), (Names{"sm_80", "sm_90", "compute_90"}));
  EXPECT_EQ(arch_names("80-real,90-virtual"), (Names{"sm_80", "compute_90"}));
  EXPECT_EQ(arch_names("90a-real;100f"), (Names{"sm_90a", "sm_100f", "compute_100f"}));
  EXPECT_EQ(arch_names("native"), (Names{"native"}));
  EXPECT_EQ(arch_names("sm_90;;9x"), Names{});  // not CMake's spelling: nothing
}

TEST(CudaHostArch, MachineCodeRunsWithinItsMajorVersionAndPtxOnEveryNewerGpu) {
  // The default build (sm_90 and its PTX): the H100/H200, and Blackwell through the PTX.
  EXPECT_TRUE(arch_list_runs_on("90", 90));
  EXPECT_TRUE(arch_list_runs_on("90", 100));
  EXPECT_TRUE(arch_list_runs_on("90", 120));
  EXPECT_FALSE(arch_list_runs_on("90", 80));
  EXPECT_FALSE(arch_list_runs_on("90", 89));
  // Machine code alone: the same major version, an equal or newer minor one.
  EXPECT_TRUE(arch_list_runs_on("80-real", 80));
  EXPECT_TRUE(arch_list_runs_on("80-real", 86));
  EXPECT_TRUE(arch_list_runs_on("80-real", 89));
  EXPECT_FALSE(arch_list_runs_on("80-real", 90));
  EXPECT_FALSE(arch_list_runs_on("86-real", 80));
  EXPECT_FALSE(arch_list_runs_on("90-real", 100));
  // PTX alone: any GPU at least as new.
  EXPECT_TRUE(arch_list_runs_on("80-virtual", 120));
  EXPECT_FALSE(arch_list_runs_on("80-virtual", 75));
  // Arch-specific code runs on that GPU only; family-specific within its major version.
  EXPECT_TRUE(arch_list_runs_on("90a", 90));
  EXPECT_FALSE(arch_list_runs_on("90a", 100));
  EXPECT_TRUE(arch_list_runs_on("100f", 103));
  EXPECT_FALSE(arch_list_runs_on("100f", 120));
  // Lists: any entry that runs is enough.
  EXPECT_TRUE(arch_list_runs_on("80-real;90", 86));
  EXPECT_TRUE(arch_list_runs_on("75,90-real", 75));
  EXPECT_FALSE(arch_list_runs_on("75-real,90-real", 80));
  // CMake's symbolic values cover the GPUs they were built for.
  EXPECT_TRUE(arch_list_runs_on("all", 80));
  EXPECT_TRUE(arch_list_runs_on("native", 75));
  EXPECT_FALSE(arch_list_runs_on("", 90));
}

TEST(CudaHostArch, TheProblemSaysWhatTheBuildHasAndHowToRebuild) {
  EXPECT_EQ(arch_list_problem("90", 90, "cuda:0 (NVIDIA H200)"), "");
  EXPECT_EQ(arch_list_problem("90", 80, "cuda:0 (NVIDIA A100-SXM4-80GB)"),
            "cuda:0 (NVIDIA A100-SXM4-80GB) has compute capability 8.0, and this build of Kiln has GPU code for "
            "sm_90, compute_90 only: rebuild with -DKILN_CUDA_ARCHITECTURES=\"90;80\"");
  // The definition's ',' between entries is CMake's ';' again in the hint.
  EXPECT_EQ(arch_list_problem("90-real,100", 86, "cuda:1 (NVIDIA RTX A6000)"),
            "cuda:1 (NVIDIA RTX A6000) has compute capability 8.6, and this build of Kiln has GPU code for "
            "sm_90, sm_100, compute_100 only: rebuild with -DKILN_CUDA_ARCHITECTURES=\"90-real;100;86\"");
  EXPECT_EQ(arch_list_problem("", 90, "cuda:0 (x)"),
            "cuda:0 (x) has compute capability 9.0, and this build of Kiln has GPU code for no architecture: "
            "rebuild with -DKILN_CUDA_ARCHITECTURES=\"90\"");
}
