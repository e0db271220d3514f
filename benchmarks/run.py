#!/usr/bin/env python3
"""Benchmark porter against the baselines a user would compare it with.

``python benchmarks/run.py [options]`` measures issue #14's targets side by side in one run, with
CPU and wall seconds (see ``benchmarks/targets.py`` and ``--help``). ``python benchmarks/run.py
--matrix [options]`` runs the older per-tree matrix described below.

For every tree this measures wall time, files/s, lines/s and peak memory of

* the porting playbook's ``grep -rn`` audit (Step 1, four pipelines run together): the floor;
* ``porter audit`` cold (``--no-cache``) with 1, 2 and all cores, and warm (second cached run);
* ``porter apply --dry-run`` with 1 and all cores;
* ``porter check`` on 10 Python files that mention CUDA (what a pre-commit hook sees);
* on trees with C/C++/CUDA sources: the C++ warp-size pass (``porter audit --select PRT5``)
  with 1 and all cores, and ``torch.utils.hipify`` (one process, as torch runs it).

Every tool reads the same scratch copy of the tree, which holds exactly the files porter's
discovery selects (``.py``, ``.cu``, ``.cuh``, ``.cpp``, ``.h``, manifests…). porter always runs
through its command line in a subprocess, so start-up time counts. Memory is reported twice:
the largest single process (``wait4``'s ``ru_maxrss``, which covers the process and every
descendant it reaped, i.e. the pool workers) and the peak of the whole process tree's summed
RSS, sampled from ``/proc`` every 20 ms.

    python benchmarks/run.py --matrix             # torch, transformers, fixtures x20, C++ fixtures x20
    python benchmarks/run.py --matrix --cuda-tree /tmp/bench/apex --cuda-tree /tmp/bench/flash-attn
    python benchmarks/run.py --matrix --quick     # small trees, one repeat (development)

The plain-text table goes to stdout; ``--out`` receives the Markdown version for the README.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without an install
    sys.path.insert(0, str(REPO))

from porter import __version__ as PORTER_VERSION  # noqa: E402
from porter import languages  # noqa: E402
from porter.config import Settings  # noqa: E402
from porter.discovery import discover  # noqa: E402

# The porting playbook's Step 1, verbatim: what a user runs before porter exists.
GREP_AUDIT = textwrap.dedent(
    """\
    grep -rn "\\.cuda()\\|device='cuda'\\|device=\\"cuda\\"" --include="*.py" .
    grep -rn "torch.cuda\\." --include="*.py" . | grep -v "is_available\\|current_device\\|empty_cache"
    grep -rln "load_inline\\|CUDAExtension\\|__global__\\|cutlass\\|cub::" .
    grep -rn "cu12\\|nvidia-\\|flash-attn\\|bitsandbytes\\|xformers\\|apex\\|transformer-engine" requirements*.txt pyproject.toml 2>/dev/null
    true
    """
)

# Runs in a fresh interpreter: torch's hipify keeps its results in a module-global dict.
HIPIFY_CHILD = textwrap.dedent(
    """\
    import contextlib, io, json, sys, time
    t0 = time.perf_counter()
    from torch.utils.hipify import hipify_python
    t1 = time.perf_counter()
    c1 = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        res = hipify_python.hipify(project_directory=sys.argv[1], output_directory=sys.argv[1],
                                   includes=["*"], show_detailed=False, show_progress=False,
                                   is_pytorch_extension=True)
    t2 = time.perf_counter()
    c2 = time.process_time()
    print(json.dumps({"import_s": t1 - t0, "hipify_s": t2 - t1, "hipify_cpu_s": c2 - c1, "files": len(res)}))
    """
)

# The same call with hipify's own start-up only: a fresh process that loads torch's hipify package
# (torch/utils/hipify: __init__ and version, hipify_python, cuda_to_hip_mappings) from the installed
# torch WITHOUT running torch/__init__.py. `torch` and `torch.utils` are registered as bare packages
# whose __path__ is the installed folders; hipify_python imports only the standard library and its
# sibling modules, so the call runs the same code on the same tree (targets.py checks that both
# processes leave the same files).
HIPIFY_ALONE_CHILD = textwrap.dedent(
    """\
    import contextlib, importlib.util, io, json, os, sys, time, types
    t0 = time.perf_counter()
    base = list(importlib.util.find_spec("torch").submodule_search_locations)[0]  # finds, runs nothing
    for name, folder in (("torch", base), ("torch.utils", os.path.join(base, "utils"))):
        stub = types.ModuleType(name)
        stub.__path__ = [folder]
        sys.modules[name] = stub
    from torch.utils.hipify import hipify_python
    t1 = time.perf_counter()
    c1 = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        res = hipify_python.hipify(project_directory=sys.argv[1], output_directory=sys.argv[1],
                                   includes=["*"], show_detailed=False, show_progress=False,
                                   is_pytorch_extension=True)
    t2 = time.perf_counter()
    c2 = time.process_time()
    print(json.dumps({"import_s": t1 - t0, "hipify_s": t2 - t1, "hipify_cpu_s": c2 - c1, "files": len(res),
                      "torch_init_ran": int(hasattr(sys.modules["torch"], "__version__"))}))
    """
)

# Diagnostics (--slowest): porter's own per-file timings from one serial in-process audit.
SLOWEST_CHILD = textwrap.dedent(
    """\
    import json, sys, time
    from pathlib import Path
    from porter import runner
    from porter.config import ConfigRequest, resolve
    from porter.engine import analyze
    root = Path(sys.argv[1])
    settings = resolve(root, ConfigRequest())
    t0 = time.perf_counter()  # one-time set-up (lazy imports, tree-sitter queries) is not any file's cost
    analyze("warm.py", "import torch\\nx = torch.zeros(1).cuda()\\n", "python", settings)
    analyze("warm.cu", "__global__ void k(float* x) { x[threadIdx.x % 32] = 0; }\\n", "cuda", settings)
    warmup = time.perf_counter() - t0
    res = runner.run(root, [root], settings, "audit", jobs=1, use_cache=False)
    per_language = {}
    for f in res.files:
        per_language[f.language] = per_language.get(f.language, 0.0) + f.seconds
    top = sorted(([f.seconds, f.relpath, f.language] for f in res.files), reverse=True)[: int(sys.argv[2])]
    print(json.dumps({"total": res.seconds, "warmup": warmup, "per_language": per_language, "top": top}))
    """
)
CHECK_FILES = 10
KIB = 1024
MATRIX_CACHE = "xdg-cache"  # porter's cache folder ($XDG_CACHE_HOME) inside the matrix's scratch folder


# -- measuring one command ------------------------------------------------------------------


@dataclass
class Sample:
    wall: float
    max_rss_kib: int  # largest single process (the command or any descendant it reaped)
    tree_rss_kib: int  # peak of the summed RSS of the command's process tree (sampled)
    rc: int
    stdout: str = ""
    cpu: float = 0.0  # user + sys seconds of the process and every descendant it reaped (wait4's rusage)


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                out += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
    return out


def _tree_rss_kib(pid: int) -> int:
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _rss_kib(p)
        todo += _children(p)
    return total


def measure(cmd: Sequence[str], cwd: Path, *, capture: bool = False, timeout: float = 3600.0,
            env: dict[str, str] | None = None) -> Sample:
    """Run ``cmd``; wall time from spawn to reap, rusage of the whole process tree."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        list(cmd), cwd=cwd, stdin=subprocess.DEVNULL, env=env,
        stdout=subprocess.PIPE if capture else subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_kib(proc.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = ""
    if capture:
        assert proc.stdout is not None
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        out = proc.stdout.read().decode("utf-8", "replace")
        proc.stdout.close()
        timer.cancel()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss of a reaped child already covers its own reaped children (Linux: KiB)
    return Sample(wall, int(usage.ru_maxrss), max(peak[0], int(usage.ru_maxrss)), proc.returncode, out,
                  cpu=usage.ru_utime + usage.ru_stime)


def porter_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "porter", *args]


# -- trees ----------------------------------------------------------------------------------


@dataclass
class Tree:
    name: str
    source: str  # where it came from, for the report
    root: Path  # the scratch copy every tool reads
    files: list[str]
    by_language: dict[str, int]
    lines: int
    cpp_files: int
    python_files: list[str]
    cuda_tree: bool = False  # a CUDA project: the C++ pass and hipify run on it

    @property
    def nfiles(self) -> int:
        return len(self.files)


def package_dir(name: str) -> Path | None:
    """An installed package's directory, found without importing it (importing torch costs seconds)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def porter_files(root: Path) -> list[str]:
    """The files porter's discovery analyses under ``root`` (default settings)."""
    return [ref.relpath for ref in discover(root, [root], Settings()).files]


def copy_files(src: Path, rels: Sequence[str], dest: Path) -> None:
    for rel in rels:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)


def make_tree(name: str, source: str, root: Path) -> Tree:
    files = porter_files(root)
    by_language: dict[str, int] = {}
    lines = 0
    python: list[str] = []
    for rel in files:
        lang = languages.detect(rel) or "?"
        by_language[lang] = by_language.get(lang, 0) + 1
        with open(root / rel, "rb") as fh:
            data = fh.read()
        lines += data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
        if lang == languages.PYTHON:
            python.append(rel)
    return Tree(name, source, root, files, by_language, lines, by_language.get(languages.CUDA, 0), python)


def copy_tree(name: str, src: Path, scratch: Path, copies: int = 1, source: str | None = None) -> Tree:
    """Copy the files porter would analyse in ``src`` (``copies`` times) into a fresh scratch dir."""
    rels = porter_files(src)
    dest = scratch / name.replace(" ", "_").replace("×", "x")
    if dest.exists():
        shutil.rmtree(dest)
    for i in range(copies):
        copy_files(src, rels, dest if copies == 1 else dest / f"copy{i:03d}")
    return make_tree(name, source or str(src), dest)


def fixture_dirs(cpp: bool) -> list[tuple[Path, list[str]]]:
    """porter's own test fixtures: all of tests/fixtures, or only its C/C++/CUDA sources."""
    out = []
    for base in (REPO / "tests" / "fixtures", REPO / "tests" / "kernels"):
        if not base.is_dir():
            continue
        rels = porter_files(base)
        if cpp:
            rels = [r for r in rels if languages.detect(r) == languages.CUDA]
        elif base.name == "kernels":
            continue
        out.append((base, rels))
    return out


def scaled_fixtures(name: str, scratch: Path, copies: int, cpp: bool) -> Tree:
    dest = scratch / name.replace(" ", "_").replace("×", "x")
    if dest.exists():
        shutil.rmtree(dest)
    for i in range(copies):
        for base, rels in fixture_dirs(cpp):
            copy_files(base, rels, dest / f"copy{i:03d}" / base.name)
    what = "C/C++/CUDA files of tests/fixtures and tests/kernels" if cpp else "tests/fixtures"
    return make_tree(name, f"porter's {what}, {copies} copies", dest)


# -- the suite ------------------------------------------------------------------------------


@dataclass
class Row:
    tree: str
    tool: str
    jobs: str
    samples: list[Sample]
    files: int
    lines: int
    baseline: str = "grep"  # what the ratio column compares against
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def wall(self) -> float:
        return statistics.median(s.wall for s in self.samples)

    @property
    def max_rss_mib(self) -> float:
        return max(s.max_rss_kib for s in self.samples) / KIB

    @property
    def tree_rss_mib(self) -> float:
        return max(s.tree_rss_kib for s in self.samples) / KIB

    @property
    def failed(self) -> bool:
        return any(s.rc not in (0, 1) for s in self.samples)


@dataclass
class Options:
    jobs: int
    repeat: int
    check_repeat: int
    hipify: bool
    slowest: int = 0
    cpp_everywhere: bool = False
    big_tree_files: int = 2000  # trees larger than this get one timed run unless --repeat was given
    repeat_given: bool = False
    log: bool = True


def say(opts: Options, msg: str) -> None:
    if opts.log:
        print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def timed(opts: Options, cmd: Sequence[str], cwd: Path, repeat: int, label: str) -> list[Sample]:
    out = []
    for i in range(repeat):
        s = measure(cmd, cwd)
        say(opts, f"{label} #{i + 1}: {s.wall:.2f} s, {s.tree_rss_kib / KIB:.0f} MiB (rc {s.rc})")
        out.append(s)
    return out


def job_levels(all_cores: int, with_two: bool) -> list[int]:
    levels = {1, all_cores}
    if with_two and all_cores >= 2:
        levels.add(2)
    return sorted(levels)


def pick_check_files(tree: Tree, n: int = CHECK_FILES) -> list[str]:
    """``n`` Python files (not stubs) that mention CUDA, spread evenly over the tree (deterministic)."""
    scored: list[str] = []
    for rel in tree.python_files:
        if rel.endswith(".pyi"):
            continue
        try:
            text = (tree.root / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "torch.cuda" in text or ".cuda(" in text:
            scored.append(rel)
    if len(scored) < n:
        scored += [r for r in tree.python_files if r not in scored and not r.endswith(".pyi")]
    if len(scored) <= n:
        return scored[:n]
    step = len(scored) / n
    return [scored[int(i * step)] for i in range(n)]


def drop_cache(tree: Tree) -> None:
    """Forget porter's cache: matrix_main points ``XDG_CACHE_HOME`` (where porter keeps it) into the scratch folder."""
    shutil.rmtree(tree.root / ".porter_cache", ignore_errors=True)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and Path(xdg).name == MATRIX_CACHE:
        shutil.rmtree(xdg, ignore_errors=True)


def bench_tree(tree: Tree, opts: Options) -> list[Row]:
    rows: list[Row] = []
    root, n, lines = tree.root, tree.nfiles, tree.lines
    if n > opts.big_tree_files and not opts.repeat_given and opts.repeat > 1:
        say(opts, f"{n} files: one timed run per measurement (pass --repeat to insist)")
        opts = replace(opts, repeat=1)
    print(f"== {tree.name}: {n} files, {lines} lines ({tree.source})", file=sys.stderr, flush=True)
    drop_cache(tree)

    def add(tool: str, jobs: str, samples: list[Sample], *, files: int = n, nlines: int = lines,
            baseline: str = "grep") -> Row:
        row = Row(tree.name, tool, jobs, samples, files, nlines, baseline=baseline)
        rows.append(row)
        return row

    add("grep audit (playbook)", "1", timed(opts, ["bash", "-c", GREP_AUDIT], root, opts.repeat, "grep"))
    for j in job_levels(opts.jobs, with_two=True):
        cmd = porter_cmd("audit", "--no-cache", "--format", "json", "-j", str(j), ".")
        add("porter audit (cold)", str(j), timed(opts, cmd, root, opts.repeat, f"audit -j{j}"))
    for j in job_levels(opts.jobs, with_two=False):
        cmd = porter_cmd("apply", "--dry-run", "-j", str(j), ".")
        add("porter apply --dry-run", str(j), timed(opts, cmd, root, opts.repeat, f"apply -j{j}"))
    if tree.cpp_files and (tree.cuda_tree or opts.cpp_everywhere):
        for j in job_levels(opts.jobs, with_two=False):
            cmd = porter_cmd("audit", "--no-cache", "--select", "PRT5", "--format", "json", "-j", str(j), ".")
            add("C++ pass (audit --select PRT5)", str(j), timed(opts, cmd, root, opts.repeat, f"C++ pass -j{j}"),
                baseline="hipify", files=tree.cpp_files)
        if opts.hipify:
            add_hipify(tree, opts, rows)
    # warm: one run writes porter's cache (in the scratch folder, see matrix_main), the timed runs read it
    warm = porter_cmd("audit", "--format", "json", "-j", str(opts.jobs), ".")
    prime = measure(warm, root)
    say(opts, f"audit priming run: {prime.wall:.2f} s")
    add("porter audit (warm cache)", str(opts.jobs), timed(opts, warm, root, opts.repeat, "audit warm"))
    check = pick_check_files(tree)
    if check:
        label = f"porter check ({len(check)} files)"
        add(f"{label}, cache", "default", timed(opts, porter_cmd("check", *check), root, opts.check_repeat,
                                                 "check cached"), baseline="-", files=len(check),
            nlines=sum(count_lines(root / r) for r in check))
        drop_cache(tree)
        add(f"{label}, --no-cache", "default",
            timed(opts, porter_cmd("check", "--no-cache", *check), root, opts.check_repeat, "check cold"),
            baseline="-", files=len(check), nlines=sum(count_lines(root / r) for r in check))
    drop_cache(tree)
    return rows


@dataclass
class Slowest:
    tree: str
    total: float
    warmup: float
    per_language: dict[str, float]
    top: list[tuple[float, str, str]]


def slowest_files(tree: Tree, opts: Options) -> Slowest | None:
    """The files porter spends longest on (one serial audit; diagnostics, not a benchmark row)."""
    s = measure([sys.executable, "-P", "-c", SLOWEST_CHILD, str(tree.root), str(opts.slowest)], tree.root, capture=True)
    try:
        info = json.loads(s.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        say(opts, f"per-file timing failed (rc {s.rc})")
        return None
    return Slowest(tree.name, info["total"], info["warmup"], info["per_language"], [tuple(t) for t in info["top"]])


def render_slowest(items: list[Slowest], markdown: bool) -> list[str]:
    out: list[str] = []
    for sl in items:
        langs = ", ".join(f"{k} {v:.2f} s" for k, v in sorted(sl.per_language.items(), key=lambda kv: -kv[1]))
        out.append(f"{sl.tree}: serial in-process audit {sl.total:.2f} s ({langs}) after a one-time set-up of "
                   f"{sl.warmup:.2f} s (imports, tree-sitter queries; paid by every process); slowest files:")
        for sec, rel, lang in sl.top:
            out.append(f"  - `{rel}` ({lang}): {sec:.3f} s" if markdown else f"    {sec:7.3f} s  {rel} ({lang})")
    return out


def count_lines(path: Path) -> int:
    try:
        data = path.read_bytes()
    except OSError:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def add_hipify(tree: Tree, opts: Options, rows: list[Row]) -> None:
    """torch.utils.hipify in place on a fresh copy per repeat; only the hipify() call is timed."""
    samples: list[Sample] = []
    calls: list[float] = []
    imports: list[float] = []
    scratch = tree.root.parent / f"{tree.root.name}.hipify"
    for i in range(opts.repeat):
        shutil.rmtree(scratch, ignore_errors=True)
        cpp = [r for r in tree.files if languages.detect(r) == languages.CUDA]
        copy_files(tree.root, cpp, scratch)
        s = measure([sys.executable, "-P", "-c", HIPIFY_CHILD, str(scratch)], scratch.parent, capture=True)
        try:
            info = json.loads(s.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            say(opts, f"hipify failed (rc {s.rc}); skipped")
            shutil.rmtree(scratch, ignore_errors=True)
            return
        hip_files = int(info["files"])
        say(opts, f"hipify #{i + 1}: {hip_files} files, call {info['hipify_s']:.2f} s, import {info['import_s']:.2f} s, "
                  f"process {s.wall:.2f} s")
        calls.append(info["hipify_s"])
        imports.append(info["import_s"])
        samples.append(s)
    shutil.rmtree(scratch, ignore_errors=True)
    imp = statistics.median(imports)
    hip_files = hip_files if samples else 0
    # the row's wall is the hipify() call alone; the process time (with torch's import) is a note
    timed_samples = [Sample(c, s.max_rss_kib, s.tree_rss_kib, s.rc) for c, s in zip(calls, samples, strict=True)]
    rows.append(Row(tree.name, "torch.utils.hipify (call only)", "1", timed_samples, tree.cpp_files, tree.lines,
                    baseline="hipify", note=f"{hip_files} files in hipify's result; import of torch {imp:.2f} s",
                    extra={"import_s": imp}))
    rows.append(Row(tree.name, "torch.utils.hipify (process, with import)", "1", samples, tree.cpp_files,
                    tree.lines, baseline="-"))


# -- reporting ------------------------------------------------------------------------------


def ratio(row: Row, rows: list[Row]) -> str:
    if row.baseline == "-":
        return ""
    base = next((r for r in rows if r.tree == row.tree and r.tool.startswith(
        "grep" if row.baseline == "grep" else "torch.utils.hipify (call")), None)
    if base is None or base is row or base.wall <= 0:
        return ""
    return f"{row.wall / base.wall:.2f}× {row.baseline}"


def table(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        out.append([
            r.tree, r.tool, r.jobs, str(len(r.samples)), f"{r.wall:.2f}", f"{r.files / r.wall:,.0f}" if r.wall else "",
            f"{r.lines / r.wall:,.0f}" if r.wall else "", f"{r.max_rss_mib:,.0f}", f"{r.tree_rss_mib:,.0f}",
            ratio(r, rows) + (" (FAILED)" if r.failed else ""),
        ])
    return out


HEADERS = ["tree", "tool", "-j", "runs", "wall s", "files/s", "lines/s", "max RSS MiB", "tree RSS MiB", "ratio"]


RIGHT = {i for i, h in enumerate(HEADERS) if h not in ("tree", "tool", "ratio")}


def render_text(rows: list[Row]) -> str:
    cells = [HEADERS] + table(rows)
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADERS))]
    right = RIGHT
    lines = []
    for k, c in enumerate(cells):
        lines.append("  ".join(v.rjust(widths[i]) if i in right else v.ljust(widths[i]) for i, v in enumerate(c)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    try:
        load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return (f"{os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}, porter {PORTER_VERSION}, "
            f"{platform.system()} {platform.release()}, load average at start {load}, "
            f"{_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")


def targets(rows: list[Row], trees: list[Tree]) -> list[str]:
    """The issue's targets, each as 'measured -> meets/misses' (only where measured)."""
    out = []

    def find(tree: str, tool: str, jobs: str | None = None) -> Row | None:
        return next((r for r in rows if r.tree == tree and r.tool.startswith(tool)
                     and (jobs is None or r.jobs == jobs)), None)

    def verdict(ok: bool) -> str:
        return "meets" if ok else "**misses**"

    for t in trees:
        grep = find(t.name, "grep")
        if grep is not None and t.python_files:
            cold2 = find(t.name, "porter audit (cold)", "2")
            if cold2:
                x = cold2.wall / grep.wall
                out.append(f"{t.name}: `porter audit` cold with 2 cores = {x:.1f}× grep (target ≤ 5×): {verdict(x <= 5)}")
            warm = find(t.name, "porter audit (warm")
            if warm:
                x = warm.wall / grep.wall
                out.append(f"{t.name}: warm re-run = {x:.2f}× grep (target ≤ 1.5×): {verdict(x <= 1.5)}")
        for r in rows:
            if r.tree == t.name and r.tool.startswith("porter check") and r.files == CHECK_FILES:
                out.append(f"{t.name}: {r.tool} = {r.wall:.2f} s end to end (target < 0.5 s): {verdict(r.wall < 0.5)}")
        hip = find(t.name, "torch.utils.hipify (call")
        hip_proc = find(t.name, "torch.utils.hipify (process")
        if hip is not None:
            for r in rows:
                if r.tree == t.name and r.tool.startswith("C++ pass"):
                    x = r.wall / hip.wall
                    line = (f"{t.name}: C++ pass -j{r.jobs} = {x:.2f}× torch.utils.hipify's call "
                            f"(target ≤ 1×): {verdict(x <= 1)}")
                    if hip_proc is not None:
                        line += f"; {r.wall / hip_proc.wall:.2f}× hipify's whole process (import of torch included)"
                    out.append(line)
    peak = max((r for r in rows if "porter" in r.tool or "C++" in r.tool), key=lambda r: r.tree_rss_mib, default=None)
    if peak is not None:
        out.append(f"peak memory of porter (all processes together): {peak.tree_rss_mib:,.0f} MiB "
                   f"({peak.tree}, {peak.tool}, -j{peak.jobs}); largest single process "
                   f"{max(r.max_rss_mib for r in rows if 'porter' in r.tool or 'C++' in r.tool):,.0f} MiB")
    return out


def render_markdown(rows: list[Row], trees: list[Tree], argv: Sequence[str], quick: bool, machine: str,
                    slow: Sequence[Slowest] = ()) -> str:
    out = ["# porter benchmarks", ""]
    if quick:
        out += ["> `--quick` run: small development trees, one run each. Not a reference measurement.", ""]
    out += [f"Machine: {machine}.", "",
           f"Command: `python benchmarks/run.py --matrix {' '.join(argv)}` (wall s = the median of "
           "the row's runs).", "", "## Trees", "",
           "| tree | source | files | lines | by language |", "|---|---|---:|---:|---|"]
    for t in trees:
        langs = ", ".join(f"{k} {v}" for k, v in sorted(t.by_language.items(), key=lambda kv: -kv[1]))
        out.append(f"| {t.name} | {t.source} | {t.nfiles:,} | {t.lines:,} | {langs} |")
    out += ["", "## Results", "", "| " + " | ".join(HEADERS) + " |",
            "|" + "|".join("---:" if i in RIGHT else "---" for i in range(len(HEADERS))) + "|"]
    for cells in table(rows):
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    notes = [f"- {r.tree}, {r.tool}: {r.note}" for r in rows if r.note]
    tgt = targets(rows, trees)
    if tgt:
        out += ["", "## Targets", ""] + [f"- {x}" for x in tgt]
    if slow:
        out += ["", "## Where porter spends its time", ""] + render_slowest(list(slow), markdown=True)
    out += ["", "## Notes", "",
            "- Every tool reads the same scratch copy of the tree: exactly the files porter's discovery "
            "selects (Python, C/C++/CUDA, manifests, shell, YAML, Dockerfiles).",
            "- grep audit = the porting playbook's Step 1 (four pipelines), run together by `bash -c`.",
            "- porter runs through its CLI (`python -m porter`) in a subprocess: start-up is included. Cold = "
            "`--no-cache`; warm = the second cached run (the cache lives in the scratch copy).",
            "- files/s and lines/s use the tree's counts; for the C++ pass and hipify, files = C/C++/CUDA files.",
            "- torch.utils.hipify runs in place on a fresh copy in its own interpreter; its row times the "
            "`hipify()` call only, the C++-pass ratio column compares with it (porter's own start-up "
            "included, so it is conservative); a second row times hipify's whole process, torch's import included.",
            "- max RSS = the largest single process (ru_maxrss from wait4, which includes reaped workers); "
            "tree RSS = the peak of the summed RSS of the process and all its descendants, sampled every 20 ms.",
            ] + notes
    return "\n".join(out) + "\n"


# -- main -----------------------------------------------------------------------------------


def build_trees(names: list[str], args: argparse.Namespace, scratch: Path) -> tuple[list[Tree], list[str]]:
    trees: list[Tree] = []
    skipped: list[str] = []
    scale = args.scale if args.scale else (2 if args.quick else 20)
    for name in names:
        started = time.perf_counter()
        if name in ("torch", "transformers"):
            src = package_dir(name)
            if src is None:
                skipped.append(f"{name}: not installed")
                continue
            trees.append(copy_tree(name, src, scratch, source=f"installed {name} package ({src})"))
        elif name == "fixtures":
            trees.append(scaled_fixtures(f"fixtures ×{scale}", scratch, scale, cpp=False))
        elif name == "cuda":
            if args.cuda_tree:
                for path in args.cuda_tree:
                    p = Path(path).resolve()
                    if not p.is_dir():
                        skipped.append(f"{path}: not a directory")
                        continue
                    trees.append(copy_tree(p.name, p, scratch, source=str(p)))
                    trees[-1].cuda_tree = True
            else:
                trees.append(scaled_fixtures(f"C++ fixtures ×{scale}", scratch, scale, cpp=True))
                trees[-1].cuda_tree = True
        else:
            p = Path(name).resolve()
            if not p.is_dir():
                skipped.append(f"{name}: neither a known tree nor a directory")
                continue
            trees.append(copy_tree(p.name, p, scratch, source=str(p)))
            trees[-1].cuda_tree = trees[-1].cpp_files > 0
        if trees:
            print(f"prepared {trees[-1].name} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return trees, skipped


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="benchmarks/run.py --matrix", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small trees (fixtures ×2, C++ fixtures ×2), one repeat: for development and the smoke test")
    ap.add_argument("--trees", default=None,
                    help="comma-separated: torch, transformers, fixtures, cuda, or directories "
                         "(default: torch,transformers,fixtures,cuda; --quick: fixtures,cuda)")
    ap.add_argument("--cuda-tree", action="append", default=[], metavar="PATH",
                    help="a real CUDA source tree for the 'cuda' entry (repeatable; default: porter's C++ fixtures scaled up)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="'all cores' (default: os.cpu_count())")
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per measurement, median reported (default 3, but 1 on trees over 2,000 files; --quick 1)")
    ap.add_argument("--check-repeat", type=int, default=None, help="timed runs of `porter check` (default 5; --quick 1)")
    ap.add_argument("--scale", type=int, default=None, help="copies of the fixtures (default 20; --quick 2)")
    ap.add_argument("--slowest", type=int, default=0, metavar="N",
                    help="also list the N files porter spends longest on per tree (one extra serial audit)")
    ap.add_argument("--cpp-everywhere", action="store_true",
                    help="also run the C++ pass and hipify on torch, transformers and the fixtures "
                         "(by default only on CUDA trees and on directories given in --trees that hold C/C++)")
    ap.add_argument("--no-hipify", action="store_true", help="skip the torch.utils.hipify baseline")
    ap.add_argument("--scratch", type=Path, default=None, help="where the tree copies go (default: a temp dir, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copies")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "RESULTS.md", help="Markdown output")
    return ap.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """The entry point: issue #14's targets (``benchmarks/targets.py``), or ``--matrix`` for the per-tree matrix."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--matrix" not in argv:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import targets

        return targets.main(argv)
    return matrix_main([a for a in argv if a != "--matrix"])


def matrix_main(argv: list[str]) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in (args.trees or ("fixtures,cuda" if args.quick else "torch,transformers,fixtures,cuda"))
             .split(",") if n.strip()]
    if args.cuda_tree and "cuda" not in names:
        names.append("cuda")
    repeat = args.repeat or (1 if args.quick else 3)
    opts = Options(jobs=max(1, args.jobs), repeat=repeat, repeat_given=args.repeat is not None,
                   cpp_everywhere=args.cpp_everywhere,
                   check_repeat=args.check_repeat or (1 if args.quick else 5), hipify=not args.no_hipify,
                   slowest=max(0, args.slowest))
    own_scratch = args.scratch is None
    scratch = Path(tempfile.mkdtemp(prefix="porter-bench-")) if own_scratch else args.scratch.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    # porter keeps its cache under $XDG_CACHE_HOME: keep it in the scratch folder, away from the user's
    os.environ["XDG_CACHE_HOME"] = str(scratch / MATRIX_CACHE)
    machine = machine_line()  # the load average is the one at the start
    print(f"machine: {machine}", file=sys.stderr)
    try:
        trees, skipped = build_trees(names, args, scratch)
        rows: list[Row] = []
        slow: list[Slowest] = []
        for tree in trees:
            rows += bench_tree(tree, opts)
            if opts.slowest:
                found = slowest_files(tree, opts)
                if found is not None:
                    slow.append(found)
    finally:
        if own_scratch and not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(f"porter {PORTER_VERSION} benchmarks — {machine}")
    for t in trees:
        print(f"  {t.name}: {t.nfiles} files ({t.cpp_files} C/C++/CUDA), {t.lines} lines — {t.source}")
    for s in skipped:
        print(f"  skipped {s}")
    print()
    print(render_text(rows))
    print()
    for line in targets(rows, trees):
        print("  " + line.replace("**", ""))
    if slow:
        print()
        for line in render_slowest(slow, markdown=False):
            print("  " + line)
    if args.out:
        md = render_markdown(rows, trees, argv, args.quick, machine, slow)
        if skipped:
            md += "".join(f"- skipped {s}\n" for s in skipped)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(md, encoding="utf-8")
        print(f"\nMarkdown written to {args.out}")
    return 1 if any(r.failed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
