#include EMU_KERNEL
int main(int argc, char** argv) {
  static float in[512], sums[4], ssums[4];
  static int positives[4], spositives[4];
  emu::fill_random(in, 512, emu::seed_from_args(argc, argv));
  block_stats<<<4, 128>>>(in, sums, positives);
  block_stats_shared<<<4, 128>>>(in, ssums, spositives);
  emu::print("sums", sums, 4);
  emu::print("positives", positives, 4);
  emu::print("shared_sums", ssums, 4);
  emu::print("shared_positives", spositives, 4);
}
