#include EMU_KERNEL
int main(int argc, char** argv) {
  (void)argc; (void)argv;
  static int sh[15 * 64];
  shuffles<<<1, 64>>>(sh);
  emu::print("shuffles", sh, 15 * 64);
  static unsigned long long vo[12 * 64];
  votes<<<1, 64>>>(vo);
  emu::print("votes", vo, 12 * 64);
  static float in[128], out[128];
  static int counters[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 128; ++i) in[i] = (float)i;
  memory<<<dim3(2, 1), 64, 64 * sizeof(float)>>>(in, out, counters);
  emu::print("memory", out, 128);
  emu::print("counters", counters, 8);
  return 0;
}
