"""Configuration is untrusted input (issue 17, items 3, 4, 16, 18 and siblings).

Every path a config names is contained in the root or it is a config error (exit 2); a broken
config is a clear config error, never an "internal error" and never silently ignored.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_porter

from porter import runner
from porter.config import ConfigRequest, Settings, from_table, resolve
from porter.engine import fix

GATE = "import torch\n\nuse_bf16 = torch.cuda.get_device_capability()[0] >= 8\n"
KERNEL = ("__global__ void k(float* o, float v) {\n"
          "  unsigned m = __ballot_sync(0xffffffff, v > 0.f);\n"
          "  o[threadIdx.x] = __popc(m);\n}\n")


def _repo(tmp_path: Path, config: str) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "a" / "b" / "repo"
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(config)
    (root / "model.py").write_text(GATE)
    (root / "k.cu").write_text(KERNEL)
    return root, outside


def _files_outside(tmp_path: Path, root: Path) -> list[Path]:
    return sorted(p for p in tmp_path.rglob("*") if p.is_file() and root not in p.parents)


def test_devices_path_leaving_the_root_is_a_config_error(tmp_path: Path) -> None:
    root, _ = _repo(tmp_path, '[tool.porter.devices]\npath = "../../x.py"\n')
    before = _files_outside(tmp_path, root)
    for args in (("apply", "--dry-run", "--no-cache"), ("apply", "--no-cache"), ("migrate", "--dry-run")):
        proc = run_porter(*args, str(root))
        assert proc.returncode == 2, (args, proc.stderr)
        assert b"config error" in proc.stderr and b"leaves the root" in proc.stderr, proc.stderr
    assert _files_outside(tmp_path, root) == before
    assert not (tmp_path / "a" / "x.py").exists()


@pytest.mark.parametrize("value", ["/etc/porter_device.py", "..", "sub/../../x.py", "C:/x.py"])
def test_every_escaping_devices_path_is_refused(tmp_path: Path, value: str) -> None:
    root, _ = _repo(tmp_path, f'[tool.porter.devices]\npath = "{value}"\n')
    proc = run_porter("apply", "--dry-run", "--no-cache", str(root))
    assert proc.returncode == 2 and b"config error" in proc.stderr, proc.stderr


def test_warp_header_dir_leaving_the_root_is_a_config_error(tmp_path: Path) -> None:
    root, _ = _repo(tmp_path, '[tool.porter.warp_size]\nheader-dir = "../../inc"\n')
    proc = run_porter("apply", "--no-cache", str(root))
    assert proc.returncode == 2 and b"config error" in proc.stderr, proc.stderr
    assert not (tmp_path / "a" / "inc").exists()
    assert "__ballot_sync" in (root / "k.cu").read_text()  # nothing half-applied


def test_configured_path_through_an_in_root_symlink_is_refused(tmp_path: Path) -> None:
    root, outside = _repo(tmp_path, '[tool.porter.devices]\npath = "lib/porter_device.py"\n')
    (root / "lib").symlink_to(outside, target_is_directory=True)
    proc = run_porter("apply", "--no-cache", str(root))
    assert proc.returncode == 2 and b"symlink" in proc.stderr, proc.stderr
    assert list(outside.iterdir()) == []


def test_engine_never_creates_a_file_outside_the_root_even_unchecked() -> None:
    # from_table alone does not check paths: the engine itself refuses such a fix
    settings = from_table({"devices": {"path": "../../x.py"}})
    out = fix("model.py", GATE, "python", settings)
    assert out.new_files == {} and out.text == GATE
    assert any(f.code == "PRT007" and "not a plain path" in f.message for f in out.remaining)


def test_cache_dir_in_the_targets_config_must_stay_in_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    for value in (str(outside), "../elsewhere"):
        root = tmp_path / f"repo{len(value)}"
        root.mkdir()
        (root / "pyproject.toml").write_text(f'[tool.porter]\ncache-dir = "{value}"\n')
        (root / "m.py").write_text("import flash_attn\n")
        proc = run_porter("check", str(root))
        assert proc.returncode == 2 and b"cache-dir" in proc.stderr, proc.stderr
    assert not outside.exists()


def test_cache_dir_symlinked_out_of_the_root_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    root = tmp_path / "repo"
    root.mkdir()
    (root / "c").symlink_to(outside, target_is_directory=True)
    (root / "pyproject.toml").write_text('[tool.porter]\ncache-dir = "c"\n')
    (root / "m.py").write_text("import flash_attn\n")
    proc = run_porter("check", str(root))
    assert proc.returncode == 2 and b"symlink" in proc.stderr, proc.stderr
    assert list(outside.iterdir()) == []


def test_invalid_pyproject_holding_tool_porter_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.porter]\nignore = ["PRT011"\n')
    (tmp_path / "m.py").write_text("import flash_attn\n")
    proc = run_porter("check", "--no-cache", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert b"config error" in proc.stderr and b"invalid TOML" in proc.stderr


def test_invalid_pyproject_without_porter_is_reported_not_silent(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project\nname = "x"\n')
    (tmp_path / "m.py").write_text("import flash_attn\n")
    proc = run_porter("check", "--no-cache", str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert b"not valid TOML" in proc.stderr


@pytest.mark.parametrize("text", ["[tool]\nporter = 5\n", "tool = 3\n", '[tool]\nporter = ["x"]\n'])
def test_tool_porter_of_the_wrong_type_is_a_config_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "m.py").write_text("import flash_attn\n")
    proc = run_porter("check", "--no-cache", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert b"config error" in proc.stderr and b"internal error" not in proc.stderr


def test_porter_toml_symlinked_out_of_the_root_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.toml"
    secret.write_text('[tool.porter]\nignore = ["ALL"]\n')
    root = tmp_path / "repo"
    root.mkdir()
    (root / "porter.toml").symlink_to(secret)
    (root / "m.py").write_text("import flash_attn\n")
    proc = run_porter("check", "--no-cache", str(root))
    assert proc.returncode == 2 and b"outside the root" in proc.stderr, proc.stderr


def test_pyproject_symlinked_out_of_the_root_is_ignored_with_a_warning(tmp_path: Path) -> None:
    shared = tmp_path / "shared.toml"
    shared.write_text('[tool.porter]\nignore = ["ALL"]\n')
    root = tmp_path / "repo"
    root.mkdir()
    (root / "pyproject.toml").symlink_to(shared)
    (root / "m.py").write_text("import flash_attn\n")
    proc = run_porter("check", "--no-cache", str(root))
    assert proc.returncode == 1 and b"PRT011" in proc.stdout  # the outside file's ignore=ALL was not used
    assert b"symlink to outside the root" in proc.stderr


def test_max_file_size_from_a_config_has_a_ceiling(tmp_path: Path) -> None:
    root = tmp_path
    (root / "pyproject.toml").write_text("[tool.porter]\nmax-file-size = 1000000000000\n")
    with pytest.raises(Exception, match="at most"):
        resolve(root, ConfigRequest())


def test_jobs_are_capped_at_cpus_and_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(30):
        (tmp_path / f"m{i}.py").write_text("import flash_attn\n")
    seen: list[int] = []

    class FakePool:
        def __init__(self, max_workers: int, initializer, initargs, mp_context=None) -> None:  # noqa: ANN001
            seen.append(max_workers)
            root, settings, facts, mode = initargs  # what a worker gets, without its signal setup
            runner._STATE.update(root=root, settings=settings, facts=facts, mode=mode)

        def __enter__(self) -> FakePool:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def map(self, fn, items, chunksize=1):  # noqa: ANN001, ANN201
            return [fn(i) for i in items]

    import concurrent.futures

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", FakePool)  # the runner imports it when it pools
    monkeypatch.setattr(runner, "usable_cpus", lambda: 2)
    settings = from_table({"jobs": 150}, Settings(cache=False))
    result = runner.run(tmp_path, [tmp_path], settings, "audit", use_cache=False)
    assert result.files_scanned == 30
    assert seen == [2]
    monkeypatch.setattr(runner, "usable_cpus", lambda: 64)
    runner.run(tmp_path, [tmp_path], settings, "audit", use_cache=False)
    assert seen[-1] == 30



def test_deeply_nested_pyproject_is_not_an_internal_error(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import flash_attn\n")
    deep = "[" * 50000 + "]" * 50000
    (tmp_path / "pyproject.toml").write_text(f"[project]\nx = {deep}\n")
    proc = run_porter("check", "--no-cache", str(tmp_path))
    assert proc.returncode == 1 and b"not valid TOML" in proc.stderr, proc.stderr
    (tmp_path / "pyproject.toml").write_text(f"[tool.porter]\nselect = {deep}\n")
    proc = run_porter("check", "--no-cache", str(tmp_path))
    assert proc.returncode == 2 and b"config error" in proc.stderr, proc.stderr


def test_exponential_exclude_pattern_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / ("a" * 200 + ".py")).write_text("import flash_attn\n")
    (tmp_path / "pyproject.toml").write_text('[tool.porter]\nexclude = ["' + "*a" * 25 + 'b"]\n')
    proc = run_porter("check", "--no-cache", str(tmp_path), timeout=60)
    assert proc.returncode == 2 and b"too slow to match" in proc.stderr, proc.stderr


def test_exponential_gitignore_pattern_does_not_hang_discovery(tmp_path: Path) -> None:
    (tmp_path / ("a" * 200 + ".py")).write_text("import flash_attn\n")
    (tmp_path / ".gitignore").write_text("*a" * 25 + "b\n*.log\n")
    (tmp_path / "x.log.py").write_text("import flash_attn\n")
    proc = run_porter("check", "--no-cache", str(tmp_path), timeout=60)
    assert proc.returncode == 1 and b"aaaa" in proc.stdout, proc.stderr


def test_tame_patterns_still_work() -> None:
    from porter.config import pattern_is_tame

    for ok in ("*.py[cod]", "**/build/*-*.o", "third_party/", ".*.sw?", "*_*_*.txt"):
        assert pattern_is_tame(ok), ok
    assert not pattern_is_tame("*a*b*c*d")


@pytest.mark.parametrize("value", ["inf", "nan", "1e308", "1e-300"])
def test_timeout_that_would_crash_or_disable_the_limit_is_a_config_error(tmp_path: Path, value: str) -> None:
    (tmp_path / "m.py").write_text("import flash_attn\n")
    (tmp_path / "pyproject.toml").write_text(f"[tool.porter]\ntimeout = {value}\n")
    proc = run_porter("check", "--no-cache", str(tmp_path))
    assert proc.returncode == 2 and b"config error" in proc.stderr and b"timeout" in proc.stderr, proc.stderr
    (tmp_path / "pyproject.toml").unlink()
    proc = run_porter("check", "--no-cache", "--timeout", value, str(tmp_path))
    assert proc.returncode == 2 and b"config error" in proc.stderr, proc.stderr
