"""The installed package holds every folder of the code: a rule family's folder missing from
``pyproject.toml``'s package list would be silently absent from a wheel (editable installs hide it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_every_package_folder_is_listed() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping = config["package-dir"]
    found = set()
    for name, folder in mapping.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            if "__pycache__" in rel.parts:
                continue
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found - listed == set(), f"packages missing from pyproject.toml: {sorted(found - listed)}"
    assert listed - found == set(), f"listed packages without a folder: {sorted(listed - found)}"


def _setuptools_builds_pyproject() -> bool:
    try:
        from importlib.metadata import version

        return int(version("setuptools").split(".")[0]) >= 61  # the first release that reads [project]
    except (ImportError, ValueError, LookupError):
        return False


@pytest.mark.skipif(not _setuptools_builds_pyproject(), reason="no setuptools >= 61 to build a wheel with")
def test_a_wheel_contains_the_family_folders(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import zipfile

    # build from a copy: setuptools writes build/ and *.egg-info next to the sources
    source = tmp_path / "src"
    def ignore(folder: str, names: list[str]) -> set[str]:
        top = Path(folder) == REPO
        return {n for n in names if n in (".git", "__pycache__", ".venv", "venv") or n.endswith(".egg-info")
                or (top and n in ("build", "dist"))}

    shutil.copytree(REPO, source, ignore=ignore)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
    [wheel] = list((tmp_path / "dist").glob("*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for family in ("attention", "apex", "packages", "warp_size"):
        assert f"porter/codemods/{family}/__init__.py" in names, family
    assert "porter/codemods/attention/visitor.py" in names
    assert "porter/codemods/templates/porter_warp.h" in names or any(
        n.startswith("porter/codemods/templates/") for n in names)
