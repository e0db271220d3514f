// Issue 13 item 1, third shape: `constexpr int kWarpSize = 64;` under USE_ROCM, with a HIP shuffle
// spelled for the 64-lane wavefront in the same branch.
#ifdef USE_ROCM
constexpr int kWarpSize = 64;
#define SHFL_XOR(v, o) __shfl_xor(v, o)
#else
constexpr int kWarpSize = 32;
#define SHFL_XOR(v, o) __shfl_xor_sync(0xffffffff, v, o)
#endif

__global__ void row_max(const float* in, float* out) {
  // one warp per row of kWarpSize values
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = kWarpSize / 2; o > 0; o /= 2) v = fmaxf(v, SHFL_XOR(v, o));
  if (lane == 0) out[row] = v;
}
