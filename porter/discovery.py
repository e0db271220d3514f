"""File discovery: git-aware, ignore-aware, never leaves the root, never follows symlinks.

Inside a git work tree porter lists tracked and untracked-but-not-ignored files
(``git ls-files -co --exclude-standard``); elsewhere it walks the tree itself and honours
``.gitignore`` files. Configured excludes apply to both. Symlinks are never followed: one
that points outside the root is reported (PRT006); one that points inside is skipped, since
its target is visited on its own.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import express, languages, proc
from .config import Settings, pattern_is_tame
from .excludes import compile_excludes
from .findings import Finding
from .textio import read_bounded

if TYPE_CHECKING:
    import pathspec

GITIGNORE_LIMIT = 1024 * 1024


@dataclass(frozen=True)
class SourceRef:
    relpath: str  # '/'-separated, relative to the root
    language: str


@dataclass
class Discovery:
    files: list[SourceRef] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)


def _problem(code: str, relpath: str, message: str) -> Finding:
    return Finding(code=code, message=message, path=relpath)


def is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def relpath_of(path: Path, root: Path) -> str | None:
    """Root-relative '/'-path of ``path`` (absolute or cwd-relative), None when outside."""
    absolute = os.path.normpath(os.path.abspath(path))
    root_abs = os.path.normpath(os.path.abspath(root))
    if not is_within(absolute, root_abs):
        return None
    rel = os.path.relpath(absolute, root_abs)
    return "" if rel == "." else rel.replace(os.sep, "/")


def _symlink_problem(full: str, rel: str, root_real: str) -> Finding | None:
    try:
        target = os.path.realpath(full)
    except OSError:
        return _problem("PRT006", rel, "broken or looping symlink; skipped")
    if not os.path.exists(target):
        return _problem("PRT006", rel, "broken or looping symlink; skipped")
    if not is_within(target, root_real):
        return _problem("PRT006", rel, f"symlink points outside the root ({target}); not followed")
    return None


def _git_files(directory: Path) -> list[str] | None:
    """Files under ``directory`` per git (relative to it), or None when not in a work tree.

    git runs through :mod:`porter.proc`: the repository's own config cannot make it execute
    anything, and a ``.git`` file pointing elsewhere is not followed without ``--trust-git-dir``.
    """
    probes = express.note_git_probes(str(directory)) if express.tracing() else False
    location = proc.locate(directory)
    if location.repo is None:
        if probes:
            express.refuse("a .git porter does not use lies above the root")
        return None
    try:
        ignored = proc.git(location.repo, ["check-ignore", "-q", "."], cwd=directory, check=False, timeout=60)
        if ignored.returncode == 0:
            express.refuse("a folder its git repository ignores is walked")
            return None  # the user pointed porter at a folder its enclosing repo ignores: walk it
        listed = proc.git(
            location.repo, ["ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=directory, check=False, timeout=120,
        )
    except proc.GitError:
        express.refuse("git failed")
        return None
    if listed.returncode != 0:
        express.refuse("git failed")
        return None
    names = listed.stdout.decode("utf-8", "surrogateescape").split("\0")
    out = sorted({n for n in names if n})
    express.note_git(str(directory), out)
    return out


def _walk(directory: Path, root: Path, settings: Settings) -> list[tuple[str, str]]:
    """(full path, root-relative path) of every file under ``directory``, honouring .gitignore."""
    out = []
    specs: list[tuple[str, pathspec.PathSpec]] = []
    trace = express.tracing()
    if trace:
        express.note(str(directory))  # each folder is signed before it is listed
    for current, dirnames, filenames in os.walk(directory, followlinks=False):
        rel_dir = relpath_of(Path(current), root) or ""
        if settings.respect_gitignore and ".gitignore" in filenames:
            import pathspec  # only a tree with a .gitignore pays for it

            if trace:
                express.note(os.path.join(current, ".gitignore"))
            try:
                data = read_bounded(os.path.join(current, ".gitignore"), GITIGNORE_LIMIT)
                lines = [line for line in data.decode("utf-8", "replace").splitlines() if pattern_is_tame(line)]
                specs.append((rel_dir, pathspec.GitIgnoreSpec.from_lines(lines)))
            except OSError:
                pass  # a .gitignore that is a symlink, a FIFO or huge is not read

        def ignored(rel: str, is_dir: bool) -> bool:
            for base, spec in specs:
                if base and not rel.startswith(base + "/"):
                    continue
                sub = rel[len(base) + 1 :] if base else rel
                if spec.match_file(sub + ("/" if is_dir else "")):
                    return True
            return False

        keep = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            if d == ".git" or ignored(rel, True):
                continue
            keep.append(d)
            if trace:
                express.note(os.path.join(current, d))
        dirnames[:] = keep
        for name in sorted(filenames) + [d for d in keep if os.path.islink(os.path.join(current, d))]:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if not ignored(rel, False):
                out.append((os.path.join(current, name), rel))
    return out


def discover(root: Path, paths: list[Path], settings: Settings, *, force_exclude: bool = False) -> Discovery:
    """Every analysable file among ``paths`` (files or directories) under ``root``."""
    result = Discovery()
    root_real = os.path.realpath(root)
    proc.register_untrusted_root(root_real)
    excludes: list[Any] = []

    def excluded(rel: str) -> bool:
        # the exclude patterns are compiled on first use: files named on the command line skip them
        if not excludes:
            excludes.append(compile_excludes(settings.all_excludes))  # pathspec unless all are folder names
        return bool(excludes[0].match_file(rel))
    seen: set[str] = set()

    def consider(full: str, rel: str, explicit: bool) -> None:
        if rel in seen:
            return
        seen.add(rel)
        if (not explicit or force_exclude) and excluded(rel):
            return
        language = languages.detect(rel)
        try:
            is_link = os.path.islink(full)
        except OSError:
            is_link = False
        if is_link:
            express.refuse("a symbolic link (its target is not signed)")
            if language is not None or explicit or os.path.isdir(full):
                problem = _symlink_problem(full, rel, root_real)
                if problem is not None:
                    result.problems.append(problem)
            return
        if language is None:
            return
        try:
            mode = os.lstat(full).st_mode
        except OSError:
            return  # listed by git but deleted in the work tree
        if not stat.S_ISREG(mode):
            if not stat.S_ISDIR(mode):  # a FIFO, socket or device named like a source file
                result.problems.append(_problem("PRT005", rel, "not a regular file (FIFO, socket or device); "
                                                "skipped"))
            return
        result.files.append(SourceRef(rel, language))

    for path in paths or [root]:
        rel = relpath_of(path, root)
        if rel is None:
            result.problems.append(
                _problem("PRT009", str(path), f"{path} is outside the root {root}; skipped")
            )
            continue
        full = os.path.join(os.path.abspath(root), rel) if rel else os.path.abspath(root)
        parent = os.path.dirname(full) if rel else full
        if rel and not is_within(os.path.realpath(parent), root_real):
            # named through a symlinked folder that leads out of the root: never read there
            result.problems.append(_problem("PRT006", rel, "a folder on this path is a symlink to outside the "
                                            f"root ({os.path.realpath(parent)}); not followed"))
            continue
        if os.path.islink(full) and not os.path.isdir(full):
            consider(full, rel, True)
            continue
        if os.path.islink(full):
            problem = _symlink_problem(full, rel, root_real)
            if problem is not None:
                result.problems.append(problem)
            continue
        if os.path.isdir(full):
            listed = _git_files(Path(full)) if settings.respect_gitignore else None
            if listed is not None:
                for name in listed:
                    sub = f"{rel}/{name}" if rel else name
                    consider(os.path.join(full, name), sub, False)
            else:
                for sub_full, sub_rel in _walk(Path(full), Path(root), settings):
                    consider(sub_full, sub_rel, False)
        elif os.path.exists(full):
            consider(full, rel, True)
        else:
            result.problems.append(_problem("PRT005", rel, "no such file or directory"))
    result.files.sort(key=lambda s: s.relpath)
    return result
