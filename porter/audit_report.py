"""Human-readable renderings of the audit summary: the text block ``porter audit`` prints at the
end, and a Markdown report a team lead can forward.

Every number in both renderings comes from :class:`porter.estimate.AuditSummary`, the same
object ``porter audit --format json`` serialises, so the totals agree by construction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from .estimate import AuditSummary, directory_of, fix_level, is_blocker
from .findings import Category, Finding
from .registry import category_of, effort_of

_CLASS_TEXT = {
    "benign": "benign (runs unchanged on ROCm)",
    "shim": "shim (needs an adapter)",
    "replace": "replace (needs new code)",
}


def _fmt_hours(h: float) -> str:
    return f"{h:g} h"


def render_text_summary(summary: AuditSummary) -> str:
    """Plain text (no markup) for the end of ``porter audit``'s text output."""
    s = summary
    est = s.estimate
    lines = [
        "Audit summary",
        f"  {s.total} finding(s) in {s.files_scanned} file(s) scanned",
        "  by class:    " + ", ".join(f"{k} {v}" for k, v in s.by_category.items()),
        "  by fix:      " + ", ".join(f"{k} {v}" for k, v in s.by_fix.items())
        + f"  (safe: `porter apply`; unsafe: --unsafe-fixes; manual: no fix, {s.manual_work_sites} of them "
        "need work, the rest is benign inventory)",
        "  by family:   " + (", ".join(f"{k} {v}" for k, v in s.by_family.items()) or "-"),
        f"  blockers:    {s.blockers_total} shim/replace site(s) without a safe fix",
    ]
    for b in s.top_blockers[:5]:
        lines.append(f"    {b.path}:{b.line}:{b.column} {b.code} [{b.category}, {b.effort_hours:g} h] {b.message}")
    if s.blockers_total > 5:
        lines.append(f"    ... and {s.blockers_total - 5} more (see --format markdown)")
    fit = s.goal_fit
    lines += [
        f"  estimate:    {est.low_days:g}-{est.high_days:g} engineer-day(s) (point {est.days:g}; "
        f"{round(est.total_hours, 1):g} h at {est.hours_per_day:g} h/day)",
    ]
    lines += [f"    - {r}" for r in est.reasoning]
    lines += [
        f"  goal:        {fit.goal} (typically {fit.typical_effort}, {fit.risk} risk)",
        f"    this estimate is {s.versus_typical}",
    ]
    lines += [f"    evidence: {e}" for e in fit.evidence]
    lines.append("  what it takes:")
    lines += [f"    {i}. {step}" for i, step in enumerate(s.what_it_takes, 1)]
    return "\n".join(lines) + "\n"


class _Raw(str):
    """A table cell that is already Markdown (a link): not escaped."""


def _cell(text: str) -> str:
    """Table-cell text: pipes, brackets and backslashes escaped, line breaks flattened (file names are
    the target's: they must not open a link or a column)."""
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")
    parts = text.split("`")  # brackets inside `code spans` stay as they are (no escapes apply there)
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("[", "\\[").replace("]", "\\]")
    return "`".join(parts)


def md_link(path: str, line: int, label: str | None = None) -> str:
    """A Markdown link to ``path#Lline`` that a hostile file name cannot break out of: the target is
    percent-encoded, the label escaped (``]``, ``|``, backslashes, line breaks)."""
    from urllib.parse import quote

    text = _cell(label if label is not None else f"{path}:{line}")
    return f"[{text}]({quote(path, safe='/')}#L{line})"


def _link(path: str, line: int) -> _Raw:
    return _Raw(md_link(path, line))


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        cells = [str(c) if isinstance(c, _Raw) else _cell(str(c)) for c in row]
        assert len(cells) == len(header)
        out.append("| " + " | ".join(cells) + " |")
    return out


def render_markdown(findings: Sequence[Finding], summary: AuditSummary, title: str) -> str:
    """A self-contained Markdown report: summary, tables per class and per directory, every
    blocker with a relative ``path#Lline`` link, and what porter automates vs what stays manual."""
    s = summary
    est = s.estimate
    fit = s.goal_fit
    lines: list[str] = [f"# {_cell(title)}", ""]
    lines += [
        "## Summary",
        "",
        f"- **Findings:** {s.total} in {s.files_scanned} file(s) scanned",
        f"- **Blockers:** {s.blockers_total} (shim/replace sites without a safe fix)",
        f"- **Estimate:** {est.low_days:g}-{est.high_days:g} engineer-days (point {est.days:g}, "
        f"{round(est.total_hours, 1):g} h at {est.hours_per_day:g} focused h/day)",
        f"- **Goal this repository fits:** {fit.goal} (typically {fit.typical_effort}, {fit.risk} risk); "
        f"this estimate is {s.versus_typical}",
        "",
    ]
    lines += _table(
        ["class", "findings", "meaning"],
        [[k, v, _CLASS_TEXT[k]] for k, v in s.by_category.items()] + [["**total**", s.total, ""]],
    )
    lines += [""]
    lines += _table(
        ["fix", "findings", "who"],
        [["safe", s.by_fix["safe"], "porter apply"], ["unsafe", s.by_fix["unsafe"], "porter apply --unsafe-fixes, then review"],
         ["manual", s.by_fix["manual"], f"no fix: {s.manual_work_sites} need an engineer, the rest is inventory"], ["**total**", sum(s.by_fix.values()), ""]],
    )
    lines += ["", "### Estimate: how it was computed", ""]
    lines += [f"- {r}" for r in est.reasoning]
    lines += ["", "### Which goal, and what it would take", ""]
    lines += _table(
        ["goal", "typical effort", "risk", "this repo", "evidence"],
        [[g.goal, g.typical_effort, g.risk, "**yes**" if g.matched else "no", "; ".join(g.evidence) or "-"]
         for g in s.goals],
    )
    lines += [""]
    lines += [f"{i}. {_cell(step)}" for i, step in enumerate(s.what_it_takes, 1)]

    # per class: rules
    lines += ["", "## Findings by class", ""]
    for cat in Category:
        count = s.by_category[cat.value]
        lines += [f"### {cat.value} ({count})", ""]
        if not count:
            lines += ["None.", ""]
            continue
        # findings whose own category overrides the rule's are grouped by their own class
        per_code: dict[str, list[Finding]] = defaultdict(list)
        for f in findings:
            if category_of(f) == cat:
                per_code[f.code].append(f)
        names = {rc.code: (rc.name, rc.family) for rc in s.by_rule}
        table_rows = []
        for code in sorted(per_code, key=lambda c: (-len(per_code[c]), c)):
            fs = per_code[code]
            name, fam = names.get(code, (code, ""))
            manual_h = sum(effort_of(f) for f in fs if fix_level(f) == "manual" and code != "PRT870")
            if code == "PRT870":
                manual_h = est.kernel_file_hours
            table_rows.append([code, name, fam, len(fs), sum(fix_level(f) == "safe" for f in fs),
                               sum(fix_level(f) == "unsafe" for f in fs), sum(fix_level(f) == "manual" for f in fs),
                               f"{manual_h:g}"])
        lines += _table(["code", "rule", "family", "findings", "safe", "unsafe", "manual", "hours"], table_rows)
        lines += [""]

    # per directory
    lines += ["## Findings by directory", ""]
    dirs: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        dirs[directory_of(f.path)].append(f)
    dir_rows = []
    for d in sorted(dirs):
        fs = dirs[d]
        c = {cat.value: sum(category_of(f) == cat for f in fs) for cat in Category}
        dir_rows.append([d, c["benign"], c["shim"], c["replace"], len(fs), sum(is_blocker(f) for f in fs)])
    dir_rows.append(["**total**", s.by_category["benign"], s.by_category["shim"], s.by_category["replace"], s.total,
                     s.blockers_total])
    lines += _table(["directory", "benign", "shim", "replace", "total", "blockers"], dir_rows)

    # every blocker
    lines += ["", f"## Blockers ({s.blockers_total})", ""]
    blockers = [f for f in findings if is_blocker(f)]
    blockers.sort(key=lambda f: ({Category.REPLACE: 0, Category.SHIM: 1}.get(category_of(f), 2), f.path, f.line,
                                 f.column, f.code))
    if blockers:
        lines += _table(
            ["location", "code", "class", "hours", "fix", "what to do"],
            [[_link(f.path, f.line), f.code, category_of(f).value, f"{effort_of(f):g}", fix_level(f), f.message]
             for f in blockers],
        )
    else:
        lines += ["None: nothing stands between this repository and ROCm beyond the automatic fixes."]

    # automatic vs manual
    lines += ["", "## What porter does automatically, and what stays manual", ""]
    auto = [rc for rc in sorted(s.by_rule, key=lambda r: r.code) if rc.safe or rc.unsafe]
    if auto:
        lines += _table(
            ["code", "rule", "safe (porter apply)", "unsafe (--unsafe-fixes)"],
            [[rc.code, rc.name, rc.safe, rc.unsafe] for rc in auto],
        )
    else:
        lines += ["porter has no automatic fix for any finding here."]
    lines += [""]
    manual = [rc for rc in s.by_rule if rc.manual]
    if manual:
        lines += _table(
            ["code", "rule", "class", "manual sites", "hours"],
            [[rc.code, rc.name, rc.category, rc.manual,
              f"{(est.kernel_file_hours if rc.code == 'PRT870' else rc.hours):g}"] for rc in manual],
        )
    lines += ["", f"_Generated by porter. Totals here equal the `summary` of `porter audit --format json` "
              f"({s.total} findings)._", ""]
    return "\n".join(lines)


__all__ = ["render_markdown", "render_text_summary"]
