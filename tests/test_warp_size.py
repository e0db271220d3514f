"""Unit tests of the warp_size family beyond the fixture pairs (tests/fixtures/warp_size)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from porter.codemods.warp_size.analysis import header_text
from porter.codemods.warp_size.engine import analyse
from porter.codemods.warp_size.symbols import Symbols, evaluate
from porter.engine import fix
from porter.findings import Applicability
from porter.testing import findings, fixed, settings_for

KERNEL = """\
__global__ void k(float* x, unsigned* bits) {
  __shared__ float s[32];
  int lane = threadIdx.x % 32;
  float v = x[threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  unsigned int b = __ballot_sync(0xffffffff, v > 0.f);
  s[lane] = v;
  bits[threadIdx.x / 32] = __popc(b);
}
"""


def _settings(strategy: str = "logical", unsafe: bool = False, **opts: str):
    return settings_for("warp_size", unsafe=unsafe, warp_size={"strategy": strategy, **opts})


@pytest.mark.parametrize("mask", ["0xffffffff", "0xFFFFFFFFU", "~0u", "-1", "uint32_t(-1)", "(unsigned)-1",
                                  "FULL", "0xffffffffu"])
def test_every_full_mask_spelling_is_rewritten(mask: str) -> None:
    src = f"#define FULL 0xffffffff\n__device__ float f(float v) {{ return __shfl_down_sync({mask}, v, 1); }}\n"
    out = fixed(src, "a.cu", family="warp_size")
    assert "porter_shfl_down(v, 1)" in out and "__shfl_down_sync" not in out
    assert [f.code for f in findings(src, "a.cu", family="warp_size")] == ["PRT501"]


def test_wide_and_partial_masks_are_not_h1() -> None:
    src = "__device__ float f(float v, unsigned m) { return __shfl_sync(~0ull, v, 0) + __shfl_sync(m, v, 0); }\n"
    got = findings(src, "a.cu", family="warp_size")
    assert [f.code for f in got] == ["PRT508", "PRT508"]
    assert "porter_shfl_sync(~0ull, v, 0) + porter_shfl_sync(m, v, 0)" in fixed(src, "a.cu", family="warp_size")


def test_symbols_evaluator() -> None:
    s = Symbols()
    s.defines.update({"W": "32", "HALF": "(W / 2)", "M": "~0ull", "X": "warpSize"})
    assert s.value("HALF") == 16 and s.value("1 << 5") == 32 and s.value("W - 1") == 31
    assert not s.is_full_mask32("M") and s.is_warp_name("X") and s.is_warp_name("THREADS_PER_WARP")
    assert evaluate("1 << 100000") is None and evaluate("foo + 1") is None and evaluate("0x1f") == 31


def test_header_is_added_once_next_to_the_file_and_only_when_needed() -> None:
    out = fix("csrc/ops/k.cu", KERNEL, "cuda", settings_for("warp_size"))
    assert out.new_files == {"csrc/ops/porter_warp.h": header_text()}
    assert out.text.count('#include "porter_warp.h"') == 1 and out.text.startswith('#include "porter_warp.h"\n')
    trap = "__global__ void t(float* o) { __shared__ float tile[32][33]; o[threadIdx.x % 32] = 1.f; }\n"
    assert fix("t.cu", trap, "cuda", settings_for("warp_size")).new_files == {}


def test_header_dir_option_sets_location_and_include_path() -> None:
    s = settings_for("warp_size", warp_size={"header-dir": "include/porter"})
    out = fix("csrc/ops/k.cu", KERNEL, "cuda", s)
    assert set(out.new_files) == {"include/porter/porter_warp.h"}
    assert '#include "../../include/porter/porter_warp.h"' in out.text


def test_logical_strategy_leaves_consistent_32_lane_code_alone() -> None:
    got = {f.code: f for f in findings(KERNEL, "k.cu", family="warp_size")}
    assert set(got) >= {"PRT501", "PRT502", "PRT503", "PRT504", "PRT505", "PRT507"}
    for code in ("PRT502", "PRT503", "PRT504", "PRT505", "PRT507"):
        assert not got[code].edits, code  # resolved by the logical helpers, nothing to edit
    out = fixed(KERNEL, "k.cu", family="warp_size", unsafe=True)
    assert "threadIdx.x % 32" in out and "o = 16" in out and "porter_ballot32(v > 0.f)" in out


def test_physical_strategy_rewrites_over_the_wavefront_and_is_unsafe() -> None:
    got = findings(KERNEL, "k.cu", settings=_settings("physical"))
    assert all(f.fix in (Applicability.UNSAFE, Applicability.NONE) for f in got)
    out = fix("k.cu", KERNEL, "cuda", _settings("physical", unsafe=True)).text
    for piece in ("threadIdx.x % PORTER_WARP_SIZE", "o = PORTER_WARP_SIZE / 2", "porter_shfl_xor(v, o, PORTER_WARP_SIZE)",
                  "porter_lanemask_t b = porter_ballot(v > 0.f)", "porter_popc(b)", "s[PORTER_WARP_SIZE_MAX]"):
        assert piece in out, piece
    again = fix("k.cu", out, "cuda", _settings("physical", unsafe=True)).text
    assert again == out
    # without --unsafe-fixes the physical strategy changes nothing
    assert fix("k.cu", KERNEL, "cuda", _settings("physical")).text == KERNEL


def test_physical_strategy_falls_back_to_logical_when_host_computes_geometry() -> None:
    src = KERNEL + "void launch(float* x, unsigned* b, int n) { k<<<n / 32, 256 / 32 * 32>>>(x, b); }\n"
    got = findings(src, "k.cu", settings=_settings("physical"))
    assert "PRT523" in [f.code for f in got]
    assert "porter_shfl_xor(v, o);" in fix("k.cu", src, "cuda", _settings("physical", unsafe=True)).text


def test_offsets_survive_non_ascii_text() -> None:
    src = "// réduction à la « warp »\n__device__ float f(float v) { return __shfl_xor_sync(0xffffffff, v, 1); }\n"
    out = fixed(src, "a.cu", family="warp_size")
    assert "return porter_shfl_xor(v, 1); }" in out and "« warp »" in out


def test_embedded_cuda_string_is_report_only_at_its_offsets() -> None:
    src = 'K = """\n__global__ void k(float* x) {\n  x[0] = __shfl_xor_sync(0xffffffff, x[0], 1);\n}\n"""\n'
    got = findings(src, "m.py", family="warp_size")
    assert [(f.code, f.line, f.column) for f in got] == [("PRT501", 3, 10)]
    assert not got[0].edits and fixed(src, "m.py", family="warp_size") == src
    escaped = 'K = "__global__ void k(float* x) {\\n x[0] = __shfl_xor_sync(0xffffffff, x[0], 1); }"\n'
    assert [(f.code, f.line, f.column) for f in findings(escaped, "m.py", family="warp_size")] == [("PRT501", 1, 5)]


def test_suppression_comment_on_the_line_above() -> None:
    src = "__device__ float f(float v) {\n  // porter: ignore[PRT501]\n  return __shfl_xor_sync(0xffffffff, v, 1);\n}\n"
    assert findings(src, "a.cu", family="warp_size") == []


def test_rule_table_matches_the_spec_numbering() -> None:
    from porter.codemods.warp_size import RULES

    codes = [r.code for r in RULES]
    assert codes[:20] == [f"PRT5{n:02d}" for n in range(1, 21)]
    assert all(r.explanation for r in RULES)


_PIECES = st.sampled_from([
    "v += __shfl_xor_sync(0xffffffff, v, 16);", "v += __shfl_down_sync(FULL_MASK, v, o);",
    "unsigned b = __ballot_sync(~0u, v > 0.f);", "if (__any_sync(-1, v < 0.f)) v = 0.f;", "__syncwarp();",
    "int lane = threadIdx.x & 31;", "v += __shfl_sync(0xffffffff, v, 0, 16);", "float w = warpSize;",
    "x[threadIdx.x / 32] = v;", "for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);",
    "unsigned m = __activemask();", "v = v * 32.f + (v >> 5);",
])


@settings(max_examples=40, deadline=None)
@given(st.lists(_PIECES, min_size=1, max_size=8))
def test_logical_patch_removes_raw_masks_and_is_idempotent(lines: list[str]) -> None:
    body = "\n  ".join(lines)
    src = f"#define FULL_MASK 0xffffffff\n__global__ void k(float* x, int o) {{\n  float v = x[0];\n  {body}\n}}\n"
    s = settings_for("warp_size")
    out = fix("k.cu", src, "cuda", s)
    again = fix("k.cu", out.text, "cuda", s)
    assert again.text == out.text
    left = [f.code for f in findings(out.text, "k.cu", family="warp_size")]
    assert not {"PRT501", "PRT508", "PRT509", "PRT516", "PRT521"} & set(left), left


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(list("{}()[];,<>#\n /*\"'ab0x_fF3216") + ["__shfl_xor_sync", "warpSize",
                                                                            "__global__", "__ballot_sync"]),
                max_size=120).map("".join))
def test_analysis_never_crashes_and_stays_in_bounds(text: str) -> None:
    a = analyse(text)
    for s in a.sites:
        assert 0 <= s.start <= s.end <= len(text)
        for x, y, _ in s.edits:
            assert 0 <= x <= y <= len(text)


def test_strategy_option_is_validated_to_logical() -> None:
    s = _settings("bogus")
    assert replace(s) == s
    out = fix("k.cu", KERNEL, "cuda", s).text
    assert "porter_shfl_xor(v, o);" in out


def test_porters_own_header_is_never_reported_or_patched() -> None:
    text = header_text()
    assert findings(text, "csrc/porter_warp.h", family="warp_size") == []
    assert findings(text, "csrc/other_name.h", family="warp_size") == []  # ignore-file comment
    assert fixed(text, "csrc/porter_warp.h", family="warp_size") == text
