"""Configuration: ``[tool.porter]`` in the target's pyproject.toml (or porter.toml).

Keys (kebab-case, as in Ruff):

- ``select`` / ``extend-select`` / ``ignore``: rule codes, code prefixes or ``ALL``
- ``per-file-ignores``: ``{"glob" = ["PRT1", ...]}``
- ``exclude`` / ``extend-exclude``: gitignore-style patterns
- ``unsafe-fixes``: bool
- ``max-file-size``: bytes (default 4 MiB)
- ``timeout``: seconds per file (default 60)
- ``jobs``: worker processes (default: all cores)
- ``cache``: bool (default true), ``cache-dir``
- ``target-torch``: the torch version the ported code will run on; rewrites that need a newer
  torch than the repo pins (SDPA's ``enable_gqa`` needs 2.5) use it instead of the pin
- ``annotate``: bool, ``porter apply`` writes a ``porter: CODE reason`` comment at flagged sites
- ``[tool.porter.<family>]``: options of one family (see ``porter rules``)
"""

from __future__ import annotations

import fnmatch
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


class ConfigError(Exception):
    pass


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
    cache_dir: str = ".porter_cache"
    respect_gitignore: bool = True
    target_torch: str = ""  # torch version the ported code will run on (overrides the repo's pin)
    annotate: bool = False  # apply: write a `porter: CODE reason` comment above flagged sites
    options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()  # family -> options
    source: str = ""  # where the settings came from (for messages)

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
            changes[attr] = value
        elif norm == "timeout":
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ConfigError("`timeout` must be a positive number of seconds")
            changes[attr] = float(value)
        elif norm == "cache-dir":
            changes[attr] = str(value)
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
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"invalid TOML in {path}: {exc}") from None
    if path.name == "pyproject.toml":
        return data.get("tool", {}).get("porter", {})
    return data.get("tool", {}).get("porter", data)


def find_config(root: Path) -> Path | None:
    """The config file for ``root``: porter.toml, .porter.toml or a pyproject.toml with [tool.porter]."""
    for name in ("porter.toml", ".porter.toml"):
        if (root / name).is_file():
            return root / name
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            return None
        if "porter" in data.get("tool", {}):
            return pyproject
    return None


def parse_override(text: str) -> dict[str, Any]:
    """``KEY=VALUE`` in TOML syntax, e.g. ``select=["PRT1"]`` or ``attention.min-torch="2.5"``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
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


def resolve(root: Path, request: ConfigRequest) -> Settings:
    settings = Settings()
    files = [c for c in request.config if "=" not in c]
    overrides = [c for c in request.config if "=" in c]
    if files:
        for f in files:
            path = Path(f)
            if not path.is_file():
                raise ConfigError(f"config file not found: {f}")
            settings = from_table(load_file(path), settings, source=str(path))
    elif not request.isolated:
        found = find_config(root)
        if found is not None:
            settings = from_table(load_file(found), settings, source=str(found))
    for text in overrides:
        settings = from_table(parse_override(text), settings, source="--config")
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
    return replace(settings, **changes)
