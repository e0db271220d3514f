// porter_warp.h -- portable warp helpers, added by porter (https://github.com/porter-rocm).
//
// One header that behaves the same on CUDA, on HIP wave64 (gfx8/gfx9: CDNA), on HIP wave32
// (gfx10+: RDNA) and in the host pass. Every name is prefixed porter_/PORTER_ so that HIPify
// leaves this file and its call sites untouched; no CUDA runtime identifier is spelled here.
//
// Strategy "logical" (porter's default): a warp is 32 lanes everywhere. On a 64-wide wavefront
// two logical warps share one wavefront: shuffles pass an explicit width of PORTER_LOGICAL_WARP,
// votes and ballots return the 32 bits of the caller's half.
// Strategy "physical": code is generic over PORTER_WARP_SIZE, the hardware wavefront of the
// device pass; host code must query porter::host_warp_size() and dispatch (PORTER_DISPATCH_WARP).
//
// HIP masks: ROCm >= 6.3 has *_sync builtins that demand a 64-bit mask equal to the ballot of the
// executing lanes; older HIP has only the maskless __shfl* family. Maskless porter_* calls always
// use the maskless family (AMD wavefronts execute in lockstep). porter_*_sync calls with a 64-bit
// mask use the *_sync builtins when PORTER_HIP_SYNC_BUILTINS is 1 (auto-detected from HIP_VERSION,
// override with -DPORTER_HIP_SYNC_BUILTINS=0/1); 32-bit (logical) masks use the maskless family.
//
// porter: ignore-file (this header is porter's own; its raw intrinsics are intentional)
//
// Do not build with -mwavefrontsize64 on RDNA: the arch test below cannot see that flag.
#ifndef PORTER_WARP_H_
#define PORTER_WARP_H_

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__) || \
    (defined(__HIP__) && !defined(__HIP_PLATFORM_NVIDIA__) && !defined(__HIP_PLATFORM_NVCC__))
#define PORTER_HIP 1
#include <hip/hip_runtime.h>
#include <type_traits>
#else
#define PORTER_HIP 0
#endif

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define PORTER_HAS_DEVICE 1
#include <type_traits>
#else
#define PORTER_HAS_DEVICE 0
#endif

// ---- sizes -------------------------------------------------------------------------------------
#ifndef PORTER_LOGICAL_WARP
#define PORTER_LOGICAL_WARP 32
#endif
#define PORTER_WARP_SIZE_MIN 32

#if PORTER_HIP
#define PORTER_WARP_SIZE_MAX 64
#if defined(__HIP_DEVICE_COMPILE__)
#if defined(__GFX9__) || defined(__GFX8__) || defined(__GFX7__) || defined(__GFX6__)
#define PORTER_DEVICE_WARP_SIZE 64
#else
#define PORTER_DEVICE_WARP_SIZE 32
#endif
#else
// Host pass: device bodies are only checked, never run, so any value does; host functions get
// the runtime query (one host object serves wave32 and wave64 code objects).
#define PORTER_DEVICE_WARP_SIZE 64
#endif
// porter::warp_size(): a __device__ constexpr overload (arch value) and a __host__ overload
// (runtime query); clang picks by the caller's side.
#define PORTER_WARP_SIZE (::porter::warp_size())
#else
#define PORTER_WARP_SIZE_MAX 32
#define PORTER_DEVICE_WARP_SIZE 32
#define PORTER_WARP_SIZE 32
#endif

#if PORTER_HIP
typedef unsigned long long porter_lanemask_t;
#define PORTER_FULL_MASK (~0ull)
#else
typedef unsigned int porter_lanemask_t;
#define PORTER_FULL_MASK 0xffffffffu
#endif

#if PORTER_HIP && !defined(PORTER_HIP_SYNC_BUILTINS)
#if !defined(HIP_DISABLE_WARP_SYNC_BUILTINS) && defined(HIP_VERSION) && \
    (HIP_VERSION >= 60300000 || (HIP_VERSION >= 60200000 && defined(HIP_ENABLE_WARP_SYNC_BUILTINS)))
#define PORTER_HIP_SYNC_BUILTINS 1
#else
#define PORTER_HIP_SYNC_BUILTINS 0
#endif
#endif

// ---- host ----------------------------------------------------------------------------------------
namespace porter {
#if PORTER_HIP
// Warp size of a device (current device when device < 0), cached; 64 if the query fails.
inline int host_warp_size(int device = -1) {
  static int cache[64] = {0};
  if (device < 0 && hipGetDevice(&device) != hipSuccess) return 64;
  if (device >= 64) device = 63;
  if (cache[device] == 0) {
    int ws = 0;
    cache[device] = (hipDeviceGetAttribute(&ws, hipDeviceAttributeWarpSize, device) == hipSuccess && ws > 0) ? ws : 64;
  }
  return cache[device];
}
#if PORTER_HAS_DEVICE && !defined(PORTER_SINGLE_PASS)
__device__ constexpr int warp_size() { return PORTER_DEVICE_WARP_SIZE; }
__host__ inline int warp_size() { return host_warp_size(); }
#elif PORTER_HAS_DEVICE
// A compiler with one pass for host and device code (porter's CPU wavefront emulator defines
// PORTER_SINGLE_PASS) cannot overload on __host__/__device__: the device value.
constexpr int warp_size() { return PORTER_DEVICE_WARP_SIZE; }
#else
inline int warp_size() { return host_warp_size(); }
#endif
#else
inline int host_warp_size(int device = -1) { (void)device; return 32; }  // every NVIDIA GPU
#endif
}  // namespace porter

// Host dispatch for the physical strategy: runs the statements with constexpr int W bound to the
// device's warp size (32 or 64 on HIP, 32 on CUDA).
#if PORTER_HIP
#define PORTER_DISPATCH_WARP(ws, W, ...) \
  do { if ((ws) == 64) { constexpr int W = 64; __VA_ARGS__; } else { constexpr int W = 32; __VA_ARGS__; } } while (0)
#else
#define PORTER_DISPATCH_WARP(ws, W, ...) do { (void)(ws); constexpr int W = 32; __VA_ARGS__; } while (0)
#endif

// ---- device --------------------------------------------------------------------------------------
#if PORTER_HAS_DEVICE
#define PORTER_DEV __device__ __forceinline__

namespace porter_detail {
// Shuffles of class types (__half, at::Half, bfloat16, small structs) move their 16, 32 or 64 bits
// as an integer: a shuffle is a pure data move, so this is exactly what a type's own overload does.
// HIP has overloads for arithmetic types only; on CUDA a class type with conversions to several
// of them (at::Half -> float and __half) would be ambiguous.
template <typename T, bool Arith = std::is_arithmetic<T>::value, int Size = sizeof(T)> struct via {
  template <typename F> static PORTER_DEV T run(T v, F f) { return f(v); }
};
#define PORTER_VIA_BITS(SIZE, BITS, WIDE)                                           \
  template <typename T> struct via<T, false, SIZE> {                               \
    template <typename F> static PORTER_DEV T run(T v, F f) {                      \
      BITS b; __builtin_memcpy(&b, &v, SIZE);                                      \
      b = static_cast<BITS>(f(static_cast<WIDE>(b)));                              \
      T out; __builtin_memcpy(&out, &b, SIZE); return out;                         \
    }                                                                              \
  };
PORTER_VIA_BITS(2, unsigned short, int)
PORTER_VIA_BITS(4, unsigned int, unsigned int)
PORTER_VIA_BITS(8, unsigned long long, unsigned long long)
#undef PORTER_VIA_BITS

}  // namespace porter_detail

#if !PORTER_HIP
// CUDA: every helper is the *_sync intrinsic with the full 32-bit mask (or the caller's mask).
namespace porter_detail {
struct cop_idx { unsigned int k; int s, w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl_sync(k, x, s, w); } };
struct cop_up { unsigned int k, d; int w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl_up_sync(k, x, d, w); } };
struct cop_down { unsigned int k, d; int w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl_down_sync(k, x, d, w); } };
struct cop_xor { unsigned int k; int m, w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl_xor_sync(k, x, m, w); } };
}  // namespace porter_detail
template <typename T> PORTER_DEV T porter_shfl(T v, int src, int width = PORTER_LOGICAL_WARP) {
  porter_detail::cop_idx f = {0xffffffffu, src, width}; return porter_detail::via<T>::run(v, f);
}
template <typename T> PORTER_DEV T porter_shfl_up(T v, unsigned int d, int width = PORTER_LOGICAL_WARP) {
  porter_detail::cop_up f = {0xffffffffu, d, width}; return porter_detail::via<T>::run(v, f);
}
template <typename T> PORTER_DEV T porter_shfl_down(T v, unsigned int d, int width = PORTER_LOGICAL_WARP) {
  porter_detail::cop_down f = {0xffffffffu, d, width}; return porter_detail::via<T>::run(v, f);
}
template <typename T> PORTER_DEV T porter_shfl_xor(T v, int m, int width = PORTER_LOGICAL_WARP) {
  porter_detail::cop_xor f = {0xffffffffu, m, width}; return porter_detail::via<T>::run(v, f);
}
template <typename M, typename T> PORTER_DEV T porter_shfl_sync(M mask, T v, int src, int width = PORTER_LOGICAL_WARP) {
  porter_detail::cop_idx f = {static_cast<unsigned int>(mask), src, width}; return porter_detail::via<T>::run(v, f);
}
template <typename M, typename T> PORTER_DEV T porter_shfl_up_sync(M mask, T v, unsigned int d, int width = PORTER_LOGICAL_WARP) {
  porter_detail::cop_up f = {static_cast<unsigned int>(mask), d, width}; return porter_detail::via<T>::run(v, f);
}
template <typename M, typename T> PORTER_DEV T porter_shfl_down_sync(M mask, T v, unsigned int d, int width = PORTER_LOGICAL_WARP) {
  porter_detail::cop_down f = {static_cast<unsigned int>(mask), d, width}; return porter_detail::via<T>::run(v, f);
}
template <typename M, typename T> PORTER_DEV T porter_shfl_xor_sync(M mask, T v, int m, int width = PORTER_LOGICAL_WARP) {
  porter_detail::cop_xor f = {static_cast<unsigned int>(mask), m, width}; return porter_detail::via<T>::run(v, f);
}
PORTER_DEV unsigned int porter_ballot32(int p) { return __ballot_sync(0xffffffffu, p); }
template <typename M> PORTER_DEV unsigned int porter_ballot32_sync(M mask, int p) {
  return __ballot_sync(static_cast<unsigned int>(mask), p);
}
PORTER_DEV unsigned int porter_activemask32() { return __activemask(); }
PORTER_DEV bool porter_any32(int p) { return __any_sync(0xffffffffu, p) != 0; }
PORTER_DEV bool porter_all32(int p) { return __all_sync(0xffffffffu, p) != 0; }
template <typename M> PORTER_DEV bool porter_any32_sync(M mask, int p) { return __any_sync(static_cast<unsigned int>(mask), p) != 0; }
template <typename M> PORTER_DEV bool porter_all32_sync(M mask, int p) { return __all_sync(static_cast<unsigned int>(mask), p) != 0; }
PORTER_DEV porter_lanemask_t porter_ballot(int p) { return __ballot_sync(0xffffffffu, p); }
PORTER_DEV porter_lanemask_t porter_activemask() { return __activemask(); }
PORTER_DEV bool porter_any(int p) { return __any_sync(0xffffffffu, p) != 0; }
PORTER_DEV bool porter_all(int p) { return __all_sync(0xffffffffu, p) != 0; }
template <typename M = unsigned int> PORTER_DEV void porter_syncwarp(M mask = 0xffffffffu) {
  __syncwarp(static_cast<unsigned int>(mask));
}
#else  // PORTER_HIP
namespace porter_detail {
// One functor per shuffle (C++11: no generic lambdas in older hipcc defaults).
struct op_idx { int s, w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl(x, s, w); } };
struct op_up { unsigned int d; int w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl_up(x, d, w); } };
struct op_down { unsigned int d; int w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl_down(x, d, w); } };
struct op_xor { int m, w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl_xor(x, m, w); } };

// Maskless family: lockstep wavefronts need no mask; the width keeps logical warps apart.
template <bool UseSync> struct shfl_ops {
  template <typename M, typename T> static PORTER_DEV T idx(M, T v, int s, int w) { op_idx f = {s, w}; return via<T>::run(v, f); }
  template <typename M, typename T> static PORTER_DEV T up(M, T v, unsigned int d, int w) { op_up f = {d, w}; return via<T>::run(v, f); }
  template <typename M, typename T> static PORTER_DEV T down(M, T v, unsigned int d, int w) { op_down f = {d, w}; return via<T>::run(v, f); }
  template <typename M, typename T> static PORTER_DEV T xr(M, T v, int m, int w) { op_xor f = {m, w}; return via<T>::run(v, f); }
};
#if PORTER_HIP_SYNC_BUILTINS
// ROCm >= 6.3: the *_sync builtins, given the 64-bit wavefront mask they require.
struct sop_idx { unsigned long long k; int s, w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl_sync(k, x, s, w); } };
struct sop_up { unsigned long long k; unsigned int d; int w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl_up_sync(k, x, d, w); } };
struct sop_down { unsigned long long k; unsigned int d; int w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl_down_sync(k, x, d, w); } };
struct sop_xor { unsigned long long k; int m, w; template <typename X> PORTER_DEV X operator()(X x) const { return __shfl_xor_sync(k, x, m, w); } };
template <> struct shfl_ops<true> {
  template <typename M, typename T> static PORTER_DEV T idx(M m, T v, int s, int w) {
    sop_idx f = {static_cast<unsigned long long>(m), s, w}; return via<T>::run(v, f);
  }
  template <typename M, typename T> static PORTER_DEV T up(M m, T v, unsigned int d, int w) {
    sop_up f = {static_cast<unsigned long long>(m), d, w}; return via<T>::run(v, f);
  }
  template <typename M, typename T> static PORTER_DEV T down(M m, T v, unsigned int d, int w) {
    sop_down f = {static_cast<unsigned long long>(m), d, w}; return via<T>::run(v, f);
  }
  template <typename M, typename T> static PORTER_DEV T xr(M m, T v, int lm, int w) {
    sop_xor f = {static_cast<unsigned long long>(m), lm, w}; return via<T>::run(v, f);
  }
};
#endif
template <typename M> struct use_sync { static const bool value = PORTER_HIP_SYNC_BUILTINS && sizeof(M) == 8; };
// First lane of the caller's logical 32-lane half of the wavefront (0 on wave32).
PORTER_DEV unsigned int half_base() { return __lane_id() & 32u; }
}  // namespace porter_detail

template <typename T> PORTER_DEV T porter_shfl(T v, int src, int width = PORTER_LOGICAL_WARP) {
  return porter_detail::shfl_ops<false>::idx(0, v, src, width);
}
template <typename T> PORTER_DEV T porter_shfl_up(T v, unsigned int d, int width = PORTER_LOGICAL_WARP) {
  return porter_detail::shfl_ops<false>::up(0, v, d, width);
}
template <typename T> PORTER_DEV T porter_shfl_down(T v, unsigned int d, int width = PORTER_LOGICAL_WARP) {
  return porter_detail::shfl_ops<false>::down(0, v, d, width);
}
template <typename T> PORTER_DEV T porter_shfl_xor(T v, int m, int width = PORTER_LOGICAL_WARP) {
  return porter_detail::shfl_ops<false>::xr(0, v, m, width);
}
template <typename M, typename T> PORTER_DEV T porter_shfl_sync(M mask, T v, int src, int width = PORTER_LOGICAL_WARP) {
  return porter_detail::shfl_ops<porter_detail::use_sync<M>::value>::idx(mask, v, src, width);
}
template <typename M, typename T> PORTER_DEV T porter_shfl_up_sync(M mask, T v, unsigned int d, int width = PORTER_LOGICAL_WARP) {
  return porter_detail::shfl_ops<porter_detail::use_sync<M>::value>::up(mask, v, d, width);
}
template <typename M, typename T> PORTER_DEV T porter_shfl_down_sync(M mask, T v, unsigned int d, int width = PORTER_LOGICAL_WARP) {
  return porter_detail::shfl_ops<porter_detail::use_sync<M>::value>::down(mask, v, d, width);
}
template <typename M, typename T> PORTER_DEV T porter_shfl_xor_sync(M mask, T v, int m, int width = PORTER_LOGICAL_WARP) {
  return porter_detail::shfl_ops<porter_detail::use_sync<M>::value>::xr(mask, v, m, width);
}
// Logical 32-lane votes: the caller's half of the 64-bit wavefront ballot.
PORTER_DEV unsigned int porter_ballot32(int p) {
  return static_cast<unsigned int>(__ballot(p) >> porter_detail::half_base());
}
PORTER_DEV unsigned int porter_activemask32() {
  return static_cast<unsigned int>(__ballot(1) >> porter_detail::half_base());
}
template <typename M> PORTER_DEV unsigned int porter_ballot32_sync(M mask, int p) {
  return porter_ballot32(p) & static_cast<unsigned int>(mask);
}
PORTER_DEV bool porter_any32(int p) { return porter_ballot32(p) != 0u; }
PORTER_DEV bool porter_all32(int p) { return porter_ballot32(p) == porter_activemask32(); }
template <typename M> PORTER_DEV bool porter_any32_sync(M mask, int p) { return porter_ballot32_sync(mask, p) != 0u; }
template <typename M> PORTER_DEV bool porter_all32_sync(M mask, int p) {
  return porter_ballot32_sync(mask, p) == (porter_activemask32() & static_cast<unsigned int>(mask));
}
// Physical votes: the whole wavefront, 64-bit.
PORTER_DEV porter_lanemask_t porter_ballot(int p) { return __ballot(p); }
PORTER_DEV porter_lanemask_t porter_activemask() { return __ballot(1); }
PORTER_DEV bool porter_any(int p) { return __ballot(p) != 0ull; }
PORTER_DEV bool porter_all(int p) { return __ballot(p) == __ballot(1); }
template <typename M = porter_lanemask_t> PORTER_DEV void porter_syncwarp(M mask = PORTER_FULL_MASK) {
  (void)mask;
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
#endif  // PORTER_HIP

// Bit helpers that follow the mask's width (32-bit logical masks, 64-bit wavefront masks).
PORTER_DEV int porter_popc(unsigned int x) { return __popc(x); }
PORTER_DEV int porter_popc(unsigned long long x) { return __popcll(x); }
PORTER_DEV int porter_ffs(unsigned int x) { return __ffs(static_cast<int>(x)); }
PORTER_DEV int porter_ffs(unsigned long long x) { return __ffsll(static_cast<long long>(x)); }
PORTER_DEV int porter_clz(unsigned int x) { return __clz(static_cast<int>(x)); }
PORTER_DEV int porter_clz(unsigned long long x) { return __clzll(static_cast<long long>(x)); }

// Lane and warp ids from the linear thread id (never the raw hardware lane, 0..63 on wave64).
PORTER_DEV unsigned int porter_linear_tid() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
template <int W = PORTER_LOGICAL_WARP> PORTER_DEV unsigned int porter_lane_id() { return porter_linear_tid() & (W - 1); }
template <int W = PORTER_LOGICAL_WARP> PORTER_DEV unsigned int porter_warp_id() { return porter_linear_tid() / W; }
template <int W = PORTER_LOGICAL_WARP> PORTER_DEV porter_lanemask_t porter_lanemask_lt() {
  return (static_cast<porter_lanemask_t>(1) << porter_lane_id<W>()) - 1;
}
#endif  // PORTER_HAS_DEVICE

#endif  // PORTER_WARP_H_
