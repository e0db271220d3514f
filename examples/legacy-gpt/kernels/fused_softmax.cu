// Fused scaled (optionally causal) softmax + dropout, tiled transpose and rotary embedding.
//
// scaled_softmax: one warp per row, rows of up to 1024 columns, fp32.
//   y = dropout(softmax(scale * x)), causal rows use the bottom-right aligned mask
//   (row i of a q_len x cols block sees columns j <= i + cols - q_len).
//
// Build: see setup.py (sm_80, --use_fast_math).

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "fused_softmax.cuh"

namespace {

constexpr int kThreadsPerBlock = 128;  // 4 warps -> 4 rows per block

__global__ void scaled_softmax_kernel(const float* __restrict__ x, float* __restrict__ y,
                                      const SoftmaxParams p) {
  const int lane = threadIdx.x & 31;
  const int warp_in_block = threadIdx.x / 32;
  const int rows_per_block = blockDim.x / WARP_SIZE;
  const int row = blockIdx.x * rows_per_block + warp_in_block;
  if (row >= p.rows) return;

  const float* in = x + static_cast<int64_t>(row) * p.cols;
  float* out = y + static_cast<int64_t>(row) * p.cols;
  // causal limit: bottom-right alignment inside each (q_len x cols) block of rows
  const int q_row = p.causal ? row % p.q_len : 0;
  const int limit = p.causal ? q_row + p.cols - p.q_len : p.cols - 1;

  // pass 1: row max
  float m = -INFINITY;
  for (int c = lane; c < p.cols; c += WARP_SIZE) {
    if (c <= limit) m = fmaxf(m, in[c] * p.scale);
  }
  m = warp_reduce_max(m);

  // a fully masked row (limit < 0) produces zeros, like flash-attn
  const unsigned any_valid = __ballot_sync(0xffffffff, limit >= lane);
  if (__popc(any_valid) == 0) {
    for (int c = lane; c < p.cols; c += WARP_SIZE) out[c] = 0.f;
    return;
  }

  // pass 2: sum of exponentials
  float s = 0.f;
  for (int c = lane; c < p.cols; c += WARP_SIZE) {
    if (c <= limit) s += __expf(in[c] * p.scale - m);
  }
  s = warp_reduce_sum(s);
  // make sure every lane uses lane 0's value (the xor tree already agrees, but be explicit)
  s = __shfl_sync(0xffffffff, s, 0);
  const float inv = 1.f / s;
  const float keep_scale = p.dropout_p > 0.f ? 1.f / (1.f - p.dropout_p) : 1.f;

  for (int c = lane; c < p.cols; c += WARP_SIZE) {
    float v = c <= limit ? __expf(in[c] * p.scale - m) * inv : 0.f;
    if (p.dropout_p > 0.f) {
      const uint32_t idx = static_cast<uint32_t>(static_cast<int64_t>(row) * p.cols + c);
      v = uniform_from_seed(p.seed, idx) < p.dropout_p ? 0.f : v * keep_scale;
    }
    out[c] = v;
  }
}

// Classic shared-memory transpose; blockDim = (TILE_DIM, BLOCK_ROWS). No warp intrinsics.
__global__ void transpose_kernel(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
  __shared__ float tile[32][33];  // TILE_DIM x (TILE_DIM + 1): padded against bank conflicts
  int x = blockIdx.x * TILE_DIM + threadIdx.x;
  int y = blockIdx.y * TILE_DIM + threadIdx.y;
  for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
    if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
  }
  __syncthreads();
  x = blockIdx.y * TILE_DIM + threadIdx.x;
  y = blockIdx.x * TILE_DIM + threadIdx.y;
  for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
    if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
  }
}

// NeoX-style rotary embedding on (tokens, heads, HEAD_DIM); one block per token,
// blockDim = (HEAD_DIM / 2, heads). HEAD_DIM is a model shape, not a warp size.
template <int HEAD_DIM>
__global__ void rotary_kernel(float* __restrict__ x, const float* __restrict__ cos_t,
                              const float* __restrict__ sin_t, const int* __restrict__ positions, int heads) {
  const int token = blockIdx.x;
  const int h = threadIdx.y;
  const int i = threadIdx.x;  // 0 .. HEAD_DIM / 2 - 1
  if (h >= heads || i >= HEAD_DIM / 2) return;
  const int pos = positions[token];
  float* v = x + (static_cast<int64_t>(token) * heads + h) * HEAD_DIM;
  const float c = cos_t[pos * (HEAD_DIM / 2) + i];
  const float s = sin_t[pos * (HEAD_DIM / 2) + i];
  const float x1 = v[i];
  const float x2 = v[i + HEAD_DIM / 2];
  v[i] = x1 * c - x2 * s;
  v[i + HEAD_DIM / 2] = x1 * s + x2 * c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Host launchers (called from fused_softmax_binding.cpp)

cudaError_t launch_scaled_softmax(const float* x, float* y, int rows, int cols, float scale, float dropout_p,
                                  uint64_t seed, bool causal, int q_len, cudaStream_t stream) {
  if (cols > MAX_THREADS_PER_BLOCK) return cudaErrorInvalidValue;
  SoftmaxParams p;
  p.rows = rows;
  p.cols = cols;
  p.scale = scale;
  p.dropout_p = dropout_p;
  p.seed = seed;
  p.causal = causal ? 1 : 0;
  p.q_len = q_len > 0 ? q_len : 1;
  const int rows_per_block = kThreadsPerBlock / 32;
  const dim3 grid((rows + rows_per_block - 1) / rows_per_block);
  scaled_softmax_kernel<<<grid, kThreadsPerBlock, 0, stream>>>(x, y, p);
  return cudaGetLastError();
}

cudaError_t launch_transpose(const float* in, float* out, int rows, int cols, cudaStream_t stream) {
  const dim3 block(TILE_DIM, BLOCK_ROWS);
  const dim3 grid((cols + TILE_DIM - 1) / TILE_DIM, (rows + TILE_DIM - 1) / TILE_DIM);
  transpose_kernel<<<grid, block, 0, stream>>>(in, out, rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_rotary(float* x, const float* cos_t, const float* sin_t, const int* positions, int tokens,
                          int heads, int head_dim, cudaStream_t stream) {
  switch (head_dim) {
    case HEAD_DIM_SMALL: {
      const dim3 block(HEAD_DIM_SMALL / 2, heads);
      rotary_kernel<HEAD_DIM_SMALL><<<tokens, block, 0, stream>>>(x, cos_t, sin_t, positions, heads);
      break;
    }
    case 64: {
      const dim3 block(32, heads);
      rotary_kernel<64><<<tokens, block, 0, stream>>>(x, cos_t, sin_t, positions, heads);
      break;
    }
    case HEAD_DIM_LARGE: {
      const dim3 block(HEAD_DIM_LARGE / 2, heads);
      rotary_kernel<HEAD_DIM_LARGE><<<tokens, block, 0, stream>>>(x, cos_t, sin_t, positions, heads);
      break;
    }
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
