"""Inline suppressions: ``# noqa: PRT101`` (Python) and ``// porter: ignore[PRT501]`` (C/C++/CUDA).

- Python: a ``# noqa`` comment on any line of the finding's range; bare ``# noqa`` silences
  every rule. ``# porter: noqa`` anywhere in the file silences the whole file.
- C/C++/CUDA: ``// porter: ignore[CODE, ...]`` (or ``/* porter: ignore */``) on the finding's
  first line or on the line just above it; without a list it silences every rule.
  ``// porter: ignore-file`` silences the whole file.

Codes may be prefixes (``PRT1``), as in ``--select``.
"""

from __future__ import annotations

import re

from .findings import Finding
from .framework import FileContext

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z0-9]+(?:[\s,]+[A-Za-z0-9]+)*))?", re.IGNORECASE)
_FILE_NOQA = re.compile(r"#\s*porter:\s*noqa\b", re.IGNORECASE)
_CPP = re.compile(r"(?://|/\*)\s*porter:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
_CPP_FILE = re.compile(r"(?://|/\*)\s*porter:\s*ignore-file\b", re.IGNORECASE)
_HASH = re.compile(r"#\s*porter:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)


def _codes(raw: str | None) -> tuple[str, ...] | None:
    if raw is None:
        return None
    return tuple(c.upper() for c in re.split(r"[\s,]+", raw) if c)


def _matches(code: str, codes: tuple[str, ...] | None) -> bool:
    return codes is None or any(code.startswith(c) for c in codes)


class Suppressions:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.python = ctx.language == "python"
        self.cpp = ctx.language == "cuda"
        text = ctx.text
        self.whole_file = bool(
            (self.python and _FILE_NOQA.search(text)) or (self.cpp and _CPP_FILE.search(text))
        )
        self.used: set[int] = set()

    def _line_codes(self, line: int) -> tuple[bool, tuple[str, ...] | None]:
        text = self.ctx.line_text(line)
        if self.python:
            m = _NOQA.search(text)
        elif self.cpp:
            m = _CPP.search(text)
        else:  # requirements, shell, YAML, Dockerfile, TOML: '# porter: ignore[CODE]'
            m = _HASH.search(text) or (_NOQA.search(text) if "noqa" in text.lower() else None)
        if not m:
            return False, None
        return True, _codes(m.group("codes"))

    def suppressed(self, finding: Finding) -> bool:
        if finding.code.startswith("PRT00"):
            return False  # engine problems are always reported
        if self.whole_file:
            return True
        if self.cpp:
            lines = [finding.line, finding.line - 1]
        else:
            lines = list(range(finding.line, max(finding.line, finding.end_line) + 1))
        for line in lines:
            found, codes = self._line_codes(line)
            if found and _matches(finding.code, codes):
                self.used.add(line)
                return True
        return False
