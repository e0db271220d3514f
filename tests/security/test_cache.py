"""The audit cache cannot be forged by the target, cannot leave the root, heals itself, and reads
no more than max-file-size of a file (issue 17, items 4, 5, 15)."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run_porter

from porter.config import Settings
from porter.discovery import SourceRef
from porter.runner import Cache

LOCKED = "import flash_attn\n"


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "m.py").write_text(LOCKED)
    return root


def _legacy_key() -> str:
    """The file name a cache in the tree had (what a committed, forged cache would be called)."""
    return hashlib.blake2b((Settings().fingerprint() + repr([])).encode(), digest_size=8).hexdigest()


def _digest(path: Path) -> str:
    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


def test_committed_cache_does_not_make_check_pass(tmp_path: Path, cache_home: Path) -> None:
    root = _repo(tmp_path)
    forged = root / ".porter_cache"
    forged.mkdir()
    (forged / f"audit-{_legacy_key()}.json").write_text(
        json.dumps({"m.py": {"digest": _digest(root / "m.py"), "findings": [], "imports": []}}))
    proc = run_porter("check", str(root))
    assert proc.returncode == 1 and b"PRT011" in proc.stdout, (proc.stdout, proc.stderr)
    # even when the target's config points the cache at its own forged folder
    (root / "pyproject.toml").write_text('[tool.porter]\ncache-dir = ".porter_cache"\n')
    proc = run_porter("check", str(root))
    assert proc.returncode == 1 and b"PRT011" in proc.stdout, (proc.stdout, proc.stderr)


@pytest.mark.parametrize("content", ["[]", "{\"m.py\": {\"digest\": \"%s\"}}", "{\"m.py\": 5}", "\x00garbage"])
def test_corrupt_cache_is_ignored_and_rewritten(tmp_path: Path, cache_home: Path, content: str) -> None:
    root = _repo(tmp_path)
    forged = root / ".porter_cache"
    forged.mkdir()
    text = content % _digest(root / "m.py") if "%s" in content else content
    (forged / f"audit-{_legacy_key()}.json").write_text(text)
    proc = run_porter("check", str(root))
    assert proc.returncode == 1 and b"internal error" not in proc.stderr, proc.stderr
    # the user's own cache file damaged the same way heals too
    [own] = list((cache_home / "porter" / "audit").glob("audit-*.json"))
    own.write_text(text)
    os.utime(root / "m.py", ns=(1, 1))  # the warm-run record no longer vouches: the per-file cache is read
    proc = run_porter("check", str(root))
    assert proc.returncode == 1 and b"PRT011" in proc.stdout and b"internal error" not in proc.stderr
    assert own.read_bytes() != text.encode()  # rewritten, authenticated


def test_tampered_cache_entry_is_rejected(tmp_path: Path, cache_home: Path) -> None:
    root = _repo(tmp_path)
    assert run_porter("check", str(root)).returncode == 1
    [own] = list((cache_home / "porter" / "audit").glob("audit-*.json"))
    mac, _, body = own.read_bytes().partition(b"\n")
    entries = json.loads(body)
    entries["m.py"]["findings"] = []
    own.write_bytes(mac + b"\n" + json.dumps(entries, separators=(",", ":"), sort_keys=True).encode())
    proc = run_porter("check", str(root))
    assert proc.returncode == 1 and b"PRT011" in proc.stdout


def test_cache_is_used_and_lives_outside_the_tree(tmp_path: Path, cache_home: Path) -> None:
    root = _repo(tmp_path)
    assert run_porter("check", str(root)).returncode == 1
    assert sorted(p.name for p in root.iterdir()) == ["m.py"]  # nothing written into the target
    secret = cache_home / "porter" / "secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    [own] = list((cache_home / "porter" / "audit").glob("audit-*.json"))
    assert b"PRT011" in own.read_bytes()
    # a hit gives the same answer
    again = run_porter("check", str(root))
    assert again.returncode == 1 and b"PRT011" in again.stdout


def test_no_cache_reads_and_writes_nothing(tmp_path: Path, cache_home: Path) -> None:
    root = _repo(tmp_path)
    assert run_porter("check", "--no-cache", str(root)).returncode == 1
    assert not (cache_home / "porter" / "audit").exists()
    assert sorted(p.name for p in root.iterdir()) == ["m.py"]


def test_cache_symlinks_in_the_tree_are_never_followed(tmp_path: Path, cache_home: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = _repo(tmp_path)
    # a dangling .gitignore symlink inside an in-root cache folder the config chose
    (root / ".porter_cache").mkdir()
    (root / ".porter_cache" / ".gitignore").symlink_to(outside / "planted")
    (root / "pyproject.toml").write_text('[tool.porter]\ncache-dir = ".porter_cache"\n')
    assert run_porter("check", str(root)).returncode == 1
    assert not (outside / "planted").exists()
    assert list(outside.iterdir()) == []
    assert any(p.name.startswith("audit-") for p in (root / ".porter_cache").iterdir())
    # a .porter_cache symlink (the old default place) gets nothing either
    root2 = tmp_path / "repo2"
    root2.mkdir()
    (root2 / "m.py").write_text(LOCKED)
    (root2 / ".porter_cache").symlink_to(outside, target_is_directory=True)
    assert run_porter("check", str(root2)).returncode == 1
    assert list(outside.iterdir()) == []


def test_in_root_cache_file_replaced_by_symlink_is_not_written_through(tmp_path: Path, cache_home: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("keep me\n")
    root = _repo(tmp_path)
    (root / "pyproject.toml").write_text('[tool.porter]\ncache-dir = "cc"\n')
    assert run_porter("check", str(root)).returncode == 1
    [own] = [p for p in (root / "cc").iterdir() if p.name.startswith("audit-")]
    own.unlink()
    own.symlink_to(victim)
    (root / "m.py").write_text(LOCKED + "import apex\n")  # a change, so the cache is saved again
    assert run_porter("check", str(root)).returncode == 1
    assert victim.read_text() == "keep me\n"


def test_digest_reads_no_more_than_the_size_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.py"
    with open(big, "wb") as fh:
        fh.truncate(3 * 1024 * 1024 * 1024)  # sparse: 3 GiB that cost no disk
    ref = SourceRef("big.py", "python")
    assert Cache.digest(str(tmp_path), ref, 1024) is None
    (tmp_path / "small.py").write_text(LOCKED)
    assert Cache.digest(str(tmp_path), SourceRef("small.py", "python"), 1024) is not None


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS semantics are Linux's")
def test_check_on_a_huge_sparse_file_stays_small(tmp_path: Path, cache_home: Path) -> None:
    root = _repo(tmp_path)
    with open(root / "huge.py", "wb") as fh:
        fh.truncate(6 * 1024 * 1024 * 1024)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 * 1024 * 1024 * 1024, 3 * 1024 * 1024 * 1024))

    proc = subprocess.run([sys.executable, "-m", "porter", "check", "--format", "json", str(root)],
                          capture_output=True, timeout=300, preexec_fn=limit, env=dict(os.environ), check=False)
    assert proc.returncode == 1, proc.stderr
    codes = {(f["path"], f["code"]) for f in json.loads(proc.stdout)["findings"]}
    assert ("m.py", "PRT011") in codes


def test_file_changed_between_hash_and_analysis_is_not_cached(tmp_path: Path, cache_home: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from porter import runner

    root = _repo(tmp_path)
    (root / "m.py").write_text("x = 1\n")  # clean when hashed ...
    real = runner.process_file

    def edited_meanwhile(ref, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        (root / "m.py").write_text(LOCKED)  # ... locked-in when analysed
        return real(ref, *args, **kwargs)

    monkeypatch.setattr(runner, "process_file", edited_meanwhile)
    settings = Settings()
    runner.run(root, [root], settings, "audit", jobs=1)
    monkeypatch.setattr(runner, "process_file", real)
    (root / "m.py").write_text("x = 1\n")
    again = runner.run(root, [root], settings, "audit", jobs=1)
    assert [f.code for f in again.findings] == []  # not the locked-in result under the clean file's hash
