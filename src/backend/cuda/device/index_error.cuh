// Device side of index_check.h: a kernel that meets an out-of-range index records it here (and
// skips the element) instead of reading or writing out of bounds.
#pragma once

#include "backend/cuda/device/common.cuh"
#include "backend/cuda/index_check.h"

namespace kiln::backend::cuda {

// Claims the slot if no bad index was recorded yet; cheap when called from many threads at once
// (one atomicCAS each, and only on the error path).
__device__ __forceinline__ void record_index_error(IndexErrorSlot* slot, IndexOp op, int64_t index, int64_t size,
                                                   int64_t position) {
  if (atomicCAS(&slot->claimed, 0u, 1u) == 0u) {
    slot->op = static_cast<int32_t>(op);
    slot->index = index;
    slot->size = size;
    slot->position = position;
    __threadfence();  // the fields before `ready`: a reader that sees ready sees them
    atomicExch(&slot->ready, 1u);
  }
}

}  // namespace kiln::backend::cuda
