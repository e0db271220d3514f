// The row length is the warp size, so compare the maxima of whole blocks (warp-size independent).
#include EMU_KERNEL
int main(int argc, char** argv) {
  static float in[512], rows[16], blocks[4];
  emu::fill_random(in, 512, emu::seed_from_args(argc, argv));
  for (int i = 0; i < 16; ++i) rows[i] = -1e30f;
  row_max<<<4, 128>>>(in, rows);
  const int per_block = 128 / (EMU_HIP && EMU_WAVE == 64 ? 64 : 32);
  for (int b = 0; b < 4; ++b) {
    blocks[b] = -1e30f;
    for (int r = 0; r < per_block; ++r) blocks[b] = fmaxf(blocks[b], rows[b * per_block + r]);
  }
  emu::print("block_max", blocks, 4);
}
