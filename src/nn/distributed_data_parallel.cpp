// DistributedDataParallel: gradient buckets averaged over the processes while backward runs, fed
// by a hook on every parameter's gradient accumulation, finished by a callback at the end of
// backward.
#include "kiln/nn/parallel.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <utility>

#include "core/tensor_util.h"
#include "distributed/process_group.h"
#include "kiln/autograd.h"
#include "kiln/distributed.h"
#include "kiln/ops.h"

namespace kiln::nn::parallel {

namespace dist = kiln::distributed;

struct DistributedDataParallel::State {
  struct Param {
    std::string name;
    Tensor tensor;
    int64_t bucket = 0, offset = 0;  // where its gradient sits in its bucket's buffer
    Tensor slot;                     // that part of the buffer, laid out like the parameter
    uint64_t hook = 0;
  };
  struct Bucket {
    std::vector<size_t> params;  // indices into `params`
    Tensor buffer;               // flat, the params' dtype and device
    Tensor wire;                 // the buffer compressed, while a comm hook compresses it
    int64_t pending = 0;         // gradients still to come in this backward
    dist::Work work;
  };
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::vector<uint8_t> ready;  // per param, in this backward
  std::vector<uint8_t> used;   // per param: got a gradient since the last synchronised backward (no_sync's too)
  bool sync = true;            // false under no_sync()
  bool graph_sync = true;      // sync as the last forward through the wrapper found it
  bool in_backward = false;    // the finishing callback is queued
  size_t next_launch = 0;      // buckets are launched in order, so every process queues them alike
  bool find_unused = false;
  bool as_bucket_view = false;
  std::optional<BuiltinCommHook> hook;

  void reset_backward() {
    std::fill(ready.begin(), ready.end(), 0);
    for (Bucket& b : buckets) b.pending = static_cast<int64_t>(b.params.size());
    next_launch = 0;
    in_backward = false;
  }

  // Copies the bucket's gradients into its buffer (zeros for a parameter without one) and starts
  // averaging it. Float32 and float64 gradients are divided by the world size on the way in and then
  // summed, so the average needs no pass of its own (as PyTorch's reducer does); 16-bit ones are
  // averaged by all_reduce in float32 (MPI: the sum divided; NCCL: its ncclAvg) and rounded to 16
  // bits once, since dividing first by 1/3 in bfloat16 (0.334) would bias them. A gradient that already
  // is its slot (accumulated into last step's average) is divided in place, or left as it is.
  void launch(Bucket& b) {
    NoGradGuard ng;
    const ScalarType dt = b.buffer.dtype();
    const bool divide_first = dt == kFloat32 || dt == kFloat64;
    const double share = 1.0 / dist::world_size();
    for (size_t i : b.params) {
      Param& p = params[i];
      const Tensor g = p.tensor.grad();
      if (!g.defined()) {
        p.slot.zero_();
      } else if (divide_first) {
        mul_out(p.slot, g, share);
      } else if (!g.is_same(p.slot)) {
        p.slot.copy_(g);
      }
    }
    const BuiltinCommHook h = hook.value_or(BuiltinCommHook::AllReduce);
    if (divide_first && h != BuiltinCommHook::AllReduce) {
      // The shares rounded to 16 bits and summed in 16 bits: half the bytes on the wire.
      b.wire = b.buffer.to(h == BuiltinCommHook::Fp16Compress ? kFloat16 : kBFloat16);
      b.work = dist::detail::all_reduce_in_own_dtype_async(b.wire);
      return;
    }
    b.work = dist::all_reduce_async(b.buffer, divide_first ? dist::ReduceOp::Sum : dist::ReduceOp::Average);
  }

  // Waits for a bucket's reduction; a compressed one is brought back into the buffer.
  void finish(Bucket& b) {
    b.work.wait();
    if (!b.wire.defined()) return;
    b.buffer.copy_(b.wire);
    b.wire = Tensor();
  }

  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(buckets[next_launch++]);
  }

  void on_gradient(size_t index) {
    used[index] = 1;
    if (!graph_sync) return;
    if (!in_backward) {
      in_backward = true;
      std::weak_ptr<State> self = weak_self;
      autograd::queue_callback([self] {
        if (auto s = self.lock()) s->finish_backward();
      });
    }
    if (ready[index]) return;
    ready[index] = 1;
    --buckets[static_cast<size_t>(params[index].bucket)].pending;
    launch_ready();
  }

  // End of backward: every bucket reduced; each gradient gets its slot of the bucket (the
  // average): copied into the parameter's own .grad() or, with gradient_as_bucket_view, the slot
  // itself (no copy), valid until the next synchronised backward reuses the bucket. With
  // find_unused_parameters, a parameter that no process used keeps its gradient as it was (none
  // after zero_grad), as in PyTorch: which ones is known from every process's used flags (one
  // small all-reduce each backward), so the optimizer skips them as it would without DDP.
  void finish_backward() {
    std::vector<std::string> unused;
    for (size_t i = 0; i < params.size(); ++i)
      if (!ready[i]) unused.push_back(params[i].name);
    if (!unused.empty() && !find_unused) {
      // Every process runs the same model, so each finds the same parameters and stops here
      // alike; buckets already started finish first.
      for (size_t b = 0; b < next_launch; ++b) finish(buckets[b]);
      reset_backward();
      std::string names;
      for (size_t i = 0; i < unused.size() && i < 20; ++i) names += (i ? ", " : "") + unused[i];
      if (unused.size() > 20) names += ", ...";
      KILN_FAIL("DistributedDataParallel", unused.size(), " parameter(s) received no gradient in this backward pass: ",
                names, " (construct it with find_unused_parameters = true if some parameters are not used in every "
                "forward)");
    }
    NoGradGuard ng;
    Tensor any;  // per parameter: whether any process used it (find_unused only)
    if (find_unused) {  // used in this backward or in the no_sync ones since the last sync
      any = empty({static_cast<int64_t>(params.size())}, kBool);
      std::copy(used.begin(), used.end(), any.data_ptr<bool>());
    }
    std::fill(used.begin(), used.end(), 0);
    for (size_t i = 0; i < params.size(); ++i)
      if (!ready[i]) {
        ready[i] = 1;
        --buckets[static_cast<size_t>(params[i].bucket)].pending;
      }
    launch_ready();
    if (any.defined()) dist::all_reduce(any, dist::ReduceOp::Max);  // after the buckets: queued alike everywhere
    const bool* any_used = any.defined() ? any.data_ptr<bool>() : nullptr;
    for (Bucket& b : buckets) {
      finish(b);
      for (size_t i : b.params) {
        if (any_used && !any_used[i]) continue;
        Param& p = params[i];
        Tensor g = p.tensor.grad();
        if (as_bucket_view || !g.defined()) p.tensor.set_grad(as_bucket_view ? p.slot : p.slot.clone());
        else if (!g.is_same(p.slot)) g.copy_(p.slot);
      }
    }
    reset_backward();
  }

  std::weak_ptr<State> weak_self;
};

namespace {
// Every process's parameters and buffers, names, shapes and dtypes, the same as rank 0's: rank 0's
// list goes to every process, each compares it with its own, and where any differs every process
// fails, the one that differs naming the first tensor (a broadcast of the first differing shape
// said only "[broadcast] the processes disagree", or, with the same shapes in another order,
// nothing at all). Once, at construction.
void check_same_module_everywhere(const Module& module) {
  if (dist::world_size() == 1) return;
  std::vector<std::string> lines;
  std::string mine;
  for (const auto& [kind, named] : {std::pair{"parameter", module.named_parameters()}, std::pair{"buffer", module.named_buffers()}})
    for (const auto& [name, t] : named) {
      std::ostringstream os;
      os << kind << " " << name << " " << t.dtype() << " " << t.shape();
      lines.push_back(os.str());
      mine += lines.back() + "\n";
    }
  Tensor size = tensor({static_cast<int64_t>(mine.size())}, kInt64);
  dist::broadcast(size, 0);
  Tensor bytes = empty({size.item<int64_t>()}, kUInt8);
  if (dist::rank() == 0) std::copy(mine.begin(), mine.end(), bytes.data_ptr<uint8_t>());
  dist::broadcast(bytes, 0);
  const std::vector<uint8_t> got = bytes.to_vector<uint8_t>();
  const std::string rank0_text(got.begin(), got.end());
  Tensor differs = tensor({static_cast<int64_t>(rank0_text != mine)}, kInt64);
  dist::all_reduce(differs, dist::ReduceOp::Max);
  if (differs.item<int64_t>() == 0) return;
  if (rank0_text != mine) {
    std::vector<std::string> rank0;
    std::istringstream in(rank0_text);
    for (std::string line; std::getline(in, line);) rank0.push_back(line);
    size_t i = 0;
    while (i < lines.size() && i < rank0.size() && lines[i] == rank0[i]) ++i;
    KILN_FAIL("DistributedDataParallel", "every process must hold the same module: tensor ", i, " is ",
              i < rank0.size() ? rank0[i] : "nothing", " on rank 0 but ", i < lines.size() ? lines[i] : "nothing",
              " on rank ", dist::rank(), " (rank 0 has ", rank0.size(), " tensors, rank ", dist::rank(), " ",
              lines.size(), ")");
  }
  KILN_FAIL("DistributedDataParallel", "every process must hold the same module, but another process's differs "
            "from rank 0's (its error names the tensor)");
}

// Rank 0's buffers to every process in one broadcast per device and dtype: flattened into one
// tensor, broadcast, and copied back on the other processes (PyTorch's _sync_buffers coalesces
// them too). One broadcast a buffer cost ResNet-50's 159 buffers 0.97 ms a forward under MPI on
// 2 CPU processes (docs/perf.md), each a round trip to agree with the peers and, on GPUs, an
// NCCL launch and two events as well.
void broadcast_buffers_coalesced(const NamedTensors& named) {
  NoGradGuard ng;
  std::vector<std::vector<Tensor>> groups;
  for (const auto& [name, t] : named) {
    auto same = [&](const std::vector<Tensor>& g) { return g[0].dtype() == t.dtype() && g[0].device() == t.device(); };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    (it == groups.end() ? groups.emplace_back() : *it).push_back(t);
  }
  for (std::vector<Tensor>& g : groups) {
    std::vector<Tensor> flat;
    for (const Tensor& t : g) flat.push_back(t.reshape({-1}));
    Tensor all = cat(flat, 0);
    dist::broadcast(all, 0);
    if (dist::rank() == 0) continue;
    int64_t offset = 0;
    for (Tensor& t : g) {
      t.copy_(all.narrow(0, offset, t.numel()).reshape(t.shape()));
      offset += t.numel();
    }
  }
}
}  // namespace

void DistributedDataParallel::setup() {
  KILN_CHECK(module_ != nullptr, "DistributedDataParallel", "the module is empty");
  KILN_CHECK(options_.bucket_cap_mb > 0, "DistributedDataParallel", "bucket_cap_mb must be positive, got ",
             options_.bucket_cap_mb);
  state_ = std::make_shared<State>();
  state_->weak_self = state_;
  state_->find_unused = options_.find_unused_parameters;
  state_->as_bucket_view = options_.gradient_as_bucket_view;
  dist::detail::check_initialized("DistributedDataParallel");
  check_same_module_everywhere(*module_);
  {
    // Every process starts from rank 0's parameters and buffers.
    NoGradGuard ng;
    for (auto& [name, t] : module_->named_parameters()) dist::broadcast(t, 0);
    for (auto& [name, t] : module_->named_buffers()) dist::broadcast(t, 0);
  }
  // Buckets in reverse registration order (backward produces the last layers' gradients first),
  // a new one when the cap is reached or the dtype or device changes.
  const double cap = options_.bucket_cap_mb * 1024 * 1024;
  NamedTensors named = module_->named_parameters();
  std::vector<std::vector<size_t>> groups;
  double bytes = 0;
  for (auto it = named.rbegin(); it != named.rend(); ++it) {
    if (!it->second.requires_grad()) continue;
    const size_t index = state_->params.size();
    State::Param& p = state_->params.emplace_back();
    p.name = it->first;
    p.tensor = it->second;
    const Tensor& t = it->second;
    const bool fits = !groups.empty() && bytes + static_cast<double>(t.nbytes()) <= cap;
    const Tensor* last = groups.empty() ? nullptr : &state_->params[groups.back().back()].tensor;
    if (!fits || last->dtype() != t.dtype() || last->device() != t.device()) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(index);
    bytes += static_cast<double>(t.nbytes());
  }
  for (const std::vector<size_t>& g : groups) {
    State::Bucket b;
    b.params = g;
    int64_t numel = 0;
    for (size_t i : g) {
      state_->params[i].bucket = static_cast<int64_t>(state_->buckets.size());
      state_->params[i].offset = numel;
      numel += state_->params[i].tensor.numel();
    }
    const Tensor& first = state_->params[g.front()].tensor;
    b.buffer = zeros({numel}, TensorOptions(first.dtype()).device(first.device()));
    for (size_t i : g) {
      State::Param& p = state_->params[i];
      p.slot = make_view(b.buffer, p.tensor.shape(), strides_like(p.tensor, p.tensor.shape()), p.offset);
    }
    state_->buckets.push_back(std::move(b));
  }
  state_->ready.assign(state_->params.size(), 0);
  state_->used.assign(state_->params.size(), 0);
  state_->reset_backward();
  if (dist::world_size() == 1) return;  // a world of one: the module itself, no hooks
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < state_->params.size(); ++i)
    state_->params[i].hook = state_->params[i].tensor.register_post_accumulate_grad_hook([weak, i](Tensor&) {
      if (auto s = weak.lock()) s->on_gradient(i);
    });
}

DistributedDataParallel::~DistributedDataParallel() {
  if (!state_) return;
  for (State::Param& p : state_->params) p.tensor.remove_post_accumulate_grad_hook(p.hook);
}

void DistributedDataParallel::before_forward() {
  if (state_->in_backward) {  // the last backward stopped on an error before it finished
    for (size_t b = 0; b < state_->next_launch; ++b) state_->finish(state_->buckets[b]);
    state_->reset_backward();
  }
  state_->graph_sync = state_->sync;  // torch's require_backward_grad_sync: no_sync counts at forward
  if (dist::world_size() == 1) return;
  // The buckets were made for the parameters as they were when wrapped.
  for (const State::Param& p : state_->params) {
    const Tensor& bucket = state_->buckets[static_cast<size_t>(p.bucket)].buffer;
    KILN_CHECK(p.tensor.device() == bucket.device() && p.tensor.dtype() == bucket.dtype(), "DistributedDataParallel",
               "parameter ", p.name, " is ", p.tensor.dtype(), " on ", p.tensor.device(), " but was ", bucket.dtype(),
               " on ", bucket.device(), " when the module was wrapped: move or convert the model before making "
               "DistributedDataParallel, as in PyTorch");
  }
  if (options_.broadcast_buffers) broadcast_buffers_coalesced(module_->named_buffers());
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  KILN_CHECK(!any_.is_empty(), "DistributedDataParallel",
             "this module has no one-tensor forward; call it through forward_with()");
  before_forward();
  return any_(x);
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.state_->sync) {
  ddp_.state_->sync = false;
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.state_->sync = previous_; }

void DistributedDataParallel::register_builtin_comm_hook(BuiltinCommHook hook) {
  KILN_CHECK(!state_->hook, "DistributedDataParallel", "register_builtin_comm_hook can be called once (as torch's "
             "register_comm_hook)");
  KILN_CHECK(!state_->in_backward, "DistributedDataParallel", "register_builtin_comm_hook called during a backward "
             "pass");
  state_->hook = hook;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const State::Bucket& b : state_->buckets) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(state_->params[i].name);
  }
  return out;
}

}  // namespace kiln::nn::parallel
