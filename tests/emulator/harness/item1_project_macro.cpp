#ifdef __HIP_PLATFORM_AMD__
#define MMCV_WITH_HIP 1  // what the project's build passes on ROCm
#endif
#include EMU_KERNEL
int main(int argc, char** argv) {
  static float ones[64], first[1];
  for (int i = 0; i < 64; ++i) ones[i] = (float)(i + 1);
  first_warp_sum<<<1, 64>>>(ones, first);
  emu::print("wave_first_warp_sum", first, 1);
  static float in[512], out[4];
  emu::fill_random(in, 512, emu::seed_from_args(argc, argv));
  block_sum<<<4, 128>>>(in, out);
  emu::print("block_sum", out, 4);
}
