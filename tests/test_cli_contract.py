"""The stable CLI contract (issue 2): JSON/SARIF shapes, exit codes, dry-run and patch sets."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from cli_helpers import git, needs_git, run_porter

SAMPLE = '''from transformers import AutoModelForCausalLM
import flash_attn as fa

model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="flash_attention_2")
legacy = AutoModelForCausalLM.from_pretrained("gpt2", use_flash_attention_2=True)
'''

CLEAN = "import torch\n\nx = torch.zeros(3)\n"


def make_tree(tmp: Path) -> Path:
    root = tmp / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "model.py").write_text(SAMPLE, encoding="utf-8")
    (root / "pkg" / "clean.py").write_text(CLEAN, encoding="utf-8")
    (root / "pkg" / "crlf.py").write_bytes(
        b'from transformers import AutoModel\r\nm = AutoModel.from_pretrained("x", attn_implementation="flash_attention_2")\r\n'
    )
    (root / "pkg" / "nonl.py").write_bytes(b'f(attn_implementation="flash_attention_2")')
    (root / "pkg" / "dir with space").mkdir()
    (root / "pkg" / "dir with space" / "caf\u00e9 n.py").write_text(SAMPLE, encoding="utf-8")
    return root


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and ".git" not in p.parts:
            out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
    return out


def test_version_and_help() -> None:
    proc = run_porter("--version")
    assert proc.returncode == 0 and b"porter" in proc.stdout
    assert run_porter("--help").returncode == 0


def test_audit_json_contract(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    proc = run_porter("audit", "--format", "json", "--no-cache", str(root))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert isinstance(doc["findings"], list) and doc["findings"]
    required = {"code", "name", "path", "line", "column", "end_line", "category", "message", "fix"}
    for f in doc["findings"]:
        assert required <= f.keys()
        assert f["category"] in {"benign", "shim", "replace"}
        assert f["fix"] in {"safe", "unsafe", "none"}
        assert not f["path"].startswith("/") and "\\" not in f["path"]
        assert f["line"] >= 1 and f["column"] >= 1 and f["end_line"] >= f["line"]
    paths = {f["path"] for f in doc["findings"]}
    assert "pkg/model.py" in paths and "pkg/clean.py" not in paths
    codes = {(f["path"], f["line"], f["code"]) for f in doc["findings"]}
    assert ("pkg/model.py", 4, "PRT030") in codes and ("pkg/model.py", 2, "PRT011") in codes


def test_audit_is_read_only_and_exit_zero(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    before = snapshot(root)
    proc = run_porter("audit", "--no-cache", str(root))
    assert proc.returncode == 0
    assert snapshot(root) == before


def _sarif_errors(doc: dict) -> list[str]:
    """The properties GitHub code scanning requires of an upload: SARIF 2.1.0 with its ``$schema``; a
    driver with a name and rules, each with short/full descriptions and help; each result with a
    message, a ``ruleId`` (and ``ruleIndex``) naming one of those rules and one to ten locations,
    each a relative URI with a full region."""
    errs = []
    if doc.get("version") != "2.1.0" or not doc.get("$schema"):
        errs.append("version/$schema")
    for run in doc.get("runs", []):
        driver = run.get("tool", {}).get("driver", {})
        if not driver.get("name") or not isinstance(driver.get("rules"), list):
            errs.append("driver")
        ids = set()
        for rule in driver.get("rules", []):
            ids.add(rule.get("id"))
            for key in ("shortDescription", "fullDescription", "help"):
                if not (rule.get(key) or {}).get("text"):
                    errs.append(f"rule {rule.get('id')} {key}")
        for res in run.get("results", []):
            if not res.get("message", {}).get("text"):
                errs.append("message")
            if res.get("ruleId") not in ids:
                errs.append(f"ruleId {res.get('ruleId')}")
            if res.get("ruleIndex") is not None and driver["rules"][res["ruleIndex"]]["id"] != res["ruleId"]:
                errs.append("ruleIndex")
            locs = res.get("locations") or []
            if not 1 <= len(locs) <= 10:
                errs.append("locations")
            for loc in locs:
                phys = loc["physicalLocation"]
                uri = phys["artifactLocation"]["uri"]
                if uri.startswith("/") or "://" in uri:
                    errs.append(f"uri {uri}")
                region = phys["region"]
                for key in ("startLine", "startColumn", "endLine", "endColumn"):
                    if not isinstance(region.get(key), int) or region[key] < 1:
                        errs.append(f"region {key}")
            if not res.get("partialFingerprints"):
                errs.append("partialFingerprints")
            for fix in res.get("fixes", []):
                for change in fix["artifactChanges"]:
                    for rep in change["replacements"]:
                        assert rep["deletedRegion"]["startLine"] >= 1
    return errs


def test_sarif_structure(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    proc = run_porter("audit", "--format", "sarif", "--no-cache", str(root))
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert _sarif_errors(doc) == []
    results = doc["runs"][0]["results"]
    assert any(r.get("fixes") for r in results), "safe fixes must be carried in SARIF"
    fixed = next(r for r in results if r.get("fixes"))
    rep = fixed["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert rep["insertedContent"]["text"] in {'"sdpa"', 'attn_implementation="sdpa"'}


def test_sarif_validator_catches_breakage() -> None:
    doc = {"version": "2.1.0", "$schema": "x", "runs": [{"tool": {"driver": {"name": "porter", "rules": []}},
                                                         "results": [{"ruleId": "PRT030", "message": {"text": ""},
                                                                      "locations": []}]}]}
    assert len(_sarif_errors(doc)) >= 3


@needs_git
def test_dry_run_diff_applies_and_writes_nothing(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    git("init", "-q", cwd=root)
    before = snapshot(root)
    proc = run_porter("apply", "--dry-run", "--no-cache", str(root))
    assert proc.returncode == 1, proc.stderr  # something would change
    assert snapshot(root) == before, "dry-run must not touch any file (bytes or mtime)"
    assert not (root / ".porter_cache").exists()
    patch = tmp_path / "dry.patch"
    patch.write_bytes(proc.stdout)
    assert b"diff --git a/pkg/model.py b/pkg/model.py" in proc.stdout
    assert b"\\ No newline at end of file" in proc.stdout
    git("apply", "--check", str(patch), cwd=root)
    # the dry-run diff equals what apply writes
    other = tmp_path / "other"
    shutil.copytree(root, other)
    git("apply", str(patch), cwd=root)
    assert run_porter("apply", "--no-cache", str(other)).returncode == 0
    assert {k: v[0] for k, v in snapshot(root).items()} == {k: v[0] for k, v in snapshot(other).items()}


def test_dry_run_exit_zero_when_nothing_changes(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(CLEAN)
    proc = run_porter("apply", "--dry-run", str(tmp_path))
    assert proc.returncode == 0 and proc.stdout == b""


@needs_git
def test_patch_dir_equals_apply(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    pristine = tmp_path / "pristine"
    applied = tmp_path / "applied"
    shutil.copytree(root, pristine)
    shutil.copytree(root, applied)
    git("init", "-q", cwd=pristine)
    patches = tmp_path / "patches"
    proc = run_porter("apply", "--patch-dir", str(patches), "--no-cache", str(root))
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in patches.glob("*.patch"))
    assert names and names[0].startswith("0001-")
    assert (patches / "INDEX.md").read_text().startswith("# porter patch series")
    assert snapshot(root) == snapshot(root)  # sources untouched by --patch-dir
    for name in names:
        git("apply", str(patches / name), cwd=pristine)
    assert run_porter("apply", "--no-cache", str(applied)).returncode == 0
    want = {k: v[0] for k, v in snapshot(applied).items()}
    got = {k: v[0] for k, v in snapshot(pristine).items()}
    assert got == want


def test_apply_is_idempotent_and_keeps_bytes(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    mode = 0o754
    os.chmod(root / "pkg" / "crlf.py", mode)
    assert run_porter("apply", "--no-cache", str(root)).returncode == 0
    crlf = (root / "pkg" / "crlf.py").read_bytes()
    assert crlf.count(b"\r\n") == 2 and b'attn_implementation="sdpa"' in crlf
    assert os.stat(root / "pkg" / "crlf.py").st_mode & 0o777 == mode
    assert (root / "pkg" / "nonl.py").read_bytes() == b'f(attn_implementation="sdpa")'
    first = snapshot(root)
    proc = run_porter("apply", "--dry-run", "--no-cache", str(root))
    assert proc.returncode == 0 and proc.stdout == b""
    assert run_porter("apply", "--no-cache", str(root)).returncode == 0
    assert {k: v[0] for k, v in snapshot(root).items()} == {k: v[0] for k, v in first.items()}


def test_check_exit_codes(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    dirty = run_porter("check", str(root / "pkg" / "model.py"), cwd=root)
    assert dirty.returncode == 1
    assert b"PRT030" in dirty.stdout
    clean = run_porter("check", "pkg/clean.py", cwd=root)
    assert clean.returncode == 0, clean.stdout
    assert run_porter("check", "--exit-zero", "pkg/model.py", cwd=root).returncode == 0
    # a path that does not exist is an error, never a silent pass
    missing = run_porter("check", "nonexistent-dir-xyz", cwd=root)
    assert missing.returncode == 1 and b"PRT005" in missing.stdout


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run_porter("audit", "--format", "nope", str(tmp_path)).returncode == 2
    (tmp_path / "pyproject.toml").write_text("[tool.porter]\nselekt = ['PRT1']\n")
    proc = run_porter("audit", str(tmp_path))
    assert proc.returncode == 2 and b"selekt" in proc.stderr
    assert run_porter("rule", "PRT999999").returncode == 2


def test_stdin_mode() -> None:
    proc = run_porter("apply", "-", "--stdin-filename", "m.py", input=SAMPLE.encode())
    assert proc.returncode == 0
    assert b'attn_implementation="sdpa"' in proc.stdout
    proc = run_porter("check", "-", "--stdin-filename", "m.py", input=SAMPLE.encode())
    assert proc.returncode == 1 and b"m.py:4" in proc.stdout


def test_rules_and_rule_docs() -> None:
    proc = run_porter("rules", "--json")
    table = json.loads(proc.stdout)
    codes = [r["code"] for r in table]
    assert len(codes) == len(set(codes))
    assert "PRT030" in codes
    doc = run_porter("rule", "hf-flash-attention-2")
    assert doc.returncode == 0 and b"PRT030" in doc.stdout and b"Fix:** safe" in doc.stdout


def test_markdown_report(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    # a use of the flash_attn import keeps it (an unused one is removed by a safe fix) and the file needs work
    (root / "pkg" / "model.py").write_text(SAMPLE + "rot = fa.layers.rotary\n", encoding="utf-8")
    out = tmp_path / "AUDIT.md"
    proc = run_porter("audit", "--format", "markdown", "-o", str(out), "--no-cache", str(root))
    assert proc.returncode == 0
    text = out.read_text()
    assert text.startswith("# ")
    assert "pkg/model.py" in text


@pytest.mark.parametrize("fmt", ["concise", "github", "text"])
def test_other_formats(tmp_path: Path, fmt: str) -> None:
    root = make_tree(tmp_path)
    proc = run_porter("audit", "--format", fmt, "--no-cache", str(root))
    assert proc.returncode == 0 and b"PRT030" in proc.stdout


def test_annotate_flags_sites_once(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(SAMPLE + "dyn = AutoModelForCausalLM.from_pretrained('x', use_flash_attention_2=flag)\n"
                                   "rot = fa.layers.rotary\n")  # a used import stays, flagged
    assert run_porter("apply", "--annotate", "--no-cache", str(tmp_path)).returncode == 0
    text = (tmp_path / "m.py").read_text()
    assert "# porter: PRT011 " in text and "# porter: PRT031 " in text
    assert 'attn_implementation="sdpa"' in text
    compile(text, "m.py", "exec")
    again = run_porter("apply", "--annotate", "--dry-run", "--no-cache", str(tmp_path))
    assert again.returncode == 0 and again.stdout == b""
