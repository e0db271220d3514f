// Minimal cooperative groups for wave_emu.h: this_thread_block() and tiled_partition<N> (N <= 32 on CUDA,
// <= the wavefront on HIP) with shuffles, votes and sync. Tiles shuffle with width N, as both vendors do.
#pragma once
#ifndef WAVE_EMU_H_
#error "compile with -include wave_emu.h"
#endif
namespace cooperative_groups {
struct thread_block {
  void sync() const { __syncthreads(); }
  unsigned thread_rank() const {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  }
  unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
};
inline thread_block this_thread_block() { return thread_block(); }
template <unsigned N>
struct thread_block_tile {
  static_assert(N > 0 && (N & (N - 1)) == 0 && N <= EMU_WAVE, "tile size");
  unsigned thread_rank() const { return this_thread_block().thread_rank() % N; }
  unsigned meta_group_rank() const { return this_thread_block().thread_rank() / N; }
  static constexpr unsigned size() { return N; }
  static constexpr unsigned num_threads() { return N; }
  void sync() const { (void)::emu::vote(::emu::OP_WAVE_BARRIER, "tile.sync", ::emu::MASK_NONE, 0, 1); }
  template <class T> T shfl(T v, int src) const { return ::emu::shuffle(::emu::OP_SHFL, "tile.shfl", ::emu::MASK_NONE, 0, v, src, N, nullptr, 0); }
  template <class T> T shfl_xor(T v, int m) const { return ::emu::shuffle(::emu::OP_SHFL_XOR, "tile.shfl_xor", ::emu::MASK_NONE, 0, v, m, N, nullptr, 0); }
  template <class T> T shfl_up(T v, unsigned d) const { return ::emu::shuffle(::emu::OP_SHFL_UP, "tile.shfl_up", ::emu::MASK_NONE, 0, v, d, N, nullptr, 0); }
  template <class T> T shfl_down(T v, unsigned d) const { return ::emu::shuffle(::emu::OP_SHFL_DOWN, "tile.shfl_down", ::emu::MASK_NONE, 0, v, d, N, nullptr, 0); }
  unsigned long long ballot(int p) const {
    unsigned long long b = ::emu::vote(::emu::OP_BALLOT, "tile.ballot", ::emu::MASK_NONE, 0, p, nullptr, 0);
    unsigned base = (this_thread_block().thread_rank() % EMU_WAVE) / N * N;
    return N == 64 ? b : (b >> base) & ((1ull << N) - 1);
  }
  int any(int p) const { return ballot(p) != 0; }
  int all(int p) const { return ballot(p) == ballot(1); }
};
template <unsigned N>
inline thread_block_tile<N> tiled_partition(const thread_block&) { return thread_block_tile<N>(); }
}  // namespace cooperative_groups
