// kiln::distributed without MPI (Kiln built where MPI was not found): a world of one only.
#include "distributed/process_group.h"
#include "kiln/error.h"

namespace kiln::distributed::detail {

std::string mpi_version() { return ""; }

std::unique_ptr<ProcessGroup> make_mpi_group() {
  KILN_FAIL("distributed", "this process was started by an MPI launcher, but Kiln was built without MPI "
            "(apt-get install libopenmpi-dev openmpi-bin, then configure and build again)");
}

}  // namespace kiln::distributed::detail
