// kiln::nn::parallel::DistributedDataParallel (torch.nn.parallel.DistributedDataParallel): one
// replica of a module per process, gradients averaged over the processes during backward.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/nn/container.h"

namespace kiln::nn::parallel {

// Fields as torch's DistributedDataParallel's keyword arguments.
struct DistributedDataParallelOptions {
  double bucket_cap_mb = 25;  // gradients are averaged in buckets of about this many MiB
  // Parameters that may get no gradient in some backward pass (an unused branch). Without it,
  // such a pass is an error naming them, as in PyTorch. With it, a parameter no process used
  // keeps its gradient as it was (none after zero_grad), so the optimizer skips it; one some
  // processes used gets the average, the others counting as zeros.
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;  // rank 0's buffers (batch-norm statistics) before each forward
  // false (torch's default): the average is copied into each parameter's own .grad(), which stays
  // the tensor it was. true: each .grad() becomes a view of its bucket (no copy, less memory),
  // overwritten by the next synchronised backward, so a gradient kept from an earlier step (a
  // log, a running average) changes under it unless cloned.
  bool gradient_as_bucket_view = false;
};

// How each bucket goes over the wire (libtorch's c10d::BuiltinCommHookType; the Python
// default_hooks' allreduce_hook, fp16_compress_hook and bf16_compress_hook).
enum class BuiltinCommHook {
  AllReduce,     // in the gradients' dtype (the default)
  Fp16Compress,  // float32 and float64 buckets sent as float16 (a half or a quarter of the bytes):
                 // each process's share rounded to float16 and summed in float16 (each step
                 // rounded, as torch's hook over NCCL); about three significant digits, and
                 // float16's range (shares under 6e-8 flush to zero, over 65504 overflow: a
                 // GradScaler's scaled gradients may)
  Bf16Compress,  // as Fp16Compress in bfloat16: float32's range, about two significant digits
};
// Compression pays where the link bounds the reduction (processes on several machines); between
// processes on one machine under MPI the casts and the 16-bit sums cost about what the bytes save
// (docs/perf.md: 100 MiB of float32 gradients in 0.10 s either way with bfloat16, 0.16 s with
// float16).

// Wraps a module replicated on every process of kiln::distributed:
//  - at construction, rank 0's parameters and buffers are copied to every process;
//  - before each forward, rank 0's buffers are (broadcast_buffers);
//  - during backward, the gradients are grouped into buckets (about bucket_cap_mb each, in
//    reverse order of registration, so that the first gradients backward produces fill the first
//    bucket); each bucket is averaged over the processes as soon as backward has produced all its
//    gradients, on kiln::distributed's communication thread while backward goes on; when
//    backward() returns, every parameter's .grad() holds the average over the processes.
// Every process must hold the same architecture: a parameter or buffer that differs in name,
// shape or dtype is an error at construction naming it, on every process.
// In a process an MPI launcher started, distributed::init() must come first.
// With a world of one it is the module itself. The optimizer takes module's parameters as usual.
class DistributedDataParallel {
 public:
  // `module`: a module holder (nn::Linear, models::ResNet, ...), a shared_ptr to a module, or an
  // AnyModule. One without a one-tensor forward (BERT's losses) is called through forward_with().
  template <class M>
    requires(!std::is_same_v<std::decay_t<M>, DistributedDataParallel>)
  explicit DistributedDataParallel(M&& module, DistributedDataParallelOptions options = {}) : options_(options) {
    if constexpr (std::is_constructible_v<AnyModule, M>) {
      any_ = AnyModule(std::forward<M>(module));
      module_ = any_.ptr();
    } else {
      module_ = detail::module_ptr(std::forward<M>(module));
    }
    setup();
  }
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  // Runs `fn`, which calls the module, as a forward of this wrapper: for forwards that take other
  // arguments, e.g. ddp.forward_with([&] { return bert->masked_lm_loss(ids, labels, mask); }).
  template <class F>
  Tensor forward_with(F&& fn) {
    before_forward();
    return std::forward<F>(fn)();
  }

  Module& module() const { return *module_; }
  Module* operator->() const { return module_.get(); }
  const DistributedDataParallelOptions& options() const { return options_; }

  // A forward run while alive makes its backward only accumulate gradients locally (torch's
  // no_sync(): what counts is where the forward ran, not the backward); the first backward of a
  // forward run after it averages everything accumulated.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // Sends the buckets compressed from the next synchronised backward on (16-bit buckets go as they
  // are). Once, on every process, outside a backward pass, as torch's register_comm_hook.
  void register_builtin_comm_hook(BuiltinCommHook hook);

  // The parameter names of each bucket, in the order they are reduced.
  std::vector<std::vector<std::string>> bucket_names() const;

  struct State;

 private:
  void setup();
  void before_forward();

  std::shared_ptr<Module> module_;
  AnyModule any_;
  DistributedDataParallelOptions options_;
  std::shared_ptr<State> state_;
};

}  // namespace kiln::nn::parallel
