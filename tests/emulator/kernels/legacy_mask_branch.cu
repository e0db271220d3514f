// H15 in the shape of an early HIP port: the HIP branch passes the mask to the maskless legacy
// shuffle (it compiles and shuffles the constant); the CUDA branch is right.
#ifdef __HIP_PLATFORM_AMD__
#define SHFL_DOWN(v, o) __shfl_down(0xffffffff, v, o)
#else
#define SHFL_DOWN(v, o) __shfl_down_sync(0xffffffff, v, o)
#endif
__device__ float warp_reduce_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += SHFL_DOWN(v, o);
  return v;
}
__global__ void sums(const float* in, float* out) {
  float v = warp_reduce_sum(in[threadIdx.x]);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}
