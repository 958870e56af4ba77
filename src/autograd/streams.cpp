// The backward engine's stream ordering (see streams.h).
#include "autograd/streams.h"

#include <algorithm>

#include "core/device_runtime.h"

namespace kiln::autograd {

StreamPlace StreamPlace::current(Device d) {
  if (d.type == DeviceType::CPU) return {d, nullptr};
  return {d, find_runtime(d.type)->current_stream(d.index)};
}

StreamScope::StreamScope(const StreamPlace& place) {
  if (!place.on_device()) return;
  DeviceRuntime* rt = find_runtime(place.device.type);
  if (rt->current_stream(place.device.index) == place.stream) return;
  prev_ = rt->exchange_stream(place.device.index, place.stream);
  rt_ = rt;
  index_ = place.device.index;
}

StreamScope::~StreamScope() {
  if (rt_) rt_->exchange_stream(index_, prev_);
}

void hand_over(const Tensor& g, const StreamPlace& from, const StreamPlace& to) {
  if (!g.defined() || !from.on_device() || from.device != to.device || from.stream == to.stream) return;
  DeviceRuntime* rt = find_runtime(to.device.type);
  rt->wait_stream(to.device.index, to.stream, from.stream);
  if (g.device() == to.device) rt->record_stream(g.storage()->data, to.device.index, to.stream);
}

void LeafStreams::add(const StreamPlace& place) {
  if (place.on_device() && std::find(places_.begin(), places_.end(), place) == places_.end())
    places_.push_back(place);
}

void LeafStreams::wait_for_all() const {
  for (const StreamPlace& p : places_) {
    const StreamPlace caller = StreamPlace::current(p.device);
    if (caller.stream != p.stream) find_runtime(p.device.type)->wait_stream(p.device.index, caller.stream, p.stream);
  }
}

}  // namespace kiln::autograd
