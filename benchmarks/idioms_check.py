"""Real-repo check of porter's Python fixes: run, then verify what the fixes left behind.

Usage (the repository is a git work tree fetched on this machine; nothing is vendored)::

    python benchmarks/idioms_check.py /path/to/repo [--select PRT03,PRT4] [--out report.json]

For the safe run and the ``--unsafe-fixes`` run it

1. audits the repository (JSON findings: codes, fix levels),
2. applies the fixes to a scratch copy (never to the repository itself),
3. byte-compiles every changed Python file and runs ``ruff check --select F821,F401`` on it
   (unresolved names, imports left unused by a fix), comparing with the same check on the
   original file so only problems the fix introduced are counted,
4. prints per-rule counts and writes every hunk to ``<out>.safe.diff`` / ``<out>.unsafe.diff``
   for a reviewer to read against the original library's semantics.

porter never runs the target's code; neither does this script (it compiles, it does not import).
"""

from __future__ import annotations

import argparse
import collections
import json
import py_compile
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def _porter(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "porter", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def _ruff(path: Path) -> set[tuple[str, str]]:
    """(code, message) pairs of F821/F401 in ``path`` (line numbers dropped: fixes move lines)."""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821,F401",
                           "--output-format", "json", str(path)], capture_output=True, text=True, check=False)
    try:
        return {(d["code"], d["message"]) for d in json.loads(proc.stdout or "[]")}
    except ValueError:
        return set()


def check(repo: Path, select: str | None, unsafe: bool, diff_out: Path | None) -> dict[str, object]:
    sel = ["--select", select] if select else []
    audit = _porter("audit", str(repo), "--format", "json", "--no-cache", "--isolated", *sel, cwd=repo)
    try:
        data = json.loads(audit.stdout)
    except ValueError:
        data = {}
    findings = data.get("findings", data if isinstance(data, list) else [])
    by_code: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for f in findings:
        by_code[f.get("code", "?")][str(f.get("fix", "none"))] += 1
    work = Path(tempfile.mkdtemp(prefix="porter-idioms-"))
    try:
        copy = work / repo.name
        shutil.copytree(repo, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        subprocess.run(["git", "init", "-q"], cwd=copy, check=False)
        subprocess.run(["git", "add", "-A"], cwd=copy, check=False)
        subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "base"], cwd=copy,
                       check=False)
        flags = ["--unsafe-fixes"] if unsafe else []
        dry = _porter("apply", str(copy), "--dry-run", "--no-cache", "--isolated", *flags, *sel, cwd=copy)
        if diff_out is not None:
            diff_out.write_text(dry.stdout, encoding="utf-8")
        _porter("apply", str(copy), "--no-cache", "--isolated", *flags, *sel, cwd=copy)
        changed = subprocess.run(["git", "diff", "--name-only"], cwd=copy, capture_output=True, text=True,
                                 check=False).stdout.split()
        problems: list[str] = []
        for rel in changed:
            if not rel.endswith(".py"):
                continue
            after = copy / rel
            try:
                py_compile.compile(str(after), doraise=True)
            except py_compile.PyCompileError as exc:
                problems.append(f"{rel}: does not compile: {exc.msg.strip()[:200]}")
                continue
            new = _ruff(after) - _ruff(repo / rel)
            problems += [f"{rel}: {code} {msg}" for code, msg in sorted(new)]
        return {"unsafe": unsafe, "findings": {k: dict(v) for k, v in sorted(by_code.items())},
                "changed_files": changed, "problems": problems}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--select", default=None, help="rule codes or prefixes (default: porter's defaults)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON report here (diffs beside it)")
    args = ap.parse_args()
    repo = args.repo.resolve()
    report = []
    for unsafe in (False, True):
        diff = args.out.with_suffix(".unsafe.diff" if unsafe else ".safe.diff") if args.out else None
        report.append(check(repo, args.select, unsafe, diff))
    text = json.dumps({"repo": str(repo), "runs": report}, indent=2)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 1 if any(r["problems"] for r in report) else 0


if __name__ == "__main__":
    raise SystemExit(main())
