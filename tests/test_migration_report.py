"""MIGRATION.md as a lead reads it (issue 16): flagged sites grouped by rule with the per-site rows
collapsed, Mermaid charts GitHub renders, which tree the line numbers refer to, and patch names
that say what a family's later pass does. Checked on the committed example, which
tests/test_migrate_example.py keeps identical to what `porter migrate` writes today."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "examples" / "legacy-gpt-migration"


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n## ", start + len(heading))
    return text[start: nxt if nxt != -1 else len(text)]


def test_flagged_sites_grouped_by_rule_with_rows_collapsed() -> None:
    text = (COMMITTED / "MIGRATION.md").read_text(encoding="utf-8")
    total = int(re.search(r"(\d+) site\(s\) still need a human", text).group(1))
    section = _section(text, "## Flagged sites (need a human)")
    assert "refer to the tree **after** the patch series" in section
    grouped, _, details = section.partition("<details>")
    rows = [line for line in grouped.splitlines() if line.startswith("| PRT")]
    assert rows and sum(int(line.split(" | ")[2]) for line in rows) == total
    assert len({line.split(" | ")[0] for line in rows}) == len(rows)  # one row per rule
    assert all("](" in line.split(" | ")[3] for line in rows)  # an example site, linked
    assert details.startswith(f"<summary>All {total} flagged site(s)</summary>")
    assert len([line for line in details.splitlines() if line.startswith("| [")]) == total
    assert "</details>" in details


def test_rewrites_say_which_tree_and_are_collapsed() -> None:
    text = (COMMITTED / "MIGRATION.md").read_text(encoding="utf-8")
    section = _section(text, "## Rewrites")
    assert "refer to the **original** tree" in section
    assert "<details><summary>All " in section and "`0002-attention.patch`" in section


def test_mermaid_charts() -> None:
    text = (COMMITTED / "MIGRATION.md").read_text(encoding="utf-8")
    charts = re.findall(r"```mermaid\n(.*?)```", text, re.S)
    assert len(charts) == 2
    family, classes = charts
    assert family.startswith("pie showData title Work left by family")
    assert '"kernels" :' in family and '"setup" :' in family
    values = [float(v) for v in re.findall(r'" : ([\d.]+)', family)]
    point = float(re.search(r"point estimate [\d.]+: ([\d.]+) h", text).group(1))
    assert abs(sum(values) - point) < 0.5
    after = re.search(r"\| after \| (\d+) \| (\d+) \| (\d+) \|", text)
    assert [int(v) for v in re.findall(r'" : (\d+)', classes)] == [int(after.group(i)) for i in (1, 2, 3)]


def test_later_pass_patches_are_named_after_what_they_do() -> None:
    """A family that runs again on what later families changed gets a patch named after its rules."""
    from porter import registry
    from porter.config import Settings
    from porter.engine import Stage
    from porter.findings import Finding
    from porter.framework import RepoFacts
    from porter.runner import FileResult, RunResult
    from porter.textio import decode

    registry.check_loaded()
    names = sorted(p.name for p in COMMITTED.glob("[0-9][0-9][0-9][0-9]-*.patch"))
    assert names and not any(re.search(r"-\d+\.patch$", n) for n in names), names
    text = "torch==2.1.0\n"
    fr = FileResult("requirements.txt", "requirements", decoded=decode(text.encode(), python=False))
    fr.stages = [
        Stage("dependencies", 0, text, "torch>=2.5\n", [Finding(code="PRT801", message="pin", path=fr.relpath)]),
        Stage("dependencies", 1, "torch>=2.5\n", "--index-url x\ntorch>=2.5\n",
              [Finding(code="PRT800", message="index", path=fr.relpath)]),
    ]
    series = RunResult(Path("."), [fr], [], Settings(), RepoFacts()).series()
    files = series.file_names()
    assert files[0] == "0001-dependencies.patch"
    assert files[1].startswith("0002-dependencies-") and not re.search(r"-\d+\.patch$", files[1]), files
    rule = registry.rules()["PRT800"].name
    assert rule in files[1] and f"pass 2: {rule}" in series.nonempty()[1].title
