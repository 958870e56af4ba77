// oneDNN convolution forward, backward-data and backward-weights, with cached primitives and the
// weight reorders they need (oneDNN's fast kernels read weights in a blocked layout).
#include "backend/cpu/onednn.h"
#include "backend/dispatch.h"

#ifdef KILN_HAVE_ONEDNN
#include <optional>

#include "backend/cpu/onednn_util.h"
#include "core/tensor_util.h"

namespace kiln::backend::cpu {
namespace {

using namespace onednn;
using dnnl::memory;
using Dims = memory::dims;

// Weights as oneDNN sees them: [G, O/G, I/G, kH, kW] when grouped.
memory::desc weights_md(const Tensor& w, int64_t groups, memory::data_type dt) {
  if (groups == 1) return md(w, dt);
  const Shape& s = w.strides();
  return memory::desc(Dims{groups, w.size(0) / groups, w.size(1), w.size(2), w.size(3)}, dt,
                      Dims{w.size(0) / groups * s[0], s[0], s[1], s[2], s[3]});
}

memory::desc any_like(const memory::desc& d) {
#if DNNL_VERSION_MAJOR >= 3
  return memory::desc(d.get_dims(), d.get_data_type(), memory::format_tag::any);
#else
  return memory::desc(d.dims(), d.data_type(), memory::format_tag::any);
#endif
}

// An activation's descriptor. Tensors whose strides also read as channels-last (one channel, 1x1
// images) are described as channels-last, so source and destination agree and oneDNN picks its
// NHWC kernels rather than the reference one.
memory::desc act_md(const Tensor& t, memory::data_type dt) {
  if (!t.is_contiguous(MemoryFormat::ChannelsLast)) return md(t, dt);
  const Shape st = channels_last_strides(t.shape());
  return memory::desc(Dims(t.shape().begin(), t.shape().end()), dt, Dims(st.begin(), st.end()));
}

struct Geometry {
  Dims strides, dilates, pad;
  explicit Geometry(const ConvAttrs& a)
      : strides{a.stride[0], a.stride[1]}, dilates{a.dilation[0] - 1, a.dilation[1] - 1}, pad{a.padding[0], a.padding[1]} {}
};

std::string conv_key(char kind, const ConvAttrs& a, ScalarType dt, std::initializer_list<const Tensor*> ts) {
  std::string key{kind, static_cast<char>('0' + static_cast<int>(dt)), a.inference ? 'i' : 't'};
  for (int i = 0; i < 2; ++i)
    key += std::to_string(a.stride[i]) + "," + std::to_string(a.padding[i]) + "," + std::to_string(a.dilation[i]) + ",";
  key += std::to_string(a.groups) + "|";
  for (const Tensor* t : ts) {
    if (t->defined()) append_geometry(key, *t);
    else key += "-|";
  }
  return key;
}

dnnl::convolution_forward::primitive_desc forward_pd(dnnl::prop_kind prop, const memory::desc& x, const memory::desc& w,
                                                     const memory::desc* b, const memory::desc& y, const Geometry& g) {
  const auto alg = dnnl::algorithm::convolution_direct;
  const dnnl::primitive_attr attr = base_attr();
#if DNNL_VERSION_MAJOR >= 3
  if (b) return {engine(), prop, alg, x, w, *b, y, g.strides, g.dilates, g.pad, g.pad, attr};
  return {engine(), prop, alg, x, w, y, g.strides, g.dilates, g.pad, g.pad, attr};
#else
  if (b) return {dnnl::convolution_forward::desc(prop, alg, x, w, *b, y, g.strides, g.dilates, g.pad, g.pad), attr, engine()};
  return {dnnl::convolution_forward::desc(prop, alg, x, w, y, g.strides, g.dilates, g.pad, g.pad), attr, engine()};
#endif
}

// A primitive plus the reorder of user weights into (or, for weight gradients, out of) the
// layout the primitive wants; no reorder when the layouts agree.
struct Entry {
  Primitive prim;
  memory::desc user_w, prim_w;
  std::optional<Primitive> reorder;
};

// An entry for `pd`'s primitive whose weights are `user` to the caller and `inner` to the
// primitive; to_prim: the weights are read (reorder user -> inner) rather than written.
template <class Prim, class PrimitiveDesc>
std::shared_ptr<Entry> make_entry(const PrimitiveDesc& pd, const memory::desc& user, const memory::desc& inner,
                                  bool to_prim) {
  auto e = std::make_shared<Entry>(Entry{Primitive{Prim(pd), pd.scratchpad_desc()}, user, inner, {}});
  if (inner != user) e->reorder = to_prim ? make_reorder(user, inner) : make_reorder(inner, user);
  return e;
}

// The weights as the primitive reads them: the user's, or their reorder into `ws`.
memory weights_for(const Entry& e, memory user, dnnl::stream& s, std::optional<ScratchMemory>& ws) {
  if (!e.reorder) return user;
  ws.emplace(e.prim_w);
  e.reorder->execute(s, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, ws->mem}});
  return ws->mem;
}

}  // namespace

bool onednn_conv_forward(const Tensor& x_in, const Tensor& w, const Tensor& b, const Tensor& y, const ConvAttrs& a) {
  memory::data_type dt;
  if (!to_dnnl_type(x_in.dtype(), &dt)) return false;
  // oneDNN's fast kernels want the source and the destination in one layout, and conv2d's outputs
  // and gradients are channels-last: activations in another layout are copied channels-last here
  // and below. (oneDNN 2.6 runs an NCHW source into a channels-last destination with its reference
  // kernel: ResNet-50's stem at batch 16, fed NCHW images, took 32 s for its forward pass and
  // weight gradient instead of 40 ms; BM_Conv2dStem.)
  const Tensor x = x_in.contiguous(MemoryFormat::ChannelsLast);
  static PrimitiveCache<Entry> cache;
  auto xmd = act_md(x, dt), wmd = weights_md(w, a.groups, dt), ymd = act_md(y, dt);
  memory::desc bmd = b.defined() ? md(b, dt) : memory::desc();
  std::shared_ptr<const Entry> e = cache.get(conv_key('f', a, x.dtype(), {&x, &w, &b, &y}), [&] {
    auto pd = forward_pd(a.inference ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training, xmd,
                         any_like(wmd), b.defined() ? &bmd : nullptr, ymd, Geometry(a));
    return make_entry<dnnl::convolution_forward>(pd, wmd, pd.weights_desc(), true);
  });
  if (!e) return false;
  dnnl::stream s(engine());
  std::optional<ScratchMemory> ws;
  memory wm = weights_for(*e, memory(wmd, engine(), w.data_ptr()), s, ws);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(xmd, engine(), x.data_ptr())},
                                       {DNNL_ARG_WEIGHTS, wm},
                                       {DNNL_ARG_DST, memory(ymd, engine(), y.data_ptr())}};
  if (b.defined()) args.emplace(DNNL_ARG_BIAS, memory(bmd, engine(), b.data_ptr()));
  e->prim.execute(s, std::move(args));
  return true;
}

bool onednn_conv_backward_input(const Tensor& gy_in, const Tensor& w, const Tensor& gx_out, const ConvAttrs& a) {
  memory::data_type dt;
  if (!to_dnnl_type(gy_in.dtype(), &dt)) return false;
  const Tensor gy = gy_in.contiguous(MemoryFormat::ChannelsLast);
  // The input's gradient takes the input's layout: computed channels-last, then copied there.
  const bool dense = gx_out.is_contiguous(MemoryFormat::ChannelsLast);
  const Tensor gx = dense ? gx_out
                          : make_empty_strided(gx_out.shape(), channels_last_strides(gx_out.shape()), gx_out.dtype(),
                                               gx_out.device());
  static PrimitiveCache<Entry> cache;
  auto gxmd = act_md(gx, dt), wmd = weights_md(w, a.groups, dt), gymd = act_md(gy, dt);
  std::shared_ptr<const Entry> e = cache.get(conv_key('d', a, gy.dtype(), {&gy, &w, &gx}), [&] {
    const Geometry g(a);
    auto hint = forward_pd(dnnl::prop_kind::forward_training, gxmd, any_like(wmd), nullptr, gymd, g);
    const auto alg = dnnl::algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
    dnnl::convolution_backward_data::primitive_desc pd(engine(), alg, gxmd, any_like(wmd), gymd, g.strides, g.dilates,
                                                       g.pad, g.pad, hint, base_attr());
#else
    dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(alg, gxmd, any_like(wmd), gymd, g.strides, g.dilates, g.pad, g.pad),
        base_attr(), engine(), hint);
#endif
    return make_entry<dnnl::convolution_backward_data>(pd, wmd, pd.weights_desc(), true);
  });
  if (!e) return false;
  dnnl::stream s(engine());
  std::optional<ScratchMemory> ws;
  memory wm = weights_for(*e, memory(wmd, engine(), w.data_ptr()), s, ws);
  e->prim.execute(s, {{DNNL_ARG_DIFF_DST, memory(gymd, engine(), gy.data_ptr())},
                      {DNNL_ARG_WEIGHTS, wm},
                      {DNNL_ARG_DIFF_SRC, memory(gxmd, engine(), gx.data_ptr())}});
  if (!dense) Tensor(gx_out).copy_(gx);
  return true;
}

bool onednn_conv_backward_weight(const Tensor& gy_in, const Tensor& x_in, const Tensor& gw, const Tensor& gb,
                                 const ConvAttrs& a) {
  memory::data_type dt;
  if (!to_dnnl_type(gy_in.dtype(), &dt)) return false;
  const Tensor gy = gy_in.contiguous(MemoryFormat::ChannelsLast), x = x_in.contiguous(MemoryFormat::ChannelsLast);
  static PrimitiveCache<Entry> cache;
  auto xmd = act_md(x, dt), gwmd = weights_md(gw, a.groups, dt), gymd = act_md(gy, dt);
  memory::desc gbmd = gb.defined() ? md(gb, dt) : memory::desc();
  std::shared_ptr<const Entry> e = cache.get(conv_key('w', a, gy.dtype(), {&gy, &x, &gw, &gb}), [&] {
    const Geometry g(a);
    const memory::desc* bp = gb.defined() ? &gbmd : nullptr;
    auto hint = forward_pd(dnnl::prop_kind::forward_training, xmd, any_like(gwmd), bp, gymd, g);
    const auto alg = dnnl::algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
    auto pd = bp ? dnnl::convolution_backward_weights::primitive_desc(engine(), alg, xmd, any_like(gwmd), gbmd, gymd,
                                                                      g.strides, g.dilates, g.pad, g.pad, hint,
                                                                      base_attr())
                 : dnnl::convolution_backward_weights::primitive_desc(engine(), alg, xmd, any_like(gwmd), gymd,
                                                                      g.strides, g.dilates, g.pad, g.pad, hint,
                                                                      base_attr());
#else
    auto pd = bp ? dnnl::convolution_backward_weights::primitive_desc(
                       dnnl::convolution_backward_weights::desc(alg, xmd, any_like(gwmd), gbmd, gymd, g.strides,
                                                                g.dilates, g.pad, g.pad),
                       base_attr(), engine(), hint)
                 : dnnl::convolution_backward_weights::primitive_desc(
                       dnnl::convolution_backward_weights::desc(alg, xmd, any_like(gwmd), gymd, g.strides, g.dilates,
                                                                g.pad, g.pad),
                       base_attr(), engine(), hint);
#endif
    return make_entry<dnnl::convolution_backward_weights>(pd, gwmd, pd.diff_weights_desc(), false);
  });
  if (!e) return false;
  dnnl::stream s(engine());
  memory gwm(gwmd, engine(), gw.data_ptr());
  std::optional<ScratchMemory> ws;
  if (e->reorder) ws.emplace(e->prim_w);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(xmd, engine(), x.data_ptr())},
                                       {DNNL_ARG_DIFF_DST, memory(gymd, engine(), gy.data_ptr())},
                                       {DNNL_ARG_DIFF_WEIGHTS, ws ? ws->mem : gwm}};
  if (gb.defined()) args.emplace(DNNL_ARG_DIFF_BIAS, memory(gbmd, engine(), gb.data_ptr()));
  e->prim.execute(s, std::move(args));
  if (e->reorder) e->reorder->execute(s, {{DNNL_ARG_FROM, ws->mem}, {DNNL_ARG_TO, gwm}});
  return true;
}

}  // namespace kiln::backend::cpu

#else

namespace kiln::backend::cpu {
bool onednn_conv_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const ConvAttrs&) { return false; }
bool onednn_conv_backward_input(const Tensor&, const Tensor&, const Tensor&, const ConvAttrs&) { return false; }
bool onednn_conv_backward_weight(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const ConvAttrs&) {
  return false;
}
}  // namespace kiln::backend::cpu

#endif
