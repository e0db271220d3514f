"""Dependency manifests: which files they are, what they pin, and exact-offset scanners.

porter never executes a manifest. ``setup.py`` is parsed with :mod:`ast`; TOML with
:mod:`tomllib`; YAML with ``yaml.safe_load``; requirement strings with :mod:`packaging`.

- :func:`is_manifest` / :data:`MANIFEST_NAMES`: the files the runner hands to
  :func:`collect_pins` (and processes in the second phase of a run).
- :func:`collect_pins`: canonical distribution name -> version specifier across every
  manifest and lock file of a repository (``RepoFacts.pins``).
- :func:`requirement_lines`, :func:`toml_strings`: positions of requirement strings and
  pip options in a file's text, so rule families can edit exact offsets.
"""

from __future__ import annotations

import ast
import configparser
import json
import posixpath
import re
import sys
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from . import languages

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LOCK_FILES = ("poetry.lock", "uv.lock", "Pipfile.lock", "pdm.lock")
MANIFEST_NAMES: frozenset[str] = frozenset(
    {"pyproject.toml", "setup.py", "setup.cfg", "Pipfile", *LOCK_FILES}
)


def is_manifest(relpath: str) -> bool:
    """True for a dependency manifest or lock file (by name; contents are not read)."""
    name = posixpath.basename(relpath)
    if name in MANIFEST_NAMES or _in_requirements_dir(relpath):
        return True
    return languages.detect(relpath) in (languages.REQUIREMENTS, languages.CONDA)


def manifest_folder(relpath: str) -> str:
    """The project folder a manifest belongs to: its own folder, or the parent of a
    ``requirements/``-style folder of requirement files ("" is the root)."""
    folder = posixpath.dirname(relpath)
    if _in_requirements_dir(relpath):
        folder = posixpath.dirname(folder)
    return folder


def _in_requirements_dir(relpath: str) -> bool:
    """``requirements/gpu.txt``-style layouts (a folder of requirement files)."""
    parent = posixpath.basename(posixpath.dirname(relpath)).lower()
    return parent in ("requirements", "reqs", "requirements.d") and relpath.endswith((".txt", ".in"))


# -- requirements.txt -------------------------------------------------------------------

_OPTION = re.compile(
    r"^(?P<opt>-i|--index-url|--extra-index-url|-f|--find-links|-r|--requirement|-c|--constraint|"
    r"-e|--editable|--pre|--trusted-host|--no-index|--prefer-binary|--only-binary|--no-binary)"
    r"(?:[ \t]*=[ \t]*|[ \t]+|$)(?P<value>\S*)"
)
_COMMENT = re.compile(r"(^|[ \t])#")
_PER_REQ_OPTION = re.compile(r"[ \t]+--?[A-Za-z]")


@dataclass(frozen=True)
class ReqLine:
    """One logical line of a requirements file (continuations joined).

    ``start``/``end`` span the physical lines including the final newline. For a
    requirement, ``req_start``/``req_end`` span the requirement text itself (without
    per-requirement options or the comment). For an option, ``value_start``/``value_end``
    span its value.
    """

    start: int
    end: int
    text: str  # the logical line without comment (continuations kept verbatim)
    requirement: Requirement | None = None
    req_start: int = 0
    req_end: int = 0
    option: str | None = None
    value: str = ""
    value_start: int = 0
    value_end: int = 0
    comment: str = ""

    @property
    def name(self) -> str | None:
        return canonicalize_name(self.requirement.name) if self.requirement else None


def _physical_lines(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each physical line, end including its newline."""
    pos = 0
    n = len(text)
    while pos < n:
        nl = text.find("\n", pos)
        end = n if nl < 0 else nl + 1
        yield pos, end
        pos = end


def requirement_lines(text: str, base: int = 0) -> list[ReqLine]:
    """Parse a requirements file into logical lines with exact offsets (``base`` added)."""
    out: list[ReqLine] = []
    lines = list(_physical_lines(text))
    i = 0
    while i < len(lines):
        start, end = lines[i]
        j = i
        # join backslash continuations
        while j + 1 < len(lines) and text[lines[j][0] : lines[j][1]].rstrip("\r\n").endswith("\\"):
            j += 1
        end = lines[j][1]
        i = j + 1
        raw = text[start:end]
        body = raw.rstrip("\r\n")
        m = _COMMENT.search(body)
        comment = ""
        if m:
            comment = body[m.start() :].strip()
            body = body[: m.start()]
        stripped = body.strip()
        if not stripped:
            out.append(ReqLine(base + start, base + end, "", comment=comment))
            continue
        lead = len(body) - len(body.lstrip())
        om = _OPTION.match(stripped)
        if om:
            vstart = start + lead + om.start("value")
            out.append(ReqLine(base + start, base + end, stripped, option=om.group("opt"),
                               value=om.group("value"), value_start=base + vstart,
                               value_end=base + vstart + len(om.group("value")), comment=comment))
            continue
        if stripped.startswith("-"):
            out.append(ReqLine(base + start, base + end, stripped, option=stripped.split()[0], comment=comment))
            continue
        # a requirement, possibly followed by per-requirement options (--hash=...)
        req_text = stripped
        pm = _PER_REQ_OPTION.search(req_text)
        if pm:
            req_text = req_text[: pm.start()]
        req_text = req_text.rstrip(" \t\\\r\n")
        joined = re.sub(r"\\\r?\n", "", req_text)
        try:
            req = Requirement(joined)
        except InvalidRequirement:
            out.append(ReqLine(base + start, base + end, stripped, comment=comment))
            continue
        rs = start + lead
        out.append(ReqLine(base + start, base + end, stripped, requirement=req, req_start=base + rs,
                           req_end=base + rs + len(req_text), comment=comment))
    return out


# -- TOML strings with offsets ------------------------------------------------------------

_TOML_HEADER = re.compile(r"^[ \t]*\[\[?[ \t]*([^\]]+?)[ \t]*\]\]?[ \t]*(?:#.*)?$")


@dataclass(frozen=True)
class TomlString:
    """A string literal in a TOML file: its table, key path and exact position."""

    table: str  # dotted header of the enclosing table ("project", "tool.poetry.dependencies")
    key: str  # the key (dotted keys joined) whose value contains the string
    value: str
    start: int  # offset of the opening quote
    end: int  # offset after the closing quote
    in_array: bool
    inline_key: str = ""  # key inside an inline table ({version = "..."})


def _toml_unescape(body: str, literal: bool) -> str | None:
    if literal:
        return body
    try:
        return tomllib.loads(f'x = "{body}"')["x"]
    except tomllib.TOMLDecodeError:
        return None


def toml_strings(text: str) -> list[TomlString]:
    """Every single-line string value in a TOML document, with its table and key.

    A small scanner: headers, ``key = value`` pairs, arrays and inline tables spanning
    lines, comments. Multi-line strings are skipped (never reported or edited).
    """
    out: list[TomlString] = []
    table = ""
    key = ""
    stack: list[list[Any]] = []  # ["[", "", False] or ["{", inline key, expecting a key]
    expect_key = True
    pending: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if c in " \t\r":
            i += 1
            continue
        if c == "\n":
            if not stack:
                expect_key = True
                pending = []
            i += 1
            continue
        if not stack and expect_key and c == "[":
            nl = text.find("\n", i)
            m = _TOML_HEADER.match(text[i : n if nl < 0 else nl])
            if m:
                table = ".".join(p.strip().strip('"').strip("'") for p in m.group(1).split("."))
            i = n if nl < 0 else nl
            continue
        keymode = (not stack and expect_key) or bool(stack and stack[-1][0] == "{" and stack[-1][2])
        if c in "\"'":
            if text.startswith(c * 3, i):
                close = text.find(c * 3, i + 3)
                i = n if close < 0 else close + 3
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if (c == '"' and text[j] == "\\") else 1
            value = _toml_unescape(text[i + 1 : j], c == "'")
            end = j + 1
            if keymode:
                pending.append(value or "")
            elif value is not None:
                inline = next((e[1] for e in reversed(stack) if e[0] == "{"), "")
                in_array = bool(stack) and stack[-1][0] == "["
                out.append(TomlString(table, key, value, i, end, in_array, inline))
            i = end
            continue
        if keymode:
            m = re.match(r"[A-Za-z0-9_\-]+", text[i:])
            if m:
                pending.append(m.group(0))
                i += m.end()
                continue
            if c == "=":
                if stack:
                    stack[-1][1] = ".".join(pending)
                    stack[-1][2] = False
                else:
                    key = ".".join(pending)
                    expect_key = False
                pending = []
                i += 1
                continue
            if c == ".":
                i += 1
                continue
        if c == "[":
            stack.append(["[", "", False])
        elif c == "{":
            stack.append(["{", "", True])
        elif c in "]}":
            if stack:
                stack.pop()
        elif c == "," and stack and stack[-1][0] == "{":
            stack[-1][2] = True
            pending = []
        i += 1
    return out


# -- specifiers -----------------------------------------------------------------------------


def _spec_of(req: Requirement) -> str:
    if req.url:
        return _spec_from_url(req.url)
    return str(req.specifier)


def _spec_from_url(url: str) -> str:
    filename = url.rsplit("/", 1)[-1].split("#", 1)[0].replace("%2B", "+").replace("%2b", "+")
    if filename.endswith(".whl"):
        try:
            _, version, _, _ = parse_wheel_filename(filename)
        except (InvalidWheelFilename, InvalidVersion):
            return ""
        return f"=={version.public}"
    return ""


def poetry_constraint(value: str) -> str:
    """A Poetry version constraint (``^2.5``, ``~1.2``, ``2.0.4``, ``*``) as a PEP 440 specifier."""
    value = value.strip()
    if value in ("", "*"):
        return ""
    parts = []
    for piece in value.split(","):
        piece = piece.strip()
        try:
            if piece.startswith("^"):
                v = Version(piece[1:].strip())
                rel = list(v.release) + [0] * (3 - len(v.release))
                upper_idx = next((k for k, x in enumerate(rel) if x != 0), len(piece[1:].split(".")) - 1)
                upper = rel[: upper_idx + 1]
                upper[-1] += 1
                parts += [f">={piece[1:].strip()}", "<" + ".".join(map(str, upper))]
            elif piece.startswith("~") and not piece.startswith("~="):
                raw = piece[1:].strip()
                v = Version(raw)
                rel = list(v.release)
                upper = rel[:2] if len(rel) >= 2 else rel[:1]
                upper[-1] += 1
                parts += [f">={raw}", "<" + ".".join(map(str, upper))]
            elif piece[:1].isdigit():
                Version(piece)
                parts.append(f"=={piece}")
            else:
                SpecifierSet(piece)
                parts.append(piece)
        except (InvalidVersion, InvalidSpecifier):
            return ""
    return str(SpecifierSet(",".join(parts)))


def conda_constraint(value: str) -> str:
    """A conda match spec's version part (``=2.1``, ``==2.1.0``, ``>=1.0``) as PEP 440."""
    value = value.strip().split()[0] if value.strip() else ""
    if not value:
        return ""
    if value.startswith("==") or value[0] in "<>!~":
        spec = value
    elif value.startswith("="):
        body = value[1:]
        spec = f"=={body}" if body.endswith("*") else f"=={body}.*"
    else:
        spec = f"=={value}" if "*" in value else f"=={value}.*"
    try:
        return str(SpecifierSet(spec.replace(".*.*", ".*")))
    except InvalidSpecifier:
        return ""


# -- pins ------------------------------------------------------------------------------------

_CONDA_TO_PIP = {"pytorch": "torch", "pytorch-cuda": "pytorch-cuda"}


def _requirements_from_strings(values: Iterable[Any]) -> Iterator[tuple[str, str]]:
    for value in values:
        if not isinstance(value, str):
            continue
        try:
            req = Requirement(value)
        except InvalidRequirement:
            continue
        yield canonicalize_name(req.name), _spec_of(req)


def _pins_requirements(text: str) -> Iterator[tuple[str, str]]:
    for line in requirement_lines(text):
        if line.requirement is not None and line.name:
            yield line.name, _spec_of(line.requirement)


def _pins_pyproject(text: str) -> Iterator[tuple[str, str]]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    project = data.get("project", {})
    yield from _requirements_from_strings(project.get("dependencies", []) or [])
    for values in (project.get("optional-dependencies", {}) or {}).values():
        yield from _requirements_from_strings(values or [])
    for values in (data.get("dependency-groups", {}) or {}).values():
        yield from _requirements_from_strings(values or [])
    poetry = data.get("tool", {}).get("poetry", {})
    tables = [poetry.get("dependencies", {}), poetry.get("dev-dependencies", {})]
    tables += [g.get("dependencies", {}) for g in (poetry.get("group", {}) or {}).values() if isinstance(g, dict)]
    for table in tables:
        if not isinstance(table, dict):
            continue
        for name, spec in table.items():
            if name == "python":
                continue
            if isinstance(spec, dict):
                spec = spec.get("version", "")
            if isinstance(spec, list):
                spec = next((s.get("version", "") for s in spec if isinstance(s, dict)), "")
            yield canonicalize_name(name), poetry_constraint(spec) if isinstance(spec, str) else ""


def _pins_build_system(text: str) -> Iterator[tuple[str, str]]:
    """``[build-system].requires``: the build environment, ranked below the runtime pins (collect_pins)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    build = data.get("build-system", {})
    if isinstance(build, dict):
        yield from _requirements_from_strings(build.get("requires", []) or [])


def _pins_setup_cfg(text: str) -> Iterator[tuple[str, str]]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return
    values: list[str] = []
    if parser.has_section("options"):
        for key in ("install_requires", "setup_requires"):
            values += parser.get("options", key, fallback="").splitlines()
    if parser.has_section("options.extras_require"):
        for _, val in parser.items("options.extras_require"):
            values += val.splitlines()
    yield from _requirements_from_strings(v.split("#", 1)[0].strip() for v in values)


def setup_py_requirements(text: str) -> list[str]:
    """Requirement strings in a setup.py's ``setup(...)`` call (literal lists only)."""
    try:
        with warnings.catch_warnings():  # the target's invalid escapes are not porter's to report
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    assigned: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
    out: list[str] = []

    def strings(expr: ast.expr | None) -> None:
        if isinstance(expr, ast.Name) and expr.id in assigned:
            expr = assigned[expr.id]
        if isinstance(expr, (ast.List, ast.Tuple)):
            out.extend(e.value for e in expr.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
        elif isinstance(expr, ast.Dict):
            for v in expr.values:
                strings(v)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fname = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if fname != "setup":
                continue
            for kw in node.keywords:
                if kw.arg in ("install_requires", "extras_require", "setup_requires"):
                    strings(kw.value)
    return out


def _pins_conda(text: str) -> Iterator[tuple[str, str]]:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    if not isinstance(data, dict):
        return
    for dep in data.get("dependencies", []) or []:
        if isinstance(dep, dict):
            yield from _requirements_from_strings(dep.get("pip", []) or [])
        elif isinstance(dep, str):
            spec = dep.split("::", 1)[-1].strip()
            m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", spec)
            if not m:
                continue
            name = _CONDA_TO_PIP.get(m.group(1).lower(), m.group(1))
            yield canonicalize_name(name), conda_constraint(_conda_version(m.group(2)))


def _conda_version(rest: str) -> str:
    rest = rest.strip()
    if not rest:
        return ""
    # name=version=build: drop the build string
    if rest.startswith("=") and not rest.startswith("=="):
        body = rest[1:].split("=", 1)[0]
        return "=" + body
    return rest


def _pins_pipfile(text: str) -> Iterator[tuple[str, str]]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    for section in ("packages", "dev-packages"):
        for dist, spec in (data.get(section, {}) or {}).items():
            if isinstance(spec, dict):
                spec = spec.get("version", "")
            if not isinstance(spec, str):
                continue
            spec = "" if spec.strip() == "*" else spec.strip()
            try:
                spec = str(SpecifierSet(spec))
            except InvalidSpecifier:
                spec = ""
            yield canonicalize_name(dist), spec


def _pins_lock(name: str, text: str) -> Iterator[tuple[str, str]]:
    if name == "Pipfile.lock":
        try:
            data = json.loads(text)
        except ValueError:
            return
        for section in ("default", "develop"):
            for dist, info in (data.get(section, {}) or {}).items():
                if isinstance(info, dict) and isinstance(info.get("version"), str):
                    yield canonicalize_name(dist), info["version"]
        return
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    for pkg in data.get("package", []) or []:
        if isinstance(pkg, dict) and isinstance(pkg.get("name"), str) and isinstance(pkg.get("version"), str):
            yield canonicalize_name(pkg["name"]), f"=={pkg['version']}"


def _pins_of(relpath: str, text: str) -> Iterator[tuple[str, str]]:
    name = posixpath.basename(relpath)
    if name in LOCK_FILES:
        yield from _pins_lock(name, text)
    elif name == "pyproject.toml":
        yield from _pins_pyproject(text)
    elif name == "setup.py":
        yield from _requirements_from_strings(setup_py_requirements(text))
    elif name == "setup.cfg":
        yield from _pins_setup_cfg(text)
    elif name == "Pipfile":
        yield from _pins_pipfile(text)
    else:
        lang = languages.detect(relpath)
        if lang == languages.REQUIREMENTS or _in_requirements_dir(relpath):
            yield from _pins_requirements(text)
        elif lang == languages.CONDA:
            yield from _pins_conda(text)


def _rank(spec: str, lock: bool) -> int:
    if lock:
        return 3
    if spec.startswith(("==", "===")) and "," not in spec and "*" not in spec:
        return 2
    return 1 if spec else 0


def collect_pins(files: dict[str, str]) -> dict[str, str]:
    """Canonical distribution name -> specifier across manifests and lock files.

    A lock file's exact version wins; then an exact ``==`` pin; then any other specifier;
    ``""`` means "named without a version". Among equals, the file that sorts first
    (shallowest path, then name) wins. Nothing is executed; unparsable files are skipped.
    """
    best: dict[str, tuple[int, str]] = {}
    ordered = sorted(files, key=lambda p: (p.count("/"), p))
    for relpath in ordered:
        lock = posixpath.basename(relpath) in LOCK_FILES
        for dist, spec in _pins_of(relpath, files[relpath]):
            rank = _rank(spec, lock)
            if dist not in best or rank > best[dist][0]:
                best[dist] = (rank, spec)
    # build requirements (pyproject's [build-system].requires) describe the build environment, not what the
    # package runs with: they count only for a distribution no runtime manifest gives a version
    for relpath in ordered:
        if posixpath.basename(relpath) != "pyproject.toml":
            continue
        for dist, spec in _pins_build_system(files[relpath]):
            if dist not in best or (best[dist][0] == 0 and spec):
                best[dist] = (_rank(spec, False), spec)
    return {dist: spec for dist, (_, spec) in sorted(best.items())}


__all__ = [
    "LOCK_FILES",
    "MANIFEST_NAMES",
    "ReqLine",
    "TomlString",
    "collect_pins",
    "conda_constraint",
    "is_manifest",
    "manifest_folder",
    "poetry_constraint",
    "requirement_lines",
    "setup_py_requirements",
    "toml_strings",
]
