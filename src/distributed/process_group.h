// The transport under kiln::distributed: a process group runs blocking collectives on dense host
// buffers. distributed.cpp calls it from one background thread only, in call order, after it has
// checked that every process called the same collective on the same kind of tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/cuda.h"
#include "kiln/distributed.h"

namespace kiln::distributed::detail {

// What a reduction runs on: the MPI-native element types, and float16/bfloat16 summed in their
// own type (rounded at every step, as NCCL's: only for all_reduce_in_own_dtype_async; the other
// reductions of 16-bit floats run in float32, converted by the caller).
enum class Elem : int8_t { Bool, UInt8, Int32, Int64, Float32, Float64, Float16, BFloat16 };

// all_reduce_async's sum, run in t's own dtype even where it has 16 bits (all_reduce sums those in
// float32): half the bytes on the wire, each step rounded to 16 bits (DDP's compression hooks,
// as torch's fp16_compress_hook, whose NCCL sum does the same). Every process must call it alike.
[[nodiscard]] Work all_reduce_in_own_dtype_async(Tensor& t);

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int local_rank() const = 0;
  virtual std::string name() const = 0;
  // data (count elements) = the elementwise reduction over processes. Average is done by the
  // caller (a Sum, then a division).
  virtual void all_reduce(void* data, int64_t count, Elem elem, ReduceOp op) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // out (world_size * bytes) = every process's `in` (bytes each), in rank order.
  virtual void all_gather(const void* in, void* out, int64_t bytes) = 0;
  // all_gather of a few bytes that waits for the slowest process without spinning: every
  // collective starts with one (its description), so a process that is ahead sleeps there
  // instead of burning a core the others compute on. `timed`: a process that does not come within
  // KILN_DISTRIBUTED_TIMEOUT ends the job (the last exchange of a process that ends waits for
  // the others as long as they compute, as MPI_Finalize would).
  virtual void rendezvous(const void* in, void* out, int64_t bytes, bool timed = true) {
    (void)timed;
    all_gather(in, out, bytes);
  }
  // out (count elements) = this process's share of the reduction of in (world_size * count).
  virtual void reduce_scatter(const void* in, void* out, int64_t count, Elem elem, ReduceOp op) = 0;
  virtual void barrier() = 0;
  // Ends every process of the job with `code`; may be called from any thread.
  [[noreturn]] virtual void abort(int code) = 0;
  // Called on the communication thread before the group is destroyed.
  virtual void finalize() = 0;
};

// Collectives on one GPU's memory (NCCL), queued on `stream` (the process's communication stream
// for that GPU) and returning once queued; called on the communication thread after the
// agreement check, so every process queues the same sequence.
class DeviceGroup {
 public:
  virtual ~DeviceGroup() = default;
  virtual void all_reduce(void* data, int64_t count, ScalarType dtype, ReduceOp op, const cuda::Stream& stream) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root, const cuda::Stream& stream) = 0;
  // out (world_size * bytes) = every process's `in`, in rank order.
  virtual void all_gather(const void* in, void* out, int64_t bytes, const cuda::Stream& stream) = 0;
  // out (count elements) = this process's share of the reduction of in (world_size * count).
  virtual void reduce_scatter(const void* in, void* out, int64_t count, ScalarType dtype, ReduceOp op,
                              const cuda::Stream& stream) = 0;
};

// Whether Kiln was built with NCCL (then CUDA tensors travel GPU to GPU; else through host memory).
bool nccl_built();
// The library versions built in ("" when not built): MPI's own description of itself (the first
// line of MPI_Get_library_version, callable before init) and NCCL's "major.minor.patch".
std::string mpi_version();
std::string nccl_version();
// The NCCL communicator of every process's GPU `device` (one per process), its unique id sent
// from rank 0 over `host`; a collective call on every process, on the communication thread.
std::unique_ptr<DeviceGroup> make_nccl_group(ProcessGroup& host, int device);

// Whether an MPI launcher (mpirun, srun, ...) started this process, from its environment.
bool launched_by_mpi();
// An error naming `op` where an MPI launcher started this process but init() has not been called
// (every process would be a world of one, its collectives doing nothing), as torch's "default
// process group has not been initialized".
void check_initialized(const char* op);
// The MPI process group (MPI_Init_thread on the calling thread, which must then make every
// call), or an error when Kiln was built without MPI.
std::unique_ptr<ProcessGroup> make_mpi_group();

}  // namespace kiln::distributed::detail
