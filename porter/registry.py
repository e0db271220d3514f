"""The rule registry: every family in ``porter.codemods`` plus the engine's own rules."""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import lru_cache

from .findings import Applicability, Category, Finding, Rule, Severity
from .framework import Family, rule

CODE_RE = re.compile(r"^PRT\d{3}$")

ENGINE = "engine"

ENGINE_RULES: tuple[Rule, ...] = (
    rule("PRT000", "not-written", ENGINE, "porter did not write its fix to this file; the file is unchanged.",
         Category.BENIGN, severity=Severity.ERROR,
         explanation="`porter apply` refuses a file rather than risk it: the file changed on disk while porter "
         "ran, it has several hard links (replacing it would split them), it is read-only or belongs to "
         "another user, a folder on its path is a symlink, its encoding does not round-trip byte for byte "
         "(cp932, big5, utf-7, ...), or the write failed (full disk, immutable file). The message says which. "
         "The other files are written; run porter again or apply the diff of `porter apply --dry-run` by hand."),
    rule("PRT001", "syntax-error", ENGINE, "The file does not parse; porter skipped it.", Category.BENIGN,
         severity=Severity.ERROR,
         explanation="porter parses every file it analyses. A file that does not parse (a syntax error, "
         "Python 2 code, a grammar porter's parser does not know) is reported with the parser's message "
         "and left untouched; the rest of the run goes on. A Python file whose syntax is newer than the "
         "Python running porter (PEP 695 `type` aliases under 3.11, say) is reported too when LibCST "
         "parses it: only the LibCST rules ran on it, and the message says so; run porter on a Python "
         "that parses the file for the full audit. The other way round (CPython parses it, the installed "
         "LibCST does not), the inventory rules ran and the structural rewrites did not: upgrade libcst."),
    rule("PRT002", "undecodable-file", ENGINE, "The file is not valid text in its declared encoding.",
         Category.BENIGN, severity=Severity.ERROR,
         explanation="Python files are decoded per PEP 263 (BOM or coding cookie, else UTF-8); other "
         "files as UTF-8. A file that does not decode is reported and left untouched."),
    rule("PRT003", "binary-file", ENGINE, "The file looks binary (NUL bytes); porter skipped it.",
         Category.BENIGN, severity=Severity.INFO),
    rule("PRT004", "file-too-large", ENGINE, "The file exceeds max-file-size; porter skipped it.",
         Category.BENIGN, severity=Severity.INFO,
         explanation="Raise `max-file-size` under `[tool.porter]` to analyse it."),
    rule("PRT005", "unreadable-file", ENGINE, "The file could not be read (permissions, vanished).",
         Category.BENIGN, severity=Severity.ERROR),
    rule("PRT006", "symlink-outside-root", ENGINE,
         "A symlink points outside the target root; porter neither reads nor writes through it.",
         Category.BENIGN, severity=Severity.WARNING),
    rule("PRT007", "internal-error", ENGINE,
         "A rule crashed on the file, or a fix produced code that does not parse or did not converge.",
         Category.BENIGN, severity=Severity.ERROR,
         explanation="This is a bug in porter: please report it with the file. The failing rule family's "
         "findings for the file are missing, or its fix was reverted; the file is left as it was before "
         "the failing fix and the rest of the run goes on."),
    rule("PRT008", "file-timeout", ENGINE, "Analysing the file took longer than the per-file timeout.",
         Category.BENIGN, severity=Severity.ERROR,
         explanation="Raise `--timeout` (or `timeout` under `[tool.porter]`) to analyse it."),
    rule("PRT009", "path-outside-root", ENGINE, "A path given on the command line is outside the root.",
         Category.BENIGN, severity=Severity.ERROR),
)


class FamilyLoadError(Exception):
    pass


def check_loaded() -> None:
    """Raise when a rule family failed to import: a run without its rules would mislead."""
    families()
    if LOAD_ERRORS:
        raise FamilyLoadError("; ".join(f"rule family {name!r} failed to load ({why})"
                                        for name, why in LOAD_ERRORS.items()))


LOAD_ERRORS: dict[str, str] = {}  # family module -> why it failed to import (the CLI refuses to run)


@lru_cache(maxsize=1)
def families() -> tuple[Family, ...]:
    """All rule families, in patch application order."""
    import porter.codemods as pkg

    found: list[Family] = []
    LOAD_ERRORS.clear()
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        except Exception as exc:  # noqa: BLE001 - one broken family must not hide the others
            LOAD_ERRORS[info.name] = f"{type(exc).__name__}: {exc}"
            continue
        family = getattr(module, "FAMILY", None)
        if isinstance(family, Family):
            found.append(family)
    found.sort(key=lambda f: (f.order, f.name))
    return tuple(found)


@lru_cache(maxsize=1)
def rules() -> dict[str, Rule]:
    """Every rule by code (engine rules first), checked for uniqueness."""
    table: dict[str, Rule] = {}
    names: set[str] = set()
    for r in ENGINE_RULES + tuple(r for fam in families() for r in fam.rules):
        if not CODE_RE.match(r.code):
            raise ValueError(f"bad rule code {r.code!r}")
        if r.code in table:
            raise ValueError(f"duplicate rule code {r.code}")
        if r.name in names:
            raise ValueError(f"duplicate rule name {r.name}")
        table[r.code] = r
        names.add(r.name)
    return dict(sorted(table.items()))


def family_of(code: str) -> str:
    r = rules().get(code)
    return r.family if r else ENGINE


def family(name: str) -> Family | None:
    return next((f for f in families() if f.name == name), None)


def lookup(code_or_name: str) -> Rule | None:
    table = rules()
    key = code_or_name.strip()
    if key.upper() in table:
        return table[key.upper()]
    return next((r for r in table.values() if r.name == key), None)


# -- a finding's rule and the values it inherits from it -------------------------------------
# A finding's own ``category``/``severity``/``effort_hours`` win over its rule's; a finding whose
# code names no rule is an error-level benign site with no effort.


def rule_of(f: Finding) -> Rule | None:
    return rules().get(f.code)


def category_of(f: Finding) -> Category:
    if f.category is not None:
        return f.category
    r = rule_of(f)
    return r.category if r else Category.BENIGN


def severity_of(f: Finding) -> Severity:
    if f.severity is not None:
        return f.severity
    r = rule_of(f)
    return r.severity if r else Severity.ERROR


def effort_of(f: Finding) -> float:
    if f.effort_hours is not None:
        return f.effort_hours
    r = rule_of(f)
    return r.effort_hours if r else 0.0


def is_actionable(f: Finding) -> bool:
    """Whether a finding asks for work: every warning and error. Info-level findings (benign sites
    such as ``device="cuda"``) are inventory: ``check`` passes on them, ``apply`` does not count them
    as remaining, the patch series does not list them for a human."""
    return severity_of(f) != Severity.INFO


__all__ = [
    "ENGINE_RULES", "Applicability", "category_of", "effort_of", "families", "family", "family_of", "is_actionable",
    "lookup", "rule_of", "rules", "severity_of",
]
