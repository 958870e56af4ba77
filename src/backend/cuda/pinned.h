// Page-locked host memory for asynchronous copies (PyTorch's CachingHostAllocator): blocks in
// power-of-two sizes, kept for reuse; a block that a queued copy reads is handed out again only
// after the events recorded for those copies say they are done.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace kiln::backend::cuda {

void* pinned_allocate(size_t nbytes);
void pinned_free(void* p);
// Whether p lies in a pinned block; if so, the block is kept from reuse until the work queued
// on `stream` (of `device`) so far is done.
bool pinned_record(const void* p, int device, cudaStream_t stream);

}  // namespace kiln::backend::cuda
