// Issue 13 item 2: identifiers named `warpSize` that are not the builtin -- a local declared inside a
// macro body and a parameter -- must be left alone; the builtin use next to them is patched.
__device__ __forceinline__ int lanes_per_group() { return 8; }
__device__ float scaled(float x, int warpSize) { return x * warpSize; }
#define GROUP_SCALE(x)                 \
  {                                    \
    int warpSize = lanes_per_group();  \
    x = scaled(x, warpSize);           \
  }

__global__ void groups(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  GROUP_SCALE(v);
  out[threadIdx.x] = v + (float)warpSize;  // the builtin: 32 on CUDA
}
