// examples/legacy-gpt/kernels/fused_softmax.cu through its host launchers
#include EMU_KERNEL
int main(int argc, char** argv) {
  const unsigned seed = emu::seed_from_args(argc, argv);
  const int rows = 10, cols = 80;
  static float x[rows * cols], y[rows * cols], yc[rows * cols], yd[rows * cols];
  emu::fill_random(x, rows * cols, seed);
  launch_scaled_softmax(x, y, rows, cols, 0.5f, 0.f, seed, false, 1, nullptr);
  launch_scaled_softmax(x, yc, rows, cols, 0.5f, 0.f, seed, true, 5, nullptr);
  launch_scaled_softmax(x, yd, rows, cols, 0.5f, 0.25f, seed, true, 100, nullptr);
  emu::print("softmax", y, rows * cols);
  emu::print("causal", yc, rows * cols);
  emu::print("dropout_masked_rows", yd, rows * cols);
  static float t[rows * cols];
  launch_transpose(x, t, rows, cols, nullptr);
  emu::print("transpose", t, rows * cols);
  const int tokens = 3, heads = 2, head_dim = 64;
  static float r[tokens * heads * head_dim], cs[8 * 32], sn[8 * 32];
  static int pos[tokens] = {1, 5, 7};
  emu::fill_random(r, tokens * heads * head_dim, seed + 1);
  emu::fill_random(cs, 8 * 32, seed + 2);
  emu::fill_random(sn, 8 * 32, seed + 3);
  launch_rotary(r, cs, sn, pos, tokens, heads, head_dim, nullptr);
  emu::print("rotary", r, tokens * heads * head_dim);
}
