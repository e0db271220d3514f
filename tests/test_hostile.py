"""Hostile and odd input (issue 9): each gets a clear per-file message and the run goes on."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from cli_helpers import git, needs_git, run_porter

from porter.config import Settings
from porter.discovery import SourceRef
from porter.engine import analyze
from porter.runner import process_file

TRIGGER = 'from transformers import AutoModel\nm = AutoModel.from_pretrained("x", attn_implementation="flash_attention_2")\n'


def _audit(root: Path, *extra: str) -> list[dict]:
    proc = run_porter("audit", "--format", "json", "--no-cache", *extra, str(root), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["findings"]


def test_pathological_nesting_is_reported_not_crashing() -> None:
    for body in ("x = " + "(" * 20000 + "1" + ")" * 20000, "x = " + "+".join(["a"] * 60000),
                 "x = " + "-" * 50000 + "1"):
        found = analyze("deep.py", "import flash_attn\n" + body + "\n", "python", Settings())
        assert [f.code for f in found] == ["PRT001"]
        assert "nest" in found[0].message or "deep" in found[0].message


def test_deep_file_in_a_tree_run(tmp_path: Path) -> None:
    (tmp_path / "deep.py").write_text("import flash_attn\nx = " + "(" * 20000 + "1" + ")" * 20000 + "\n")
    (tmp_path / "ok.py").write_text(TRIGGER)
    codes = {(f["path"], f["code"]) for f in _audit(tmp_path)}
    assert ("deep.py", "PRT001") in codes and ("ok.py", "PRT030") in codes


def test_huge_generated_file_is_skipped_quickly(tmp_path: Path) -> None:
    big = tmp_path / "generated.py"
    line = b"x = 'flash_attn' * 3  # generated\n"
    with open(big, "wb") as fh:
        for _ in range((50 * 1024 * 1024) // len(line) + 1):
            fh.write(line)
    (tmp_path / "ok.py").write_text(TRIGGER)
    codes = {(f["path"], f["code"]) for f in _audit(tmp_path)}
    assert ("generated.py", "PRT004") in codes and ("ok.py", "PRT030") in codes


def test_nul_bytes_and_python2(tmp_path: Path) -> None:
    (tmp_path / "nul.py").write_bytes(b"import flash_attn\x00\n")
    (tmp_path / "py2.py").write_text("import flash_attn\nprint 'hi'\nexec 'x'\n")
    codes = {(f["path"], f["code"]) for f in _audit(tmp_path)}
    assert ("nul.py", "PRT003") in codes and ("py2.py", "PRT001") in codes


def test_vanished_file_mid_run(tmp_path: Path) -> None:
    # discovery saw it, then it disappeared before it was read
    result = process_file(SourceRef("gone.py", "python"), str(tmp_path), Settings(), __import__(
        "porter.framework", fromlist=["RepoFacts"]).RepoFacts(), "audit")
    assert [f.code for f in result.findings] == ["PRT005"]
    assert "vanished" in result.findings[0].message


def test_timeout_per_file(tmp_path: Path) -> None:
    # 30,000 flash-attn calls: the attention family's LibCST parse and analysis take several CPU-seconds
    body = "".join(f"o{i} = flash_attn_func(q, k, v, causal=True)\n" for i in range(30000))
    (tmp_path / "slow.py").write_text("from flash_attn import flash_attn_func\n" + body)
    (tmp_path / "ok.py").write_text(TRIGGER)
    codes = {(f["path"], f["code"]) for f in _audit(tmp_path, "--timeout", "1.5")}
    assert ("slow.py", "PRT008") in codes and ("ok.py", "PRT030") in codes


def test_symlink_loops_and_dotdot(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    (root / "a").mkdir()
    (root / "a" / "loop").symlink_to(root / "a")
    (root / "self.py").symlink_to(root / "self.py")
    (root / "ok.py").write_text(TRIGGER)
    codes = {(f["path"], f["code"]) for f in _audit(root)}
    assert ("ok.py", "PRT030") in codes
    assert ("self.py", "PRT006") in codes
    proc = run_porter("audit", "--format", "json", "--root", str(root), str(root / ".." / "r" / ".." / "x"))
    assert [f["code"] for f in json.loads(proc.stdout)["findings"]] == ["PRT009"]


@needs_git
def test_odd_file_names_patch_still_applies(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    names = ["with space.py", "caf\u00e9.py", "new\nline.py", "tab\tname.py", 'quo"te.py', "back\\slash.py"]
    for n in names:
        (root / n).write_text(TRIGGER)
    pristine = tmp_path / "pristine"
    shutil.copytree(root, pristine)
    git("init", "-q", cwd=pristine)
    proc = run_porter("apply", "--dry-run", "--no-cache", str(root))
    assert proc.returncode == 1
    patch = tmp_path / "p.patch"
    patch.write_bytes(proc.stdout)
    subprocess.run(["git", "apply", str(patch)], cwd=pristine, check=True, capture_output=True)
    for n in names:
        assert b'"sdpa"' in (pristine / n).read_bytes(), n
    # and apply writes the same bytes
    assert run_porter("apply", "--no-cache", str(root)).returncode == 0
    for n in names:
        assert (root / n).read_bytes() == (pristine / n).read_bytes()


def test_patch_dir_and_config_cannot_escape(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    (root / "ok.py").write_text(TRIGGER)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    link = tmp_path / "linkdir"
    link.symlink_to(outside)
    proc = run_porter("apply", "--patch-dir", str(link), str(root))
    assert proc.returncode == 2 and b"symlink" in proc.stderr
    assert list(outside.iterdir()) == []
    (root / "ok.py").write_text(TRIGGER)
    assert run_porter("apply", "--config", str(tmp_path / "missing.toml"), str(root)).returncode == 2
    assert (root / "ok.py").read_text() == TRIGGER


def test_target_code_is_never_executed(tmp_path: Path) -> None:
    """The console script run from inside the target (as pre-commit does) imports nothing from it."""
    marker = tmp_path / "EXECUTED"
    payload = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (tmp_path / "setup.py").write_text(payload + "from setuptools import setup\nsetup(name='x', install_requires=['flash-attn'])\n")
    (tmp_path / "conftest.py").write_text(payload + "import flash_attn\n")
    for module in ("flash_attn", "torch", "apex", "pynvml", "transformers", "json", "difflib", "fnmatch"):
        (tmp_path / f"{module}.py").write_text(payload)
    (tmp_path / "model.py").write_text("import flash_attn\nimport torch\n" + TRIGGER)
    (tmp_path / "requirements.txt").write_text("flash-attn==2.5.6\ntorch==2.1.0+cu121\n")
    exe = shutil.which("porter")
    assert exe is not None, "porter's console script must be installed"
    for launcher in ([exe], [sys.executable, "-m", "porter"]):  # `-m` puts the cwd on sys.path
        for args in (("audit",), ("check",), ("apply", "--dry-run"), ("apply",), ("migrate", "--dry-run")):
            subprocess.run([*launcher, *args, "."], cwd=tmp_path, capture_output=True, timeout=300, check=False)
    assert not marker.exists(), marker.read_text()


def test_str_bytes_concatenation_is_a_syntax_finding_not_a_crash() -> None:
    # CPython rejects it, so LibCST decides; its parser raises CSTValidationError, not
    # ParserSyntaxError: that was an internal error ending the whole run
    from porter.testing import findings

    found = findings('import torch\nx = "a" b"b"\ny = torch.cuda.is_available()\n', "m.py")
    assert [(f.code, f.message) for f in found] == [
        ("PRT001", "syntax error: Cannot concatenate string and bytes.; file skipped")]
