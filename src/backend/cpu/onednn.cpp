// oneDNN matmul (optionally with bias and activation post-ops) with a primitive cache keyed by
// (dtype, dims, strides, epilogue); 2.x and 3.x APIs.
#include "backend/cpu/onednn.h"

#ifdef KILN_HAVE_ONEDNN
#include "backend/cpu/onednn_util.h"
#include "backend/dispatch.h"
#endif

namespace kiln::backend::cpu {

#ifdef KILN_HAVE_ONEDNN
using namespace onednn;

namespace {
// A matrix operand oneDNN accepts: unit stride along one of the two matrix dims.
bool plain_matrix(const Tensor& t) { return t.stride(2) == 1 || t.stride(1) == 1; }

// oneDNN 2.x runs a 16-bit matmul on its AMX kernels only when both operands are row-major; a
// transposed one (linear's weight, a weight gradient's g^T) goes to gemm:jit, about 5x slower
// (docs/perf.md, "oneDNN 2.6 on an Intel Xeon with AMX"). On such a CPU such an operand is copied
// row-major first: rows x cols elements against the product's rows x cols x n multiply-adds.
bool wants_row_major(dnnl::memory::data_type dt) {
#if DNNL_VERSION_MAJOR >= 3
  (void)dt;
  return false;
#else
  static const bool amx = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto amx_isa = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
    return (isa & amx_isa) == amx_isa;  // the ISA values are cumulative bit masks
  }();
  return amx && (dt == dnnl::memory::data_type::bf16 || dt == dnnl::memory::data_type::f16);
#endif
}

Tensor row_major(const Tensor& t) {
  if (t.stride(2) == 1) return t;
  Tensor dense = make_empty(t.shape(), t.dtype(), t.device());
  run(Op::Copy, t.device(), std::span<const Tensor>(&t, 1), std::span<Tensor>(&dense, 1), nullptr);
  return dense;
}
}  // namespace

bool onednn_matmul(const Tensor& a_in, const Tensor& w_in, const Tensor& out, const Tensor& bias, int activation) {
  dnnl::memory::data_type dt;
  if (!to_dnnl_type(a_in.dtype(), &dt) || !plain_matrix(a_in) || !plain_matrix(w_in)) return false;
  const bool copy = wants_row_major(dt);
  const Tensor a = copy ? row_major(a_in) : a_in, w = copy ? row_major(w_in) : w_in;
  static PrimitiveCache<Primitive> cache;
  std::string key{static_cast<char>('0' + static_cast<int>(a.dtype())), bias.defined() ? 'b' : '-',
                  static_cast<char>('0' + activation)};
  append_geometry(key, a);
  append_geometry(key, w);
  append_geometry(key, out);
  auto amd = md(a, dt), wmd = md(w, dt), cmd = md(out, dt);
  // the bias as a [1, 1, N] row broadcast over the batch and the rows
  const int64_t n = out.size(2);
  dnnl::memory::desc bmd = bias.defined() ? dnnl::memory::desc({1, 1, n}, dt, {n, n, 1}) : dnnl::memory::desc();
  std::shared_ptr<const Primitive> prim = cache.get(key, [&] {
    dnnl::primitive_attr attr = base_attr();
    if (activation != 0) {
      const dnnl::algorithm alg = activation == 1   ? dnnl::algorithm::eltwise_relu
                                  : activation == 2 ? dnnl::algorithm::eltwise_gelu_erf
                                                    : dnnl::algorithm::eltwise_gelu_tanh;
      dnnl::post_ops po;
#if DNNL_VERSION_MAJOR >= 3
      po.append_eltwise(alg, 0.f, 0.f);
#else
      po.append_eltwise(1.f, alg, 0.f, 0.f);
#endif
      attr.set_post_ops(po);
    }
#if DNNL_VERSION_MAJOR >= 3
    dnnl::matmul::primitive_desc pd(engine(), amd, wmd, bmd, cmd, attr);
#else
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(amd, wmd, bmd, cmd), attr, engine());
#endif
    return std::make_shared<Primitive>(Primitive{dnnl::matmul(pd), pd.scratchpad_desc()});
  });
  if (!prim) return false;
  dnnl::memory am(amd, engine(), a.data_ptr()), wm(wmd, engine(), w.data_ptr()), cm(cmd, engine(), out.data_ptr());
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, cm}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, dnnl::memory(bmd, engine(), bias.data_ptr()));
  dnnl::stream s(engine());
  prim->execute(s, std::move(args));
  return true;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

#else

bool onednn_matmul(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int) { return false; }
std::string onednn_version() { return ""; }

#endif

}  // namespace kiln::backend::cpu
