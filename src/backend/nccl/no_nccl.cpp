// kiln::distributed without NCCL: CUDA tensors go through host memory and MPI.
#include "distributed/process_group.h"
#include "kiln/error.h"

namespace kiln::distributed::detail {

bool nccl_built() { return false; }
std::string nccl_version() { return ""; }

std::unique_ptr<DeviceGroup> make_nccl_group(ProcessGroup&, int) {
  KILN_FAIL("distributed", "Kiln was built without NCCL");
}

}  // namespace kiln::distributed::detail
