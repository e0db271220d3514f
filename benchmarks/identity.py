#!/usr/bin/env python3
"""Findings identity between two porter installations (an engine change must not change what porter finds).

Each installation is named by its Python executable. For every tree, both run

    python -m porter audit --no-cache --format json -j J TREE

and their findings are compared as multisets of full records (every field of the JSON record:
code, name, family, path, line, column, end_line, end_column, message, fix, fix_title,
severity, category, effort_hours), ignoring order. On the trees given with ``--apply`` (by
default porter's ``tests/fixtures`` and ``examples/legacy-gpt``) the ``porter apply --dry-run``
diffs must also be byte-identical, exit status and summary line included (progress lines,
which carry timings, are left out).

    python benchmarks/identity.py --old /path/to/old/venv/bin/python --new /path/to/new/venv/bin/python
    python benchmarks/identity.py --old A --new B --tree torch --tree some/dir --show 20

Trees: ``torch`` (the ``.py`` files of the installed torch package, copied to a scratch
directory), ``fixtures`` (porter's ``tests/fixtures``), ``example`` (``examples/legacy-gpt``), or
any directory. Both installations read the same bytes; each process runs in an empty scratch
directory (so neither imports a ``porter`` package from the current directory) with its own
``XDG_CACHE_HOME``. Exit status: 0 when everything is identical, 1 on any difference or
failed run, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TREES = ("torch", "fixtures", "example")
DEFAULT_APPLY = ("fixtures", "example")

Record = tuple[tuple[str, str], ...]


@dataclass
class Run:
    rc: int
    stdout: bytes
    stderr: bytes
    seconds: float


def run_porter(python: str, args: Sequence[str], workdir: Path, timeout: float) -> Run:
    """``python -m porter ARGS`` from an empty directory (no ``porter`` there to shadow the installed one),
    with a private cache folder."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = str(workdir / "xdg-cache")
    env.pop("PYTHONPATH", None)
    started = time.perf_counter()
    proc = subprocess.run([python, "-m", "porter", *args], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=timeout, check=False)
    return Run(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - started)


def record_key(finding: dict[str, object], fields: Sequence[str]) -> Record:
    return tuple((k, json.dumps(finding.get(k), sort_keys=True)) for k in fields)


def show_record(rec: Record) -> str:
    d = {k: json.loads(v) for k, v in rec}
    head = f"{d.get('path')}:{d.get('line')}:{d.get('column')}-{d.get('end_line')}:{d.get('end_column')} {d.get('code')}"
    rest = {k: v for k, v in d.items() if k not in ("path", "line", "column", "end_line", "end_column", "code")}
    return f"{head} {json.dumps(rest, sort_keys=True)}"


@dataclass
class AuditComparison:
    tree: str
    old_count: int
    new_count: int
    old_files: object
    new_files: object
    only_old: list[Record]
    only_new: list[Record]
    fields: list[str]
    schema_note: str
    failure: str = ""

    @property
    def identical(self) -> bool:
        return not self.failure and not self.only_old and not self.only_new and not self.schema_note


def parse_report(run: Run, who: str) -> tuple[dict[str, object] | None, str]:
    if run.rc not in (0, 1):
        return None, f"{who}: porter exited {run.rc}: {run.stderr.decode('utf-8', 'replace')[-1500:]}"
    try:
        data = json.loads(run.stdout)
    except ValueError as exc:
        return None, f"{who}: output is not JSON ({exc})"
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        return None, f"{who}: JSON without a findings list"
    return data, ""


def compare_audits(tree: str, old: Run, new: Run) -> AuditComparison:
    a, err_a = parse_report(old, "old")
    b, err_b = parse_report(new, "new")
    if a is None or b is None:
        return AuditComparison(tree, 0, 0, None, None, [], [], [], "", failure="; ".join(x for x in (err_a, err_b) if x))
    fa = [f for f in a["findings"] if isinstance(f, dict)]  # type: ignore[union-attr]
    fb = [f for f in b["findings"] if isinstance(f, dict)]  # type: ignore[union-attr]
    keys_a = set().union(*(f.keys() for f in fa)) if fa else set()
    keys_b = set().union(*(f.keys() for f in fb)) if fb else set()
    note = ""
    if fa and fb and keys_a != keys_b:
        note = (f"record fields differ: only old {sorted(keys_a - keys_b)}, only new {sorted(keys_b - keys_a)} "
                "(compared on the common fields)")
    fields = sorted(keys_a & keys_b) if fa and fb else sorted(keys_a | keys_b)
    ca = Counter(record_key(f, fields) for f in fa)
    cb = Counter(record_key(f, fields) for f in fb)
    only_old = sorted((ca - cb).elements())
    only_new = sorted((cb - ca).elements())
    return AuditComparison(tree, len(fa), len(fb), a.get("files_scanned"), b.get("files_scanned"),
                           only_old, only_new, fields, note)


PROGRESS = re.compile(rb"^porter: \d+/\d+ files \(")


def summary(stderr: bytes) -> list[bytes]:
    """What porter printed to stderr, less its progress lines (they carry timings)."""
    return [line for line in stderr.replace(b"\r", b"\n").splitlines() if line.strip() and not PROGRESS.match(line)]


def package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def copy_python_files(src: Path, dest: Path) -> int:
    """Copy every regular ``.py`` file under ``src`` (no symlinks followed) to ``dest``."""
    n = 0
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            n += 1
    return n


def resolve_tree(name: str, scratch: Path) -> tuple[Path, str]:
    if name == "torch":
        src = package_dir("torch")
        if src is None:
            raise SystemExit("identity.py: torch is not installed in this interpreter (pass --tree DIR instead)")
        dest = scratch / "torch-py"
        if not dest.is_dir():
            n = copy_python_files(src, dest / "torch")
            print(f"copied {n} .py files of {src} to {dest}", file=sys.stderr, flush=True)
        return dest, f"torch's .py files ({src})"
    if name == "fixtures":
        return REPO / "tests" / "fixtures", "tests/fixtures"
    if name == "example":
        return REPO / "examples" / "legacy-gpt", "examples/legacy-gpt"
    p = Path(name).resolve()
    if not p.is_dir():
        raise SystemExit(f"identity.py: {name}: neither torch/fixtures/example nor a directory")
    return p, str(p)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="Python executable of the reference installation")
    ap.add_argument("--new", default=sys.executable, help="Python executable of the installation under test "
                                                           "(default: this interpreter)")
    ap.add_argument("--tree", action="append", default=None,
                    help="torch, fixtures, example or a directory (repeatable; default: torch, fixtures, example)")
    ap.add_argument("--apply", action="append", default=None,
                    help="trees whose `porter apply --dry-run` diffs are compared (default: fixtures, example; "
                         "'none' for none)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="porter's -j (default 2)")
    ap.add_argument("--show", type=int, default=10, help="differences printed per tree and side (default 10)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per porter run")
    ap.add_argument("--scratch", type=Path, default=None, help="scratch folder (default: a temp dir, removed)")
    return ap.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    for py in (args.old, args.new):
        if not shutil.which(py) and not Path(py).is_file():
            print(f"identity.py: {py}: no such Python executable", file=sys.stderr)
            return 2
    own = args.scratch is None
    scratch = Path(tempfile.mkdtemp(prefix="porter-identity-")) if own else args.scratch.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    trees = args.tree or list(DEFAULT_TREES)
    apply_trees = [t for t in (args.apply or list(DEFAULT_APPLY)) if t != "none"]
    different = False
    try:
        versions = {}
        for side, py in (("old", args.old), ("new", args.new)):
            r = run_porter(py, ["--version"], scratch / f"work-{side}", 120)
            versions[side] = (r.stdout or r.stderr).decode("utf-8", "replace").strip()
            print(f"{side}: {py} ({versions[side]})")
        for name in trees:
            root, label = resolve_tree(name, scratch)
            cmd = ["audit", "--no-cache", "--format", "json", "-j", str(args.jobs), str(root)]
            old = run_porter(args.old, cmd, scratch / "work-old", args.timeout)
            new = run_porter(args.new, cmd, scratch / "work-new", args.timeout)
            cmp_ = compare_audits(name, old, new)
            status = "identical" if cmp_.identical else "DIFFERENT"
            print(f"\n== audit {name} ({label}): {status}; old {old.seconds:.1f} s, new {new.seconds:.1f} s")
            if cmp_.failure:
                print(f"  failed: {cmp_.failure}")
            else:
                print(f"  files scanned: old {cmp_.old_files}, new {cmp_.new_files}; findings: old {cmp_.old_count}, "
                      f"new {cmp_.new_count}; only in old {len(cmp_.only_old)}, only in new {len(cmp_.only_new)}")
                print(f"  compared fields: {', '.join(cmp_.fields)}")
                if cmp_.schema_note:
                    print(f"  {cmp_.schema_note}")
                if cmp_.old_files != cmp_.new_files:
                    print("  files_scanned differs")
                for side, recs in (("only in old", cmp_.only_old), ("only in new", cmp_.only_new)):
                    for rec in recs[: args.show]:
                        print(f"  {side}: {show_record(rec)}")
                    if len(recs) > args.show:
                        print(f"  {side}: ... {len(recs) - args.show} more")
            if not cmp_.identical or cmp_.old_files != cmp_.new_files:
                different = True
        for name in apply_trees:
            root, label = resolve_tree(name, scratch)
            cmd = ["apply", "--dry-run", "-j", str(args.jobs), str(root)]
            old = run_porter(args.old, cmd, scratch / "work-old", args.timeout)
            new = run_porter(args.new, cmd, scratch / "work-new", args.timeout)
            same = old.stdout == new.stdout and old.rc == new.rc and summary(old.stderr) == summary(new.stderr)
            print(f"\n== apply --dry-run {name} ({label}): {'identical' if same else 'DIFFERENT'}; "
                  f"diff {len(old.stdout)} / {len(new.stdout)} bytes, exit {old.rc} / {new.rc}")
            if not same:
                different = True
                if old.stdout != new.stdout:
                    a, b = old.stdout.splitlines(), new.stdout.splitlines()
                    k = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
                    print(f"  first differing diff line {k + 1}:\n    old: {a[k] if k < len(a) else '<end>'!r}\n"
                          f"    new: {b[k] if k < len(b) else '<end>'!r}")
                if summary(old.stderr) != summary(new.stderr):
                    print(f"  stderr old: {old.stderr.decode('utf-8', 'replace')[-400:]!r}\n"
                          f"  stderr new: {new.stderr.decode('utf-8', 'replace')[-400:]!r}")
    finally:
        if own:
            shutil.rmtree(scratch, ignore_errors=True)
    print("\nresult: " + ("DIFFERENT" if different else "identical"))
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
