// The per-device slot in which index kernels record an out-of-range index (see index_check.h),
// and the host side that reads, clears and raises it.
#include <array>
#include <atomic>

#include "backend/cuda/index_check.h"
#include "backend/cuda/state.h"

namespace kiln::backend::cuda {
namespace {

// One per device: a __device__ variable exists once in every device context that loads this
// module, zero-initialised at load, so nothing is allocated or cleared before first use. The
// kernels (other translation units, no relocatable device code) get its address as a pointer.
__device__ IndexErrorSlot g_index_error_slot;

std::array<std::atomic<IndexErrorSlot*>, kMaxDevices> g_slots{};

}  // namespace

const char* index_op_name(IndexOp op) {
  switch (op) {
    case IndexOp::Embedding: return "embedding";
    case IndexOp::IndexSelect: return "index_select";
    case IndexOp::Gather: return "gather";
    case IndexOp::ScatterAdd: return "scatter_add";
    case IndexOp::CrossEntropy: return "cross_entropy";
    case IndexOp::None: break;
  }
  return "index";
}

IndexErrorSlot* index_error_slot(int device) {
  check_device(device, "index_error_slot");
  std::atomic<IndexErrorSlot*>& cached = g_slots[static_cast<size_t>(device)];
  IndexErrorSlot* slot = cached.load(std::memory_order_acquire);
  if (slot == nullptr) {  // two threads may both look it up: they get the same address
    DeviceGuard g(device);
    void* p = nullptr;
    KILN_CUDA_CHECK(cudaGetSymbolAddress(&p, g_index_error_slot));
    slot = static_cast<IndexErrorSlot*>(p);
    cached.store(slot, std::memory_order_release);
  }
  return slot;
}

std::optional<IndexError> take_index_error(int device) {
  IndexErrorSlot* slot = index_error_slot(device);
  DeviceGuard g(device);
  IndexErrorSlot host{};
  // Device to pageable host memory: returns once the copy is done.
  KILN_CUDA_CHECK(cudaMemcpy(&host, slot, sizeof(host), cudaMemcpyDeviceToHost));
  return take_index_error(device, host);
}

std::optional<IndexError> take_index_error(int device, const IndexErrorSlot& seen) {
  // Claimed but not ready: a kernel still running on another stream is writing it; the next
  // synchronising call reports it.
  if (seen.claimed == 0 || seen.ready == 0) return std::nullopt;
  IndexErrorSlot* slot = index_error_slot(device);
  DeviceGuard g(device);
  // The clear is waited for, so a kernel queued after this call cannot record before it lands.
  KILN_CUDA_CHECK(cudaMemsetAsync(slot, 0, sizeof(IndexErrorSlot), nullptr));
  KILN_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return IndexError{static_cast<IndexOp>(seen.op), seen.index, seen.size, seen.position};
}

namespace {
[[noreturn]] void raise(const IndexError& e) {
  const char* op = index_op_name(e.op);
  switch (e.op) {
    case IndexOp::Embedding:
      KILN_FAIL(op, "index ", e.index, " (at position ", e.position, ") is out of range for a table of ", e.size,
                " rows");
    case IndexOp::CrossEntropy:
      KILN_FAIL(op, "target ", e.index, " is out of range for ", e.size, " classes");
    default:
      KILN_FAIL(op, "index ", e.index, " is out of range for a dim of size ", e.size);
  }
}
}  // namespace

void raise_index_error(int device, const IndexErrorSlot& seen) {
  if (const std::optional<IndexError> e = take_index_error(device, seen)) raise(*e);
}

void raise_index_error(int device) {
  if (const std::optional<IndexError> e = take_index_error(device)) raise(*e);
}

}  // namespace kiln::backend::cuda
