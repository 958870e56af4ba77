// Autograd's public face: graph nodes, grad mode, autograd::grad and gradcheck.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <variant>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

namespace autograd {

class Node;
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// One recorded op: turns the gradient of its output into gradients of its inputs.
class Node {
 public:
  // Frees the nodes below that only this one holds in a loop, not by recursion: a chain of a
  // million ops (total = total + loss, a long unrolled loop) overflowed the stack when it died.
  virtual ~Node();
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  virtual void release_saved() {}

  std::vector<Edge> next_edges;  // one per differentiable input
  uint64_t sequence_nr = 0;      // creation order; later nodes run first
};

bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// Anomaly detection (torch.autograd.set_detect_anomaly): while on, backward checks the gradients
// each node produces, and a NaN among them is a kiln::Error naming the node (the forward op that
// recorded it) and which of its inputs the gradient is for, instead of NaN weights steps later.
// Process-wide. Each check reads the gradients back (on a GPU, a wait at every node): for
// debugging, as torch's.
void set_detect_anomaly(bool enabled);
bool is_anomaly_enabled();

// Anomaly detection on while alive (torch::autograd::DetectAnomalyGuard).
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : prev_(is_anomaly_enabled()) { set_detect_anomaly(true); }
  ~DetectAnomalyGuard() { set_detect_anomaly(prev_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

// Runs `callback` once the backward pass now running on this thread has finished its graph
// (PyTorch's Variable._execution_engine.queue_callback), in the order queued; a callback may
// throw, and then backward() throws it. Only from inside a backward pass (a hook).
void queue_callback(std::function<void()> callback);

// Gradients of outputs with respect to inputs (which may be leaves or intermediate tensors),
// without touching any .grad(). grad_outputs default to ones for one-element outputs.
// create_graph (torch's): the backward pass is recorded, so the gradients returned can be
// differentiated again (gradient penalties, Hessian-vector products, MAML's inner steps); it keeps
// the graph (retain_graph) too. The fused ops get there by double-backward formulas of their own
// (activations, convolution, pooling), by gradient formulas in differentiable ops (layer norm,
// softmax, cross-entropy, dropout, embedding) or by differentiating themselves written in
// differentiable ops (batch norm, attention; its dropout mask drawn again from the forward's
// Philox counters).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false, bool create_graph = false);

// torch.autograd.backward: the gradients of several outputs at once (grad_tensors default to ones
// for one-element outputs), accumulated into the leaves' .grad() — or, when `inputs` is given,
// into those leaves alone (the parts of the graph that lead to none of them do not run). With
// create_graph, as grad's, and the .grad() accumulated keep their history — which leads back to
// the leaf: as in torch, a cycle that holds the graph until .grad() is reset (set_grad({}));
// grad() makes none.
void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors = {},
              bool retain_graph = false, const std::vector<Tensor>& inputs = {}, bool create_graph = false);

// Compares backward() with central finite differences, input by input, element by element.
// Inputs should be float64. Throws kiln::Error describing the first mismatch when
// raise_exception is set; otherwise returns false.
struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool raise_exception = true;
};
bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
               const std::vector<Tensor>& inputs, GradcheckOptions options = {});
// torch.autograd.gradgradcheck: gradcheck of the gradients themselves (of fn's inputs, for a
// random float64 gradient of its output, which is checked too), computed with create_graph.
bool gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                   const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace autograd

// Disables recording while alive (torch::NoGradGuard).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(autograd::is_grad_enabled()) { autograd::set_grad_enabled(false); }
  ~NoGradGuard() { autograd::set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Enables or disables recording while alive (torch::AutoGradMode).
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : prev_(autograd::is_grad_enabled()) {
    autograd::set_grad_enabled(enabled);
  }
  ~AutoGradMode() { autograd::set_grad_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

// torch::InferenceMode for code written against it: recording off while alive (enabled = false
// leaves grad mode as it is). Kiln has no separate inference tensors: this is AutoGradMode(false),
// which already skips building any graph.
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true) : mode_(enabled ? false : autograd::is_grad_enabled()) {}

 private:
  AutoGradMode mode_;
};

namespace autograd {

// ---- custom differentiable functions (torch::autograd::Function)

struct SavedState;  // a saved tensor (src/autograd/function.cpp)
class AutogradContext;

namespace detail {
// Records `outputs` as computed from `inputs` by the custom function `name` (a string that lives
// for the program, such as typeid(...).name()) when grad mode is on and an input requires grad,
// and returns them (a view of it for an output that is an input, or an earlier output, itself).
// backward maps the outputs' gradients (zeros, or undefined when ctx's materialize_grads is off,
// for those that got none) to one gradient per input, checked against the inputs' shapes. A
// function that saved no tensors can be passed by later backward passes.
std::vector<Tensor> record_custom(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor> outputs,
                                  std::function<std::vector<Tensor>(std::vector<Tensor>&&)> backward,
                                  const AutogradContext& ctx);
}  // namespace detail

// A value a custom function keeps in ctx->saved_data for its backward (libtorch's IValue there): a
// number, a bool, a string, a list of integers (a shape) or a tensor. The to*() accessors refuse
// (a kiln::Error naming both kinds) a value of another kind; toDouble takes an integer too. It
// converts to double and to Scalar as it is (ctx->saved_data["beta"] in arithmetic). A tensor kept
// here is not checked against later in-place changes (save_for_backward's are), as in torch.
class SavedValue {
 public:
  SavedValue() = default;  // none: what saved_data[key] holds before anything is stored there
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  SavedValue(T v) : v_(static_cast<double>(v)) {}
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  SavedValue(T v) : v_(static_cast<int64_t>(v)) {}
  template <class T, std::enable_if_t<std::is_same_v<T, bool>, int> = 0>
  SavedValue(T v) : v_(v) {}
  SavedValue(std::string v) : v_(std::move(v)) {}
  SavedValue(const char* v) : v_(std::string(v)) {}
  SavedValue(std::vector<int64_t> v) : v_(std::move(v)) {}
  SavedValue(const Shape& v) : v_(std::vector<int64_t>(v.begin(), v.end())) {}
  SavedValue(Tensor v) : v_(std::move(v)) {}

  bool isNone() const { return v_.index() == 0; }
  bool isDouble() const { return std::holds_alternative<double>(v_); }
  bool isInt() const { return std::holds_alternative<int64_t>(v_); }
  bool isBool() const { return std::holds_alternative<bool>(v_); }
  bool isString() const { return std::holds_alternative<std::string>(v_); }
  bool isIntList() const { return std::holds_alternative<std::vector<int64_t>>(v_); }
  bool isTensor() const { return std::holds_alternative<Tensor>(v_); }
  double toDouble() const;
  int64_t toInt() const;
  bool toBool() const;
  const std::string& toStringRef() const;
  std::vector<int64_t> toIntVector() const;
  Tensor toTensor() const;
  // "double", "int", ...: what it holds, for messages.
  const char* kind() const;
  operator double() const { return toDouble(); }
  operator Scalar() const;

 private:
  std::variant<std::monostate, double, int64_t, bool, std::string, std::vector<int64_t>, Tensor> v_;
};

// What a custom function's forward leaves for its backward (torch::autograd::AutogradContext).
class AutogradContext {
 public:
  // Tensors backward needs (inputs or outputs). An in-place change made to one before backward
  // runs is an error there, not a wrong gradient. In a backward pass with create_graph they come
  // with their history, so that backward's own ops are differentiated through them.
  void save_for_backward(const std::vector<Tensor>& tensors);
  std::vector<Tensor> get_saved_variables() const;
  bool has_saved_tensors() const;
  // Whether tensor input i of forward (counting tensor arguments only) requires a gradient.
  bool needs_input_grad(size_t i) const { return i < needs_grad_.size() && needs_grad_[i]; }
  // Outputs of forward that have no gradient (an index, a mask): they do not require grad, and
  // backward gets zeros for them (as torch's). Integer and bool outputs never require grad.
  void mark_non_differentiable(const std::vector<Tensor>& outputs);
  // Inputs that forward changed in place (under its NoGradGuard) and returns: each takes the
  // function as its history, as the output it is returned as (torch's mark_dirty). Without it, an
  // input returned is a view of it with the function's history, and the input keeps its own. A
  // leaf that requires grad, or a view, marked dirty is an error (torch records a view's change
  // on its base: clone() it first).
  void mark_dirty(const std::vector<Tensor>& inputs);
  // Whether backward gets zeros (true, the default, as torch's) or undefined tensors for the
  // outputs whose gradient nothing computed (an unused output, a non-differentiable one).
  void set_materialize_grads(bool value) { materialize_grads_ = value; }
  // Anything else backward needs (numbers, flags, shapes, names).
  std::map<std::string, SavedValue> saved_data;

 private:
  template <class Derived>
  friend struct Function;
  friend std::vector<Tensor> detail::record_custom(const char*, const std::vector<Tensor>&, std::vector<Tensor>,
                                                   std::function<std::vector<Tensor>(std::vector<Tensor>&&)>,
                                                   const AutogradContext&);
  std::vector<std::shared_ptr<SavedState>> saved_;
  std::vector<bool> needs_grad_;
  std::vector<std::shared_ptr<TensorImpl>> non_differentiable_, dirty_;
  bool materialize_grads_ = true;
};

namespace detail {
inline void collect(std::vector<Tensor>&) {}
template <class A, class... Rest>
void collect(std::vector<Tensor>& out, const A& a, const Rest&... rest) {
  if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) out.push_back(a);
  collect(out, rest...);
}
}  // namespace detail

// A differentiable op written by the user, as in libtorch:
//
//   struct Swish : kiln::autograd::Function<Swish> {
//     static Tensor forward(AutogradContext* ctx, const Tensor& x, double beta) {
//       ctx->save_for_backward({x});
//       ctx->saved_data["beta"] = beta;
//       return x * sigmoid(x * beta);
//     }
//     static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> grad_outputs) { ... }
//   };
//   Tensor y = Swish::apply(x, 1.5);
//
// forward runs without recording and returns a Tensor or, for several outputs, a
// std::vector<Tensor> (libtorch's variable_list, which may hold undefined tensors); apply returns
// the same. backward gets one gradient per output and returns one per tensor argument of forward
// (undefined for those that need none), or, as libtorch's, one per argument (undefined for the
// non-tensor ones).
template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    auto ctx = std::make_shared<AutogradContext>();
    std::vector<Tensor> inputs;
    detail::collect(inputs, args...);
    for (const Tensor& t : inputs) ctx->needs_grad_.push_back(t.defined() && t.requires_grad());
    using Out = std::decay_t<decltype(Derived::forward(ctx.get(), std::forward<Args>(args)...))>;
    static_assert(std::is_same_v<Out, Tensor> || std::is_same_v<Out, std::vector<Tensor>>,
                  "a custom function's forward returns a Tensor or a std::vector<Tensor>");
    std::vector<Tensor> outs;
    {
      NoGradGuard no_grad;
      if constexpr (std::is_same_v<Out, Tensor>)
        outs.push_back(Derived::forward(ctx.get(), std::forward<Args>(args)...));
      else
        outs = Derived::forward(ctx.get(), std::forward<Args>(args)...);
    }
    constexpr size_t kArgs = sizeof...(Args);
    std::vector<bool> is_tensor{std::is_same_v<std::decay_t<Args>, Tensor>...};
    outs = detail::record_custom(typeid(Derived).name(), inputs, std::move(outs),
                                 [ctx, is_tensor](std::vector<Tensor>&& grad_outputs) {
      std::vector<Tensor> grads = Derived::backward(ctx.get(), std::move(grad_outputs));
      if (grads.size() == kArgs) {  // one per argument: keep the tensor arguments' gradients
        std::vector<Tensor> picked;
        for (size_t i = 0; i < kArgs; ++i)
          if (is_tensor[i]) picked.push_back(grads[i]);
        return picked;
      }
      return grads;
    }, *ctx);
    ctx->non_differentiable_.clear();  // the node holds ctx: holding them would keep them (and it) alive
    ctx->dirty_.clear();
    if constexpr (std::is_same_v<Out, Tensor>)
      return outs[0];
    else
      return outs;
  }
};

}  // namespace autograd

}  // namespace kiln
