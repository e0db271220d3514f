// wave_emu.h -- run CUDA/HIP warp-level kernel code on the host CPU with a 32- or 64-lane wavefront.
//
// Force-included (g++ -include wave_emu.h) before a kernel source. Every GPU thread of a block is a
// fiber (ucontext); blocks run one after another. Cross-lane operations (shuffles, votes, ballots,
// __syncwarp, wave barriers) meet at a per-wavefront rendezvous: a lane deposits its operands and
// yields; once no lane of its wavefront can run any further, the operation is resolved for the lanes
// that arrived, checked against the rules of the emulated API, and the lanes resume. __syncthreads is
// a block barrier. __shared__ is `static`: blocks run one at a time, so every fiber of the running
// block sees one copy; its bytes are poisoned before each block.
//
// Modes (preprocessor):
//   EMU_HIP=0 (default)  CUDA: wave 32, *_sync intrinsics with 32-bit masks (plus the pre-Volta
//                        maskless family), default width 32, 32-bit ballots.
//   EMU_HIP=1            HIP: EMU_WAVE lanes (64 = CDNA, 32 = RDNA), maskless __shfl* family with
//                        default width = warpSize, 64-bit ballots/activemask, __lane_id, __lanemask_*.
//     EMU_HIP_SYNC=1     (default) ROCm >= 6.3 *_sync builtins: the mask must be a 64-bit integer
//                        (static_assert) and equal the ballot of the executing lanes (checked at run
//                        time, as HIP's __hip_assert does).
//     EMU_HIP_SYNC=0     HIP without *_sync builtins (ROCm <= 6.1): using them does not compile.
//     EMU_HIP_SYNC=2     a mask-dropping compatibility shim: *_sync accept any mask and ignore it.
//   EMU_NO_WAVEFRONT_MACRO  do not define the deprecated __AMDGCN_WAVEFRONT_SIZE(__) (recent LLVM).
//   EMU_TIMEOUT=<s>      watchdog (default 20 s): a lane that never yields (spin loop) ends the run.
//
// Errors (undefined behaviour the emulator detects) print "EMU-ERROR: <kind>: ..." on stderr and
// exit with status 86: a collective whose mask names lanes that exited or wait elsewhere (CUDA would
// hang or be undefined), a shuffle reading an inactive lane, HIP's mask check, a bad width.
//
// Divergence: lanes of a wavefront waiting at different collectives are resolved call site by call site,
// the one written first in the file first (structured reconvergence); sites in different files are
// resolved together.
//
// Not modelled: the memory model beyond "lanes run one at a time between collectives" (implicit
// warp-synchronous code, e.g. volatile shared-memory trees, is NOT lockstep here), streams, cooperative
// launch (groups: only this_thread_block and tiled_partition), cub/hipcub, texture and half types, PTX.
#ifndef WAVE_EMU_H_
#define WAVE_EMU_H_

// System headers first: some check __CUDACC__ / __HIP__, which are defined below.
#include <float.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef EMU_HIP
#define EMU_HIP 0
#endif
#ifndef EMU_WAVE
#define EMU_WAVE (EMU_HIP ? 64 : 32)
#endif
#ifndef EMU_HIP_SYNC
#define EMU_HIP_SYNC 1
#endif
#ifndef EMU_TIMEOUT
#define EMU_TIMEOUT 20
#endif
#ifndef EMU_STACK
#define EMU_STACK (256 * 1024)
#endif
#if !EMU_HIP && EMU_WAVE != 32
#error "CUDA mode emulates 32-lane warps only"
#endif
#if EMU_WAVE != 32 && EMU_WAVE != 64
#error "EMU_WAVE must be 32 or 64"
#endif

// ---- platform macros a real compiler would define -------------------------------------------------
#if EMU_HIP
#define __HIP_PLATFORM_AMD__ 1
#define __HIPCC__ 1
#define __HIP__ 1
#define __HIP_DEVICE_COMPILE__ 1
#if EMU_WAVE == 64
#define __GFX9__ 1
#define __gfx90a__ 1
#else
#define __GFX11__ 1
#define __gfx1100__ 1
#endif
#if EMU_HIP_SYNC == 1
#define HIP_VERSION 60300000
#else
#define HIP_VERSION 60100000
#endif
#define HIP_VERSION_MAJOR (HIP_VERSION / 10000000)
#define HIP_VERSION_MINOR (HIP_VERSION / 100000 % 100)
#define USE_ROCM 1
#ifndef EMU_NO_WAVEFRONT_MACRO  // deprecated, removed from recent LLVM; still in ROCm 6.3's clang
#define __AMDGCN_WAVEFRONT_SIZE EMU_WAVE
#define __AMDGCN_WAVEFRONT_SIZE__ EMU_WAVE
#endif
#else
#define __CUDACC__ 1
#define __NVCC__ 1
#define __CUDA_ARCH__ 800
#define CUDART_VERSION 12040
#endif
// porter_warp.h: one compiler pass serves host and device code here (no __host__/__device__ overloads)
#define PORTER_SINGLE_PASS 1

#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
// __shared__ variables are statics in one ELF section, poisoned (0xff bytes: NaN / -1) before every block:
// CUDA leaves shared memory uninitialised, so a kernel that reads a slot nobody wrote shows it.
#define __shared__ static __attribute__((section("emu_shared")))
extern "C" char __start_emu_shared[] __attribute__((weak));
extern "C" char __stop_emu_shared[] __attribute__((weak));

// the call site of an intrinsic, for the order in which divergent lanes' collectives are resolved
#define EMU_SITE const char *emu_file_ = __builtin_FILE(), int emu_line_ = __builtin_LINE()

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

namespace emu {

[[noreturn]] inline void fail(const char* kind, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
inline void fail(const char* kind, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "EMU-ERROR: %s: ", kind);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stdout);
  fflush(stderr);
  _exit(86);
}

typedef unsigned long long bits_t;
constexpr int W = EMU_WAVE;

enum Op { OP_NONE, OP_SHFL, OP_SHFL_UP, OP_SHFL_DOWN, OP_SHFL_XOR, OP_BALLOT, OP_ANY, OP_ALL, OP_ACTIVEMASK,
          OP_SYNCWARP, OP_WAVE_BARRIER };
inline const char* op_name(int op) {
  static const char* names[] = {"?", "shfl", "shfl_up", "shfl_down", "shfl_xor", "ballot", "any", "all",
                                "activemask", "syncwarp", "wave_barrier"};
  return names[op];
}
// how a collective treats its mask
enum MaskKind { MASK_NONE, MASK_CUDA, MASK_HIP_CHECKED };
enum State { RUNNABLE, AT_WARP, AT_BLOCK, DONE };
inline const char* state_name(int s) {
  static const char* names[] = {"running", "at a warp collective", "at __syncthreads", "exited"};
  return names[s];
}

struct Thread {
  ucontext_t ctx;
  void* stack;
  uint3 tid;
  unsigned linear;
  State st;
  // the collective this lane waits at
  int op;
  int mask_kind;
  bits_t mask;
  int width;
  long long arg;
  int pred;
  unsigned char val[32];
  unsigned size;
  const char* name;
  const char* file;  // call site of the intrinsic (nullptr: unknown)
  int line;
  // its result
  unsigned char res[32];
  bits_t res_bits;
};

struct Block {
  Thread* threads = nullptr;
  unsigned n = 0, cap = 0;
  ucontext_t sched;
  Thread* cur = nullptr;
  void (*body)(void*) = nullptr;
  void* payload = nullptr;
  unsigned char* dyn_shared = nullptr;
  size_t dyn_bytes = 0;
};

inline Block& blk() {
  static Block b;
  return b;
}
inline dim3& grid_dim() {
  static dim3 d;
  return d;
}
inline dim3& block_dim() {
  static dim3 d;
  return d;
}
inline uint3& block_idx() {
  static uint3 d;
  return d;
}

inline Thread& me() {
  Thread* t = blk().cur;
  if (t == nullptr) fail("usage", "a device intrinsic was called outside a kernel launch");
  return *t;
}

inline void yield_to_scheduler(State s) {
  Thread& t = me();
  t.st = s;
  __asm__ __volatile__("" ::: "memory");
  swapcontext(&t.ctx, &blk().sched);
  __asm__ __volatile__("" ::: "memory");
}

inline void trampoline() {
  Block& b = blk();
  b.body(b.payload);
  b.cur->st = DONE;
  swapcontext(&b.cur->ctx, &b.sched);
}

inline void watchdog(int) {
  static const char msg[] = "EMU-ERROR: watchdog: the kernel ran past EMU_TIMEOUT (a lane that never yields?)\n";
  ssize_t r = write(2, msg, sizeof msg - 1);
  (void)r;
  _exit(87);
}

inline bits_t lane_bit(unsigned lane) { return 1ull << lane; }

inline void describe_lanes(char* buf, size_t cap, unsigned base, unsigned cnt, bits_t which) {
  size_t o = 0;
  buf[0] = 0;
  for (unsigned l = 0; l < cnt && o + 48 < cap; ++l) {
    if (!(which & lane_bit(l))) continue;
    Thread& t = blk().threads[base + l];
    o += snprintf(buf + o, cap - o, " lane %u (%s%s%s)", l, state_name(t.st), t.st == AT_WARP ? ": " : "",
                  t.st == AT_WARP ? op_name(t.op) : "");
  }
}

// Resolve every collective the lanes of wavefront `wv` wait at (no lane of it can run).
inline void resolve_wave(unsigned wv) {
  Block& b = blk();
  const unsigned base = wv * W;
  const unsigned cnt = (b.n - base < (unsigned)W) ? b.n - base : (unsigned)W;
  bits_t pending = 0;
  for (unsigned l = 0; l < cnt; ++l)
    if (b.threads[base + l].st == AT_WARP) pending |= lane_bit(l);
  // groups: lanes at the same kind of collective with the same width and mask (call sites may differ,
  // as CUDA >= 9 allows)
  bits_t groups[64];
  int lines[64];
  int ng = 0;
  bool same_file = true;
  const char* file0 = nullptr;
  while (pending) {
    unsigned first = __builtin_ctzll(pending);
    Thread& f = b.threads[base + first];
    bits_t group = 0;
    int line = INT_MAX;
    for (unsigned l = first; l < cnt; ++l) {
      Thread& t = b.threads[base + l];
      if ((pending & lane_bit(l)) && t.op == f.op && t.width == f.width && t.mask == f.mask &&
          t.mask_kind == f.mask_kind && t.size == f.size) {
        group |= lane_bit(l);
        if (t.file == nullptr || (file0 != nullptr && strcmp(t.file, file0) != 0)) same_file = false;
        if (t.file != nullptr && file0 == nullptr) file0 = t.file;
        if (t.line < line) line = t.line;
      }
    }
    pending &= ~group;
    groups[ng] = group;
    lines[ng] = line;
    ++ng;
  }
  // Lanes of one wavefront waiting at different collectives diverged. Structured code reconverges after
  // the branch, so the collective written first (the branch body) goes first and the others wait, when
  // all call sites are in one file; otherwise every group is resolved now.
  int min_line = INT_MAX;
  for (int g = 0; g < ng; ++g) min_line = lines[g] < min_line ? lines[g] : min_line;
  for (int gi = 0; gi < ng; ++gi) {
    if (ng > 1 && same_file && lines[gi] != min_line) continue;
    const bits_t group = groups[gi];
    Thread& f = b.threads[base + __builtin_ctzll(group)];
    char who[2048];
    // mask rules
    if (f.mask_kind == MASK_CUDA) {
      bits_t need = f.mask & ((cnt == 64) ? ~0ull : ((1ull << cnt) - 1));
      if ((group & ~f.mask) != 0) {
        describe_lanes(who, sizeof who, base, cnt, group & ~f.mask);
        fail("divergence", "%s in wave %u of block (%u,%u,%u): calling lanes are not in the mask 0x%llx:%s",
             f.name, wv, block_idx().x, block_idx().y, block_idx().z, f.mask, who);
      }
      if ((need & ~group) != 0) {
        describe_lanes(who, sizeof who, base, cnt, need & ~group);
        fail("deadlock", "%s with mask 0x%llx in wave %u of block (%u,%u,%u): lanes named in the mask never "
             "arrive:%s", f.name, f.mask, wv, block_idx().x, block_idx().y, block_idx().z, who);
      }
    } else if (f.mask_kind == MASK_HIP_CHECKED) {
      bits_t m = (W == 32) ? (f.mask & 0xffffffffull) : f.mask;
      if (m != group) {
        fail("hip-mask-check", "%s: mask 0x%llx is not the ballot of the executing lanes 0x%llx (wave %u of block "
             "(%u,%u,%u)); HIP's *_sync builtins assert this", f.name, f.mask, group, wv, block_idx().x,
             block_idx().y, block_idx().z);
      }
    }
    const int op = f.op;
    if (op == OP_SHFL || op == OP_SHFL_UP || op == OP_SHFL_DOWN || op == OP_SHFL_XOR) {
      const int w = f.width;
      if (w <= 0 || w > W || (w & (w - 1)) != 0)
        fail("width", "%s with width %d (must be a power of two <= %d)", f.name, w, W);
      for (unsigned l = 0; l < cnt; ++l) {
        if (!(group & lane_bit(l))) continue;
        Thread& t = b.threads[base + l];
        long long self = l, idx;
        switch (op) {
          case OP_SHFL: idx = ((long long)(t.arg & (w - 1))) + (self & ~(long long)(w - 1)); break;
          case OP_SHFL_UP: {
            idx = self - (long long)(unsigned)t.arg;
            if (idx < (self & ~(long long)(w - 1))) idx = self;
            break;
          }
          case OP_SHFL_DOWN: {
            idx = ((self & (w - 1)) + (long long)(unsigned)t.arg >= w) ? self : self + (long long)(unsigned)t.arg;
            break;
          }
          default: {
            idx = self ^ (long long)(int)t.arg;
            if (idx >= ((self + w) & ~(long long)(w - 1))) idx = self;
            break;
          }
        }
        if (idx < 0 || idx >= W) idx = self;
        if (idx != self && !(group & lane_bit((unsigned)idx))) {
          const char* why = (unsigned)idx >= cnt ? "does not exist (block smaller than the wavefront)"
                                                 : state_name(b.threads[base + idx].st);
          fail("inactive-lane", "%s in wave %u of block (%u,%u,%u): lane %lld reads lane %lld, which %s%s", f.name,
               wv, block_idx().x, block_idx().y, block_idx().z, self, idx,
               (unsigned)idx >= cnt ? "" : "is ", why);
        }
        memcpy(t.res, b.threads[base + idx].val, t.size);
      }
    } else {
      bits_t ballot = 0;
      for (unsigned l = 0; l < cnt; ++l)
        if ((group & lane_bit(l)) && b.threads[base + l].pred) ballot |= lane_bit(l);
      if (f.mask_kind == MASK_CUDA) ballot &= f.mask;
      bits_t members = (f.mask_kind == MASK_CUDA) ? (group & f.mask) : group;
      for (unsigned l = 0; l < cnt; ++l) {
        if (!(group & lane_bit(l))) continue;
        Thread& t = b.threads[base + l];
        switch (op) {
          case OP_BALLOT: t.res_bits = ballot; break;
          case OP_ANY: t.res_bits = ballot != 0; break;
          case OP_ALL: t.res_bits = ballot == members; break;
          case OP_ACTIVEMASK: t.res_bits = group; break;
          default: t.res_bits = 0; break;
        }
      }
    }
    for (unsigned l = 0; l < cnt; ++l)
      if (group & lane_bit(l)) b.threads[base + l].st = RUNNABLE;
  }
}

inline void run_block(unsigned nthreads) {
  Block& b = blk();
  if (nthreads > b.cap) {
    Thread* nt = static_cast<Thread*>(calloc(nthreads, sizeof(Thread)));
    for (unsigned i = 0; i < b.cap; ++i) nt[i].stack = b.threads[i].stack;
    for (unsigned i = b.cap; i < nthreads; ++i) {
      void* s = mmap(nullptr, EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (s == MAP_FAILED) fail("resources", "cannot map a fiber stack");
      nt[i].stack = s;
    }
    free(b.threads);
    b.threads = nt;
    b.cap = nthreads;
  }
  b.n = nthreads;
  if (__start_emu_shared != nullptr && __stop_emu_shared > __start_emu_shared)
    memset(__start_emu_shared, 0xff, static_cast<size_t>(__stop_emu_shared - __start_emu_shared));
  const dim3 bd = block_dim();
  for (unsigned i = 0; i < nthreads; ++i) {
    Thread& t = b.threads[i];
    void* stack = t.stack;
    memset(&t, 0, sizeof t);
    t.stack = stack;
    t.linear = i;
    t.tid.x = i % bd.x;
    t.tid.y = (i / bd.x) % bd.y;
    t.tid.z = i / (bd.x * bd.y);
    t.st = RUNNABLE;
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = t.stack;
    t.ctx.uc_stack.ss_size = EMU_STACK;
    t.ctx.uc_link = nullptr;
    makecontext(&t.ctx, trampoline, 0);
  }
  const unsigned waves = (nthreads + W - 1) / W;
  for (;;) {
    bool progress = false;
    for (unsigned i = 0; i < nthreads; ++i) {
      Thread& t = b.threads[i];
      if (t.st != RUNNABLE) continue;
      b.cur = &t;
      swapcontext(&b.sched, &t.ctx);
      b.cur = nullptr;
      progress = true;
    }
    bool live = false, warp_wait = false;
    for (unsigned i = 0; i < nthreads; ++i) {
      if (b.threads[i].st != DONE) live = true;
      if (b.threads[i].st == AT_WARP) warp_wait = true;
    }
    if (!live) return;
    if (warp_wait) {
      for (unsigned wv = 0; wv < waves; ++wv) resolve_wave(wv);
      continue;
    }
    // every live thread waits at __syncthreads: release the barrier
    for (unsigned i = 0; i < nthreads; ++i)
      if (b.threads[i].st == AT_BLOCK) {
        b.threads[i].st = RUNNABLE;
        progress = true;
      }
    if (!progress) fail("deadlock", "no thread of block (%u,%u,%u) can make progress", block_idx().x,
                        block_idx().y, block_idx().z);
  }
}

template <class F>
struct Payload {
  F fn;
  static void run(void* p) { static_cast<Payload*>(p)->fn(); }
};

template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem, A&&... args) {
  static bool armed = false;
  if (!armed) {
    signal(SIGALRM, watchdog);
    alarm(EMU_TIMEOUT);
    armed = true;
  }
  const unsigned nthreads = block.x * block.y * block.z;
  if (nthreads == 0 || nthreads > 1024) fail("launch", "block of %u threads", nthreads);
  std::tuple<typename std::decay<P>::type...> params(std::forward<A>(args)...);
  auto call = [&]() { std::apply(kernel, params); };
  Payload<decltype(call)> pl{call};
  Block& b = blk();
  b.body = &Payload<decltype(call)>::run;
  b.payload = &pl;
  unsigned char* dyn = nullptr;
  if (shmem) {
    dyn = static_cast<unsigned char*>(aligned_alloc(64, (shmem + 63) / 64 * 64));
    memset(dyn, 0xff, shmem);  // uninitialised shared memory reads as NaN / -1
  }
  b.dyn_shared = dyn;
  b.dyn_bytes = shmem;
  grid_dim() = grid;
  block_dim() = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        block_idx() = uint3{x, y, z};
        run_block(nthreads);
      }
  free(dyn);
  b.dyn_shared = nullptr;
}

// `k<<<g, b, s, st>>>(args)` is rewritten to `::emu::kernel_call(k, g, b, s, st)(args)`.
template <class... P>
struct KernelCall {
  void (*kernel)(P...);
  dim3 grid, block;
  size_t shmem;
  template <class... A>
  void operator()(A&&... a) const {
    launch(kernel, grid, block, shmem, std::forward<A>(a)...);
  }
};
template <class... P, class S = int>
KernelCall<P...> kernel_call(void (*k)(P...), dim3 g, dim3 b, size_t shmem = 0, S = S()) {
  return KernelCall<P...>{k, g, b, shmem};
}

inline void* dynamic_shared() { return blk().dyn_shared; }

// ---- the collective entry points -------------------------------------------------------------------
template <class T>
inline T shuffle(int op, const char* name, int mask_kind, bits_t mask, T v, long long arg, int width,
                 const char* file, int line) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 32, "shuffled type");
  Thread& t = me();
  t.op = op;
  t.name = name;
  t.mask_kind = mask_kind;
  t.mask = mask;
  t.width = width;
  t.arg = arg;
  t.size = sizeof(T);
  t.file = file;
  t.line = line;
  memcpy(t.val, &v, sizeof(T));
  yield_to_scheduler(AT_WARP);
  T r;
  memcpy(&r, t.res, sizeof(T));
  return r;
}
inline bits_t vote(int op, const char* name, int mask_kind, bits_t mask, int pred, const char* file = nullptr,
                   int line = 0) {
  Thread& t = me();
  t.op = op;
  t.name = name;
  t.mask_kind = mask_kind;
  t.mask = mask;
  t.width = W;
  t.pred = pred != 0;
  t.size = 0;
  t.file = file;
  t.line = line;
  yield_to_scheduler(AT_WARP);
  return t.res_bits;
}
inline void block_barrier() { yield_to_scheduler(AT_BLOCK); }
inline unsigned lane_id() { return me().linear % W; }

inline const uint3& thread_idx() { return me().tid; }

// ---- host helpers for test harnesses -----------------------------------------------------------------
// Deterministic inputs: multiples of 1/256 in [-4, 4), so float sums of a few thousand stay exact.
inline void fill_random(float* p, size_t n, unsigned seed) {
  unsigned s = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = static_cast<float>(static_cast<int>((s >> 9) & 2047u) - 1024) / 256.f;
  }
}
inline void fill_random(int* p, size_t n, unsigned seed, int lo, int hi) {
  unsigned s = seed * 2246822519u + 777u;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = lo + static_cast<int>((s >> 8) % static_cast<unsigned>(hi - lo + 1));
  }
}
inline void print(const char* name, const float* p, size_t n) {
  printf("%s %zu", name, n);
  for (size_t i = 0; i < n; ++i) printf(" %.9g", p[i]);
  printf("\n");
}
inline void print(const char* name, const double* p, size_t n) {
  printf("%s %zu", name, n);
  for (size_t i = 0; i < n; ++i) printf(" %.17g", p[i]);
  printf("\n");
}
template <class I>
inline typename std::enable_if<std::is_integral<I>::value>::type print(const char* name, const I* p, size_t n) {
  printf("%s %zu", name, n);
  for (size_t i = 0; i < n; ++i) {
    if (std::is_signed<I>::value)
      printf(" %lld", static_cast<long long>(p[i]));
    else
      printf(" %llu", static_cast<unsigned long long>(p[i]));
  }
  printf("\n");
}
inline unsigned seed_from_args(int argc, char** argv) { return argc > 1 ? static_cast<unsigned>(atoi(argv[1])) : 1u; }

}  // namespace emu

// ---- CUDA/HIP built-in variables ---------------------------------------------------------------------
#define threadIdx (::emu::thread_idx())
#define blockIdx (static_cast<const uint3&>(::emu::block_idx()))
#define blockDim (static_cast<const dim3&>(::emu::block_dim()))
#define gridDim (static_cast<const dim3&>(::emu::grid_dim()))
// Not a constant expression (as on CUDA and ROCm >= 7); a local named warpSize shadows it.
inline int warpSize = EMU_WAVE;

inline void __syncthreads() { ::emu::block_barrier(); }
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}

// ---- bit helpers ---------------------------------------------------------------------------------------
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline unsigned int __brev(unsigned int x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned long long __brevll(unsigned long long x) {
  unsigned long long r = 0;
  for (int i = 0; i < 64; ++i) r |= ((x >> i) & 1ull) << (63 - i);
  return r;
}
#if EMU_HIP
inline int __ffs(unsigned int x) { return __builtin_ffs(static_cast<int>(x)); }
inline int __ffsll(unsigned long long x) { return __builtin_ffsll(static_cast<long long>(x)); }
#endif

// ---- shuffles, votes ---------------------------------------------------------------------------------
// Maskless family: HIP's (width defaults to the wavefront) and pre-Volta CUDA's (width 32).
template <class T>
inline T __shfl(T v, int src, int width = warpSize, EMU_SITE) {
  return ::emu::shuffle(::emu::OP_SHFL, "__shfl", ::emu::MASK_NONE, 0, v, src, width, emu_file_, emu_line_);
}
template <class T>
inline T __shfl_up(T v, unsigned int d, int width = warpSize, EMU_SITE) {
  return ::emu::shuffle(::emu::OP_SHFL_UP, "__shfl_up", ::emu::MASK_NONE, 0, v, d, width, emu_file_, emu_line_);
}
template <class T>
inline T __shfl_down(T v, unsigned int d, int width = warpSize, EMU_SITE) {
  return ::emu::shuffle(::emu::OP_SHFL_DOWN, "__shfl_down", ::emu::MASK_NONE, 0, v, d, width, emu_file_, emu_line_);
}
template <class T>
inline T __shfl_xor(T v, int m, int width = warpSize, EMU_SITE) {
  return ::emu::shuffle(::emu::OP_SHFL_XOR, "__shfl_xor", ::emu::MASK_NONE, 0, v, m, width, emu_file_, emu_line_);
}
inline int __any(int p, EMU_SITE) { return static_cast<int>(::emu::vote(::emu::OP_ANY, "__any", ::emu::MASK_NONE, 0, p, emu_file_, emu_line_)); }
inline int __all(int p, EMU_SITE) { return static_cast<int>(::emu::vote(::emu::OP_ALL, "__all", ::emu::MASK_NONE, 0, p, emu_file_, emu_line_)); }

#if !EMU_HIP
// CUDA: 32-bit masks; every lane named in the mask must take part.
inline unsigned int __ballot(int p, EMU_SITE) {
  return static_cast<unsigned>(::emu::vote(::emu::OP_BALLOT, "__ballot", ::emu::MASK_NONE, 0, p, emu_file_, emu_line_));
}
template <class T>
inline T __shfl_sync(unsigned int mask, T v, int src, int width = warpSize, EMU_SITE) {
  return ::emu::shuffle(::emu::OP_SHFL, "__shfl_sync", ::emu::MASK_CUDA, mask, v, src, width, emu_file_, emu_line_);
}
template <class T>
inline T __shfl_up_sync(unsigned int mask, T v, unsigned int d, int width = warpSize, EMU_SITE) {
  return ::emu::shuffle(::emu::OP_SHFL_UP, "__shfl_up_sync", ::emu::MASK_CUDA, mask, v, d, width, emu_file_, emu_line_);
}
template <class T>
inline T __shfl_down_sync(unsigned int mask, T v, unsigned int d, int width = warpSize, EMU_SITE) {
  return ::emu::shuffle(::emu::OP_SHFL_DOWN, "__shfl_down_sync", ::emu::MASK_CUDA, mask, v, d, width, emu_file_, emu_line_);
}
template <class T>
inline T __shfl_xor_sync(unsigned int mask, T v, int m, int width = warpSize, EMU_SITE) {
  return ::emu::shuffle(::emu::OP_SHFL_XOR, "__shfl_xor_sync", ::emu::MASK_CUDA, mask, v, m, width, emu_file_, emu_line_);
}
inline unsigned int __ballot_sync(unsigned int mask, int p, EMU_SITE) {
  return static_cast<unsigned>(::emu::vote(::emu::OP_BALLOT, "__ballot_sync", ::emu::MASK_CUDA, mask, p, emu_file_, emu_line_));
}
inline int __any_sync(unsigned int mask, int p, EMU_SITE) {
  return static_cast<int>(::emu::vote(::emu::OP_ANY, "__any_sync", ::emu::MASK_CUDA, mask, p, emu_file_, emu_line_));
}
inline int __all_sync(unsigned int mask, int p, EMU_SITE) {
  return static_cast<int>(::emu::vote(::emu::OP_ALL, "__all_sync", ::emu::MASK_CUDA, mask, p, emu_file_, emu_line_));
}
inline unsigned int __activemask(EMU_SITE) {
  return static_cast<unsigned>(::emu::vote(::emu::OP_ACTIVEMASK, "__activemask", ::emu::MASK_NONE, 0, 1, emu_file_, emu_line_));
}
inline void __syncwarp(unsigned int mask = 0xffffffffu, EMU_SITE) {
  ::emu::vote(::emu::OP_SYNCWARP, "__syncwarp", ::emu::MASK_CUDA, mask, 1, emu_file_, emu_line_);
}
#else
// HIP: 64-bit ballots and lane masks; no __syncwarp.
inline unsigned long long __ballot(int p, EMU_SITE) { return ::emu::vote(::emu::OP_BALLOT, "__ballot", ::emu::MASK_NONE, 0, p, emu_file_, emu_line_); }
inline unsigned long long __activemask(EMU_SITE) {
  return ::emu::vote(::emu::OP_ACTIVEMASK, "__activemask", ::emu::MASK_NONE, 0, 1, emu_file_, emu_line_);
}
inline unsigned int __lane_id() { return ::emu::lane_id(); }
inline unsigned long long __lanemask_lt() { return (1ull << __lane_id()) - 1ull; }
inline unsigned long long __lanemask_gt() {
  unsigned l = __lane_id();
  return l >= 63 ? 0ull : (~0ull << (l + 1));
}
inline unsigned long long __lanemask_eq() { return 1ull << __lane_id(); }
#define __builtin_amdgcn_wave_barrier() \
  ((void)::emu::vote(::emu::OP_WAVE_BARRIER, "__builtin_amdgcn_wave_barrier", ::emu::MASK_NONE, 0, 1, nullptr, 0))
#define __builtin_amdgcn_fence(...) ((void)0)
#define __builtin_amdgcn_wavefrontsize() (EMU_WAVE)
#if EMU_HIP_SYNC == 1 || EMU_HIP_SYNC == 2
#if EMU_HIP_SYNC == 1
#define EMU_MASK64(M)                                                                        \
  static_assert(sizeof(M) == 8, "The mask must be a 64-bit integer. Implicitly promoting a " \
                                "smaller integer is almost always an error.")
#define EMU_MASK_KIND ::emu::MASK_HIP_CHECKED
#else
#define EMU_MASK64(M) static_assert(true, "")
#define EMU_MASK_KIND ::emu::MASK_NONE
#endif
template <class M, class T>
inline T __shfl_sync(M mask, T v, int src, int width = warpSize, EMU_SITE) {
  EMU_MASK64(M);
  return ::emu::shuffle(::emu::OP_SHFL, "__shfl_sync", EMU_MASK_KIND, (unsigned long long)mask, v, src, width, emu_file_, emu_line_);
}
template <class M, class T>
inline T __shfl_up_sync(M mask, T v, unsigned int d, int width = warpSize, EMU_SITE) {
  EMU_MASK64(M);
  return ::emu::shuffle(::emu::OP_SHFL_UP, "__shfl_up_sync", EMU_MASK_KIND, (unsigned long long)mask, v, d, width, emu_file_, emu_line_);
}
template <class M, class T>
inline T __shfl_down_sync(M mask, T v, unsigned int d, int width = warpSize, EMU_SITE) {
  EMU_MASK64(M);
  return ::emu::shuffle(::emu::OP_SHFL_DOWN, "__shfl_down_sync", EMU_MASK_KIND, (unsigned long long)mask, v, d,
                        width, emu_file_, emu_line_);
}
template <class M, class T>
inline T __shfl_xor_sync(M mask, T v, int m, int width = warpSize, EMU_SITE) {
  EMU_MASK64(M);
  return ::emu::shuffle(::emu::OP_SHFL_XOR, "__shfl_xor_sync", EMU_MASK_KIND, (unsigned long long)mask, v, m, width, emu_file_, emu_line_);
}
template <class M>
inline unsigned long long __ballot_sync(M mask, int p, EMU_SITE) {
  EMU_MASK64(M);
  return ::emu::vote(::emu::OP_BALLOT, "__ballot_sync", EMU_MASK_KIND, (unsigned long long)mask, p, emu_file_, emu_line_);
}
template <class M>
inline int __any_sync(M mask, int p, EMU_SITE) {
  EMU_MASK64(M);
  return static_cast<int>(::emu::vote(::emu::OP_ANY, "__any_sync", EMU_MASK_KIND, (unsigned long long)mask, p, emu_file_, emu_line_));
}
template <class M>
inline int __all_sync(M mask, int p, EMU_SITE) {
  EMU_MASK64(M);
  return static_cast<int>(::emu::vote(::emu::OP_ALL, "__all_sync", EMU_MASK_KIND, (unsigned long long)mask, p, emu_file_, emu_line_));
}
#endif
#endif

// ---- atomics (fibers of one OS thread: plain read-modify-write) ----------------------------------------
template <class T, class U>
inline T atomicAdd(T* p, U v) {
  T old = *p;
  *p = static_cast<T>(old + static_cast<T>(v));
  return old;
}
template <class T, class U>
inline T atomicSub(T* p, U v) {
  T old = *p;
  *p = static_cast<T>(old - static_cast<T>(v));
  return old;
}
template <class T, class U>
inline T atomicMax(T* p, U v) {
  T old = *p;
  if (static_cast<T>(v) > old) *p = static_cast<T>(v);
  return old;
}
template <class T, class U>
inline T atomicMin(T* p, U v) {
  T old = *p;
  if (static_cast<T>(v) < old) *p = static_cast<T>(v);
  return old;
}
template <class T, class U>
inline T atomicExch(T* p, U v) {
  T old = *p;
  *p = static_cast<T>(v);
  return old;
}
template <class T, class U, class V>
inline T atomicCAS(T* p, U cmp, V v) {
  T old = *p;
  if (old == static_cast<T>(cmp)) *p = static_cast<T>(v);
  return old;
}
template <class T, class U>
inline T atomicOr(T* p, U v) {
  T old = *p;
  *p = old | static_cast<T>(v);
  return old;
}
template <class T, class U>
inline T atomicAnd(T* p, U v) {
  T old = *p;
  *p = old & static_cast<T>(v);
  return old;
}
template <class T, class U>
inline T atomicXor(T* p, U v) {
  T old = *p;
  *p = old ^ static_cast<T>(v);
  return old;
}

// ---- device math that host libm lacks ------------------------------------------------------------------
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.f / a; }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
inline int __float_as_int(float f) {
  int i;
  memcpy(&i, &f, 4);
  return i;
}
inline unsigned int __float_as_uint(float f) {
  unsigned i;
  memcpy(&i, &f, 4);
  return i;
}
inline float __uint_as_float(unsigned i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
#define EMU_MINMAX(T)                             \
  inline T max(T a, T b) { return a > b ? a : b; } \
  inline T min(T a, T b) { return a < b ? a : b; }
EMU_MINMAX(int)
EMU_MINMAX(unsigned int)
EMU_MINMAX(long long)
EMU_MINMAX(unsigned long long)
EMU_MINMAX(float)
EMU_MINMAX(double)
#undef EMU_MINMAX

// ---- launch syntax -------------------------------------------------------------------------------------
#define hipLaunchKernelGGL(K, G, B, S, ST, ...) ::emu::kernel_call(K, G, B, S, ST)(__VA_ARGS__)

#include "emu_runtime.h"

#endif  // WAVE_EMU_H_
