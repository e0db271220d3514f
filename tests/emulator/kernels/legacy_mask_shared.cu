// H15 where both targets compile the mistake: an early port made the mask-taking legacy call the only
// spelling, in a macro and in a plain call. It shuffles the mask constant with the value as delta on
// CUDA as well, so the original has no right result to compare with; the reference is the intended
// code (legacy_mask_intended.cu). porter's UNSAFE fix (PRT515) moves the arguments into place.
#define SHFL_DOWN(v, o) __shfl_down(0xffffffff, v, o)
__device__ float warp_reduce_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += SHFL_DOWN(v, o);
  return v;
}
__device__ float warp_reduce_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down(0xffffffff, v, o));
  return v;
}
__global__ void sums(const float* in, float* out) {
  float v = warp_reduce_sum(in[threadIdx.x]);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}
__global__ void maxima(const float* in, float* out) {
  float v = warp_reduce_max(in[threadIdx.x]);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}
