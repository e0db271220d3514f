// Issue 13 item 1, first shape: a project macro that is 64 on AMD (MMCV_WITH_HIP comes from the build
// on ROCm) and a HIP branch written by hand for 64-lane warps. The HIP build is already right.
#ifdef MMCV_WITH_HIP
#define WARP_SIZE 64
#else
#define WARP_SIZE 32
#endif

__device__ float warp_reduce_sum(float val) {
#ifdef MMCV_WITH_HIP
  for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) val += __shfl_down(val, offset);
#else
  for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) val += __shfl_down_sync(0xffffffff, val, offset);
#endif
  return val;
}

// lane 0 of the first warp: values 1..64 in a 64-thread block
__global__ void first_warp_sum(const float* in, float* out) {
  float v = warp_reduce_sum(in[threadIdx.x]);
  if (threadIdx.x == 0) out[0] = v;
}

// a block sum whose result does not depend on the warp size
__global__ void block_sum(const float* in, float* out) {
  __shared__ float partial[1024 / 32];
  const int lane = threadIdx.x % WARP_SIZE;
  const int warp = threadIdx.x / WARP_SIZE;
  float v = warp_reduce_sum(in[blockIdx.x * blockDim.x + threadIdx.x]);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < (int)blockDim.x / WARP_SIZE; ++w) s += partial[w];
    out[blockIdx.x] = s;
  }
}
