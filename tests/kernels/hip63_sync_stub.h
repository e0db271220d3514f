// Stand-in for the ROCm >= 6.3 masked warp builtins (amd_warp_sync_functions.h), for checks
// against the HIP 5.2 headers installed here: same names and argument order, and the same rule
// that the mask must be a 64-bit integer. ROCm enforces it with a static_assert inside a template
// (reported once per instantiation); this stub deletes the 32-bit overloads instead so that the
// compiler rejects every offending call site. Semantics are the maskless family's.
#pragma once
#include <hip/hip_runtime.h>
#define PORTER_STUB_SYNC(NAME, LEGACY, LT)                                                        \
  template <typename T> __device__ inline T NAME(unsigned long long m, T v, LT x, int w = warpSize) { \
    (void)m; return LEGACY(v, x, w);                                                             \
  }                                                                                               \
  template <typename T> T NAME(unsigned int m, T v, LT x, int w = warpSize) = delete;             \
  template <typename T> T NAME(int m, T v, LT x, int w = warpSize) = delete;
PORTER_STUB_SYNC(__shfl_sync, __shfl, int)
PORTER_STUB_SYNC(__shfl_up_sync, __shfl_up, unsigned int)
PORTER_STUB_SYNC(__shfl_down_sync, __shfl_down, unsigned int)
PORTER_STUB_SYNC(__shfl_xor_sync, __shfl_xor, int)
#undef PORTER_STUB_SYNC
__device__ inline unsigned long long __ballot_sync(unsigned long long m, int p) { (void)m; return __ballot(p); }
__device__ inline int __any_sync(unsigned long long m, int p) { (void)m; return __any(p); }
__device__ inline int __all_sync(unsigned long long m, int p) { (void)m; return __all(p); }
unsigned long long __ballot_sync(unsigned int m, int p) = delete;
unsigned long long __ballot_sync(int m, int p) = delete;
int __any_sync(unsigned int m, int p) = delete;
int __any_sync(int m, int p) = delete;
int __all_sync(unsigned int m, int p) = delete;
int __all_sync(int m, int p) = delete;
