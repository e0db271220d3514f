// The reference for legacy_mask_shared.cu: what its author meant, in CUDA's spelling.
__device__ float warp_reduce_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
  return v;
}
__device__ float warp_reduce_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffff, v, o));
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
