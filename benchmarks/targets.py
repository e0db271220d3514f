"""Issue #14's performance targets, measured side by side in one run (``python benchmarks/run.py``).

Every figure is the median of interleaved runs (round 1 runs every measurement once, A B C …,
then round 2, …) so that a change in the machine's load hits both sides of a ratio. Every
command is a fresh process; CPU seconds are user + sys of the process and of every descendant
it reaped (``os.wait4``'s rusage: porter's pool workers included), wall seconds run from spawn
to reap. The load average is recorded at the start and at the end.

The trees:

* ``python``: the ``.py`` files of the installed torch package (or ``--python-tree DIR``), copied
  to a scratch folder; every tool reads that copy;
* ``cuda``: each ``--cuda-tree DIR`` (default: porter's C/C++/CUDA fixtures, copied ``--scale``
  times);
* ``migrate``: ``--migrate-repo`` (a directory or a bare git repository, materialised as a fresh
  one-commit git repository; default: ``examples/legacy-gpt``).

porter runs with a private ``XDG_CACHE_HOME`` in the scratch folder: a cold run is
``--no-cache``, a warm run finds the cache and the records two priming runs (not timed) wrote.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import run as harness  # benchmarks/run.py: measure(), the RSS sampler, the hipify child, the fixtures

REPO = harness.REPO
KIB = harness.KIB

# The stdlib floor: read and parse every .py file (no compile, no traversal).
AST_FLOOR = textwrap.dedent(
    """\
    import ast, os, sys
    n = bad = 0
    for dirpath, dirnames, filenames in os.walk(sys.argv[1]):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".py"):
                with open(os.path.join(dirpath, name), "rb") as fh:
                    src = fh.read()
                n += 1
                try:
                    ast.parse(src, filename=name)
                except (SyntaxError, ValueError):
                    bad += 1
    print(n, bad)
    """
)

# LibCST's parser over the same files (what every LibCST-based tool pays before it looks at a node).
LIBCST_PARSE = textwrap.dedent(
    """\
    import os, sys
    import libcst
    n = bad = 0
    for dirpath, dirnames, filenames in os.walk(sys.argv[1]):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".py"):
                with open(os.path.join(dirpath, name), "rb") as fh:
                    src = fh.read()
                n += 1
                try:
                    libcst.parse_module(src)
                except Exception:
                    bad += 1
    print(n, bad)
    """
)

GREP = ["grep", "-rn", "-F", "cuda", "."]
SKIPPABLE = ("grep", "ast", "libcst", "ruff", "torchfix", "cold", "pool", "warm", "check", "migrate", "cpp",
             "hipify")
TREES = ("python", "cuda", "migrate")


# -- measurements ---------------------------------------------------------------------------


@dataclass
class Measurement:
    """One command, timed ``runs`` times (interleaved with the others)."""

    key: str
    label: str
    cmd: list[str]
    cwd: Path
    runs: int
    env: dict[str, str] | None = None
    ok_rc: tuple[int, ...] = (0, 1)
    before: Callable[[int], None] | None = None  # untimed set-up before run i (fresh copies, dropped caches)
    parse: Callable[[harness.Sample], dict[str, float]] | None = None  # figures the child reports itself
    samples: list[harness.Sample] = field(default_factory=list)
    extra: list[dict[str, float]] = field(default_factory=list)
    unavailable: str = ""  # why the measurement could not run (then it has no samples)
    files: int = 0

    @property
    def failed(self) -> bool:
        return bool(self.samples) and any(s.rc not in self.ok_rc for s in self.samples)

    @property
    def done(self) -> bool:
        return bool(self.samples) and not self.failed

    def cpu(self) -> float:
        return statistics.median(s.cpu for s in self.samples)

    def wall(self) -> float:
        return statistics.median(s.wall for s in self.samples)

    def tree_rss_mib(self) -> float:
        return max(s.tree_rss_kib for s in self.samples) / KIB

    def max_rss_mib(self) -> float:
        return max(s.max_rss_kib for s in self.samples) / KIB

    def extra_median(self, name: str) -> float | None:
        vals = [e[name] for e in self.extra if name in e]
        return statistics.median(vals) if vals else None


def say(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_interleaved(ms: list[Measurement]) -> None:
    """Round r runs every measurement that wants more than r runs, in order: A B C, A B C, …"""
    rounds = max((m.runs for m in ms if not m.unavailable), default=0)
    for r in range(rounds):
        for m in ms:
            if m.unavailable or r >= m.runs:
                continue
            if m.before is not None:
                m.before(r)
            s = harness.measure(m.cmd, m.cwd, env=m.env, capture=m.parse is not None)
            m.samples.append(s)
            if m.parse is not None:
                try:
                    m.extra.append(m.parse(s))
                except (ValueError, KeyError, IndexError):
                    s.rc = 99  # the child did not report: count the run as failed
            say(f"round {r + 1}: {m.label}: {s.cpu:.2f} CPU-s, {s.wall:.2f} s wall, "
                f"{s.tree_rss_kib / KIB:.0f} MiB (rc {s.rc})")


def tree_files(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (relative '/'-path -> bytes)."""
    out = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


def compare_hipify_outputs(suite: Suite) -> None:
    """Whether hipify without torch's package import left exactly the files hipify with it left (each
    copy holds its last run's output); the reference row is judged only when it did."""
    for prefix, (real, alone) in suite.hipify_copies.items():
        a, b = suite.ms.get(f"{prefix}:hipify"), suite.ms.get(f"{prefix}:hipify-alone")
        if a is None or b is None or not a.done or not b.done:
            continue
        ran_init = b.extra_median("torch_init_ran")
        same = tree_files(real) == tree_files(alone) and not ran_init
        suite.hipify_same[prefix] = same
        name = prefix.split(":", 1)[1]
        if same:
            suite.notes.append(f"{name}: hipify without torch's package import wrote the same files, byte for byte, "
                               f"as hipify with it ({len(tree_files(alone)):,} files after the call)")
        else:
            suite.notes.append(f"{name}: hipify without torch's package import did NOT reproduce hipify's output "
                               "(or ran torch's package import): that row is not judged")


def last_json(s: harness.Sample) -> dict[str, float]:
    data = json.loads(s.stdout.strip().splitlines()[-1])
    return {k: float(v) for k, v in data.items()}


# -- the trees ------------------------------------------------------------------------------


def copy_python_tree(src: Path, dest: Path, subset: int) -> list[str]:
    """Copy the regular ``.py`` files under ``src`` (``subset`` > 0: that many, spread evenly)."""
    rels: list[str] = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if name.endswith(".py") and p.is_file() and not p.is_symlink():
                rels.append(p.relative_to(src).as_posix())
    if 0 < subset < len(rels):
        step = len(rels) / subset
        rels = [rels[int(i * step)] for i in range(subset)]
    if dest.exists():
        shutil.rmtree(dest)
    for rel in rels:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel)
    return rels


def is_bare_git(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and not (path / ".git").exists()


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def missing_blobs(git_dir: Path) -> list[str]:
    """Paths at HEAD whose blobs the repository does not hold (a mirror fetched without large files)."""
    listing = git("--git-dir", str(git_dir), "ls-tree", "-r", "-z", "HEAD", cwd=git_dir)
    entries = []
    for item in listing.split("\0"):
        if not item:
            continue
        meta, path = item.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob":
            entries.append((sha, path))
    if not entries:
        return []
    check = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "--batch-check"], check=True,
                           input="".join(f"{sha}\n" for sha, _ in entries), capture_output=True, text=True).stdout
    return [path for (sha, path), line in zip(entries, check.splitlines(), strict=True) if line.endswith(" missing")]


def materialise_repo(src: Path, dest: Path) -> str:
    """A one-commit git repository at ``dest`` with ``src``'s files (a bare repository: its HEAD)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if is_bare_git(src):
        commit = git("--git-dir", str(src), "rev-parse", "HEAD", cwd=dest)
        missing = missing_blobs(src)  # a partial mirror may lack large files (images, PDFs): leave those out
        excludes = [f":(exclude,literal){path}" for path in missing]
        archive = subprocess.run(["git", "--git-dir", str(src), "archive", "HEAD", "--", ".", *excludes],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        origin = f"{src} @ {commit[:12]}"
        if missing:
            origin += f" (without {len(missing)} file(s) the mirror lacks: {', '.join(missing[:3])})"
    else:
        shutil.copytree(src, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git"))
        origin = str(src)
    git("init", "-q", cwd=dest)
    git("add", "-A", cwd=dest)
    git("-c", "user.email=bench@porter", "-c", "user.name=bench", "commit", "-qm", "base", "--no-gpg-sign",
        cwd=dest)
    return origin


def count_files(root: Path, suffix: str | None = None) -> int:
    n = 0
    for _dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        n += sum(1 for f in filenames if suffix is None or f.endswith(suffix))
    return n


def pick_check_files(root: Path, rels: list[str], findings: dict[str, list[dict[str, object]]] | None
                     ) -> tuple[str | None, str | None, list[str]]:
    """An ordinary clean file, an ordinary file with a warning or error, and 10 files that mention CUDA.

    "Ordinary" = the file closest to the median size of the tree's non-``__init__`` files.
    """
    sizes = {r: (root / r).stat().st_size for r in rels}
    body = [r for r in rels if not r.endswith("__init__.py")] or rels
    if not body:
        return None, None, []
    median = statistics.median(sizes[r] for r in body)

    def ordinary(cands: list[str]) -> str | None:
        return min(cands, key=lambda r: (abs(sizes[r] - median), r)) if cands else None

    if findings is None:
        clean = ordinary(body)
        dirty = None
    else:
        clean = ordinary([r for r in body if not findings.get(r)])
        dirty = ordinary([r for r in body if any(f.get("severity") in ("warning", "error")
                                                 for f in findings.get(r, []))])
    cuda = []
    for r in rels:
        text = (root / r).read_text(encoding="utf-8", errors="replace")
        if "torch.cuda" in text or ".cuda(" in text:
            cuda.append(r)
    if len(cuda) < 10:
        cuda += [r for r in body if r not in cuda]
    step = max(1.0, len(cuda) / 10)
    ten = [cuda[int(i * step)] for i in range(min(10, len(cuda)))]
    return clean, dirty, ten


# -- the suite ------------------------------------------------------------------------------


@dataclass
class Config:
    runs: int
    slow_runs: int
    trees: list[str]
    skip: set[str]
    python_src: Path | None
    subset: int
    cuda_trees: list[Path]
    scale: int
    migrate_src: Path
    torchfix: list[str] | None
    scratch: Path


@dataclass
class Suite:
    ms: dict[str, Measurement] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    trees: list[str] = field(default_factory=list)  # descriptions for the report
    cuda_keys: list[tuple[str, str]] = field(default_factory=list)  # (tree name, key prefix)
    # key prefix -> the copies hipify with and without torch's package import rewrite in place
    hipify_copies: dict[str, tuple[Path, Path]] = field(default_factory=dict)
    # key prefix -> whether both left the same files (None: not compared)
    hipify_same: dict[str, bool] = field(default_factory=dict)
    check_files: dict[str, str] = field(default_factory=dict)

    def add(self, m: Measurement) -> Measurement:
        self.ms[m.key] = m
        return m


def porter(*args: str) -> list[str]:
    return [sys.executable, "-m", "porter", *args]


def find_torchfix() -> list[str] | None:
    here = Path(sys.executable).parent / "torchfix"
    if here.is_file():
        return [str(here)]
    found = shutil.which("torchfix")
    return [found] if found else None


def build_python(cfg: Config, suite: Suite, env: dict[str, str]) -> None:
    src = cfg.python_src or harness.package_dir("torch")
    if src is None:
        suite.notes.append("python tree: torch is not installed and no --python-tree was given; skipped")
        return
    root = cfg.scratch / "python-tree"
    rels = copy_python_tree(src, root / src.name, cfg.subset)
    rels = [f"{src.name}/{r}" for r in rels]
    lines = sum(harness.count_lines(root / r) for r in rels)
    what = f"the .py files of {src}" + (f" ({cfg.subset} of them, spread evenly)" if cfg.subset else "")
    suite.trees.append(f"python: {what}: {len(rels):,} files, {lines:,} lines")
    n = len(rels)
    slow, fast = cfg.slow_runs, cfg.runs
    skip = cfg.skip

    def add(key: str, label: str, cmd: list[str], runs: int, **kw: object) -> Measurement:
        m = suite.add(Measurement(key, label, cmd, root, runs, **kw))  # type: ignore[arg-type]
        m.files = n
        return m

    # porter's own modules byte-compiled, as `pip install` leaves them (a development checkout run under
    # PYTHONDONTWRITEBYTECODE would otherwise compile edited modules from source in every timed process)
    import importlib.util

    folders = []
    for name in ("porter", "porter.codemods", "porter.hipify_wrappers"):
        spec = importlib.util.find_spec(name)
        folders += list(spec.submodule_search_locations or []) if spec is not None else []
    subprocess.run([sys.executable, "-m", "compileall", "-q", *folders], capture_output=True, check=False,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})

    # priming (not timed): the cache for the warm run, and the findings that pick the check files
    findings: dict[str, list[dict[str, object]]] | None = None
    if not {"warm", "check"} <= skip:
        say("priming porter's cache (not timed)")
        prime = harness.measure(porter("audit", "--format", "json", "."), root, capture=True, env=env)
        try:
            findings = {}
            for f in json.loads(prime.stdout)["findings"]:
                findings.setdefault(str(f["path"]), []).append(f)
        except (ValueError, KeyError, TypeError):
            suite.notes.append(f"the priming audit did not produce JSON (rc {prime.rc}); check files picked by size")
            findings = None
        if "warm" not in skip:
            # the first audit read files copied a moment ago: porter vouches only for inputs that had
            # settled (a second) when it signed them, so a second priming run writes the warm-run
            # record and the express record the timed runs use (the steady state of a re-run)
            time.sleep(1.5)
            harness.measure(porter("audit", "--format", "json", "."), root, capture=True, env=env)

    if "grep" not in skip:
        add("grep", f"grep ({' '.join(GREP)})", GREP, fast)
    if "ast" not in skip:
        add("ast", "stdlib ast.parse floor", [sys.executable, "-c", AST_FLOOR, "."], fast, ok_rc=(0,))
    if "cold" not in skip:
        add("cold1", "porter audit --no-cache -j 1", porter("audit", "--no-cache", "--format", "json", "-j", "1", "."),
            slow, env=env)
        if "pool" not in skip:
            add("cold2", "porter audit --no-cache -j 2",
                porter("audit", "--no-cache", "--format", "json", "-j", "2", "."), slow, env=env)
    if "libcst" not in skip:
        add("libcst", "LibCST parse_module", [sys.executable, "-c", LIBCST_PARSE, "."], slow, ok_rc=(0,))
    if "ruff" not in skip:
        add("ruff", "ruff check --select ALL --no-cache",
            [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "ALL", "--no-cache", "--exit-zero",
             "."], fast, ok_rc=(0,))
    if "torchfix" not in skip:
        m = add("torchfix", "TorchFix -j 1", [*(cfg.torchfix or ["torchfix"]), "-j", "1", "."], slow)
        if cfg.torchfix is None:
            m.unavailable = "torchfix is not installed (pip install torchfix, or --torchfix CMD)"
    if "warm" not in skip:
        add("warm", "porter audit (warm cache)", porter("audit", "--format", "json", "."), fast, env=env)
    if "check" not in skip:
        clean, dirty, ten = pick_check_files(root, rels, findings)
        picks = [("1clean", "1 file, no finding", [clean] if clean else []),
                 ("1dirty", "1 file with findings", [dirty] if dirty else []),
                 ("10", "10 files", ten)]
        for tag, what, files in picks:
            if not files:
                suite.notes.append(f"porter check ({what}): no such file in the tree; not measured")
                continue
            suite.check_files[tag] = ", ".join(f"`{f}`" for f in files)
            for cached in (False, True):
                args = ["check", *([] if cached else ["--no-cache"]), *files]
                if cached:  # prime the check's own cache entries (not timed)
                    harness.measure(porter(*args), root, env=env)
                m = add(f"check{tag}{'c' if cached else ''}",
                        f"porter check ({what}), {'cache' if cached else '--no-cache'}", porter(*args), fast, env=env)
                m.files = len(files)


def build_cuda(cfg: Config, suite: Suite, env: dict[str, str]) -> None:
    trees: list[harness.Tree] = []
    if cfg.cuda_trees:
        for p in cfg.cuda_trees:
            if not p.is_dir():
                suite.notes.append(f"cuda tree {p}: not a directory; skipped")
                continue
            trees.append(harness.copy_tree(p.name, p, cfg.scratch, source=str(p)))
    else:
        trees.append(harness.scaled_fixtures(f"C++ fixtures x{cfg.scale}", cfg.scratch, cfg.scale, cpp=True))
    for t in trees:
        if not t.cpp_files:
            suite.notes.append(f"cuda tree {t.name}: no C/C++/CUDA sources; skipped")
            continue
        suite.trees.append(f"cuda: {t.name} ({t.source}): {t.cpp_files:,} C/C++/CUDA files, {t.lines:,} lines")
        prefix = f"cpp:{t.name}"
        suite.cuda_keys.append((t.name, prefix))
        if "cpp" not in cfg.skip:
            m = suite.add(Measurement(f"{prefix}:porter", f"{t.name}: porter audit --no-cache --select PRT5 -j 1",
                                      porter("audit", "--no-cache", "--select", "PRT5", "--format", "json", "-j",
                                             "1", "."), t.root, cfg.runs, env=env))
            m.files = t.cpp_files
        if "hipify" not in cfg.skip:
            cpp = [r for r in t.files if harness.languages.detect(r) == harness.languages.CUDA]
            copy = t.root.parent / f"{t.root.name}.hipify"

            def fresh(_: int, cpp: list[str] = cpp, copy: Path = copy, src: Path = t.root) -> None:
                shutil.rmtree(copy, ignore_errors=True)
                harness.copy_files(src, cpp, copy)

            m = suite.add(Measurement(f"{prefix}:hipify", f"{t.name}: torch.utils.hipify (process)",
                                      [sys.executable, "-P", "-c", harness.HIPIFY_CHILD, str(copy)], t.root.parent,
                                      cfg.runs, ok_rc=(0,), before=fresh, parse=last_json))
            m.files = t.cpp_files
            if harness.package_dir("torch") is None:
                m.unavailable = "torch is not installed"
            # the same call, hipify's own modules loaded without torch's package import
            alone = t.root.parent / f"{t.root.name}.hipify-alone"

            def fresh_alone(_: int, cpp: list[str] = cpp, copy: Path = alone, src: Path = t.root) -> None:
                shutil.rmtree(copy, ignore_errors=True)
                harness.copy_files(src, cpp, copy)

            m = suite.add(Measurement(f"{prefix}:hipify-alone",
                                      f"{t.name}: torch.utils.hipify without torch's package import (process)",
                                      [sys.executable, "-P", "-c", harness.HIPIFY_ALONE_CHILD, str(alone)],
                                      t.root.parent, cfg.runs, ok_rc=(0,), before=fresh_alone, parse=last_json))
            m.files = t.cpp_files
            if harness.package_dir("torch") is None:
                m.unavailable = "torch is not installed"
            suite.hipify_copies[prefix] = (copy, alone)


def build_migrate(cfg: Config, suite: Suite) -> None:
    if "migrate" in cfg.skip:
        return
    src = cfg.migrate_src
    if not src.is_dir():
        suite.notes.append(f"migrate: {src} is not a directory; skipped")
        return
    repo = cfg.scratch / "migrate-repo" / (src.name if src.name not in ("repo", ".git") else src.parent.name)
    origin = materialise_repo(src, repo)
    npy, nall = count_files(repo, ".py"), count_files(repo)
    suite.trees.append(f"migrate: {origin}: {nall:,} files, {npy:,} Python")
    outs = cfg.scratch / "migrate-out"
    xdg = cfg.scratch / "xdg-cache-migrate"  # its own cache folder: dropping it leaves the warm rows' cache alone
    m = suite.add(Measurement("migrate", "porter migrate -j 2", [], repo.parent, cfg.runs,
                              env=dict(os.environ, XDG_CACHE_HOME=str(xdg)), ok_rc=(0, 1)))
    m.files = nall

    def fresh(i: int) -> None:  # a first migration: no cache, a new output folder
        shutil.rmtree(xdg, ignore_errors=True)
        shutil.rmtree(outs / f"run{i}", ignore_errors=True)
        m.cmd = porter("migrate", "-j", "2", "-q", "-o", str(outs / f"run{i}"), str(repo))

    m.before = fresh


# -- the report -----------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    figure: str  # what is measured, in words
    value: str
    reference: str
    ref_value: str
    ratio: str
    goal: str
    verdict: str


def fmt_pair(m: Measurement | None) -> str:
    if m is None:
        return "not measured"
    if m.unavailable:
        return f"unavailable: {m.unavailable}"
    if not m.samples:
        return "not measured"
    if m.failed:
        rcs = sorted({s.rc for s in m.samples})
        return f"FAILED (exit {', '.join(map(str, rcs))})"
    return f"{m.cpu():.2f} CPU-s / {m.wall():.2f} s"


def verdict(ok: bool | None) -> str:
    if ok is None:
        return "n/a"
    return "met" if ok else "**missed**"


def targets(suite: Suite) -> list[Target]:
    ms = suite.ms
    out: list[Target] = []

    def get(key: str) -> Measurement | None:
        m = ms.get(key)
        return m if m is not None and m.done else None

    cold1, cold2 = get("cold1"), get("cold2")
    # cold audit against every reference
    refs = [("ast", "stdlib ast.parse floor", 3.0), ("libcst", "LibCST parse_module", None),
            ("ruff", "ruff --select ALL", None), ("torchfix", "TorchFix -j 1", None), ("grep", "grep -rn", None)]
    for key, label, limit in refs:
        if key not in ms:  # the reference was skipped
            continue
        ref = get(key)
        ratio, ok = "", None
        if cold1 and ref and ref.cpu() > 0:
            x = cold1.cpu() / ref.cpu()
            ratio = f"{x:.2f}× CPU, {cold1.wall() / ref.wall():.2f}× wall"
            ok = (x <= limit) if limit is not None else None
        out.append(Target(f"cold audit vs {label}", "porter audit --no-cache -j 1", fmt_pair(ms.get("cold1")), label,
                          fmt_pair(ms.get(key)), ratio,
                          f"≤ {limit:g}× CPU" if limit is not None else "reported", verdict(ok)))
    if "cold2" in ms:
        ratio, ok = "", None
        if cold1 and cold2 and cold1.cpu() > 0:
            over = cold2.cpu() / cold1.cpu() - 1
            ratio = f"pool overhead {over * 100:+.1f} % CPU; wall {cold2.wall() / cold1.wall():.2f}× -j 1"
            ok = over <= 0.05
        out.append(Target("pool overhead", "porter audit --no-cache -j 2", fmt_pair(ms.get("cold2")),
                          "the same with -j 1", fmt_pair(ms.get("cold1")), ratio, "CPU(-j 2) / CPU(-j 1) − 1 ≤ 5 %",
                          verdict(ok)))
    if "warm" in ms:
        warm, grep = get("warm"), get("grep")
        ratio, ok = "", None
        if warm and grep and grep.cpu() > 0 and grep.wall() > 0:
            xc, xw = warm.cpu() / grep.cpu(), warm.wall() / grep.wall()
            ratio = f"{xc:.2f}× CPU, {xw:.2f}× wall"
            ok = xc <= 2 and xw <= 2
        out.append(Target("warm re-run vs grep", "porter audit (cache, nothing changed)", fmt_pair(ms.get("warm")),
                          "grep -rn", fmt_pair(ms.get("grep")), ratio, "≤ 2× CPU and ≤ 2× wall", verdict(ok)))
    for tag, what, limit in (("1clean", "1 file, no finding", 0.25), ("1dirty", "1 file with findings", 0.25),
                             ("10", "10 files", 0.4)):
        for cached in (False, True):
            key = f"check{tag}{'c' if cached else ''}"
            if key not in ms:
                continue
            m = get(key)
            ok = (m.cpu() <= limit) if m else None
            out.append(Target(f"porter check, {what}, {'cache' if cached else '--no-cache'}", "fresh process",
                              fmt_pair(ms[key]), "—", "", "", f"≤ {limit:g} CPU-s", verdict(ok)))
    if "migrate" in ms:
        m = get("migrate")
        ok = (m.wall() <= 10) if m else None
        out.append(Target("porter migrate", "-j 2, no cache, fresh output folder", fmt_pair(ms["migrate"]), "—", "", "",
                          "≤ 10 s wall on 2 cores", verdict(ok)))
    for name, prefix in suite.cuda_keys:
        p, h = get(f"{prefix}:porter"), get(f"{prefix}:hipify")
        if f"{prefix}:porter" not in ms and f"{prefix}:hipify" not in ms:
            continue
        call_cpu = h.extra_median("hipify_cpu_s") if h else None
        call_wall = h.extra_median("hipify_s") if h else None
        ref = (f"{call_cpu:.2f} CPU-s / {call_wall:.2f} s" if call_cpu is not None and call_wall is not None
               else fmt_pair(ms.get(f"{prefix}:hipify")))
        ratio, ok = "", None
        if p and call_cpu and call_wall:
            xc, xw = p.cpu() / call_cpu, p.wall() / call_wall
            ratio = f"{xc:.2f}× CPU, {xw:.2f}× wall"
            ok = xc <= 1 and xw <= 1
        out.append(Target(f"C++ pass vs hipify's call ({name})", "porter audit --no-cache --select PRT5 -j 1 "
                          "(process, start-up included)", fmt_pair(ms.get(f"{prefix}:porter")),
                          "torch.utils.hipify: the hipify() call", ref, ratio, "≤ 1× CPU and ≤ 1× wall", verdict(ok)))
        # whole processes: hipify with its own start-up (its modules, no torch), then with torch's import
        for key, what in ((f"{prefix}:hipify-alone", "torch.utils.hipify: whole process, its own start-up "
                           "(hipify's modules without torch's package import)"),
                          (f"{prefix}:hipify", "torch.utils.hipify: whole process, torch's import included")):
            if key not in ms:
                continue
            r = get(key)
            ratio, ok = "", None
            if p and r and r.cpu() > 0 and r.wall() > 0:
                xc, xw = p.cpu() / r.cpu(), p.wall() / r.wall()
                ratio = f"{xc:.2f}× CPU, {xw:.2f}× wall"
                ok = xc <= 1 and xw <= 1
            ref_value = fmt_pair(ms.get(key))
            same = suite.hipify_same.get(prefix)
            if key.endswith(":hipify-alone") and same is not True:  # judged only where it did hipify's work
                ref_value += (" (its output differs from hipify's: not a valid reference)" if same is False
                              else " (output not compared with hipify's: not judged)")
                ok = None
            title = ("C++ pass vs hipify's own start-up" if key.endswith(":hipify-alone")
                     else "C++ pass vs hipify's process")
            out.append(Target(f"{title} ({name})", "the same", fmt_pair(ms.get(f"{prefix}:porter")), what,
                              ref_value, ratio, "≤ 1× CPU and ≤ 1× wall", verdict(ok)))
    for key, label in (("cold1", "-j 1"), ("cold2", "-j 2")):
        m = get(key)
        if m is None:
            continue
        ast_m = get("ast")
        ref = f"{ast_m.tree_rss_mib():,.0f} MiB" if ast_m else ""
        out.append(Target(f"memory, cold audit {label}", "peak RSS of the process tree (sampled every 20 ms)",
                          f"{m.tree_rss_mib():,.0f} MiB (largest process {m.max_rss_mib():,.0f} MiB)",
                          "stdlib ast.parse floor" if ast_m else "—", ref,
                          f"{m.tree_rss_mib() / ast_m.tree_rss_mib():.1f}×" if ast_m and ast_m.tree_rss_mib() else "",
                          "bounded (no whole-repo ASTs): reported", "n/a"))
    return out


def measurement_rows(suite: Suite) -> list[list[str]]:
    rows = []
    for m in suite.ms.values():
        if m.unavailable:
            rows.append([m.label, "0", "", "", "", "", m.unavailable])
            continue
        if not m.samples:
            continue
        rcs = ",".join(str(r) for r in sorted({s.rc for s in m.samples}))
        cpus = " ".join(f"{s.cpu:.2f}" for s in m.samples)
        rows.append([m.label, str(len(m.samples)), f"{m.cpu():.2f}", f"{m.wall():.2f}", f"{m.tree_rss_mib():,.0f}",
                     str(m.files), f"exit {rcs}{' FAILED' if m.failed else ''}; CPU-s per run: {cpus}"])
    return rows


MEAS_HEADERS = ["measurement", "runs", "CPU s (median)", "wall s (median)", "peak tree RSS MiB", "files", "notes"]
TARGET_HEADERS = ["target", "porter", "figure", "reference", "reference figure", "ratio", "goal", "verdict"]


def md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def text_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    cells = [headers] + rows
    widths = [max(len(c[i]) for c in cells) for i in range(len(headers))]
    out = []
    for k, c in enumerate(cells):
        out.append("  ".join(v.ljust(widths[i]) for i, v in enumerate(c)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def load() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def porter_commit() -> str:
    try:
        return git("rev-parse", "--short=12", "HEAD", cwd=REPO)
    except (OSError, subprocess.CalledProcessError):
        return "?"


def render(suite: Suite, machine: str, load_start: str, load_end: str, argv: Sequence[str], quick: bool
           ) -> tuple[str, str]:
    tg = targets(suite)
    trows = [[t.name, t.figure, t.value, t.reference, t.ref_value, t.ratio, t.goal, t.verdict] for t in tg]
    mrows = measurement_rows(suite)
    md = ["# porter benchmarks: issue #14's targets", ""]
    if quick:
        md += ["> `--quick` run: a subset of the Python tree and one run each. Not a reference measurement.", ""]
    md += [f"Machine: {machine}; load average (1 / 5 / 15 min) at start {load_start}, at end {load_end}.", "",
           f"Command: `python benchmarks/run.py {' '.join(argv)}`. Figures are medians of interleaved runs; "
           "CPU = user + sys of the process and every descendant it reaped; wall = spawn to reap.", "", "Trees:", ""]
    md += [f"- {t}" for t in suite.trees]
    if suite.check_files:
        md += [f"- porter check files ({k}): {v}" for k, v in suite.check_files.items()]
    md += ["", "## Targets", ""] + md_table(TARGET_HEADERS, trows)
    md += ["", "## Measurements", ""] + md_table(MEAS_HEADERS, mrows)
    if suite.notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in suite.notes]
    text = [f"machine: {machine}", f"load average at start {load_start}, at end {load_end}", ""]
    text += [f"  {t}" for t in suite.trees] + [""]
    text += text_table(TARGET_HEADERS, [[c.replace("**", "") for c in r] for r in trows]) + [""]
    text += text_table(MEAS_HEADERS, mrows)
    text += [f"note: {n}" for n in suite.notes]
    return "\n".join(md) + "\n", "\n".join(text) + "\n"


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="benchmarks/run.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="The older per-tree matrix (apply --dry-run rows, files/s, …): run.py --matrix "
                                        "--help.")
    ap.add_argument("--quick", action="store_true",
                    help="development: a 50-file subset of the Python tree, C++ fixtures x2, one run each")
    ap.add_argument("--runs", type=int, default=None, help="runs per measurement, median reported (default 3; --quick 1)")
    ap.add_argument("--slow-runs", type=int, default=None,
                    help="runs of the slow rows: porter's cold audits, LibCST, TorchFix (default: --runs)")
    ap.add_argument("--trees", default=",".join(TREES), help=f"comma-separated subset of {', '.join(TREES)}")
    ap.add_argument("--skip", default="", help=f"comma-separated measurements to leave out: {', '.join(SKIPPABLE)}")
    ap.add_argument("--python-tree", type=Path, default=None,
                    help="the Python tree (its .py files are copied; default: the installed torch package)")
    ap.add_argument("--subset", type=int, default=None,
                    help="only N of the Python tree's files, spread evenly (default: all; --quick 50)")
    ap.add_argument("--cuda-tree", action="append", type=Path, default=[], metavar="DIR",
                    help="a CUDA source tree for the C++ pass (repeatable; default: porter's C++ fixtures x --scale)")
    ap.add_argument("--scale", type=int, default=None, help="copies of the C++ fixtures (default 20; --quick 2)")
    ap.add_argument("--migrate-repo", type=Path, default=REPO / "examples" / "legacy-gpt",
                    help="the repository `porter migrate` runs on: a directory or a bare git repository "
                         "(default: examples/legacy-gpt)")
    ap.add_argument("--torchfix", default=None, help="TorchFix's command (default: `torchfix` beside this Python or "
                                                     "on PATH)")
    ap.add_argument("--scratch", type=Path, default=None, help="scratch folder (default: a temp dir, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "RESULTS.md", help="the Markdown report")
    args = ap.parse_args(list(argv))
    bad = [t for t in args.trees.split(",") if t.strip() and t.strip() not in TREES]
    bad += [s for s in args.skip.split(",") if s.strip() and s.strip() not in SKIPPABLE]
    if bad:
        ap.error(f"unknown name(s): {', '.join(bad)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    runs = max(1, args.runs or (1 if args.quick else 3))
    own = args.scratch is None
    scratch = Path(tempfile.mkdtemp(prefix="porter-targets-")) if own else args.scratch.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    cfg = Config(runs=runs, slow_runs=max(1, args.slow_runs or runs),
                 trees=[t.strip() for t in args.trees.split(",") if t.strip()],
                 skip={s.strip() for s in args.skip.split(",") if s.strip()},
                 python_src=args.python_tree.resolve() if args.python_tree else None,
                 subset=args.subset if args.subset is not None else (50 if args.quick else 0),
                 cuda_trees=[p.resolve() for p in args.cuda_tree], scale=args.scale or (2 if args.quick else 20),
                 migrate_src=args.migrate_repo.resolve(),
                 torchfix=args.torchfix.split() if args.torchfix else find_torchfix(), scratch=scratch)
    xdg = scratch / "xdg-cache"
    env = dict(os.environ, XDG_CACHE_HOME=str(xdg))
    machine = (f"{os.cpu_count()} cores ({harness.cpu_model()}), Python {platform.python_version()}, "
               f"porter {harness.PORTER_VERSION} at {porter_commit()}, {platform.system()} {platform.release()}, "
               f"{_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    load_start = load()
    print(f"machine: {machine}; load {load_start}", file=sys.stderr, flush=True)
    suite = Suite()
    if cfg.skip:
        suite.notes.append(f"skipped (--skip): {', '.join(sorted(cfg.skip))}")
    try:
        # the cheap trees first: a broken --cuda-tree or --migrate-repo fails before the long priming audit
        if "cuda" in cfg.trees and not {"cpp", "hipify"} <= cfg.skip:
            build_cuda(cfg, suite, env)
        if "migrate" in cfg.trees:
            build_migrate(cfg, suite)
        if "python" in cfg.trees:
            build_python(cfg, suite, env)
        run_interleaved(list(suite.ms.values()))
        compare_hipify_outputs(suite)
    finally:
        if own and not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    load_end = load()
    md, text = render(suite, machine, load_start, load_end, argv, args.quick)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(md, encoding="utf-8")
        print(f"Markdown written to {args.out}")
    return 1 if any(m.failed for m in suite.ms.values()) else 0
