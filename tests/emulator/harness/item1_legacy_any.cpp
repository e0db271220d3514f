#include EMU_KERNEL
int main(int argc, char** argv) {
  const unsigned seed = emu::seed_from_args(argc, argv);
  static float in[512];
  static int out[4];
  emu::fill_random(in, 512, seed);
  for (int i = 0; i < 512; ++i) in[i] = fabsf(in[i]) + 0.5f;
  // one negative value per block, at lanes 32..63 of a wavefront in blocks 0 and 2
  in[0 * 128 + 40] = -1.f;
  in[1 * 128 + 5] = -1.f;
  in[2 * 128 + 64 + 33 + seed % 30] = -1.f;
  any_negative<<<4, 128>>>(in, out);
  emu::print("any_negative", out, 4);
}
