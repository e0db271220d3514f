"""``porter migrate``: a legacy repository → a reviewed patch series plus a migration report.

The plan is: audit → every rule family's fixes (one patch per family, in application order) →
HIPify of the CUDA sources on a scratch copy (its own patch, last) → audit of the result. The
user's tree is never modified: the series and the report go to an output folder, or — with
``--branch`` on a clean git work tree — become one commit per patch on a new branch, made in a
temporary worktree so the current branch and work tree are never touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from . import proc, registry
from .apis import DEFAULT_TARGET_ROCM, DEFAULT_TARGET_TORCH
from .audit_report import md_link
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


def migration_target(settings: Settings, option: str | None) -> tuple[Settings, str]:
    """The torch release a migration ports against, and the sentence MIGRATION.md states.

    ``--target-torch`` wins, then the config's ``target-torch``, then porter's migration target
    (:data:`porter.apis.DEFAULT_TARGET_TORCH`: the newest stable torch with ROCm wheels porter
    knows). ``porter apply`` has no such default: without ``target-torch`` it ports against the
    repository's own pins.
    """
    from dataclasses import replace

    from packaging.version import InvalidVersion, Version

    if option:
        try:
            Version(option)
        except InvalidVersion:
            raise click.UsageError(f"--target-torch must be a version such as 2.9, not {option!r}") from None
        settings, how = replace(settings, target_torch=option), "set by --target-torch"
    elif settings.target_torch:
        how = "set by the configuration's target-torch"
    else:
        settings, how = replace(settings, target_torch=DEFAULT_TARGET_TORCH), (
            "porter's default for a migration: the newest stable torch release with ROCm wheels that porter "
            "knows; override it with --target-torch or --config target-torch=...")
    from .codemods.dependencies.catalog import rocm_for_torch, rocm_index

    rocm = settings.option("dependencies", "rocm-version") or rocm_for_torch(settings.target_torch)
    index = f" from the ROCm {rocm} wheel index ({rocm_index(str(rocm))})" if rocm else ""
    return settings, (f"torch >= {settings.target_torch}{index} ({how}). The torch requirement and its wheel "
                      "index are raised to it in the dependencies patch, and every rewrite is checked against "
                      "it.")


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


def _repo(path: Path) -> proc.GitRepo | None:
    return proc.locate(path).repo


def is_git_worktree(path: Path) -> bool:
    """``path`` is the top of a git work tree porter may use (see :func:`porter.proc.locate`)."""
    repo = _repo(path)
    return repo is not None and repo.work_tree == Path(os.path.realpath(path))


def in_git_worktree(path: Path) -> bool:
    return _repo(path) is not None


def dirty_files(path: Path) -> list[str]:
    """Uncommitted changes under ``path`` (the whole work tree when it is the top)."""
    repo = _repo(path)
    if repo is None:
        return []
    try:
        out = proc.git(repo, ["status", "--porcelain", "--untracked-files=normal", "--ignore-submodules=all",
                              "--", "."], cwd=path, check=True)
    except proc.GitError as exc:
        raise click.ClickException(f"cannot tell whether {path} has uncommitted changes ({exc}); pass "
                                   "--allow-dirty to migrate it anyway") from exc
    return [line for line in out.stdout.decode("utf-8", "surrogateescape").splitlines() if line.strip()]


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
    root_real = os.path.realpath(root)
    for change in changes:
        target = root / change.path
        if not os.path.realpath(target).startswith(root_real + os.sep):
            continue  # never write outside the scratch copy, whatever an engine reported
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
    from .hipify_wrappers import run_hipify  # type: ignore[attr-defined]

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
        note = (f"{len(skipped)} source(s) built by `CUDAExtension` or named by other build code "
                "(`cpp_extension.load`, CMake, Makefiles) were not converted: on a ROCm build of torch the "
                "extension build hipifies them itself, and converting or renaming them here would break or "
                "double-convert that build (" + ", ".join(f"`{p}`" for p in skipped[:8])
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
        # a fix the semantic gate withheld is still offered by a plain audit: report it as withheld
        held = {(f.path, f.line, f.column, f.code): f for f in fixed.findings if "withheld" in f.data}
        after_findings = [held.get((f.path, f.line, f.column, f.code), f) for f in after.findings] + hip_findings
    return MigrationPlan(
        root=root, before=before, fixed=fixed, after_findings=sorted(after_findings, key=lambda f: f.sort_key),
        series=series, hipify_engine=engine, hipify_note=note, seconds=time.perf_counter() - started,
    )


# -- the report -------------------------------------------------------------------------------


def _class_counts(findings: list[Finding]) -> dict[str, int]:
    out = {"benign": 0, "shim": 0, "replace": 0}
    for f in findings:
        out[registry.category_of(f).value] += 1
    return out


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_report(p: MigrationPlan) -> str:
    """MIGRATION.md: the first screen says what happened and what is left; flagged sites are
    grouped by rule (count, one example, the next step) with every site in a collapsed table;
    Mermaid charts (rendered by GitHub) show the work left by family and the sites by class."""
    from .estimate import summarize

    rules = registry.rules()
    name = p.root.name
    before = p.before.findings
    after = p.after_findings
    fixed = p.fixed.fixed
    flagged = [f for f in after if registry.is_actionable(f)]
    lines = [f"# Migration report: {name}", ""]
    target = p.extra.get("target")
    if target:
        lines += [f"**Target:** {target}", ""]
    lines += [
        f"porter migrated `{name}` into {len(p.series.nonempty())} patch(es) "
        f"({sum(len(x.changes) for x in p.series.nonempty())} file change(s)); "
        f"{len(fixed)} site(s) were rewritten automatically and {len(flagged)} "
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
              f"{est.days:g}: {round(est.total_hours, 1):g} h at {est.hours_per_day:g} h/day), before the follow-ups "
              f"below. The repository fits the goal *{fit.goal}* (typically {fit.typical_effort}).", ""]
    lines += _report_charts(flagged, after, est, summary.by_rule)
    lines += ["<details><summary>How the estimate was computed</summary>", ""]
    lines += [f"- {r}" for r in est.reasoning]
    lines += ["", "</details>", ""]
    lines += ["## Patch series", "", "Apply in order with `git apply`, or commit them with `git am --keep-cr` "
              "(without `--keep-cr`, `git am` strips the CR of CRLF files and the patches do not apply):", ""]
    names = p.series.file_names()
    for fname, patch in zip(names, p.series.nonempty(), strict=True):
        lines.append(f"- `{fname}` — {patch.title} ({len(patch.changes)} file(s))")
    if p.hipify_note:
        lines += ["", f"HIPify: {p.hipify_note}"]
    withheld = [f for f in after if "withheld" in f.data]
    if withheld:
        lines += ["", f"{len(withheld)} fix(es) were withheld by the semantic gate (the fixed module would not "
                  "import, or would need releases the nearest manifest's pins exclude); they are listed below "
                  "with the reason."]
    lines += ["", "## Flagged sites (need a human)", "",
              f"{len(flagged)} site(s), grouped by rule; every site is listed below the table. Line numbers "
              "here refer to the tree **after** the patch series is applied (these sites come from the audit "
              "of the patched tree).", ""]
    if flagged:
        lines += ["| rule | class | sites | example | next step |", "|---|---|---|---|---|"]
        for code, items in _by_rule(flagged):
            r = rules.get(code)
            first = items[0]
            lines.append(f"| {code} {r.name if r else ''} | {_class_of(first)} | {len(items)} | "
                         f"{md_link(first.path, first.line)}: {_md(first.message)} | "
                         f"{_md(_next_step(items, r))} |")
        lines += ["", f"<details><summary>All {len(flagged)} flagged site(s)</summary>", "",
                  "| file | line | rule | class | reason | next step |", "|---|---|---|---|---|---|"]
        for f in flagged:
            r = rules.get(f.code)
            lines.append(f"| {md_link(f.path, f.line, f.path)} | {f.line} | {f.code} {r.name if r else ''} | "
                         f"{_class_of(f)} | {_md(f.message)} | {_md(_next_step([f], r))} |")
        lines += ["", "</details>"]
    else:
        lines.append("Nothing left: every site porter found was rewritten or is informational.")
    info = [f for f in after if not registry.is_actionable(f)]
    if info:
        lines += ["", f"{len(info)} informational site(s) (e.g. `device=\"cuda\"`, which works unchanged on "
                  "ROCm PyTorch) were left as they are; `porter audit` lists them."]

    lines += ["", "## Rewrites", "",
              f"{len(fixed)} site(s), grouped by rule; every site is listed below the table. Line numbers here "
              "refer to the **original** tree (before the patch series).", ""]
    if fixed:
        lines += ["| rule | sites | what | patch |", "|---|---|---|---|"]
        patch_of = _patch_of_code(p)
        for code, items in _by_rule(fixed):
            r = rules.get(code)
            lines.append(f"| {code} {r.name if r else ''} | {len(items)} | {_md(items[0].fix_title or items[0].message)} "
                         f"| {patch_of.get(code, '')} |")
        lines += ["", f"<details><summary>All {len(fixed)} rewrite(s)</summary>", "",
                  "| file | line | rule | what |", "|---|---|---|---|"]
        for f in fixed:
            r = rules.get(f.code)
            lines.append(f"| {md_link(f.path, f.line, f.path)} | {f.line} | {f.code} {r.name if r else ''} | "
                         f"{_md(f.fix_title or f.message)} |")
        lines += ["", "</details>"]
    else:
        lines.append("Nothing was rewritten.")
    if any(x.name == "parity-tests" for x in p.series.nonempty()):
        lines += ["", "## Parity tests", "", "The series adds `tests/porter_parity/test_porter_parity.py`: one test per "
                  "rewritten attention, apex, quantization or fp8 site. " + RUN_INSTRUCTIONS]
    lines += ["", "## Follow-ups no codemod can do", ""] + [f"1. {t}" for t in FOLLOW_UPS]
    lines += ["", f"_Generated by porter in {p.seconds:.1f} s._" if p.extra.get("timing") else ""]
    return "\n".join(lines).rstrip() + "\n"


def _class_of(f: Finding) -> str:
    return registry.category_of(f).value


def _by_rule(findings: list[Finding]) -> list[tuple[str, list[Finding]]]:
    """Findings grouped by rule, most sites first (ties by code)."""
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.code, []).append(f)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def _next_step(items: list[Finding], rule: Any) -> str:
    unsafe = sum(1 for f in items if f.fix.value == "unsafe")
    if unsafe == len(items):
        return "review, then apply with `porter apply --unsafe-fixes`"
    step = f"{rule.summary} See `porter rule {rule.code}`." if rule else "see the finding"
    if unsafe:
        step += f" ({unsafe} of them: apply with `--unsafe-fixes` after review)"
    return step


def _patch_of_code(p: MigrationPlan) -> dict[str, str]:
    """The file name of the (first) patch that carries each rewritten rule."""
    out: dict[str, str] = {}
    for fname, patch in zip(p.series.file_names(), p.series.nonempty(), strict=True):
        for note in patch.notes:
            code = note.split("` ", 1)[-1].split(":", 1)[0].strip()
            out.setdefault(code, f"`{fname}`")
    return out


def _mermaid_label(text: str) -> str:
    return text.replace('"', "'")


def _report_charts(flagged: list[Finding], after: list[Finding], est: Any, by_rule: Any) -> list[str]:
    """Two Mermaid pie charts: hours of work left by family, and the audited sites by class."""
    hours: dict[str, float] = {}
    for rc in by_rule:
        if rc.hours > 0:
            hours[rc.family] = hours.get(rc.family, 0.0) + rc.hours
    if est.kernel_file_hours:
        hours["kernels"] = hours.get("kernels", 0.0) + est.kernel_file_hours
    if est.package_hours:
        hours["CUDA-only packages (fixed cost each)"] = est.package_hours
    out: list[str] = []
    if hours:
        out += ["```mermaid", f"pie showData title Work left by family (hours, point estimate {round(est.total_hours, 1):g} h "
                "with setup)"]
        out += [f'    "{_mermaid_label(fam)}" : {round(h, 1):g}' for fam, h in sorted(hours.items(),
                                                                                   key=lambda kv: (-kv[1], kv[0]))]
        if est.setup_hours:
            out.append(f'    "setup" : {est.setup_hours:g}')
        out += ["```", ""]
    c = _class_counts(after)
    if any(c.values()):
        out += ["```mermaid", "pie showData title Sites after the patches, by class"]
        out += [f'    "{k}" : {v}' for k, v in c.items() if v]
        out += ["```", ""]
    return out


# -- writing ----------------------------------------------------------------------------------


MANIFEST = ".porter-migration.json"
_PATCH_NAME = re.compile(r"^[0-9]{4}-.*\.patch$")


def _sha256(path: Path) -> str | None:
    try:
        if path.is_symlink() or not path.is_file():
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _owned_files(out: Path) -> dict[str, str]:
    """name -> sha256 of the files a previous run wrote into ``out`` (from its manifest)."""
    path = out / MANIFEST
    if path.is_symlink() or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str) and "/" not in k
            and k not in ("", ".", "..", MANIFEST)}


def write_outputs(p: MigrationPlan, out: Path) -> list[Path]:
    """Write the series, INDEX.md and MIGRATION.md into ``out``.

    porter replaces or removes only files it wrote there itself and that nobody edited since (a
    manifest, ``.porter-migration.json``, records their hashes). A file it would overwrite, or a
    ``NNNN-*.patch`` that would join the series in ``git am NNNN-*.patch``, that porter did not write
    is never touched: the command fails and names it.
    """
    from .textio import atomic_write

    if out.exists() and (out.is_symlink() or not out.is_dir()):
        raise click.UsageError(f"--out {out} must be a directory")
    out.mkdir(parents=True, exist_ok=True)
    owned = _owned_files(out)
    names = set(p.series.file_names()) | {"INDEX.md", "MIGRATION.md"}
    conflicts, stale = [], []
    for entry in sorted(os.listdir(out)):
        if entry == MANIFEST:
            continue
        ours = entry in owned and _sha256(out / entry) == owned[entry]
        if ours:
            if entry not in names:
                stale.append(entry)
        elif entry in names or _PATCH_NAME.match(entry):
            conflicts.append(entry)
    if conflicts:
        raise click.ClickException(
            f"{out} holds {', '.join(conflicts)}, which porter did not write (or which were edited since): porter "
            "never overwrites or deletes them; choose another --out or move them away")
    for name in stale:
        (out / name).unlink()
    written = p.series.write_dir(out, title=f"porter patch series for {p.root.name}")
    report = out / "MIGRATION.md"
    atomic_write(report, render_report(p).encode("utf-8"))
    files = [*written, report]
    manifest = {"generator": "porter migrate", "files": {f.name: _sha256(f) for f in sorted(files)}}
    atomic_write(out / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    return files


def _index_entries(repo: proc.GitRepo, index: Path) -> dict[str, tuple[str, str]]:
    """path -> (mode, blob) of every stage-0 entry of ``index``."""
    out = proc.git(repo, ["ls-files", "-s", "-z"], index_file=index).stdout
    entries = {}
    for item in out.split(b"\0"):
        if not item:
            continue
        meta, _, path = item.partition(b"\t")
        mode, sha, stage = meta.decode().split(" ")
        if stage == "0":
            entries[path.decode("utf-8", "surrogateescape")] = (mode, sha)
    return entries


def _hash(repo: proc.GitRepo, path: str, data: bytes, *, write: bool) -> str:
    """The blob id ``data`` gets when committed at ``path``.

    git's built-in conversions (``eol``, ``text``, ``ident``, ``working-tree-encoding``) apply as
    ``git add`` would apply them; the repository's filter drivers are disabled (:mod:`porter.proc`).
    """
    args = ["hash-object", "--path", path, "--stdin"] + (["-w"] if write else [])
    return proc.git(repo, args, input=data).stdout.decode().strip()


def _stage_patch(repo: proc.GitRepo, index: Path, entries: dict[str, tuple[str, str]], patch: Patch) -> None:
    lines = []
    for change in sorted(patch.changes, key=lambda c: c.path):
        path = change.path
        parts = path.split("/")
        if not path or path.startswith("/") or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
            raise proc.GitError(f"refusing to commit an unsafe path {path!r}")
        entry = entries.get(path)
        if change.before is not None:
            if entry is None:
                raise proc.GitError(f"`{path}` is not in HEAD; the branch cannot be built from it")
            if entry[0] not in ("100644", "100755"):
                raise proc.GitError(f"`{path}` is not a regular file in HEAD (mode {entry[0]})")
            if _hash(repo, path, change.before, write=False) != entry[1]:
                raise proc.GitError(
                    f"`{path}` in the work tree does not match HEAD after git's own conversions (a filter "
                    "driver, which porter never runs?); apply the patch series by hand instead")
        elif entry is not None:
            raise proc.GitError(f"`{path}` already exists in HEAD")
        if change.after is None:
            lines.append(f"0 {'0' * 40}\t{path}")
            entries.pop(path, None)
        else:
            mode = entry[0] if entry is not None else f"{change.mode or 0o100644:o}"
            sha = _hash(repo, path, change.after, write=True)
            lines.append(f"{mode} {sha}\t{path}")
            entries[path] = (mode, sha)
    if lines:
        data = "".join(line + "\0" for line in lines).encode("utf-8", "surrogateescape")
        proc.git(repo, ["update-index", "-z", "--index-info"], input=data, index_file=index)


def _stale_porter_worktree(repo: proc.GitRepo, path: Path) -> bool:
    """``path`` is a worktree an older porter made: ``<tmp>/porter-branch-*/wt``, linked to this repository.

    The registration lives in the repository's own metadata, which the target controls: only a folder
    in the temp dir whose ``.git`` file points back into this repository's ``worktrees/`` qualifies, so
    a forged entry cannot make porter delete a folder elsewhere.
    """
    tmp = os.path.realpath(tempfile.gettempdir())
    if path.name != "wt" or not path.parent.name.startswith("porter-branch-"):
        return False
    if os.path.realpath(path.parent.parent) != tmp or path.is_symlink() or path.parent.is_symlink():
        return False
    try:
        text = (path / ".git").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return False
    common = os.path.realpath(repo.git_dir / "worktrees")
    target = os.path.realpath(text[len("gitdir:"):].strip()) if text.startswith("gitdir:") else ""
    return os.path.dirname(target) == common


def clean_stale_worktrees(repo: proc.GitRepo) -> list[str]:
    """Remove worktrees an interrupted older porter registered under the temp dir; return their paths."""
    listed = proc.git(repo, ["worktree", "list", "--porcelain"], check=False)
    removed = []
    for line in listed.stdout.decode("utf-8", "surrogateescape").splitlines():
        if not line.startswith("worktree "):
            continue
        path = Path(line[len("worktree "):])
        if _stale_porter_worktree(repo, path):
            proc.git(repo, ["worktree", "remove", "--force", "--force", str(path)], check=False)
            removed.append(str(path))
    if removed:
        proc.git(repo, ["worktree", "prune"], check=False)
    return removed


def commit_branch(p: MigrationPlan, branch: str) -> list[str]:
    """One commit per patch on a new branch, built without checking anything out.

    The commits are made with plumbing on a temporary index (``hash-object``, ``update-index``,
    ``write-tree``, ``commit-tree``): no worktree, no checkout, hence no smudge filter or checkout
    hook, and nothing to clean up. The branch is created last, in one ``update-ref`` that fails if
    it exists: an interrupted run (SIGINT, SIGKILL) leaves no branch, only unreachable objects that
    ``git gc`` removes.
    """
    repo = _repo(p.root)
    if repo is None:
        raise click.ClickException(f"{p.root} is not a git work tree porter can use")
    ref = f"refs/heads/{branch}"
    try:
        proc.git(repo, ["check-ref-format", ref])
    except proc.GitError as exc:
        raise click.ClickException(f"{branch!r} is not a valid branch name") from exc
    if proc.git(repo, ["rev-parse", "--verify", "--quiet", ref], check=False).returncode == 0:
        raise click.ClickException(f"branch {branch!r} already exists")
    clean_stale_worktrees(repo)
    commits: list[str] = []
    try:
        parent = proc.git(repo, ["rev-parse", "--verify", "HEAD^{commit}"]).stdout.decode().strip()
        with tempfile.TemporaryDirectory(prefix="porter-index-") as tmp:
            index = Path(tmp) / "index"
            proc.git(repo, ["read-tree", parent], index_file=index)
            entries = _index_entries(repo, index)
            for patch in p.series.nonempty():
                _stage_patch(repo, index, entries, patch)
                tree = proc.git(repo, ["write-tree"], index_file=index).stdout.decode().strip()
                msg = f"porter: {patch.name}: {patch.message()}"
                parent = proc.git(repo, ["commit-tree", "--no-gpg-sign", tree, "-p", parent, "-F", "-"],
                                  input=msg.encode("utf-8")).stdout.decode().strip()
                commits.append(parent)
        if commits:
            proc.git(repo, ["update-ref", "-m", "porter migrate", ref, parent, ""])
    except proc.GitError as exc:
        raise click.ClickException(f"the branch {branch!r} was not created: {exc}") from exc
    return [c[:12] for c in commits]


@click.command("migrate")
@click.argument("repo", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("-o", "--out", type=click.Path(path_type=Path, file_okay=False),
              help="Folder for the patch series and MIGRATION.md (default: <repo>-porter-migration beside REPO).")
@click.option("--dry-run", is_flag=True, help="Show the plan and the diffs; write nothing.")
@click.option("--branch", default=None, help="Also commit the series on this new branch (clean git work tree only).")
@click.option("--allow-dirty", is_flag=True, help="Migrate a work tree with uncommitted changes.")
@click.option("--trust-git-dir", is_flag=True,
              help="Use a .git file/symlink (gitdir: ...) that points elsewhere, e.g. a linked worktree; "
              "by default porter ignores it.")
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Include approximate (unsafe) fixes.")
@click.option("--hipify", type=click.Choice(["auto", "torch", "perl", "clang", "none"]), default="auto",
              show_default=True, help="HIPify engine for the CUDA sources.")
@click.option("--select", multiple=True, help="Rule codes or prefixes to enable.")
@click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable.")
@click.option("--config", "config", multiple=True, help="Config file or KEY=VALUE override.")
@click.option("--target-torch", default=None, metavar="VERSION",
              help=f"The torch release the migrated code targets (default: porter's migration target, "
              f"torch {DEFAULT_TARGET_TORCH} with ROCm {DEFAULT_TARGET_ROCM} wheels; overrides the config's "
              "target-torch).")
@click.option("-j", "--jobs", type=int, default=None, help="Worker processes.")
@click.option("-q", "--quiet", is_flag=True)
def migrate(repo: Path, out: Path | None, dry_run: bool, branch: str | None, allow_dirty: bool,
            trust_git_dir: bool, unsafe_fixes: bool | None, hipify: str, select: tuple[str, ...],
            ignore: tuple[str, ...], config: tuple[str, ...], target_torch: str | None, jobs: int | None,
            quiet: bool) -> None:
    """Turn REPO into a reviewable patch series (one patch per family) plus a migration report."""
    import sys

    from .console import Progress, make_console, resolve_settings

    console = make_console(stderr=True, quiet=quiet)
    root = Path(os.path.abspath(repo))
    proc.register_untrusted_root(root)
    if trust_git_dir:
        proc.set_trust_git_dir(True)
    git_tree = is_git_worktree(root)
    if (git_tree or in_git_worktree(root)) and not allow_dirty:
        dirty = dirty_files(root)
        if dirty:
            raise click.ClickException(
                f"{root} has uncommitted changes ({len(dirty)} path(s)); commit or stash them, or pass --allow-dirty"
            )
    if branch and not git_tree:
        refused = proc.locate(root).refused
        raise click.UsageError("--branch needs REPO to be the top of a git work tree"
                               + (f" ({refused})" if refused else ""))
    if branch:
        if dirty_files(root):
            raise click.ClickException("--branch needs a clean work tree: the branch starts from HEAD, "
                                       "so uncommitted changes would not be in it")
        repo = _repo(root)
        assert repo is not None
        if proc.git(repo, ["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], check=False).returncode == 0:
            raise click.ClickException(f"branch {branch!r} already exists")
    settings = resolve_settings(root, config=config, select=select, ignore=ignore, unsafe_fixes=unsafe_fixes)
    settings, target_note = migration_target(settings, target_torch)
    progress = None if quiet else Progress(console, label=f"porter migrate {root.name}")
    try:
        p = plan(root, settings, hipify=hipify, jobs=jobs, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    p.extra["target"] = target_note
    patches = p.series.nonempty()
    console.print(f"porter: plan for {root.name}: {len(patches)} patch(es), {len(p.fixed.fixed)} rewrite(s), "
                  f"{sum(1 for f in p.after_findings if registry.is_actionable(f))} site(s) left for review "
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
