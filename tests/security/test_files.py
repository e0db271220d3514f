"""Files and writes in a hostile target (issue 17, items 6-10, 18, 19 and siblings)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import time
from pathlib import Path

import pytest
import yaml
from cli_helpers import run_porter

from porter import runner
from porter.config import Settings
from porter.discovery import SourceRef
from porter.framework import RepoFacts

REPO = Path(__file__).resolve().parents[2]
LOCKED = 'from transformers import AutoModel\nm = AutoModel.from_pretrained("x", attn_implementation="flash_attention_2")\n'
FIXED = LOCKED.replace('"flash_attention_2"', '"sdpa"')


def _fix_run(root: Path) -> runner.RunResult:
    return runner.run(root, [root], Settings(cache=False), "fix", jobs=1, use_cache=False)


def _prt000(result: runner.RunResult) -> dict[str, str]:
    return {f.path: f.message for f in result.findings if f.code == "PRT000"}


# -- item 6: pre-commit passes file names after `--` ------------------------------------------

def test_precommit_hooks_end_options_with_double_dash() -> None:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hooks and all(h["entry"].split()[-1] == "--" for h in hooks), [h["entry"] for h in hooks]


@pytest.mark.parametrize("command", ["check", "apply"])
def test_file_named_like_an_option_is_a_file(tmp_path: Path, command: str) -> None:
    (tmp_path / "--select=PRT999.py").write_text(LOCKED)
    hooks = {h["id"]: h["entry"].split()[1:] for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    args = hooks["porter-check" if command == "check" else "porter-fix"]
    assert args[-1] == "--"
    proc = run_porter(*args[:-1], "--no-cache", "--", "--select=PRT999.py", cwd=tmp_path)
    if command == "check":
        assert proc.returncode == 1 and b"PRT030" in proc.stdout, (proc.stdout, proc.stderr)
    else:
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "--select=PRT999.py").read_text() == FIXED


# -- item 7: a root that is a symlink ----------------------------------------------------------

def test_root_given_as_a_symlink_is_scanned(tmp_path: Path) -> None:
    repo = tmp_path / "real"
    repo.mkdir()
    (repo / "m.py").write_text(LOCKED)
    (tmp_path / "link").symlink_to(repo, target_is_directory=True)
    for args in (("link",), ("--root", "link", "link"), ("--root", "link", "link/m.py")):
        proc = run_porter("check", "--no-cache", *args, cwd=tmp_path)
        assert proc.returncode == 1 and b"PRT030" in proc.stdout, (args, proc.stdout, proc.stderr)


def test_nothing_scanned_is_never_silent(tmp_path: Path) -> None:
    (tmp_path / "README").write_text("no code here\n")
    proc = run_porter("check", "--no-cache", str(tmp_path))
    assert proc.returncode == 0 and b"no files to analyse" in proc.stderr


# -- item 8: a file edited while apply runs ------------------------------------------------------

def test_file_edited_during_apply_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(LOCKED)
    (tmp_path / "b.py").write_text(LOCKED)
    result = _fix_run(tmp_path)
    assert {fr.relpath for fr in result.changed_files} == {"a.py", "b.py"}
    edited = LOCKED + "# the user's new line\n"
    (tmp_path / "a.py").write_text(edited)  # another process, between analysis and write
    written = runner.write(result)
    assert written == ["b.py"]
    assert (tmp_path / "a.py").read_text() == edited
    assert (tmp_path / "b.py").read_text() == FIXED
    assert "changed on disk" in _prt000(result)["a.py"]


# -- item 9: hard links, read-only files, owners ---------------------------------------------------

def test_hard_linked_file_is_refused_not_split(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(LOCKED)
    os.link(tmp_path / "a.py", tmp_path / "twin.txt")
    result = _fix_run(tmp_path)
    runner.write(result)
    assert (tmp_path / "a.py").read_text() == LOCKED
    assert os.stat(tmp_path / "a.py").st_ino == os.stat(tmp_path / "twin.txt").st_ino
    assert "hard links" in _prt000(result)["a.py"]


def test_read_only_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(LOCKED)
    os.chmod(tmp_path / "a.py", 0o444)
    (tmp_path / "b.py").write_text(LOCKED)
    proc = run_porter("apply", "--no-cache", str(tmp_path))
    assert proc.returncode == 2 and b"read-only" in proc.stderr, proc.stderr
    assert b"fixed 1 site(s) in 1 file(s)" in proc.stderr  # b.py only: a.py was not written
    assert (tmp_path / "a.py").read_text() == LOCKED
    assert stat.S_IMODE(os.stat(tmp_path / "a.py").st_mode) == 0o444
    assert (tmp_path / "b.py").read_text() == FIXED


def test_mode_bits_are_kept(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(LOCKED)
    os.chmod(tmp_path / "a.py", 0o751)
    runner.write(_fix_run(tmp_path))
    assert (tmp_path / "a.py").read_text() == FIXED
    assert stat.S_IMODE(os.stat(tmp_path / "a.py").st_mode) == 0o751


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root can give a file away")
def test_owner_and_group_are_kept_when_run_as_root(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(LOCKED)
    os.chown(tmp_path / "a.py", 4321, 4322)
    runner.write(_fix_run(tmp_path))
    st = os.stat(tmp_path / "a.py")
    assert (tmp_path / "a.py").read_text() == FIXED
    assert (st.st_uid, st.st_gid) == (4321, 4322)


def test_file_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text(LOCKED)
    result = _fix_run(tmp_path)
    mine = os.stat(tmp_path / "a.py").st_uid
    monkeypatch.setattr(os, "geteuid", lambda: mine + 1 if mine + 1 != 0 else mine + 2)
    runner.write(result)
    assert (tmp_path / "a.py").read_text() == LOCKED
    assert "another user" in _prt000(result)["a.py"]


# -- item 10: encodings that do not round-trip -------------------------------------------------

@pytest.mark.parametrize(("encoding", "odd"), [
    ("cp932", b'x = "\x87\x90"  # NEC row 13: encodes back as 81 be\n'),
    ("big5", b'x = "\xa1\xfe"\n'),
    ("utf-7", b'x = "+AOk-"\n'),
])
def test_non_round_trip_encodings_are_reported_not_edited(tmp_path: Path, encoding: str, odd: bytes) -> None:
    data = f"# -*- coding: {encoding} -*-\n".encode() + odd + LOCKED.encode()
    (tmp_path / "a.py").write_bytes(data)
    proc = run_porter("apply", "--no-cache", str(tmp_path))
    assert (tmp_path / "a.py").read_bytes() == data
    assert proc.returncode == 2 and b"PRT000" in proc.stderr and b"round-trip" in proc.stderr, proc.stderr
    dry = run_porter("apply", "--dry-run", "--no-cache", str(tmp_path))
    assert dry.stdout == b""


def test_round_trip_exact_legacy_encoding_is_still_fixed(tmp_path: Path) -> None:
    data = b"# -*- coding: cp932 -*-\n" + '# 日本語のコメント\n'.encode("cp932") + LOCKED.encode()
    (tmp_path / "a.py").write_bytes(data)
    assert run_porter("apply", "--no-cache", str(tmp_path)).returncode == 0
    assert (tmp_path / "a.py").read_bytes() == data.replace(b'"flash_attention_2"', b'"sdpa"')


# -- item 18: write errors are per file ---------------------------------------------------------

def test_write_error_is_reported_and_the_run_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text(LOCKED)
    result = _fix_run(tmp_path)
    real_replace = os.replace

    def full_disk(src, dst, *args, **kwargs):  # noqa: ANN001, ANN202
        if str(dst).endswith("b.py"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full_disk)
    written = runner.write(result)
    assert written == ["a.py", "c.py"]
    assert (tmp_path / "b.py").read_text() == LOCKED
    assert "no space left" in _prt000(result)["b.py"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".porter-")]  # no temp file left


# -- item 19: the per-file limit is CPU time -----------------------------------------------------

def test_timeout_counts_cpu_not_wall_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text(LOCKED)

    def slow_but_idle(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - a loaded machine: waiting, not computing
        time.sleep(1.0)
        return []

    monkeypatch.setattr(runner, "analyze", slow_but_idle)
    settings = Settings(timeout=0.3, cache=False)
    result = runner.process_file(SourceRef("a.py", "python"), str(tmp_path), settings, RepoFacts(), "audit")
    assert [f.code for f in result.findings] == []

    def busy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        end = time.process_time() + 5
        while time.process_time() < end:
            pass
        return []

    monkeypatch.setattr(runner, "analyze", busy)
    result = runner.process_file(SourceRef("a.py", "python"), str(tmp_path), settings, RepoFacts(), "audit")
    assert [f.code for f in result.findings] == ["PRT008"]


# -- siblings -------------------------------------------------------------------------------------

def test_folder_swapped_for_a_symlink_during_apply_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text(LOCKED)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.py").write_text(LOCKED)
    result = _fix_run(root)
    shutil.rmtree(root / "pkg")
    (root / "pkg").symlink_to(outside, target_is_directory=True)
    assert runner.write(result) == []
    assert (outside / "a.py").read_text() == LOCKED
    assert "symlink" in _prt000(result)["pkg/a.py"]


def test_new_file_never_replaces_or_follows_what_is_there(tmp_path: Path) -> None:
    gate = "import torch\n\nuse_bf16 = torch.cuda.get_device_capability()[0] >= 8\n"
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "repo"
    root.mkdir()
    (root / "model.py").write_text(gate)
    result = _fix_run(root)
    [new] = [p for fr in result.files for p in fr.new_files]
    (root / new).symlink_to(outside / "planted.py")  # dangling, planted after the analysis
    runner.write(result)
    assert not (outside / "planted.py").exists()
    # the fixed file would import a module porter could not create: it is left alone too
    assert (root / "model.py").read_text() == gate
    assert "could not create" in _prt000(result)["model.py"] or new in _prt000(result)


def test_file_name_with_a_newline_is_written_in_place(tmp_path: Path) -> None:
    (tmp_path / "odd\nname.py").write_text(LOCKED)
    runner.write(_fix_run(tmp_path))
    assert (tmp_path / "odd\nname.py").read_text() == FIXED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd\nname.py"]


def test_fifo_named_like_a_source_file_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "x.py")
    os.mkfifo(tmp_path / "requirements.txt")
    (tmp_path / "a.py").write_text(LOCKED)
    for extra in ((), ("--no-cache",)):
        proc = run_porter("check", *extra, str(tmp_path), timeout=60)
        assert proc.returncode == 1, proc.stderr
        assert b"a.py:2" in proc.stdout and b"x.py:1:1: PRT005 not a regular file" in proc.stdout


def test_fix_that_the_files_encoding_cannot_hold_is_not_written(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"# -*- coding: ascii -*-\n" + LOCKED.encode()
    (tmp_path / "a.py").write_bytes(data)
    real_fix = runner.fix

    def fix_with_an_arrow(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - e.g. an annotation with a non-ASCII message
        out = real_fix(*args, **kwargs)
        last = out.stages[-1]
        out.stages[-1] = type(last)(last.family, last.wrap, last.before, last.after + "# \u2192\n", last.findings)
        out.text = out.stages[-1].after
        return out

    monkeypatch.setattr(runner, "fix", fix_with_an_arrow)
    result = _fix_run(tmp_path)
    assert result.changed_files == []
    result.series().render()  # nothing left that cannot be encoded
    runner.write(result)
    assert (tmp_path / "a.py").read_bytes() == data
    assert "cannot be written in the file's encoding" in _prt000(result)["a.py"]


def test_file_names_cannot_forge_or_hide_output_lines(tmp_path: Path) -> None:
    (tmp_path / "evil\rclean.py").write_text("import flash_attn\n")
    (tmp_path / "x.py,line=99\n::error file=forged.py").write_text("import flash_attn\n")
    (tmp_path / "[bold]b.py").write_text("import flash_attn\ndef (\n")
    concise = run_porter("check", "--no-cache", str(tmp_path)).stdout.decode()
    assert "evil\\rclean.py:1:8: PRT011" in concise and "\r" not in concise
    assert "x.py,line=99\\n::error file=forged.py:1:8: PRT011" in concise
    github = run_porter("check", "--format", "github", "--no-cache", str(tmp_path)).stdout.decode()
    assert all(line.startswith("::") for line in github.splitlines())
    assert "file=x.py%2Cline=99%0A%3A%3Aerror file=forged.py," in github
    applied = run_porter("apply", "--no-cache", str(tmp_path))
    assert b"[bold]b.py: syntax error" in applied.stderr, applied.stderr


def test_unwritable_report_path_is_an_error_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(LOCKED)
    out = tmp_path / "missing" / "report.json"
    proc = run_porter("audit", "--format", "json", "-o", str(out), "--no-cache", str(tmp_path))
    assert proc.returncode == 2 and b"internal error" not in proc.stderr
    assert str(out).encode() in proc.stderr


@pytest.mark.parametrize("kind", ["folder", "dangling", "outside"])
def test_fix_needing_a_module_whose_name_is_taken_by_a_non_file_is_not_applied(tmp_path: Path, kind: str) -> None:
    gate = "import torch\n\nuse_bf16 = torch.cuda.get_device_capability()[0] >= 8\n"
    root = tmp_path / "repo"
    root.mkdir()
    (root / "model.py").write_text(gate)
    module = root / "porter_device.py"
    if kind == "folder":
        module.mkdir()
    elif kind == "dangling":
        module.symlink_to(tmp_path / "nowhere.py")
    else:
        (tmp_path / "elsewhere.py").write_text("x = 1\n")
        module.symlink_to(tmp_path / "elsewhere.py")
    result = _fix_run(root)
    assert result.changed_files == []
    assert "not a regular file inside the root" in _prt000(result)["model.py"]
    runner.write(result)
    assert (root / "model.py").read_text() == gate


def test_check_does_not_pass_files_it_could_not_analyse(tmp_path: Path) -> None:
    # one NUL byte in a comment (compilers ignore it) or padding past max-file-size hid the lock-in
    (tmp_path / "k.cu").write_bytes(b"// \x00\n__global__ void k() { unsigned m = __ballot_sync(0xffffffff, 1); }\n")
    (tmp_path / "pyproject.toml").write_text("[tool.porter]\nmax-file-size = 2000\n")
    (tmp_path / "big.py").write_text(LOCKED + "#" * 3000 + "\n")
    proc = run_porter("check", "--no-cache", str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert b"k.cu:1:1: PRT003" in proc.stdout and b"big.py:1:1: PRT004" in proc.stdout
    (tmp_path / "pyproject.toml").write_text('[tool.porter]\nmax-file-size = 2000\nextend-exclude = ["big.py", "k.cu"]\n')
    assert run_porter("check", "--no-cache", str(tmp_path)).returncode == 0  # an explicit, visible choice


def test_new_file_is_created_on_a_file_system_without_hard_links(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    gate = "import torch\n\nuse_bf16 = torch.cuda.get_device_capability()[0] >= 8\n"
    (tmp_path / "model.py").write_text(gate)
    result = _fix_run(tmp_path)
    [new] = [p for fr in result.files for p in fr.new_files]

    def no_links(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    assert sorted(runner.write(result)) == sorted([new, "model.py"])
    assert (tmp_path / new).read_text() == dict(result.files[0].new_files)[new]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".porter-")]


def test_file_named_through_a_symlinked_folder_out_of_the_root_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text(LOCKED)
    root = tmp_path / "repo"
    root.mkdir()
    (root / "ok.py").write_text("x = 1\n")
    (root / "vendor").symlink_to(outside, target_is_directory=True)
    proc = run_porter("check", "--no-cache", "vendor/secret.py", "ok.py", cwd=root)
    assert proc.returncode == 1, proc.stderr
    assert b"vendor/secret.py:1:1: PRT006" in proc.stdout and b"PRT030" not in proc.stdout
