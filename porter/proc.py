"""Every child process porter starts, and every git invocation, goes through this module.

The target repository is hostile: porter must run nothing it controls. A repository controls
more than its source files:

- **git**: ``.git/config`` (and what it ``include``s) can name commands git runs on ordinary
  read-only operations (``core.fsmonitor``, ``filter.<x>.clean`` via ``.gitattributes``, hooks
  through ``core.hooksPath``, ``commit.gpgSign`` + ``gpg.program``, lazy fetches through
  ``protocol.<x>.allow``...). :func:`git` runs git with system and global config off, a fixed set
  of command-scope overrides (which beat the repository's own config), every filter, diff and
  merge driver the repository defines disabled by name, hooks pointed at ``/dev/null``, no
  transport allowed, and a clean environment (inherited ``GIT_*`` variables other than the
  author/committer identity are dropped). The git directory is located by porter
  (:func:`locate`), never by git: a ``.git`` *file* or symlink (``gitdir: assets/gd``) or a git
  directory that borrows another one's config (``commondir``) is ignored unless the user opts in
  with ``--trust-git-dir`` (or ``PORTER_TRUST_GIT_DIR=1``), and ``GIT_DIR``/``GIT_WORK_TREE`` are
  passed explicitly so ``core.worktree`` cannot redirect git outside the tree.
- **Python**: a child interpreter started in the target's directory imports the target's
  ``torch/`` or ``porter/`` before the real ones. :func:`run_python` starts children isolated
  (``-I``: no cwd on ``sys.path``, no ``PYTHON*`` variables, no user site), in a directory
  outside the target, with the parent's ``sys.path`` (minus anything inside a target) set
  explicitly. :func:`isolated_python_children` does the same for multiprocessing's
  ``forkserver``/``spawn`` helpers.
- **PATH**: :func:`which` never returns an executable from a relative ``PATH`` entry (``.``,
  the empty entry) or from a folder inside a target.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TRUST_ENV = "PORTER_TRUST_GIT_DIR"

_safe_depth = 0
_safe_previous: str | None = None
_trust_git_dir = False
_untrusted_roots: set[str] = set()
_lock = threading.Lock()


class GitError(Exception):
    """A git command porter needed failed (the message carries git's own error)."""


# -- policy switches ------------------------------------------------------------------------------


def set_trust_git_dir(value: bool) -> None:
    """Follow ``.git`` files/symlinks and ``commondir`` links (``--trust-git-dir``)."""
    global _trust_git_dir
    _trust_git_dir = bool(value)


def trust_git_dir() -> bool:
    return _trust_git_dir or os.environ.get(TRUST_ENV, "") == "1"


def register_untrusted_root(root: Path | str) -> None:
    """Mark ``root`` as a target: no executable or import path is taken from inside it."""
    with _lock:
        _untrusted_roots.add(os.path.realpath(root))


def untrusted_roots() -> list[str]:
    with _lock:
        return sorted(_untrusted_roots)


def _inside(path: str, roots: Sequence[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


# -- executables ------------------------------------------------------------------------------------


def which(name: str, *, avoid: Sequence[Path | str] = ()) -> str | None:
    """``name`` on PATH, skipping relative entries and folders inside a target.

    ``shutil.which`` resolves ``.`` and empty PATH entries against the current directory, which
    may be the target: a ``git`` or ``hipify-perl`` script committed there would run.
    """
    roots = untrusted_roots() + [os.path.realpath(a) for a in avoid]
    own_bin = os.path.realpath(os.path.dirname(sys.executable))
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        if roots and _inside(entry, roots) and os.path.realpath(entry) != own_bin:
            continue
        found = shutil.which(name, path=entry)
        if found is not None:
            return found
    return None


def run_tool(argv: Sequence[str], *, cwd: Path | None = None, timeout: float = 600
             ) -> subprocess.CompletedProcess[str]:
    """Run an external tool by argument list (never a shell), in ``cwd`` (a scratch folder; default: an empty one)."""
    with contextlib.ExitStack() as stack:
        if cwd is None:
            cwd = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="porter-tool-")))
        return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
                              env=_base_env(), stdin=subprocess.DEVNULL)


def _base_env() -> dict[str, str]:
    """The user's environment without variables that would redirect git or Python into the target."""
    env = {}
    for key, value in os.environ.items():
        if key.startswith("GIT_") and key not in _KEEP_GIT_ENV:
            continue
        if key.startswith("PYTHON"):
            continue
        env[key] = value
    return env


# -- Python children -----------------------------------------------------------------------------

_BOOT = (
    "import sys, json, runpy; "
    "sys.path[:] = json.loads(sys.argv[1]); "
    "name = sys.argv[2]; "
    "sys.argv[:] = [name] + sys.argv[3:]; "
    "runpy.run_module(name, run_name='__main__', alter_sys=True)"
)


def _installation_paths() -> set[str]:
    """Where this interpreter's standard library, site-packages and porter itself live."""
    import sysconfig

    paths = {os.path.realpath(p) for k, p in sysconfig.get_paths().items()
             if k in ("stdlib", "platstdlib", "purelib", "platlib") and p}
    paths.add(os.path.realpath(Path(__file__).resolve().parent.parent))
    return paths


def child_sys_path() -> list[str]:
    """This interpreter's ``sys.path`` for a child: no cwd or relative entry, nothing inside a target
    (except the installation porter itself runs from)."""
    roots = untrusted_roots()
    keep = _installation_paths()
    cwd = os.path.realpath(os.getcwd())
    out = []
    for entry in sys.path:
        if not entry or not os.path.isabs(entry):
            continue
        real = os.path.realpath(entry)
        if real not in keep and ((roots and _inside(entry, roots)) or real == cwd):
            continue
        if entry not in out:
            out.append(entry)
    return out


def run_python(module: str, args: Sequence[str] = (), *, cwd: Path | None = None, timeout: float = 600
               ) -> subprocess.CompletedProcess[str]:
    """Run ``python -m module args`` isolated: ``-I``, an explicit ``sys.path``, cwd outside any target."""
    with contextlib.ExitStack() as stack:
        if cwd is None:
            cwd = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="porter-child-")))
        argv = [sys.executable, "-I", "-c", _BOOT, json.dumps(child_sys_path()), module, *args]
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
                              env=_base_env())


@contextlib.contextmanager
def isolated_python_children() -> Iterator[None]:
    """While active, Python children started by multiprocessing (forkserver/spawn) get no cwd on sys.path.

    multiprocessing starts them as ``python -c '...'`` in the current directory: without
    ``PYTHONSAFEPATH`` a ``multiprocessing/`` package in the target (when porter runs from inside it)
    would be imported by the helper before anything else.
    """
    global _safe_depth, _safe_previous
    with _lock:
        if _safe_depth == 0:
            _safe_previous = os.environ.get("PYTHONSAFEPATH")
            os.environ["PYTHONSAFEPATH"] = "1"
        _safe_depth += 1
    try:
        yield
    finally:
        with _lock:
            _safe_depth -= 1
            if _safe_depth == 0:
                if _safe_previous is None:
                    os.environ.pop("PYTHONSAFEPATH", None)
                else:
                    os.environ["PYTHONSAFEPATH"] = _safe_previous


# -- git -------------------------------------------------------------------------------------------

# identity variables are the user's own and harmless; every other GIT_* variable is dropped
_KEEP_GIT_ENV = frozenset({
    "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE",
})

# command-scope config: it wins over the repository's .git/config and whatever that includes
_FIXED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.useBuiltinFSMonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("core.pager", "cat"),
    ("core.attributesFile", os.devnull),
    ("core.askPass", ""),
    ("core.sshCommand", "false"),
    ("core.gitProxy", ""),
    ("core.alternateRefsCommand", ""),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("gpg.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.defaultKeyCommand", ""),
    ("protocol.allow", "never"),
    ("protocol.file.allow", "never"),
    ("protocol.ext.allow", "never"),
    ("protocol.ssh.allow", "never"),
    ("protocol.git.allow", "never"),
    ("protocol.http.allow", "never"),
    ("protocol.https.allow", "never"),
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("diff.external", ""),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("core.quotePath", "false"),
)

# drivers the repository may define; each is disabled by name (there is no global switch)
_DRIVER_KEYS = {
    "filter": (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")),
    "diff": (("command", ""), ("textconv", ""), ("cachetextconv", "false")),
    "merge": (("driver", ""),),
}


@dataclass(frozen=True)
class GitRepo:
    work_tree: Path  # the top of the work tree (resolved)
    git_dir: Path  # the git directory porter validated (resolved)


@dataclass(frozen=True)
class GitLocation:
    repo: GitRepo | None
    refused: str = ""  # why a .git found on the way up was not used (untrusted link), else ""


def _looks_like_git_dir(path: Path) -> bool:
    if not (path / "HEAD").is_file():
        return False
    return ((path / "objects").is_dir() and (path / "refs").is_dir()) or (path / "commondir").is_file()


def _read_gitdir_file(dot_git: Path) -> Path | None:
    try:
        text = dot_git.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = line[len("gitdir:"):].strip()
            if not target:
                return None
            full = Path(target) if os.path.isabs(target) else dot_git.parent / target
            return Path(os.path.realpath(full))
    return None


def locate(directory: Path | str) -> GitLocation:
    """The git repository whose work tree holds ``directory``, found by porter (never by git).

    A ``.git`` directory is used as it is. A ``.git`` file or symlink, or a ``.git`` directory with a
    ``commondir`` link, makes git read config from elsewhere (a disguised folder of the tree, or
    anything on the disk): it is used only with ``--trust-git-dir``; otherwise the tree is treated as
    not under git and ``refused`` says why.
    """
    probe = Path(os.path.abspath(directory))
    trust = trust_git_dir()
    while True:
        dot_git = probe / ".git"
        if os.path.lexists(dot_git):
            link = os.path.islink(dot_git)
            if not link and dot_git.is_dir():
                if (dot_git / "commondir").exists() and not trust:
                    return GitLocation(None, f"{dot_git} borrows another git directory (commondir); "
                                       "pass --trust-git-dir to use it")
                if _looks_like_git_dir(dot_git):
                    return GitLocation(GitRepo(Path(os.path.realpath(probe)), Path(os.path.realpath(dot_git))))
                return GitLocation(None, f"{dot_git} is not a git directory")
            target = Path(os.path.realpath(dot_git)) if link else _read_gitdir_file(dot_git)
            if target is None or not target.is_dir() or not _looks_like_git_dir(target):
                return GitLocation(None, f"{dot_git} does not point at a git directory")
            if not trust:
                return GitLocation(None, f"{dot_git} is a {'symlink' if link else 'gitdir file'} pointing at "
                                   f"{target}; porter ignores it unless you pass --trust-git-dir")
            return GitLocation(GitRepo(Path(os.path.realpath(probe)), target))
        if probe.parent == probe:
            return GitLocation(None)
        probe = probe.parent


_OVERRIDES_CACHE: dict[tuple[str, int, int], list[tuple[str, str]]] = {}


def _config_stamp(repo: GitRepo) -> tuple[str, int, int]:
    try:
        st = (repo.git_dir / "config").stat()
        return str(repo.git_dir), st.st_mtime_ns, st.st_size
    except OSError:
        return str(repo.git_dir), -1, -1


def _config_overrides(repo: GitRepo, base_env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The fixed overrides plus one per driver the repository's config defines (cached per config file state)."""
    stamp = _config_stamp(repo)
    with _lock:
        cached = _OVERRIDES_CACHE.get(stamp)
    if cached is not None:
        return list(cached)
    overrides = _read_overrides(repo, base_env)
    with _lock:
        _OVERRIDES_CACHE[stamp] = overrides
    return list(overrides)


def _read_overrides(repo: GitRepo, base_env: Mapping[str, str]) -> list[tuple[str, str]]:
    overrides = list(_FIXED_CONFIG)
    env = dict(base_env)
    _put_config(env, overrides)
    git_exe = which("git")
    if git_exe is None:
        raise GitError("git is not installed")
    try:
        proc = subprocess.run([git_exe, "config", "--null", "--list"], cwd=repo.work_tree, env=env,
                              capture_output=True, timeout=30, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"cannot read the repository's git config: {exc}") from exc
    if proc.returncode != 0:
        # without the list, the repository's filter and diff drivers could not be disabled: run no git
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise GitError(f"cannot read the repository's git config: {err or proc.returncode}")
    names: dict[str, set[str]] = {k: set() for k in _DRIVER_KEYS}
    for item in proc.stdout.split(b"\0"):
        key = item.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
        section, _, rest = key.partition(".")
        if section.lower() in names and "." in rest:
            names[section.lower()].add(rest.rsplit(".", 1)[0])
    for section, drivers in names.items():
        for driver in sorted(drivers):
            overrides += [(f"{section}.{driver}.{k}", v) for k, v in _DRIVER_KEYS[section]]
    return overrides


def _put_config(env: dict[str, str], overrides: Sequence[tuple[str, str]]) -> None:
    env["GIT_CONFIG_COUNT"] = str(len(overrides))
    for i, (key, value) in enumerate(overrides):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value


def git_env(repo: GitRepo, *, index_file: Path | None = None) -> dict[str, str]:
    """The environment for a git command on ``repo`` that runs nothing the repository controls."""
    env = _base_env()
    env.update(
        GIT_DIR=str(repo.git_dir),
        GIT_WORK_TREE=str(repo.work_tree),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_ATTR_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_PAGER="cat",
        PAGER="cat",
        GIT_EDITOR=":",
        GIT_SEQUENCE_EDITOR=":",
        GIT_OPTIONAL_LOCKS="0",
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_NO_LAZY_FETCH="1",
        GIT_ALLOW_PROTOCOL="porter-none",
        GIT_PROTOCOL_FROM_USER="0",
    )
    env.pop("SSH_ASKPASS", None)
    env["GIT_LITERAL_PATHSPECS"] = "1"
    for role in ("AUTHOR", "COMMITTER"):
        env.setdefault(f"GIT_{role}_NAME", "porter")
        env.setdefault(f"GIT_{role}_EMAIL", "porter@localhost")
    if index_file is not None:
        env["GIT_INDEX_FILE"] = str(index_file)
    _put_config(env, _config_overrides(repo, env))
    return env


def git(repo: GitRepo, args: Sequence[str], *, cwd: Path | None = None, input: bytes | None = None,
        check: bool = True, timeout: float = 300, index_file: Path | None = None,
        env_extra: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``git args`` on ``repo`` (bytes in, bytes out). ``check`` raises :class:`GitError` on failure;
    so does any failure to prepare the safe environment, whatever ``check`` says."""
    exe = which("git")
    if exe is None:
        raise GitError("git is not installed")
    env = git_env(repo, index_file=index_file)
    if env_extra:
        env.update(env_extra)
    try:
        proc = subprocess.run([exe, "--no-pager", *args], cwd=cwd or repo.work_tree, env=env, input=input,
                              capture_output=True, timeout=timeout, check=False,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"git {args[0] if args else ''} failed: {exc}") from exc
    if check and proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise GitError(f"git {' '.join(args[:2])} failed: {err or f'exit status {proc.returncode}'}")
    return proc
