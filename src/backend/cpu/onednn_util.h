// Shared pieces of the oneDNN wrappers: the engine, memory descriptors from strided tensors,
// per-call scratch memory, and a least-recently-used cache for primitives keyed by geometry.
// Only included with oneDNN.
//
// Thread safety: a cached primitive is shared by every thread that asks for the same geometry.
// oneDNN's default ("library") scratchpad is one buffer for all primitives that a primitive
// created on one thread must not be run on another, so every primitive here is built with the
// user-managed scratchpad, and each execution brings its own from Kiln's allocator.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/tensor_util.h"
#include "kiln/tensor.h"

namespace kiln::backend::cpu::onednn {

inline dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

inline bool to_dnnl_type(ScalarType t, dnnl::memory::data_type* out) {
  switch (t) {
    case kFloat32: *out = dnnl::memory::data_type::f32; return true;
    case kBFloat16: *out = dnnl::memory::data_type::bf16; return true;
    case kFloat16: *out = dnnl::memory::data_type::f16; return true;
    default: return false;
  }
}

// A memory descriptor with t's sizes and strides; size-1 dims get strides oneDNN accepts.
inline dnnl::memory::desc md(const Tensor& t, dnnl::memory::data_type dt) {
  dnnl::memory::dims dims(t.shape().begin(), t.shape().end());
  dnnl::memory::dims strides(t.strides().begin(), t.strides().end());
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] == 1) strides[i] = i + 1 < dims.size() ? dims[i + 1] * strides[i + 1] : 1;
  return dnnl::memory::desc(dims, dt, strides);
}

// Attributes every Kiln primitive starts from: the scratchpad comes with each execution.
inline dnnl::primitive_attr base_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Memory of a descriptor's size from Kiln's CPU allocator (counted in memory_stats, reused from
// its cache), alive as long as this object.
struct ScratchMemory {
  Tensor buffer;
  dnnl::memory mem;
  explicit ScratchMemory(const dnnl::memory::desc& d)
      : buffer(make_empty({static_cast<int64_t>(d.get_size())}, kUInt8, Device::cpu())),
        mem(d, engine(), buffer.data_ptr()) {}
};

// A built primitive and the scratchpad one execution of it needs.
struct Primitive {
  dnnl::primitive prim;
  dnnl::memory::desc scratchpad;

  // Runs on `s` with a scratchpad of its own, so concurrent calls never share one.
  void execute(dnnl::stream& s, std::unordered_map<int, dnnl::memory> args) const {
    std::optional<ScratchMemory> pad;
    if (scratchpad.get_size() > 0) {
      pad.emplace(scratchpad);
      args.emplace(DNNL_ARG_SCRATCHPAD, pad->mem);
    }
    prim.execute(s, args);
    s.wait();  // the scratchpad (and the caller's tensors) must outlive the work
  }
};

// A reorder between two layouts, built with the user-managed scratchpad.
inline Primitive make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  dnnl::reorder::primitive_desc pd(engine(), from, engine(), to, base_attr());
  return {dnnl::reorder(pd), pd.scratchpad_desc()};
}

// Appends t's sizes and strides to a cache key.
inline void append_geometry(std::string& key, const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    key += std::to_string(t.size(d));
    key += ',';
    key += std::to_string(t.stride(d));
    key += ';';
  }
  key += '|';
}

// Least-recently-used cache of built primitives. `make` returns nullptr when oneDNN has no
// implementation for the geometry; that answer is cached too.
template <class Entry>
class PrimitiveCache {
 public:
  std::shared_ptr<const Entry> get(const std::string& key, const std::function<std::shared_ptr<Entry>()>& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
    std::shared_ptr<Entry> entry;
    try {
      entry = make();
    } catch (const dnnl::error&) {
      // unsupported here: the caller uses its own loop
    }
    order_.push_front(key);
    map_.emplace(key, std::make_pair(entry, order_.begin()));
    if (map_.size() > kCapacity) {
      map_.erase(order_.back());
      order_.pop_back();
    }
    return entry;
  }

 private:
  static constexpr size_t kCapacity = 512;
  std::mutex mutex_;
  std::list<std::string> order_;
  std::unordered_map<std::string, std::pair<std::shared_ptr<Entry>, std::list<std::string>::iterator>> map_;
};

}  // namespace kiln::backend::cpu::onednn
