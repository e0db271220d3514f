"""The house's structure: finding lookups, the finding record and "actionable" have one home each."""

from __future__ import annotations

import subprocess
import sys

import pytest

from porter import registry
from porter.findings import Applicability, Category, Finding, Severity


def test_estimate_and_engine_do_not_import_the_renderers() -> None:
    # the lookups live in the registry: the estimator, the engine and the runner need no reporter
    code = ("import sys, porter.estimate, porter.engine, porter.runner, porter.audit_report; "
            "print('porter.reporters' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_finding_record_round_trips() -> None:
    f = Finding(code="PRT011", message="m", path="a/b.py", line=3, column=5, end_line=4, end_column=2,
                fix=Applicability.UNSAFE, fix_title="t", category=Category.SHIM, severity=Severity.INFO,
                effort_hours=0.5, data={"package": "apex"})
    assert Finding.from_dict(f.to_dict()) == f
    plain = Finding(code="PRT001", message="x")
    assert Finding.from_dict(plain.to_dict()) == plain


@pytest.mark.parametrize("damage", [{"line": "3"}, {"line": True}, {"code": 1}, {"data": [1]},
                                    {"effort_hours": "1"}, {"fix": "maybe"}])
def test_finding_record_refuses_a_damaged_entry(damage: dict[str, object]) -> None:
    d = {**Finding(code="PRT011", message="m").to_dict(), **damage}
    with pytest.raises((TypeError, ValueError)):
        Finding.from_dict(d)


def test_report_row_resolves_the_rule_values() -> None:
    from porter.reporters import REPORT_FIELDS, finding_dict

    rule = registry.rules()["PRT001"]
    row = finding_dict(Finding(code="PRT001", message="m", path="x.py"))
    assert tuple(row) == REPORT_FIELDS
    assert (row["name"], row["family"], row["severity"], row["category"]) == (
        rule.name, rule.family, rule.severity.value, rule.category.value)


def test_actionable_is_warning_or_error() -> None:
    info = next(r for r in registry.rules().values() if r.severity == Severity.INFO)
    warn = next(r for r in registry.rules().values() if r.severity == Severity.WARNING)
    assert not registry.is_actionable(Finding(code=info.code, message=""))
    assert registry.is_actionable(Finding(code=warn.code, message=""))
    assert not registry.is_actionable(Finding(code=warn.code, message="", severity=Severity.INFO))
    assert registry.is_actionable(Finding(code="PRT999", message=""))  # no such rule: an error


def test_migrate_does_not_import_the_cli() -> None:
    code = "import sys, porter.migrate; print('porter.cli' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_cli_starts_without_the_rules() -> None:
    # the format table is importable without the renderers (and so without LibCST and the families)
    code = "import sys, porter.cli; print(sorted(m for m in ('libcst', 'porter.reporters', 'porter.registry') " \
           "if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_one_format_table_serves_audit_and_check() -> None:
    from porter.cli import audit, check
    from porter.console import FORMATS, RENDERERS

    def choices(command: object) -> tuple[str, ...]:
        opt = next(p for p in command.params if p.name == "fmt")  # type: ignore[attr-defined]
        return tuple(opt.type.choices)

    assert choices(audit) == FORMATS and set(choices(check)) <= set(FORMATS)
    assert set(FORMATS) - set(RENDERERS) == {"text"}


def test_report_to_a_pipe_or_device_is_written_not_replaced(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # `porter audit -o /dev/null` replaced the device node with a regular file (as root: for everyone)
    import os
    import stat
    import threading

    from porter.console import emit

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)  # noqa: SIM115
    reader.start()
    emit('{"findings": []}\n', fifo)
    reader.join(10)
    assert got == [b'{"findings": []}\n']
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not [p for p in tmp_path.iterdir() if p.name != "pipe"]  # no temporary file left beside it
    plain = tmp_path / "report.json"
    emit("x\n", plain)
    assert plain.read_text() == "x\n"


@pytest.mark.parametrize("mixin_first", [True, False])
def test_import_depth_mixin_counts_in_either_base_order(mixin_first: bool) -> None:
    import libcst as cst

    from porter.pycst import ImportDepthMixin, PyVisitor

    bases = (ImportDepthMixin, PyVisitor) if mixin_first else (PyVisitor, ImportDepthMixin)

    class Names(*bases):  # type: ignore[misc]
        def __init__(self) -> None:
            cst.BatchableCSTVisitor.__init__(self)
            self.seen: list[tuple[str, int]] = []

        def visit_Name(self, node: cst.Name) -> None:
            self.seen.append((node.value, self.in_import))

    v = Names()
    cst.MetadataWrapper(cst.parse_module("import a\nfrom b import c\nd = a\n")).visit_batched([v])
    assert v.seen == [("a", 1), ("b", 1), ("c", 1), ("d", 0), ("a", 0)]


def test_porters_own_modules_are_never_imported_behind_an_import_error_fallback() -> None:
    """A renamed or missing module of porter's must fail loudly: behind ``except ImportError`` a
    rename silently dropped the Hugging Face attention facts, the pins or the semantic gate's check."""
    import ast
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    offenders = []
    for folder in ("porter", "codemods", "hipify_wrappers"):
        for path in sorted((repo / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Try):
                    continue
                catches = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
                if not catches & {"ImportError", "ModuleNotFoundError", "(ImportError, AttributeError)"}:
                    continue
                for stmt in node.body:
                    own = (isinstance(stmt, ast.ImportFrom) and (stmt.level > 0 or (stmt.module or "").startswith("porter"))
                           or isinstance(stmt, ast.Import) and any(a.name.startswith("porter") for a in stmt.names))
                    if own:
                        offenders.append(f"{path.relative_to(repo)}:{stmt.lineno}")
    assert offenders == []
