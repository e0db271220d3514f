"""What a user sees (issue 16): locations without emoji, progress off a terminal, no hard wrapping
when piped, usage errors, site-based SARIF fingerprints, one dry-run diff per file, stdin dry-run,
noqa on rewritten sites, a missing HIPify engine, self-contained rule text and the help summary."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from cli_helpers import run_porter

from porter.console import Progress, make_console

FLASH_AT_100 = "import torch\n" + "\n" * 98 + "from flash_attn import flash_attn_func  # line 100\n"


def test_line_100_location_is_not_an_emoji(tmp_path: Path) -> None:
    (tmp_path / "gen_img.py").write_text(FLASH_AT_100 + "\nout = flash_attn_func(q, k, v, dropout_p=p)\n")
    proc = run_porter("audit", "--no-cache", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert "\U0001f4af" not in out  # rich's :100: emoji
    assert "gen_img.py:100:" in out


def test_console_never_renders_emoji_codes() -> None:
    buf = io.StringIO()
    console = make_console(file=buf)
    console.print("x.py:100:10 :smile: :thumbs_up:")
    assert buf.getvalue() == "x.py:100:10 :smile: :thumbs_up:\n"


def test_piped_output_is_not_wrapped(tmp_path: Path) -> None:
    deep = tmp_path / ("a_rather_long_directory_name_" * 3) / ("and_another_one_" * 3)
    deep.mkdir(parents=True)
    (deep / "model_with_a_long_name.py").write_text("import flash_attn\n")
    proc = run_porter("audit", "--no-cache", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.decode().splitlines()
    path_line = next(line for line in lines if line.endswith("model_with_a_long_name.py"))
    assert len(path_line) > 80 and "/" in path_line  # one line, not broken at 80 columns
    finding = next(line for line in lines if "PRT011" in line)
    assert len(finding) > 80 and finding.rstrip().endswith(")")
    # stderr too (the apply summary lists engine problems such as a syntax error, one per line)
    # a file that mentions CUDA (a file no rule can match is not parsed, so its syntax is not checked)
    (deep / "broken_module_with_a_long_name.py").write_text("import torch\nx = torch.cuda\ndef f(:\n")
    proc = run_porter("apply", "--dry-run", "--no-cache", str(tmp_path))
    err = proc.stderr.decode().splitlines()
    problem = next(line for line in err if "PRT001" in line)
    assert "broken_module_with_a_long_name.py" in problem and len(problem) > 80


def test_non_tty_progress_lines_are_periodic() -> None:
    buf = io.StringIO()
    now = [0.0]
    progress = Progress(make_console(file=buf), interval=5.0, min_files=10, clock=lambda: now[0])
    for done in range(1, 101):
        now[0] = done * 0.2  # 5 files per second: a line every 25 files
        progress(done, 100, f"f{done}.py")
    lines = buf.getvalue().splitlines()
    assert lines[-1].startswith("porter: 100/100 files (100%)")
    assert 4 <= len(lines) <= 5, lines
    for line in lines:
        assert re.fullmatch(r"porter: \d+/100 files \(\d+%\), [\d.]+ files/s, \d+ s", line), line
    assert "5.0 files/s" in lines[-1]


def test_small_runs_print_no_progress() -> None:
    buf = io.StringIO()
    progress = Progress(make_console(file=buf), min_files=50)
    for done in range(1, 11):
        progress(done, 10, "x.py")
    assert buf.getvalue() == ""


def test_cli_prints_progress_to_stderr_when_piped(tmp_path: Path) -> None:
    for i in range(60):
        (tmp_path / f"m{i:02d}.py").write_text("x = 1\n")
    proc = run_porter("audit", "--no-cache", "-j", "1", str(tmp_path))
    assert proc.returncode == 0
    err = proc.stderr.decode()
    assert re.search(r"^porter: 60/60 files \(100%\), [\d.]+ files/s", err, re.M), err
    assert b"files/s" not in proc.stdout
    quiet = run_porter("audit", "--no-cache", "-q", "-j", "1", str(tmp_path))
    assert b"files/s" not in quiet.stderr


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_porter("audit", str(tmp_path / "nonexistent"))
    assert proc.returncode == 2
    assert b"no such file or directory" in proc.stderr and b"engineer-day" not in proc.stdout
    assert run_porter("apply", "--dry-run", str(tmp_path / "nonexistent")).returncode == 2


@pytest.mark.parametrize("option", ["--select", "--extend-select", "--ignore"])
def test_unknown_selector_is_a_usage_error(tmp_path: Path, option: str) -> None:
    (tmp_path / "m.py").write_text("import flash_attn\n")
    proc = run_porter("audit", option, "PRT01,XYZ123", str(tmp_path))
    assert proc.returncode == 2
    assert b"XYZ123" in proc.stderr and b"unknown rule selector" in proc.stderr
    ok = run_porter("audit", "--format", "json", "--no-cache", option, "PRT01", str(tmp_path))
    assert ok.returncode == 0, ok.stderr


def test_sarif_fingerprints_are_unique_per_site(tmp_path: Path) -> None:
    body = "import torch\n\n" + "x = x.cuda()\n" * 5
    body += "def f():\n    x = x.cuda()\n"
    (tmp_path / "m.py").write_text(body)
    proc = run_porter("audit", "--format", "sarif", "--no-cache", "--select", "ALL", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)["runs"][0]["results"]
    by_rule: dict[str, list[str]] = {}
    for r in results:
        by_rule.setdefault(r["ruleId"], []).append(r["partialFingerprints"]["primaryLocationLineHash"])
    repeated = [fps for fps in by_rule.values() if len(fps) >= 5]
    assert repeated, by_rule
    for fps in by_rule.values():
        assert len(set(fps)) == len(fps), fps
    # identical lines share the hash and differ by occurrence; the indented copy is the same site text
    fps = repeated[0]
    assert {fp.split(":")[0] for fp in fps} == {fps[0].split(":")[0]}
    assert sorted(int(fp.split(":")[1]) for fp in fps) == list(range(1, len(fps) + 1))


def test_sarif_fingerprint_survives_moving_code(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import torch\nx = x.cuda()\n")

    def fingerprints() -> list[str]:
        doc = json.loads(run_porter("audit", "--format", "sarif", "--no-cache", "--select", "ALL",
                                    str(tmp_path)).stdout)
        return sorted(r["partialFingerprints"]["primaryLocationLineHash"] for r in doc["runs"][0]["results"]
                      if r["ruleId"] != "PRT011")

    before = fingerprints()
    (tmp_path / "m.py").write_text("import torch\n\n\n# moved down\nx = x.cuda()\n")
    assert fingerprints() == before


TWO_FAMILIES = '''from transformers import AutoModelForCausalLM
from apex.normalization import FusedLayerNorm

model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="flash_attention_2")
norm = FusedLayerNorm(64)
'''
APEX_ONLY = "from apex.normalization import FusedLayerNorm\n\nnorm = FusedLayerNorm(64)\n"


def test_dry_run_has_one_diff_per_file_in_path_order(tmp_path: Path) -> None:
    (tmp_path / "b.py").write_text(TWO_FAMILIES)
    (tmp_path / "a.py").write_text(APEX_ONLY)
    proc = run_porter("apply", "--dry-run", "--no-cache", str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    heads = re.findall(rb"^diff --git a/(\S+) ", proc.stdout, re.M)
    assert heads == [b"a.py", b"b.py"]
    # the single diff of b.py goes from the original straight to the final text
    assert b'+model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="sdpa")' in proc.stdout
    assert b"+norm = torch.nn.LayerNorm(64)" in proc.stdout or b"LayerNorm(64" in proc.stdout
    if shutil.which("git"):
        import subprocess

        subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
        subprocess.run(["git", "apply", "-"], cwd=tmp_path, input=proc.stdout, check=True)
        assert run_porter("apply", "--dry-run", "--no-cache", str(tmp_path)).stdout == b""


def test_stdin_dry_run_prints_a_diff() -> None:
    proc = run_porter("apply", "-", "--dry-run", "--stdin-filename", "model.py", input=TWO_FAMILIES.encode())
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith(b"diff --git a/model.py b/model.py\n")
    assert b'-model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="flash_attention_2")' \
        in proc.stdout
    assert proc.stdout.count(b"diff --git") == 1
    clean = run_porter("apply", "-", "--dry-run", "--stdin-filename", "m.py", input=b"x = 1\n")
    assert clean.returncode == 0 and clean.stdout == b""
    # without --dry-run the fixed file is printed, as before
    fixed = run_porter("apply", "-", "--stdin-filename", "model.py", input=TWO_FAMILIES.encode())
    assert fixed.returncode == 0 and b'attn_implementation="sdpa"' in fixed.stdout


def test_noqa_on_a_rewritten_site_keeps_the_generic_finding_away(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "from flash_attn import flash_attn_func\n\n\n"
        "def f(q, k, v):\n    return flash_attn_func(q, k, v, causal=True)  # noqa: PRT100\n"
    )
    proc = run_porter("audit", "--format", "json", "--no-cache", str(tmp_path))
    codes = [(f["line"], f["code"]) for f in json.loads(proc.stdout)["findings"]]
    assert all(line != 5 for line, _ in codes), codes  # neither PRT100 nor the generic PRT020


@pytest.mark.skipif(shutil.which("hipify-perl", path="/usr/bin:/bin") is not None,
                    reason="hipify-perl is installed in /usr/bin here, so it cannot be missing")
def test_missing_hipify_engine_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "k.cu").write_text("__global__ void k(float* x) { x[threadIdx.x] = 0; }\n")
    env_path = "/usr/bin:/bin"
    proc = run_porter("migrate", str(tmp_path), "--hipify", "perl", "-o", str(tmp_path.parent / "out"),
                      env={"PATH": env_path})
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert "internal error" not in err and "hipify-perl" in err and "install" in err and "--hipify torch" in err


def test_help_summary_names_every_command() -> None:
    out = run_porter("--help").stdout.decode()
    summary = out.split("Options:")[0]
    for command in ("migrate", "audit", "apply", "check", "doctor", "rules"):
        assert f"porter {command}" in summary, command


def test_rule_text_is_self_contained() -> None:
    table = json.loads(run_porter("rules", "--json").stdout)
    for rule in table:
        text = rule["explanation"] + rule["summary"]
        assert not re.search(r"§|spec\/|python-rewrites|cuda-warp-size|anchors-|playbook|\btrap \d", text), rule["code"]


def test_bnb_optimizer_messages_are_separate_sentences(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "import bitsandbytes as bnb\n\nopt = bnb.optim.Lion(params, lr=1e-4)\n"
        "opt2 = bnb.optim.AdamW8bit(params, lr=1e-4, percentile_clipping=5)\nAlias = bnb.optim.Adam8bit\n"
    )
    doc = json.loads(run_porter("audit", "--format", "json", "--no-cache", str(tmp_path)).stdout)
    messages = {f["code"]: f["message"] for f in doc["findings"] if f["code"] in {"PRT402", "PRT403"}}
    assert set(messages) == {"PRT402", "PRT403"}, doc["findings"]
    for msg in (f["message"] for f in doc["findings"] if f["code"] in {"PRT402", "PRT403"}):
        assert "; keep bitsandbytes" not in msg and "Adam keep" not in msg
        assert ". ROCm route: keep bitsandbytes" in msg and msg.endswith(".")


def test_progress_restarts_for_each_pass() -> None:
    buf = io.StringIO()
    now = [0.0]
    progress = Progress(make_console(file=buf), interval=1000.0, min_files=10, clock=lambda: now[0])
    for _ in range(2):  # migrate: the audit, then the fixes, over the same files
        for done in range(1, 21):
            now[0] += 0.5
            progress(done, 20, "x.py")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2 and all(line.startswith("porter: 20/20 files (100%), 2.0 files/s") for line in lines)


def test_tty_progress_bar_shows_done_total_and_rate() -> None:
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120, emoji=False)
    progress = Progress(console, min_files=10)
    shown = []
    for done in range(1, 31):
        progress(done, 30, "x.py")
        if progress.bar is not None:
            task = progress.bar.tasks[0]
            shown.append((task.completed, task.total))
            assert task.fields["rate"].endswith(" files/s")
    assert shown and shown[-1] == (29, 30) and progress.bar is None  # removed when the run ends
    assert "29/30" in buf.getvalue() or "30/30" in buf.getvalue()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_sarif_of_a_tree_with_a_fifo_named_like_a_source(tmp_path: Path) -> None:
    # the FIFO is reported (PRT005); the fingerprints read each reported file's lines, never a FIFO's
    (tmp_path / "model.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    os.mkfifo(tmp_path / "evil.py")
    proc = run_porter("audit", "--format", "sarif", "--no-cache", str(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {r["ruleId"] for r in doc["runs"][0]["results"]} >= {"PRT005", "PRT040"}
