"""The kernels the emulator suite runs, what each run is expected to show, and the batch that runs them.

For every case: the original under CUDA semantics (``cuda32``) is the reference; porter's warp patch
(logical strategy) must give the same outputs under CUDA and, after HIPify, under HIP wave64 and
wave32; the unpatched-but-HIPified kernel under HIP wave64 must differ from the reference wherever
porter reports a hazard (a compile error with ROCm >= 6.3's 64-bit-mask builtins, HIP's runtime mask
check, or different values with a mask-dropping shim) and must agree where porter reports nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import driver
from .driver import Outcome, Source

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "warp_size"
SEEDS = (1, 2, 3)


@dataclass(frozen=True)
class Case:
    id: str
    kernel: Path
    harness: Path
    companions: tuple[Path, ...] = ()  # project files patched and HIPified with the kernel
    libs: tuple[Path, ...] = ()  # library headers: copied, never patched
    unsafe: bool = False  # apply porter's UNSAFE fixes too
    strategy: str = "logical"  # porter's [tool.porter.warp_size] strategy
    ref: str = "orig"  # "orig"; "patched" when the original does not compile under CUDA; "error" when
    #                    the original is itself undefined under CUDA (the emulator must say so); "intended"
    #                    when the original is wrong under CUDA too: `intended` (same harness) is the reference
    intended: Path | None = None  # with ref="intended": the code the original's author meant
    patched: str = "equal"  # "equal", "manual" (porter reports it without a fix), "compile-error"
    manual_outputs: tuple[str, ...] = ()  # with "manual": the only outputs allowed to differ
    manual_codes: tuple[str, ...] = ()  # with "manual"/"compile-error": the findings (without an applied fix)
    #                                     that explain it, as CODE or CODE@LINE (the site of the original)
    info_codes: tuple[str, ...] = ()  # findings porter must report as informational (no hazard) here
    why: str = ""
    xfail: str = ""  # an issue-13 item that makes the patched wave64 check fail today
    xfail_patch: str = ""  # an issue-13 item that makes every patched check fail today (the patch breaks)
    value_hazard: bool = False  # the mask-dropping shim must show different values (not only C/R)
    hip32_broken: str = ""  # the project's own HIP branch is wrong on wave32 (RDNA): not porter's doing
    hazard_visible: bool = True  # False: the emulator cannot show this file's hazard (reason in `why`)
    xfail_unpatched: str = ""  # an issue-13 item that makes porter report code that is right on HIP


def _fx(stem: str, **kw) -> Case:
    src = next(FIXTURES.glob(f"{stem}.in.*"))
    suffix = kw.pop("harness_suffix", "")
    harness = HERE / "harness" / "fixtures" / f"{stem}{suffix}.cpp"
    return Case(id=f"fixture/{stem}{suffix}", kernel=src, harness=harness, **kw)


def _own(stem: str, **kw) -> Case:
    return Case(id=f"emulator/{stem}", kernel=HERE / "kernels" / f"{stem}.cu", harness=HERE / "harness" / f"{stem}.cpp",
                **kw)


PORTED = ("already ported by hand (issue 13 items 1 and 3): porter reports nothing and patches nothing, so the "
          "HIP build runs the human 64-lane branch, which equals CUDA on wave64")
RDNA = "the project's HIP branch assumes 64 lanes on every AMD GPU, so it is wrong on wave32 before porter's patch"

CASES: tuple[Case, ...] = (
    _fx("h01_full_mask"),
    _fx("h02_ballot_storage", value_hazard=True),
    _fx("h03_ballot_consumers", value_hazard=True),
    _fx("h04_reduction_loops", value_hazard=True),
    _fx("h05_lane_arithmetic"),
    _fx("h06_block_geometry"),
    _fx("h06_host_warp_choice"),
    _fx("h07_shared_arrays", value_hazard=True),
    _fx("h08_shuffle_width", value_hazard=True),
    _fx("h09_votes", value_hazard=True),
    _fx("h10_host_warp"),
    _fx("h10_host_warp", harness_suffix=".launcher", patched="manual", manual_outputs=("x",),
        manual_codes=("PRT510",), value_hazard=True,
        why="the host launcher sizes the block from the device's warp size (PRT510, no automatic fix)"),
    _fx("h11_warpsize_const", ref="patched", why="`warpSize` in an array bound and a template argument does "
        "not compile under CUDA either; the patched CUDA build is the reference"),
    _fx("h12_wavefront_macro", patched="manual", manual_outputs=("x",), manual_codes=("PRT512",), value_hazard=True,
        why="`__AMDGCN_WAVEFRONT_SIZE == 64` picks 64 on CDNA (PRT512, no automatic fix)"),
    _fx("h14_volatile_tree", info_codes=("PRT514",), why="PRT514 is informational under the logical strategy: "
        "the `tid < 32` tree runs in lanes 0..31, one wavefront on wave64 and wave32, so it is as right on AMD as "
        "on CUDA (its implicit lockstep is a CUDA-side matter, undefined from Volta on). The emulator does not "
        "model lockstep (lanes run one at a time between collectives, identically in every mode), so the "
        "equal runs show only that nothing else in the file differs"),
    _fx("h15_alias_macro", patched="compile-error", manual_codes=("PRT515",), why="SHFL_DOWN is an alias of the intrinsic under "
        "__HIP_PLATFORM_HCC__, which ROCm 6 no longer defines: the CUDA spelling with its 32-bit mask "
        "reaches HIP (PRT515 reported, not patched)"),
    _fx("h15_legacy_mask", hazard_visible=False, why="the file is the buggy HIP branch alone; "
        "emulator/legacy_mask_shared checks the UNSAFE fix against the intended code"),
    _fx("h16_syncwarp"),
    _fx("h17_divergence", ref="error", why="the kernel is divergent under CUDA itself (PRT517, no fix): lanes "
        "4..31 leave the second reduction's full-mask shuffles; the emulator reports the deadlock under CUDA and "
        "the read of an exited lane under HIP"),
    _fx("h19_launch_bounds"),
    _fx("header_guard"),
    _fx("ported_hip_branches", hip32_broken=RDNA, why="an already-ported header (per-target shuffles, "
        "`WARP_THREADS` 64 in the HIP branch): porter reports and patches nothing; the HIP branch equals CUDA on "
        "wave64 wherever the result does not depend on the warp width by design"),
    _fx("suppressed", patched="compile-error", why="the user suppressed PRT501 on one shuffle: its 32-bit "
        "mask stays and ROCm >= 6.3 rejects it"),
    _fx("trap_alignment_banks"),
    _fx("trap_bit_widths"),
    _fx("trap_col32_layout"),
    _fx("trap_model_shapes"),
    _fx("trap_subwarp"),
    _fx("trap_tiles"),
    Case(id="tests/kernels/warp_hazards", kernel=REPO / "tests" / "kernels" / "warp_hazards.cu",
         harness=HERE / "harness" / "warp_hazards.cpp", unsafe=True, patched="compile-error",
         manual_codes=("PRT511@15",), why="the file's own HIP branch defines `WARP_SIZE` as `warpSize`, which is "
         "not a constant from ROCm 7 (array bound `1024 / WARP_SIZE`, template argument `reduce_w<WARP_SIZE>`): "
         "human HIP code, reported (PRT511, with PRT515 for its SHFL_DOWN), not rewritten, so HIP does not "
         "compile it before or after the patch; case `misc` also reads `__AMDGCN_WAVEFRONT_SIZE` (PRT512)"),
    Case(id="examples/legacy-gpt/fused_softmax", kernel=REPO / "examples" / "legacy-gpt" / "kernels" / "fused_softmax.cu",
         companions=(REPO / "examples" / "legacy-gpt" / "kernels" / "fused_softmax.cuh",),
         harness=HERE / "harness" / "fused_softmax.cpp", value_hazard=True),
    _own("warpsize_loop", value_hazard=True),
    _own("legacy_mask_branch", unsafe=True, value_hazard=True, patched="manual", manual_outputs=("sums",),
         manual_codes=("PRT515@4",), why="the mask-taking legacy call is in the file's own HIP branch: human HIP "
         "code is reported (PRT515, no fix), not rewritten, so the HIP build still shuffles the mask constant"),
    _own("legacy_mask_shared", unsafe=True, value_hazard=True, ref="intended",
         intended=HERE / "kernels" / "legacy_mask_intended.cu", why="both targets compile the mask-taking legacy "
         "calls (a macro and a plain call), wrong on CUDA too: porter's UNSAFE fix (PRT515) is compared with the "
         "intended code"),
    _own("physical_block_stats", strategy="physical", unsafe=True, value_hazard=True, patched="manual",
         manual_outputs=("shared_sums", "shared_positives"), manual_codes=("PRT506",),
         why="physical strategy: lane/warp ids, loop start, shuffle width, ballot type and popc follow the "
         "wavefront; `blockDim.x / 32` in device code (PRT506, no fix) still counts 32-lane warps, so the "
         "kernel that sums per-warp shared slots over it is wrong on wave64 (mixed idiom)"),
    _own("item2_named_warpsize", why="issue 13 item 2: only the builtin `warpSize` is rewritten; the local "
         "declared in a macro body and the parameter named `warpSize` stay"),
    _own("item1_project_macro", hip32_broken=RDNA, why=PORTED),
    _own("item1_c10_warp_size", libs=(HERE / "kernels" / "include" / "c10_warp_stub.h",), patched="compile-error",
         manual_codes=("PRT501@5",), why="issue 13 item 1: the loop starts at `C10_WARP_SIZE / 2` (32 on gfx9 "
         "under ROCm): no 32-lane pin; the 32-bit mask is reported (PRT501, not patched), so ROCm >= 6.3 rejects "
         "it until a person picks the strategy"),
    _own("item1_constexpr_warp", hip32_broken=RDNA, why=PORTED),
    _own("item1_legacy_any", hip32_broken=RDNA, why=PORTED),
    _own("hip_alias_broadcast", value_hazard=True, patched="manual", manual_outputs=("out",),
         manual_codes=("PRT508@14",), why="the project's HIP branch aliases the broadcast to the width-less legacy "
         "`__shfl` while the kernel broadcasts a 32-lane index: human HIP code, reported (PRT508, no fix), not "
         "rewritten, so the HIP build on wave64 still reads the first row's lanes"),
)

# Fixtures the emulator cannot run, and why (everything else in tests/fixtures/warp_size has a case).
NOT_RUN = {
    "h13_cub_templates": "cub/hipcub and cooperative-groups tiles are library code the emulator does not provide",
    "h18_ptx": "inline PTX",
    "trap_mma": "WMMA fragments",
    "h20_python": "Python-side (report only)",
    "arch_warp_constant": "`head` shuffles under `lane == 0` (divergent under CUDA itself, PRT517) and `warp_sum` "
                          "keeps its 32-bit mask where the project's WARP_SIZE is 64 on HIP (PRT501 reported, not "
                          "patched): no defined CUDA result, and HIP rejects the mask; emulator/item1_c10_warp_size "
                          "runs the same no-pin shape",
}

RUNS = ("orig@cuda32", "patched@cuda32", "hip-patched@hip64", "hip-patched@hip32", "hip-patched@hip64-legacy",
        "hip-orig@hip64", "hip-orig@hip64-shim", "hip-orig@hip32")


def runs_for(case: Case, patched_text: str) -> tuple[str, ...]:
    """The runs a case needs: HIP <= 6.1 only where the patch calls porter's masked helpers (their
    other path), wave32 without the patch only where the project's HIP branch is suspect there."""
    skip = set()
    if not re.search(r"porter_\w+_sync\(", patched_text):
        skip.add("hip-patched@hip64-legacy")
    if not case.hip32_broken:
        skip.add("hip-orig@hip32")
    return tuple(r for r in RUNS if r not in skip)


@dataclass
class Result:
    case: Case
    findings: list = field(default_factory=list)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    patched_text: str = ""

    @property
    def ref(self) -> Outcome:
        return self.outcomes[{"patched": "patched@cuda32", "intended": "intended@cuda32"}.get(self.case.ref,
                                                                                             "orig@cuda32")]

    @property
    def hazards(self) -> list:
        """Findings porter presents as hazards (informational ones excluded)."""
        from porter.codemods.warp_size import RULES

        info = {r.code for r in RULES if r.severity.value == "info"}

        def severity(f) -> str:
            sev = getattr(f, "severity", None)
            return sev.value if sev is not None else ("info" if f.code in info else "warning")

        return [f for f in self.findings if severity(f) != "info"]

    @property
    def codes(self) -> list[str]:
        return sorted({f.code for f in self.findings})

    def applied(self, f) -> bool:
        """Whether porter's patch (as this case applies it) edits the finding's site."""
        return bool(f.edits) and (f.fix.value == "safe" or (self.case.unsafe and f.fix.value == "unsafe"))

    @property
    def fixed_codes(self) -> list[str]:
        return sorted({f.code for f in self.findings if self.applied(f)})

    @property
    def unfixed_codes(self) -> list[str]:
        return sorted({f.code for f in self.findings if not self.applied(f)})

    @property
    def unfixed_sites(self) -> set[str]:
        """CODE and CODE@LINE of every finding the patch leaves without an edit (lines of the original)."""
        return {s for f in self.findings if not self.applied(f) for s in (f.code, f"{f.code}@{f.line}")}


def _rel(path: Path) -> str:
    return path.name.replace(".in.", ".")


def _sources(case: Case) -> tuple[Source, Source, list]:
    main_name = _rel(case.kernel)
    text = case.kernel.read_text()
    extra = {_rel(p): p.read_text() for p in case.companions}
    libs = {p.name: p.read_text() for p in case.libs}
    orig = Source(main_name, text, {**extra, **libs})
    ptext, new = driver.porter_patch(text, main_name, unsafe=case.unsafe, strategy=case.strategy)
    pextra = dict(libs)
    for rel, body in extra.items():
        t, n = driver.porter_patch(body, rel, unsafe=case.unsafe, strategy=case.strategy)
        pextra[rel] = t
        new.update(n)
    pextra.update(new)
    found = driver.porter_findings(text, main_name, case.strategy) + [
        f for rel, body in extra.items() for f in driver.porter_findings(body, rel, case.strategy)]
    return orig, Source(main_name, ptext, pextra), found


@lru_cache(maxsize=1)
def results() -> dict[str, Result]:
    """Every case, every run (cached on disk by content; about a minute on two cores from cold)."""
    out: dict[str, Result] = {}
    origs, patcheds = {}, {}
    for i, case in enumerate(CASES):
        orig, patched, found = _sources(case)
        out[case.id] = Result(case, found, patched_text=patched.text)
        origs[f"o{i}"] = orig
        patcheds[f"p{i}"] = patched
    hip = driver.hipify({**origs, **patcheds})
    jobs = {}
    for i, case in enumerate(CASES):
        variants = {"orig": origs[f"o{i}"], "patched": patcheds[f"p{i}"], "hip-orig": hip[f"o{i}"],
                    "hip-patched": hip[f"p{i}"]}
        for run in runs_for(case, out[case.id].patched_text):
            variant, mode = run.split("@")
            jobs[(case.id, run)] = (variants[variant], case.harness, mode, SEEDS)
        if case.ref == "intended":
            assert case.intended is not None, case.id
            jobs[(case.id, "intended@cuda32")] = (Source(_rel(case.intended), case.intended.read_text()),
                                                  case.harness, "cuda32", SEEDS)
    done = driver.run_all(jobs)
    for (cid, run), outcome in done.items():
        out[cid].outcomes[run] = outcome
    return out


def differs(a: Outcome, ref: Outcome) -> bool:
    return not a.same_as(ref)


def verdict(r: Result, run: str) -> str:
    """One table cell: `ref`, `=` (same outputs as the reference), `C` (does not compile), `R: kind`
    (the emulator stopped it: deadlock, inactive-lane, hip-mask-check...), `≠ names` (different values)."""
    if run not in r.outcomes:
        return ""
    got = r.outcomes[run]
    if r.case.ref == "error" and run == "orig@cuda32" or run == f"{r.case.ref}@cuda32":
        return "ref" if got.ok else _err(got)
    if not got.ok:
        return _err(got)
    if not r.ref.ok:
        return "ok"
    if got.same_as(r.ref):
        return "="
    return "≠ " + ", ".join(sorted(got.differing(r.ref)))


def _err(o: Outcome) -> str:
    if o.kind == "compile-error":
        return "C"
    m = re.search(r"EMU-ERROR: ([\w-]+)", o.message)
    return f"R: {m.group(1)}" if m else "R"


HEADINGS = ("cuda32 original", "cuda32 patched", "hip64 patched+HIPify", "hip32 patched+HIPify",
            "hip64 patched+HIPify (ROCm 6.1)", "hip64 HIPify only (ROCm 6.3)", "hip64 HIPify only (mask shim)",
            "hip32 HIPify only")


def markdown_table() -> str:
    rows = ["| case | fixed by porter | reported only | " + " | ".join(HEADINGS) + " |",
            "|---|---|---|" + "---|" * len(HEADINGS)]
    for r in results().values():
        mark = f" (xfail: {r.case.xfail.split(':')[0]})" if r.case.xfail else ""
        cells = [verdict(r, run) for run in RUNS]
        rows.append(f"| `{r.case.id}`{mark} | {' '.join(r.fixed_codes) or '-'} | {' '.join(r.unfixed_codes) or '-'} | "
                    + " | ".join(cells) + " |")
    return "\n".join(rows)


def first_error_line(o: Outcome) -> str:
    m = re.search(r"EMU-ERROR: [^\n]*|error: [^\n]*", o.message)
    return m.group(0)[:200] if m else o.summary()
