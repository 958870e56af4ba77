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
  if (!g.defined() || !from.on_device()) return;
  // Where g is read next on its device: the node's stream, or, for a node placed on another
  // device (a custom function with outputs on two), the current stream there, which its work on
  // g's device runs on.
  const StreamPlace reader = from.device == to.device ? to : StreamPlace::current(from.device);
  if (reader.stream == from.stream) return;
  DeviceRuntime* rt = find_runtime(from.device.type);
  rt->wait_stream(from.device.index, reader.stream, from.stream);
  if (g.device() == from.device) rt->record_stream(g.storage()->data, from.device.index, reader.stream);
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
