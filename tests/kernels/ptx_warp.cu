// H18: PTX warp primitives. porter reports them and leaves them unpatched: HIPify keeps the
// PTX, which the AMD assembler rejects (tests/test_warp_compilers.py checks exactly that).
#include <cuda_runtime.h>
__device__ __forceinline__ unsigned ptx_lane_id() {
  unsigned l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}
__device__ __forceinline__ unsigned ptx_lanemask_lt() {
  unsigned m;
  asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}
__global__ void k_ptx(const int* in, int* out) {
  out[threadIdx.x] = in[threadIdx.x] + (int)ptx_lane_id() + __popc(ptx_lanemask_lt());
}
