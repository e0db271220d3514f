#include EMU_KERNEL
int main(int argc, char** argv) {
  static float noise[128], out[128];
  static int cols[128];
  emu::fill_random(noise, 128, emu::seed_from_args(argc, argv));
  for (int i = 0; i < 128; ++i) cols[i] = i / 32 * 100 + (int)(fabsf(noise[i]) * 50.f);
  row_gather<<<1, 128>>>(cols, out);
  emu::print("out", out, 128);
}
