// tests/kernels/warp_hazards.cu: its five cases through its own host entry point
#include EMU_KERNEL
int main(int argc, char** argv) {
  const int n = 128 * 4;
  static float in[n], out[n];
  emu::fill_random(in, n, emu::seed_from_args(argc, argv));
  for (int c = 0; c < porter_case_count(); ++c) {
    for (int i = 0; i < n; ++i) out[i] = 0.f;
    porter_case_run(c, in, out, n);
    emu::print(porter_case_name(c), out, n);
  }
}
