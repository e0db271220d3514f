// Issue 13 item 1, second shape: C10_WARP_SIZE / 2 in device code (64 on gfx9 under ROCm torch).
#include <c10_warp_stub.h>

__device__ float warp_sum(float v) {
  for (int offset = C10_WARP_SIZE / 2; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffff, v, offset);
  return v;
}

__global__ void block_sum(const float* in, float* out) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % C10_WARP_SIZE;
  const int warp = threadIdx.x / C10_WARP_SIZE;
  float v = warp_sum(in[blockIdx.x * blockDim.x + threadIdx.x]);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < (int)blockDim.x / C10_WARP_SIZE; ++w) s += partial[w];
    out[blockIdx.x] = s;
  }
}
