"""Smoke tests of the benchmark harness (benchmarks/run.py, targets.py, identity.py).

Not timed tests: nothing here judges porter's speed. The end-to-end runs check that a ``--quick``
run on a tiny tree measures every target and writes its tables; the in-process tests check the
arithmetic (ratios, verdicts, pool overhead) on made-up samples, and identity.py's comparison.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
SCRIPT = BENCH / "run.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the benchmark reads /proc")

MODEL = '''\
import pynvml
import torch


def main() -> None:
    pynvml.nvmlInit()
    model = torch.nn.Linear(4, 4).cuda()
    x = torch.zeros(2, 4, device="cuda")
    print(torch.cuda.get_device_name(0), model(x).sum())
'''

UTIL = '''\
def add(a: int, b: int) -> int:
    """Nothing here concerns a GPU."""
    return a + b


def scale(values: list[float], k: float) -> list[float]:
    return [v * k for v in values]
'''

KERNEL = '''\
__global__ void reduce(float* out, const float* in) {
    float v = in[threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) {
        v += __shfl_down_sync(0xffffffff, v, offset);
    }
    if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}
'''

TREE_FILES = ["csrc/reduce.cu", "pkg/__init__.py", "pkg/model.py", "pkg/util.py", "requirements.txt"]


def _tiny_tree(root: Path) -> Path:
    tree = root / "tiny"
    (tree / "pkg").mkdir(parents=True)
    (tree / "csrc").mkdir()
    (tree / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tree / "pkg" / "model.py").write_text(MODEL, encoding="utf-8")
    (tree / "pkg" / "util.py").write_text(UTIL, encoding="utf-8")
    (tree / "csrc" / "reduce.cu").write_text(KERNEL, encoding="utf-8")
    (tree / "requirements.txt").write_text("torch==2.4.0+cu121\nflash-attn==2.6.3\n", encoding="utf-8")
    return tree


def _files(tree: Path) -> list[str]:
    return sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def targets_mod():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("targets")
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def identity_mod():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("identity")
    finally:
        sys.path.remove(str(BENCH))


def _table(md: str, heading: str) -> list[list[str]]:
    """The rows of the Markdown table under ``## heading`` (cells stripped, header and rule dropped)."""
    part = md.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in part.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in rows[2:]]


def test_quick_targets_run_measures_every_target(tmp_path: Path) -> None:
    tree = _tiny_tree(tmp_path)
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--python-tree", str(tree), "--cuda-tree", str(tree),
         "--migrate-repo", str(tree), "--skip", "torchfix,hipify", "--scratch", str(tmp_path / "scratch"),
         "--out", str(out)],
        capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    md = out.read_text(encoding="utf-8")
    assert md.startswith("# porter benchmarks: issue #14's targets")
    assert "Machine: " in md and "cores" in md and "load average (1 / 5 / 15 min) at start" in md and "at end" in md
    # the Python tree is the .py files only (3 of them), the migrate repo is the whole tiny tree
    assert "python: the .py files of" in md and ": 3 files," in md
    assert "migrate: " in md and "5 files, 3 Python" in md
    # the check files: the ordinary clean file and the one with findings, picked from the audit
    assert "porter check files (1clean): `tiny/pkg/util.py`" in md
    assert "porter check files (1dirty): `tiny/pkg/model.py`" in md

    targets = {row[0]: row for row in _table(md, "Targets")}
    for name in ("cold audit vs stdlib ast.parse floor", "cold audit vs LibCST parse_module",
                 "cold audit vs ruff --select ALL", "cold audit vs grep -rn", "pool overhead", "warm re-run vs grep",
                 "porter check, 1 file, no finding, --no-cache", "porter check, 1 file, no finding, cache",
                 "porter check, 1 file with findings, --no-cache", "porter check, 1 file with findings, cache",
                 "porter check, 10 files, --no-cache", "porter check, 10 files, cache", "porter migrate",
                 "C++ pass vs hipify's call (tiny)", "memory, cold audit -j 1", "memory, cold audit -j 2"):
        assert name in targets, name
    for name in ("cold audit vs stdlib ast.parse floor", "pool overhead", "warm re-run vs grep", "porter migrate",
                 "porter check, 1 file, no finding, cache", "porter check, 10 files, --no-cache"):
        assert targets[name][-1] in ("met", "**missed**"), targets[name]
    assert "× CPU" in targets["cold audit vs stdlib ast.parse floor"][5]
    assert "pool overhead" in targets["pool overhead"][5]
    # hipify was skipped: its comparison is reported as not measured, not judged
    assert targets["C++ pass vs hipify's call (tiny)"][4] == "not measured"
    assert targets["C++ pass vs hipify's call (tiny)"][-1] == "n/a"
    assert "TorchFix" not in md.split("## Notes")[0]  # skipped: no row, and a note says so
    assert "skipped (--skip): hipify, torchfix" in md

    meas = {row[0]: row for row in _table(md, "Measurements")}
    for label in ("stdlib ast.parse floor", "porter audit --no-cache -j 1", "porter audit --no-cache -j 2",
                  "porter audit (warm cache)", "porter migrate -j 2", "LibCST parse_module",
                  "tiny: porter audit --no-cache --select PRT5 -j 1"):
        row = meas[label]
        assert row[1] == "1", row  # --quick: one run each
        assert float(row[2]) > 0 and float(row[3]) > 0, row  # CPU and wall seconds were measured
        assert "FAILED" not in row[6], row
    # CPU is counted for the pool workers too: -j 2 costs at least half of -j 1 (not just the parent)
    assert float(meas["porter audit --no-cache -j 2"][2]) >= 0.5 * float(meas["porter audit --no-cache -j 1"][2])
    assert "exit 1" in meas["porter check (1 file with findings), --no-cache"][6]
    assert "exit 0" in meas["porter check (1 file, no finding), --no-cache"][6]
    header = next(line for line in proc.stdout.splitlines() if line.startswith("target "))
    assert "reference figure" in header and "verdict" in header
    # only the scratch copies were written: the source tree is as it was, and no git repo appeared in it
    assert _files(tree) == TREE_FILES


def test_quick_matrix_run_prints_the_table(tmp_path: Path) -> None:
    tree = _tiny_tree(tmp_path)
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--matrix", "--quick", "--trees", str(tree), "--jobs", "1", "--no-hipify",
         "--slowest", "2", "--scratch", str(tmp_path / "scratch"), "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    text = proc.stdout
    header = next(line for line in text.splitlines() if line.startswith("tree "))
    for column in ("tool", "-j", "runs", "wall s", "files/s", "lines/s", "max RSS MiB", "tree RSS MiB", "ratio"):
        assert column in header
    for tool in ("grep audit (playbook)", "porter audit (cold)", "porter audit (warm cache)",
                 "porter apply --dry-run", "C++ pass (audit --select PRT5)", "porter check (3 files)"):
        assert tool in text, tool
    assert "× grep" in text
    listed = text.split("slowest files:", 1)[1]
    assert any(name in listed for name in ("pkg/model.py", "csrc/reduce.cu", "requirements.txt", "pkg/__init__.py"))
    assert "tiny: 5 files (1 C/C++/CUDA)" in text
    md = out.read_text(encoding="utf-8")
    assert md.startswith("# porter benchmarks")
    assert "| tiny | grep audit (playbook) | 1 | 1 |" in md
    assert "## Targets" in md and "## Where porter spends its time" in md
    assert _files(tree) == TREE_FILES


# -- the arithmetic, on made-up samples ----------------------------------------------------------


def _m(targets_mod, key: str, cpu: float, wall: float, rc: int = 0, rss_kib: int = 10240):  # type: ignore[no-untyped-def]
    sample = targets_mod.harness.Sample(wall, rss_kib, rss_kib, rc, cpu=cpu)
    m = targets_mod.Measurement(key, key, ["true"], Path("."), 1)
    m.samples.append(sample)
    return m


def _verdicts(targets_mod, ms):  # type: ignore[no-untyped-def]
    suite = targets_mod.Suite()
    for m in ms:
        suite.add(m)
    return {t.name: t for t in targets_mod.targets(suite)}


def test_cold_audit_ratio_against_the_ast_floor(targets_mod) -> None:  # type: ignore[no-untyped-def]
    t = _verdicts(targets_mod, [_m(targets_mod, "ast", 2.0, 2.1), _m(targets_mod, "cold1", 5.9, 6.0)])
    row = t["cold audit vs stdlib ast.parse floor"]
    assert row.verdict == "met" and row.ratio.startswith("2.95× CPU")
    t = _verdicts(targets_mod, [_m(targets_mod, "ast", 2.0, 2.1), _m(targets_mod, "cold1", 6.1, 6.0)])
    assert t["cold audit vs stdlib ast.parse floor"].verdict == "**missed**"


def test_pool_overhead_is_cpu_of_two_jobs_over_one(targets_mod) -> None:  # type: ignore[no-untyped-def]
    t = _verdicts(targets_mod, [_m(targets_mod, "cold1", 100.0, 100.0), _m(targets_mod, "cold2", 104.0, 55.0)])
    assert t["pool overhead"].verdict == "met" and "+4.0 % CPU" in t["pool overhead"].ratio
    t = _verdicts(targets_mod, [_m(targets_mod, "cold1", 100.0, 100.0), _m(targets_mod, "cold2", 106.0, 55.0)])
    assert t["pool overhead"].verdict == "**missed**"


def test_warm_run_needs_both_cpu_and_wall_within_twice_grep(targets_mod) -> None:  # type: ignore[no-untyped-def]
    ok = _verdicts(targets_mod, [_m(targets_mod, "grep", 0.10, 0.10), _m(targets_mod, "warm", 0.19, 0.2)])
    assert ok["warm re-run vs grep"].verdict == "met"
    slow_wall = _verdicts(targets_mod, [_m(targets_mod, "grep", 0.10, 0.10), _m(targets_mod, "warm", 0.19, 0.3)])
    assert slow_wall["warm re-run vs grep"].verdict == "**missed**"


def test_failed_or_unavailable_measurements_are_not_judged(targets_mod) -> None:  # type: ignore[no-untyped-def]
    failed = _m(targets_mod, "ast", 1.0, 1.0, rc=2)
    failed.ok_rc = (0,)
    tf = targets_mod.Measurement("torchfix", "TorchFix -j 1", ["torchfix"], Path("."), 1, unavailable="not installed")
    t = _verdicts(targets_mod, [failed, tf, _m(targets_mod, "cold1", 1.0, 1.0)])
    assert t["cold audit vs stdlib ast.parse floor"].ref_value == "FAILED (exit 2)"
    assert t["cold audit vs stdlib ast.parse floor"].verdict == "n/a"
    assert t["cold audit vs TorchFix -j 1"].ref_value == "unavailable: not installed"
    assert t["cold audit vs TorchFix -j 1"].verdict == "n/a"


def test_check_and_migrate_limits(targets_mod) -> None:  # type: ignore[no-untyped-def]
    t = _verdicts(targets_mod, [_m(targets_mod, "check1clean", 0.25, 0.3), _m(targets_mod, "check10c", 0.41, 0.3),
                                _m(targets_mod, "migrate", 30.0, 9.9)])
    assert t["porter check, 1 file, no finding, --no-cache"].verdict == "met"
    assert t["porter check, 10 files, cache"].verdict == "**missed**"
    assert t["porter migrate"].verdict == "met"  # judged on wall time (2 cores), not CPU


def _cpp_suite(targets_mod, same):  # type: ignore[no-untyped-def]
    suite = targets_mod.Suite()
    suite.cuda_keys.append(("t", "cpp:t"))
    for m in (_m(targets_mod, "cpp:t:porter", 0.15, 0.16), _m(targets_mod, "cpp:t:hipify", 1.4, 1.4),
              _m(targets_mod, "cpp:t:hipify-alone", 0.2, 0.25)):
        suite.add(m)
    suite.ms["cpp:t:hipify"].extra.append({"hipify_cpu_s": 0.05, "hipify_s": 0.05})
    if same is not None:
        suite.hipify_same["cpp:t"] = same
    return {t.name: t for t in targets_mod.targets(suite)}


def test_cpp_pass_has_a_verdict_against_each_hipify_reference(targets_mod) -> None:  # type: ignore[no-untyped-def]
    t = _cpp_suite(targets_mod, True)
    call, alone, whole = (t["C++ pass vs hipify's call (t)"], t["C++ pass vs hipify's own start-up (t)"],
                          t["C++ pass vs hipify's process (t)"])
    assert call.verdict == "**missed**" and call.ratio.startswith("3.00× CPU")
    assert alone.verdict == "met" and alone.ratio.startswith("0.75× CPU") and "without torch's package" in alone.reference
    assert whole.verdict == "met" and whole.ratio.startswith("0.11× CPU")
    # hipify without torch's package import is a reference only where it wrote what hipify writes
    differs = _cpp_suite(targets_mod, False)["C++ pass vs hipify's own start-up (t)"]
    assert differs.verdict == "n/a" and "not a valid reference" in differs.ref_value
    unknown = _cpp_suite(targets_mod, None)["C++ pass vs hipify's own start-up (t)"]
    assert unknown.verdict == "n/a" and "not judged" in unknown.ref_value


def test_hipify_without_torchs_package_import_does_hipifys_work(targets_mod, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The child that loads torch's hipify modules without torch/__init__.py leaves the same files as the
    child that imports torch, and never runs torch's package import."""
    # torch is a test dependency (the README's test command and .ci/run install it)
    assert targets_mod.harness.package_dir("torch") is not None, "torch is not installed"
    tree = _tiny_tree(tmp_path)
    (tree / "csrc" / "ops.cpp").write_text("#include <cuda_runtime.h>\nvoid f() { cudaMalloc(0, 0); }\n",
                                           encoding="utf-8")
    suite = targets_mod.Suite()
    copies = []
    for key, child in (("hipify", targets_mod.harness.HIPIFY_CHILD),
                       ("hipify-alone", targets_mod.harness.HIPIFY_ALONE_CHILD)):
        copy = tmp_path / key
        targets_mod.harness.copy_files(tree, ["csrc/reduce.cu", "csrc/ops.cpp"], copy)
        copies.append(copy)
        suite.add(targets_mod.Measurement(f"cpp:tiny:{key}", key, [sys.executable, "-P", "-c", child, str(copy)],
                                          tmp_path, 1, ok_rc=(0,), parse=targets_mod.last_json))
    suite.hipify_copies["cpp:tiny"] = (copies[0], copies[1])
    targets_mod.run_interleaved(list(suite.ms.values()))
    alone = suite.ms["cpp:tiny:hipify-alone"]
    assert alone.done and alone.extra[0]["torch_init_ran"] == 0 and alone.extra[0]["files"] == 2
    written = targets_mod.tree_files(copies[1])
    assert "csrc/ops_hip.cpp" in written and b"hipMalloc" in written["csrc/ops_hip.cpp"]
    targets_mod.compare_hipify_outputs(suite)
    assert suite.hipify_same == {"cpp:tiny": True}
    # a copy that differs is caught
    (copies[1] / "csrc" / "ops_hip.cpp").write_text("changed", encoding="utf-8")
    suite.notes.clear()
    targets_mod.compare_hipify_outputs(suite)
    assert suite.hipify_same == {"cpp:tiny": False} and "did NOT reproduce" in suite.notes[0]


def test_interleaving_runs_rounds_in_order(targets_mod, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "log"
    ms = []
    for key, runs in (("a", 2), ("b", 1), ("c", 2)):
        ms.append(targets_mod.Measurement(key, key, ["sh", "-c", f"echo {key} >> {log}"], tmp_path, runs))
    targets_mod.run_interleaved(ms)
    assert log.read_text().split() == ["a", "b", "c", "a", "c"]
    assert all(s.cpu >= 0 and s.wall > 0 for m in ms for s in m.samples)


def test_materialise_a_bare_repository(targets_mod, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = _tiny_tree(tmp_path)
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run(["git", "init", "-q"], cwd=src, check=True)
    subprocess.run(["git", "add", "-A"], cwd=src, check=True)
    subprocess.run([*git, "commit", "-qm", "x", "--no-gpg-sign"], cwd=src, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, check=True, capture_output=True, text=True).stdout
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(tmp_path / "bare")], check=True)
    dest = tmp_path / "out"
    origin = targets_mod.materialise_repo(tmp_path / "bare", dest)
    assert head.strip()[:12] in origin
    assert [f for f in _files(dest) if not f.startswith(".git/")] == TREE_FILES
    status = subprocess.run(["git", "status", "--porcelain"], cwd=dest, check=True, capture_output=True, text=True)
    assert status.stdout == ""  # one clean commit, as porter migrate wants


# -- identity.py ---------------------------------------------------------------------------------


def _report(findings: list[dict[str, object]]):  # type: ignore[no-untyped-def]
    return json.dumps({"files_scanned": 2, "findings": findings}).encode()


F1 = {"code": "PRT041", "path": "a.py", "line": 3, "column": 1, "end_line": 3, "end_column": 9, "message": "m",
      "fix": "safe", "fix_title": "t", "severity": "info", "category": "benign", "effort_hours": 0.0}
F2 = dict(F1, line=7, end_line=7)


def test_identity_ignores_order_but_not_any_field(identity_mod) -> None:  # type: ignore[no-untyped-def]
    run = identity_mod.Run
    same = identity_mod.compare_audits("t", run(1, _report([F1, F2]), b"", 0.1), run(1, _report([F2, F1]), b"", 0.1))
    assert same.identical and same.old_count == same.new_count == 2
    moved = dict(F2, end_column=10)
    diff = identity_mod.compare_audits("t", run(1, _report([F1, F2]), b"", 0.1), run(1, _report([F1, moved]), b"", 0))
    assert not diff.identical
    assert len(diff.only_old) == len(diff.only_new) == 1
    assert "a.py:7:1-7:10 PRT041" in identity_mod.show_record(diff.only_new[0])
    # a duplicated finding is a difference too (multisets, not sets)
    dup = identity_mod.compare_audits("t", run(1, _report([F1]), b"", 0.1), run(1, _report([F1, F1]), b"", 0.1))
    assert not dup.identical and len(dup.only_new) == 1


def test_identity_reports_a_failed_run(identity_mod) -> None:  # type: ignore[no-untyped-def]
    run = identity_mod.Run
    res = identity_mod.compare_audits("t", run(2, b"", b"boom", 0.1), run(0, _report([]), b"", 0.1))
    assert not res.identical and "old: porter exited 2" in res.failure
    assert identity_mod.summary(b"porter: 3/3 files (100%), 9.1 files/s, 1 s\nporter: would fix 2 site(s)\n") == [
        b"porter: would fix 2 site(s)"]


def test_materialise_a_mirror_that_lacks_a_blob(targets_mod, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # a fetched mirror may lack large files; git archive of HEAD then fails, so those files are left out
    src = _tiny_tree(tmp_path)
    bare = tmp_path / "bare"
    git = ["git", "--git-dir", str(bare), "--work-tree", str(src)]
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x", "--no-gpg-sign"],
                   check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD:pkg/util.py"], check=True, capture_output=True,
                         text=True).stdout.strip()
    (bare / "objects" / sha[:2] / sha[2:]).unlink()  # loose objects: a commit straight into the bare repo
    assert targets_mod.missing_blobs(bare) == ["pkg/util.py"]
    dest = tmp_path / "out"
    origin = targets_mod.materialise_repo(bare, dest)
    assert "without 1 file(s) the mirror lacks: pkg/util.py" in origin
    assert [f for f in _files(dest) if not f.startswith(".git/")] == [f for f in TREE_FILES if f != "pkg/util.py"]
