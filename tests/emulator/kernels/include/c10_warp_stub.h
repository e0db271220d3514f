// Stand-in for a library header (PyTorch c10/macros/Macros.h shape): C10_WARP_SIZE is 64 in the
// device pass for gfx9 under ROCm and 32 elsewhere. Not part of the patched project.
#pragma once
#if defined(USE_ROCM) && (defined(__GFX9__) || defined(__GFX8__))
#define C10_WARP_SIZE 64
#else
#define C10_WARP_SIZE 32
#endif
template <typename T>
__device__ __forceinline__ T WARP_SHFL_DOWN(T value, unsigned int delta, int width = warpSize,
                                            unsigned int mask = 0xffffffff) {
#if defined(USE_ROCM)
  return __shfl_down(value, delta, width);
#else
  return __shfl_down_sync(mask, value, delta, width);
#endif
}
