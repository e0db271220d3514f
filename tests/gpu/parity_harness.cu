// Host harness for tests/gpu/run_warp_parity.py: runs every case of a test-kernel file on the
// same deterministic input and writes the outputs (binary: per case, int32 id + n floats).
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <vector>

extern "C" int porter_case_count();
extern "C" const char* porter_case_name(int c);
extern "C" void porter_case_run(int c, const float* in, float* out, int n);

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e_));        \
      return 2;                                                                    \
    }                                                                              \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.bin\n", argv[0]);
    return 2;
  }
  const int n = 128 * 64;  // 64 blocks of 128 threads
  std::vector<float> host(n), result(n);
  uint32_t s = 12345u;
  for (int i = 0; i < n; ++i) {  // multiples of 1/1024 in [-1, 1): sums stay exact in float
    s = s * 1664525u + 1013904223u;
    host[i] = static_cast<float>(static_cast<int>((s >> 9) & 2047u) - 1024) / 1024.f;
  }
  float *d_in = nullptr, *d_out = nullptr;
  CHECK(cudaMalloc(&d_in, n * sizeof(float)));
  CHECK(cudaMalloc(&d_out, n * sizeof(float)));
  CHECK(cudaMemcpy(d_in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  FILE* f = std::fopen(argv[1], "wb");
  if (!f) return 2;
  for (int c = 0; c < porter_case_count(); ++c) {
    CHECK(cudaMemset(d_out, 0, n * sizeof(float)));
    porter_case_run(c, d_in, d_out, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(result.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    int32_t id = c;
    std::fwrite(&id, sizeof(id), 1, f);
    std::fwrite(result.data(), sizeof(float), n, f);
    std::fprintf(stderr, "case %d %s done\n", c, porter_case_name(c));
  }
  std::fclose(f);
  return 0;
}
