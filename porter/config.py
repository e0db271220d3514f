"""Configuration: ``[tool.porter]`` in the target's pyproject.toml (or porter.toml).

Every key is declared once, in :data:`SETTINGS` (and each rule family's own keys, for its
``[tool.porter.<family>]`` table, in its ``Family.options``): parsing, validation (an unknown key
or a value of the wrong type is a config error naming the key and the nearest valid one), the
``--config`` help and ``porter options`` (the list in the README) all come from these declarations.
Keys are kebab-case, as in Ruff; ``snake_case`` spellings are accepted.
"""

from __future__ import annotations

import fnmatch
import math
import os
import posixpath
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_EXCLUDE = (
    ".git/",
    ".hg/",
    ".svn/",
    ".venv/",
    "venv/",
    ".tox/",
    ".nox/",
    "__pycache__/",
    "node_modules/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".pytest_cache/",
    ".porter_cache/",
    "site-packages/",
    "build/",
    "dist/",
    "*.egg-info/",
)

MAX_FILE_SIZE_CEILING = 256 * 1024 * 1024  # whatever a config says, porter never reads more per file
CONFIG_LIMIT = 16 * 1024 * 1024  # a config file larger than this is refused
_PORTER_TABLE_RE = re.compile(r"^\s*\[{1,2}\s*[\"']?tool[\"']?\s*\.\s*[\"']?porter\b", re.M)


class ConfigError(Exception):
    pass


MAX_STARS_PER_SEGMENT = 3


def pattern_is_tame(pattern: str) -> bool:
    """Whether a gitignore-style pattern is cheap to match.

    pathspec compiles patterns to backtracking regular expressions: ``*a*a*a*a*b`` against a long
    file name takes seconds, one more star minutes. porter refuses (config) or drops (.gitignore)
    a pattern with more than three single-star wildcards in one path segment.
    """
    for segment in pattern.split("/"):
        if segment != "**" and len(re.findall(r"\*+", segment)) > MAX_STARS_PER_SEGMENT:
            return False
    return True


MAX_TIMEOUT = 24 * 3600.0
MIN_TIMEOUT = 0.001


def _timeout(value: float) -> float:
    """A per-file CPU-time limit: finite, between 1 ms and a day (``inf``, ``nan`` and values the
    interval timer cannot hold or rounds to zero, which would disable the limit, are errors)."""
    if not math.isfinite(value) or not MIN_TIMEOUT <= value <= MAX_TIMEOUT:
        raise ConfigError(f"`timeout` must be between {MIN_TIMEOUT:g} and {MAX_TIMEOUT:g} seconds, not {value!r}")
    return value


def _as_codes(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"`{key}` must be a list of rule codes or prefixes")
    return tuple(v.strip().upper() for v in value)


# -- declared settings ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One declared setting: a key of ``[tool.porter]`` or of a family's ``[tool.porter.<family>]``.

    ``type`` names a value kind of :data:`TYPES` (its checker turns the TOML value into the
    setting's value or raises :class:`ConfigError`); ``path``: the value is a path inside the
    target (a file porter creates lives there), contained in the root or a config error;
    ``choices``: the only values allowed, when not empty.
    """

    key: str  # kebab-case
    type: str
    default: Any
    help: str
    path: bool = False
    choices: tuple[str, ...] = ()

    def check(self, value: Any, key: str) -> Any:
        """The setting's value for ``value`` (as the user spelt ``key``), or a config error."""
        value = TYPES[self.type](value, key)
        if self.choices and value not in self.choices:
            raise ConfigError(f"`{key}` must be one of {', '.join(map(repr, self.choices))}, not {value!r}"
                              + _nearest(str(value), self.choices))
        return value

    @property
    def attr(self) -> str:
        return self.key.replace("-", "_")


def _bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"`{key}` must be true or false")
    return value


def _count(value: Any, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"`{key}` must be a non-negative integer")
    return value


def _bytes(value: Any, key: str) -> int:
    value = _count(value, key)
    if value > MAX_FILE_SIZE_CEILING:
        raise ConfigError(f"`{key}` must be at most {MAX_FILE_SIZE_CEILING} bytes")
    return value


def _seconds(value: Any, key: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ConfigError(f"`{key}` must be a positive number of seconds")
    return _timeout(float(value))


def _patterns(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"`{key}` must be a list of patterns")
    for pattern in value:
        if not pattern_is_tame(pattern):
            raise ConfigError(f"`{key}` pattern {pattern!r} has more than {MAX_STARS_PER_SEGMENT} `*` "
                              "in one path segment (too slow to match); simplify it")
    return tuple(value)


def _ignores_table(value: Any, key: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(value, dict):
        raise ConfigError(f"`{key}` must be a table of glob = [codes]")
    return tuple((str(k), _as_codes(v, key)) for k, v in value.items())


def _folder(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise ConfigError(f"`{key}` must be a folder name")
    return value


def _version(value: Any, key: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        Version(str(value))
    except InvalidVersion:
        raise ConfigError(f"`{key}` must be a version such as \"2.5\", not {value!r}") from None
    return str(value)


def _string(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"`{key}` must be a string, not {type(value).__name__} {value!r}")
    return value


# value kind -> checker(value, key as the user wrote it) -> the setting's value
TYPES: dict[str, Callable[[Any, str], Any]] = {
    "bool": _bool,
    "int": _count,
    "bytes": _bytes,
    "seconds": _seconds,
    "codes": _as_codes,
    "patterns": _patterns,
    "globs": _ignores_table,
    "folder": _folder,
    "version": _version,
    "string": _string,
}

# Every key of [tool.porter]; the Settings field of each is its key in snake_case.
SETTINGS: tuple[Option, ...] = (
    Option("select", "codes", (), "Rule codes or prefixes to enable, or ALL (default: every rule on by default)."),
    Option("extend-select", "codes", (), "Codes or prefixes to enable on top of `select`."),
    Option("ignore", "codes", (), "Codes or prefixes to disable; the most specific selector wins."),
    Option("per-file-ignores", "globs", (), "A table of glob = [codes]: codes ignored in matching files."),
    Option("exclude", "patterns", DEFAULT_EXCLUDE, "gitignore-style patterns of files not analysed (replaces "
           "the default list)."),
    Option("extend-exclude", "patterns", (), "Patterns excluded on top of `exclude`."),
    Option("unsafe-fixes", "bool", False, "`porter apply` also writes approximate (unsafe) fixes."),
    Option("max-file-size", "bytes", 4 * 1024 * 1024, "Larger files are reported (PRT004) and skipped; at most "
           f"{MAX_FILE_SIZE_CEILING} bytes."),
    Option("timeout", "seconds", 60.0, f"CPU seconds per file (PRT008), between {MIN_TIMEOUT:g} and "
           f"{MAX_TIMEOUT:g}."),
    Option("jobs", "int", 0, "Worker processes (0: all cores)."),
    Option("cache", "bool", True, "Keep the audit cache."),
    Option("cache-dir", "folder", "", "The audit cache's folder (default: the user's cache folder, "
           "$XDG_CACHE_HOME/porter; in the target's own config only a folder inside the root)."),
    Option("respect-gitignore", "bool", True, "Skip files the target's .gitignore files ignore."),
    Option("annotate", "bool", False, "`porter apply` writes a `porter: CODE reason` comment above flagged sites."),
    Option("target-torch", "version", "", "The torch version the ported code will run on; rewrites that need a "
           "newer torch than the repo pins (SDPA's enable_gqa needs 2.5) use it instead of the pin."),
)
_SETTING = {o.key: o for o in SETTINGS}


_UNSET: Any = object()


def _default(key: str) -> Any:
    return _SETTING[key].default


def _nearest(word: str, candidates: Iterable[str]) -> str:
    """``; did you mean `x`?`` for the closest candidate, or nothing."""
    import difflib

    close = difflib.get_close_matches(word.replace("_", "-"), sorted(candidates), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def family_declarations() -> dict[str, dict[str, Option]]:
    """Each rule family's declared options by key (from ``Family.options``)."""
    from . import registry

    families = registry.families()
    if _DECLARED.get("families") is not families:
        _DECLARED["families"] = families
        _DECLARED["table"] = {f.name: {o.key: o for o in f.options} for f in families}
    return _DECLARED["table"]  # type: ignore[no-any-return]


_DECLARED: dict[str, Any] = {}  # the families the table was built from, and the table


@dataclass(frozen=True)
class Settings:
    """The resolved settings. The fields before ``options`` are :data:`SETTINGS` (their defaults are
    declared there); ``options`` holds the ``[tool.porter.<family>]`` tables."""

    select: tuple[str, ...] = _default("select")
    extend_select: tuple[str, ...] = _default("extend-select")
    ignore: tuple[str, ...] = _default("ignore")
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = _default("per-file-ignores")
    exclude: tuple[str, ...] = _default("exclude")
    extend_exclude: tuple[str, ...] = _default("extend-exclude")
    unsafe_fixes: bool = _default("unsafe-fixes")
    max_file_size: int = _default("max-file-size")
    timeout: float = _default("timeout")
    jobs: int = _default("jobs")
    cache: bool = _default("cache")
    cache_dir: str = _default("cache-dir")
    respect_gitignore: bool = _default("respect-gitignore")
    target_torch: str = _default("target-torch")
    annotate: bool = _default("annotate")
    options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()  # family -> options
    source: str = ""  # where the settings came from (for messages)
    notes: tuple[str, ...] = ()  # warnings about the configuration, for the user

    # -- rule selection -----------------------------------------------------------------
    def is_enabled(self, code: str, default: bool = True) -> bool:
        """Ruff's rule: the most specific matching selector wins; ignore beats select on ties."""
        best_sel = _best(code, self.select + self.extend_select)
        best_ign = _best(code, self.ignore)
        if best_sel < 0 and best_ign < 0:
            return default and not self.select
        if best_sel < 0:
            return False if best_ign >= 0 else default
        return best_sel > best_ign

    def ignored_in_file(self, code: str, relpath: str) -> bool:
        for pattern, codes in self.per_file_ignores:
            if _glob_match(relpath, pattern) and _best(code, codes) >= 0:
                return True
        return False

    def family_options(self, family: str) -> dict[str, Any]:
        """The configured options of ``family`` (kebab-case keys)."""
        for name, opts in self.options:
            if name == family:
                return {key.replace("_", "-"): value for key, value in opts}
        return {}

    def option(self, family: str, key: str, default: Any = _UNSET) -> Any:
        """The value of a declared family option: the configured one, else ``default`` when given,
        else the declared default. Asking for an undeclared option is a bug in the family."""
        key = key.replace("_", "-")
        declared = family_declarations().get(family, {}).get(key)
        if declared is None:
            raise LookupError(f"rule family {family!r} reads option {key!r}, which it does not declare "
                              "(Family.options)")
        return self.family_options(family).get(key, declared.default if default is _UNSET else default)

    @property
    def all_excludes(self) -> tuple[str, ...]:
        return self.exclude + self.extend_exclude

    def fingerprint(self) -> str:
        """A stable digest of everything that can change analysis results (for the cache)."""
        import hashlib

        from . import __version__

        payload = repr(
            (
                __version__,
                self.select,
                self.extend_select,
                self.ignore,
                self.per_file_ignores,
                self.unsafe_fixes,
                self.annotate,
                self.target_torch,
                self.max_file_size,
                self.options,
            )
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _best(code: str, selectors: tuple[str, ...]) -> int:
    """Length of the longest selector matching ``code`` (ALL counts as 0), -1 if none."""
    best = -1
    for sel in selectors:
        sel = sel.strip().upper()
        if sel == "ALL":
            best = max(best, 0)
        elif sel and code.startswith(sel):
            best = max(best, len(sel))
    return best


def _glob_match(relpath: str, pattern: str) -> bool:
    if fnmatch.fnmatch(relpath, pattern):
        return True
    if "/" not in pattern:
        return fnmatch.fnmatch(relpath.rsplit("/", 1)[-1], pattern)
    return pattern.endswith("/") and relpath.startswith(pattern)


def from_table(table: dict[str, Any], base: Settings | None = None, source: str = "") -> Settings:
    """Settings from a ``[tool.porter]`` table (kebab-case keys), on top of ``base``; every key and
    value checked against its declaration."""
    settings = base or Settings()
    where = source or "config"
    declared = family_declarations()
    changes: dict[str, Any] = {}
    options = dict((k, dict(v)) for k, v in settings.options)
    if not isinstance(table, dict):
        raise ConfigError(f"[tool.porter] must be a table ({where})")
    for key, value in table.items():
        if key in declared:
            options.setdefault(key, {}).update(_family_table(key, value, declared[key], where))
            continue
        opt = _SETTING.get(key.replace("_", "-"))
        if opt is None and isinstance(value, dict):
            raise ConfigError(f"unknown rule family `{key}` in [tool.porter.{key}] ({where})" + _nearest(key, declared))
        if opt is None:
            raise ConfigError(f"unknown key `{key}` in [tool.porter] ({where})"
                              + _nearest(key, [*_SETTING, *declared]))
        changes[opt.attr] = opt.check(value, key)
    changes["options"] = tuple(sorted((k, tuple(sorted(v.items()))) for k, v in options.items()))
    if source:
        changes["source"] = source
    return replace(settings, **changes)


def _family_table(family: str, value: Any, declared: dict[str, Option], where: str) -> dict[str, Any]:
    """A ``[tool.porter.<family>]`` table, each key declared by the family and of its type."""
    if not isinstance(value, dict):
        raise ConfigError(f"[tool.porter.{family}] must be a table of the family's options ({where})")
    out: dict[str, Any] = {}
    for raw, v in value.items():
        key = raw.replace("_", "-")
        opt = declared.get(key)
        if opt is None:
            known = f"its options: {', '.join(f'`{k}`' for k in declared)}" if declared else "it has no options"
            raise ConfigError(f"unknown key `{raw}` in [tool.porter.{family}] ({where})" + _nearest(raw, declared)
                              + f" ({known}; see `porter options`)")
        opt.check(v, f"{family}.{key}")
        out[key] = v
    return out


def load_file(path: Path) -> dict[str, Any]:
    from .textio import read_bounded

    try:
        data = tomllib.loads(read_bounded(path, CONFIG_LIMIT).decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"invalid TOML in {path}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"invalid TOML in {path}: nested too deeply") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"`tool` in {path} must be a table")
    if path.name == "pyproject.toml":
        table = tool.get("porter", {})
    else:
        table = tool.get("porter", data)
    if not isinstance(table, dict):
        raise ConfigError(f"`tool.porter` in {path} must be a table, not {type(table).__name__}")
    return table


def _inside(root: Path, path: Path) -> bool:
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def find_config(root: Path, notes: list[str] | None = None) -> Path | None:
    """The config file for ``root``: porter.toml, .porter.toml or a pyproject.toml with [tool.porter].

    A config file must lie inside the root (a symlink to elsewhere is refused); a pyproject.toml
    that is not valid TOML is a config error when it mentions ``[tool.porter]``, else ignored
    with a note.
    """
    for name in ("porter.toml", ".porter.toml"):
        candidate = root / name
        if os.path.lexists(candidate):
            if not _inside(root, candidate):
                raise ConfigError(f"{candidate} is a symlink to outside the root; porter does not read it")
            if candidate.is_file():
                return candidate
    pyproject = root / "pyproject.toml"
    if not os.path.lexists(pyproject):
        return None
    if not _inside(root, pyproject):
        if notes is not None:
            notes.append(f"{pyproject} is a symlink to outside the root; its [tool.porter] settings, if any, "
                         "are ignored")
        return None
    if not pyproject.is_file():
        return None
    from .textio import read_bounded

    try:
        raw = read_bounded(pyproject, CONFIG_LIMIT)
    except OSError as exc:
        if notes is not None:
            notes.append(f"cannot read {pyproject}: {exc.strerror or exc}; no [tool.porter] settings used")
        return None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        if _PORTER_TABLE_RE.search(raw.decode("utf-8", "replace")):
            raise ConfigError(f"invalid TOML in {pyproject}, which holds [tool.porter]: {exc}") from None
        if notes is not None:
            notes.append(f"{pyproject} is not valid TOML ({exc}); porter used its default settings")
        return None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"`tool` in {pyproject} must be a table")
    if "porter" in tool:
        return pyproject
    return None


def parse_override(text: str) -> dict[str, Any]:
    """``KEY=VALUE`` in TOML syntax, e.g. ``select=["PRT1"]`` or ``attention.min-torch="2.5"``."""
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise ConfigError(f"invalid --config override {text!r}: {exc}") from None
    return data


@dataclass
class ConfigRequest:
    """What the command line asked for; resolved against the root by :func:`resolve`."""

    config: tuple[str, ...] = ()  # file paths or KEY=VALUE overrides
    isolated: bool = False
    select: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    unsafe_fixes: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _contained(root: Path, value: Any, what: str, *, directory: bool) -> None:
    """``value`` must be a plain relative path that stays in the root once symlinks are resolved."""
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise ConfigError(f"{what} must be a relative path inside the root, not {value!r}")
    norm = posixpath.normpath(value.replace("\\", "/"))
    if posixpath.isabs(norm) or re.match(r"^[A-Za-z]:", norm) or norm == ".." or norm.startswith("../"):
        raise ConfigError(f"{what} = {value!r} leaves the root; it must be a relative path inside it")
    if norm == "." and not directory:
        raise ConfigError(f"{what} = {value!r} is not a file name")
    from . import express

    express.note_setting_path(str(root), norm)  # what it resolves through is an input of the run
    if not _inside(root, Path(root, norm)):
        raise ConfigError(f"{what} = {value!r} resolves (through a symlink) to outside the root")


def check_paths(root: Path, settings: Settings, *, cache_dir_from_target: bool) -> None:
    """Every path-valued setting is contained in the root, or a config error."""
    for family, key in sorted((f, o.key) for f, opts in family_declarations().items()
                              for o in opts.values() if o.path):
        value = settings.family_options(family).get(key)
        if value not in (None, ""):
            _contained(root, value, f"[tool.porter.{family}] {key}", directory=key.endswith("dir"))
    module = settings.option("devices", "module")
    if module is not None and not (isinstance(module, str) and all(p.isidentifier() for p in module.split("."))):
        raise ConfigError(f"[tool.porter.devices] module must be a dotted module name, not {module!r}")
    if cache_dir_from_target and settings.cache_dir:
        _contained(root, settings.cache_dir, "cache-dir (in the target's own config)", directory=True)


def resolve(root: Path, request: ConfigRequest) -> Settings:
    settings = Settings()
    files = [c for c in request.config if "=" not in c]
    overrides = [c for c in request.config if "=" in c]
    notes: list[str] = []
    target_cache_dir = False
    if files:
        for f in files:
            path = Path(f)
            if not path.is_file():
                raise ConfigError(f"config file not found: {f}")
            settings = from_table(load_file(path), settings, source=str(path))
    elif not request.isolated:
        found = find_config(root, notes)
        if found is not None:
            settings = from_table(load_file(found), settings, source=str(found))
            target_cache_dir = bool(settings.cache_dir)
    for text in overrides:
        before = settings.cache_dir
        settings = from_table(parse_override(text), settings, source="--config")
        if settings.cache_dir != before:
            target_cache_dir = False  # the user chose it on the command line
    changes: dict[str, Any] = {}
    if request.select:
        changes["select"] = request.select
    if request.extend_select:
        changes["extend_select"] = settings.extend_select + request.extend_select
    if request.ignore:
        changes["ignore"] = settings.ignore + request.ignore
    if request.unsafe_fixes is not None:
        changes["unsafe_fixes"] = request.unsafe_fixes
    changes.update(request.extra)
    if "timeout" in changes:
        changes["timeout"] = _timeout(float(changes["timeout"]))
    if notes:
        changes["notes"] = settings.notes + tuple(notes)
    settings = replace(settings, **changes)
    check_paths(root, settings, cache_dir_from_target=target_cache_dir)
    return settings


# -- listing (porter options, the README's list) ----------------------------------------------


def declared_sections() -> list[tuple[str, tuple[Option, ...]]]:
    """``([tool.porter], SETTINGS)`` then each family's table that declares options."""
    from . import registry

    return [("tool.porter", SETTINGS)] + [(f"tool.porter.{f.name}", f.options)
                                          for f in sorted(registry.families(), key=lambda f: f.name) if f.options]


def shown_default(opt: Option) -> str:
    """The default in TOML syntax (a long list cut short)."""
    value = opt.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        items = [f'"{v}"' for v in value[:3]] + (["…"] if len(value) > 3 else [])
        return "[" + ", ".join(items) + "]" if opt.type != "globs" else "{}"
    if isinstance(value, str):
        return f'"{value}"'
    return f"{value:g}" if isinstance(value, float) else str(value)


def render_options(markdown: bool = False) -> str:
    """Every declared setting: key, type, default and help (``porter options``)."""
    out: list[str] = []
    for title, options in declared_sections():
        if markdown:
            out += [f"`[{title}]`", "", "| key | type | default | what it does |", "|---|---|---|---|"]
            for o in options:
                kind = o.type + (" (path in the target)" if o.path else "")
                if o.choices:
                    kind += ": " + " / ".join(f"`{c}`" for c in o.choices)
                out.append(f"| `{o.key}` | {kind} | `{shown_default(o)}` | {o.help.replace('|', chr(92) + '|')} |")
            out.append("")
            continue
        out.append(f"[{title}]")
        for o in options:
            kind = o.type + (" path" if o.path else "") + (f" ({'|'.join(o.choices)})" if o.choices else "")
            out.append(f"  {o.key:<20} {kind:<28} default {shown_default(o)}")
            out.append(f"      {o.help}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def setting_keys() -> tuple[str, ...]:
    return tuple(o.key for o in SETTINGS)
