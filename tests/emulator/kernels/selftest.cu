// Emulator self-test: every intrinsic on known inputs (value = linear thread id), one block of 64
// threads: two CUDA warps, one wave64 wavefront or two wave32 wavefronts. Expectations are in
// tests/test_warp_emulator.py.
#if EMU_HIP
typedef unsigned long long mask_t;
#define FULL (~0ull)
#define BALLOT(p) __ballot(p)
#define ANY(p) __any(p)
#define ALL(p) __all(p)
#define SYNC_WARP() __builtin_amdgcn_wave_barrier()
#else
typedef unsigned int mask_t;
#define FULL 0xffffffffu
#define BALLOT(p) __ballot_sync(FULL, p)
#define ANY(p) __any_sync(FULL, p)
#define ALL(p) __all_sync(FULL, p)
#define SYNC_WARP() __syncwarp()
#endif

struct pair_t {
  float a;
  int b;
};

__global__ void shuffles(int* out) {
  const int t = threadIdx.x;
  const int n = blockDim.x;
  out[0 * n + t] = __shfl(t, 3);
  out[1 * n + t] = __shfl(t, 5, 16);
  out[2 * n + t] = __shfl_up(t, 1);
  out[3 * n + t] = __shfl_down(t, 2);
  out[4 * n + t] = __shfl_xor(t, 1);
  out[5 * n + t] = __shfl_xor(t, 32);
  out[6 * n + t] = __shfl_xor(t, 8, 8);
  out[7 * n + t] = __shfl_sync(FULL, t, 40);
  out[8 * n + t] = __shfl_up_sync(FULL, t, 3, 8);
  out[9 * n + t] = __shfl_down_sync(FULL, t, 16);
  out[10 * n + t] = __shfl_xor_sync(FULL, t, 16);
  double d = __shfl_down(t * 0.5, 1);
  out[11 * n + t] = (int)(d * 2);
  pair_t p = {t * 0.25f, -t};
  pair_t q = __shfl_xor(p, 2);
  out[12 * n + t] = (int)(q.a * 4) + 1000 * q.b;
  // partial participation: only the lanes named in the mask / the active lanes take part
  int r = -1;
#if EMU_HIP
  if ((t & 31) < 16) r = __shfl_sync(__activemask(), t, 15);
#else
  if ((t & 31) < 16) r = __shfl_sync(0x0000ffffu, t, 15);
#endif
  out[13 * n + t] = r;
  out[14 * n + t] = warpSize;
}

__global__ void votes(unsigned long long* out) {
  const int t = threadIdx.x;
  const int n = blockDim.x;
  mask_t b = BALLOT(t % 3 == 0);
  out[0 * n + t] = (unsigned long long)b;
  out[1 * n + t] = ANY(t == 40);
  out[2 * n + t] = ALL(t < 60);
  out[3 * n + t] = sizeof(b) == 8 ? __popcll(b) : __popc((unsigned)b);
  mask_t c = BALLOT(t >= 37 && t < 50);
  out[4 * n + t] = sizeof(c) == 8 ? __ffsll((long long)c) : __ffs((int)c);
  out[6 * n + t] = __any(t == 5);
  out[7 * n + t] = __all(t != 63);
  out[8 * n + t] = (unsigned long long)__ballot(t < 3);
  out[9 * n + t] = __clz(t) + 100 * __popc(0xf0f0u) + 1000 * (__brev(1u) == 0x80000000u);
#if EMU_HIP
  out[10 * n + t] = __lane_id() + 100 * __popcll(__lanemask_lt());
#else
  out[10 * n + t] = (t & 31) + 100 * (t & 31);
#endif
  unsigned long long am = 0;
  if (t % 2 == 0) am = (unsigned long long)__activemask();
  out[5 * n + t] = am;
  // the wavefront reconverges after the branch: every lane takes part in the next vote
  out[11 * n + t] = ANY(t == 5);
}

__global__ void memory(const float* in, float* out, int* counters) {
  __shared__ float s[64];
  extern __shared__ float dyn[];
  const int t = threadIdx.x;
  s[t] = in[blockIdx.x * blockDim.x + t];
  dyn[t] = 2.f * s[t];
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = s[63 - t] + dyn[(t + 1) % 64];
  SYNC_WARP();
  atomicAdd(&counters[0], 1);
  atomicMax(&counters[1], t * (int)(blockIdx.x + 1));
  atomicMin(&counters[2], -t);
  atomicExch(&counters[3], 7);
  atomicCAS(&counters[4], 0, t + 1);
  atomicAdd(&counters[5 + blockIdx.y], (int)gridDim.x * 1000 + (int)blockDim.y);
}
