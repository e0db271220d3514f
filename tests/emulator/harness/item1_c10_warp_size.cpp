#include EMU_KERNEL
int main(int argc, char** argv) {
  static float in[512], out[4];
  emu::fill_random(in, 512, emu::seed_from_args(argc, argv));
  block_sum<<<4, 128>>>(in, out);
  emu::print("block_sum", out, 4);
}
