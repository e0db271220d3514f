#!/usr/bin/env python3
"""Real-repository harness for porter's Python rewrites (a script, not a test).

For each repository in a list (``owner/name@commit``, optionally with sub-folders), it materialises
the commit from a local bare mirror (``<mirror>/<owner>+<name>`` holding a git directory), then:

1. ``porter apply --dry-run`` (safe fixes) and ``porter apply --dry-run --unsafe-fixes`` on it;
2. applies each diff to its own scratch copy, byte-compiles every changed Python file, and runs
   ``ruff --select F821,F822,F401`` on the changed files before and after, to count undefined names
   the fix introduced and imports it left dead;
3. writes, per repository, the two diffs and a ``hunks.md`` listing every hunk with its rule
   findings, for a reviewer to mark correct / noisy / wrong against the original library's
   documented semantics and the repository's context;
4. prints one table row per repository (sites, fixes safe/unsafe, compile failures, new undefined
   names, new unused imports, seconds).

Nothing of a repository is executed: porter parses it, ``py_compile`` compiles it (no import), ruff
reads it. Usage::

    python benchmarks/real_repos.py --mirror DIR --out OUT owner/name@commit[:subdir,subdir] ...
    python benchmarks/real_repos.py --mirror DIR --out OUT --list repos.txt

The list file has one entry per line (``#`` comments allowed).
"""

from __future__ import annotations

import argparse
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ATTR_NOSYSTEM": "1",
}


@dataclass
class Entry:
    repo: str
    commit: str
    subdirs: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Entry:
        repo, _, rest = text.partition("@")
        commit, _, subs = rest.partition(":")
        return cls(repo, commit or "HEAD", tuple(s for s in subs.split(",") if s))

    @property
    def slug(self) -> str:
        return self.repo.replace("/", "+")


@dataclass
class Outcome:
    entry: Entry
    findings: int = 0
    safe_fixes: int = 0
    unsafe_fixes: int = 0
    files_safe: int = 0
    files_unsafe: int = 0
    compile_errors: list[str] = field(default_factory=list)
    new_undefined: list[str] = field(default_factory=list)
    new_unused: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""


def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV)
    return subprocess.run(["git", f"--git-dir={git_dir}", "-c", "core.fsmonitor=false", *args],
                          capture_output=True, env=env, check=False)


def materialise(entry: Entry, mirror: Path, dest: Path) -> None:
    """Write the commit's files into ``dest`` (blobs the snapshot lacks, e.g. large data files, are
    skipped; symbolic links are not recreated), then make it a one-commit git repository."""
    base = mirror / entry.slug
    git_dir = base / "repo" / ".git" if (base / "repo" / ".git").is_dir() else base / "repo"
    if not git_dir.is_dir():
        git_dir = base
    # the chosen sub-folders plus the files at the top and a top-level requirements/ folder (the
    # repository's own manifests and pins: porter reads requirements/ as its parent's manifest)
    listing = _git(git_dir, "ls-tree", "-r", "-z", "--full-tree", entry.commit)
    if listing.returncode != 0:
        raise RuntimeError(listing.stderr.decode(errors="replace").strip())
    dest.mkdir(parents=True)
    blobs: list[tuple[str, str, str]] = []
    for item in listing.stdout.split(b"\0"):
        if not item:
            continue
        meta, _, path = item.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        rel = path.decode("utf-8", errors="surrogateescape")
        wanted = (not entry.subdirs or "/" not in rel or rel.startswith("requirements/")
                  or any(rel == d or rel.startswith(d.rstrip("/") + "/") for d in entry.subdirs))
        if kind == "blob" and mode in ("100644", "100755") and wanted:
            blobs.append((sha, path.decode("utf-8", errors="surrogateescape"), mode))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV)
    batch = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "--batch"],
                           input="".join(f"{sha}\n" for sha, _, _ in blobs).encode(), capture_output=True, env=env,
                           check=False).stdout
    pos = 0
    for _sha, rel, mode in blobs:
        end = batch.index(b"\n", pos)
        header = batch[pos:end].split()
        pos = end + 1
        if len(header) < 3 or header[1] == b"missing":
            continue
        size = int(header[2])
        data = batch[pos:pos + size]
        pos += size + 1
        target = dest / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if mode == "100755":
            target.chmod(0o755)
    env.update(GIT_AUTHOR_NAME="h", GIT_AUTHOR_EMAIL="h@localhost", GIT_COMMITTER_NAME="h",
               GIT_COMMITTER_EMAIL="h@localhost")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base", "--no-verify"]):
        subprocess.run(["git", *args], cwd=dest, capture_output=True, env=env, check=False)


def porter(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "porter", *args], cwd=cwd, capture_output=True, check=False,
                          timeout=1800)


def changed_python(diff: bytes) -> list[str]:
    out = []
    for line in diff.decode("utf-8", errors="replace").splitlines():
        if line.startswith("+++ b/") and line.endswith(".py"):
            out.append(line[6:])
    return out


def ruff_codes(tree: Path, files: list[str]) -> dict[str, set[tuple[str, str]]]:
    """``{file: {(code, message)}}`` for F821/F822/F401 (messages without positions, to compare)."""
    existing = [f for f in files if (tree / f).is_file()]
    if not existing:
        return {}
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--select",
                           "F821,F822,F401", "--output-format", "json", *existing], cwd=tree,
                          capture_output=True, check=False)
    out: dict[str, set[tuple[str, str]]] = {}
    try:
        rows = json.loads(proc.stdout or b"[]")
    except json.JSONDecodeError:
        return {}
    for row in rows:
        rel = os.path.relpath(row["filename"], tree)
        out.setdefault(rel, set()).add((row["code"], row["message"]))
    return out


def hunks_markdown(entry: Entry, diff: bytes, audit: list[dict], label: str) -> str:
    by_file: dict[str, list[dict]] = {}
    for f in audit:
        by_file.setdefault(f["path"], []).append(f)
    lines = [f"## {entry.repo}@{entry.commit} — {label}", ""]
    current = ""
    for raw in diff.decode("utf-8", errors="replace").splitlines():
        if raw.startswith("+++ b/"):
            current = raw[6:]
            lines += ["", f"### {current}", ""]
            for f in sorted(by_file.get(current, []), key=lambda x: x["line"]):
                if f.get("fix") in ("safe", "unsafe"):
                    lines.append(f"- line {f['line']} {f['code']} ({f['fix']}): {f['message']}")
            lines += ["", "verdict: correct / noisy / wrong — reason:", "", "```diff"]
        elif raw.startswith("diff --git") and current:
            lines.append("```")
            current = ""
        elif current:
            lines.append(raw)
    if current:
        lines.append("```")
    return "\n".join(lines) + "\n"


PYTHON_FAMILIES = ("packages", "attention", "apex", "quantization", "fp8", "telemetry", "devices")


def flags_markdown(entry: Entry, findings: list[dict]) -> str:
    """Sites of the Python rewrite families that porter flags instead of fixing safely."""
    lines = [f"# {entry.repo}@{entry.commit} — flagged sites", "",
             "verdict per row: justified / not justified (a safe rewrite was provable) — reason", ""]
    for f in sorted(findings, key=lambda x: (x["path"], x["line"])):
        if f.get("family") in PYTHON_FAMILIES and f.get("fix") != "safe" and f.get("severity") != "info":
            lines.append(f"- `{f['path']}:{f['line']}` {f['code']} {f.get('name', '')} ({f.get('fix')}): "
                         f"{f['message']}")
    return "\n".join(lines) + "\n"


def check_tree(tree: Path, diff: bytes, out: Outcome) -> None:
    files = changed_python(diff)
    before = ruff_codes(tree, files)
    if diff.strip():
        proc = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=tree, input=diff,
                              capture_output=True, check=False,
                              env={**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **GIT_ENV})
        if proc.returncode != 0:
            out.error = "git apply failed: " + proc.stderr.decode(errors="replace")[:200]
            return
    scratch = Path(tempfile.mkdtemp(prefix="porter-pyc-"))
    for i, rel in enumerate(files):
        try:
            py_compile.compile(str(tree / rel), doraise=True, cfile=str(scratch / f"{i}.pyc"))
        except py_compile.PyCompileError as exc:
            out.compile_errors.append(f"{rel}: {exc.msg.strip().splitlines()[-1]}")
    shutil.rmtree(scratch, ignore_errors=True)
    after = ruff_codes(tree, files)
    for rel, codes in after.items():
        for code, message in sorted(codes - before.get(rel, set())):
            (out.new_undefined if code in ("F821", "F822") else out.new_unused).append(f"{rel}: {message}")


def run_one(entry: Entry, mirror: Path, out_dir: Path, keep: bool) -> Outcome:
    outcome = Outcome(entry)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="porter-real-"))
    try:
        base = work / "base"
        materialise(entry, mirror, base)
        audit = porter("audit", ".", "--no-cache", "--format", "json", cwd=base)
        try:
            findings = json.loads(audit.stdout or b"{}").get("findings", [])
        except json.JSONDecodeError:
            findings = []
        outcome.findings = len(findings)
        repo_out = out_dir / entry.slug
        repo_out.mkdir(parents=True, exist_ok=True)
        md = [f"# {entry.repo}@{entry.commit}", ""]
        for label, extra in (("safe", ()), ("unsafe", ("--unsafe-fixes",))):
            dry = porter("apply", ".", "--dry-run", "--no-cache", *extra, cwd=base)
            diff = dry.stdout
            (repo_out / f"{label}.diff").write_bytes(diff)
            match = re.search(rb"would fix (\d+) site", dry.stderr)
            count = int(match.group(1)) if match else 0
            copy = work / label
            shutil.copytree(base, copy, symlinks=True)
            if label == "safe":
                outcome.safe_fixes, outcome.files_safe = count, len(changed_python(diff))
            else:
                outcome.unsafe_fixes, outcome.files_unsafe = count - outcome.safe_fixes, len(changed_python(diff))
            check_tree(copy, diff, outcome)
            md.append(hunks_markdown(entry, diff, findings, label))
        (repo_out / "hunks.md").write_text("\n".join(md), encoding="utf-8")
        (repo_out / "flags.md").write_text(flags_markdown(entry, findings), encoding="utf-8")
    except Exception as exc:  # one broken repository must not stop the table
        outcome.error = f"{type(exc).__name__}: {exc}"
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    outcome.seconds = time.perf_counter() - started
    return outcome


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("entries", nargs="*", help="owner/name@commit[:subdir,...]")
    ap.add_argument("--list", type=Path, help="file with one entry per line")
    ap.add_argument("--mirror", type=Path, required=True, help="folder of bare mirrors named owner+name")
    ap.add_argument("--out", type=Path, required=True, help="where diffs, hunks.md and table.md go")
    ap.add_argument("--keep", action="store_true", help="keep the scratch trees")
    args = ap.parse_args(argv)
    entries = [Entry.parse(e) for e in args.entries]
    if args.list:
        for line in args.list.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                entries.append(Entry.parse(line))
    args.out.mkdir(parents=True, exist_ok=True)
    rows = ["| repository @ commit | findings | safe fixes (files) | unsafe fixes (files) | compile errors | "
            "new undefined names | new unused imports | s |", "|---|---|---|---|---|---|---|---|"]
    failed = False
    for entry in entries:
        o = run_one(entry, args.mirror, args.out, args.keep)
        row = (f"| {entry.repo}@{entry.commit[:8]}{(':' + ','.join(entry.subdirs)) if entry.subdirs else ''} | "
               f"{o.findings} | {o.safe_fixes} ({o.files_safe}) | {o.unsafe_fixes} ({o.files_unsafe}) | "
               f"{len(o.compile_errors)} | {len(o.new_undefined)} | {len(o.new_unused)} | {o.seconds:.0f} |")
        if o.error:
            row += f" error: {o.error}"
            failed = True
        rows.append(row)
        print(row, flush=True)
        for item in o.compile_errors + o.new_undefined + o.new_unused:
            print(f"    {item}", flush=True)
        failed |= bool(o.compile_errors or o.new_undefined)
    (args.out / "table.md").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
