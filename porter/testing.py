"""Helpers for porter's own tests and for rule authors.

Fixture layout (TorchFix style), one folder per family under ``tests/fixtures/<family>/``:

- ``<case>.in.<ext>``: the input (``ext`` is ``py``, ``cu``, ``txt``...; the real file name the
  engine sees is ``<case>.<ext>``, or the name in a first-line ``# porter-fixture: path=...``
  / ``// porter-fixture: path=...`` header, which is kept in the input),
- ``<case>.out.<ext>``: the expected result of ``porter apply`` (safe fixes only) with only
  that family's rules selected; absent means "nothing changes",
- ``<case>.unsafe.out.<ext>``: optional, the expected result with ``--unsafe-fixes``,
- ``<case>.findings``: optional, the expected findings on the input, one ``line:col CODE`` per
  line (``#`` comments allowed).

Set ``PORTER_UPDATE_FIXTURES=1`` to (re)write the expected files from porter's output.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from . import languages, registry
from .config import Settings
from .engine import analyze, fix
from .findings import Finding
from .framework import RepoFacts

_HEADER = re.compile(r"porter-fixture:(?P<body>.*)$")


def settings_for(family: str | None = None, *, unsafe: bool = False, **options: dict) -> Settings:
    """Settings that select only ``family``'s rules (all rules when None)."""
    s = Settings(unsafe_fixes=unsafe)
    if family is not None:
        fam = registry.family(family)
        if fam is None:
            raise KeyError(f"no family {family!r}")
        s = replace(s, select=tuple(r.code for r in fam.rules) + ("PRT00",))
    if options:
        s = replace(s, options=tuple(sorted((k, tuple(sorted(v.items()))) for k, v in options.items())))
    return s


def language_of(relpath: str) -> str:
    lang = languages.detect(relpath)
    if lang is None:
        raise ValueError(f"porter does not analyse {relpath}")
    return lang


def findings(
    source: str, relpath: str = "t.py", *, family: str | None = None, settings: Settings | None = None,
    facts: RepoFacts | None = None,
) -> list[Finding]:
    settings = settings or settings_for(family)
    return analyze(relpath, source, language_of(relpath), settings, facts)


def fixed(
    source: str, relpath: str = "t.py", *, family: str | None = None, unsafe: bool = False,
    settings: Settings | None = None, facts: RepoFacts | None = None,
) -> str:
    settings = settings or settings_for(family, unsafe=unsafe)
    return fix(relpath, source, language_of(relpath), settings, facts).text


def codes(found: Iterable[Finding]) -> list[str]:
    return [f.code for f in found]


def fixture_cases(root: Path) -> list[tuple[str, Path]]:
    """(family, input path) for every ``*.in.*`` fixture under ``root/<family>/``."""
    cases = []
    for path in sorted(root.glob("*/**/*.in.*")):
        family = path.relative_to(root).parts[0]
        cases.append((family, path))
    return cases


def _companion(path: Path, kind: str) -> Path:
    name = path.name
    idx = name.index(".in.")
    return path.with_name(name[:idx] + kind + name[idx + 3 :])


def fixture_header(text: str) -> dict[str, str]:
    """``key=value`` pairs of a first-line ``porter-fixture:`` header (path, options, facts)."""
    first = text.splitlines()[0] if text else ""
    m = _HEADER.search(first)
    if not m:
        return {}
    body = m.group("body").strip().rstrip("*/").strip()
    out: dict[str, str] = {}
    for token in body.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


def fixture_relpath(path: Path, text: str) -> str:
    header = fixture_header(text)
    if "path" in header:
        return header["path"]
    name = path.name
    idx = name.index(".in.")
    return name[:idx] + name[idx + 3 :]


def fixture_settings(family: str, text: str, *, unsafe: bool) -> Settings:
    """Settings for a fixture; ``options=fam.key=value,fam.key=value`` in the header sets family options."""
    header = fixture_header(text)
    options: dict[str, dict] = {}
    for item in filter(None, header.get("options", "").split(",")):
        dotted, _, value = item.partition("=")
        fam, _, key = dotted.partition(".")
        parsed: object = value
        if value in {"true", "false"}:
            parsed = value == "true"
        options.setdefault(fam, {})[key] = parsed
    return settings_for(family, unsafe=unsafe, **options)


def fixture_facts(text: str, default: RepoFacts | None = None) -> RepoFacts | None:
    """``imports=a,b``, ``applied=PRT401,...`` and ``pins=dist==1.0;dist2>=2`` from the header."""
    header = fixture_header(text)
    if not {"imports", "applied", "pins"} & header.keys():
        return default
    pins: dict[str, str] = {}
    for item in filter(None, header.get("pins", "").split(";")):
        m = re.match(r"([A-Za-z0-9_.-]+)(.*)$", item)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return RepoFacts(
        pins=pins,
        imports=frozenset(filter(None, header.get("imports", "").split(","))),
        applied=frozenset(filter(None, header.get("applied", "").split(","))),
    )


def check_fixture(family: str, path: Path, facts: RepoFacts | None = None) -> None:
    """Assert the fixture's expected outputs (or rewrite them when updating)."""
    update = os.environ.get("PORTER_UPDATE_FIXTURES") == "1"
    text = path.read_bytes().decode("utf-8")
    relpath = fixture_relpath(path, text)
    lang = language_of(relpath)
    facts = fixture_facts(text, facts)
    for kind, unsafe in ((".out", False), (".unsafe.out", True)):
        expected_path = _companion(path, kind)
        if kind == ".unsafe.out" and not expected_path.exists() and not update:
            continue
        result = fix(relpath, text, lang, fixture_settings(family, text, unsafe=unsafe), facts).text
        if update:
            if result != text and (kind == ".out" or result != _read(_companion(path, ".out"), text)):
                expected_path.write_bytes(result.encode("utf-8"))
            elif expected_path.exists() and result == text:
                expected_path.unlink()
            continue
        expected = _read(expected_path, text)
        assert result == expected, f"{path.name}: {kind[1:]} differs from {expected_path.name}"
        # idempotence: fixing the output again changes nothing
        again = fix(relpath, result, lang, fixture_settings(family, text, unsafe=unsafe), facts).text
        assert again == result, f"{path.name}: a second apply changed the file again"
    expected_findings = _companion(path, "").with_suffix(".findings")
    expected_findings = path.with_name(path.name[: path.name.index(".in.")] + ".findings")
    got = [f"{f.line}:{f.column} {f.code}"
           for f in analyze(relpath, text, lang, fixture_settings(family, text, unsafe=False), facts)]
    if update:
        if got or expected_findings.exists():
            expected_findings.write_text("\n".join(got) + ("\n" if got else ""), encoding="utf-8")
        return
    if expected_findings.exists():
        want = [
            ln.split("#", 1)[0].strip()
            for ln in expected_findings.read_text(encoding="utf-8").splitlines()
            if ln.split("#", 1)[0].strip()
        ]
        assert got == want, f"{path.name}: findings differ\n got: {got}\nwant: {want}"


def _read(path: Path, default: str) -> str:
    return path.read_bytes().decode("utf-8") if path.exists() else default
