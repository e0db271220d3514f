"""The findings model: rules, findings, edits.

Everything here is plain data (picklable) so findings can cross process boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any


class Category(str, Enum):
    """The porting classes of a CUDA-surface site: how much work it takes on ROCm."""

    BENIGN = "benign"  # works unchanged on ROCm PyTorch
    SHIM = "shim"  # needs an adapter (telemetry, nvtx, vendor checks...)
    REPLACE = "replace"  # needs new code (kernels, CUDA-only packages...)


class Applicability(str, Enum):
    """How safe porter's fix for a finding is (Ruff's levels)."""

    SAFE = "safe"  # exact under conditions porter checked; applied by `porter apply`
    UNSAFE = "unsafe"  # an approximation; applied only with --unsafe-fixes
    NONE = "none"  # no automatic fix: manual work

    @property
    def rank(self) -> int:
        return {"safe": 2, "unsafe": 1, "none": 0}[self.value]


class Severity(str, Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Rule:
    """A rule's identity and documentation. Codes are stable forever once released."""

    code: str  # e.g. "PRT011"
    name: str  # kebab-case, e.g. "flash-attn-import"
    family: str  # owning family name, e.g. "packages"
    summary: str  # one line: what the rule finds
    category: Category
    severity: Severity = Severity.WARNING
    fix: Applicability = Applicability.NONE  # the best fix this rule can offer
    effort_hours: float = 0.0  # manual effort per site when no fix is applied
    explanation: str = ""  # Markdown: why it matters on ROCm and what to do
    example: str = ""  # Markdown code sample(s)
    default: bool = True  # enabled without an explicit --select

    def markdown(self) -> str:
        parts = [f"# {self.code} `{self.name}`", "", self.summary, ""]
        parts += [
            f"- **Class:** {self.category.value}",
            f"- **Severity:** {self.severity.value}",
            f"- **Fix:** {self.fix.value}",
            f"- **Effort per site (manual):** {self.effort_hours:g} h",
            f"- **Family:** {self.family}",
            "",
        ]
        if self.explanation:
            parts += ["## Why and what to do", "", self.explanation.strip(), ""]
        if self.example:
            parts += ["## Example", "", self.example.strip(), ""]
        return "\n".join(parts).rstrip() + "\n"


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` (offsets in the decoded text, in characters)."""

    start: int
    end: int
    text: str


@dataclass
class Finding:
    """One reported site. Lines are 1-based; columns are 1-based character columns."""

    code: str
    message: str
    path: str = ""  # relative to the root, '/'-separated
    line: int = 1
    column: int = 1
    end_line: int = 1
    end_column: int = 1
    fix: Applicability = Applicability.NONE
    fix_title: str = ""
    edits: tuple[Edit, ...] = ()
    # Import bookkeeping the engine performs after applying this finding's edits
    # (Python only): statements to add if missing, qualified names whose imports
    # become removable when nothing references them any more.
    add_imports: tuple[str, ...] = ()
    remove_imports: tuple[str, ...] = ()
    # Files this fix creates (relative path, text), e.g. a portable header; an existing
    # file of that name is kept as it is.
    new_files: tuple[tuple[str, str], ...] = ()
    # Requirements the fixed code needs beyond what porter.apis knows from the emitted names
    # ("torch>=2.5"); the semantic gate checks them against the nearest manifest's pins.
    requires: tuple[str, ...] = ()
    category: Category | None = None  # overrides the rule's class when set
    severity: Severity | None = None
    # A generic finding (e.g. "use of a CUDA-only package") is dropped when a more
    # specific finding covers the same range.
    generic: bool = False
    effort_hours: float | None = None  # overrides the rule's per-site effort
    data: dict[str, Any] = field(default_factory=dict)

    def with_path(self, path: str) -> Finding:
        return replace(self, path=path)

    @property
    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.path, self.line, self.column, self.code)

    # -- (de)serialisation: the one plain-data record of a finding (audit cache, reports) ----------
    # Edits, import bookkeeping and new files are not part of it: a finding read back is a report
    # of a site, never a fix to apply.

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code, "message": self.message, "path": self.path, "line": self.line,
            "column": self.column, "end_line": self.end_line, "end_column": self.end_column,
            "fix": self.fix.value, "fix_title": self.fix_title,
            "category": self.category.value if self.category else None,
            "severity": self.severity.value if self.severity else None,
            "effort_hours": self.effort_hours, "data": self.data,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        """The finding :meth:`to_dict` wrote; ``TypeError``/``ValueError``/``KeyError`` when ``d`` is
        not such a record (a damaged or forged cache entry)."""
        for key in ("code", "message", "path"):
            if not isinstance(d[key], str):
                raise TypeError(key)
        for key in ("line", "column", "end_line", "end_column"):
            if not isinstance(d[key], int) or isinstance(d[key], bool):
                raise TypeError(key)
        effort = d.get("effort_hours")
        if effort is not None and (not isinstance(effort, (int, float)) or isinstance(effort, bool)):
            raise TypeError("effort_hours")
        data = d.get("data") or {}
        if not isinstance(data, dict):
            raise TypeError("data")
        return cls(
            code=d["code"], message=d["message"], path=d["path"], line=d["line"], column=d["column"],
            end_line=d["end_line"], end_column=d["end_column"], fix=Applicability(d["fix"]),
            fix_title=str(d.get("fix_title", "")),
            category=Category(d["category"]) if d.get("category") else None,
            severity=Severity(d["severity"]) if d.get("severity") else None,
            effort_hours=effort, data=data,
        )
