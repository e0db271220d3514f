"""porter.audit_report: the text summary and the Markdown report (well-formed, totals = JSON)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cli_helpers import run_porter

from porter.audit_report import render_markdown, render_text_summary
from porter.estimate import summarize
from porter.findings import Applicability, Category, Finding

_SPLIT = re.compile(r"(?<!\\)\|")


def _tables(md: str) -> list[list[list[str]]]:
    """Every pipe table in ``md`` as rows of cells (escaped pipes stay inside a cell)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in md.splitlines():
        if line.startswith("|"):
            assert line.endswith("|"), line
            current.append([c.strip() for c in _SPLIT.split(line)[1:-1]])
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def _check_well_formed(md: str) -> list[list[list[str]]]:
    tables = _tables(md)
    for t in tables:
        width = len(t[0])
        assert all(len(row) == width for row in t), t
        assert all(re.fullmatch(r"-{3,}", c) for c in t[1]), t[1]
    lines = md.splitlines()
    for i, line in enumerate(lines):  # a table starts after a blank line (GFM needs it)
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            assert i > 0 and lines[i - 1] == "", f"table at line {i + 1} not preceded by a blank line"
    return tables


def _table_with(tables: list[list[list[str]]], first_header: str) -> list[list[str]]:
    return next(t for t in tables if t[0][0] == first_header)


FINDINGS = [
    Finding("PRT011", "import of flash-attn | with a pipe", "pkg/model.py", 1, 8, data={"package": "flash-attn"}),
    Finding("PRT030", 'attn_implementation="flash_attention_2"', "pkg/model.py", 4, 20, fix=Applicability.SAFE),
    Finding("PRT049", "torch.cuda.amp", "train.py", 3, 1, fix=Applicability.UNSAFE),
    Finding("PRT041", "device string", "train.py", 5, 1),
    Finding("PRT045", "CUDA_VISIBLE_DEVICES", "dir with space/run (1).py", 2, 1),
    Finding("PRT870", "CUDA source file", "csrc/k.cu", 1, 1),
    Finding("PRT871", "__global__ kernel k", "csrc/k.cu", 7, 17),
    Finding("PRT020", "use", "pkg/model.py", 9, 1, category=Category.SHIM),
]


def test_markdown_well_formed_and_totals() -> None:
    s = summarize(FINDINGS, files_scanned=4)
    md = render_markdown(FINDINGS, s, "porter audit: demo")
    tables = _check_well_formed(md)
    for heading in ("# porter audit: demo", "## Summary", "## Findings by class", "## Findings by directory",
                    "## Blockers (", "## What porter does automatically, and what stays manual"):
        assert any(line.startswith(heading) for line in md.splitlines()), heading
    classes = _table_with(tables, "class")
    assert {r[0]: int(r[1]) for r in classes[2:-1]} == s.by_category
    assert classes[-1][1] == str(s.total) == str(len(FINDINGS))
    fixes = _table_with(tables, "fix")
    assert {r[0]: int(r[1]) for r in fixes[2:-1]} == s.by_fix
    dirs = _table_with(tables, "directory")
    total_row = dirs[-1]
    body = dirs[2:-1]
    for i, key in enumerate(("benign", "shim", "replace"), start=1):
        assert int(total_row[i]) == s.by_category[key] == sum(int(r[i]) for r in body)
    assert int(total_row[4]) == s.total == sum(int(r[4]) for r in body)
    assert int(total_row[5]) == s.blockers_total
    blockers = _table_with(tables, "location")
    assert len(blockers) - 2 == s.blockers_total
    # per-class tables add up to the class counts
    per_class = [t for t in tables if t[0][0] == "code" and t[0][1] == "rule" and t[0][2] == "family"]
    assert sum(int(r[3]) for t in per_class for r in t[2:]) == s.total
    # relative links with #L anchors, spaces escaped, pipes escaped in messages
    assert "[dir with space/run (1).py:2](dir%20with%20space/run%20%281%29.py#L2)" in md
    assert "[csrc/k.cu:7](csrc/k.cu#L7)" in md
    assert "flash-attn \\| with a pipe" in md


def test_markdown_without_findings() -> None:
    s = summarize([], files_scanned=1)
    md = render_markdown([], s, "empty")
    _check_well_formed(md)
    assert "## Blockers (0)" in md


def test_text_summary_is_plain() -> None:
    s = summarize(FINDINGS, files_scanned=4)
    text = render_text_summary(s)
    assert text.startswith("Audit summary")
    assert not re.search(r"\[/?(bold|red|green|yellow|dim|link)", text)
    assert f"{s.total} finding(s) in 4 file(s)" in text
    assert f"{s.estimate.low_days:g}-{s.estimate.high_days:g} engineer-day(s)" in text
    assert s.goal_fit.goal in text


def test_cli_markdown_totals_equal_json(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "csrc").mkdir()
    (root / "pkg" / "model.py").write_text(
        "import torch\nimport flash_attn\nfrom transformers import AutoModel\n"
        "m = AutoModel.from_pretrained('x', attn_implementation='flash_attention_2').cuda()\n"
        "opt = torch.optim.AdamW(m.parameters())\n", encoding="utf-8")
    (root / "csrc" / "k.cu").write_text("__global__ void k(float* x) { x[threadIdx.x] = 0; }\n", encoding="utf-8")
    (root / "requirements.txt").write_text("flash-attn==2.5.0\n", encoding="utf-8")
    js = run_porter("audit", "--format", "json", "--no-cache", str(root))
    assert js.returncode == 0, js.stderr.decode()
    doc = json.loads(js.stdout)
    md_proc = run_porter("audit", "--format", "markdown", "--no-cache", str(root))
    assert md_proc.returncode == 0, md_proc.stderr.decode()
    md = md_proc.stdout.decode()
    tables = _check_well_formed(md)
    summary = doc["summary"]
    assert summary["total"] == len(doc["findings"]) == doc["counts"]["total"]
    assert summary["by_category"] == doc["counts"]["by_category"]
    classes = _table_with(tables, "class")
    assert {r[0]: int(r[1]) for r in classes[2:-1]} == summary["by_category"]
    assert int(classes[-1][1]) == summary["total"]
    blockers = _table_with(tables, "location")
    assert len(blockers) - 2 == summary["blockers_total"]
    assert summary["goal"] == "bespoke"
    text = run_porter("audit", "--no-cache", str(root)).stdout.decode()
    assert "Audit summary" in text and "engineer-day" in text


def test_markdown_links_cannot_be_broken_by_a_file_name() -> None:
    """A target's file name like `a](https://evil)` must not inject a link into reports a lead reads."""
    from porter.audit_report import md_link
    from porter.findings import Finding
    from porter.reporters import render_markdown

    hostile = "x](https://evil.example)/y [z].py"
    link = md_link(hostile, 7)
    import re

    unescaped = re.compile(r"(?<!\\)\]\(https://evil")  # a `](` that Markdown would read as a link
    assert not unescaped.search(link) and link.endswith("#L7)")
    assert "%5D%28https%3A//evil.example%29" in link
    text = render_markdown([Finding(code="PRT011", message="m", path=hostile, line=7)], files_scanned=1)
    assert not unescaped.search(text)
