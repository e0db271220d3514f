"""Reporters: text (rich, grouped), concise, JSON, SARIF 2.1.0, Markdown, GitHub annotations."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import __version__, registry
from .findings import Applicability, Category, Finding, Rule, Severity
from .registry import category_of, effort_of, rule_of, severity_of
from .textio import read_bounded

INFO_URI = "https://pypi.org/project/porter-rocm/"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``): file names and the source text
    quoted in messages come from the target, and must not move the cursor, recolour or forge lines."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _gh_property(value: str) -> str:
    return (value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
            .replace(":", "%3A").replace(",", "%2C"))


# the fields of a finding in the JSON report, in order: its record (Finding.to_dict) with the
# values it inherits from its rule resolved, plus the rule's name and family
REPORT_FIELDS = ("code", "name", "family", "path", "line", "column", "end_line", "end_column", "category",
                 "severity", "message", "fix", "fix_title", "effort_hours")


def finding_dict(f: Finding) -> dict[str, Any]:
    r = rule_of(f)
    record = replace(f, category=category_of(f), severity=severity_of(f), effort_hours=effort_of(f)).to_dict()
    record.update(name=r.name if r else f.code, family=r.family if r else "engine")
    return {key: record[key] for key in REPORT_FIELDS}


def counts(findings: Sequence[Finding]) -> dict[str, Any]:
    return {
        "total": len(findings),
        "by_category": {c.value: sum(1 for f in findings if category_of(f) == c) for c in Category},
        "by_fix": {a.value: sum(1 for f in findings if f.fix == a) for a in Applicability},
        "by_severity": {s.value: sum(1 for f in findings if severity_of(f) == s) for s in Severity},
        "by_code": dict(sorted(Counter(f.code for f in findings).items())),
    }


def summary_dict(findings: Sequence[Finding], files_scanned: int) -> dict[str, Any] | None:
    from .estimate import summarize

    return summarize(list(findings), files_scanned=files_scanned).to_dict()


def render_json(findings: Sequence[Finding], *, root: str = "", files_scanned: int = 0,
                fixed: Sequence[Finding] = (), extra: dict[str, Any] | None = None) -> str:
    doc: dict[str, Any] = {
        "tool": "porter",
        "version": __version__,
        "root": root,
        "files_scanned": files_scanned,
        "findings": [finding_dict(f) for f in findings],
        "counts": counts(findings),
    }
    if fixed:
        doc["fixed"] = [finding_dict(f) for f in fixed]
    summary = summary_dict(findings, files_scanned)
    if summary is not None:
        doc["summary"] = summary
    if extra:
        doc.update(extra)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


# -- SARIF ----------------------------------------------------------------------------------

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_PROBLEM = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "recommendation"}


def _sarif_rule(r: Rule) -> dict[str, Any]:
    help_md = r.markdown()
    return {
        "id": r.code,
        "name": r.name,
        "shortDescription": {"text": r.summary},
        "fullDescription": {"text": (r.explanation or r.summary).strip()},
        "help": {"text": help_md, "markdown": help_md},
        "helpUri": f"{INFO_URI}#{r.code.lower()}",
        "defaultConfiguration": {"level": _LEVEL[r.severity]},
        "properties": {
            "tags": ["rocm", "portability", r.family, r.category.value],
            "precision": "high",
            "problem.severity": _PROBLEM[r.severity],
        },
    }


def _region(line: int, col: int, end_line: int, end_col: int) -> dict[str, int]:
    end_line = max(end_line, line)
    if end_line == line and end_col <= col:
        end_col = col + 1
    return {"startLine": line, "startColumn": col, "endLine": end_line, "endColumn": end_col}


def _offset_pos(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    start = text.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


def render_sarif(findings: Sequence[Finding], *, root: Path | None = None) -> str:
    table = registry.rules()
    used = sorted({f.code for f in findings if f.code in table})
    index = {code: i for i, code in enumerate(used)}
    texts: dict[str, str | None] = {}
    fingerprints = _Fingerprints(root)
    results = []
    for f in findings:
        r = table.get(f.code)
        result: dict[str, Any] = {
            "ruleId": f.code,
            "level": _LEVEL[severity_of(f)],
            "message": {"text": f.message},
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(f.path), "uriBaseId": "%SRCROOT%"},
                    "region": _region(f.line, f.column, f.end_line, f.end_column),
                }
            }],
            "partialFingerprints": {"primaryLocationLineHash": fingerprints.next(f)},
            "properties": {"category": category_of(f).value, "fix": f.fix.value},
        }
        if r is not None:
            result["ruleIndex"] = index[f.code]
        if f.edits and root is not None:
            if f.path not in texts:
                try:
                    # never through a symlink swapped in since the analysis, never unbounded
                    texts[f.path] = read_bounded(root / f.path, 256 * 1024 * 1024).decode("utf-8")
                except (OSError, UnicodeDecodeError):
                    texts[f.path] = None
            text = texts[f.path]
            if text is not None:
                replacements = []
                for e in f.edits:
                    sl, sc = _offset_pos(text, e.start)
                    el, ec = _offset_pos(text, e.end)
                    replacements.append({
                        "deletedRegion": {"startLine": sl, "startColumn": sc, "endLine": el, "endColumn": ec},
                        "insertedContent": {"text": e.text},
                    })
                result["fixes"] = [{
                    "description": {"text": f.fix_title or f"porter {f.fix.value} fix"},
                    "artifactChanges": [{"artifactLocation": {"uri": _uri(f.path), "uriBaseId": "%SRCROOT%"},
                                         "replacements": replacements}],
                }]
        results.append(result)
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "porter",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFO_URI,
                "rules": [_sarif_rule(table[c]) for c in used],
            }},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": (root.resolve().as_uri() + "/") if root else "file:///"}},
            "results": results,
        }],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


class _Fingerprints:
    """``primaryLocationLineHash`` values that identify a site, not a message.

    The hash covers the rule, the file and the finding's source line with all whitespace removed
    (so re-indenting or moving the code keeps the alert); ``:N`` is the occurrence of that hash in
    the file (the N-th identical line carrying the same finding), as GitHub's own fingerprints do.
    When the file cannot be read (stdin, a removed file) the line number stands in for the content.
    """

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.lines: dict[str, list[str] | None] = {}
        self.seen: Counter[str] = Counter()

    def _line(self, path: str, line: int) -> str | None:
        if path not in self.lines:
            lines = None
            if self.root is not None:
                try:  # bounded, never through a symlink, never a FIFO's endless wait (PRT005 reports one)
                    lines = read_bounded(self.root / path, 256 * 1024 * 1024).decode("utf-8", "replace").splitlines()
                except OSError:
                    lines = None
            self.lines[path] = lines
        lines = self.lines[path]
        if lines is None or not 1 <= line <= len(lines):
            return None
        return "".join(lines[line - 1].split())

    def next(self, f: Finding) -> str:
        content = self._line(f.path, f.line)
        site = content if content is not None else f"line {f.line}"
        digest = hashlib.sha256(f"{f.code}\0{f.path}\0{site}".encode()).hexdigest()[:16]
        self.seen[digest] += 1
        return f"{digest}:{self.seen[digest]}"


def _uri(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/")


# -- text -----------------------------------------------------------------------------------

_MARK = {Applicability.SAFE: "[*]", Applicability.UNSAFE: "[~]", Applicability.NONE: ""}


def render_concise(findings: Sequence[Finding]) -> str:
    lines = []
    for f in findings:
        mark = _MARK[f.fix]
        lines.append(f"{printable(f.path)}:{f.line}:{f.column}: {f.code}{' ' + mark if mark else ''} "
                     f"{printable(f.message)}")
    return "\n".join(lines) + ("\n" if lines else "")


def render_github(findings: Sequence[Finding]) -> str:
    out = []
    for f in findings:
        level = {"error": "error", "warning": "warning", "info": "notice"}[severity_of(f).value]
        msg = f.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        out.append(f"::{level} title=porter ({f.code}),file={_gh_property(f.path)},line={f.line},col={f.column},"
                   f"endLine={f.end_line},endColumn={f.end_column}::{f.code} {msg}")
    return "\n".join(out) + ("\n" if out else "")


def print_text(findings: Sequence[Finding], console: Any, *, files_scanned: int = 0, show_summary: bool = True,
               unsafe_hint: bool = True, audit_summary: bool = False) -> None:
    """Grouped, coloured output (colour only on a terminal) plus a summary."""
    from rich.markup import escape

    by_file: dict[str, list[Finding]] = {}
    for f in findings:
        by_file.setdefault(f.path, []).append(f)
    style = {Category.REPLACE: "bold red", Category.SHIM: "yellow", Category.BENIGN: "dim"}
    for path, items in by_file.items():
        console.print(f"[bold]{escape(printable(path))}[/bold]")
        for f in items:
            mark = _MARK[f.fix]
            cat = category_of(f)
            console.print(
                f"  {f.line}:{f.column}  [{style[cat]}]{f.code}[/{style[cat]}] "
                f"{'[green]' + escape(mark) + '[/green] ' if mark else ''}{escape(printable(f.message))} "
                f"[dim]({cat.value})[/dim]",
                highlight=False,
            )
    if not show_summary:
        return
    c = counts(findings)
    cats = c["by_category"]
    console.print(
        f"\n{c['total']} finding(s) in {len(by_file)} file(s) of {files_scanned} scanned: "
        f"[red]{cats['replace']} replace[/red], [yellow]{cats['shim']} shim[/yellow], {cats['benign']} benign.",
        highlight=False,
    )
    fixes = c["by_fix"]
    if fixes["safe"] or fixes["unsafe"]:
        console.print(
            f"[green]{fixes['safe']} fixable[/green] with `porter apply`"
            + (f"; {fixes['unsafe']} more with `porter apply --unsafe-fixes`" if fixes["unsafe"] and unsafe_hint
               else "") + ".",
            highlight=False,
        )
    if audit_summary:
        from .audit_report import render_text_summary
        from .estimate import summarize

        console.print(escape(render_text_summary(summarize(list(findings), files_scanned=files_scanned))),
                      highlight=False)


def render_markdown(findings: Sequence[Finding], *, title: str = "porter audit", files_scanned: int = 0) -> str:
    from .audit_report import render_markdown as audit_markdown
    from .estimate import summarize

    return audit_markdown(list(findings), summarize(list(findings), files_scanned=files_scanned), title)
