// Activation checkpointing (kiln/utils/checkpoint.h) on saved-tensor hooks: in the forward, each
// tensor fn's ops save is packed as its index in the region; the first unpack in backward runs fn
// again under hooks that keep what that run saves, in the same order, and hands each out once.
// While the forward runs, what it saved is at hand too (a backward inside fn unpacks it then).
#include <algorithm>
#include <any>
#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <utility>

#include "core/replay_generator.h"
#include "core/tensor_util.h"
#include "kiln/autocast.h"
#include "kiln/autograd.h"
#include "kiln/autograd/graph.h"
#include "kiln/error.h"
#include "kiln/random.h"
#include "kiln/utils/checkpoint.h"

namespace kiln::utils {
namespace {

struct Meta {
  Shape shape;
  ScalarType dtype;
  Device device;
  bool operator==(const Meta&) const = default;
};
Meta meta_of(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }

// t's values as a leaf without history, requiring grad where t does: fn's input in a run.
Tensor leaf_like(const Tensor& t) {
  Tensor a = alias_detached(t);
  if (t.requires_grad()) a.requires_grad_(true);
  return a;
}

std::string describe(const Meta& m) {
  std::ostringstream os;
  os << m.dtype << " " << m.shape << " on " << m.device.str();
  return os.str();
}

constexpr std::array<DeviceType, 2> kAutocastTypes = {kCPU, kCUDA};

// One checkpointed call: what it takes to run fn again as the first time.
struct Frame {
  CheckpointFunction fn;
  std::vector<Tensor> inputs;  // without history; requires_grad as the inputs had it
  std::vector<uint64_t> versions;
  bool preserve_rng = true;
  GeneratorState rng;
  std::array<AutocastGuard::Mode, kAutocastTypes.size()> autocast{};
  std::vector<Meta> saved;  // what the forward's ops saved, in order
  std::mutex mutex;
  bool in_forward = true;
  std::vector<Tensor> live;        // while in_forward: what the forward saved
  std::vector<Tensor> recomputed;  // from the last recomputation; each handed out once

  Tensor take(size_t index) {
    std::lock_guard<std::mutex> lock(mutex);
    if (in_forward) {  // a backward inside fn, during the forward
      KILN_CHECK(index < live.size(), "checkpoint", "saved tensor ", index, " of ", live.size(), " asked for");
      return live[index];
    }
    KILN_CHECK(index < saved.size(), "checkpoint", "saved tensor ", index, " of ", saved.size(), " asked for");
    // Handed out already (a second backward through a retained graph): run fn again.
    if (index >= recomputed.size() || !recomputed[index].defined()) recompute();
    return std::exchange(recomputed[index], Tensor());
  }

  void recompute() {
    for (size_t i = 0; i < inputs.size(); ++i)
      KILN_CHECK(inputs[i].version() == versions[i], "checkpoint", "input ", i, " was modified in place after the "
                 "checkpointed forward (its version is ", inputs[i].version(), ", expected ", versions[i],
                 "); backward cannot run it again on the same values: clone() it first");
    std::vector<Tensor> args;
    args.reserve(inputs.size());
    for (const Tensor& x : inputs) args.push_back(leaf_like(x));
    // The random numbers of the first run, from this thread's own copy of the generator then: the
    // global one, which other threads may be drawing from, is not touched.
    std::optional<detail::ReplayGenerator> replay;
    if (preserve_rng) replay.emplace(rng);
    AutoGradMode grad(true);  // backward runs with recording off (and with autocast off)
    std::array<std::optional<AutocastGuard>, kAutocastTypes.size()> amp;
    for (size_t d = 0; d < kAutocastTypes.size(); ++d)
      amp[d].emplace(kAutocastTypes[d], autocast[d].dtype, autocast[d].enabled);
    std::vector<Tensor> got;
    std::vector<uint64_t> got_versions;
    got.reserve(saved.size());
    {
      // Kept as they are (pack gets them without history), and given back as they are to a
      // backward inside fn.
      autograd::graph::SavedTensorsHooks keep(
          [&](const Tensor& t) -> std::any {
            const size_t k = got.size();
            KILN_CHECK(k < saved.size(), "checkpoint", "the recomputation saved more tensors for backward than the "
                       "forward's ", saved.size(), ": fn must run the same ops each time");
            const Meta m = meta_of(t);
            KILN_CHECK(m == saved[k], "checkpoint", "saved tensor ", k, " of the recomputation is ", describe(m),
                       " where the forward saved ", describe(saved[k]), ": fn must run the same ops each time");
            got.push_back(t);
            got_versions.push_back(t.version());
            return t;
          },
          [](const std::any& t) -> Tensor { return std::any_cast<Tensor>(t); });
      fn(args);
    }
    KILN_CHECK(got.size() == saved.size(), "checkpoint", "the recomputation saved ", got.size(), " tensors for "
               "backward where the forward saved ", saved.size(), ": fn must run the same ops each time");
    // What an op saved and a later op of fn changed in place would be the wrong value for the first
    // op's backward: an error, as without checkpointing.
    for (size_t k = 0; k < got.size(); ++k)
      KILN_CHECK(got[k].version() == got_versions[k], "checkpoint", "saved tensor ", k, " (", describe(saved[k]),
                 ") was modified in place later in the checkpointed function; use an out-of-place op or clone() "
                 "it first");
    recomputed = std::move(got);
  }
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               bool preserve_rng_state) {
  KILN_CHECK(static_cast<bool>(fn), "checkpoint", "no function given");
  if (!autograd::is_grad_enabled()) return fn(inputs);
  auto frame = std::make_shared<Frame>();
  frame->fn = fn;
  for (const Tensor& x : inputs) {
    KILN_CHECK(x.defined(), "checkpoint", "input ", frame->inputs.size(), " is an undefined tensor");
    frame->inputs.push_back(leaf_like(x));
    frame->versions.push_back(x.version());
  }
  frame->preserve_rng = preserve_rng_state;
  if (preserve_rng_state) frame->rng = detail::thread_generator_state();
  for (size_t d = 0; d < kAutocastTypes.size(); ++d)
    frame->autocast[d] = {autocast_enabled(kAutocastTypes[d]), autocast_dtype(kAutocastTypes[d])};
  std::vector<Tensor> outputs;
  {
    Frame* f = frame.get();  // the unpack hook keeps the frame; the pack hook runs only in here
    autograd::graph::SavedTensorsHooks hooks(
        [f](const Tensor& t) -> std::any {
          std::lock_guard<std::mutex> lock(f->mutex);
          f->saved.push_back(meta_of(t));
          f->live.push_back(t);
          return f->saved.size() - 1;
        },
        [frame](const std::any& index) -> Tensor { return frame->take(std::any_cast<size_t>(index)); });
    // The forward's saved tensors go when it ends, whether fn returns or throws.
    struct EndForward {
      Frame& f;
      ~EndForward() {
        std::lock_guard<std::mutex> lock(f.mutex);
        f.in_forward = false;
        f.live.clear();
      }
    } end{*frame};
    outputs = fn(inputs);
  }
  return outputs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, bool preserve_rng_state) {
  KILN_CHECK(static_cast<bool>(fn), "checkpoint", "no function given");
  return checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; },
                    std::vector<Tensor>{input}, preserve_rng_state)[0];
}

Tensor checkpoint_sequential(const nn::Sequential& seq, int64_t segments, const Tensor& input,
                             bool preserve_rng_state) {
  const auto n = static_cast<int64_t>(seq->size());
  KILN_CHECK(segments >= 1 && segments <= n, "checkpoint_sequential", "segments must be between 1 and the ",
             n, " modules, got ", segments);
  const int64_t size = n / segments;
  // Modules [begin, end) run in order. The Sequential (shared) is kept by the checkpointed runs.
  auto run = [seq](int64_t begin, int64_t end) {
    return [seq, begin, end](const Tensor& x) {
      Tensor y = x;
      for (int64_t i = begin; i < end; ++i) y = (*seq)[static_cast<size_t>(i)].forward(y);
      return y;
    };
  };
  Tensor x = input;
  int64_t begin = 0;
  for (int64_t s = 0; s + 1 < segments; ++s, begin += size) x = checkpoint(run(begin, begin + size), x, preserve_rng_state);
  return run(begin, n)(x);
}

}  // namespace kiln::utils
