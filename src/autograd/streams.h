// Backward on the streams the forward ran on, as torch's engine: each node runs on the stream that
// was current on its output's device when its op was recorded, so that its kernels follow the
// forward's work and the memory of the tensors it saved, which it frees, goes back to the pool of
// the stream that reads it. A gradient handed from one stream to another is waited for and kept
// from reuse until the receiving stream is done with it; at the end of a pass the caller's
// current streams wait for the gradients left in leaves (or returned) from other streams.
// Everything here is nothing for tensors on the CPU.
#pragma once

#include <vector>

#include "kiln/tensor.h"

namespace kiln {
class DeviceRuntime;
}

namespace kiln::autograd {

// A device stream (nullptr: the default stream), or none for the CPU.
struct StreamPlace {
  Device device;
  void* stream = nullptr;
  bool on_device() const { return device.type != DeviceType::CPU; }
  bool operator==(const StreamPlace& o) const { return device == o.device && stream == o.stream; }
  // The calling thread's current stream on `d`.
  static StreamPlace current(Device d);
};

// Makes `place` the calling thread's current stream on its device while alive.
class StreamScope {
 public:
  explicit StreamScope(const StreamPlace& place);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  DeviceRuntime* rt_ = nullptr;
  int index_ = 0;
  void* prev_ = nullptr;
};

// `g`, made on `from`, is used next on `to`: `to` waits for `from`'s work so far, and g's memory
// is not reused before `to`'s work is done. Where `to` is on another device, the calling thread's
// current stream on `from`'s device stands for it (what the node's work there runs on). Nothing
// when they are one stream.
void hand_over(const Tensor& g, const StreamPlace& from, const StreamPlace& to);

// The device streams a pass left gradients on; the caller's current streams wait for them.
class LeafStreams {
 public:
  void add(const StreamPlace& place);
  void wait_for_all() const;

 private:
  std::vector<StreamPlace> places_;
};

}  // namespace kiln::autograd
