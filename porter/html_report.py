"""``porter audit --format html``: one self-contained HTML file for people who would rather look
than read.

The page has no scripts and loads nothing: styles are inline and the charts are inline SVG, so it
opens the same from a CI artifact, an e-mail attachment or a file share. Every number comes from
:class:`porter.estimate.AuditSummary` (the ``summary`` of ``--format json``) and the findings
themselves, so the page and the JSON agree by construction; each chart bar carries its label and
value as ``data-label``/``data-value`` attributes so a test can compare them.

Links to source lines are ``<link base><path>#L<line>``: the caller picks the base (a path relative
to where the report is written, or the audited root's ``file://`` URI).
"""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from collections.abc import Sequence
from urllib.parse import quote

from . import __version__
from .estimate import AuditSummary, family_of, fix_level, is_blocker
from .findings import Category, Finding
from .registry import category_of, severity_of

_CLASS_COLOURS = {"replace": "#c0392b", "shim": "#d68910", "benign": "#7f8c8d"}
_FIX_COLOURS = {"safe": "#1e8449", "unsafe": "#b9770e", "manual": "#566573"}
_BAR = "#2e86c1"

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1c2833;background:#f4f6f7}
header{background:#1c2833;color:#fff;padding:18px 28px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#d5d8dc}main{padding:18px 28px;max-width:1280px}
h2{font-size:18px;margin:26px 0 10px}.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border-radius:8px;padding:12px 16px;min-width:150px;box-shadow:0 1px 2px #0002}
.card .num{display:block;font-size:26px;font-weight:600}.card .lbl{color:#566573}
.charts{display:flex;flex-wrap:wrap;gap:16px}figure{background:#fff;margin:0;padding:12px 16px;border-radius:8px;
box-shadow:0 1px 2px #0002}figcaption{font-weight:600;margin-bottom:6px}svg text{font-size:12px;fill:#1c2833}
table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 2px #0002}
th,td{padding:5px 8px;border-bottom:1px solid #e5e8e8;text-align:left;vertical-align:top}
th{background:#eaeded}td.n{text-align:right;font-variant-numeric:tabular-nums}
.replace{color:#c0392b;font-weight:600}.shim{color:#b9770e;font-weight:600}.benign{color:#7f8c8d}
details{background:#fff;border-radius:8px;margin:8px 0;padding:6px 12px;box-shadow:0 1px 2px #0002}
summary{cursor:pointer;font-weight:600}code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px}
ul.reasons li{margin:2px 0}footer{color:#566573;padding:12px 28px 28px}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def line_href(link_base: str, path: str, line: int) -> str:
    """The link to ``path`` at ``line`` (``#L<line>``, as code hosts and most viewers use)."""
    return f"{link_base}{quote(path, safe='/')}#L{line}"


def _hbar_chart(chart_id: str, title: str, items: Sequence[tuple[str, float]], colours: dict[str, str] | None = None,
                unit: str = "") -> str:
    """A horizontal bar chart as inline SVG; every bar has data-label / data-value."""
    label_w, bar_w, row_h, pad = 170, 300, 24, 6
    height = max(1, len(items)) * row_h + pad * 2
    top = max((v for _, v in items), default=0) or 1
    parts = [f'<figure id="{_e(chart_id)}"><figcaption>{_e(title)}</figcaption>',
             f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{_e(title)}" '
             f'width="{label_w + bar_w + 70}" height="{height}">']
    if not items:
        parts.append(f'<text x="0" y="{row_h}">nothing to show</text>')
    for i, (label, value) in enumerate(items):
        y = pad + i * row_h
        w = 0 if value <= 0 else max(2, round(bar_w * value / top))
        colour = (colours or {}).get(label, _BAR)
        shown = f"{value:g}{unit}"
        parts.append(f'<text x="{label_w - 6}" y="{y + 16}" text-anchor="end">{_e(label)}</text>')
        parts.append(f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{w}" height="{row_h - 8}" '
                     f'fill="{colour}" data-label="{_e(label)}" data-value="{value:g}"><title>{_e(label)}: '
                     f'{_e(shown)}</title></rect>')
        parts.append(f'<text x="{label_w + w + 6}" y="{y + 16}">{_e(shown)}</text>')
    parts.append("</svg></figure>")
    return "".join(parts)


def render_html(findings: Sequence[Finding], summary: AuditSummary, title: str, *, link_base: str = "",
                root_label: str = "") -> str:
    """The whole page. ``link_base`` is prepended to each finding's path in line links."""
    s = summary
    est = s.estimate
    fit = s.goal_fit
    out: list[str] = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<header><h1>{_e(title)}</h1><p>porter {_e(__version__)}"
        + (f" &middot; root <code>{_e(root_label)}</code>" if root_label else "") + "</p></header><main>",
    ]

    # -- summary cards
    cards = [
        ("total", s.total, "findings"),
        ("files_scanned", s.files_scanned, "files scanned"),
        ("replace", s.by_category["replace"], "replace (new code)"),
        ("shim", s.by_category["shim"], "shim (adapter)"),
        ("benign", s.by_category["benign"], "benign (unchanged)"),
        ("blockers", s.blockers_total, "blockers"),
        ("estimate", f"{est.low_days:g}–{est.high_days:g}", f"engineer-days (point {est.days:g})"),
    ]
    out.append('<section id="summary"><h2>Summary</h2><div class="cards">')
    for key, value, label in cards:
        out.append(f'<div class="card" data-key="{key}"><span class="num">{_e(value)}</span>'
                   f'<span class="lbl">{_e(label)}</span></div>')
    out.append("</div>")
    out.append(f"<p>Goal this repository fits: <b>{_e(fit.goal)}</b> (typically {_e(fit.typical_effort)}, "
               f"{_e(fit.risk)} risk); this estimate is {_e(s.versus_typical)}.</p></section>")

    # -- charts
    hours_by_family: dict[str, float] = defaultdict(float)
    for rc in s.by_rule:
        if rc.hours > 0:
            hours_by_family[rc.family] += rc.hours
    out.append('<section id="charts"><h2>Charts</h2><div class="charts">')
    out.append(_hbar_chart("chart-class", "Findings by class", [(k, v) for k, v in s.by_category.items()],
                           _CLASS_COLOURS))
    out.append(_hbar_chart("chart-fix", "Findings by fix", [(k, v) for k, v in s.by_fix.items()], _FIX_COLOURS))
    out.append(_hbar_chart("chart-family", "Findings by family",
                           sorted(s.by_family.items(), key=lambda kv: (-kv[1], kv[0]))))
    out.append(_hbar_chart("chart-hours", "Manual work by family (hours, point estimate)",
                           sorted(((k, round(v, 2)) for k, v in hours_by_family.items()),
                                  key=lambda kv: (-kv[1], kv[0])), unit=" h"))
    out.append("</div></section>")

    # -- estimate
    out.append('<section id="estimate"><h2>Estimate: how it was computed</h2><ul class="reasons">')
    out += [f"<li>{_e(r)}</li>" for r in est.reasoning]
    out.append("</ul><p>What it takes:</p><ol>")
    out += [f"<li>{_e(step)}</li>" for step in s.what_it_takes]
    out.append("</ol></section>")

    # -- per-file table
    by_file: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        by_file[f.path].append(f)
    out.append('<section id="files"><h2>Files</h2><table id="file-table"><thead><tr><th>file</th>'
               '<th>replace</th><th>shim</th><th>benign</th><th>total</th><th>blockers</th></tr></thead><tbody>')
    order = sorted(by_file, key=lambda p: (-sum(category_of(f) == Category.REPLACE for f in by_file[p]),
                                           -len(by_file[p]), p))
    for path in order:
        fs = by_file[path]
        c = Counter(category_of(f).value for f in fs)
        anchor = "f-" + quote(path, safe="")
        out.append(f'<tr data-path="{_e(path)}"><td><a class="file" href="#{_e(anchor)}">{_e(path)}</a></td>'
                   f'<td class="n">{c["replace"]}</td><td class="n">{c["shim"]}</td><td class="n">{c["benign"]}</td>'
                   f'<td class="n">{len(fs)}</td><td class="n">{sum(is_blocker(f) for f in fs)}</td></tr>')
    out.append(f'</tbody><tfoot><tr><th>total ({len(by_file)} files)</th><td class="n">{s.by_category["replace"]}'
               f'</td><td class="n">{s.by_category["shim"]}</td><td class="n">{s.by_category["benign"]}</td>'
               f'<td class="n">{s.total}</td><td class="n">{s.blockers_total}</td></tr></tfoot></table></section>')

    # -- every finding, per file, linked to its line
    out.append('<section id="findings"><h2>Findings</h2>')
    for path in order:
        fs = by_file[path]
        anchor = "f-" + quote(path, safe="")
        out.append(f'<details id="{_e(anchor)}" open><summary>{_e(path)} ({len(fs)})</summary><table>'
                   "<thead><tr><th>line</th><th>code</th><th>family</th><th>class</th><th>severity</th><th>fix</th>"
                   "<th>message</th></tr></thead><tbody>")
        for f in fs:
            cat = category_of(f).value
            out.append(f'<tr class="finding" data-code="{_e(f.code)}"><td><a class="line" '
                       f'href="{_e(line_href(link_base, f.path, f.line))}">{_e(f.path)}:{f.line}:{f.column}</a></td>'
                       f"<td><code>{_e(f.code)}</code></td><td>{_e(family_of(f))}</td>"
                       f'<td class="{cat}">{cat}</td><td>{_e(severity_of(f).value)}</td><td>{_e(fix_level(f))}</td>'
                       f"<td>{_e(f.message)}</td></tr>")
        out.append("</tbody></table></details>")
    if not findings:
        out.append("<p>porter found no CUDA lock-in here.</p>")
    out.append("</section></main>")
    out.append(f"<footer>Generated by porter {_e(__version__)}. Totals equal the <code>summary</code> of "
               f"<code>porter audit --format json</code> ({s.total} findings).</footer></body></html>")
    return "\n".join(out) + "\n"


__all__ = ["line_href", "render_html"]
