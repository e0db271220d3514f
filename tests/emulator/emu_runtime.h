// Host runtime API stand-ins for wave_emu.h (CUDA and HIP spellings): memory is host memory, the
// "device" is the emulated one (warpSize = EMU_WAVE), launches are synchronous.
#ifndef WAVE_EMU_RUNTIME_H_
#define WAVE_EMU_RUNTIME_H_

typedef int cudaError_t;
typedef int hipError_t;
typedef void* cudaStream_t;
typedef void* hipStream_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, hipSuccess = 0, hipErrorInvalidValue = 1 };
enum emu_memcpy_kind {
  cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault,
  hipMemcpyHostToHost = 0, hipMemcpyHostToDevice, hipMemcpyDeviceToHost, hipMemcpyDeviceToDevice, hipMemcpyDefault
};
enum emu_device_attr { hipDeviceAttributeWarpSize = 1, cudaDevAttrWarpSize = 1 };

struct emu_device_prop {
  char name[256] = "wave_emu";
  int warpSize = EMU_WAVE;
  int multiProcessorCount = 4;
  int maxThreadsPerBlock = 1024;
  size_t sharedMemPerBlock = 65536;
  int major = EMU_HIP ? 9 : 8;
  int minor = 0;
};
typedef emu_device_prop cudaDeviceProp;
typedef emu_device_prop hipDeviceProp_t;

inline int emu_get_device(int* d) { *d = 0; return 0; }
inline int emu_device_attr(int* v, int attr, int) { *v = attr == hipDeviceAttributeWarpSize ? EMU_WAVE : 0; return 0; }
inline int emu_props(emu_device_prop* p, int) { *p = emu_device_prop(); return 0; }
inline int emu_malloc(void** p, size_t n) { *p = calloc(1, n ? n : 1); return *p ? 0 : 1; }
template <class T> inline int emu_malloc_t(T** p, size_t n) { return emu_malloc(reinterpret_cast<void**>(p), n); }
inline int emu_free(void* p) { free(p); return 0; }
inline int emu_memcpy(void* d, const void* s, size_t n, int = 0) { memmove(d, s, n); return 0; }
inline int emu_memset(void* d, int v, size_t n) { memset(d, v, n); return 0; }
inline int emu_ok() { return 0; }
inline const char* emu_error_string(int e) { return e ? "emulated error" : "no error"; }

#define cudaGetDevice emu_get_device
#define hipGetDevice emu_get_device
#define cudaDeviceGetAttribute emu_device_attr
#define hipDeviceGetAttribute emu_device_attr
#define cudaGetDeviceProperties emu_props
#define hipGetDeviceProperties emu_props
#define cudaMalloc emu_malloc_t
#define hipMalloc emu_malloc_t
#define cudaFree emu_free
#define hipFree emu_free
#define cudaMemcpy emu_memcpy
#define hipMemcpy emu_memcpy
#define cudaMemset emu_memset
#define hipMemset emu_memset
#define cudaDeviceSynchronize emu_ok
#define hipDeviceSynchronize emu_ok
#define cudaGetLastError emu_ok
#define hipGetLastError emu_ok
#define cudaPeekAtLastError emu_ok
#define hipPeekAtLastError emu_ok
#define cudaGetErrorString emu_error_string
#define hipGetErrorString emu_error_string

#endif  // WAVE_EMU_RUNTIME_H_
