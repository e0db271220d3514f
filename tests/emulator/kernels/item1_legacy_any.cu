// Issue 13 item 1, fourth shape: a legacy __any(x) in a USE_ROCM branch that treats the whole
// 64-lane wavefront as one warp (CUDA: one vote per 32-lane warp).
__global__ void any_negative(const float* in, int* out) {
  __shared__ int flags[32];
  const float v = in[blockIdx.x * blockDim.x + threadIdx.x];
#ifdef USE_ROCM
  const int width = 64;
  const int a = __any(v < 0.f);
#else
  const int width = 32;
  const int a = __any_sync(0xffffffff, v < 0.f);
#endif
  if (threadIdx.x % width == 0) flags[threadIdx.x / width] = a;
  __syncthreads();
  if (threadIdx.x == 0) {
    int r = 0;
    for (int w = 0; w < (int)blockDim.x / width; ++w) r |= flags[w];
    out[blockIdx.x] = r;
  }
}
