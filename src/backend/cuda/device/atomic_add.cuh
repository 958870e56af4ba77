// atomic_add(p, v) for every dtype scatter_add takes, each rounding as the CPU kernel's
// dst = T(compute_t(dst) + compute_t(v)) does, but for float32 subnormals: the native float atomic
// (atom.add.f32) flushes them to zero, as PyTorch's CUDA scatter_add does too. Native atomics for
// 32/64-bit types and (on sm_70+ / sm_80+) for float16/bfloat16; a compare-and-swap on the
// enclosing 32-bit word for bytes, bools and 16-bit floats on older devices. That word is always inside the tensor's allocation: the
// allocator hands out multiples of 512 bytes, aligned.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::backend::cuda {

__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
// Two's-complement addition is the same on unsigned words (and wraps instead of overflowing).
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// The aligned 32-bit word holding p, and p's bit offset in it (little-endian).
__device__ __forceinline__ unsigned int* word_of(const void* p, unsigned& shift) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  shift = static_cast<unsigned>(addr & 3u) * 8u;
  return reinterpret_cast<unsigned int*>(addr & ~uintptr_t{3});
}

// Replaces the kBits-wide field at p with f(old field), atomically.
template <unsigned kBits, class F>
__device__ __forceinline__ void atomic_update_field(void* p, F f) {
  unsigned shift;
  unsigned int* word = word_of(p, shift);
  constexpr unsigned kMask = (1u << kBits) - 1u;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    const unsigned field = f((assumed >> shift) & kMask) & kMask;
    old = atomicCAS(word, assumed, (assumed & ~(kMask << shift)) | (field << shift));
  } while (old != assumed);
}

__device__ __forceinline__ void atomic_add(uint8_t* p, uint8_t v) {  // wraps modulo 256, as uint8 does
  atomic_update_field<8>(p, [v](unsigned old) { return old + v; });
}
// bool + bool converted back to bool is an or.
__device__ __forceinline__ void atomic_add(bool* p, bool v) {
  if (!v) return;
  unsigned shift;
  unsigned int* word = word_of(p, shift);
  atomicOr(word, 1u << shift);
}

template <class T>
__device__ __forceinline__ void atomic_add_16_cas(T* p, T v) {
  atomic_update_field<16>(p, [v](unsigned old) {
    T cur;
    cur.bits = static_cast<uint16_t>(old);
    return static_cast<unsigned>(T(static_cast<float>(cur) + static_cast<float>(v)).bits);
  });
}

__device__ __forceinline__ void atomic_add(Half* p, Half v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  atomicAdd(reinterpret_cast<__half*>(p), __ushort_as_half(v.bits));
#else
  atomic_add_16_cas(p, v);
#endif
}
__device__ __forceinline__ void atomic_add(BFloat16* p, BFloat16 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __ushort_as_bfloat16(v.bits));
#else
  atomic_add_16_cas(p, v);
#endif
}

}  // namespace kiln::backend::cuda
