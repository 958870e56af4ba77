// kiln::distributed: the process group's communication thread, the checks every collective makes
// before it runs (the same collective, dtype, shape and root on every process), staging of
// tensors the transport cannot take as they are, and ending the whole job on a failure.
#include "kiln/distributed.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "distributed/header.h"
#include "distributed/process_group.h"
#include "kiln/autograd.h"
#include "kiln/cuda.h"
#include "kiln/ops.h"

namespace kiln::distributed {

struct Work::State {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::function<void()> finish;  // on the first waiting thread, once the transport is done
  bool finishing = false;        // a thread runs `finish`; other waiters wait for it
  bool finished = false;         // the result is in the tensor (or `error` says why not)

  // Runs `finish` once, on the first thread here after the transport is done, with `lock`
  // released; a failure of it becomes the collective's error. Every caller returns only after
  // it has run, so a second thread's wait() never sees the tensor before its result.
  void complete(std::unique_lock<std::mutex>& lock) {
    if (!finishing) {
      finishing = true;
      std::function<void()> f = std::move(finish);
      if (f && !error) {
        lock.unlock();
        std::exception_ptr failed;
        try {
          f();
        } catch (...) {
          failed = std::current_exception();
        }
        lock.lock();
        if (failed) error = failed;
      }
      finished = true;
      cv.notify_all();
    }
    cv.wait(lock, [&] { return finished; });
  }
};

namespace detail {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

void check_initialized(const char* op) {
  KILN_CHECK(is_initialized() || !launched_by_mpi(), op,
             "an MPI launcher started this process but distributed::init() has not been called: call it first "
             "(without it every process is a world of one, and nothing is averaged)");
}

}  // namespace detail

namespace {

using detail::Elem;
using detail::Header;
using detail::Kind;
using detail::header_of;
using detail::kind_name;
using detail::ProcessGroup;

// The process group, its communication thread (which makes every transport call, in the order
// the collectives were called) and the queue feeding it.
class Comm {
 public:
  static Comm& get() {
    static Comm comm;
    return comm;
  }

  void init() {
    std::unique_lock lock(m_);
    KILN_CHECK(!initialized_, "distributed::init", "already initialised");
    KILN_CHECK(!finalized_ || !detail::launched_by_mpi(), "distributed::init",
               "MPI cannot be started again after finalize()");
    // torchrun's variables without an MPI launcher: every process would be rank 0 of a world of
    // one, training alone on cuda:0 and writing the same checkpoints.
    if (const char* w = std::getenv("WORLD_SIZE"); w != nullptr && !detail::launched_by_mpi())
      KILN_CHECK(std::string(w) == "1", "distributed::init", "WORLD_SIZE=", w,
                 " is set (by torchrun?) but no MPI launcher started this process: Kiln's process group "
                 "comes from mpirun (mpirun -np ", w, " PROGRAM)");
    if (detail::launched_by_mpi()) {
      std::exception_ptr error;
      bool ready = false;
      // MPI is initialised on the communication thread, which then makes every MPI call.
      thread_ = std::thread([this, &error, &ready] {
        std::exception_ptr failed;
        try {
          auto group = detail::make_mpi_group();
          std::lock_guard l(m_);
          group_ = std::move(group);
        } catch (...) {
          failed = std::current_exception();
        }
        {
          std::lock_guard l(m_);
          error = failed;  // init() waits for `ready`, so these locals are still alive here
          ready = true;
        }
        cv_.notify_all();
        if (!failed) loop();
      });
      cv_.wait(lock, [&] { return ready; });
      if (error) {
        lock.unlock();
        thread_.join();
        std::rethrow_exception(error);
      }
      rank_ = group_->rank();
      world_ = group_->world_size();
      local_rank_ = group_->local_rank();
      backend_ = group_->name();
    }
    initialized_ = true;
    finalized_ = false;
    lock.unlock();
    std::set_terminate(on_terminate);
    static bool registered = false;
    if (!registered) std::atexit([] { Comm::get().finalize(); });
    registered = true;
  }

  void finalize() {
    {
      std::lock_guard lock(m_);
      if (!initialized_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(m_);
    group_.reset();
    initialized_ = false;
    finalized_ = true;  // rank() and world_size() keep their values; collectives are errors
    stopping_ = false;
    backend_ = "none";
  }

  // A collective after finalize(): an error, not a silent world of one (every process would be
  // rank 0 of it), as torch's after destroy_process_group.
  void check_alive(const char* op) const {
    bool initialized = false;
    {
      std::lock_guard lock(m_);
      KILN_CHECK(!finalized_, op, "the process group has ended (finalize() was called)");
      initialized = initialized_;
    }
    if (!initialized) detail::check_initialized(op);
  }

  bool initialized() const {
    std::lock_guard lock(m_);
    return initialized_;
  }
  int rank() const { return rank_; }
  int world() const { return world_; }
  int local_rank() const { return local_rank_; }
  std::string backend() const {
    std::lock_guard lock(m_);
    return backend_;
  }

  // Queues: check that every process runs `h`, then `run` on the transport.
  // `device`: the GPU whose NCCL communicator `run` uses (-1: none). `staged`: the tensor whose
  // result `finish` copies in from a staging buffer (see settle).
  Work submit(const Header& h, std::function<void(ProcessGroup&)> run, std::function<void()> finish,
              int device = -1, const Tensor* staged = nullptr) {
    auto state = std::make_shared<Work::State>();
    state->finish = std::move(finish);
    {
      std::lock_guard lock(m_);
      KILN_CHECK(group_ != nullptr && !stopping_, kind_name(static_cast<Kind>(h.kind)), "the process group has ended");
      queue_.push_back({h, std::move(run), state, device});
    }
    cv_.notify_all();
    if (staged) {
      std::lock_guard lock(pending_m_);
      if (pending_.size() > 64) std::erase_if(pending_, [](const auto& e) { return e.second.expired(); });
      pending_[staged->storage().get()] = state;
    }
    return Work(state);
  }

  // A collective on t first waits for one queued before it whose result reaches t only when
  // waited for (through a staging copy: 16-bit floats, a non-contiguous tensor, a GPU tensor on
  // MPI), so collectives on a tensor see each other's results in the order they were called, as
  // the header promises (two all_reduce_async of a float16 tensor summed the value before either:
  // 2 processes gave 2, not 4). An earlier one that failed throws here too.
  void settle(const Tensor& t) {
    std::shared_ptr<Work::State> earlier;
    {
      std::lock_guard lock(pending_m_);
      auto it = pending_.find(t.storage().get());
      if (it == pending_.end()) return;
      earlier = it->second.lock();
      pending_.erase(it);
    }
    if (earlier) Work(std::move(earlier)).wait();
  }

  // CUDA tensors with NCCL: `run` queues the collective on the communication stream of the
  // tensors' GPU after the work the caller's stream has queued; wait() makes the caller's stream
  // wait for it (the host does not block). `keep` are the tensors NCCL reads or writes: their
  // memory is not reused before the communication stream is done with it.
  Work submit_device(const Header& h, int device, const std::vector<Tensor>& keep,
                     std::function<void(detail::DeviceGroup&, const cuda::Stream&)> run, std::function<void()> finish,
                     const Tensor* staged = nullptr) {
    cuda::Stream stream = comm_stream(device);
    auto ready = std::make_shared<cuda::Event>(device, false), done = std::make_shared<cuda::Event>(device, false);
    ready->record(cuda::current_stream(device));
    for (const Tensor& t : keep) cuda::record_stream(t, stream);
    return submit(
        h,
        [this, device, stream, ready, done, run = std::move(run)](ProcessGroup&) {
          detail::DeviceGroup& g = device_group(device);
          ready->wait(stream);
          run(g, stream);
          done->record(stream);
        },
        [device, done, finish = std::move(finish)] {
          done->wait(cuda::current_stream(device));
          if (finish) finish();
        },
        device, staged);
  }

  [[noreturn]] void abort_job(const std::string& message) {
    std::fflush(nullptr);  // what the process printed before the failure stays in its log
    static std::once_flag printed;
    std::call_once(printed, [&] {
      std::fprintf(stderr, "[distributed] rank %d failed: %s\n", rank_.load(), message.c_str());
      std::fflush(stderr);
    });
    ProcessGroup* group = nullptr;
    {
      std::lock_guard lock(m_);
      group = group_.get();
    }
    if (group != nullptr && world_ > 1) group->abort(1);
    std::_Exit(1);
  }

 private:
  struct Task {
    Header header;
    std::function<void(ProcessGroup&)> run;
    std::shared_ptr<Work::State> state;
    int device = -1;
  };

  static void on_terminate() {
    std::string what = "terminate called without an exception";
    if (std::exception_ptr e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        what = ex.what();
      } catch (...) {
        what = "an exception that is not a std::exception";
      }
    }
    Comm::get().abort_job(what);
  }

  // Created by the first collective on that GPU (on this thread; every process reaches it at
  // the same collective: the agreement check compares whether it is the first, Header::cuda).
  detail::DeviceGroup& device_group(int device) {
    auto it = device_groups_.find(device);
    if (it == device_groups_.end()) it = device_groups_.emplace(device, detail::make_nccl_group(*group_, device)).first;
    return *it->second;
  }
  cuda::Stream comm_stream(int device) {
    std::lock_guard lock(m_);
    auto it = streams_.find(device);
    if (it == streams_.end()) it = streams_.emplace(device, cuda::Stream::create(device)).first;
    return it->second;
  }

  void loop() {
    for (;;) {
      Task task;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) break;  // stopping, and everything queued has run
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        // The first collective on a GPU creates its communicator, a collective call itself:
        // every process must be at that step together.
        if (task.device >= 0 && device_groups_.count(task.device) == 0) task.header.cuda = 2;
        check_agreement(task.header);
        task.run(*group_);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(task.state->m);
        task.state->error = error;
        task.state->done = true;
      }
      task.state->cv.notify_all();
    }
    // The last exchange: a process still in a collective learns that this one has ended (the
    // agreement check fails there, naming it) instead of waiting for the timeout; this one then
    // ends the job, as the others cannot finish what they started.
    if (world_ > 1) {
      try {
        check_agreement(header_of(Kind::Finalize, nullptr), false);
      } catch (const std::exception& e) {
        abort_job(e.what());
      }
    }
    device_groups_.clear();
    group_->finalize();
  }

  // Every process gathers every header; all compare the same table, so all raise the same error.
  void check_agreement(const Header& mine, bool timed = true) {
    std::vector<Header> all(static_cast<size_t>(world_));
    group_->rendezvous(&mine, all.data(), sizeof(Header), timed);
    bool same = true;
    for (const Header& h : all) same = same && h == all[0];
    if (same) return;
    std::ostringstream os;
    os << "the processes disagree on this collective:";
    int shown = 0;
    for (int r = 0; r < world_ && shown < 8; ++r)
      if (r == 0 || !(all[static_cast<size_t>(r)] == all[0])) {
        os << (shown ? ";" : "") << " rank " << r << " called " << all[static_cast<size_t>(r)].describe();
        ++shown;
      }
    KILN_FAIL(kind_name(static_cast<Kind>(mine.kind)), os.str());
  }

  mutable std::mutex m_;
  std::mutex pending_m_;
  std::unordered_map<const void*, std::weak_ptr<Work::State>> pending_;  // by storage: see settle
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::thread thread_;
  std::unique_ptr<ProcessGroup> group_;
  std::map<int, std::unique_ptr<detail::DeviceGroup>> device_groups_;  // the communication thread's
  std::map<int, cuda::Stream> streams_;
  bool initialized_ = false, finalized_ = false, stopping_ = false;
  // Read without the lock (rank() while another thread runs init()): atomics.
  std::atomic<int> rank_ = 0, world_ = 1, local_rank_ = 0;
  std::string backend_ = "none";
};

Work completed(std::function<void()> finish = nullptr) {
  auto state = std::make_shared<Work::State>();
  state->done = true;
  state->finish = std::move(finish);
  return Work(state);
}

Elem elem_of(ScalarType t) {
  switch (t) {
    case kBool: return Elem::Bool;
    case kUInt8: return Elem::UInt8;
    case kInt32: return Elem::Int32;
    case kInt64: return Elem::Int64;
    case kFloat64: return Elem::Float64;
    case kFloat16: return Elem::Float16;  // summed in their own type (all_reduce_in_own_dtype_async)
    case kBFloat16: return Elem::BFloat16;
    default: return Elem::Float32;
  }
}

// The header's op for all_reduce_in_own_dtype_async's sum (ReduceOp's values come first).
constexpr int kOwnDtypeSum = 4;

// The dtype a reduction runs in: float16 and bfloat16 in float32.
ScalarType reduce_dtype(ScalarType t) { return t == kFloat16 || t == kBFloat16 ? kFloat32 : t; }

// t itself when the transport can use its memory as it is (a dense CPU tensor of `dtype`),
// else a dense CPU copy in `dtype`.
Tensor host_buffer(const Tensor& t, ScalarType dtype) {
  if (t.device().is_cpu() && t.dtype() == dtype && t.is_contiguous()) return t;
  return t.to(Device::cpu()).to(dtype).contiguous();
}

// Whether t's collective runs GPU to GPU (NCCL), or through host memory.
bool on_nccl(const Tensor& t) { return t.device().is_cuda() && detail::nccl_built(); }

template <class T>
void divide(T* p, int64_t n, int world) {
  const T w = static_cast<T>(world);
  for (int64_t i = 0; i < n; ++i) p[i] /= w;
}

void check_tensor(const Tensor& t, const char* op) {
  KILN_CHECK(t.defined(), op, "the tensor is undefined");
}

}  // namespace

Work& Work::operator=(Work&& o) noexcept {
  if (this != &o) {
    if (state_) {
      try {
        wait();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[distributed] a collective nobody waited for failed: %s\n", e.what());
      }
    }
    state_ = std::move(o.state_);
  }
  return *this;
}

Work::~Work() {
  if (!state_) return;
  {
    std::lock_guard lock(state_->m);
    if (state_->finished) return;  // waited for: a failure went to that wait
  }
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[distributed] a collective nobody waited for failed: %s\n", e.what());
  }
}

void Work::wait() {
  if (!state_) return;
  std::unique_lock lock(state_->m);
  state_->cv.wait(lock, [&] { return state_->done; });
  state_->complete(lock);
  if (state_->error) std::rethrow_exception(state_->error);  // each wait of a failed collective throws
}

bool Work::is_completed() const {
  if (!state_) return true;
  std::unique_lock lock(state_->m);
  if (!state_->done) return false;
  // A result staged through a copy (16-bit floats, a non-contiguous tensor) goes into the
  // tensor before the work says it is complete, as torch's is_completed means.
  if (state_->finishing && !state_->finished) return false;  // another thread is copying it in
  state_->complete(lock);
  return true;
}

void init() { Comm::get().init(); }
bool is_initialized() { return Comm::get().initialized(); }
void finalize() { Comm::get().finalize(); }
int rank() { return Comm::get().rank(); }
int world_size() { return Comm::get().world(); }
int local_rank() { return Comm::get().local_rank(); }
std::string backend_name() { return Comm::get().backend(); }

std::string transports() {
  std::string out;
  if (const std::string m = detail::mpi_version(); !m.empty()) out = "MPI (" + m + ")";
  if (const std::string n = detail::nccl_version(); !n.empty()) out += (out.empty() ? "" : ", ") + ("NCCL " + n);
  return out.empty() ? "none (a world of one only)" : out;
}

void abort(const std::string& message) { Comm::get().abort_job(message); }

namespace {
// all_reduce_async, and with own_dtype its sum in t's own dtype (detail::all_reduce_in_own_dtype_async).
Work all_reduce_impl(Tensor& t, ReduceOp op, bool own_dtype) {
  check_tensor(t, "all_reduce");
  KILN_CHECK(op != ReduceOp::Average || t.is_floating_point(), "all_reduce",
             "average needs a floating-point tensor, got ", t.dtype());
  Comm& c = Comm::get();
  c.check_alive("all_reduce");
  if (c.world() == 1) return completed();
  c.settle(t);
  if (on_nccl(t)) {
    // 16-bit floats go through a float32 copy, summed (or averaged) there and rounded once, as on
    // the MPI path: NCCL's own 16-bit reduction rounds at every step of its ring, and its average
    // multiplies by 1 / world rounded to 16 bits first (bfloat16's 1/3: 0.334).
    Tensor buf = t.is_contiguous() ? t : t.contiguous(), target = t;
    if (const ScalarType rd = own_dtype ? t.dtype() : reduce_dtype(t.dtype()); rd != t.dtype()) buf = buf.to(rd);
    return c.submit_device(
        header_of(Kind::AllReduce, &t, own_dtype ? kOwnDtypeSum : static_cast<int>(op)), t.device().index, {buf},
        [buf, op](detail::DeviceGroup& g, const cuda::Stream& s) { g.all_reduce(buf.data_ptr(), buf.numel(), buf.dtype(), op, s); },
        [buf, target]() mutable {
          NoGradGuard ng;
          if (!buf.is_same(target)) target.copy_(buf);
        },
        buf.is_same(t) ? nullptr : &t);
  }
  const ScalarType rd = own_dtype ? t.dtype() : reduce_dtype(t.dtype());
  Tensor buf = host_buffer(t, rd);
  const int world = c.world();
  Tensor target = t;
  // Average divides on the communication thread, right after the sum, while the buffer is warm
  // in cache (and, in DDP, while backward goes on); the buffer is float32 or float64 then.
  return c.submit(
      header_of(Kind::AllReduce, &t, own_dtype ? kOwnDtypeSum : static_cast<int>(op)),
      [buf, op, world](ProcessGroup& g) {
        g.all_reduce(buf.data_ptr(), buf.numel(), elem_of(buf.dtype()), op);
        if (op == ReduceOp::Average) {
          if (buf.dtype() == kFloat64) divide(buf.data_ptr<double>(), buf.numel(), world);
          else divide(buf.data_ptr<float>(), buf.numel(), world);
        }
      },
      [buf, target]() mutable {
        NoGradGuard ng;
        if (!buf.is_same(target)) target.copy_(buf);
      },
      -1, buf.is_same(t) ? nullptr : &t);
}
}  // namespace

Work all_reduce_async(Tensor& t, ReduceOp op) { return all_reduce_impl(t, op, /*own_dtype=*/false); }

Work detail::all_reduce_in_own_dtype_async(Tensor& t) {
  KILN_CHECK(t.is_floating_point(), "all_reduce", "a sum in its own dtype is for floating-point tensors, got ",
             t.dtype());
  return all_reduce_impl(t, ReduceOp::Sum, /*own_dtype=*/true);
}

void all_reduce(Tensor& t, ReduceOp op) { all_reduce_async(t, op).wait(); }

Work broadcast_async(Tensor& t, int root) {
  check_tensor(t, "broadcast");
  Comm& c = Comm::get();
  KILN_CHECK(root >= 0 && root < c.world(), "broadcast", "root ", root, " is not a rank of this world of ", c.world());
  c.check_alive("broadcast");
  if (c.world() == 1) return completed();
  c.settle(t);
  if (on_nccl(t)) {
    Tensor buf = t.is_contiguous() ? t : t.contiguous(), target = t;
    return c.submit_device(
        header_of(Kind::Broadcast, &t, -1, root), t.device().index, {buf},
        [buf, root](detail::DeviceGroup& g, const cuda::Stream& s) {
          g.broadcast(buf.data_ptr(), static_cast<int64_t>(buf.nbytes()), root, s);
        },
        [buf, target]() mutable {
          NoGradGuard ng;
          if (!buf.is_same(target)) target.copy_(buf);
        },
        buf.is_same(t) ? nullptr : &t);
  }
  Tensor buf = host_buffer(t, t.dtype());
  Tensor target = t;
  return c.submit(
      header_of(Kind::Broadcast, &t, -1, root),
      [buf, root](ProcessGroup& g) { g.broadcast(buf.data_ptr(), static_cast<int64_t>(buf.nbytes()), root); },
      [buf, target]() mutable {
        NoGradGuard ng;
        if (!buf.is_same(target)) target.copy_(buf);
      },
      -1, buf.is_same(t) ? nullptr : &t);
}

void broadcast(Tensor& t, int root) { broadcast_async(t, root).wait(); }

std::vector<Tensor> all_gather(const Tensor& t) {
  check_tensor(t, "all_gather");
  Comm& c = Comm::get();
  NoGradGuard ng;
  c.check_alive("all_gather");
  if (c.world() == 1) return {t.clone()};
  c.settle(t);
  const bool gpu = on_nccl(t);
  Tensor buf = gpu ? t.contiguous() : host_buffer(t, t.dtype());
  Tensor out = empty({c.world() * t.numel()}, TensorOptions(t.dtype()).device(gpu ? t.device() : Device::cpu()));
  if (gpu)
    c.submit_device(header_of(Kind::AllGather, &t), t.device().index, {buf, out},
                    [buf, out](detail::DeviceGroup& g, const cuda::Stream& s) {
                      g.all_gather(buf.data_ptr(), out.data_ptr(), static_cast<int64_t>(buf.nbytes()), s);
                    },
                    nullptr)
        .wait();
  else
    c.submit(header_of(Kind::AllGather, &t),
             [buf, out](ProcessGroup& g) { g.all_gather(buf.data_ptr(), out.data_ptr(), static_cast<int64_t>(buf.nbytes())); },
             nullptr)
        .wait();
  std::vector<Tensor> parts;
  for (int r = 0; r < c.world(); ++r) parts.push_back(out.narrow(0, r * t.numel(), t.numel()).reshape(t.shape()).to(t.device()));
  return parts;
}

Tensor reduce_scatter(const Tensor& input, ReduceOp op) {
  check_tensor(input, "reduce_scatter");
  Comm& c = Comm::get();
  KILN_CHECK(input.dim() >= 1 && input.size(0) % c.world() == 0, "reduce_scatter", "the first dim of ", input.shape(),
             " must split into ", c.world(), " equal parts (one per process)");
  KILN_CHECK(op != ReduceOp::Average || input.is_floating_point(), "reduce_scatter",
             "average needs a floating-point tensor, got ", input.dtype());
  NoGradGuard ng;
  Shape share = input.shape();
  share[0] /= c.world();
  c.check_alive("reduce_scatter");
  if (c.world() == 1) return input.clone();
  c.settle(input);
  if (on_nccl(input)) {
    // 16-bit floats through float32, rounded once (all_reduce_async says why).
    const ScalarType rd = reduce_dtype(input.dtype());
    Tensor buf = input.contiguous().to(rd);
    Tensor out = empty(share, TensorOptions(rd).device(input.device()));
    c.submit_device(header_of(Kind::ReduceScatter, &input, static_cast<int>(op)), input.device().index, {buf, out},
                    [buf, out, op](detail::DeviceGroup& g, const cuda::Stream& s) {
                      g.reduce_scatter(buf.data_ptr(), out.data_ptr(), out.numel(), buf.dtype(), op, s);
                    },
                    nullptr)
        .wait();
    return out.to(input.dtype());
  }
  const ScalarType rd = reduce_dtype(input.dtype());
  Tensor buf = host_buffer(input, rd);
  Tensor out = empty(share, rd);
  c.submit(header_of(Kind::ReduceScatter, &input, static_cast<int>(op)),
           [buf, out, op](ProcessGroup& g) { g.reduce_scatter(buf.data_ptr(), out.data_ptr(), out.numel(), elem_of(buf.dtype()), op); },
           nullptr)
      .wait();
  if (op == ReduceOp::Average) out.div_(static_cast<double>(c.world()));
  return out.to(input.dtype()).to(input.device());
}

void barrier() {
  Comm& c = Comm::get();
  c.check_alive("barrier");
  if (c.world() == 1) return;
  c.submit(header_of(Kind::Barrier, nullptr), [](ProcessGroup& g) { g.barrier(); }, nullptr).wait();
}

}  // namespace kiln::distributed
