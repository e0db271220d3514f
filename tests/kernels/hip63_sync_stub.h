// Stand-in for the ROCm >= 6.3 masked warp builtins (amd_warp_sync_functions.h), for syntax
// checks against HIP 5.2 headers: same names and argument order, and the same compile-time rule
// that the mask is a 64-bit integer. Semantics are the maskless family's (enough for compiling).
#pragma once
#include <hip/hip_runtime.h>
#define PORTER_STUB_MASK_CHECK(M) \
  static_assert(sizeof(M) == 8, "The mask must be a 64-bit integer. Implicitly promoting a smaller integer is almost always an error.")
template <typename M, typename T> __device__ inline T __shfl_sync(M m, T v, int s, int w = warpSize) {
  PORTER_STUB_MASK_CHECK(M); (void)m; return __shfl(v, s, w);
}
template <typename M, typename T> __device__ inline T __shfl_up_sync(M m, T v, unsigned int d, int w = warpSize) {
  PORTER_STUB_MASK_CHECK(M); (void)m; return __shfl_up(v, d, w);
}
template <typename M, typename T> __device__ inline T __shfl_down_sync(M m, T v, unsigned int d, int w = warpSize) {
  PORTER_STUB_MASK_CHECK(M); (void)m; return __shfl_down(v, d, w);
}
template <typename M, typename T> __device__ inline T __shfl_xor_sync(M m, T v, int l, int w = warpSize) {
  PORTER_STUB_MASK_CHECK(M); (void)m; return __shfl_xor(v, l, w);
}
template <typename M> __device__ inline unsigned long long __ballot_sync(M m, int p) {
  PORTER_STUB_MASK_CHECK(M); (void)m; return __ballot(p);
}
template <typename M> __device__ inline int __any_sync(M m, int p) { PORTER_STUB_MASK_CHECK(M); (void)m; return __any(p); }
template <typename M> __device__ inline int __all_sync(M m, int p) { PORTER_STUB_MASK_CHECK(M); (void)m; return __all(p); }
