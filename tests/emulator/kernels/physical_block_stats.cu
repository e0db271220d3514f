// A kernel written for 32-lane warps throughout, for porter's physical strategy (UNSAFE fixes): lane and
// warp ids, a 16-start reduction, a lane-indexed shared array, a ballot stored in 32 bits and counted.
// Outputs per block (sum, count of positives) do not depend on the warp size once it is generic.
__global__ void block_stats(const float* in, float* sums, int* positives) {
  const int lane = threadIdx.x & 31;
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  unsigned int b = __ballot_sync(0xffffffff, v > 0.f);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
  if (lane == 0) {
    atomicAdd(&sums[blockIdx.x], v);
    atomicAdd(&positives[blockIdx.x], __popc(b));
  }
}

// The same with per-warp shared arrays and a warp count from `blockDim.x / 32` (H6 in device code).
__global__ void block_stats_shared(const float* in, float* sums, int* positives) {
  __shared__ float partial[32];
  __shared__ int counts[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  unsigned int b = __ballot_sync(0xffffffff, v > 0.f);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  if (lane == 0) {
    partial[warp] = v;
    counts[warp] = __popc(b);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    int c = 0;
    for (int w = 0; w < (int)(blockDim.x / 32); ++w) {
      s += partial[w];
      c += counts[w];
    }
    sums[blockIdx.x] = s;
    positives[blockIdx.x] = c;
  }
}
