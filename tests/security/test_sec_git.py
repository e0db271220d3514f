"""Issue 17, item 1: git must run nothing the target repository controls.

Each test plants a payload that appends to a marker file outside the tree and wires it into the
repository the way an attacker would (repo config, an included config file, a ``.git`` file
pointing at a disguised git dir, a submodule's config, hooks, filters, a ``git`` on a relative
PATH entry); then it runs porter as a user would and asserts the marker was never written.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _helpers import APEX_PY, LEGACY_PY, clean_env, git, make_repo, marker_text, needs_git, payload, porter  # noqa: E402

pytestmark = needs_git

COMMANDS = (("audit", "."), ("check", "."), ("apply", "--dry-run", "."), ("migrate", "--dry-run", "."))


def _target(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "target", {"model.py": LEGACY_PY, "norm.py": APEX_PY})


def _run_all(root: Path, marker: Path, env: dict[str, str] | None = None) -> None:
    for args in COMMANDS:
        proc = porter(*args, cwd=root, env=env)
        assert proc.returncode in (0, 1), (args, proc.stderr)
    assert not marker.exists(), marker_text(marker)


@pytest.mark.parametrize("how", ["config", "include", "includeIf", "hooksPath-in-tree"])
def test_repo_config_fsmonitor_never_runs(tmp_path: Path, how: str) -> None:
    root = _target(tmp_path)
    marker = tmp_path / "MARKER"
    evil = payload(root / "tools" / "fsmon.sh", marker)
    if how == "config":
        git("config", "core.fsmonitor", str(evil), cwd=root)
    elif how == "include":  # config pulled from a file committed in the tree
        (root / "tools" / "extra.cfg").write_text(f"[core]\n\tfsmonitor = {evil}\n")
        git("config", "include.path", "../tools/extra.cfg", cwd=root)
    elif how == "includeIf":
        (root / "tools" / "extra.cfg").write_text(f"[core]\n\tfsmonitor = {evil}\n")
        git("config", f"includeIf.gitdir:{root}/.git.path", str(root / "tools" / "extra.cfg"), cwd=root)
    else:  # hooks committed in the tree, selected by config, plus the fsmonitor
        for hook in ("post-index-change", "reference-transaction", "pre-auto-gc"):
            payload(root / "githooks" / hook, marker)
        git("config", "core.hooksPath", "githooks", cwd=root)
        git("config", "core.fsmonitor", str(evil), cwd=root)
    _run_all(root, marker)


@pytest.mark.slow
def test_gitdir_file_to_a_disguised_git_dir_is_not_followed(tmp_path: Path) -> None:
    """A tarball ships ``.git`` as a file (``gitdir: assets/gd``) pointing at a git dir with an fsmonitor."""
    root = _target(tmp_path)
    marker = tmp_path / "MARKER"
    evil = payload(root / "tools" / "fsmon.sh", marker)
    git("config", "core.fsmonitor", str(evil), cwd=root)
    (root / "assets").mkdir()
    shutil.move(str(root / ".git"), str(root / "assets" / "gd"))
    (root / ".git").write_text("gitdir: assets/gd\n")
    _run_all(root, marker)
    audit = porter("audit", ".", cwd=root)
    assert "norm.py" in audit.stdout  # the tree is still scanned (walked, not listed by git)
    # opting in follows the link, and git still runs nothing of the repository's
    _run_all(root, marker, env=clean_env(PORTER_TRUST_GIT_DIR="1"))
    refused = porter("migrate", "--branch", "b", "-o", str(tmp_path / "out"), ".", cwd=root)
    assert refused.returncode == 2 and "--trust-git-dir" in refused.stderr, refused.stderr


@pytest.mark.slow
def test_gitdir_file_pointing_outside_the_tree_needs_opt_in(tmp_path: Path) -> None:
    root = _target(tmp_path)
    marker = tmp_path / "MARKER"
    shutil.move(str(root / ".git"), str(tmp_path / "elsewhere.git"))
    git("config", "core.fsmonitor", str(payload(tmp_path / "fsmon.sh", marker)),
        cwd=root, env={"GIT_DIR": str(tmp_path / "elsewhere.git")})
    (root / ".git").write_text(f"gitdir: {tmp_path / 'elsewhere.git'}\n")
    _run_all(root, marker)
    # with the opt-in (a group option for every command), git's view is used: info/exclude applies
    (root / "ignored.py").write_text(APEX_PY)
    (tmp_path / "elsewhere.git" / "info").mkdir(exist_ok=True)
    (tmp_path / "elsewhere.git" / "info" / "exclude").write_text("ignored.py\n")
    assert "ignored.py" in porter("audit", ".", cwd=root).stdout
    assert "ignored.py" not in porter("--trust-git-dir", "audit", ".", cwd=root).stdout
    assert not marker.exists(), marker_text(marker)
    out = tmp_path / "out"
    ok = porter("migrate", "--trust-git-dir", "--branch", "ported", "-o", str(out), ".", cwd=root)
    assert ok.returncode == 0, ok.stderr
    assert not marker.exists(), marker_text(marker)
    assert git("rev-parse", "--verify", "refs/heads/ported", cwd=root,
               env={"GIT_DIR": str(tmp_path / "elsewhere.git")}).strip()


def test_submodule_config_never_runs(tmp_path: Path) -> None:
    """``git status`` recurses into submodules with *their* config: porter's dirty check must not."""
    sub = make_repo(tmp_path / "sub", {"lib.py": "x = 1\n"})
    root = _target(tmp_path)
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "vendor/sub", cwd=root)
    git("commit", "-q", "-m", "sub", cwd=root)
    marker = tmp_path / "MARKER"
    evil = payload(tmp_path / "fsmon.sh", marker)
    git("config", "core.fsmonitor", str(evil), cwd=root / "vendor" / "sub")
    (root / "vendor" / "sub" / "lib.py").write_text("x = 2\n")  # stat-dirty: status must look inside
    proc = porter("migrate", "--dry-run", ".", cwd=root)
    assert proc.returncode in (0, 1), proc.stderr
    assert not marker.exists(), marker_text(marker)


def test_migrate_branch_runs_no_filter_hook_signer_or_pager(tmp_path: Path) -> None:
    root = _target(tmp_path)
    marker = tmp_path / "MARKER"
    evil = payload(tmp_path / "evil.sh", marker)
    (root / ".gitattributes").write_text("*.py filter=evil diff=evil merge=evil\n")
    for name in ("git", "gpg", "ssh", "less", "vi"):  # found through the relative PATH entries below
        payload(root / "tools" / name, marker)
    git("add", ".gitattributes", "tools", cwd=root)
    git("commit", "-q", "-m", "attributes", cwd=root)
    hooks = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout", "post-merge",
             "reference-transaction", "post-index-change", "pre-auto-gc", "post-rewrite", "pre-applypatch",
             "applypatch-msg", "post-applypatch")
    for hook in hooks:
        payload(root / ".git" / "hooks" / hook, marker)
    for key, value in (
        ("filter.evil.clean", str(evil)), ("filter.evil.smudge", str(evil)), ("filter.evil.required", "true"),
        ("diff.evil.textconv", str(evil)), ("diff.evil.command", str(evil)), ("merge.evil.driver", str(evil)),
        ("diff.external", str(evil)), ("core.pager", str(evil)), ("core.editor", str(evil)),
        ("core.sshCommand", str(evil)), ("core.askPass", str(evil)), ("credential.helper", f"!{evil}"),
        ("commit.gpgSign", "true"), ("gpg.program", str(evil)), ("gpg.format", "openpgp"),
        ("core.fsmonitor", str(evil)), ("protocol.ext.allow", "always"), ("sequence.editor", str(evil)),
    ):
        git("config", key, value, cwd=root)
    # the process filter form: one long-running command for every file
    git("config", "filter.evil2.process", str(evil), cwd=root)
    env = clean_env(PATH=f"tools{os.pathsep}.{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "out"
    proc = porter("migrate", "--branch", "ported", "-o", str(out), ".", cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), marker_text(marker)
    # the branch holds exactly what the series produces, and nothing was checked out
    assert "FusedLayerNorm" not in git("show", "ported:norm.py", cwd=root)
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=root).strip() == "main"
    assert len(git("worktree", "list", "--porcelain", cwd=root).split("worktree ")) == 2


@pytest.mark.slow
def test_git_on_a_relative_path_entry_is_never_run(tmp_path: Path) -> None:
    """PATH=".:$PATH" (or an empty entry) and a `git` committed in the target: porter must use the real git."""
    root = _target(tmp_path)
    marker = tmp_path / "MARKER"
    payload(root / "git", marker)
    payload(root / "hipify-perl", marker)
    payload(root / "hipify-clang", marker)
    (root / "k.cu").write_text("#include <cuda_runtime.h>\nvoid f() { cudaDeviceSynchronize(); }\n")
    for path in (f".{os.pathsep}{os.environ['PATH']}", f"{os.pathsep}{os.environ['PATH']}"):
        _run_all(root, marker, env=clean_env(PATH=path))


def test_inherited_git_variables_cannot_redirect_git(tmp_path: Path) -> None:
    """GIT_DIR / GIT_WORK_TREE / GIT_CONFIG_* left in the environment (a hook, a wrapper) are dropped."""
    other = make_repo(tmp_path / "other", {"other.py": "from apex.normalization import FusedLayerNorm\n"})
    marker = tmp_path / "MARKER"
    evil = payload(tmp_path / "fsmon.sh", marker)
    root = _target(tmp_path)
    env = clean_env(GIT_DIR=str(other / ".git"), GIT_WORK_TREE=str(other), GIT_CONFIG_COUNT="1",
                    GIT_CONFIG_KEY_0="core.fsmonitor", GIT_CONFIG_VALUE_0=str(evil),
                    GIT_INDEX_FILE=str(other / ".git" / "index"))
    audit = porter("audit", ".", cwd=root, env=env)
    assert "norm.py" in audit.stdout and "other.py" not in audit.stdout, audit.stdout
    assert not marker.exists(), marker_text(marker)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["core.worktree", "commondir", "symlink"])
def test_git_metadata_cannot_redirect_git_outside_the_tree(tmp_path: Path, how: str) -> None:
    """core.worktree naming another folder, a .git with a commondir link, a .git symlink: all ignored."""
    root = _target(tmp_path)
    marker = tmp_path / "MARKER"
    elsewhere = make_repo(tmp_path / "elsewhere", {"secret.py": APEX_PY})
    git("config", "core.fsmonitor", str(payload(tmp_path / "fsmon.sh", marker)), cwd=elsewhere)
    if how == "core.worktree":
        git("config", "core.worktree", str(elsewhere), cwd=root)
    elif how == "commondir":
        (root / ".git" / "commondir").write_text(str(elsewhere / ".git") + "\n")
    else:
        shutil.rmtree(root / ".git")
        (root / ".git").symlink_to(elsewhere / ".git")
    audit = porter("audit", ".", cwd=root)
    assert "norm.py" in audit.stdout and "secret.py" not in audit.stdout, audit.stdout
    _run_all(root, marker)
