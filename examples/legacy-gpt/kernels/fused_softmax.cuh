// Warp/block reduction helpers shared by the legacy-gpt kernels.
// Adapted for sm_80 (A100); assumes 32-thread warps throughout.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#define WARP_SIZE 32
#define MAX_THREADS_PER_BLOCK 1024

// Number of head dimensions the rotary kernel is instantiated for.
#define HEAD_DIM_SMALL 32
#define HEAD_DIM_LARGE 128

// Tile edge for the shared-memory transpose (one tile = 32x32 floats, rows padded by one
// element to avoid bank conflicts). Unrelated to the warp size.
#define TILE_DIM 32
#define BLOCK_ROWS 8

// Kernel parameters, padded to one 32-byte sector so the struct is loaded in a single transaction.
struct alignas(32) SoftmaxParams {
  int rows;
  int cols;
  float scale;
  float dropout_p;
  uint64_t seed;
  int causal;
  int q_len;
};

template <typename T>
__device__ __forceinline__ T warp_reduce_max(T val) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    val = fmaxf(val, __shfl_xor_sync(0xffffffff, val, offset));
  }
  return val;
}

template <typename T>
__device__ __forceinline__ T warp_reduce_sum(T val) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    val += __shfl_xor_sync(0xffffffff, val, offset);
  }
  return val;
}

// Sum over the whole block; every thread gets the result.
template <typename T>
__device__ __forceinline__ T block_reduce_sum(T val) {
  __shared__ T warp_sums[32];  // one slot per warp (at most 1024 / 32 warps)
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x / 32;

  val = warp_reduce_sum(val);
  if (lane == 0) warp_sums[warp] = val;
  __syncthreads();

  const int num_warps = blockDim.x / WARP_SIZE;
  val = (lane < num_warps) ? warp_sums[lane] : T(0);
  if (warp == 0) val = warp_reduce_sum(val);
  // broadcast lane 0 of the first warp
  if (threadIdx.x == 0) warp_sums[0] = val;
  __syncthreads();
  return warp_sums[0];
}

// 32-bit integer hash (lowbias32 style) used for the dropout mask; the masks below select the
// low and high halves of the 64-bit seed and have nothing to do with warp lanes.
__device__ __forceinline__ uint32_t hash_u32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

__device__ __forceinline__ float uniform_from_seed(uint64_t seed, uint32_t idx) {
  const uint32_t lo = static_cast<uint32_t>(seed & 0xffffffffull);
  const uint32_t hi = static_cast<uint32_t>(seed >> 32);
  const uint32_t h = hash_u32(idx ^ lo) ^ hash_u32(hi + idx * 0x9e3779b9U);
  return (h >> 8) * (1.0f / 16777216.0f);  // 24 random bits -> [0, 1)
}
