"""PRT508 on a hand port's HIP-only alias of the shuffle broadcast without a width.

Shape (own fixture): a header maps ``ROW_SHFL`` to ``__shfl_sync`` for CUDA and to the width-less legacy
``__shfl`` in its ``USE_ROCM`` branch; a kernel puts one 32-lane row on each group of 32 threads and
broadcasts lanes 0..31 of its row. On a 64-lane wavefront lanes 32..63 read the first row.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.codemods.warp_size.hip_alias import broadcast_aliases, lane_index_32
from porter.codemods.warp_size.preproc import scan
from porter.config import Settings
from porter.runner import run
from porter.testing import findings, fixed

ALIAS_H = ("#pragma once\n#ifdef USE_ROCM\n#define ROW_SHFL(mask, var, lane) __shfl(var, lane)\n"
           "#define ROW_SHFL_UP(mask, var, d) __shfl_up(var, d)\n#else\n#define ROW_SHFL __shfl_sync\n"
           "#define ROW_SHFL_UP __shfl_up_sync\n#endif\n")
KERNEL = ("#include \"alias.cuh\"\n#define FULL 0xffffffff\n"
          "__global__ void row_gather(const int* cols, float* out) {\n"
          "  int t = blockDim.x * blockIdx.x + threadIdx.x;\n  int lane = t & (32 - 1);\n  int mine = cols[t];\n"
          "  float acc = 0.f;\n"
          "  for (int i = 0; i < 32; i++) acc += (float)ROW_SHFL(FULL, mine, i) * (float)(i + 1);\n"
          "  int up = ROW_SHFL_UP(FULL, mine, 1);\n"
          "  if (lane >= 1) acc += (float)up;\n"
          "  out[t] = acc + (float)lane;\n}\n"
          "void launch(const int* c, float* o) { row_gather<<<1, 128>>>(c, o); }\n")


def _run(root: Path, files: dict[str, str]) -> list:
    for rel, text in files.items():
        (root / rel).write_text(text)
    res = run(root, [root], Settings(select=("PRT5",)), "audit", jobs=1, use_cache=False)
    return [f for r in res.files for f in r.findings]


def test_hip_alias_broadcast_of_a_32_lane_index_is_reported(tmp_path: Path) -> None:
    got = _run(tmp_path, {"alias.cuh": ALIAS_H, "gather.cu": KERNEL})
    sites = [(f.code, f.path, f.line) for f in got if f.code == "PRT508"]
    assert sites == [("PRT508", "gather.cu", 8)]  # the broadcast; the guarded up-shift is left alone
    f = next(f for f in got if f.code == "PRT508")
    assert not f.edits and "lanes 32..63 read the first logical warp" in f.message


def test_the_alias_in_the_same_file_is_found_too() -> None:
    src = ALIAS_H.replace("#pragma once\n", "") + KERNEL.replace("#include \"alias.cuh\"\n", "")
    got = [(f.code, f.line) for f in findings(src, "gather.cu", family="warp_size") if f.code == "PRT508"]
    assert got == [("PRT508", 14)]
    assert fixed(src, "gather.cu", family="warp_size") == src  # the hand port is reported, never rewritten


@pytest.mark.parametrize(("old", "new"), [
    ("__shfl(var, lane)", "__shfl(var, lane, 32)"),  # an explicit width: the port chose it
    ("t & (32 - 1)", "t % blockDim.x"),  # no 32-lane split: a wavefront-wide kernel may broadcast lane i
    ("ROW_SHFL(FULL, mine, i)", "ROW_SHFL(FULL, mine, (t & ~31) + i)"),  # an absolute lane of the wavefront
    ("i < 32", "i < 64"),  # a loop over the whole wavefront
    ("#ifdef USE_ROCM", "#ifdef SOME_BUILD_FLAG"),  # not a HIP-only definition
])
def test_no_report_without_the_hazard(tmp_path: Path, old: str, new: str) -> None:
    files = {"alias.cuh": ALIAS_H.replace(old, new), "gather.cu": KERNEL.replace(old, new)}
    assert [f for f in _run(tmp_path, files) if f.code == "PRT508" and f.path == "gather.cu"] == []


def test_alias_table_and_lane_indices() -> None:
    assert broadcast_aliases(scan(ALIAS_H)) == {"ROW_SHFL": 2}
    value = {"0": 0, "31": 31, "32": 32, "64": 64}.get
    body = "for (int i = 0; i < 32; i++) x; for (int j = 0; j < 64; j++) y;"
    assert lane_index_32("31", body, value) and lane_index_32("i", body, value)
    assert lane_index_32("t & 31", body, value)
    assert not lane_index_32("j", body, value) and not lane_index_32("32", body, value)


def test_a_cuda_alias_that_hip_defines_as_its_own_macro_is_not_reported_for_amd() -> None:
    """`#define UP __shfl_up_sync` for CUDA next to a HIP function-like macro: the call's 32-bit mask is
    CUDA's business (HIP never sees `__shfl_up_sync` there), and this guarded up-scan is right at width 64."""
    src = ("#ifdef USE_ROCM\n#define UP(mask, v, d) __shfl_up(v, d)\n#else\n#define UP __shfl_up_sync\n#endif\n"
           "__global__ void scan32(const float* in, float* out) {\n"
           "  int t = blockDim.x * blockIdx.x + threadIdx.x;\n  int lane = t & (32 - 1);\n  float v = in[t];\n"
           "  for (int i = 1; i < 32; i *= 2) {\n    float o = UP(0xffffffff, v, i);\n    if (lane >= i) v += o;\n"
           "  }\n  out[t] = v;\n}\n")
    assert findings(src, "k.cu", family="warp_size") == []
    # without the HIP macro the alias is all there is: the 32-bit mask reaches HIP and is reported
    plain = src.replace("#ifdef USE_ROCM\n#define UP(mask, v, d) __shfl_up(v, d)\n#else\n", "").replace(
        "#endif\n__global__", "__global__")
    assert "PRT501" in [f.code for f in findings(plain, "k.cu", family="warp_size")]
