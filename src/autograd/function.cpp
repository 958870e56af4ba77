// Recording ops on the tape: saved tensors, edges, in-place checks and broadcast reduction.
#include <cxxabi.h>

#include <algorithm>
#include <any>
#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>

#include "autograd/node.h"
#include "autograd/saved_hooks.h"
#include "core/tensor_util.h"
#include "kiln/ops.h"

namespace kiln::autograd {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

namespace {
// The geometry of a view inside a fresh buffer laid out like its base.
struct ViewGeometry {
  Shape base_sizes, base_strides, sizes, strides;
  int64_t offset = 0;  // relative to the base's first element
  Tensor empty_base(const Tensor& like) const {
    return make_empty_strided(base_sizes, base_strides, like.dtype(), like.device());
  }
  Tensor region(const Tensor& base_buffer) const { return make_view(base_buffer, sizes, strides, offset); }
};

ViewGeometry geometry_of(const Tensor& view, const Tensor& base) {
  return {base.shape(), base.strides(), view.shape(), view.strides(), view.storage_offset() - base.storage_offset()};
}

// A node that takes a gradient of `geo`'s region into a zero base-shaped buffer at the region's
// place, on along `base`: a view's history as its region of the base.
std::shared_ptr<FunctionNode> region_node(const ViewGeometry& geo, Edge base) {
  auto node = std::make_shared<FunctionNode>("AsStridedBackward", [geo](const Tensor& g) -> TensorList {
    Tensor result = geo.empty_base(g);
    result.zero_();
    geo.region(result).copy_(g);
    return {result};
  });
  node->saves_tensors = false;
  node->next_edges.push_back(std::move(base));
  return node;
}
}  // namespace

struct SavedState {
  Tensor value;  // an alias without history; none once packed by saved-tensor hooks
  uint64_t version = 0;
  const TensorImpl* saved = nullptr;     // the tensor saved, to tell the output of the op saving it
  std::shared_ptr<TensorImpl> original;  // the tensor saved, while it is another's output or a leaf
  std::weak_ptr<Node> output_of;         // the node of the op that made it and saved it
  uint32_t output_nr = 0;                // which of that node's outputs it is
  // For a view of the tensor an in-place op changed and saved (exp_ on a slice keeps its result):
  // its region of that tensor, the op's output.
  std::optional<ViewGeometry> region;
  // Saved-tensor hooks (kiln/autograd/graph.h): those in effect when it was saved, and once the
  // op is recorded what pack returned; an input that requires grad then keeps its history as an
  // edge (a leaf's: its accumulator), not the tensor. What pack keeps is not checked for in-place
  // changes (as in torch): a copy, or a recomputation, has none.
  std::shared_ptr<const detail::SavedHooks> hooks;
  std::any packed;
  Edge history;
};

namespace {
// SavedTensors made on this thread since the last node was recorded: ops make them in the
// capture of the backward function they pass to record(), which tells the output among them.
// One left by an op that threw before recording is gone or ignored (its tensor is no output).
thread_local std::vector<std::weak_ptr<SavedState>> g_saved;

// A saved tensor whose op is recorded, given to the saved-tensor hooks it was saved under: the
// graph keeps what pack returns instead of the tensor, and for an input that requires grad its
// history as an edge (under create_graph the tensor unpacked takes it).
void seal(SavedState& s) {
  if (!s.hooks || !s.value.defined()) return;
  if (s.original) {
    s.history = gradient_edge(Tensor(s.original));
    s.original.reset();
  }
  NoGradGuard no_grad;  // pack sees values; its own ops are not recorded
  s.packed = s.hooks->pack(s.value);
  s.value = Tensor();
}

// A saved tensor that is one of the outputs of `node` (or, for an in-place op, a view of what it
// changed) gives up its own history for the node's, so that the node never holds itself.
void claim(SavedState& s, const std::shared_ptr<Node>& node, std::span<const Tensor* const> outputs, bool inplace) {
  for (uint32_t k = 0; k < outputs.size(); ++k) {
    if (!outputs[k] || !outputs[k]->defined()) continue;
    const Tensor& output = *outputs[k];
    const bool view_of_changed = inplace && s.value.storage() == output.storage();
    if (s.saved != output.impl() && !view_of_changed) continue;
    s.original.reset();
    s.output_of = node;
    s.output_nr = k;
    if (s.saved != output.impl()) s.region = geometry_of(s.value, output);
    return;
  }
}

// Whether the node being recorded saved tensors (the SavedTensors made on this thread since the
// last record), each claimed by the node's outputs.
bool take_saved(const std::shared_ptr<Node>& node = nullptr, std::span<const Tensor* const> outputs = {},
                bool inplace = false) {
  if (g_saved.empty()) return false;
  bool hooked = false;
  for (const std::weak_ptr<SavedState>& w : g_saved)
    if (const std::shared_ptr<SavedState> s = w.lock()) {
      claim(*s, node, outputs, inplace);
      hooked = hooked || s->hooks != nullptr;
    }
  if (!hooked || !node) {
    g_saved.clear();  // keeps its capacity
    return true;
  }
  // Taken first: a pack hook may run ops that save tensors of their own.
  for (const std::weak_ptr<SavedState>& w : std::exchange(g_saved, {}))
    if (const std::shared_ptr<SavedState> s = w.lock()) seal(*s);
  return true;
}

std::shared_ptr<SavedState> save(const Tensor& t) {
  if (!t.defined()) return nullptr;
  auto state = std::make_shared<SavedState>();
  state->value = alias_detached(t);
  state->version = t.version();
  state->saved = t.impl();
  if (t.requires_grad()) state->original = t.impl_ptr();
  state->hooks = detail::current_saved_hooks();
  g_saved.push_back(state);
  return state;
}

Tensor unpack(const std::shared_ptr<SavedState>& state, const char* node) {
  if (!state) return {};
  const SavedState& s = *state;
  const bool packed = s.hooks && !s.value.defined();
  if (!packed && s.value.version() != s.version)
    KILN_FAIL("backward", "a tensor that ", node, " saved for the backward pass was modified in place "
              "afterwards (its version is ", s.value.version(), ", expected ", s.version,
              "); use an out-of-place op or clone() it first");
  Tensor value = s.value;
  if (packed) {
    {
      NoGradGuard no_grad;
      value = s.hooks->unpack(s.packed);
    }
    KILN_CHECK(value.defined(), "backward", "a saved-tensor unpack hook gave an undefined tensor for a tensor that ",
               node, " saved");
  }
  if (!is_grad_enabled()) return value;
  // create_graph: the formula is differentiated through the tensor.
  if (s.original) return Tensor(s.original);
  if (s.history.valid()) {  // packed: an input's history (a leaf's accumulator), given to the tensor unpacked
    Tensor out = alias_detached(value);
    AutogradMeta& meta = out.impl()->autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = s.history.fn;
    meta.output_nr = s.history.input_nr;
    return out;
  }
  if (std::shared_ptr<Node> fn = s.output_of.lock()) {
    Tensor out = alias_detached(value);
    AutogradMeta& meta = out.impl()->autograd_meta();
    meta.requires_grad = true;
    if (s.region) {  // its region of the op's output, as torch regenerates a view's history
      auto view = region_node(*s.region, {std::move(fn), s.output_nr});
      view->place = StreamPlace::current(out.device());
      meta.grad_fn = std::move(view);
    } else {
      meta.grad_fn = std::move(fn);
      meta.output_nr = s.output_nr;
    }
    return out;
  }
  KILN_CHECK(!s.region, "backward", "create_graph: ", node, " saved a view of the tensor it changed in place, "
             "whose node is gone");
  return value;
}

}  // namespace

SavedTensor::SavedTensor(const Tensor& t) : state_(save(t)) {}
Tensor SavedTensor::get(const char* node) const { return unpack(state_, node); }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!is_grad_enabled()) return false;
  bool any = false;
  for (const Tensor* t : inputs) {
    if (!t->defined()) continue;
    any = any || t->requires_grad();  // a stale view's history is brought up to date first
  }
  return any;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  bool any = false;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    any = any || t.requires_grad();
  }
  return any;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& meta = t.impl()->autograd_meta();
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  // Threads recording ops on one shared leaf make and keep a single accumulator.
  std::lock_guard<std::mutex> lock(meta.mutex);
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

namespace {
uint64_t history(const Tensor& t) { return t.storage()->history.load(std::memory_order_relaxed); }

void attach(const std::shared_ptr<FunctionNode>& node, const Tensor& output, uint32_t output_nr = 0) {
  AutogradMeta& meta = output.impl()->autograd_meta();
  // After an in-place op, a tensor that retains its grad keeps the gradient of its new value
  // (as in PyTorch): its retain_grad hook moves to the new node.
  if (auto* old = meta.retains_grad ? dynamic_cast<FunctionNode*>(meta.grad_fn.get()) : nullptr)
    old->move_pre_hooks(meta.output_nr, *node, output_nr);
  meta.requires_grad = true;
  meta.grad_fn = node;
  meta.output_nr = output_nr;
  node->place = StreamPlace::current(output.device());
  // Last, with release: refresh_view reads it without a lock (see there).
  std::atomic_ref<uint64_t>(output.impl()->view_history).store(history(output), std::memory_order_release);
}

// `view`'s history as "its region of the base as the base is now": the gradient goes into a
// zero base-shaped buffer at the view's place, and on along the base's current edge.
void attach_as_view_of(const Tensor& view, const Tensor& base, const ViewGeometry& geo) {
  attach(region_node(geo, gradient_edge(base)), view);
}

bool requires_grad(const TensorImpl& t) { return t.autograd && (t.autograd->requires_grad || t.autograd->grad_fn); }
}  // namespace

void refresh_view(const Tensor& t) {
  const TensorImpl& impl = *t.impl();
  if (!impl.is_view || impl.view_no_grad || !impl.view_base || !requires_grad(*impl.view_base)) return;
  // A current view (every op's case but the first after an in-place change) takes no lock:
  // attach() publishes view_history last, so a match read here sees the grad_fn it goes with.
  auto current = [&] {
    return std::atomic_ref<uint64_t>(t.impl()->view_history).load(std::memory_order_acquire) == history(t) &&
           impl.autograd && impl.autograd->grad_fn;
  };
  if (current()) return;
  // Threads renewing one stale view do it under a lock (torch locks a view's grad_fn the same
  // way), striped by tensor so that unrelated views do not contend.
  static std::array<std::mutex, 64> locks;
  std::lock_guard<std::mutex> lock(locks[(reinterpret_cast<uintptr_t>(&impl) >> 6) % locks.size()]);
  if (current()) return;  // another thread renewed it
  Tensor base(impl.view_base);
  attach_as_view_of(t, base, geometry_of(t, base));
}

}  // namespace kiln::autograd

namespace kiln::detail {
bool view_requires_grad(const Tensor& t) {
  autograd::refresh_view(t);
  const auto& meta = t.impl()->autograd;
  return meta && meta->requires_grad;
}
}  // namespace kiln::detail

namespace kiln::autograd {

namespace {
void record_node(const char* name, std::span<const Tensor* const> inputs, const Tensor& output, BackwardFn backward,
                 bool is_view = false, bool inplace = false) {
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  const Tensor* outputs[] = {&output};
  node->saves_tensors = take_saved(node, outputs, inplace);
  node->is_view = is_view;
  node->next_edges.reserve(inputs.size());
  for (const Tensor* t : inputs) node->next_edges.push_back(gradient_edge(*t));
  attach(node, output);
}

std::vector<const Tensor*> pointers(const std::vector<Tensor>& tensors) {
  std::vector<const Tensor*> out;
  for (const Tensor& t : tensors) out.push_back(&t);
  return out;
}
}  // namespace

void record(const char* name, std::initializer_list<const Tensor*> inputs, const Tensor& output,
            BackwardFn backward) {
  record_node(name, {inputs.begin(), inputs.size()}, output, std::move(backward));
}

void record(const char* name, const std::vector<Tensor>& inputs, const Tensor& output, BackwardFn backward) {
  record_node(name, pointers(inputs), output, std::move(backward));
}

void record_view(const char* name, const Tensor& source, const Tensor& view, BackwardFn backward) {
  const Tensor* in[] = {&source};
  record_node(name, in, view, std::move(backward), /*is_view=*/true);
}

namespace {
constexpr const char* kViewOfALeaf =
    "a view of a leaf tensor that requires grad cannot be changed in place while grad mode is on "
    "(use kiln::NoGradGuard, or an out-of-place op)";

// Whether `t`'s history is a chain of view ops down to a leaf that requires grad (a view of a
// view that is itself a leaf: the base check below sees only the storage's root).
bool views_a_grad_leaf(const Tensor& t) {
  const auto& meta = t.impl()->autograd;
  const Node* n = meta ? meta->grad_fn.get() : nullptr;
  while (const auto* f = dynamic_cast<const FunctionNode*>(n)) {
    if (!f->is_view || f->next_edges.empty()) return false;
    n = f->next_edges[0].fn.get();
  }
  return dynamic_cast<const AccumulateGrad*>(n) != nullptr;
}
}  // namespace

void check_inplace(const Tensor& self, const char* op) {
  // Elements that share memory (an expanded tensor) would each be written, in an order that
  // depends on the loop and the threads; PyTorch refuses too.
  for (int64_t d = 0; d < self.dim() && self.numel() > 0; ++d)
    KILN_CHECK(self.size(d) <= 1 || self.stride(d) != 0, op,
               "more than one element of the tensor changed in place refers to a single memory location "
               "(an expanded tensor, shape ", self.shape(), ", strides ", self.strides(), "); clone() it first");
  if (!is_grad_enabled()) return;
  if (self.requires_grad() && self.is_leaf())
    KILN_FAIL(op, "a leaf tensor that requires grad cannot be changed in place while grad mode is on "
              "(use kiln::NoGradGuard, or an out-of-place op)");
  const TensorImpl& impl = *self.impl();
  if (!impl.is_view) return;
  KILN_CHECK(!views_a_grad_leaf(self), op, kViewOfALeaf);  // self.requires_grad() above refreshed it
  Tensor base(impl.view_base);
  if (!base.requires_grad()) return;
  // From here the base requires grad, so the change must be recorded on it, whatever the op's
  // other operands (a no-grad view's zero_() of a weight would otherwise change it unseen).
  KILN_CHECK(!base.is_leaf(), op, kViewOfALeaf);
  KILN_CHECK(!impl.view_no_grad, op,
             "the tensor changed in place is a view taken under NoGradGuard, but its base requires grad: the change "
             "would be hidden from autograd (PyTorch refuses too); take the view with grad mode on");
}

void record_inplace(const char* name, const Tensor& self, std::initializer_list<const Tensor*> inputs,
                    BackwardFn backward) {
  const TensorImpl& impl = *self.impl();
  if (!impl.is_view) {
    record_node(name, {inputs.begin(), inputs.size()}, self, std::move(backward), /*is_view=*/false, /*inplace=*/true);
    self.storage()->history.fetch_add(1, std::memory_order_relaxed);
    self.impl()->view_history = history(self);
    return;
  }
  // A view changed in place changes its base: the base's new history is "the old base, with the
  // view's region replaced by the op's result" (PyTorch's CopySlices), and the view's new
  // history is a view of that.
  Tensor base(impl.view_base);
  const ViewGeometry geo = geometry_of(self, base);
  auto copy_slices = std::make_shared<FunctionNode>(
      "CopySlices", [geo, fn = std::move(backward)](const Tensor& g) -> TensorList {
        Tensor result = geo.empty_base(g);
        result.copy_(g);
        Tensor region = geo.region(result);
        Tensor region_grad = region.clone();
        region.zero_();  // the region's old values were overwritten; they get their gradient via the op
        TensorList grads = fn(region_grad);
        grads.insert(grads.begin(), result);
        return grads;
      });
  const Tensor* changed[] = {&base};
  copy_slices->saves_tensors = take_saved(copy_slices, changed, /*inplace=*/true);
  copy_slices->next_edges.push_back(gradient_edge(base));
  for (const Tensor* t : inputs) copy_slices->next_edges.push_back(gradient_edge(*t));
  self.storage()->history.fetch_add(1, std::memory_order_relaxed);
  attach(copy_slices, base);
  attach_as_view_of(self, base, geo);
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  Shape dims;
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && grad.shape()[d] != 1)) dims.push_back(d);
  Tensor r = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return lead > 0 || r.shape() != shape ? r.reshape(shape) : r;
}

Tensor InputMeta::operator()(const Tensor& grad) const {
  if (!needs) return {};
  Tensor g = sum_to(grad, shape);
  if (g.dtype() != dtype) g = g.to(dtype);
  return g.device() == device ? g : g.to(device);
}

}  // namespace kiln::autograd

namespace kiln::autograd {

// ---- custom functions (the public kiln::autograd::Function)

void AutogradContext::save_for_backward(const std::vector<Tensor>& tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.push_back(save(t));
}

std::vector<Tensor> AutogradContext::get_saved_variables() const {
  std::vector<Tensor> out;
  for (const auto& s : saved_) out.push_back(unpack(s, "a custom function"));
  return out;
}

const char* SavedValue::kind() const {
  static const char* kinds[] = {"nothing", "double", "int", "bool", "string", "int list", "tensor"};
  return kinds[v_.index()];
}

namespace {
[[noreturn]] void wrong_kind(const SavedValue& v, const char* wanted) {
  KILN_FAIL("saved_data", "expected ", wanted, " but the value holds ", v.kind());
}
}  // namespace

double SavedValue::toDouble() const {
  if (isDouble()) return std::get<double>(v_);
  if (isInt()) return static_cast<double>(std::get<int64_t>(v_));
  wrong_kind(*this, "a number");
}
int64_t SavedValue::toInt() const {
  if (!isInt()) wrong_kind(*this, "an int");
  return std::get<int64_t>(v_);
}
bool SavedValue::toBool() const {
  if (!isBool()) wrong_kind(*this, "a bool");
  return std::get<bool>(v_);
}
const std::string& SavedValue::toStringRef() const {
  if (!isString()) wrong_kind(*this, "a string");
  return std::get<std::string>(v_);
}
std::vector<int64_t> SavedValue::toIntVector() const {
  if (!isIntList()) wrong_kind(*this, "an int list");
  return std::get<std::vector<int64_t>>(v_);
}
Tensor SavedValue::toTensor() const {
  if (!isTensor()) wrong_kind(*this, "a tensor");
  return std::get<Tensor>(v_);
}
SavedValue::operator Scalar() const {
  if (isInt()) return Scalar(std::get<int64_t>(v_));
  if (isBool()) return Scalar(std::get<bool>(v_));
  return Scalar(toDouble());
}

void AutogradContext::mark_non_differentiable(const std::vector<Tensor>& outputs) {
  for (const Tensor& t : outputs)
    if (t.defined()) non_differentiable_.push_back(t.impl_ptr());
}

void AutogradContext::mark_dirty(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined()) dirty_.push_back(t.impl_ptr());
}

bool AutogradContext::has_saved_tensors() const {
  return std::any_of(saved_.begin(), saved_.end(), [](const auto& s) { return s != nullptr; });
}

namespace {
// The readable name of a custom function's type, kept for the program's life (nodes hold a
// const char*): "Swish" rather than typeid's "5Swish".
// Whether `shape` broadcasts to `to`.
bool expandable(const Shape& shape, const Shape& to) {
  if (shape.size() > to.size()) return false;
  for (size_t i = 1; i <= shape.size(); ++i)
    if (shape[shape.size() - i] != 1 && shape[shape.size() - i] != to[to.size() - i]) return false;
  return true;
}

const char* readable_name(const char* mangled) {
  static std::mutex mutex;
  static std::set<std::string> names;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(status == 0 && d ? d.get() : mangled).first->c_str();
}
}  // namespace

namespace detail {
std::vector<Tensor> record_custom(const char* mangled, const std::vector<Tensor>& inputs, std::vector<Tensor> outputs,
                                  std::function<std::vector<Tensor>(std::vector<Tensor>&&)> backward,
                                  const AutogradContext& ctx) {
  const char* name = readable_name(mangled);
  KILN_CHECK(!outputs.empty(), name, "forward of a custom function returned no tensor");
  const auto listed = [](const std::vector<std::shared_ptr<TensorImpl>>& list, const Tensor& t) {
    return std::any_of(list.begin(), list.end(), [&](const auto& impl) { return impl.get() == t.impl(); });
  };
  // An integer or bool output (an argmax) has no gradient: it does not require grad, as torch's;
  // nor does one marked non-differentiable, nor an undefined one (torch's None), whose gradient
  // backward gets undefined.
  std::vector<bool> differentiable, dirty;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& out = outputs[k];
    differentiable.push_back(out.defined() && out.is_floating_point() && !listed(ctx.non_differentiable_, out));
    dirty.push_back(out.defined() && listed(ctx.dirty_, out) && std::none_of(outputs.begin(), outputs.begin() + k, [&](const Tensor& t) {
                      return t.impl() == out.impl();
                    }));
  }
  for (const auto& impl : ctx.dirty_) {
    const auto is = [&](const Tensor& t) { return t.impl() == impl.get(); };
    KILN_CHECK(std::any_of(inputs.begin(), inputs.end(), is), name, "mark_dirty was given a tensor that is not an "
               "input of forward");
    KILN_CHECK(std::any_of(outputs.begin(), outputs.end(), is), name, "an input marked dirty (changed in place) "
               "must be returned by forward as an output");
  }
  take_saved();  // forward's own ops recorded nothing; its context's saved tensors are claimed below
  if (!needs_grad(inputs) || std::none_of(differentiable.begin(), differentiable.end(), [](bool d) { return d; }))
    return outputs;
  for (const auto& impl : ctx.dirty_) {
    const Tensor t(impl);
    KILN_CHECK(!(t.requires_grad() && t.is_leaf()), name, "a leaf tensor that requires grad was changed in place "
               "(marked dirty) while grad mode is on (use kiln::NoGradGuard, or an out-of-place function)");
    KILN_CHECK(!t.impl()->is_view, name, "a view was marked dirty (changed in place); custom functions change "
               "whole tensors in place: clone() the view first");
  }
  // Never rewrite an input's history, nor an earlier output's: an output that is one becomes a view
  // of it (but for an input marked dirty, which the function's history replaces), so that an
  // in-place change to either is seen by both histories, or refused where the input is a leaf.
  // An output that is a view (of an input, taken in forward) is one for autograd too: once its
  // base is changed in place, its history is its region of the base's.
  for (size_t k = 0; k < outputs.size(); ++k) {
    const auto same = [&](const Tensor& t) { return t.defined() && t.impl() == outputs[k].impl(); };
    Tensor& out = outputs[k];
    if (!dirty[k] && (std::any_of(inputs.begin(), inputs.end(), same) ||
                      std::any_of(outputs.begin(), outputs.begin() + k, same)))
      out = make_view(out, out.shape(), out.strides(), out.storage_offset());
    else if (differentiable[k] && out.impl()->is_view)
      out.impl()->view_no_grad = false;
  }
  // What each input's gradient must be: its shape is checked, its dtype and device are the
  // input's (a gradient in another dtype is cast, as PyTorch's validate_outputs does).
  // An input that needs no gradient has its returned one ignored, as PyTorch's (an index input's).
  // Undefined inputs and outputs have none (std::nullopt).
  const auto metas_of = [](const std::vector<Tensor>& ts) {
    std::vector<std::optional<InputMeta>> m;
    for (const Tensor& t : ts) m.push_back(t.defined() ? std::optional<InputMeta>(InputMeta(t)) : std::nullopt);
    return m;
  };
  auto fn = [name, in_metas = metas_of(inputs), out_metas = metas_of(outputs), materialize = ctx.materialize_grads_,
             backward = std::move(backward)](std::vector<Tensor>&& grad_outputs) {
    if (materialize)
      for (size_t k = 0; k < grad_outputs.size(); ++k)
        if (const auto& m = out_metas[k]; !grad_outputs[k].defined() && m)  // not for an undefined output
          grad_outputs[k] = zeros(m->shape, TensorOptions().dtype(m->dtype).device(m->device));
    std::vector<Tensor> grads = backward(std::move(grad_outputs));
    // Undefined ones past the last input are allowed (torch's Nones for non-tensor arguments).
    while (grads.size() > in_metas.size() && !grads.back().defined()) grads.pop_back();
    KILN_CHECK(grads.size() == in_metas.size(), name, "backward returned ", grads.size(), " gradient(s) for ",
               in_metas.size(), " tensor input(s)");
    for (size_t i = 0; i < grads.size(); ++i) {
      const auto& m = in_metas[i];
      if (!m || !m->needs || !grads[i].defined()) {
        grads[i] = Tensor();
        continue;
      }
      // One the input broadcasts to is summed to the input's shape (torch's validate_outputs).
      KILN_CHECK(grads[i].shape() == m->shape || expandable(m->shape, grads[i].shape()), name,
                 "backward returned a gradient of shape ", grads[i].shape(), " for tensor input ", i, " of shape ",
                 m->shape);
      KILN_CHECK(grads[i].is_floating_point(), name, "backward returned a gradient of dtype ", grads[i].dtype(),
                 " for tensor input ", i, " (gradients are floating-point)");
      grads[i] = (*m)(grads[i]);  // summed to the input's shape, in its dtype, on its device
    }
    return grads;
  };
  auto node = std::make_shared<FunctionNode>(name, std::move(fn), static_cast<uint32_t>(outputs.size()));
  // The context's saved tensors are the closure's: whether there are any is the context's to say,
  // since forward saves them whether or not the function is recorded.
  // Saved at the end of forward, as torch's: in-place changes made in forward after
  // save_for_backward (to an input marked dirty) are no error.
  std::vector<const Tensor*> attached;
  for (size_t k = 0; k < outputs.size(); ++k) attached.push_back(differentiable[k] ? &outputs[k] : nullptr);
  for (const auto& saved : ctx.saved_)
    if (saved && saved->value.defined()) {  // (packed already if an op recorded in forward took it)
      saved->version = saved->value.version();
      claim(*saved, node, attached, /*inplace=*/false);
      seal(*saved);
    }
  node->saves_tensors = ctx.has_saved_tensors();
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  for (uint32_t k = 0; k < outputs.size(); ++k) {
    if (!differentiable[k]) continue;
    attach(node, outputs[k], k);
    if (dirty[k]) {  // views taken of it before are brought up to date when next used
      outputs[k].storage()->history.fetch_add(1, std::memory_order_relaxed);
      outputs[k].impl()->view_history = history(outputs[k]);
    }
  }
  return outputs;
}
}  // namespace detail

}  // namespace kiln::autograd
