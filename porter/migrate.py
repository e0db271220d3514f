"""``porter migrate``: a legacy repository → a reviewed patch series plus a migration report.

The plan is: audit → every rule family's fixes (one patch per family, in application order) →
HIPify of the CUDA sources on a scratch copy (its own patch, last) → audit of the result. The
user's tree is never modified: the series and the report go to an output folder, or — with
``--branch`` on a clean git work tree — become one commit per patch on a new branch, made in a
temporary worktree so the current branch and work tree are never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from . import registry
from .config import Settings
from .findings import Finding
from .parity import RUN_INSTRUCTIONS, parity_patch
from .patchset import FileChange, Patch, PatchSeries
from .runner import RunResult, run

FOLLOW_UPS = (
    "Benchmark the real workload on both vendors and quote cost, not FLOPS: tokens/s at the "
    "production input/output lengths and concurrency, p95 TTFT and inter-token latency, divided by "
    "the instance price (cost per million tokens); for training, time per optimizer step at a fixed "
    "global batch and MFU.",
    "Check numerical parity with the project's own evaluation suite on both vendors (BF16 "
    "accumulation order differs between vendors; the eval harness, not intuition, confirms parity).",
    "Keep CI running on both vendors once anything ships, or the port silently rots within two "
    "releases (porter's pre-commit hook keeps new CUDA-only code out in the meantime).",
    "Before multi-node training, validate interconnect bandwidth with rccl-tests' all_reduce_perf and "
    "re-tune NCCL/RCCL variables, batch size and activation checkpointing for the new memory size.",
    "Smoke-test the environment on the AMD machine with `porter doctor` (torch/HIP versions, devices, "
    "a bf16 matmul) before trusting anything else; start from AMD's ROCm PyTorch container.",
)


@dataclass
class MigrationPlan:
    root: Path
    before: RunResult
    fixed: RunResult
    after_findings: list[Finding]
    series: PatchSeries
    hipify_engine: str = ""
    hipify_note: str = ""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_noop(self) -> bool:
        return not self.series.nonempty()


def _git(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    git = shutil.which("git")
    if git is None:
        raise click.ClickException("git is not installed")
    env = dict(os.environ)
    env.setdefault("GIT_AUTHOR_NAME", "porter")
    env.setdefault("GIT_AUTHOR_EMAIL", "porter@localhost")
    env.setdefault("GIT_COMMITTER_NAME", "porter")
    env.setdefault("GIT_COMMITTER_EMAIL", "porter@localhost")
    return subprocess.run([git, *args], cwd=cwd, capture_output=True, text=True, check=check, env=env)


def is_git_worktree(path: Path) -> bool:
    if shutil.which("git") is None:
        return False
    proc = _git(["rev-parse", "--show-toplevel"], path, check=False)
    return proc.returncode == 0 and Path(proc.stdout.strip()).resolve() == path.resolve()


def in_git_worktree(path: Path) -> bool:
    if shutil.which("git") is None:
        return False
    return _git(["rev-parse", "--is-inside-work-tree"], path, check=False).stdout.strip() == "true"


def dirty_files(path: Path) -> list[str]:
    """Uncommitted changes under ``path`` (the whole work tree when it is the top)."""
    proc = _git(["status", "--porcelain", "--untracked-files=normal", "--", "."], path, check=False)
    return [line for line in proc.stdout.splitlines() if line.strip()]


def _materialize(result: RunResult, scratch: Path) -> None:
    """Copy the discovered files into ``scratch`` with their post-fix contents."""
    for fr in result.files:
        src = result.root / fr.relpath
        dst = scratch / fr.relpath
        dst.parent.mkdir(parents=True, exist_ok=True)
        if fr.changed and fr.final_text is not None:
            dst.write_bytes(fr.encode(fr.final_text))
        else:
            try:
                shutil.copyfile(src, dst, follow_symlinks=False)
            except OSError:
                continue
    for fr in result.files:
        for path, text in fr.new_files.items():
            dst = scratch / path
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_text(text, encoding="utf-8")


def _apply_changes(root: Path, changes: list[FileChange]) -> None:
    for change in changes:
        target = root / change.path
        if change.after is None:
            if target.is_file() and not target.is_symlink():
                target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(change.after)


def _hipify(result: RunResult, scratch: Path, engine: str) -> tuple[Patch | None, list[Finding], str, str]:
    """Run a HIPify engine over the post-fix CUDA sources; return its patch and findings."""
    if engine == "none":
        return None, [], "", "HIPify skipped (--hipify none)."
    try:
        from .hipify_wrappers import run_hipify  # type: ignore[attr-defined]
    except ImportError:
        return None, [], "", "No HIPify adapter is available in this build of porter."
    cuda_files = sorted(fr.relpath for fr in result.files if fr.language == "cuda")
    if not cuda_files:
        return None, [], "", "No CUDA/C++ sources: nothing to HIPify."
    hip = run_hipify(scratch, cuda_files, engine=engine)
    changes: list[FileChange] = list(getattr(hip, "changes", []) or [])
    findings: list[Finding] = list(getattr(hip, "findings", []) or [])
    name = getattr(hip, "engine", "") or engine
    version = getattr(hip, "version", "") or ""
    label = f"{name} {version}".strip()
    skipped = list(getattr(hip, "skipped", []) or [])
    note = ""
    if skipped:
        note = (f"{len(skipped)} source(s) built by `CUDAExtension` were not converted: on a ROCm build of "
                "torch, `CUDAExtension` hipifies them itself at build time, and converting them here too "
                "would double-convert them (" + ", ".join(f"`{p}`" for p in skipped[:8])
                + (", …" if len(skipped) > 8 else "") + ").")
    if not changes:
        return None, findings, label, note or f"HIPify ({label}) changed nothing."
    patch = Patch(
        name="hipify",
        title=f"HIPify the CUDA sources ({label})",
        description=(
            "Mechanical CUDA → HIP translation of the kernel sources, run after the warp-size patch on "
            "the already-patched sources. Renamed files appear as a deletion plus an addition."
            + (f"\n\n{note}" if note else "")
        ),
        verified="The HIPify engine's own conversion; porter's compiler tests check that warp-patched, "
        "HIPified kernels compile with hipcc for gfx90a (wave64).",
        review="Build the extension on a ROCm machine and run its tests; check the unconverted-API findings.",
        changes=changes,
    )
    return patch, findings, label, note


def plan(
    root: Path, settings: Settings, *, hipify: str = "auto", jobs: int | None = None,
    progress: Any = None,
) -> MigrationPlan:
    started = time.perf_counter()
    before = run(root, [root], settings, "audit", jobs=jobs, progress=progress, use_cache=False)
    fixed = run(root, [root], settings, "fix", jobs=jobs, progress=progress)
    series = fixed.series()
    parity = parity_patch(fixed)
    if parity is not None:
        series.patches.append(parity)
    with tempfile.TemporaryDirectory(prefix="porter-migrate-") as tmp:
        scratch = Path(tmp) / root.name
        scratch.mkdir()
        _materialize(fixed, scratch)
        hip_patch, hip_findings, engine, note = _hipify(fixed, scratch, hipify)
        if hip_patch is not None:
            series.patches.append(hip_patch)
            _apply_changes(scratch, hip_patch.changes)  # the after-audit sees the HIPified tree
        after = run(scratch, [scratch], settings, "audit", jobs=jobs, use_cache=False)
        after_findings = after.findings + hip_findings
    return MigrationPlan(
        root=root, before=before, fixed=fixed, after_findings=sorted(after_findings, key=lambda f: f.sort_key),
        series=series, hipify_engine=engine, hipify_note=note, seconds=time.perf_counter() - started,
    )


# -- the report -------------------------------------------------------------------------------


def _class_counts(findings: list[Finding]) -> dict[str, int]:
    from .reporters import category_of

    out = {"benign": 0, "shim": 0, "replace": 0}
    for f in findings:
        out[category_of(f).value] += 1
    return out


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_report(p: MigrationPlan) -> str:
    from .estimate import summarize
    from .reporters import category_of, severity_of

    rules = registry.rules()
    name = p.root.name
    before = p.before.findings
    after = p.after_findings
    fixed = p.fixed.fixed
    lines = [f"# Migration report: {name}", ""]
    lines += [
        f"porter migrated `{name}` into {len(p.series.nonempty())} patch(es) "
        f"({sum(len(x.changes) for x in p.series.nonempty())} file change(s)); "
        f"{len(fixed)} site(s) were rewritten automatically and {sum(1 for f in after if _blocking(f))} "
        "site(s) still need a human.",
        "",
        "## Audit before and after",
        "",
        "| | benign | shim | replace | total |",
        "|---|---|---|---|---|",
    ]
    for label, items in (("before", before), ("after", after)):
        c = _class_counts(items)
        lines.append(f"| {label} | {c['benign']} | {c['shim']} | {c['replace']} | {len(items)} |")
    summary = summarize(after, files_scanned=p.fixed.files_scanned)
    est = summary.estimate
    fit = summary.goal_fit
    lines += ["", f"**Effort left:** {est.low_days:g}–{est.high_days:g} engineer-day(s) (point estimate "
              f"{est.days:g}: {est.total_hours:g} h at {est.hours_per_day:g} h/day), before the follow-ups "
              f"below. The repository fits the playbook goal *{fit.goal}* (typically {fit.typical_effort}).", ""]
    lines += [f"- {r}" for r in est.reasoning]
    lines.append("")
    lines += ["## Patch series", "", "Apply in order (`git am` or `git apply` both accept these files):", ""]
    names = p.series.file_names()
    for fname, patch in zip(names, p.series.nonempty(), strict=True):
        lines.append(f"- `{fname}` — {patch.title} ({len(patch.changes)} file(s))")
    if p.hipify_note:
        lines += ["", f"HIPify: {p.hipify_note}"]
    lines += ["", "## Rewrites", "", "| file | line | rule | what |", "|---|---|---|---|"]
    for f in fixed:
        r = rules.get(f.code)
        lines.append(f"| [{f.path}]({f.path}#L{f.line}) | {f.line} | {f.code} {r.name if r else ''} | "
                     f"{_md(f.fix_title or f.message)} |")
    if not fixed:
        lines.append("| — | | | nothing was rewritten |")
    lines += ["", "## Flagged sites (need a human)", "",
              "| file | line | rule | class | reason | next step |", "|---|---|---|---|---|---|"]
    flagged = [f for f in after if _blocking(f)]
    for f in flagged:
        r = rules.get(f.code)
        nxt = "apply with `--unsafe-fixes` after review" if f.fix.value == "unsafe" else (
            r.summary if r else "see the finding")
        lines.append(f"| [{f.path}]({f.path}#L{f.line}) | {f.line} | {f.code} {r.name if r else ''} | "
                     f"{category_of(f).value} | {_md(f.message)} | {_md(nxt)} |")
    if not flagged:
        lines.append("| — | | | | nothing left | |")
    info = [f for f in after if severity_of(f).value == "info"]
    if info:
        lines += ["", f"{len(info)} informational site(s) (e.g. `device=\"cuda\"`, which works unchanged on "
                  "ROCm PyTorch) were left as they are; `porter audit` lists them."]
    if any(x.name == "parity-tests" for x in p.series.nonempty()):
        lines += ["", "## Parity tests", "", "The series adds `tests/porter_parity/test_porter_parity.py`: one test per "
                  "rewritten attention, apex, quantization or fp8 site. " + RUN_INSTRUCTIONS]
    lines += ["", "## Follow-ups no codemod can do", ""] + [f"1. {t}" for t in FOLLOW_UPS]
    lines += ["", f"_Generated by porter in {p.seconds:.1f} s._" if p.extra.get("timing") else ""]
    return "\n".join(lines).rstrip() + "\n"


def _blocking(f: Finding) -> bool:
    from .reporters import severity_of

    return severity_of(f).value != "info"


# -- writing ----------------------------------------------------------------------------------


def write_outputs(p: MigrationPlan, out: Path) -> list[Path]:
    from .textio import atomic_write

    if out.exists() and (out.is_symlink() or not out.is_dir()):
        raise click.UsageError(f"--out {out} must be a directory")
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("[0-9][0-9][0-9][0-9]-*.patch"):
        stale.unlink()
    written = p.series.write_dir(out, title=f"porter patch series for {p.root.name}")
    report = out / "MIGRATION.md"
    atomic_write(report, render_report(p).encode("utf-8"))
    return [*written, report]


def commit_branch(p: MigrationPlan, branch: str) -> list[str]:
    """One commit per patch on a new branch, made in a temporary worktree."""
    root = p.root
    if _git(["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], root, check=False).returncode == 0:
        raise click.ClickException(f"branch {branch!r} already exists")
    commits = []
    with tempfile.TemporaryDirectory(prefix="porter-branch-") as tmp:
        wt = Path(tmp) / "wt"
        _git(["worktree", "add", "-q", "-b", branch, str(wt), "HEAD"], root)
        try:
            patches = p.series.nonempty()
            for number, patch in enumerate(patches, 1):
                data = patch.render_mail(number, len(patches))
                proc = subprocess.run(["git", "apply", "--index", "-"], cwd=wt, input=data, capture_output=True,
                                      check=False)
                if proc.returncode != 0:
                    raise click.ClickException(f"patch {number} ({patch.name}) did not apply: "
                                               f"{proc.stderr.decode(errors='replace').strip()}")
                msg = f"porter: {patch.name}: {patch.message()}"
                _git(["commit", "-q", "--no-verify", "-m", msg], wt)
                commits.append(_git(["rev-parse", "--short", "HEAD"], wt).stdout.strip())
        finally:
            _git(["worktree", "remove", "--force", str(wt)], root, check=False)
    return commits


@click.command("migrate")
@click.argument("repo", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("-o", "--out", type=click.Path(path_type=Path, file_okay=False),
              help="Folder for the patch series and MIGRATION.md (default: <repo>-porter-migration beside REPO).")
@click.option("--dry-run", is_flag=True, help="Show the plan and the diffs; write nothing.")
@click.option("--branch", default=None, help="Also commit the series on this new branch (clean git work tree only).")
@click.option("--allow-dirty", is_flag=True, help="Migrate a work tree with uncommitted changes.")
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Include approximate (unsafe) fixes.")
@click.option("--hipify", type=click.Choice(["auto", "torch", "perl", "clang", "none"]), default="auto",
              show_default=True, help="HIPify engine for the CUDA sources.")
@click.option("--select", multiple=True, help="Rule codes or prefixes to enable.")
@click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable.")
@click.option("--config", "config", multiple=True, help="Config file or KEY=VALUE override.")
@click.option("-j", "--jobs", type=int, default=None, help="Worker processes.")
@click.option("-q", "--quiet", is_flag=True)
def migrate(repo: Path, out: Path | None, dry_run: bool, branch: str | None, allow_dirty: bool,
            unsafe_fixes: bool | None, hipify: str, select: tuple[str, ...], ignore: tuple[str, ...],
            config: tuple[str, ...], jobs: int | None, quiet: bool) -> None:
    """Turn REPO into a reviewable patch series (one patch per family) plus a migration report."""
    import sys

    from rich.console import Console

    from .cli import _settings

    console = Console(stderr=True, quiet=quiet, highlight=False)
    root = Path(os.path.abspath(repo))
    git_tree = is_git_worktree(root)
    if (git_tree or in_git_worktree(root)) and not allow_dirty:
        dirty = dirty_files(root)
        if dirty:
            raise click.ClickException(
                f"{root} has uncommitted changes ({len(dirty)} path(s)); commit or stash them, or pass --allow-dirty"
            )
    if branch and not git_tree:
        raise click.UsageError("--branch needs REPO to be the top of a git work tree")
    if branch:
        if dirty_files(root):
            raise click.ClickException("--branch needs a clean work tree: the branch starts from HEAD, "
                                       "so uncommitted changes would not be in it")
        if _git(["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], root, check=False).returncode == 0:
            raise click.ClickException(f"branch {branch!r} already exists")
    settings = _settings({"select": select, "ignore": ignore, "config": config}, root, unsafe_fixes)
    with console.status(f"porter: migrating {root.name}…", spinner="dots"):
        p = plan(root, settings, hipify=hipify, jobs=jobs)
    patches = p.series.nonempty()
    console.print(f"porter: plan for {root.name}: {len(patches)} patch(es), {len(p.fixed.fixed)} rewrite(s), "
                  f"{sum(1 for f in p.after_findings if _blocking(f))} site(s) left for review "
                  f"({p.seconds:.1f} s).")
    for number, (fname, patch) in enumerate(zip(p.series.file_names(), patches, strict=True), 1):
        console.print(f"  {number}. {fname}: {patch.title} ({len(patch.changes)} file(s))")
    if dry_run:
        sys.stdout.buffer.write(p.series.render())
        sys.stdout.flush()
        sys.exit(1 if patches else 0)
    if not patches:
        console.print("porter: nothing to migrate: the repository is already ported (no patch written).")
        sys.exit(0)
    # by default beside the repository, never inside it (that would dirty the work tree)
    out = out or root.parent / f"{root.name}-porter-migration"
    out_abs = Path(os.path.abspath(out))
    written = write_outputs(p, out_abs)
    console.print(f"porter: wrote {len(written) - 2} patch(es), INDEX.md and MIGRATION.md to {out}")
    if branch:
        commits = commit_branch(p, branch)
        console.print(f"porter: committed {len(commits)} patch(es) on new branch {branch!r}: {' '.join(commits)}")
    sys.exit(0)
