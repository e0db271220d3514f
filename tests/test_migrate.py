"""``porter migrate`` on small temporary repositories (porter/migrate.py).

One small CUDA-locked project (deprecated ``torch.cuda.amp``, an apex norm, a ``+cu121`` torch
pin and a kernel with a 32-lane warp shuffle) is migrated once per module; the tests then check
the series against ``git apply``, ``git am`` and ``porter apply``, and the command's contract:
dry runs write nothing, dirty trees are refused, ``--branch`` leaves the checkout alone, a second
run on the migrated tree is a no-op.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import git, needs_git, run_porter

pytestmark = needs_git

FILES = {
    "model.py": '''\
        import torch
        from apex.normalization import FusedRMSNorm


        class Block(torch.nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.norm = FusedRMSNorm(dim)

            def forward(self, x):
                with torch.cuda.amp.autocast(dtype=torch.bfloat16):
                    return self.norm(x)
        ''',
    "requirements.txt": """\
        torch==2.1.0+cu121
        numpy
        """,
    "kernels/reduce.cu": """\
        #include <cuda_runtime.h>

        __device__ float warp_sum(float v) {
          for (int offset = 16; offset > 0; offset >>= 1)
            v += __shfl_xor_sync(0xffffffff, v, offset);
          return v;
        }

        __global__ void row_sum(const float* x, float* y, int n) {
          float v = x[blockIdx.x * n + threadIdx.x];
          v = warp_sum(v);
          if (threadIdx.x == 0) y[blockIdx.x] = v;
        }

        void launch(const float* x, float* y, int rows, int n, cudaStream_t s) {
          row_sum<<<rows, 32, 0, s>>>(x, y, n);
        }
        """,
    "README.md": "# proj\n\nA tiny CUDA-locked project.\n",
}

# families expected in the series, in application order (HIPify last)
EXPECTED_PATCHES = ["0001-device_audit.patch", "0002-dependencies.patch", "0003-warp_size.patch",
                    "0004-hipify.patch"]


# -- helpers ----------------------------------------------------------------------------------


def make_project(parent: Path, name: str = "proj", *, commit: bool = True) -> Path:
    root = parent / name
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    if commit:
        git("init", "-q", "-b", "main", cwd=root)
        git("add", "-A", cwd=root)
        git("commit", "-q", "-m", "initial", cwd=root)
    return root


def tree_digest(root: Path) -> str:
    """Hash of every file (path, executable bit, bytes) under ``root``, ``.git`` excluded."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if ".git" not in p.relative_to(root).parts):
        if path.is_file():
            h.update(path.relative_to(root).as_posix().encode() + b"\0")
            h.update(b"x" if os.access(path, os.X_OK) else b"-")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def tree_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}


def patches_in(out: Path) -> list[Path]:
    return sorted(out.glob("[0-9][0-9][0-9][0-9]-*.patch"))


def fresh_copy(src: Path, dst: Path) -> Path:
    """A copy of ``src``'s files in a new git repository with one commit (no shared history)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".git"))
    git("init", "-q", "-b", "main", cwd=dst)
    git("add", "-A", cwd=dst)
    git("commit", "-q", "-m", "copy", cwd=dst)
    return dst


def git_apply_series(repo: Path, patches: list[Path]) -> None:
    for patch in patches:
        proc = subprocess.run(["git", "apply", "--check", str(patch)], cwd=repo, capture_output=True, text=True)
        assert proc.returncode == 0, f"{patch.name} does not apply in order: {proc.stderr}"
        subprocess.run(["git", "apply", str(patch)], cwd=repo, check=True, capture_output=True)


def migrate(repo: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return run_porter("migrate", str(repo), *args, cwd=cwd or repo.parent, timeout=300)


def diff_part(patch: bytes) -> bytes:
    """The diff of a format-patch file (what follows the mail header and the stat)."""
    start = patch.find(b"diff --git ")
    assert start > 0, patch[:300]
    return patch[start:]


# -- one migration shared by the module ---------------------------------------------------------


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(project, out dir) after one ``porter migrate project -o out``."""
    base = tmp_path_factory.mktemp("migrate")
    project = make_project(base)
    before = tree_digest(project)
    out = base / "out"
    proc = migrate(project, "-o", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    assert tree_digest(project) == before, "porter migrate modified the source tree"
    yield project, out


@pytest.fixture(scope="module")
def applied(migrated: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project with the whole series applied by ``git apply``, in order."""
    project, out = migrated
    copy = fresh_copy(project, tmp_path_factory.mktemp("applied") / project.name)
    git_apply_series(copy, patches_in(out))
    return copy


# -- the output folder --------------------------------------------------------------------------


def test_writes_one_patch_per_family_index_and_report(migrated: tuple[Path, Path]) -> None:
    project, out = migrated
    assert [p.name for p in patches_in(out)] == EXPECTED_PATCHES
    assert sorted(p.name for p in out.iterdir()) == sorted([*EXPECTED_PATCHES, "INDEX.md", "MIGRATION.md",
                                                            ".porter-migration.json"])
    total = len(EXPECTED_PATCHES)
    for number, patch in enumerate(patches_in(out), 1):
        text = patch.read_text(encoding="utf-8")
        family = patch.stem.split("-", 1)[1]
        assert text.startswith("From 0000000000000000000000000000000000000000 "), patch.name
        assert f"\nSubject: [PATCH {number}/{total}] {family}: " in text, patch.name
        assert "\n---\n" in text and "\ndiff --git a/" in text, patch.name
    index = (out / "INDEX.md").read_text(encoding="utf-8")
    assert [line for line in index.splitlines() if line.startswith("git apply ")] == \
        [f"git apply {name}" for name in EXPECTED_PATCHES]


def test_outputs_hold_no_machine_specific_content(migrated: tuple[Path, Path]) -> None:
    project, out = migrated
    for path in out.iterdir():
        text = path.read_text(encoding="utf-8")
        assert str(project.parent) not in text and str(Path.home()) not in text, path.name
        assert not re.search(r"\b(19[7-9]\d|2\d{3})-\d\d-\d\d\b", text), f"{path.name} holds a date"
        assert not re.search(r"\d+\.\d+ ?s\b", text), f"{path.name} holds a timing"


def test_hipify_patch_comes_last_and_renames_the_kernel(migrated: tuple[Path, Path], applied: Path) -> None:
    _, out = migrated
    hip = patches_in(out)[-1].read_text(encoding="utf-8")
    assert " kernels/reduce.cu (delete)" in hip and " kernels/reduce.hip (add)" in hip
    assert not (applied / "kernels" / "reduce.cu").exists()
    kernel = (applied / "kernels" / "reduce.hip").read_text(encoding="utf-8")
    assert '#include "porter_warp.h"' in kernel and "porter_shfl_xor(v, offset)" in kernel
    assert "__shfl_xor_sync" not in kernel and "cudaStream_t" not in kernel
    assert (applied / "kernels" / "porter_warp.h").is_file()


# -- applying the series ------------------------------------------------------------------------


def test_series_applies_with_git_am(migrated: tuple[Path, Path], applied: Path, tmp_path: Path) -> None:
    project, out = migrated
    clone = tmp_path / "clone"
    git("clone", "-q", str(project), str(clone), cwd=tmp_path)
    head = git("rev-parse", "HEAD", cwd=clone).strip()
    git("am", "-q", *[str(p) for p in patches_in(out)], cwd=clone)
    subjects = git("log", "--format=%s", f"{head}..HEAD", cwd=clone).splitlines()[::-1]
    families = [p.stem.split("-", 1)[1] for p in patches_in(out)]
    assert [s.split(":", 1)[0] for s in subjects] == families
    assert git("status", "--porcelain", cwd=clone) == ""
    assert tree_files(clone) == tree_files(applied)


def test_series_equals_porter_apply(migrated: tuple[Path, Path], tmp_path: Path) -> None:
    """Everything but the HIPify patch reproduces ``porter apply`` byte for byte, given the target
    torch that migrate picks by default (``porter apply`` has no default target)."""
    from porter.apis import DEFAULT_TARGET_ROCM, DEFAULT_TARGET_TORCH

    project, out = migrated
    by_series = fresh_copy(project, tmp_path / "series" / project.name)
    git_apply_series(by_series, [p for p in patches_in(out) if not p.name.endswith("-hipify.patch")])
    by_apply = fresh_copy(project, tmp_path / "apply" / project.name)
    proc = run_porter("apply", "--config", f'target-torch="{DEFAULT_TARGET_TORCH}"', ".", cwd=by_apply)
    assert proc.returncode == 0, proc.stderr.decode()
    assert tree_files(by_series) == tree_files(by_apply)
    assert tree_files(by_series) != tree_files(project)
    # the legacy pin is raised to the migration target, with the ROCm index that carries it
    assert (by_series / "requirements.txt").read_text() == (
        f"--extra-index-url https://download.pytorch.org/whl/rocm{DEFAULT_TARGET_ROCM}\ntorch>={DEFAULT_TARGET_TORCH}"
        "\nnumpy\n")
    plain = fresh_copy(project, tmp_path / "plain" / project.name)
    assert run_porter("apply", ".", cwd=plain).returncode == 0
    assert (plain / "requirements.txt").read_text() == "torch==2.1.0\nnumpy\n"  # apply keeps the repo's pin


def test_series_equals_porter_apply_with_the_same_settings(tmp_path: Path) -> None:
    """Settings reach both commands alike: unsafe fixes and a config override."""
    project = make_project(tmp_path)
    settings = ["--unsafe-fixes", "--config", 'target-torch="2.5"', "--hipify", "none"]
    out = tmp_path / "out"
    proc = migrate(project, *settings, "-o", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    by_series = fresh_copy(project, tmp_path / "series" / project.name)
    git_apply_series(by_series, patches_in(out))
    by_apply = fresh_copy(project, tmp_path / "apply" / project.name)
    proc = run_porter("apply", "--unsafe-fixes", "--config", 'target-torch="2.5"', "--emit-parity",
                      "tests/porter_parity", ".", cwd=by_apply)
    assert proc.returncode == 0, proc.stderr.decode()
    assert tree_files(by_series) == tree_files(by_apply)
    assert "torch.nn.RMSNorm(" in (by_series / "model.py").read_text(encoding="utf-8")


def test_migrating_the_migrated_tree_is_a_noop(applied: Path, tmp_path: Path) -> None:
    git("add", "-A", cwd=applied)
    git("commit", "-q", "-m", "migrated", cwd=applied)
    before = tree_digest(applied)
    out = tmp_path / "again"
    proc = migrate(applied, "-o", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    assert "nothing to migrate" in proc.stderr.decode()
    assert not out.exists() or not patches_in(out)
    assert tree_digest(applied) == before


# -- command contract ---------------------------------------------------------------------------


def test_dry_run_writes_nothing_and_prints_the_diff(migrated: tuple[Path, Path], tmp_path: Path) -> None:
    project, out = migrated
    before = tree_digest(project)
    dry_out = tmp_path / "dry"
    proc = migrate(project, "--dry-run", "-o", str(dry_out))
    assert proc.returncode == 1, proc.stderr.decode()  # changes pending, like `apply --dry-run`
    assert not dry_out.exists()
    assert tree_digest(project) == before
    assert git("status", "--porcelain", "--ignored", cwd=project) == ""
    assert proc.stdout == b"".join(diff_part(p.read_bytes()) for p in patches_in(out))


def test_dirty_tree_is_refused_unless_allowed(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    with (project / "model.py").open("a", encoding="utf-8") as fh:
        fh.write("\nx = torch.cuda.amp.GradScaler()\n")
    out = tmp_path / "out"
    proc = migrate(project, "-o", str(out))
    assert proc.returncode == 1
    assert "uncommitted changes" in proc.stderr.decode() and "--allow-dirty" in proc.stderr.decode()
    assert not out.exists()
    proc = migrate(project, "--allow-dirty", "-o", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    assert 'torch.amp.GradScaler("cuda")' in (out / "0001-device_audit.patch").read_text(encoding="utf-8")


def test_untracked_file_makes_the_tree_dirty(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    (project / "notes.txt").write_text("wip\n", encoding="utf-8")
    proc = migrate(project, "--dry-run")
    assert proc.returncode == 1 and "uncommitted changes" in proc.stderr.decode()
    assert proc.stdout == b""


def _repo_state(repo: Path) -> dict[str, str]:
    return {
        "head": git("rev-parse", "HEAD", cwd=repo),
        "branch": git("symbolic-ref", "HEAD", cwd=repo),
        "status": git("status", "--porcelain", "--ignored", cwd=repo),
        "index": hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest(),
        "tree": tree_digest(repo),
        "worktrees": git("worktree", "list", "--porcelain", cwd=repo),
    }


def test_branch_commits_one_patch_each_without_touching_the_checkout(
    migrated: tuple[Path, Path], applied: Path, tmp_path: Path
) -> None:
    _, first_out = migrated
    project = make_project(tmp_path)
    state = _repo_state(project)
    out = tmp_path / "out"
    proc = migrate(project, "--branch", "porter/rocm", "-o", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    assert _repo_state(project) == state
    log = git("log", "--format=%s", "main..porter/rocm", cwd=project).splitlines()[::-1]
    families = [p.stem.split("-", 1)[1] for p in patches_in(out)]
    assert [s.split(":")[:2] for s in log] == [["porter", f" {f}"] for f in families]
    assert git("merge-base", "main", "porter/rocm", cwd=project).strip() == state["head"].strip()
    tree = tmp_path / "branch-tree"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "porter/rocm"], cwd=project, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    assert tree_files(tree) == tree_files(applied)
    # a second migrate of the same repo (other tmp dir, same content) writes the same bytes
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {p.name: p.read_bytes() for p in first_out.iterdir()}
    # an existing branch is never overwritten
    tip = git("rev-parse", "porter/rocm", cwd=project)
    again = migrate(project, "--branch", "porter/rocm", "-o", str(tmp_path / "out2"))
    assert again.returncode != 0 and "already exists" in again.stderr.decode()
    assert git("rev-parse", "porter/rocm", cwd=project) == tip
    assert _repo_state(project) == state


def test_branch_needs_a_git_work_tree(tmp_path: Path) -> None:
    project = make_project(tmp_path, commit=False)
    proc = migrate(project, "--branch", "porter/rocm", "-o", str(tmp_path / "out"))
    assert proc.returncode == 2 and "--branch" in proc.stderr.decode()
    assert not (tmp_path / "out").exists()


# -- MIGRATION.md -------------------------------------------------------------------------------


def _section(report: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", report, re.M | re.S)
    assert m, f"MIGRATION.md has no section {title!r}"
    return m.group(1)


def _table_rows(section: str) -> list[list[str]]:
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # header, rule
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


def _site_rows(section: str) -> list[list[str]]:
    """The per-site table, collapsed in a <details> block below the by-rule summary."""
    return _table_rows(section.split("<details>", 1)[1])


def test_report_has_every_section(migrated: tuple[Path, Path]) -> None:
    _, out = migrated
    report = (out / "MIGRATION.md").read_text(encoding="utf-8")
    assert report.startswith("# Migration report: proj\n")

    audit = {row[0]: row[1:] for row in _table_rows(_section(report, "Audit before and after"))}
    assert set(audit) == {"before", "after"}
    for counts in audit.values():
        benign, shim, replace, total = map(int, counts)
        assert benign + shim + replace == total
    assert int(audit["after"][3]) < int(audit["before"][3])
    assert re.search(r"^\*\*Effort left:\*\* .*\d.*day", report, re.M)

    series = _section(report, "Patch series")
    assert [m for m in re.findall(r"`(\d{4}-[\w-]+\.patch)`", series)] == EXPECTED_PATCHES

    rewrites = _site_rows(_section(report, "Rewrites"))
    codes = {(row[0].split("]")[0].lstrip("["), row[2].split()[0]) for row in rewrites}
    assert {("model.py", "PRT049"), ("requirements.txt", "PRT801"), ("kernels/reduce.cu", "PRT501")} <= codes

    flagged = _site_rows(_section(report, "Flagged sites (need a human)"))
    assert flagged, "the apex norm under autocast must stay flagged"
    for row in flagged:
        assert len(row) == 6 and all(row[i] for i in (0, 1, 2, 3, 4, 5)), row
        assert row[3] in {"benign", "shim", "replace"}
    apex = [row for row in flagged if row[2].startswith("PRT311")]
    assert apex and "autocast" in apex[0][4] and "--unsafe-fixes" in apex[0][5]

    follow = _section(report, "Follow-ups no codemod can do")
    assert len(re.findall(r"^1\. ", follow, re.M)) >= 3


def test_report_estimate_is_prose(migrated: tuple[Path, Path]) -> None:
    _, out = migrated
    report = (out / "MIGRATION.md").read_text(encoding="utf-8")
    # once regressed: the estimate was printed as a Python dict repr
    assert "{'" not in report and "':" not in report and "['" not in report
    effort = re.search(r"^\*\*Effort left:\*\* (.*)$", report, re.M)
    assert effort and re.match(r"[\d.]+(–[\d.]+)? engineer-day", effort.group(1)), effort


def test_report_links_only_files_of_the_migrated_tree(migrated: tuple[Path, Path], applied: Path) -> None:
    # the after-audit must see the HIPified tree (kernels/reduce.cu is renamed to .hip by the last patch)
    _, out = migrated
    report = (out / "MIGRATION.md").read_text(encoding="utf-8")
    flagged = _section(report, "Flagged sites (need a human)")
    linked = set(re.findall(r"\]\(([^)#]+)#L\d+\)", flagged))
    assert linked and all((applied / rel).is_file() for rel in linked), sorted(linked)


def test_default_output_folder_does_not_dirty_the_repository(tmp_path: Path) -> None:
    # without -o the folder goes beside the repository, so the work tree stays clean
    project = make_project(tmp_path)
    proc = migrate(project, cwd=project)
    assert proc.returncode == 0, proc.stderr.decode()
    assert patches_in(project.parent / "proj-porter-migration") and not list(project.glob("*-porter-migration"))
    again = migrate(project, "--dry-run", cwd=project)
    assert "uncommitted changes" not in again.stderr.decode()
    assert again.returncode == 1, again.stderr.decode()


def test_branch_with_allow_dirty_never_leaves_a_broken_branch(tmp_path: Path) -> None:
    # the series comes from the dirty work tree, the branch from HEAD: refuse, or commit it all
    project = make_project(tmp_path)
    with (project / "model.py").open("a", encoding="utf-8") as fh:
        fh.write("\nx = torch.cuda.amp.GradScaler()\n")
    proc = migrate(project, "--allow-dirty", "--branch", "porter/rocm", "-o", str(tmp_path / "out"))
    branches = git("branch", "--list", "porter/rocm", cwd=project).strip()
    if proc.returncode == 0:
        assert git("rev-list", "--count", "main..porter/rocm", cwd=project).strip() != "0"
    else:
        assert not branches, f"failed (exit {proc.returncode}) but left branch porter/rocm behind"


def test_existing_branch_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    # refused up front: no plan, no -o folder
    project = make_project(tmp_path)
    git("branch", "porter/rocm", cwd=project)
    out = tmp_path / "out"
    proc = migrate(project, "--branch", "porter/rocm", "-o", str(out))
    assert proc.returncode != 0 and "already exists" in proc.stderr.decode()
    assert not out.exists()
