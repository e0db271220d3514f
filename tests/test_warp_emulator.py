"""Warp-size patches verified by execution on a CPU wavefront emulator (tests/emulator/wave_emu.h).

Part 1: the emulator itself, intrinsic by intrinsic under CUDA (32 lanes), HIP wave64 and HIP wave32,
against the documented semantics, plus the undefined behaviour it must report instead of hanging.
Part 2: porter's flow on every fixture kernel, tests/kernels and the example repo's kernels (see
tests/emulator/cases.py): the patched-then-HIPified kernel on 64 lanes gives the CUDA results, the
unpatched-but-HIPified one does not wherever porter reports a hazard. Needs only g++; builds are
cached under $TMPDIR/porter-wave-emu.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from emulator import cases, driver
from emulator.driver import Source

pytestmark = pytest.mark.skipif(not driver.available(), reason="g++ not installed")

EMU = Path(__file__).parent / "emulator"
WAVES = {"cuda32": 32, "hip64": 64, "hip32": 32}


# ---- part 1: the emulator -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def selftest() -> dict[str, driver.Outcome]:
    src = Source("selftest.cu", (EMU / "kernels" / "selftest.cu").read_text())
    return driver.run_all({m: (src, EMU / "harness" / "selftest.cpp", m, (1,)) for m in WAVES})


def _rows(out: driver.Outcome, name: str) -> list[list[int]]:
    v = [int(x) for x in out.outputs[f"{name}@1"]]
    return [v[i:i + 64] for i in range(0, len(v), 64)]


# documented shuffle semantics (CUDA programming guide; HIP amd_warp_functions.h): source lane or own lane
def _idx(lane: int, src: int, w: int) -> int:
    return (src & (w - 1)) + (lane & ~(w - 1))


def _up(lane: int, d: int, w: int) -> int:
    return lane if lane - d < (lane & ~(w - 1)) else lane - d


def _down(lane: int, d: int, w: int) -> int:
    return lane if (lane & (w - 1)) + d >= w else lane + d


def _xor(lane: int, m: int, w: int) -> int:
    return lane if lane ^ m >= ((lane + w) & ~(w - 1)) else lane ^ m


@pytest.mark.parametrize("mode", list(WAVES))
def test_shuffles_follow_the_documented_lane_rules(selftest: dict, mode: str) -> None:
    out = selftest[mode]
    assert out.ok, out.message
    W = WAVES[mode]
    rows = _rows(out, "shuffles")

    def lanes(fn, *a):  # the rules apply to the lane within its wavefront
        return [t - t % W + fn(t % W, *a) for t in range(64)]

    xor2 = lanes(_xor, 2, W)
    want = [
        lanes(_idx, 3, W), lanes(_idx, 5, 16), lanes(_up, 1, W), lanes(_down, 2, W), lanes(_xor, 1, W),
        lanes(_xor, 32, W), lanes(_xor, 8, 8), lanes(_idx, 40, W), lanes(_up, 3, 8), lanes(_down, 16, W),
        lanes(_xor, 16, W), lanes(_down, 1, W), [x - 1000 * x for x in xor2],
        [(v if (t & 31) < 16 else -1) for t, v in enumerate(lanes(_idx, 15, W))], [W] * 64,
    ]
    for i, (got, exp) in enumerate(zip(rows, want, strict=True)):
        assert got == exp, f"row {i}"
    # spot checks written out by hand: the lanes where 32 and 64 lanes disagree
    if W == 64:
        assert rows[0][40] == 3 and rows[2][32] == 31 and rows[3][30] == 32 and rows[5][0] == 32 and rows[7][0] == 40
        assert rows[13][40] == 15  # partial group, width 64
    else:
        assert rows[0][40] == 35 and rows[2][32] == 32 and rows[3][30] == 30 and rows[5][0] == 0 and rows[7][0] == 8
        assert rows[13][40] == 47


@pytest.mark.parametrize("mode", list(WAVES))
def test_votes_ballots_and_bit_helpers(selftest: dict, mode: str) -> None:
    out = selftest[mode]
    W = WAVES[mode]
    rows = _rows(out, "votes")
    waves = [range(b, b + W) for b in range(0, 64, W)]

    def per_wave(fn):
        return [fn(next(w for w in waves if t in w)) for t in range(64)]

    def bits(w, pred):
        return sum(1 << (t - w[0]) for t in w if pred(t))

    ballot = per_wave(lambda w: bits(w, lambda t: t % 3 == 0))
    assert rows[0] == ballot
    assert rows[1] == per_wave(lambda w: int(40 in w))
    assert rows[2] == per_wave(lambda w: int(all(t < 60 for t in w)))
    assert rows[3] == [bin(b).count("1") for b in ballot]
    first = per_wave(lambda w: bits(w, lambda t: 37 <= t < 50))
    assert rows[4] == [(b & -b).bit_length() for b in first]  # ffs: 1-based, 0 for none
    even = per_wave(lambda w: bits(w, lambda lane: lane % 2 == 0))
    assert rows[5] == [even[t] if t % 2 == 0 else 0 for t in range(64)]
    assert rows[8] == per_wave(lambda w: bits(w, lambda t: t < 3))
    assert rows[9][0] == 32 + 800 + 1000 and rows[9][1] == 31 + 1800 and rows[9][63] == 26 + 1800
    assert rows[10] == [(t % W) * 101 for t in range(64)]
    assert rows[11] == per_wave(lambda w: int(5 in w))  # all lanes vote again after the divergent branch
    if W == 64:
        assert rows[0][0] == 0x9249249249249249 and rows[5][0] == 0x5555555555555555 and rows[1][0] == 1
    else:
        assert rows[0][0] == 0x49249249 and rows[0][32] == 0x92492492 and rows[5][0] == 0x55555555 and rows[1][0] == 0


@pytest.mark.parametrize("mode", list(WAVES))
def test_shared_memory_barriers_and_atomics(selftest: dict, mode: str) -> None:
    out = selftest[mode]
    got = out.outputs["memory@1"]
    want = [b * 64 + 63 - t + 2 * (b * 64 + (t + 1) % 64) for b in range(2) for t in range(64)]
    assert got == want
    assert out.outputs["counters@1"] == [128, 126, -63, 7, 1, 2001 * 128, 0, 0]


def _errors(case: int, mode: str, timeout: int = 20) -> driver.Outcome:
    src = Source("errors.cu", (EMU / "kernels" / "errors.cu").read_text())
    return driver.build_and_run(src, EMU / "harness" / "errors.cpp", mode, (1,),
                                defines=(f"EMU_CASE={case}", f"EMU_TIMEOUT={timeout}"))


def test_divergent_full_mask_shuffle_is_reported_as_a_deadlock_under_cuda() -> None:
    got = _errors(1, "cuda32")
    assert got.kind == "runtime-error" and "deadlock" in got.message and "lane 16 (at __syncthreads)" in got.message


def test_reading_an_exited_lane_is_reported_on_wave64_and_fine_on_32_lanes() -> None:
    assert _errors(2, "cuda32").ok
    got = _errors(2, "hip64")
    assert got.kind == "runtime-error" and "lane 16 reads lane 32, which is exited" in got.message


def test_hip_mask_check_rejects_a_zero_extended_32_bit_mask() -> None:
    got = _errors(3, "hip64")
    assert got.kind == "runtime-error" and "hip-mask-check" in got.message and "0xffffffffffffffff" in got.message


def test_hip_sync_builtins_reject_32_bit_masks_at_compile_time() -> None:
    src = Source("m.cu", "__global__ void k(float* x) { x[0] = __shfl_xor_sync(0xffffffff, x[0], 1); }\n")
    harness = EMU / "harness" / "errors.cpp"
    exe, msg = driver.build(src, harness, "hip64", defines=("EMU_CASE=0",))
    assert exe is None and "must be a 64-bit integer" in msg
    exe, msg = driver.build(src, harness, "hip64-legacy", defines=("EMU_CASE=0",))
    assert exe is None and "__shfl_xor_sync" in msg  # no *_sync builtins before ROCm 6.2
    exe, _ = driver.build(src, harness, "hip64-shim", defines=("EMU_CASE=0",))
    assert exe is not None


def test_a_lane_that_never_yields_ends_on_the_watchdog() -> None:
    t0 = time.monotonic()
    got = _errors(4, "cuda32", timeout=1)
    assert got.kind == "runtime-error" and "watchdog" in got.message
    assert time.monotonic() - t0 < 30


def test_bad_shuffle_width_is_reported() -> None:
    got = _errors(5, "hip64")
    assert got.kind == "runtime-error" and "width 24" in got.message


def test_launch_syntax_and_dynamic_shared_memory_are_rewritten() -> None:
    text = "extern __shared__ float buf[];\nk<<<dim3(2, 1), 64, 16 * sizeof(float), s>>>(a, b);\nf<32><<<1, n>>>();"
    out = driver.emulator_source(text)
    assert "float* buf = reinterpret_cast<float*>(::emu::dynamic_shared());" in out
    assert "::emu::kernel_call(k, dim3(2, 1), 64, 16 * sizeof(float), s)(a, b);" in out
    assert "::emu::kernel_call(f<32>, 1, n)();" in out


# ---- part 2: porter's patch, by execution ------------------------------------------------------------------
@pytest.fixture(scope="module")
def results() -> dict[str, cases.Result]:
    return cases.results()


IDS = [c.id for c in cases.CASES]
BY_ID = {c.id: c for c in cases.CASES}


def _xfail_wave64(case_id: str):
    c = BY_ID[case_id]
    reason = c.xfail_patch or c.xfail
    return pytest.param(case_id, marks=pytest.mark.xfail(strict=True, reason=reason)) if reason else case_id


def _xfail_patch(case_id: str):
    c = BY_ID[case_id]
    return pytest.param(case_id, marks=pytest.mark.xfail(strict=True, reason=c.xfail_patch)) if c.xfail_patch else case_id


@pytest.mark.parametrize("case_id", [_xfail_patch(i) for i in IDS])
def test_patch_is_exact_under_cuda(results: dict, case_id: str) -> None:
    r = results[case_id]
    orig, patched = r.outcomes["orig@cuda32"], r.outcomes["patched@cuda32"]
    if r.case.ref == "patched":
        assert orig.kind == "compile-error" and patched.ok, (orig.summary(), patched.summary())
    elif r.case.ref == "error":
        assert orig.kind == "runtime-error" and patched.message == orig.message
    elif r.case.ref == "intended":  # an UNSAFE fix: it changes what the original computes, into what was meant
        assert orig.ok and r.ref.ok, (orig.summary(), r.ref.summary())
        assert not orig.same_as(r.ref), "the original was expected to be wrong under CUDA too"
        assert patched.same_as(r.ref), patched.diff(r.ref)
    else:
        assert orig.ok, orig.message
        assert patched.same_as(orig), patched.diff(orig)


@pytest.mark.parametrize("case_id", [_xfail_wave64(i) for i in IDS])
def test_patched_then_hipified_gives_the_cuda_results_on_wave64(results: dict, case_id: str) -> None:
    r = results[case_id]
    got, ref = r.outcomes["hip-patched@hip64"], r.ref
    c = r.case
    if c.ref == "error":  # undefined under CUDA: the emulator must refuse it under HIP as well
        assert got.kind == "runtime-error", got.summary()
        return
    if c.patched == "equal":
        assert got.same_as(ref), got.diff(ref)
    elif c.patched == "manual":
        assert got.ok and got.same_as(ref, ignore=c.manual_outputs), got.diff(ref)
        assert got.differing(ref) == set(c.manual_outputs)
    else:
        assert c.patched == "compile-error" and got.kind == "compile-error", got.summary()
        assert r.outcomes["orig@cuda32"].ok
    if c.patched != "equal":  # every remaining difference is one porter reported without a fix, at its site
        assert c.manual_codes or c.id.endswith("suppressed")
        assert set(c.manual_codes) <= r.unfixed_sites, (c.manual_codes, sorted(r.unfixed_sites))


@pytest.mark.parametrize("case_id", [i for i in IDS if "hip-patched@hip64-legacy" in cases.runs_for(
    BY_ID[i], driver.porter_patch(BY_ID[i].kernel.read_text(), "k.cu", unsafe=BY_ID[i].unsafe,
                                 strategy=BY_ID[i].strategy)[0])])
def test_patched_masked_helpers_without_rocm63_builtins(results: dict, case_id: str) -> None:
    """porter_*_sync(mask, ...) take the maskless path before ROCm 6.2: same results as with the builtins."""
    r = results[case_id]
    legacy, modern = r.outcomes["hip-patched@hip64-legacy"], r.outcomes["hip-patched@hip64"]
    assert legacy.kind == modern.kind and legacy.outputs == modern.outputs, legacy.diff(modern)


@pytest.mark.parametrize("case_id", [_xfail_patch(i) for i in IDS])
def test_patched_then_hipified_gives_the_cuda_results_on_wave32(results: dict, case_id: str) -> None:
    r = results[case_id]
    got, ref, c = r.outcomes["hip-patched@hip32"], r.ref, r.case
    if c.ref == "error":
        assert got.kind == "runtime-error"
    elif c.hip32_broken:
        unpatched = r.outcomes["hip-orig@hip32"]
        assert not unpatched.same_as(ref), "the HIP branch was expected to be wrong on wave32 before the patch"
    elif c.patched == "equal" or c.patched == "manual" and not set(c.manual_outputs) & got.differing(ref):
        assert got.same_as(ref), got.diff(ref)
    elif c.patched == "manual":
        assert got.same_as(ref, ignore=c.manual_outputs), got.diff(ref)
    else:
        assert got.kind == "compile-error"


def _xfail_unpatched(case_id: str):
    c = BY_ID[case_id]
    if c.xfail_unpatched:
        return pytest.param(case_id, marks=pytest.mark.xfail(strict=True, reason=c.xfail_unpatched))
    return case_id


@pytest.mark.parametrize("case_id", [_xfail_unpatched(i) for i in IDS])
def test_unpatched_hipified_differs_exactly_where_porter_reports(results: dict, case_id: str) -> None:
    r = results[case_id]
    ref = r.ref
    strict, shim = r.outcomes["hip-orig@hip64"], r.outcomes["hip-orig@hip64-shim"]
    if r.case.ref == "error":
        assert not strict.ok and not shim.ok
    elif not r.case.hazard_visible:  # a documented blind spot of the emulator (see the case's `why`)
        assert r.hazards and strict.same_as(ref) and shim.same_as(ref)
    elif r.hazards:
        assert not strict.same_as(ref) or not shim.same_as(ref), "porter reports hazards the emulator cannot see"
    else:  # the false-positive traps: no report, and indeed the same results on 64 lanes
        assert strict.same_as(ref) and shim.same_as(ref), (strict.diff(ref), shim.diff(ref))
    info = {f.code for f in r.findings} - {f.code for f in r.hazards}
    assert set(r.case.info_codes) <= info, (r.case.info_codes, r.codes)


@pytest.mark.parametrize("case_id", [c.id for c in cases.CASES if c.value_hazard])
def test_wrong_results_hazards_show_different_numbers_on_wave64(results: dict, case_id: str) -> None:
    """Beyond compile errors: with the masks dropped (a compatibility shim), the numbers change."""
    r = results[case_id]
    shim = r.outcomes["hip-orig@hip64-shim"]
    legacy_hip = r.outcomes["hip-orig@hip64"]
    got = shim if shim.ok else legacy_hip
    assert got.ok and got.differing(r.ref), (shim.summary(), legacy_hip.summary())


def test_issue13_item1_human_hip_branch_sums_64_lanes(results: dict) -> None:
    r = results["emulator/item1_project_macro"]
    assert r.outcomes["orig@cuda32"].outputs["wave_first_warp_sum@1"] == [528.0]  # 1 + ... + 32
    assert r.outcomes["hip-orig@hip64"].outputs["wave_first_warp_sum@1"] == [2080.0]  # 1 + ... + 64
    assert r.outcomes["hip-orig@hip64"].same_as(r.ref)


def test_issue13_item1_patched_hip_branch_still_sums_64_lanes(results: dict) -> None:
    """Before issue 13 item 1 was fixed, porter pinned the HIP branch to width 32 (lane 0 got 1056)."""
    r = results["emulator/item1_project_macro"]
    assert r.patched_text == r.case.kernel.read_text() and not r.findings  # the human HIP port is left alone
    assert r.outcomes["hip-patched@hip64"].outputs["wave_first_warp_sum@1"] == [2080.0]  # 1 + ... + 64
    assert r.outcomes["hip-patched@hip64"].same_as(r.ref)


# Trees whose warp code HIP compiles was written by hand (issue 13, "must show" 3).
PORTED = ("emulator/item1_project_macro", "emulator/item1_constexpr_warp", "emulator/item1_legacy_any",
          "fixture/ported_hip_branches", "emulator/legacy_mask_branch", "emulator/hip_alias_broadcast")
# Of those, the ones whose HIP branch has a bug porter reports without a fix.
PORTED_WITH_A_BUG = {"emulator/legacy_mask_branch": "PRT515", "emulator/hip_alias_broadcast": "PRT508"}


@pytest.mark.parametrize("case_id", PORTED)
def test_an_already_ported_tree_runs_the_same_on_hip_after_the_patch(results: dict, case_id: str) -> None:
    r = results[case_id]
    for mode in ("hip64", "hip32"):
        got, before = r.outcomes[f"hip-patched@{mode}"], r.outcomes.get(f"hip-orig@{mode}")
        if before is not None:  # every output, the warp-size dependent ones included
            assert got.kind == before.kind and got.outputs == before.outputs, (mode, got.diff(before))
    if case_id in PORTED_WITH_A_BUG:  # the HIP branch's bug is reported, and nothing else
        assert {f.code for f in r.hazards} == {PORTED_WITH_A_BUG[case_id]}, r.codes
    else:
        assert not r.hazards, r.codes


def test_every_fixture_is_run_or_explained() -> None:
    stems = {p.name.split(".")[0] for p in cases.FIXTURES.glob("*.in.*")}
    ran = {c.kernel.name.split(".")[0] for c in cases.CASES if c.kernel.parent == cases.FIXTURES}
    assert stems == ran | set(cases.NOT_RUN), sorted(stems ^ (ran | set(cases.NOT_RUN)))
    assert not ran & set(cases.NOT_RUN)


def test_every_rule_porter_fixes_is_shown_equal_by_execution(results: dict) -> None:
    from porter.codemods.warp_size import RULES

    fixable = {r.code for r in RULES if r.fix.value in ("safe", "unsafe") and r.code.startswith("PRT5")}
    shown = set()
    for r in results.values():
        c = r.case
        if c.xfail or c.xfail_patch or c.ref == "error" or c.patched == "compile-error":
            continue
        if r.outcomes["hip-patched@hip64"].same_as(r.ref, ignore=c.manual_outputs):
            shown |= set(r.fixed_codes)
    # rules whose only edits are made by the physical strategy or need library code the emulator lacks
    # (PRT515's UNSAFE fix is shown against the intended code: emulator/legacy_mask_shared)
    not_shown = {"PRT507": "physical strategy: no lane-indexed shared array that stays consistent",
                 "PRT513": "cub/hipcub are not emulated"}
    assert fixable - shown == set(not_shown), sorted(fixable - shown)
