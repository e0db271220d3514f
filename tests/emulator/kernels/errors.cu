// Emulator self-test: undefined behaviour the emulator must report (one case per EMU_CASE), never hang on.
#if !EMU_HIP
__global__ void divergent_sync(float* x) {
  float v = x[threadIdx.x];
  // CUDA: lanes 16..31 never reach the shuffle their full mask names (they wait at __syncthreads)
  if ((threadIdx.x & 31) < 16) v += __shfl_xor_sync(0xffffffffu, v, 1);
  __syncthreads();
  x[threadIdx.x] = v;
}
#endif
__global__ void exited_lanes(float* x) {
  float v = x[threadIdx.x];
  if (threadIdx.x >= 32) return;
  // wave64: lane 16 reads lane 32, which has exited (fine with CUDA's 32-lane warps)
  v += __shfl_down(v, 16);
  x[threadIdx.x] = v;
}
#if EMU_HIP
__global__ void hip_mask_check(float* x) {
  float v = x[threadIdx.x];
  // a 32-bit full mask widened to 64 bits leaves out lanes 32..63: HIP's mask check fails
  v += __shfl_xor_sync(static_cast<unsigned long long>(0xffffffffu), v, 1);
  x[threadIdx.x] = v;
}
#endif
__global__ void spin(volatile int* flag) {
  // lane 0 waits for a flag that lane 1 sets later: cooperative lanes never get there
  if (threadIdx.x == 0) {
    while (*flag == 0) {
    }
  }
  if (threadIdx.x == 1) *flag = 1;
}
__global__ void bad_width(float* x) { x[threadIdx.x] = __shfl_xor(x[threadIdx.x], 1, 24); }
