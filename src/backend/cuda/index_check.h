// Out-of-range indices on the GPU. A CPU kernel throws a kiln::Error naming its op; a CUDA kernel
// cannot throw, and must not synchronise to find out. So the index kernels (embedding,
// index_select, gather, scatter_add, cross_entropy's targets) never read or write out of range:
// they skip the element (a gathered element reads as 0) and record the bad index in a small
// per-device slot. The error surfaces at the next synchronising call that asks for it (the
// runtime's synchronize, item(), a copy to the CPU) through take_index_error/raise_index_error.
//
// Plain C++ (no CUDA headers): the runtime and the kernels' host code both include it.
#pragma once

#include <cstdint>
#include <optional>

namespace kiln::backend::cuda {

// The ops whose kernels record bad indices (the op of the error message).
enum class IndexOp : int32_t { None = 0, Embedding, IndexSelect, Gather, ScatterAdd, CrossEntropy };
const char* index_op_name(IndexOp op);

// The device-side record. The first kernel thread to find a bad index claims the slot (claimed
// 0 -> 1 by atomicCAS) and fills in the rest; later ones leave it. "First" is in the GPU's order,
// not necessarily the lowest position the CPU kernel would have reported.
struct IndexErrorSlot {
  uint32_t claimed;
  uint32_t ready;     // set after the fields below are written
  int32_t op;         // an IndexOp
  int64_t index;      // the bad index (or target)
  int64_t size;       // the size it had to be below (rows, dim size, classes)
  int64_t position;   // where in the index tensor it was
};

// The slot of `device`, a device pointer for kernels to record into (see device/index_error.cuh).
// Zero-initialised when CUDA loads the module; no allocation, no synchronisation. Thread-safe.
IndexErrorSlot* index_error_slot(int device);

struct IndexError {
  IndexOp op = IndexOp::None;
  int64_t index = 0, size = 0, position = 0;
};

// The error recorded on `device` since the last take, and clears the slot; nullopt when none.
// It is a synchronous read of device memory: it sees what kernels that have finished recorded,
// so call it after synchronizing the stream (or device) whose work is to be checked. The clear
// (only when an error was found) waits for itself, so a later kernel's record is never lost.
std::optional<IndexError> take_index_error(int device);

// The same from a copy of the slot that the caller read itself (a copy queued on a stream right
// after that stream's work, then waited for with it: no read of its own, and so no second wait).
std::optional<IndexError> take_index_error(int device, const IndexErrorSlot& seen);

// take_index_error, thrown as the CPU kernels word it, e.g. "[embedding] index 30522 (at
// position 17) is out of range for a table of 30522 rows"; does nothing when none was recorded.
void raise_index_error(int device);
void raise_index_error(int device, const IndexErrorSlot& seen);

}  // namespace kiln::backend::cuda
