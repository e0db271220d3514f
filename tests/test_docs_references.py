"""The repository stands alone: no tracked text file points at a document that is not in it
(a specification folder, a sibling checkout, a Markdown file that does not exist)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from cli_helpers import REPO

# a folder of specifications or a sibling "shared" checkout: never part of this repository
OUTSIDE = re.compile(r"(?<![\w-])spec" + r"/|\.\./shared\b|(?<![\w-])shared/(?:spec|seed)\b")
# a Markdown path with at least one folder (a bare name such as MIGRATION.md is a file porter writes)
MD_PATH = re.compile(r"(?<![\w./-])((?:\.\./|\./)*(?:[\w.-]+/)+[\w.-]+\.md)\b")
# a Markdown link to a local .md file
MD_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)#\s]+\.md)(?:#[^)]*)?\)")


_NOT_SOURCE = {".git", "__pycache__", ".venv", "venv", "build", "dist", ".pytest_cache", ".ruff_cache", ".hypothesis"}


def _tracked() -> list[Path]:
    """The repository's files: git's list in a checkout, else every file outside build and cache folders
    (an unpacked source archive is checked too, never skipped)."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        files = []
        for folder, dirs, names in os.walk(REPO):
            dirs[:] = [d for d in dirs if d not in _NOT_SOURCE and not d.endswith(".egg-info")]
            files += [Path(folder, n) for n in names]
        return sorted(files)
    return [REPO / name for name in out.decode().split("\0") if name]


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _exists(ref: str, where: Path) -> bool:
    ref = ref.split("#", 1)[0]
    return any(os.path.exists(os.path.normpath(base / ref)) for base in (REPO, where.parent))


def problems(files: list[Path]) -> list[str]:
    out = []
    for path in files:
        text = _text(path)
        if text is None:
            continue
        rel = path.relative_to(REPO).as_posix() if REPO in path.parents else str(path)
        for number, line in enumerate(text.splitlines(), 1):
            for m in OUTSIDE.finditer(line):
                out.append(f"{rel}:{number}: refers to {m.group()!r}, which is not in the repository")
            refs = [m.group(1) for m in MD_PATH.finditer(line)]
            if path.suffix == ".md":
                refs += [m.group(1) for m in MD_LINK.finditer(line)]
            for ref in refs:
                if not _exists(ref, path):
                    out.append(f"{rel}:{number}: refers to {ref}, which does not exist")
    return out


def test_tracked_files_reference_only_files_in_the_repository() -> None:
    # this file holds the forbidden spellings as test data; other tests may name .md files of the
    # scratch trees they build (problems() still checks them for spec/ and ../shared)
    found = [p for p in problems([f for f in _tracked() if f != Path(__file__).resolve()])
             if not (p.startswith("tests/") and "which does not exist" in p)]
    assert not found, "\n".join(found)


def test_the_check_finds_references_outside(tmp_path: Path) -> None:
    # the scan itself: each kind of reference it must catch (paths resolve against the repository root);
    # the names are assembled so that this file does not hold them
    spec, shared, missing = "spec" + "/", ".." + "/shared", "docs/" + "MISSING.md"
    probe = tmp_path / "probe.md"
    probe.write_text(f"See {spec}cuda-warp-size.md and {shared}/seed, {missing} and [x](nowhere.md); "
                     "docs/DEVELOPING.md exists, as does [dev](docs/THREAT_MODEL.md).\n")
    found = problems([probe])
    assert any(repr(spec) in f for f in found) and any(repr(shared) in f for f in found)
    assert any(missing in f for f in found) and any("nowhere.md" in f for f in found)
    assert not any("DEVELOPING" in f or "THREAT_MODEL" in f for f in found)
