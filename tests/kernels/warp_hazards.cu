// Test kernels for porter's compiler verification (tests/test_warp_compilers.py) and the NVIDIA
// side-by-side check (tests/gpu/run_warp_parity.py). Every warp-size hazard H1-H20 (PRT501-PRT520,
// `porter rules --family warp_size`) occurs here at least once (H20 is Python-side; H18: ptx_warp.cu).
// Each case writes one float per thread; blocks are 128 threads (4 CUDA warps).
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <stdint.h>
namespace cg = cooperative_groups;

#define FINAL_MASK 0xffffffff
#define WARP_SIZE_BITS 5
#define NUM_WARPS 4
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
// an earlier, partial HIP port (H11, H15)
#define WARP_SIZE warpSize
#define SHFL_DOWN(v, o) __shfl_down(0xffffffff, v, o)
#else
#define WARP_SIZE 32
#define SHFL_DOWN(v, o) __shfl_down_sync(0xffffffff, v, o)
#endif
#define SHFL_XOR(v, o) __shfl_xor_sync(FINAL_MASK, v, o)
#if defined(__AMDGCN_WAVEFRONT_SIZE) && __AMDGCN_WAVEFRONT_SIZE == 64
#define WAVE_IS_64 1
#else
#define WAVE_IS_64 0
#endif

// H1 (default mask parameter) and H8 (computed mask, explicit width)
template <typename T>
__device__ __forceinline__ T WARP_SHFL_XOR(T value, int laneMask, int width = 32, unsigned int mask = 0xffffffff) {
  return __shfl_xor_sync(mask, value, laneMask, width);
}

// H1: every spelling of the 32-bit full mask; XOR butterfly
__device__ float warp_sum(float v) {
  v += __shfl_xor_sync(0xffffffff, v, 16);
  v += __shfl_xor_sync(0xFFFFFFFFU, v, 8);
  v += __shfl_xor_sync(~0u, v, 4);
  v += __shfl_xor_sync(uint32_t(-1), v, 2);
  v += SHFL_XOR(v, 1);
  return v;
}

// H4 + H15 (through SHFL_DOWN on the HIP branch)
__device__ float warp_sum_down(float v) {
  for (int o = 16; o > 0; o >>= 1) v += SHFL_DOWN(v, o);
  return v;
}

template <int W>
__device__ float reduce_w(float v) {
  for (int o = W / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

// H14: warp-synchronous volatile tree (reported, left as is)
__device__ void volatile_tree(volatile float* s, int tid) {
  s[tid] += s[tid + 32];
  s[tid] += s[tid + 16];
  s[tid] += s[tid + 8];
  s[tid] += s[tid + 4];
  s[tid] += s[tid + 2];
  s[tid] += s[tid + 1];
}

// case 0: block sum -- H5, H6, H7, H19 (launch bounds), H11 (WARP_SIZE = warpSize on HIP)
__global__ void __launch_bounds__(NUM_WARPS * WARP_SIZE) k_block_sum(const float* in, float* out) {
  __shared__ float partial[32];
  int lane = threadIdx.x & 0x1f;
  int warp = threadIdx.x >> WARP_SIZE_BITS;
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float r = 0.f;
  if (threadIdx.x < 32) {
    r = (threadIdx.x < blockDim.x / 32) ? partial[lane] : 0.f;
    r = warp_sum_down(r);
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = (threadIdx.x == 0) ? r : v;
}

// case 1: scans and broadcasts -- H4 (doubling loop), H8 (no width), sub-warp width 8 kept
__global__ void k_scan(const float* in, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x % 32;
  float v = in[i];
  for (int d = 1; d < 32; d *= 2) {
    float n = __shfl_up_sync(0xffffffff, v, d);
    if (lane >= d) v += n;
  }
  float first = __shfl_sync(0xffffffff, v, 0);
  float row = WARP_SHFL_XOR(v, 4, 8);
  out[i] = v + 0.5f * first + 0.25f * row;
}

// case 2: ballots and votes -- H2, H3, H9
__global__ void k_ballot(const float* in, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x % 32;
  float v = in[i];
  unsigned int m = __ballot_sync(0xffffffff, v > 0.f);
  unsigned act = __activemask();
  int below = __popc(m & ((1u << lane) - 1));
  int first = __ffs(m) - 1;
  int anyneg = __any_sync(0xffffffff, v < -0.9f);
  int allpos = __all_sync(act, v > -2.f);
  out[i] = below + 100.f * first + 1000.f * anyneg + 10000.f * allpos + (float)__popc(act);
}

// case 3: warpSize on the device (H11, PRT521), __syncwarp (H16), tiles (H13), volatile tree (H14)
__global__ void k_misc(const float* in, float* out) {
  __shared__ float s[128 + 32];
  __shared__ float per_warp[1024 / WARP_SIZE];
  int tid = threadIdx.x;
  int i = blockIdx.x * blockDim.x + tid;
  float v = in[i];
  float a = reduce_w<WARP_SIZE>(v);
  for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);
  if (tid % WARP_SIZE == 0) per_warp[tid / WARP_SIZE] = v;
  s[tid] = in[i];
  if (tid < 32) s[tid + 128] = 0.f;
  __syncthreads();
  __syncwarp();
  if (tid < 32) volatile_tree(s, tid);
  __syncwarp(0xffffffff);
  __syncthreads();
  auto tile = cg::tiled_partition<32>(cg::this_thread_block());
  float t = tile.shfl_xor(a, 1);
  out[i] = a + t + per_warp[tid / 32] + (tid == 0 ? s[0] : 0.f) + WAVE_IS_64;
}

// case 4: divergence (H17): the collective runs under a lane-dependent branch
__global__ void k_divergent(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = in[i];
  if (threadIdx.x < n) v = warp_sum(v);
  out[i] = v;
}

// H10: host code reading the device warp size (not used for the launches below)
int porter_threads_hint(int dev) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return 128;
  return NUM_WARPS * prop.warpSize;
}

extern "C" int porter_case_count() { return 5; }
extern "C" const char* porter_case_name(int c) {
  static const char* names[] = {"block_sum", "scan", "ballot", "misc", "divergent"};
  return (c >= 0 && c < 5) ? names[c] : "?";
}
extern "C" void porter_case_run(int c, const float* in, float* out, int n) {
  int blocks = n / 128;
  switch (c) {
    case 0: k_block_sum<<<blocks, 128>>>(in, out); break;
    case 1: k_scan<<<blocks, 128>>>(in, out); break;
    case 2: k_ballot<<<blocks, 128>>>(in, out); break;
    case 3: k_misc<<<blocks, 128>>>(in, out); break;
    case 4: k_divergent<<<blocks, 128>>>(in, out, 128); break;
  }
}
