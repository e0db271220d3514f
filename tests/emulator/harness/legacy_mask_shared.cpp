#include EMU_KERNEL
int main(int argc, char** argv) {
  static float in[128], out[4];
  emu::fill_random(in, 128, emu::seed_from_args(argc, argv));
  for (int i = 0; i < 128; ++i) in[i] = fabsf(in[i]);  // the unfixed call converts the value to an unsigned delta
  sums<<<1, 128>>>(in, out);
  emu::print("sums", out, 4);
  maxima<<<1, 128>>>(in, out);
  emu::print("maxima", out, 4);
}
