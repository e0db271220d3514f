"""The configured excludes as a matcher, without pathspec when the patterns allow it.

porter's default excludes (``.git/``, ``venv/``, ``*.egg-info/``...) are all directory names: a
pattern ``NAME/`` with no other slash excludes every file below a directory called ``NAME`` at any
depth, and ``*`` in it matches any run of characters within that name. For such lists a single
regular expression does the job; importing pathspec costs more than a small tree's whole C++ pass
(on Python 3.11 it also imports asyncio, through ``typing_extensions.deprecated``). Any other pattern
(negations, anchors, ``**``, character classes, escapes...) goes to pathspec's ``GitIgnoreSpec``,
which defines the semantics; ``tests/test_excludes.py`` holds the fast path to it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

# NAME/ where NAME is letters, digits, '.', '_', '+', '-' and single '*'s (not '.' or '..', no '**')
_SIMPLE = re.compile(r"(?!\.{1,2}/\Z)(?!.*\*\*)[A-Za-z0-9._+\-*]+/\Z")


class Matcher(Protocol):
    def match_file(self, file: str) -> bool: ...


class DirectoryNames:
    """Matches a '/'-separated path when one of its folders has one of the names (globs) of the
    ``NAME/`` patterns."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(patterns)
        alternatives = "|".join("[^/]*".join(re.escape(part) for part in p[:-1].split("*")) for p in self.patterns)
        # a folder name starts the path or follows a '/' that something precedes (pathspec's `^(?:.+/)?`)
        self._regex = re.compile(rf"(?:\A|(?<=.)/)(?:{alternatives})/") if self.patterns else None
        self._spec: Any = None

    def match_file(self, file: str) -> bool:
        if self._regex is None:
            return False
        if "\n" in file:
            # pathspec's expressions do not let a folder name match after a line break in the path
            # (`.` stops there): such a path, which only a hostile tree holds, gets pathspec's answer
            if self._spec is None:
                import pathspec

                self._spec = pathspec.GitIgnoreSpec.from_lines(list(self.patterns))
            return bool(self._spec.match_file(file))
        if file.startswith("/"):  # pathspec's normalisation of a path it matches
            file = file[1:]
        elif file.startswith("./"):
            file = file[2:]
        return self._regex.search(file) is not None


def is_simple(pattern: str) -> bool:
    """Whether ``pattern`` is a bare directory name (glob) that :class:`DirectoryNames` matches exactly."""
    return _SIMPLE.match(pattern) is not None


def compile_excludes(patterns: Sequence[str]) -> Matcher | Any:
    """A matcher (``match_file(path) -> bool``) for gitignore-style ``patterns``."""
    patterns = list(patterns)
    if all(is_simple(p) for p in patterns):
        return DirectoryNames(patterns)
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(patterns)
