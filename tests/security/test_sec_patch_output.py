"""Issue 17, items 11-14: the patch series and the branch are exact, complete or absent, and never clobber.

- 11: ``migrate -o DIR`` never deletes or overwrites files porter did not write there;
- 12: a lone CR (CR-only file, a stray CR in a comment) still gives patches ``git apply`` accepts,
  and ``--branch`` never leaves a branch behind on failure;
- 13: SIGINT or SIGKILL during ``--branch`` leaves no branch and no registered worktree, and a
  re-run works; worktrees an older porter left are cleaned;
- 14: the documented ``git am`` command applies the series to CRLF files.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _helpers import APEX_PY, LEGACY_PY, PORTER, clean_env, git, make_repo, needs_git, porter  # noqa: E402

from porter.patchset import FileChange, Patch  # noqa: E402

pytestmark = needs_git

CR_ONLY = b"from apex.normalization import FusedLayerNorm\rnorm = FusedLayerNorm(16)\r"
STRAY_CR = (b"# a comment with a stray\r# carriage return\n"
            b"from apex.normalization import FusedLayerNorm\nnorm = FusedLayerNorm(16)\n")
CRLF = b"from apex.normalization import FusedLayerNorm\r\nnorm = FusedLayerNorm(16)\r\n"


def _git_apply_gives(tmp_path: Path, before: bytes, after: bytes, name: str = "f.py") -> None:
    repo = make_repo(tmp_path / f"apply-{len(list(tmp_path.iterdir()))}", {name: before})
    patch = Patch("x", "x", changes=[FileChange(name, before, after)]).render()
    proc = subprocess.run(["git", "apply", "-"], cwd=repo, input=patch, capture_output=True, check=False)
    assert proc.returncode == 0, (patch, proc.stderr)
    assert (repo / name).read_bytes() == after


@pytest.mark.parametrize("before,after", [
    (b"a\rb\rc\r", b"a\rB\rc\r"),  # CR-only file
    (b"x = 1  # stray \r here\ny = 2\nz = 3\n", b"x = 1  # stray \r here\ny = 20\nz = 3\n"),
    (b"one\r\ntwo\r\n", b"one\r\nTWO\r\n"),  # CRLF stays CRLF
    (b"a\nlast\r", b"a\nLAST\r"),  # a final lone CR, no newline
    (b"a\n\rb\n", b"a\n\rB\n"),  # a line that starts with CR
])
def test_lone_cr_patches_apply(tmp_path: Path, before: bytes, after: bytes) -> None:
    _git_apply_gives(tmp_path, before, after)


@pytest.mark.parametrize("content", [CR_ONLY, STRAY_CR], ids=["cr-only", "stray-cr"])
def test_branch_with_lone_cr_files(tmp_path: Path, content: bytes) -> None:
    root = make_repo(tmp_path / "target", {"norm.py": content, "model.py": LEGACY_PY})
    dry = subprocess.run([*PORTER, "migrate", "--dry-run", "."], cwd=root, capture_output=True, env=clean_env(),
                         timeout=300, check=False)  # bytes: text mode would turn each CR into a newline
    assert dry.returncode in (0, 1), dry.stderr
    if dry.stdout:
        check = subprocess.run(["git", "apply", "--check", "-"], cwd=root, input=dry.stdout,
                               capture_output=True, check=False)
        assert check.returncode == 0, check.stderr
    proc = porter("migrate", "--branch", "ported", "-o", str(tmp_path / "out"), ".", cwd=root)
    branches = git("branch", "--list", "ported", cwd=root).strip()
    assert proc.returncode == 0, proc.stderr
    assert branches
    # the branch holds what the patch series produces
    copy = make_repo(tmp_path / "copy", {"norm.py": content, "model.py": LEGACY_PY})
    for patch in sorted((tmp_path / "out").glob("[0-9][0-9][0-9][0-9]-*.patch")):
        subprocess.run(["git", "apply", str(patch)], cwd=copy, check=True, capture_output=True)
    shown = subprocess.run(["git", "show", "ported:norm.py"], cwd=root, capture_output=True, check=True).stdout
    assert shown == (copy / "norm.py").read_bytes() != content


def test_documented_git_am_applies_crlf_series(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "target", {"norm.py": CRLF})
    out = tmp_path / "out"
    proc = porter("migrate", "-o", str(out), ".", cwd=root)
    assert proc.returncode == 0, proc.stderr
    index = (out / "INDEX.md").read_text()
    commands = [line for line in index.splitlines() if line.startswith("git am")]
    assert commands, index
    assert "git am --keep-cr" in (out / "MIGRATION.md").read_text()
    clone = tmp_path / "clone"
    git("clone", "-q", str(root), str(clone), cwd=tmp_path)
    args = commands[0].split()[1:]
    argv = [a if not re.match(r"^[0-9]{4}-", a) else str(out / a) for a in args]
    git(*argv, cwd=clone)
    assert (clone / "norm.py").read_bytes() == b"import torch\r\nnorm = torch.nn.LayerNorm(16)\r\n"


# -- 11: the output folder ------------------------------------------------------------------------


def test_out_dir_keeps_the_users_files(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "target", {"norm.py": APEX_PY})
    out = tmp_path / "out"
    out.mkdir()
    mine = {"0001-my-fix.patch": "my own patch\n", "INDEX.md": "my index\n", "notes.txt": "keep\n"}
    for name, text in mine.items():
        (out / name).write_text(text)
    proc = porter("migrate", "-o", str(out), ".", cwd=root)
    assert proc.returncode != 0 and "did not write" in proc.stderr, proc.stderr
    assert {p.name: p.read_text() for p in out.iterdir()} == mine


@pytest.mark.slow
def test_out_dir_rerun_replaces_only_porters_own_files(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "target", {"norm.py": APEX_PY, "model.py": LEGACY_PY})
    out = tmp_path / "out"
    assert porter("migrate", "-o", str(out), ".", cwd=root).returncode == 0
    (out / "notes.txt").write_text("mine\n")
    (out / "0099-old.patch").write_text("stale porter patch\n")  # not porter's: must stay, and block
    blocked = porter("migrate", "-o", str(out), ".", cwd=root)
    assert blocked.returncode != 0 and "0099-old.patch" in blocked.stderr
    (out / "0099-old.patch").unlink()
    again = porter("migrate", "-o", str(out), ".", cwd=root)  # a re-run over porter's own files works
    assert again.returncode == 0, again.stderr
    assert (out / "notes.txt").read_text() == "mine\n"
    first = sorted(out.glob("0*.patch"))[0]
    first.write_text(first.read_text() + "# my review note\n")  # edited by the user: never overwritten
    edited = first.read_text()
    assert porter("migrate", "-o", str(out), ".", cwd=root).returncode != 0
    assert first.read_text() == edited


# -- 13: interruptions ------------------------------------------------------------------------------

_KILLER = textwrap.dedent("""\
    import os, signal, sys
    SIG, OUT = getattr(signal, sys.argv[1]), sys.argv[2]
    from porter import proc
    real = proc.git
    seen = []
    def git(repo, args, **kw):
        if args and args[0] == "commit-tree":
            seen.append(1)
            if len(seen) == 2:
                os.kill(os.getpid(), SIG)
        return real(repo, args, **kw)
    proc.git = git
    from porter.cli import main
    sys.argv = ["porter", "migrate", "--branch", "ported", "-o", OUT, "."]
    main()
""")


@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_interrupted_branch_leaves_nothing_and_reruns(tmp_path: Path, sig: str) -> None:
    root = make_repo(tmp_path / "target", {"norm.py": APEX_PY, "model.py": LEGACY_PY,
                                           "requirements.txt": "apex\ntorch==2.1.0\n"})
    killed = subprocess.run([sys.executable, "-P", "-c", _KILLER, sig, str(tmp_path / "out")], cwd=root,
                            capture_output=True, text=True, env=clean_env(), timeout=300, check=False)
    assert killed.returncode != 0, killed.stderr
    if sig == "SIGKILL":
        assert killed.returncode == -signal.SIGKILL
    assert not git("branch", "--list", "ported", cwd=root).strip()
    assert git("worktree", "list", "--porcelain", cwd=root).count("worktree ") == 1
    assert not git("status", "--porcelain", cwd=root).strip()
    rerun = porter("migrate", "--branch", "ported", "-o", str(tmp_path / "out2"), ".", cwd=root)
    assert rerun.returncode == 0, rerun.stderr
    assert len(git("rev-list", "main..ported", cwd=root).split()) >= 2


def test_stale_worktree_of_an_older_run_is_cleaned(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "target", {"norm.py": APEX_PY})
    stale = Path(tempfile.mkdtemp(prefix="porter-branch-")) / "wt"  # where an older porter made it
    try:
        git("worktree", "add", "-q", "-b", "leftover", str(stale), "HEAD", cwd=root)
        proc = porter("migrate", "--branch", "ported", "-o", str(tmp_path / "out"), ".", cwd=root)
        assert proc.returncode == 0, proc.stderr
        assert git("worktree", "list", "--porcelain", cwd=root).count("worktree ") == 1
        assert not stale.exists()
    finally:
        shutil.rmtree(stale.parent, ignore_errors=True)


def test_forged_worktree_entry_cannot_make_porter_delete_a_folder(tmp_path: Path) -> None:
    """The registration is repository metadata: a forged one naming a folder elsewhere is left alone."""
    root = make_repo(tmp_path / "target", {"norm.py": APEX_PY})
    victim = tmp_path / "home" / "porter-branch-1" / "wt"
    victim.mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me\n")
    entry = root / ".git" / "worktrees" / "wt"
    entry.mkdir(parents=True)
    (entry / "gitdir").write_text(str(victim / ".git") + "\n")
    (entry / "HEAD").write_text(git("rev-parse", "HEAD", cwd=root))
    (entry / "commondir").write_text("../..\n")
    (victim / ".git").write_text(f"gitdir: {entry}\n")
    proc = porter("migrate", "--branch", "ported", "-o", str(tmp_path / "out"), ".", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert (victim / "precious.txt").read_text() == "keep me\n"


def test_failed_branch_build_leaves_no_branch(tmp_path: Path) -> None:
    """A file stored through a filter driver (git-crypt, LFS...): porter never runs the filter, so it cannot
    commit that file faithfully; it must fail cleanly, leaving no branch (and commit no plaintext)."""
    root = tmp_path / "target"
    root.mkdir()
    (root / "norm.py").write_text(APEX_PY)
    (root / ".gitattributes").write_text("*.py filter=upper\n")
    git("init", "-q", "-b", "main", cwd=root)
    git("config", "filter.upper.clean", "tr a-z A-Z", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "stored upper-case", cwd=root)
    time.sleep(1.1)  # past git's racy-clean window, so that the status check trusts the index's stat data
    git("update-index", "--really-refresh", cwd=root)
    proc = porter("migrate", "--branch", "ported", "-o", str(tmp_path / "out"), ".", cwd=root)
    assert proc.returncode != 0
    assert "filter" in proc.stderr, proc.stderr
    assert not git("branch", "--list", "ported", cwd=root).strip()
    assert git("worktree", "list", "--porcelain", cwd=root).count("worktree ") == 1


# -- sibling: a file name cannot inject a patch into the series ------------------------------------

INJECTED = ("p\ndiff --git a/e b/e\nnew file mode 100644\n--- /dev/null\n+++ b/e\n@@ -0,0 +1 @@\n+pwned\n"
            "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n---\nq.py")


def test_file_names_cannot_inject_into_the_mail_series(tmp_path: Path) -> None:
    """A target file whose path holds newlines (one folder per line) and diff/mbox syntax: applying the
    series with the documented commands must change that file only, never create ``e``."""
    root = make_repo(tmp_path / "target", {INJECTED: APEX_PY})
    out = tmp_path / "out"
    proc = porter("migrate", "-o", str(out), ".", cwd=root)
    assert proc.returncode == 0, proc.stderr
    patches = sorted(out.glob("[0-9][0-9][0-9][0-9]-*.patch"))
    clone = tmp_path / "clone"
    git("clone", "-q", str(root), str(clone), cwd=tmp_path)
    git("am", "--keep-cr", *map(str, patches), cwd=clone)
    assert not (clone / "e").exists()
    assert "torch.nn.LayerNorm" in (clone / INJECTED).read_text()
    assert len(git("rev-list", "origin/main..HEAD", cwd=clone).split()) == len(patches)
    plain = tmp_path / "plain"
    git("clone", "-q", str(root), str(plain), cwd=tmp_path)
    for patch in patches:
        subprocess.run(["git", "apply", str(patch)], cwd=plain, check=True, capture_output=True)
    assert not (plain / "e").exists()
