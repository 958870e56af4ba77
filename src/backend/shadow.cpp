// Shadow mode (KILN_SHADOW=cpu): each op on a device tensor runs again on the CPU and the two
// results are compared, so that one shadowed training step names the kernel that is wrong.
#include "backend/shadow.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/tensor_util.h"
#include "kiln/autograd.h"
#include "kiln/cuda.h"
#include "kiln/cudnn.h"

namespace kiln::backend {
namespace {

ShadowMode mode_from_env() {
  const char* v = std::getenv("KILN_SHADOW");
  if (!v || !*v || std::strcmp(v, "off") == 0) return ShadowMode::Off;
  if (std::strcmp(v, "cpu") == 0) return ShadowMode::Warn;
  if (std::strcmp(v, "cpu:error") == 0) return ShadowMode::Error;
  std::cerr << "kiln: warning: KILN_SHADOW must be cpu, cpu:error or off, got '" << v << "'; shadow mode stays off\n";
  return ShadowMode::Off;
}

std::atomic<ShadowMode>& mode() {
  static std::atomic<ShadowMode> m{mode_from_env()};
  return m;
}

struct Mismatches {
  std::mutex mutex;
  std::map<std::string, uint64_t> counts;
};
Mismatches& mismatches() {
  static Mismatches m;
  return m;
}

// How far a device result may be from the CPU's, by dtype: per element atol + rtol |cpu|, plus
// (except for pointwise ops) `scaled` times the largest |cpu| of the output, since kernels sum in
// other orders and a sum that cancels keeps the rounding error of its large terms. Float32
// convolutions under cuDNN's TF32 (on by default) and matmuls under kiln::cuda's (off by
// default) round their inputs to 10 bits: about 1e-3 of the output's scale.
struct Tolerance {
  double atol, rtol, scaled;
};

bool uses_tf32(Op op) {
  switch (op) {
    case Op::Conv2d:
    case Op::Conv2dBackwardInput:
    case Op::Conv2dBackwardWeight: return cudnn::allow_tf32();
    case Op::Matmul:
    case Op::Linear:
    case Op::Attention:
    case Op::AttentionBackward: return cuda::allow_tf32();
    default: return false;
  }
}

// Ops each of whose output elements follows from a few input elements, with no sum over many:
// a device's result is then a few roundings from the CPU's at that element, whatever the rest
// of the output holds (as torch.testing.assert_close judges). One large element must not hide a
// wrong small one beside it (exp(-5) written 60 times too large next to exp(10)).
bool pointwise(Op op) {
  switch (op) {
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::Maximum: case Op::Minimum:
    case Op::AddRelu: case Op::FloorDivide: case Op::TruncDivide: case Op::Remainder: case Op::Fmod: case Op::Atan2:
    case Op::BitwiseAnd: case Op::BitwiseOr: case Op::BitwiseXor: case Op::BitwiseNot: case Op::ReluBackward: case Op::SigmoidBackward: case Op::TanhBackward:
    case Op::GeluErfBackward: case Op::GeluTanhBackward: case Op::SiluBackward: case Op::Neg: case Op::Abs:
    case Op::Sign: case Op::Exp: case Op::Log: case Op::Log1p: case Op::Expm1: case Op::Sqrt: case Op::Rsqrt:
    case Op::Square: case Op::Reciprocal: case Op::Tanh: case Op::Sigmoid: case Op::Relu: case Op::GeluErf:
    case Op::GeluTanh: case Op::Silu: case Op::Sin: case Op::Cos: case Op::Clamp: case Op::Where: case Op::Copy:
    case Op::Addcmul: case Op::Addcdiv: case Op::Lerp: case Op::Floor: case Op::Ceil: case Op::Round: case Op::Trunc:
    case Op::IsNan: case Op::IsInf: case Op::IsFinite: case Op::Erf: case Op::Log2: case Op::Log10: case Op::Exp2:
    case Op::Fill: case Op::IndexSelect: case Op::Resample: case Op::Gather: case Op::Tril: case Op::Triu: case Op::Arange:
    case Op::Uniform: case Op::Normal: case Op::Dropout: case Op::DropoutBackward: case Op::Embedding:
    case Op::MaxPool2d: case Op::ForeachMul: case Op::AmpUnscale: case Op::SgdStep: case Op::AdamStep:
      return true;
    default:
      return false;
  }
}

Tolerance tolerance(Op op, ScalarType t) {
  Tolerance tol{0, 0, 0};  // integers and bool: exact
  switch (t) {
    case kFloat64: tol = {1e-12, 1e-9, 1e-10}; break;
    case kFloat32: tol = uses_tf32(op) ? Tolerance{1e-5, 5e-3, 5e-3} : Tolerance{1e-5, 1e-3, 2e-5}; break;
    case kFloat16: tol = {1e-3, 1e-2, 4e-3}; break;
    case kBFloat16: tol = {1e-2, 3e-2, 2e-2}; break;
    default: break;
  }
  if (pointwise(op)) tol.scaled = 0;
  return tol;
}

// The dtype whose tolerance an output gets: its own, or for attention on 16-bit inputs theirs (a
// device may round the probabilities to 16 bits for its products, as flash attention does).
ScalarType precision(Op op, const KernelArgs& args, ScalarType out) {
  const ScalarType in = args.inputs.empty() ? out : args.inputs[0].dtype();
  const bool attention = op == Op::Attention || op == Op::AttentionBackward;
  return attention && (in == kFloat16 || in == kBFloat16) ? in : out;
}

Shape unflatten(int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return idx;
}

// Ops each of whose output elements is a sum of products of input elements (a reduction, a
// matrix product, a convolution and its gradients). Such a sum that cancels keeps the rounding
// error of its terms, and kernels sum in different orders: its elements are judged against the
// sum of the terms' magnitudes (its condition), which the CPU kernel gives on |inputs|. (A conv
// bias gradient after batch norm is 0 up to rounding: 5e-8 on a GPU, 3e-5 on the CPU.)
bool sums_products(Op op, const void* attrs) {
  switch (op) {
    case Op::Sum:
    case Op::Matmul:
    case Op::Conv2d:
    case Op::Conv2dBackwardInput:
    case Op::Conv2dBackwardWeight:
      return true;
    case Op::Linear:
      return static_cast<const LinearAttrs*>(attrs)->activation == 0;
    default:
      return false;
  }
}

// The outputs of `cpu_kernel` run on the magnitudes of `in`: per output element the sum of its
// terms' magnitudes. None for integer and bool results (a count of trues), which are exact.
std::vector<Tensor> term_magnitudes(Kernel cpu_kernel, std::span<const Tensor> in, std::span<const Tensor> out,
                                    const void* attrs) {
  std::vector<Tensor> abs_in, mag(out.size());
  for (const Tensor& t : out)
    if (t.defined() && !is_floating_point(t.dtype())) return mag;
  for (const Tensor& t : in) abs_in.push_back(t.defined() && is_floating_point(t.dtype()) ? t.abs() : t);
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].defined()) mag[i] = make_empty_strided(out[i].shape(), out[i].strides(), out[i].dtype(), Device::cpu());
  KernelArgs args{abs_in, mag, attrs, nullptr};
  cpu_kernel(args);
  return mag;
}

// "" when `got` (the device's) matches `ref` (the CPU's) within `tol`, else what differs;
// `magnitude` (if defined): per element, the sum of its terms' magnitudes (sums_products).
std::string compare(const Tensor& got, const Tensor& ref, const Tolerance& tol, const Tensor& magnitude) {
  if (!is_floating_point(got.dtype())) {  // exact, as int64: through double, values past 2^53 would blur
    const std::vector<int64_t> g = got.to(kInt64).to_vector<int64_t>(), r = ref.to(kInt64).to_vector<int64_t>();
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] != r[i] && bad++ == 0) first = static_cast<int64_t>(i);
    if (bad == 0) return "";
    const auto f = static_cast<size_t>(first);
    return kiln::detail::cat("element ", unflatten(first, got.shape()), ": device ", g[f], ", cpu ", r[f],
                             " (integers: exact; ", bad, " of ", g.size(), " elements differ)");
  }
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>();
  const std::vector<double> m = magnitude.defined() ? magnitude.to_vector<double>() : std::vector<double>();
  double largest = 0;
  for (double v : r)
    if (std::isfinite(v)) largest = std::max(largest, std::abs(v));
  const double floor = tol.atol + tol.scaled * largest;
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool gn = std::isnan(g[i]), rn = std::isnan(r[i]);
    double ratio = 0;
    if (gn || rn) {
      ratio = gn == rn ? 0 : INFINITY;
    } else if (g[i] != r[i]) {
      const double diff = std::abs(g[i] - r[i]);
      const double allowed = floor + tol.rtol * (std::abs(r[i]) + (m.empty() ? 0.0 : m[i]));
      ratio = allowed > 0 ? diff / allowed : INFINITY;
      if (std::isinf(g[i]) || std::isinf(r[i])) ratio = INFINITY;
    }
    if (ratio > 1) {
      ++bad;
      if (ratio > worst_ratio) worst_ratio = ratio, worst = static_cast<int64_t>(i);
    }
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os.precision(9);
  const auto w = static_cast<size_t>(worst);
  os << "element " << unflatten(worst, got.shape()) << ": device " << g[w] << ", cpu " << r[w] << " (tolerance "
     << tol.atol << " + " << tol.rtol << " x (|cpu|" << (m.empty() ? "" : " + sum of |terms| ");
  if (!m.empty()) os << m[w];
  os << ")";
  if (tol.scaled > 0) os << " + " << tol.scaled << " x max |cpu| " << largest;
  os << "; " << bad << " of " << g.size() << " elements differ)";
  return os.str();
}

}  // namespace

void set_shadow_mode(ShadowMode m) { mode().store(m); }
ShadowMode shadow_mode() { return mode().load(std::memory_order_relaxed); }

std::map<std::string, uint64_t> shadow_mismatches() {
  std::lock_guard<std::mutex> lock(mismatches().mutex);
  return mismatches().counts;
}

namespace detail {

thread_local int t_shadow_helpers = 0;

std::string describe_operands(std::span<const Tensor> ts) {
  std::ostringstream os;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (i) os << ", ";
    if (ts[i].defined()) os << ts[i].dtype() << " " << ts[i].shape();
    else os << "none";
  }
  return os.str();
}

void run_shadowed(Op op, Kernel device_kernel, Kernel cpu_kernel, KernelArgs& args) {
  NoGradGuard no_grad;
  struct Helpers {  // the device kernel's own nested ops are the program's: counted
    Helpers() { ++t_shadow_helpers; }
    ~Helpers() { --t_shadow_helpers; }
  };
  // Copies first: the device kernel may write into an input (in-place ops) or read its outputs.
  std::vector<Tensor> in, out;
  {
    Helpers h;
    for (const Tensor& t : args.inputs) in.push_back(!t.defined() || t.device().is_cpu() ? t : host_mirror(t));
    for (const Tensor& t : args.outputs) out.push_back(!t.defined() || t.device().is_cpu() ? t : host_mirror(t));
  }
  device_kernel(args);
  Helpers h;
  KernelArgs cpu{in, out, args.attrs, nullptr};
  cpu_kernel(cpu);
  const std::vector<Tensor> magnitudes = sums_products(op, args.attrs)
                                             ? term_magnitudes(cpu_kernel, in, out, args.attrs)
                                             : std::vector<Tensor>(out.size());
  for (size_t i = 0; i < args.outputs.size(); ++i) {
    const Tensor& dev = args.outputs[i];
    if (!dev.defined() || dev.numel() == 0) continue;
    const std::string diff = compare(dev.device().is_cpu() ? dev : host_mirror(dev), out[i],
                                     tolerance(op, precision(op, args, dev.dtype())), magnitudes[i]);
    if (diff.empty()) continue;
    const std::string name = op_name(op);
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mismatches().mutex);
      first = mismatches().counts[name]++ == 0;
    }
    std::ostringstream msg;
    msg << name << " on " << dev.device().str() << " differs from the CPU: output " << i << " (" << dev.dtype() << " "
        << dev.shape() << ") " << diff << "; inputs " << describe_operands(args.inputs);
    if (shadow_mode() == ShadowMode::Error) KILN_FAIL("shadow", msg.str());
    if (first) std::cerr << "kiln: shadow: [" << name << "] " << msg.str() << "\n";
  }
}

}  // namespace detail
}  // namespace kiln::backend
