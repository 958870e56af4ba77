// The backward engine: runs nodes in reverse creation order, accumulates gradients, and the
// autograd parts of Tensor (requires_grad_, grad, backward, retain_grad).
#include <atomic>
#include <exception>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/node.h"
#include "kiln/autocast.h"
#include "core/tensor_util.h"
#include "kiln/ops.h"

namespace kiln::autograd {
namespace {

thread_local bool g_grad_enabled = true;
std::atomic<bool> g_detect_anomaly{false};

// Anomaly mode's check of what a node returned (torch's message, and which input it is for).
void check_anomaly(const Node& n, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined() || !is_floating_point(g.dtype()) || g.numel() == 0) continue;
    KILN_CHECK(!g.ne(g).any().item<bool>(), "backward", "Function '", n.name(), "' returned nan values in its ", i,
               "th output (the gradient of its forward op's input ", i, ", ", g.dtype(), " ", g.shape(), ")");
  }
}

// Callbacks queued during the outermost backward pass running on this thread, and its depth.
thread_local std::vector<std::function<void()>> g_callbacks;
thread_local int g_backward_depth = 0;

struct ReadyOrder {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// How a pass runs: whether the graph is kept for another pass, and whether the backward formulas
// are recorded themselves (create_graph: the gradients can be differentiated again).
struct PassOptions {
  bool retain_graph = false;
  bool create_graph = false;
};

// Runs the graph below root_edges. With capture set, gradients reaching those edges are
// returned (in order) instead of being accumulated into leaves.
std::vector<Tensor> run_graph(const std::vector<Edge>& root_edges, const std::vector<Tensor>& root_grads,
                              PassOptions pass, const std::vector<Edge>* capture);

// run_graph, then (for the outermost pass) the callbacks queued while it ran.
std::vector<Tensor> execute(const std::vector<Edge>& root_edges, const std::vector<Tensor>& root_grads,
                            PassOptions pass, const std::vector<Edge>* capture) {
  struct Depth {
    Depth() {
      if (g_backward_depth++ == 0) g_callbacks.clear();
    }
    ~Depth() {
      if (--g_backward_depth == 0) g_callbacks.clear();
    }
  } depth;
  std::vector<Tensor> result = run_graph(root_edges, root_grads, pass, capture);
  if (g_backward_depth == 1)
    for (size_t i = 0; i < g_callbacks.size(); ++i) {
      std::function<void()> cb = std::move(g_callbacks[i]);  // a callback may queue more
      cb();
    }
  return result;
}

// The nodes below root_edges from which a node of `targets` can be reached (post-order, so each
// node is judged after everything below it).
template <class Targets>
std::unordered_set<Node*> leading_to(const std::vector<Edge>& root_edges, const Targets& targets) {
  std::unordered_map<Node*, bool> leads;  // visited nodes: whether they lead to a target
  std::vector<std::pair<Node*, size_t>> stack;  // a node and its next edge to visit
  for (const Edge& e : root_edges)
    if (e.valid() && leads.emplace(e.fn.get(), false).second) stack.emplace_back(e.fn.get(), 0);
  while (!stack.empty()) {
    Node* n = stack.back().first;
    const size_t i = stack.back().second++;
    if (i < n->next_edges.size()) {
      const Edge& e = n->next_edges[i];
      if (e.valid() && leads.emplace(e.fn.get(), false).second) stack.emplace_back(e.fn.get(), 0);
      continue;
    }
    bool lead = false;
    for (const Edge& e : n->next_edges) lead = lead || (e.valid() && (targets.count(e.fn.get()) || leads[e.fn.get()]));
    leads[n] = lead;
    stack.pop_back();
  }
  std::unordered_set<Node*> out;
  for (const auto& [n, lead] : leads)
    if (lead) out.insert(n);
  return out;
}

std::vector<Tensor> run_graph(const std::vector<Edge>& root_edges, const std::vector<Tensor>& root_grads,
                              PassOptions pass, const std::vector<Edge>* capture) {
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep;  // nodes stay alive while we run
  std::vector<Node*> stack;
  for (const Edge& e : root_edges) {
    if (!e.valid() || keep.count(e.fn.get())) continue;
    keep[e.fn.get()] = e.fn;
    stack.push_back(e.fn.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (!keep.count(e.fn.get())) {
        keep[e.fn.get()] = e.fn;
        stack.push_back(e.fn.get());
      }
    }
  }

  // Each node's gradient (one per output of its op), and the stream it was made on (streams.h: a
  // recorded op runs on its forward's stream, a leaf's accumulation on the stream its gradient
  // came from). The first output's inline: a node with more is a custom function's.
  struct Slot {
    Tensor g;
    StreamPlace ready;
  };
  struct Pending {
    Slot first;
    std::vector<Slot> rest;
    Slot& operator[](uint32_t k) {
      if (k == 0) return first;
      if (rest.size() < k) rest.resize(k);
      return rest[k - 1];
    }
  };
  std::unordered_map<Node*, Pending> buffer;
  auto place_of = [](Node* n, const StreamPlace& ready) {
    auto* fn = dynamic_cast<FunctionNode*>(n);
    return fn ? fn->place : ready;
  };
  auto accumulate = [&](const Edge& e, const Tensor& g, const StreamPlace& ready) {
    Slot& p = buffer[e.fn.get()][e.input_nr];
    if (!p.g.defined()) {
      p = {g, ready};
      return;
    }
    const StreamPlace at = place_of(e.fn.get(), p.ready);
    StreamScope scope(at);
    hand_over(p.g, p.ready, at);
    hand_over(g, ready, at);
    p.g = p.g + g;
    p.ready = at;
  };
  LeafStreams leaf_streams;
  // When a node throws part way, the caller's streams still wait for the gradients already left
  // on other streams (at the end of a pass, below).
  struct WaitIfThrown {
    const LeafStreams& streams;
    const int uncaught = std::uncaught_exceptions();
    ~WaitIfThrown() {
      if (std::uncaught_exceptions() == uncaught) return;
      try {
        streams.wait_for_all();
      } catch (...) {  // unwinding already: the first error is the one to report
      }
    }
  } wait_if_thrown{leaf_streams};
  std::priority_queue<Node*, std::vector<Node*>, ReadyOrder> ready;
  for (size_t i = 0; i < root_edges.size(); ++i) {
    if (!root_edges[i].valid()) continue;
    accumulate(root_edges[i], root_grads[i], StreamPlace::current(root_grads[i].device()));
  }
  for (const Edge& e : root_edges)
    if (e.valid() && deps[e.fn.get()] == 0) {
      deps[e.fn.get()] = -1;  // queued
      ready.push(e.fn.get());
    }

  std::vector<Tensor> captured(capture ? capture->size() : 0);
  std::unordered_map<Node*, std::vector<size_t>> capture_slots;  // the captures at each node
  if (capture)
    for (size_t i = 0; i < capture->size(); ++i)
      if ((*capture)[i].valid()) capture_slots[(*capture)[i].fn.get()].push_back(i);
  // With capture, only the nodes on a path to a captured edge run (PyTorch's exec_info): the rest
  // of the graph keeps its saved tensors for a later backward, its hooks do not fire, and the
  // inputs' own histories cost nothing.
  const std::unordered_set<Node*> on_path = capture ? leading_to(root_edges, capture_slots) : std::unordered_set<Node*>{};

  // Backward formulas build no graph, unless asked to (create_graph): then their ops are
  // recorded, saved tensors come with their history (SavedTensor::get), and the sums of
  // gradients, the leaves' .grad() and the results are differentiable.
  AutoGradMode grad_mode(pass.create_graph);
  // ... and run in the dtypes the forward saved: autocast would recast them (PyTorch runs
  // backward outside autocast too).
  AutocastGuard no_autocast(kBFloat16, /*enabled=*/false);
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    Pending p = std::move(buffer[n]);
    buffer.erase(n);
    auto* fn = dynamic_cast<FunctionNode*>(n);
    auto* acc = fn ? nullptr : dynamic_cast<AccumulateGrad*>(n);
    const StreamPlace at = fn ? fn->place : p.first.ready;
    StreamScope scope(at);  // hooks, the node and the sums of what it returns, on its stream
    const uint32_t slots = fn ? fn->num_outputs : 1;
    std::vector<Tensor> in(slots);
    bool any = false;
    auto cs = capture_slots.find(n);
    const bool runs = !capture || on_path.count(n);
    for (uint32_t k = 0; k < slots; ++k) {
      Slot& slot = p[k];
      Tensor& g = in[k];
      g = std::move(slot.g);
      if (!g.defined()) continue;
      hand_over(g, slot.ready, at);
      // register_hook's hooks first: what they return is what is captured, retained and
      // accumulated (with capture, only on the nodes that run or are captured, as torch's).
      if (runs || cs != capture_slots.end()) {
        if (fn) {
          if (const auto hooks = fn->tensor_hooks(); !hooks.empty()) g = run_tensor_hooks(hooks, std::move(g), k);
        } else if (acc) {
          std::vector<std::shared_ptr<TensorHook>> hooks;
          {
            AutogradMeta& meta = acc->leaf()->autograd_meta();
            std::lock_guard lock(meta.mutex);
            hooks = meta.hooks;  // a hook may register or remove hooks
          }
          if (!hooks.empty()) g = run_tensor_hooks(hooks, std::move(g));
        }
      }
      if (cs != capture_slots.end())
        for (size_t c : cs->second)
          if ((*capture)[c].input_nr == k) {
            captured[c] = g;
            leaf_streams.add(at);
          }
      any = any || g.defined();
    }
    std::vector<Tensor> outs;
    if (any && runs) {
      if (fn)
        for (const auto& hook : fn->pre_hooks())
          if (hook.output_nr < slots && in[hook.output_nr].defined()) hook.fn(in[hook.output_nr]);
      outs = n->apply(std::move(in));
      if (g_detect_anomaly.load(std::memory_order_relaxed)) [[unlikely]] check_anomaly(*n, outs);
      if (!pass.retain_graph) n->release_saved();
      if (acc) leaf_streams.add(at);
    }
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.valid()) continue;
      if (i < outs.size() && outs[i].defined()) {
        const Device d = outs[i].device();
        accumulate(e, outs[i], d == at.device ? at : StreamPlace::current(d));
      }
      if (--deps[e.fn.get()] == 0) ready.push(e.fn.get());
    }
  }
  leaf_streams.wait_for_all();  // the caller's streams, which read .grad() (or the result) next
  return captured;
}

// The gradient a pass starts from at `out`: `given`, checked and cast to out's dtype, or 1 for a
// one-element output. `what` names the gradient in errors.
Tensor root_grad(const Tensor& out, const Tensor& given, const char* where, const std::string& what) {
  if (!given.defined()) {
    KILN_CHECK(out.numel() == 1, where, "a gradient must be given for an output of shape ", out.shape(),
               " (only one-element outputs get an implicit gradient of 1)");
    return ones_like(out);
  }
  // A gradient of another shape would broadcast into a wrong result, or fail far from here.
  KILN_CHECK(given.shape() == out.shape(), where, what, " of shape ", given.shape(),
             " does not match the output's shape ", out.shape());
  KILN_CHECK(given.device() == out.device(), where, what, " is on ", given.device(), " but the output on ",
             out.device());
  return given.dtype() == out.dtype() ? given : given.to(out.dtype());
}

}  // namespace

Tensor run_tensor_hooks(const std::vector<std::shared_ptr<TensorHook>>& hooks, Tensor g, uint32_t output_nr) {
  for (const auto& h : hooks) {
    if (h->output_nr != output_nr || h->removed.load(std::memory_order_relaxed)) continue;
    Tensor r = h->fn(g);
    if (!r.defined()) continue;
    KILN_CHECK(r.shape() == g.shape() && r.dtype() == g.dtype() && r.device() == g.device(), "register_hook",
               "a hook returned a gradient ", r.dtype(), " ", r.shape(), " on ", r.device(), " for one ", g.dtype(),
               " ", g.shape(), " on ", g.device());
    g = std::move(r);
  }
  return g;
}

Node::~Node() {
  // torch's deleteNode: an edge this node alone holds is taken out before the node dies, and the
  // nodes taken free theirs the same way, so each destructor finds nothing left to recurse into.
  std::vector<std::shared_ptr<Node>> sole;
  auto take = [&sole](std::vector<Edge>& edges) {
    for (Edge& e : edges)
      if (e.fn && e.fn.use_count() == 1) sole.push_back(std::move(e.fn));
  };
  take(next_edges);
  while (!sole.empty()) {
    std::shared_ptr<Node> n = std::move(sole.back());
    sole.pop_back();
    take(n->next_edges);
  }
}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grads) {
  std::lock_guard lock(mutex_);
  KILN_CHECK(fn_ != nullptr || multi_fn_ != nullptr, "backward", "trying to run backward through ", name_,
             " a second time, after its saved tensors were freed; pass retain_graph = true to the "
             "first backward()");
  return multi_fn_ ? multi_fn_(std::move(grads)) : fn_(grads[0]);
}

namespace {

// Whether g's memory is reachable only through g: its storage held by g alone, or by g and the
// tensor it is a whole view of, which only g holds (a bias gradient's sum(keepdim) reshaped, a
// reshaped matmul result). A gradient that is part of a larger buffer is not: it would keep the
// buffer alive, and other parts may be other gradients.
bool sole_owner(const Tensor& g) {
  if (g.impl_ptr().use_count() != 1) return false;
  const long holders = g.storage().use_count();
  if (holders == 1) return true;
  const std::shared_ptr<TensorImpl>& base = g.impl()->view_base;
  return holders == 2 && g.impl()->is_view && base && base.use_count() == 1 && base->storage == g.storage() &&
         g.nbytes() == g.storage()->nbytes;
}

}  // namespace

void FunctionNode::add_tensor_hook(std::shared_ptr<TensorHook> hook) {
  std::lock_guard lock(hooks_mutex_);
  tensor_hooks_.push_back(std::move(hook));
  has_hooks_.store(true, std::memory_order_release);
}

void FunctionNode::add_pre_hook(PreHook hook) {
  std::lock_guard lock(hooks_mutex_);
  pre_hooks_.push_back(std::move(hook));
  has_hooks_.store(true, std::memory_order_release);
}

std::vector<std::shared_ptr<TensorHook>> FunctionNode::tensor_hooks() const {
  if (!has_hooks_.load(std::memory_order_acquire)) return {};
  std::lock_guard lock(hooks_mutex_);
  return tensor_hooks_;
}

std::vector<FunctionNode::PreHook> FunctionNode::pre_hooks() const {
  if (!has_hooks_.load(std::memory_order_acquire)) return {};
  std::lock_guard lock(hooks_mutex_);
  return pre_hooks_;
}

void FunctionNode::move_pre_hooks(uint32_t output_nr, FunctionNode& to, uint32_t to_nr) {
  std::vector<PreHook> moved;
  {
    std::lock_guard lock(hooks_mutex_);
    std::erase_if(pre_hooks_, [&](PreHook& h) {
      if (h.output_nr != output_nr) return false;
      moved.push_back(std::move(h));
      return true;
    });
  }
  for (PreHook& h : moved) to.add_pre_hook({to_nr, std::move(h.fn)});
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads[0]);
  AutogradMeta& meta = leaf_->autograd_meta();
  // One accumulation into this leaf at a time, through its post-accumulate hooks (as torch holds
  // AccumulateGrad's mutex there): a hook sees the sum it follows, never another thread's
  // half-written gradient, and may clear .grad() (an optimizer step in backward).
  std::lock_guard accumulating(meta.accumulate_mutex);
  std::unique_lock<std::mutex> lock(meta.mutex);
  if (is_grad_enabled()) {
    // create_graph: .grad() is differentiable (its history kept, as torch's): a copy of the
    // first gradient (laid out like the leaf), then out-of-place sums.
    if (meta.grad.defined()) {
      meta.grad = meta.grad + g;
    } else {
      Tensor leaf(leaf_);
      meta.grad = make_empty_like(leaf, leaf.shape(), leaf.dtype(), leaf.device());
      meta.grad.copy_(g);
    }
  } else if (!meta.grad.defined()) {
    // Steal the buffer when nothing else shares it and it is laid out like the leaf (PyTorch's
    // gradient layout contract: a channels-last weight gets a channels-last .grad()); otherwise
    // copy, so that an in-place change to .grad() (zero_, an optimizer) cannot reach another
    // tensor, nor write one element many times through a broadcast (stride-0) gradient.
    // The gradient has the leaf's dtype and device (a hook's result is cast, as PyTorch's).
    Tensor leaf(leaf_);
    if (sole_owner(g) && g.strides() == strides_like(leaf, leaf.shape()) && g.dtype() == leaf.dtype() &&
        g.device() == leaf.device()) {
      meta.grad = g;
    } else {
      meta.grad = make_empty_like(leaf, leaf.shape(), leaf.dtype(), leaf.device());
      meta.grad.copy_(g);
    }
  } else if (is_non_overlapping_and_dense(meta.grad)) {
    // In place, as PyTorch's AccumulateGrad: a handle on .grad() (a view, a flat buffer) sees the
    // sum, no second gradient is allocated, and the sum keeps .grad()'s dtype.
    meta.grad.add_(g);
  } else {
    meta.grad = meta.grad + g;  // a broadcast .grad() set by hand: one element is many
  }
  if (!meta.post_accumulate_grad_hooks.empty()) {
    Tensor leaf(leaf_);
    const auto hooks = meta.post_accumulate_grad_hooks;  // a hook may remove itself
    lock.unlock();  // outside the tensor's lock: a hook may read or set .grad() itself
    for (const auto& [id, hook] : hooks) hook(leaf);
  }
  return {};
}

bool is_grad_enabled() { return g_grad_enabled; }
void set_detect_anomaly(bool enabled) { g_detect_anomaly.store(enabled); }
bool is_anomaly_enabled() { return g_detect_anomaly.load(); }

void queue_callback(std::function<void()> callback) {
  KILN_CHECK(g_backward_depth > 0, "autograd::queue_callback", "called outside a backward pass");
  g_callbacks.push_back(std::move(callback));
}
void set_grad_enabled(bool enabled) { g_grad_enabled = enabled; }

namespace {
// The edges a pass starts from and their gradients, for grad() and backward() (`where` names it;
// `grad_name` i names a given gradient, or "the gradient" for tensor.backward(gradient)'s one).
struct Roots {
  std::vector<Edge> edges;
  std::vector<Tensor> grads;
};
Roots roots_of(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, const char* where,
               const char* grad_name, bool one_gradient = false) {
  KILN_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), where, "got ", grad_outputs.size(), " ",
             grad_name, "s for ", outputs.size(), " outputs");
  Roots r;
  for (size_t i = 0; i < outputs.size(); ++i) {
    KILN_CHECK(outputs[i].defined(), where, "output ", i, " is an undefined tensor");
    KILN_CHECK(outputs[i].requires_grad(), where, "output ", i, " does not require grad and has no grad_fn");
    r.edges.push_back(gradient_edge(outputs[i]));
    r.grads.push_back(root_grad(outputs[i], grad_outputs.empty() ? Tensor() : grad_outputs[i], where,
                                one_gradient ? std::string("the gradient") : grad_name + std::string(" ") + std::to_string(i)));
  }
  return r;
}

std::vector<Edge> targets_of(const std::vector<Tensor>& inputs, const char* where) {
  std::vector<Edge> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(inputs[i].defined(), where, "input ", i, " is an undefined tensor");
    KILN_CHECK(inputs[i].requires_grad(), where, "input ", i, " does not require grad");
    targets.push_back(gradient_edge(inputs[i]));
  }
  return targets;
}
}  // namespace

void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors, bool retain_graph,
              const std::vector<Tensor>& inputs, bool create_graph) {
  const Roots roots = roots_of(tensors, grad_tensors, "backward", "grad_tensor", tensors.size() == 1);
  const PassOptions pass{retain_graph || create_graph, create_graph};
  if (inputs.empty()) {
    execute(roots.edges, roots.grads, pass, nullptr);
    return;
  }
  const std::vector<Edge> targets = targets_of(inputs, "backward");
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(inputs[i].is_leaf(), "backward", "input ", i, " is not a leaf: backward(inputs) accumulates into "
               "leaves' .grad() (autograd::grad gives a non-leaf's gradient)");
  // The leaves' gradients are captured, not accumulated, while the graph runs; each goes through
  // its leaf's own accumulation (layout, post-accumulate hooks) once, a leaf given twice included.
  const std::vector<Tensor> result = execute(roots.edges, roots.grads, pass, &targets);
  AutoGradMode grad_mode(create_graph);  // .grad() keeps the sum's history, as in the pass
  std::unordered_set<Node*> done;
  for (size_t i = 0; i < result.size(); ++i)
    if (result[i].defined() && done.insert(targets[i].fn.get()).second) targets[i].fn->apply({result[i]});
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool allow_unused,
                         bool create_graph) {
  const Roots roots = roots_of(outputs, grad_outputs, "autograd::grad", "grad_output");
  const std::vector<Edge> targets = targets_of(inputs, "autograd::grad");
  std::vector<Tensor> result =
      execute(roots.edges, roots.grads, {retain_graph || create_graph, create_graph}, &targets);
  for (size_t i = 0; i < result.size(); ++i)
    KILN_CHECK(result[i].defined() || allow_unused, "autograd::grad", "input ", i,
               " was not used to compute the outputs (pass allow_unused = true to get an undefined "
               "tensor for it)");
  return result;
}

}  // namespace kiln::autograd

namespace kiln {

Tensor& Tensor::requires_grad_(bool enabled) {
  KILN_CHECK(defined(), "requires_grad_", "the tensor is undefined");
  KILN_CHECK(!enabled || is_floating_point(), "requires_grad_",
             "only floating-point tensors can require grad, got ", dtype());
  // A non-leaf requires grad already: asking again changes nothing (as PyTorch), turning it off
  // would cut the graph.
  if (!is_leaf() && enabled) return *this;
  KILN_CHECK(is_leaf(), "requires_grad_", "a non-leaf tensor cannot stop requiring grad; use detach() instead");
  impl_->autograd_meta().requires_grad = enabled;
  return *this;
}

// Under the tensor's lock: backward on another thread may be setting it (a shared parameter).
Tensor Tensor::grad() const {
  if (!impl_ || !impl_->autograd) return Tensor();
  std::lock_guard lock(impl_->autograd->mutex);
  return impl_->autograd->grad;
}

void Tensor::set_grad(const Tensor& g) {
  KILN_CHECK(defined(), "set_grad", "the tensor is undefined");
  if (g.defined()) {
    KILN_CHECK(g.shape() == shape(), "set_grad", "a gradient of shape ", g.shape(), " for a tensor of shape ", shape());
    KILN_CHECK(g.dtype() == dtype(), "set_grad", "a gradient of dtype ", g.dtype(), " for a tensor of dtype ", dtype());
    KILN_CHECK(g.device() == device(), "set_grad", "a gradient on ", g.device(), " for a tensor on ", device());
  }
  AutogradMeta& meta = impl_->autograd_meta();
  std::lock_guard lock(meta.mutex);
  meta.grad = g;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  return impl_ && impl_->autograd ? impl_->autograd->grad_fn : nullptr;
}

bool Tensor::is_leaf() const { return !impl_ || !impl_->autograd || !impl_->autograd->grad_fn; }

uint64_t Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) {
  KILN_CHECK(defined() && requires_grad() && is_leaf(), "register_post_accumulate_grad_hook",
             "needs a leaf tensor that requires grad");
  static std::atomic<uint64_t> next_id{1};
  const uint64_t id = next_id++;
  AutogradMeta& meta = impl_->autograd_meta();
  std::lock_guard lock(meta.mutex);  // a backward on another thread may be reading the list
  meta.post_accumulate_grad_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_post_accumulate_grad_hook(uint64_t id) {
  if (!defined() || !impl_->autograd) return;
  std::lock_guard lock(impl_->autograd->mutex);
  std::erase_if(impl_->autograd->post_accumulate_grad_hooks, [id](const auto& h) { return h.first == id; });
}

uint64_t Tensor::add_hook(std::function<Tensor(const Tensor&)> hook) {
  KILN_CHECK(defined() && requires_grad(), "register_hook",
             defined() ? "the tensor does not require grad (a hook on it would never run)" : "the tensor is undefined");
  static std::atomic<uint64_t> next_id{1};
  auto h = std::make_shared<autograd::TensorHook>();
  h->id = next_id++;
  h->fn = std::move(hook);
  AutogradMeta& meta = impl_->autograd_meta();
  std::lock_guard lock(meta.mutex);
  h->output_nr = meta.output_nr;
  if (auto* fn = dynamic_cast<autograd::FunctionNode*>(meta.grad_fn.get())) fn->add_tensor_hook(h);
  meta.hooks.push_back(h);
  return h->id;
}

void Tensor::remove_hook(uint64_t id) {
  if (!defined() || !impl_->autograd) return;
  AutogradMeta& meta = *impl_->autograd;
  std::lock_guard lock(meta.mutex);
  std::erase_if(meta.hooks, [id](const std::shared_ptr<autograd::TensorHook>& h) {
    if (h->id != id) return false;
    h->removed = true;  // a node that holds it skips it
    return true;
  });
}

void Tensor::retain_grad() {
  KILN_CHECK(defined() && requires_grad(), "retain_grad", "the tensor ", defined() ? "does not require grad" : "is undefined");
  if (is_leaf()) return;
  AutogradMeta& meta = impl_->autograd_meta();
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  auto* fn = dynamic_cast<autograd::FunctionNode*>(meta.grad_fn.get());
  std::weak_ptr<TensorImpl> weak = impl_;
  fn->add_pre_hook({meta.output_nr, [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      AutogradMeta& m = impl->autograd_meta();
      std::lock_guard lock(m.mutex);  // two threads may backpropagate through one graph
      m.grad = m.grad.defined() ? m.grad + g : g.clone();
    }
  }});
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, const std::vector<Tensor>& inputs) const {
  backward(gradient, retain_graph, /*create_graph=*/false, inputs);
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph,
                      const std::vector<Tensor>& inputs) const {
  KILN_CHECK(defined(), "backward", "the tensor is undefined");
  KILN_CHECK(requires_grad(), "backward", "the tensor does not require grad and has no grad_fn "
             "(did you call requires_grad_() on the inputs, or run under NoGradGuard?)");
  autograd::backward({*this}, {gradient}, retain_graph, inputs, create_graph);
}

}  // namespace kiln
