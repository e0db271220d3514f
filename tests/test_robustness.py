"""Bad input never crashes a run, and porter never leaves the root (issue 2, must-show 5)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import git, needs_git, run_porter

BAD = 'from transformers import AutoModel\nm = AutoModel.from_pretrained("x", attn_implementation="flash_attention_2")\n'


def build_hostile(tmp: Path) -> tuple[Path, Path]:
    root = tmp / "root"
    outside = tmp / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.py").write_text(BAD)
    os.mkfifo(outside / "fifo.py")  # reading it would block: proves porter never opens it
    (root / "good.py").write_text(BAD)
    (root / "syntax.py").write_text("def broken(:\n    pass\n" + BAD)
    (root / "latin.py").write_bytes(b"x = '\xe9\xe8'\n" + BAD.encode())  # no coding cookie: not UTF-8
    (root / "binary.py").write_bytes(b"\x00\x01\x02flash_attn\x00")
    (root / "py2.py").write_text('import flash_attn\nprint "hello"\n')  # only files a rule could match are parsed
    (root / "link_out.py").symlink_to(outside / "secret.py")
    (root / "link_fifo.py").symlink_to(outside / "fifo.py")
    (root / "linkdir").symlink_to(outside)
    (root / "loop.py").symlink_to(root / "loop.py")
    (root / "sub").mkdir()
    (root / "sub" / "inside_link.py").symlink_to(root / "good.py")
    return root, outside


def test_hostile_tree_is_reported_and_the_rest_fixed(tmp_path: Path) -> None:
    root, outside = build_hostile(tmp_path)
    secret_before = (outside / "secret.py").read_bytes()
    proc = run_porter("audit", "--format", "json", "--no-cache", str(root), timeout=60)
    assert proc.returncode == 0, proc.stderr
    found = {(f["path"], f["code"]) for f in json.loads(proc.stdout)["findings"]}
    assert ("syntax.py", "PRT001") in found
    assert ("py2.py", "PRT001") in found
    assert ("latin.py", "PRT002") in found
    assert ("binary.py", "PRT003") in found
    assert ("link_out.py", "PRT006") in found
    assert ("link_fifo.py", "PRT006") in found
    assert ("linkdir", "PRT006") in found
    assert ("good.py", "PRT030") in found
    assert not any(p.startswith("sub/inside_link") for p, _ in found)
    assert not any("secret" in p for p, _ in found)
    messages = json.loads(proc.stdout)["findings"]
    assert all(m["message"] for m in messages)
    # apply: the good file is fixed, every other file keeps its bytes, nothing outside changes
    before = {p: p.read_bytes() for p in root.iterdir() if p.is_file() and not p.is_symlink()}
    proc = run_porter("apply", "--no-cache", str(root), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert b'"sdpa"' in (root / "good.py").read_bytes()
    for p, data in before.items():
        if p.name != "good.py":
            assert p.read_bytes() == data, p
    assert (outside / "secret.py").read_bytes() == secret_before
    assert (root / "link_out.py").is_symlink()
    assert b"PRT001" in proc.stderr  # problems are listed in the apply summary


def test_explicit_path_outside_root_is_refused(tmp_path: Path) -> None:
    root, outside = build_hostile(tmp_path)
    proc = run_porter("audit", "--format", "json", "--root", str(root), str(outside / "secret.py"), timeout=60)
    assert proc.returncode == 0
    codes = [f["code"] for f in json.loads(proc.stdout)["findings"]]
    assert codes == ["PRT009"]
    proc = run_porter("apply", "--root", str(root), str(root / ".." / "outside"), timeout=60)
    assert (outside / "secret.py").read_text() == BAD


def test_large_file_is_skipped_with_a_reason(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.porter]\nmax-file-size = 1000\n")
    (tmp_path / "big.py").write_text(BAD + "x = 1\n" * 400)
    proc = run_porter("audit", "--format", "json", str(tmp_path))
    codes = [(f["path"], f["code"]) for f in json.loads(proc.stdout)["findings"]]
    assert codes == [("big.py", "PRT004")]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read files without read permission")
def test_unreadable_file(tmp_path: Path) -> None:  # pragma: no cover - CI runs as root
    p = tmp_path / "secret.py"
    p.write_text(BAD)
    p.chmod(0)
    proc = run_porter("audit", "--format", "json", str(tmp_path))
    assert [f["code"] for f in json.loads(proc.stdout)["findings"]] == ["PRT005"]


@needs_git
def test_git_aware_discovery(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git("init", "-q", cwd=root)
    (root / ".gitignore").write_text("ignored/\n*.gen.py\n")
    (root / "tracked.py").write_text(BAD)
    (root / "untracked.py").write_text(BAD)
    (root / "x.gen.py").write_text(BAD)
    (root / "ignored").mkdir()
    (root / "ignored" / "a.py").write_text(BAD)
    (root / "vendor").mkdir()
    (root / "vendor" / "v.py").write_text(BAD)
    (root / "pyproject.toml").write_text('[tool.porter]\nextend-exclude = ["vendor/"]\n')
    git("add", "tracked.py", cwd=root)
    proc = run_porter("audit", "--format", "json", "--no-cache", str(root))
    paths = {f["path"] for f in json.loads(proc.stdout)["findings"]}
    assert paths == {"tracked.py", "untracked.py"}
    # the same rules without git: a plain walk honouring .gitignore
    (root / ".git").rename(root / ".git-off")
    proc = run_porter("audit", "--format", "json", "--no-cache", str(root))
    assert {f["path"] for f in json.loads(proc.stdout)["findings"]} == {"tracked.py", "untracked.py"}
    # explicit files are excluded only with --force-exclude
    assert run_porter("check", "vendor/v.py", cwd=root).returncode == 1
    assert run_porter("check", "--force-exclude", "vendor/v.py", cwd=root).returncode == 0


def test_suppressions_and_selection(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "import flash_attn  # noqa: PRT011\n"
        "import xformers  # noqa\n"
        "import apex\n"
        'f(attn_implementation="flash_attention_2")  # noqa: PRT0\n'
    )
    (tmp_path / "b.py").write_text("# porter: noqa\nimport apex\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("import apex\nimport pynvml\n")
    (tmp_path / "pyproject.toml").write_text('[tool.porter.per-file-ignores]\n"tests/*" = ["PRT013"]\n')
    proc = run_porter("audit", "--format", "json", "--no-cache", str(tmp_path))
    got = sorted((f["path"], f["code"]) for f in json.loads(proc.stdout)["findings"])
    assert got == [("a.py", "PRT013"), ("tests/t.py", "PRT016")]
    proc = run_porter("audit", "--format", "json", "--no-cache", "--select", "PRT016", str(tmp_path))
    assert [f["code"] for f in json.loads(proc.stdout)["findings"]] == ["PRT016"]
    proc = run_porter("audit", "--format", "json", "--no-cache", "--ignore", "PRT01", str(tmp_path))
    assert json.loads(proc.stdout)["findings"] == []
    proc = run_porter("audit", "--format", "json", "--no-cache", "--config", 'ignore=["PRT016"]', str(tmp_path))
    assert sorted(f["code"] for f in json.loads(proc.stdout)["findings"]) == ["PRT013"]


def test_encodings_preserved(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf" + BAD.encode()
    latin = b"# -*- coding: latin-1 -*-\nname = '\xe9'\n" + BAD.encode()
    (tmp_path / "bom.py").write_bytes(bom)
    (tmp_path / "latin.py").write_bytes(latin)
    assert run_porter("apply", "--no-cache", str(tmp_path)).returncode == 0
    assert (tmp_path / "bom.py").read_bytes() == bom.replace(b"flash_attention_2", b"sdpa")
    assert (tmp_path / "latin.py").read_bytes() == latin.replace(b"flash_attention_2", b"sdpa")


def test_serial_and_parallel_agree(tmp_path: Path) -> None:
    for i in range(40):
        (tmp_path / f"m{i}.py").write_text(BAD if i % 3 else "import apex\n" + BAD)
    serial = run_porter("audit", "--format", "json", "--no-cache", "-j", "1", str(tmp_path))
    parallel = run_porter("audit", "--format", "json", "--no-cache", "-j", "2", str(tmp_path))
    assert json.loads(serial.stdout)["findings"] == json.loads(parallel.stdout)["findings"]
    cached1 = run_porter("audit", "--format", "json", str(tmp_path))
    cached2 = run_porter("audit", "--format", "json", str(tmp_path))
    assert json.loads(cached1.stdout)["findings"] == json.loads(serial.stdout)["findings"]
    assert json.loads(cached2.stdout)["findings"] == json.loads(serial.stdout)["findings"]
