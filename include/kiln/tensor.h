// kiln::Tensor: a handle to shape, strides, offset, dtype, device and shared storage.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/scalar.h"
#include "kiln/shape.h"

namespace kiln {

namespace autograd {
class Node;
struct TensorHook;
}
struct TensorImpl;
class Tensor;
namespace indexing {
class TensorIndex;
}
using TensorList = std::vector<Tensor>;

// What a factory makes: dtype, device and whether the result requires grad.
// How a dense tensor is laid out: row-major, or channels-last (a 4-D tensor with logical NCHW
// shape stored as NHWC), as in PyTorch's torch.memory_format.
enum class MemoryFormat { Contiguous, ChannelsLast };

class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(ScalarType t) : dtype_(t) {}
  TensorOptions(Device d) : device_(d) {}
  TensorOptions(DeviceType d) : device_(Device(d)) {}

  TensorOptions dtype(ScalarType t) const { auto o = *this; o.dtype_ = t; return o; }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions requires_grad(bool r) const { auto o = *this; o.requires_grad_ = r; return o; }
  ScalarType dtype() const { return dtype_.value_or(kDefaultFloat); }
  bool has_dtype() const { return dtype_.has_value(); }
  Device device() const { return device_.value_or(Device::cpu()).resolved(); }
  bool has_device() const { return device_.has_value(); }
  bool requires_grad() const { return requires_grad_; }

 private:
  std::optional<ScalarType> dtype_;
  std::optional<Device> device_;
  bool requires_grad_ = false;
};

// Memory owned by one device's allocator. Views share it, and with it the version counter
// that autograd uses to detect in-place changes to saved tensors.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  std::atomic<uint64_t> version{0};
  // Bumped when autograd records an in-place change: views taken before it are stale.
  std::atomic<uint64_t> history{0};
  bool pinned = false;  // CPU memory page-locked for asynchronous GPU copies

  Storage(size_t nbytes, Device device);  // allocates from the device's caching allocator
  struct Pinned {};
  Storage(size_t nbytes, Pinned);  // page-locked CPU memory from the CUDA runtime
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata
  const Shape& shape() const;
  const Shape& sizes() const { return shape(); }
  const Shape& strides() const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t storage_offset() const;
  ScalarType dtype() const;
  ScalarType scalar_type() const { return dtype(); }
  Device device() const;
  TensorOptions options() const { return TensorOptions(dtype()).device(device()); }
  bool is_contiguous() const;
  bool is_contiguous(MemoryFormat format) const;
  bool is_floating_point() const { return kiln::is_floating_point(dtype()); }
  size_t element_size() const { return kiln::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  const std::shared_ptr<Storage>& storage() const;
  uint64_t version() const;

  // Raw data, on the tensor's device; offset applied. data_ptr<T>() checks that T is the dtype.
  void* data_ptr() const;
  template <class T> T* data_ptr() const;
  // The value of a one-element tensor, copied to the host (synchronizes).
  template <class T> T item() const;
  Scalar item() const;
  // All elements in row-major order, converted to T, on the host.
  template <class T> std::vector<T> to_vector() const;

  // ---- views (share storage)
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor slice(int64_t dim, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  // The diagonal of the matrices over dim1 and dim2 (offset > 0 above, < 0 below), as a view whose
  // last dim runs along it (torch's diagonal).
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor operator[](int64_t index) const { return select(0, index); }

  // ---- copies and conversions
  Tensor contiguous() const;
  // A copy in `format` unless already laid out so (then this tensor itself).
  Tensor contiguous(MemoryFormat format) const;
  Tensor clone() const;
  Tensor flip(const Shape& dims) const;
  Tensor roll(const Shape& shifts, const Shape& dims = {}) const;
  Tensor repeat(const Shape& repeats) const;
  Tensor detach() const;
  Tensor to(ScalarType dtype) const;
  // non_blocking (torch's to(device, non_blocking=True)): from pinned memory, the copy to a GPU
  // is only queued, and the source must not be written until the stream has done it; otherwise
  // to() returns once the source may be reused (from pinned memory that waits for the work
  // queued on the stream before the copy, as in PyTorch: pass non_blocking for the overlap).
  // A copy to the CPU always returns with the data there (the host reads it next).
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(Device device, ScalarType dtype, bool non_blocking = false) const;
  Tensor cpu() const { return to(Device::cpu()); }
  // A copy in page-locked ("pinned") CPU memory, from which copies to a GPU are asynchronous
  // (torch.Tensor.pin_memory); itself if already pinned. Needs a CUDA device.
  Tensor pin_memory() const;
  bool is_pinned() const;
  // On CUDA device `index` (-1: the current device), as torch's x.cuda().
  Tensor cuda(int index = -1, bool non_blocking = false) const { return to(Device::cuda(index), non_blocking); }
  Tensor cuda(bool non_blocking) const = delete;  // x.cuda(true) would be cuda:1: write cuda(-1, true)
  bool is_cuda() const { return device().is_cuda(); }
  bool is_cpu() const { return device().is_cpu(); }
  // The CUDA device's index; -1 on the CPU (torch's get_device()).
  int get_device() const { return is_cuda() ? device().index : -1; }

  // ---- autograd
  bool requires_grad() const;
  Tensor& requires_grad_(bool enabled = true);
  Tensor grad() const;            // undefined until a backward pass reaches this tensor
  void set_grad(const Tensor& g);
  void retain_grad();             // keep .grad() for a non-leaf tensor too
  std::shared_ptr<autograd::Node> grad_fn() const;
  bool is_leaf() const;
  // A hook run by backward with the gradient of this tensor's value (torch.Tensor.register_hook):
  // `hook(grad)` returns a tensor to use instead (of the same shape, dtype and device) or nothing
  // (void, or an undefined tensor): the gradient is then unchanged. Hooks run in the order
  // registered, before the gradient is accumulated into a leaf's .grad(), kept by retain_grad,
  // returned by autograd::grad or passed on. A hook belongs to the value it was registered on: after
  // an in-place change, it still sees the gradient of the value before. Returns an id for remove_hook.
  template <class F>
  uint64_t register_hook(F&& hook) {
    using R = std::invoke_result_t<F&, const Tensor&>;
    if constexpr (std::is_void_v<R>)
      return add_hook([h = std::forward<F>(hook)](const Tensor& g) mutable {
        h(g);
        return Tensor();
      });
    else
      return add_hook(std::function<Tensor(const Tensor&)>(std::forward<F>(hook)));
  }
  void remove_hook(uint64_t id);
  // A leaf's hook run by backward right after this tensor's .grad() was accumulated, with the
  // tensor (torch.Tensor.register_post_accumulate_grad_hook). Returns an id for removal.
  uint64_t register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook);
  void remove_post_accumulate_grad_hook(uint64_t id);
  // Gradient of this tensor with respect to the leaves; grad defaults to ones for a scalar. With
  // `inputs`, into those leaves alone (torch's backward(inputs=...)); the rest of the graph is not
  // run where it leads to none of them.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false,
                const std::vector<Tensor>& inputs = {}) const;
  // libtorch's order: create_graph records the backward pass, so that the .grad() it leaves can be
  // differentiated again (see autograd::grad).
  void backward(const Tensor& gradient, bool retain_graph, bool create_graph,
                const std::vector<Tensor>& inputs = {}) const;

  // ---- ops as methods (each calls the free function of the same name in ops.h)
  Tensor add(const Tensor& o) const;
  Tensor add(Scalar o) const;
  Tensor add(const Tensor& o, Scalar alpha) const;  // this + alpha * o
  Tensor sub(const Tensor& o) const;
  Tensor sub(Scalar o) const;
  Tensor sub(const Tensor& o, Scalar alpha) const;
  Tensor mul(const Tensor& o) const;
  Tensor mul(Scalar o) const;
  Tensor div(const Tensor& o) const;
  Tensor div(Scalar o) const;
  Tensor pow(const Tensor& o) const;
  Tensor pow(Scalar o) const;
  Tensor maximum(const Tensor& o) const;
  Tensor minimum(const Tensor& o) const;
  Tensor div(const Tensor& o, std::string_view rounding_mode) const;
  Tensor div(Scalar o, std::string_view rounding_mode) const;
  Tensor floor_divide(const Tensor& o) const;
  Tensor floor_divide(Scalar o) const;
  Tensor remainder(const Tensor& o) const;
  Tensor remainder(Scalar o) const;
  Tensor fmod(const Tensor& o) const;
  Tensor fmod(Scalar o) const;
  Tensor atan2(const Tensor& o) const;
  Tensor bitwise_and(const Tensor& o) const;
  Tensor bitwise_and(Scalar o) const;
  Tensor bitwise_or(const Tensor& o) const;
  Tensor bitwise_or(Scalar o) const;
  Tensor bitwise_xor(const Tensor& o) const;
  Tensor bitwise_xor(Scalar o) const;
  Tensor bitwise_not() const;
  Tensor neg() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor square() const;
  Tensor reciprocal() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor erf() const;
  Tensor log2() const;
  Tensor log10() const;
  Tensor exp2() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;
  Tensor trunc() const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor eq(const Tensor& o) const;
  Tensor eq(Scalar o) const;
  Tensor ne(const Tensor& o) const;
  Tensor ne(Scalar o) const;
  Tensor lt(const Tensor& o) const;
  Tensor lt(Scalar o) const;
  Tensor le(const Tensor& o) const;
  Tensor le(Scalar o) const;
  Tensor gt(const Tensor& o) const;
  Tensor gt(Scalar o) const;
  Tensor ge(const Tensor& o) const;
  Tensor ge(Scalar o) const;
  Tensor logical_and(const Tensor& o) const;
  Tensor logical_or(const Tensor& o) const;
  Tensor logical_not() const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor masked_fill(const Tensor& mask, const Tensor& value) const;
  Tensor addcmul(const Tensor& tensor1, const Tensor& tensor2, Scalar value = 1) const;
  Tensor addcdiv(const Tensor& tensor1, const Tensor& tensor2, Scalar value = 1) const;
  Tensor lerp(const Tensor& end, Scalar weight) const;
  Tensor lerp(const Tensor& end, const Tensor& weight) const;

  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor var(const Shape& dims, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(const Shape& dims, int64_t correction = 1, bool keepdim = false) const;
  Tensor prod() const;
  Tensor prod(int64_t dim, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor amax(const Shape& dims, bool keepdim = false) const;
  Tensor amin(const Shape& dims, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  std::tuple<Tensor, Tensor> kthvalue(int64_t k, int64_t dim = -1, bool keepdim = false) const;
  Tensor median() const;
  std::tuple<Tensor, Tensor> median(int64_t dim, bool keepdim = false) const;
  Tensor nanmedian() const;
  std::tuple<Tensor, Tensor> nanmedian(int64_t dim, bool keepdim = false) const;
  Tensor cumsum(int64_t dim, std::optional<ScalarType> dtype = std::nullopt) const;
  Tensor cumprod(int64_t dim, std::optional<ScalarType> dtype = std::nullopt) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  Tensor logsumexp(const Shape& dims, bool keepdim = false) const;
  Tensor all() const;
  Tensor any() const;
  Tensor norm(double p = 2.0) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor matmul(const Tensor& o) const;
  Tensor outer(const Tensor& o) const;
  Tensor addmm(const Tensor& m1, const Tensor& m2, Scalar beta = 1, Scalar alpha = 1) const;
  Tensor baddbmm(const Tensor& b1, const Tensor& b2, Scalar beta = 1, Scalar alpha = 1) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor index_add(int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha = 1) const;
  Tensor index_copy(int64_t dim, const Tensor& index, const Tensor& source) const;
  Tensor index_fill(int64_t dim, const Tensor& index, Scalar value) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor nonzero() const;
  Tensor repeat_interleave(int64_t repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor argwhere() const;
  Tensor masked_select(const Tensor& mask) const;
  // x[indices] and x[indices] = values, as libtorch's (kiln/indexing.h: Slice, None, Ellipsis, ...).
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  Tensor index_put(const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                   bool accumulate = false) const;
  Tensor count_nonzero(const Shape& dims = {}) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // ---- in place (bump the version counter; autograd checks it)
  Tensor& add_(const Tensor& o);
  Tensor& add_(Scalar o);
  Tensor& add_(const Tensor& o, Scalar alpha);  // this += alpha * o, one rounding (torch's)
  Tensor& sub_(const Tensor& o);
  Tensor& sub_(Scalar o);
  Tensor& sub_(const Tensor& o, Scalar alpha);
  Tensor& mul_(const Tensor& o);
  Tensor& mul_(Scalar o);
  Tensor& div_(const Tensor& o);
  Tensor& div_(Scalar o);
  Tensor& floor_divide_(const Tensor& o);
  Tensor& floor_divide_(Scalar o);
  Tensor& remainder_(const Tensor& o);
  Tensor& remainder_(Scalar o);
  Tensor& fmod_(const Tensor& o);
  Tensor& fmod_(Scalar o);
  Tensor& bitwise_and_(const Tensor& o);
  Tensor& bitwise_or_(const Tensor& o);
  Tensor& bitwise_xor_(const Tensor& o);
  Tensor& bitwise_and_(Scalar o);
  Tensor& bitwise_or_(Scalar o);
  Tensor& bitwise_xor_(Scalar o);
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  Tensor& addcmul_(const Tensor& tensor1, const Tensor& tensor2, Scalar value = 1);
  Tensor& addcdiv_(const Tensor& tensor1, const Tensor& tensor2, Scalar value = 1);
  Tensor& lerp_(const Tensor& end, Scalar weight);
  Tensor& lerp_(const Tensor& end, const Tensor& weight);
  Tensor& relu_();
  Tensor& neg_();
  Tensor& exp_();
  Tensor& sqrt_();
  Tensor& abs_();
  Tensor& sign_();
  Tensor& log_();
  Tensor& log1p_();
  Tensor& expm1_();
  Tensor& rsqrt_();
  Tensor& square_();
  Tensor& reciprocal_();
  Tensor& tanh_();
  Tensor& sigmoid_();
  Tensor& sin_();
  Tensor& cos_();
  Tensor& floor_();
  Tensor& ceil_();
  Tensor& round_();
  Tensor& trunc_();
  Tensor& zero_();
  Tensor& fill_(Scalar value);
  Tensor& copy_(const Tensor& src);
  Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha = 1);
  Tensor& index_copy_(int64_t dim, const Tensor& index, const Tensor& source);
  Tensor& index_fill_(int64_t dim, const Tensor& index, Scalar value);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                     bool accumulate = false);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, Scalar value);
  Tensor& masked_fill_(const Tensor& mask, Scalar value);
  Tensor& masked_fill_(const Tensor& mask, const Tensor& value);
  Tensor& uniform_(double from = 0.0, double to = 1.0);
  Tensor& normal_(double mean = 0.0, double std = 1.0);

  Tensor& operator+=(const Tensor& o) { return add_(o); }
  Tensor& operator+=(Scalar o) { return add_(o); }
  Tensor& operator-=(const Tensor& o) { return sub_(o); }
  Tensor& operator-=(Scalar o) { return sub_(o); }
  Tensor& operator*=(const Tensor& o) { return mul_(o); }
  Tensor& operator*=(Scalar o) { return mul_(o); }
  Tensor& operator/=(const Tensor& o) { return div_(o); }
  Tensor& operator/=(Scalar o) { return div_(o); }
  Tensor& operator&=(const Tensor& o) { return bitwise_and_(o); }
  Tensor& operator|=(const Tensor& o) { return bitwise_or_(o); }
  Tensor& operator^=(const Tensor& o) { return bitwise_xor_(o); }
  Tensor& operator&=(Scalar o) { return bitwise_and_(o); }
  Tensor& operator|=(Scalar o) { return bitwise_or_(o); }
  Tensor& operator^=(Scalar o) { return bitwise_xor_(o); }
  Tensor& operator%=(const Tensor& o) { return remainder_(o); }
  Tensor& operator%=(Scalar o) { return remainder_(o); }

  // PyTorch-like text: values (summarised when large), shape, dtype, device.
  std::string to_string() const;

 private:
  uint64_t add_hook(std::function<Tensor(const Tensor&)> hook);

  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator%(const Tensor& a, const Tensor& b);  // remainder, as ATen's
Tensor operator%(const Tensor& a, Scalar b);
Tensor operator%(Scalar a, const Tensor& b);
Tensor operator&(const Tensor& a, const Tensor& b);  // bitwise_and (logical for bool masks)
Tensor operator&(const Tensor& a, Scalar b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, Scalar b);
Tensor operator^(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, Scalar b);
Tensor operator&(Scalar a, const Tensor& b);
Tensor operator|(Scalar a, const Tensor& b);
Tensor operator^(Scalar a, const Tensor& b);
Tensor operator~(const Tensor& a);
Tensor operator-(const Tensor& a);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, Scalar b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, Scalar b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, Scalar b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, Scalar b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, Scalar b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, Scalar b);
Tensor operator&&(const Tensor& a, const Tensor& b);
Tensor operator||(const Tensor& a, const Tensor& b);
Tensor operator!(const Tensor& a);

// ---- the implementation behind a Tensor handle (public for kernels and autograd)

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves only
  std::vector<std::pair<uint64_t, std::function<void(Tensor&)>>> post_accumulate_grad_hooks;  // leaves only
  // register_hook's hooks: a leaf's run on its gradient; a non-leaf's live on the node that made its
  // value, and are listed here for remove_hook.
  std::vector<std::shared_ptr<autograd::TensorHook>> hooks;
  // Guards grad, the hook lists and a leaf's lazily made accumulator: backward passes on two
  // threads into one leaf (a shared parameter) each add their whole gradient, as in torch.
  std::mutex mutex;
  // Held by one accumulation into a leaf through its post-accumulate hooks (which may set grad,
  // or backpropagate again on this thread: recursive).
  std::recursive_mutex accumulate_mutex;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;  // in elements
  int64_t offset = 0;
  int64_t numel = 0;
  ScalarType dtype = kFloat32;
  bool is_view = false;
  bool wrapped_number = false;       // made from a C++ number; lower rank in type promotion
  uint64_t view_history = 0;          // storage history when this view (or its grad_fn) was made
  bool view_no_grad = false;          // the view was taken with grad mode off (it never carries a gradient)
  std::shared_ptr<TensorImpl> view_base;  // the tensor that owns the storage, for in-place on views
  std::unique_ptr<AutogradMeta> autograd;

  AutogradMeta& autograd_meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

inline const Shape& Tensor::shape() const { return impl_->sizes; }
inline const Shape& Tensor::strides() const { return impl_->strides; }
inline int64_t Tensor::dim() const { return static_cast<int64_t>(impl_->sizes.size()); }
inline int64_t Tensor::numel() const { return impl_->numel; }
inline int64_t Tensor::storage_offset() const { return impl_->offset; }
inline ScalarType Tensor::dtype() const { return impl_->dtype; }
inline Device Tensor::device() const { return impl_->storage->device; }
inline const std::shared_ptr<Storage>& Tensor::storage() const { return impl_->storage; }
inline uint64_t Tensor::version() const { return impl_->storage->version.load(std::memory_order_relaxed); }
inline void* Tensor::data_ptr() const {
  return static_cast<char*>(impl_->storage->data) + impl_->offset * static_cast<int64_t>(element_size());
}
namespace detail {
// A view's requires_grad, its history brought up to date first (autograd's refresh_view): a view
// of a base changed in place by an op that requires grad requires grad too, as in torch.
bool view_requires_grad(const Tensor& t);
}  // namespace detail
inline bool Tensor::requires_grad() const {
  if (!impl_) return false;
  if (impl_->is_view && impl_->view_base && !impl_->view_no_grad) [[unlikely]] return detail::view_requires_grad(*this);
  return impl_->autograd && impl_->autograd->requires_grad;
}

namespace detail {
void check_data_ptr(const Tensor& t, ScalarType want);
}  // namespace detail

template <class T> T* Tensor::data_ptr() const {
  detail::check_data_ptr(*this, dtype_of<T>);
  return static_cast<T*>(data_ptr());
}
template <class T> T Tensor::item() const { return item().to<T>(); }

// ---- factories

// A tensor from values: floating literals give float32 and integers int64 (PyTorch's rule),
// unless the options say otherwise.
Tensor tensor(std::initializer_list<double> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<float> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<int> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<int64_t> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<bool> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions options = {});
Tensor tensor(std::initializer_list<std::initializer_list<float>> rows, TensorOptions options = {});
Tensor tensor(std::initializer_list<std::initializer_list<int64_t>> rows, TensorOptions options = {});
Tensor tensor(std::initializer_list<std::initializer_list<int>> rows, TensorOptions options = {});
template <class T>
Tensor tensor(const std::vector<T>& values, TensorOptions options = {});
template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape, TensorOptions options = {});
// A 0-d tensor holding one number, of the number's own dtype unless options give one (as
// torch.tensor(7) is int64; torch.scalar_tensor would make it float32).
Tensor scalar_tensor(Scalar value, TensorOptions options = {});

Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, Scalar value, TensorOptions options = {});
Tensor arange(Scalar end, TensorOptions options = {});
Tensor arange(Scalar start, Scalar end, Scalar step = 1, TensorOptions options = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {});
Tensor rand(const Shape& shape, TensorOptions options = {});
Tensor randn(const Shape& shape, TensorOptions options = {});
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = kInt64);
Tensor empty_like(const Tensor& t, std::optional<TensorOptions> options = std::nullopt);
Tensor zeros_like(const Tensor& t, std::optional<TensorOptions> options = std::nullopt);
Tensor ones_like(const Tensor& t, std::optional<TensorOptions> options = std::nullopt);
Tensor full_like(const Tensor& t, Scalar value, std::optional<TensorOptions> options = std::nullopt);
Tensor rand_like(const Tensor& t, std::optional<TensorOptions> options = std::nullopt);
Tensor randn_like(const Tensor& t, std::optional<TensorOptions> options = std::nullopt);

}  // namespace kiln
