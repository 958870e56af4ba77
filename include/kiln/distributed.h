// kiln::distributed (torch.distributed): processes that train together, and collectives on
// tensors between them. MPI carries CPU tensors (launch with mpirun, on one machine or, with a
// hostfile, on several); NCCL carries CUDA tensors where Kiln was built with it.
//
//   mpirun -np 2 ./my_training_program
//   kiln::distributed::init();                    // reads rank and world size from the launcher
//   kiln::distributed::all_reduce(t);             // t = the sum over all processes, in place
//
// A program that never calls init() is a world of one: rank 0, world size 1, and every
// collective leaves its tensors as they are (all_gather returns a copy of the one tensor).
//
// Every collective first checks that all processes called the same collective on tensors of the
// same dtype and shape (and the same root); a mismatch is a kiln::Error on every process naming
// what each had, never corrupted memory. Collectives run in the order they are called, on one
// background thread per process; the *_async forms return a Work to wait() on.
//
// Failure: after init(), an uncaught exception or a call to abort() on any process prints
// "[distributed] rank R failed: ..." once and ends every process of the job with a non-zero
// status (no process waits forever on a peer that died).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::distributed {

// Starts the process group: MPI (MPI_Init_thread) when launched by mpirun or another MPI
// launcher; a world of one when not launched by one. Calling it twice is an error. A GPU job
// then makes its GPU current, as with torch.cuda.set_device(local_rank):
// kiln::cuda::set_device(local_rank() % kiln::cuda::device_count()) (kiln::train does); otherwise
// each op on it makes GPU 0 current again afterwards, and every process keeps a context there.
// (init() does not, so that a CPU job on a machine with GPUs makes no CUDA context.)
void init();
bool is_initialized();
// Ends the process group (waits for queued collectives first). Called at exit if not before.
// Every process of the job must end it: it waits for the others to finish (for as long as they
// compute), and if one of them is in a collective instead, that collective fails naming this
// process and the whole job ends with that error (not a wait for the timeout).
void finalize();

int rank();        // 0 .. world_size() - 1
int world_size();  // 1 without init()
int local_rank();  // the rank among the processes on this machine: a GPU job uses cuda:local_rank
// "mpi", or "none" for a world of one without a launcher.
std::string backend_name();
// The transports this build of Kiln has, with their versions: "MPI (Open MPI v4.1.4), NCCL
// 2.27.7", or "none (a world of one only)". Needs no init().
std::string transports();

enum class ReduceOp { Sum, Average, Max, Min };

// A collective in flight. wait() blocks until it has finished and rethrows its error, if any (at
// every call); is_completed() is true once the result is in the tensor (or the collective
// failed: wait() then throws); a Work destroyed unwaited waits first. After finalize(), a
// collective is an error. For CUDA tensors (NCCL), as in PyTorch, "finished" means
// queued: wait() returns once the collective is queued on the communication stream and the
// current stream is made to wait for it, so work queued after wait() sees the result, and
// is_completed() says the same of queueing; the host waits for the GPU only where it reads it
// (item(), a copy to the CPU, cuda::synchronize).
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  Work(Work&&) noexcept = default;
  Work& operator=(Work&&) noexcept;
  ~Work();
  void wait();
  bool is_completed() const;

 private:
  std::shared_ptr<State> state_;
};

// In place: t becomes the reduction over all processes. Average needs a floating-point tensor.
// Bool tensors reduce as logical or (Sum, Max) and logical and (Min). float16 and bfloat16 are
// summed in float32 and rounded once.
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
[[nodiscard]] Work all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum);
// In place: t becomes root's t.
void broadcast(Tensor& t, int root = 0);
[[nodiscard]] Work broadcast_async(Tensor& t, int root = 0);
// Every process's t, in rank order (each a new tensor shaped like t).
std::vector<Tensor> all_gather(const Tensor& t);
// The inputs reduced elementwise over processes, and this process's share: input's first dim
// split into world_size() equal parts (input.size(0) must divide), part rank() returned.
Tensor reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::Sum);
// Returns when every process has called it.
void barrier();

// Ends the whole job: prints "[distributed] rank R failed: message" and exits every process
// with status 1. Without init() (or in a world of one) it prints the same line and exits.
[[noreturn]] void abort(const std::string& message);

}  // namespace kiln::distributed
