// oneDNN matmul with a primitive cache keyed by (dtype, dims, strides); 2.x and 3.x APIs.
#include "backend/cpu/onednn.h"

#ifdef KILN_HAVE_ONEDNN
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace kiln::backend::cpu {

#ifdef KILN_HAVE_ONEDNN
namespace {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

bool to_dnnl_type(ScalarType t, dnnl::memory::data_type* out) {
  switch (t) {
    case kFloat32: *out = dnnl::memory::data_type::f32; return true;
    case kBFloat16: *out = dnnl::memory::data_type::bf16; return true;
    case kFloat16: *out = dnnl::memory::data_type::f16; return true;
    default: return false;
  }
}

// A matrix operand oneDNN accepts: unit stride along one of the two matrix dims.
bool plain_matrix(const Tensor& t) { return t.stride(2) == 1 || t.stride(1) == 1; }

dnnl::memory::desc md(const Tensor& t, dnnl::memory::data_type dt) {
  dnnl::memory::dims dims(t.shape().begin(), t.shape().end());
  dnnl::memory::dims strides(t.strides().begin(), t.strides().end());
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] == 1) strides[i] = i + 1 < dims.size() ? dims[i + 1] * strides[i + 1] : 1;
  return dnnl::memory::desc(dims, dt, strides);
}

// Least-recently-used cache of matmul primitives. A geometry oneDNN has no implementation for
// (float16 on CPUs without native half arithmetic, for one) is cached as nullopt.
class PrimitiveCache {
 public:
  std::optional<dnnl::matmul> get(const std::string& key, const dnnl::memory::desc& a,
                                  const dnnl::memory::desc& w, const dnnl::memory::desc& c) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
    std::optional<dnnl::matmul> prim;
    try {
#if DNNL_VERSION_MAJOR >= 3
      dnnl::matmul::primitive_desc pd(engine(), a, w, c);
#else
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, w, c), engine());
#endif
      prim = dnnl::matmul(pd);
    } catch (const dnnl::error&) {
      // unsupported here: the caller falls back to the loop
    }
    order_.push_front(key);
    map_.emplace(key, std::make_pair(prim, order_.begin()));
    if (map_.size() > kCapacity) {
      map_.erase(order_.back());
      order_.pop_back();
    }
    return prim;
  }

 private:
  static constexpr size_t kCapacity = 256;
  std::mutex mutex_;
  std::list<std::string> order_;
  std::unordered_map<std::string, std::pair<std::optional<dnnl::matmul>, std::list<std::string>::iterator>> map_;
};

void append_geometry(std::string& key, const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    key += std::to_string(t.size(d));
    key += ',';
    key += std::to_string(t.stride(d));
    key += ';';
  }
  key += '|';
}

}  // namespace

bool onednn_matmul(const Tensor& a, const Tensor& w, const Tensor& out) {
  dnnl::memory::data_type dt;
  if (!to_dnnl_type(a.dtype(), &dt) || !plain_matrix(a) || !plain_matrix(w)) return false;
  static PrimitiveCache cache;
  std::string key(1, static_cast<char>('0' + static_cast<int>(a.dtype())));
  append_geometry(key, a);
  append_geometry(key, w);
  append_geometry(key, out);
  auto amd = md(a, dt), wmd = md(w, dt), cmd = md(out, dt);
  std::optional<dnnl::matmul> prim = cache.get(key, amd, wmd, cmd);
  if (!prim) return false;
  dnnl::memory am(amd, engine(), a.data_ptr()), wm(wmd, engine(), w.data_ptr()), cm(cmd, engine(), out.data_ptr());
  dnnl::stream s(engine());
  prim->execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, cm}});
  s.wait();
  return true;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

#else

bool onednn_matmul(const Tensor&, const Tensor&, const Tensor&) { return false; }
std::string onednn_version() { return ""; }

#endif

}  // namespace kiln::backend::cpu
