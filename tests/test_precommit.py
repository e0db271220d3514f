"""porter's pre-commit hooks (.pre-commit-hooks.yaml), run by the real pre-commit.

``test_try_repo_offline`` runs ``pre-commit try-repo <porter> `` in a throw-away git repository
with a CUDA-only change staged. pre-commit builds the hook's virtualenv with pip, so the test
first builds a local wheelhouse and sets ``PIP_NO_INDEX=1`` / ``PIP_FIND_LINKS``: it works with no
network. The wheels are re-packed from the distributions installed in this interpreter (setuptools
for porter's build backend, then porter's dependencies and theirs), because ``pip download``
cannot produce them offline and pip keeps no wheel cache for packages installed from PyPI.

``try-repo`` of a work tree with uncommitted changes clones them too ("shadow repo"), so the test
exercises the hooks as they are in this checkout.

``test_local_hooks`` runs the same entries as a ``repo: local`` hook with the installed ``porter``
(``language: unsupported``, no environment to build): it covers the hook contract cheaply, and
still runs where the wheelhouse cannot be built.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
from packaging.markers import default_environment  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / ".pre-commit-hooks.yaml"

pytestmark = pytest.mark.slow

LOCKED_IN = '''\
import flash_attn
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="flash_attention_2")
'''
# the switch goes to SDPA, and the unused CUDA-only import goes with it (removing a dead import is exact)
FIXED = LOCKED_IN.replace('"flash_attention_2"', '"sdpa"').replace("import flash_attn\n", "")
CLEAN = "import torch\n\nx = torch.zeros(3, device='cpu')\n"


# -- helpers ----------------------------------------------------------------------------------


def _precommit_cmd() -> list[str]:
    if importlib.util.find_spec("pre_commit") is not None:
        return [sys.executable, "-m", "pre_commit"]
    exe = shutil.which("pre-commit")
    if exe is None:
        pytest.skip("pre-commit is not installed")
    return [exe]


def _precommit_version(cmd: list[str]) -> tuple[int, ...]:
    out = subprocess.run([*cmd, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _require_git() -> str:
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    return git


def _hooks() -> dict[str, dict]:
    return {h["id"]: h for h in yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))}


def _base_env(tmp: Path) -> dict[str, str]:
    """An environment that keeps pre-commit, pip, virtualenv and git inside ``tmp``."""
    drop = ("PRE_COMMIT", "PIP_", "VIRTUALENV_", "GIT_", "PYTHONPATH", "PYTEST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    for name in ("tmp", "home", "pre-commit", "appdata", "xdg-cache", "pip-cache"):
        (tmp / name).mkdir(exist_ok=True)
    env.update(
        TMPDIR=str(tmp / "tmp"),
        PRE_COMMIT_HOME=str(tmp / "pre-commit"),
        VIRTUALENV_OVERRIDE_APP_DATA=str(tmp / "appdata"),
        VIRTUALENV_NO_PERIODIC_UPDATE="1",
        XDG_CACHE_HOME=str(tmp / "xdg-cache"),
        PIP_CACHE_DIR=str(tmp / "pip-cache"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PRE_COMMIT_COLOR="never",
        GIT_AUTHOR_NAME="porter test",
        GIT_AUTHOR_EMAIL="porter@example.invalid",
        GIT_COMMITTER_NAME="porter test",
        GIT_COMMITTER_EMAIL="porter@example.invalid",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def _git(repo: Path, env: dict[str, str], *args: str) -> str:
    return subprocess.run([_require_git(), *args], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout


def _target_repo(tmp: Path, env: dict[str, str]) -> Path:
    """A git repo with one clean commit and a staged CUDA-only change."""
    repo = tmp / "target"
    repo.mkdir()
    _git(repo, env, "init", "-q")
    (repo / "clean.py").write_text(CLEAN, encoding="utf-8")
    _git(repo, env, "add", "clean.py")
    _git(repo, env, "commit", "-q", "-m", "initial")
    (repo / "app").mkdir()
    (repo / "app" / "load.py").write_text(LOCKED_IN, encoding="utf-8")
    (repo / "NOTES.md").write_text('We used attn_implementation="flash_attention_2" before.\n', encoding="utf-8")
    _git(repo, env, "add", "app/load.py", "NOTES.md")
    return repo


def _run(cmd: list[str], repo: Path, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)


# -- wheelhouse from installed distributions ------------------------------------------------------


class WheelhouseError(Exception):
    pass


def _wheel_tag(dist: metadata.Distribution) -> str:
    wheel = dist.read_text("WHEEL")
    tags = [line.split(":", 1)[1].strip() for line in (wheel or "").splitlines() if line.startswith("Tag:")]
    if not tags:
        raise WheelhouseError(f"{dist.metadata['Name']} {dist.version} was not installed from a wheel")
    return tags[0]


def repack_wheel(dist: metadata.Distribution, out_dir: Path) -> Path:
    """Rebuild a wheel from an installed distribution's RECORD (files outside site-packages such
    as console scripts are left out: pip recreates scripts from entry_points.txt)."""
    name = dist.metadata["Name"]
    files = dist.files
    if not files:
        raise WheelhouseError(f"{name} {dist.version} has no RECORD")
    info_dirs = {f.parts[0] for f in files if f.parts and f.parts[0].endswith(".dist-info")}
    if len(info_dirs) != 1:
        raise WheelhouseError(f"{name} {dist.version}: cannot find its .dist-info directory")
    info = info_dirs.pop()
    target = out_dir / f"{re.sub(r'[-_.]+', '_', name)}-{dist.version}-{_wheel_tag(dist)}.whl"
    record = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            rel = f.as_posix()
            if rel.startswith("../") or "__pycache__" in f.parts or rel.endswith(".pyc"):
                continue
            if f.parts[0] == info and f.name in {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}:
                continue
            path = Path(dist.locate_file(f))
            if not path.is_file():
                continue
            data = path.read_bytes()
            zf.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{rel},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return target


def _requirements_closure(requirements: list[str]) -> list[metadata.Distribution]:
    env = default_environment()
    seen: dict[str, metadata.Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key in seen:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise WheelhouseError(f"{req.name} is not installed, so no wheel can be built offline") from None
        if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
            raise WheelhouseError(f"installed {req.name} {dist.version} does not satisfy {req}")
        seen[key] = dist
        todo.extend(Requirement(r) for r in dist.requires or [])
    return list(seen.values())


def build_wheelhouse(out_dir: Path) -> list[Path]:
    """Wheels for porter's build backend and runtime dependencies, from this interpreter."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    reqs = list(project["build-system"]["requires"]) + list(project["project"].get("dependencies", []))
    out_dir.mkdir(parents=True, exist_ok=True)
    return [repack_wheel(d, out_dir) for d in _requirements_closure(reqs)]


# -- tests ------------------------------------------------------------------------------------


def test_manifest_follows_pre_commit_conventions() -> None:
    load_manifest = pytest.importorskip("pre_commit.clientlib").load_manifest

    hooks = {h["id"]: h for h in load_manifest(str(MANIFEST))}
    assert set(hooks) == {"porter-check", "porter-fix"}
    # `--` ends porter's options: a staged file named `--select=PRT999.py` is a file (issue 17)
    assert hooks["porter-check"]["entry"] == "porter check --force-exclude --"
    assert hooks["porter-fix"]["entry"] == "porter apply --force-exclude --"
    for hook in hooks.values():
        assert hook["language"] == "python"
        assert hook["require_serial"] is True
        assert hook["minimum_pre_commit_version"] != "0"


def test_manifest_selects_what_porter_analyses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_mod = pytest.importorskip("pre_commit.commands.run")
    Classifier, filter_by_include_exclude = run_mod.Classifier, run_mod.filter_by_include_exclude

    from porter import languages

    names = ["a.py", "b.pyi", "k.cu", "k.cuh", "k.hip", "K.CU", "x.cpp", "x.cc", "x.h", "x.hpp", "x.c",
             "x.inl", "README.md", "requirements.txt", "Dockerfile", "run.sh", "setup.cfg", "cu"]
    for n in names:
        (tmp_path / n).write_text("int x;\n", encoding="utf-8")
    expected = {n for n in names if languages.detect(n) in {languages.PYTHON, languages.CUDA}}
    assert {"k.cuh", "k.hip", "K.CU"} <= expected
    monkeypatch.chdir(tmp_path)
    for hook in _hooks().values():
        files = list(filter_by_include_exclude(names, hook["files"], hook.get("exclude", "^$")))
        chosen = set(Classifier(files).by_types(files, hook.get("types", ["file"]), hook.get("types_or", []), []))
        assert chosen == expected, hook["id"]


def test_local_hooks(tmp_path: Path) -> None:
    """The manifest's entries and file selection, run as local hooks with the installed porter."""
    porter = shutil.which("porter")
    if porter is None:
        pytest.skip("the porter console script is not on PATH")
    cmd = _precommit_cmd()
    env = _base_env(tmp_path)
    repo = _target_repo(tmp_path, env)
    # `system` was renamed `unsupported` in pre-commit 4.4
    language = "unsupported" if _precommit_version(cmd) >= (4, 4) else "system"
    local = []
    for hook in _hooks().values():
        local.append({key: hook[key] for key in ("id", "name", "files", "types", "require_serial")}
                     | {"entry": f"{shlex.quote(porter)} {hook['entry'].split(' ', 1)[1]}", "language": language})
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump({"repos": [{"repo": "local", "hooks": local}]}))

    check = _run([*cmd, "run", "porter-check"], repo, env)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "PRT030" in check.stdout and "PRT011" in check.stdout, check.stdout
    assert "NOTES.md" not in check.stdout and "clean.py" not in check.stdout

    fix = _run([*cmd, "run", "porter-fix"], repo, env)
    assert fix.returncode == 1, fix.stdout + fix.stderr  # pre-commit fails a hook that modifies files
    assert "files were modified by this hook" in fix.stdout
    assert (repo / "app" / "load.py").read_text(encoding="utf-8") == FIXED
    assert "flash_attention_2" in (repo / "NOTES.md").read_text(encoding="utf-8")

    _git(repo, env, "add", "app/load.py")
    again = _run([*cmd, "run", "porter-check"], repo, env)
    assert again.returncode == 0, again.stdout  # the fix removed the last lock-in (the unused import too)
    assert "PRT030" not in again.stdout and "PRT011" not in again.stdout, again.stdout
    fix_again = _run([*cmd, "run", "porter-fix"], repo, env)
    assert fix_again.returncode == 0, fix_again.stdout  # nothing left to fix: the hook passes


def test_try_repo_offline(tmp_path: Path) -> None:
    """``pre-commit try-repo`` builds the hook env from a local wheelhouse only (no network)."""
    cmd = _precommit_cmd()
    env = _base_env(tmp_path)
    try:
        wheels = build_wheelhouse(tmp_path / "wheelhouse")
    except WheelhouseError as exc:
        pytest.skip(f"cannot build an offline wheelhouse: {exc}")
    assert any(w.name.startswith("setuptools-") for w in wheels)
    # PIP_COMPILE=0: skip byte-compiling the hook env (it is thrown away after the test)
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path / "wheelhouse"), PIP_COMPILE="0")
    repo = _target_repo(tmp_path, env)

    # No hook id: both hooks run, in id order (porter-check, then porter-fix), sharing one
    # environment build. The check reports on the staged file, then the fix rewrites it.
    proc = _run([*cmd, "try-repo", str(ROOT), "--verbose"], repo, env)
    out = proc.stdout + proc.stderr
    assert "Could not find a version" not in out and "No matching distribution" not in out, out[-4000:]
    assert proc.returncode == 1, out[-4000:]
    hooks = _hooks()
    check_name, fix_name = hooks["porter-check"]["name"], hooks["porter-fix"]["name"]
    check_out, _, fix_out = out.partition(fix_name)
    assert re.search(re.escape(check_name) + r"\.+Failed", check_out), out[-4000:]
    assert re.search(r"^\.+Failed", fix_out), out[-4000:]
    assert "PRT030" in check_out and "PRT011" in check_out, out[-4000:]
    assert 'attn_implementation "flash_attention_2" needs flash-attn' in check_out
    assert "files were modified by this hook" in fix_out, out[-4000:]
    assert (repo / "app" / "load.py").read_text(encoding="utf-8") == FIXED
    assert (repo / "clean.py").read_text(encoding="utf-8") == CLEAN
