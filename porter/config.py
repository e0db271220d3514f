"""Configuration: ``[tool.porter]`` in the target's pyproject.toml (or porter.toml).

Keys (kebab-case, as in Ruff):

- ``select`` / ``extend-select`` / ``ignore``: rule codes, code prefixes or ``ALL``
- ``per-file-ignores``: ``{"glob" = ["PRT1", ...]}``
- ``exclude`` / ``extend-exclude``: gitignore-style patterns
- ``unsafe-fixes``: bool
- ``max-file-size``: bytes (default 4 MiB)
- ``timeout``: CPU seconds per file (default 60; between 1 ms and a day)
- ``jobs``: worker processes (default: all cores)
- ``cache``: bool (default true), ``cache-dir`` (default: the user's cache folder,
  ``$XDG_CACHE_HOME/porter``; in the target's own config only a folder inside the root)
- ``target-torch``: the torch version the ported code will run on; rewrites that need a newer
  torch than the repo pins (SDPA's ``enable_gqa`` needs 2.5) use it instead of the pin
- ``annotate``: bool, ``porter apply`` writes a ``porter: CODE reason`` comment at flagged sites
- ``[tool.porter.<family>]``: options of one family (see ``porter rules``)
"""

from __future__ import annotations

import fnmatch
import math
import os
import posixpath
import re
import sys
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

KNOWN_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "per-file-ignores",
    "exclude",
    "extend-exclude",
    "unsafe-fixes",
    "max-file-size",
    "timeout",
    "jobs",
    "cache",
    "cache-dir",
    "respect-gitignore",
    "annotate",
    "target-torch",
}


# family options whose value is a path inside the target (a file porter creates lives there)
PATH_OPTIONS = {("devices", "path"), ("warp_size", "header-dir")}
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


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] = ()  # empty: every rule enabled by default
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    unsafe_fixes: bool = False
    max_file_size: int = 4 * 1024 * 1024
    timeout: float = 60.0
    jobs: int = 0  # 0: all cores
    cache: bool = True
    cache_dir: str = ""  # empty: the user's cache folder (outside the target)
    respect_gitignore: bool = True
    target_torch: str = ""  # torch version the ported code will run on (overrides the repo's pin)
    annotate: bool = False  # apply: write a `porter: CODE reason` comment above flagged sites
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
        for name, opts in self.options:
            if name == family:
                return dict(opts)
        return {}

    def option(self, family: str, key: str, default: Any = None) -> Any:
        return self.family_options(family).get(key, default)

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


MAX_TIMEOUT = 24 * 3600.0
MIN_TIMEOUT = 0.001


def _timeout(value: float) -> float:
    """A per-file CPU-time limit: finite, between 1 ms and a day (``inf``, ``nan`` and values the
    interval timer cannot hold or rounds to zero, which would disable the limit, are errors)."""
    if not math.isfinite(value) or not MIN_TIMEOUT <= value <= MAX_TIMEOUT:
        raise ConfigError(f"`timeout` must be between {MIN_TIMEOUT:g} and {MAX_TIMEOUT:g} seconds, not {value!r}")
    return value


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


def _as_codes(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"`{key}` must be a list of rule codes or prefixes")
    return tuple(v.strip().upper() for v in value)


def from_table(table: dict[str, Any], base: Settings | None = None, source: str = "") -> Settings:
    """Settings from a ``[tool.porter]`` table (kebab-case keys), on top of ``base``."""
    from . import registry

    settings = base or Settings()
    families = {f.name for f in registry.families()}
    changes: dict[str, Any] = {}
    options = dict((k, dict(v)) for k, v in settings.options)
    if not isinstance(table, dict):
        raise ConfigError(f"[tool.porter] must be a table ({source or 'config'})")
    for key, value in table.items():
        if isinstance(value, dict) and key in families:
            options.setdefault(key, {}).update({k.replace("_", "-"): v for k, v in value.items()})
            continue
        norm = key.replace("_", "-")
        if norm not in KNOWN_KEYS and norm != "per-file-ignores":
            raise ConfigError(f"unknown key `{key}` in [tool.porter] ({source or 'config'})")
        attr = norm.replace("-", "_")
        if norm in {"select", "extend-select", "ignore"}:
            changes[attr] = _as_codes(value, key)
        elif norm in {"exclude", "extend-exclude"}:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"`{key}` must be a list of patterns")
            for pattern in value:
                if not pattern_is_tame(pattern):
                    raise ConfigError(f"`{key}` pattern {pattern!r} has more than {MAX_STARS_PER_SEGMENT} `*` "
                                      "in one path segment (too slow to match); simplify it")
            changes[attr] = tuple(value)
        elif norm == "per-file-ignores":
            if not isinstance(value, dict):
                raise ConfigError("`per-file-ignores` must be a table of glob = [codes]")
            changes[attr] = tuple((str(k), _as_codes(v, key)) for k, v in value.items())
        elif norm in {"unsafe-fixes", "cache", "respect-gitignore", "annotate"}:
            if not isinstance(value, bool):
                raise ConfigError(f"`{key}` must be true or false")
            changes[attr] = value
        elif norm in {"max-file-size", "jobs"}:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"`{key}` must be a non-negative integer")
            if norm == "max-file-size" and value > MAX_FILE_SIZE_CEILING:
                raise ConfigError(f"`{key}` must be at most {MAX_FILE_SIZE_CEILING} bytes")
            changes[attr] = value
        elif norm == "timeout":
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ConfigError("`timeout` must be a positive number of seconds")
            changes[attr] = _timeout(float(value))
        elif norm == "cache-dir":
            if not isinstance(value, str) or not value.strip() or "\0" in value:
                raise ConfigError("`cache-dir` must be a folder name")
            changes[attr] = value
        elif norm == "target-torch":
            from packaging.version import InvalidVersion, Version

            try:
                Version(str(value))
            except InvalidVersion:
                raise ConfigError(f"`target-torch` must be a version such as \"2.5\", not {value!r}") from None
            changes[attr] = str(value)
    changes["options"] = tuple(sorted((k, tuple(sorted(v.items()))) for k, v in options.items()))
    if source:
        changes["source"] = source
    return replace(settings, **changes)


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
    if not _inside(root, Path(root, norm)):
        raise ConfigError(f"{what} = {value!r} resolves (through a symlink) to outside the root")


def check_paths(root: Path, settings: Settings, *, cache_dir_from_target: bool) -> None:
    """Every path-valued setting is contained in the root, or a config error."""
    for family, key in sorted(PATH_OPTIONS):
        value = settings.option(family, key)
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
