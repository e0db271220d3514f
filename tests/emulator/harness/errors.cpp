#include EMU_KERNEL
int main() {
  static float x[64];
  for (int i = 0; i < 64; ++i) x[i] = (float)i;
  static int flag = 0;
#if EMU_CASE == 1
  divergent_sync<<<1, 64>>>(x);
#elif EMU_CASE == 2
  exited_lanes<<<1, 64>>>(x);
#elif EMU_CASE == 3
  hip_mask_check<<<1, 64>>>(x);
#elif EMU_CASE == 4
  spin<<<1, 64>>>(&flag);
#elif EMU_CASE == 5
  bad_width<<<1, 64>>>(x);
#endif
  emu::print("x", x, 64);
  return 0;
}
