// A hand port in the shape of a sparse-matrix kernel: its HIP branch maps the *_sync broadcast to the
// legacy shuffle without a width (the wavefront), while the kernel puts one 32-lane row on each group
// of 32 threads and broadcasts lanes 0..31 of its row. On wave64 lanes 32..63 read the first row.
#ifdef USE_ROCM
#define ROW_SHFL(mask, var, lane) __shfl(var, lane)
#else
#define ROW_SHFL __shfl_sync
#endif
__global__ void row_gather(const int* cols, float* out) {
  int t = blockDim.x * blockIdx.x + threadIdx.x;
  int lane = t & (32 - 1);
  int mine = cols[t];
  float acc = 0.f;
  for (int i = 0; i < 32; i++) acc += (float)ROW_SHFL(0xffffffff, mine, i) * (float)(i + 1);
  out[t] = acc + (float)lane;
}
