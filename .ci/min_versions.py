"""Install porter's declared minimum dependency versions in a fresh venv and run the CLI contract tests.

Every core dependency in pyproject.toml is pinned to its ``>=`` floor (``name==floor``), so a floor
that is too low fails here instead of on a user's machine. Usage: ``python3 .ci/min_versions.py
[VENV_DIR]`` (default: a temporary directory). Exit status is pytest's.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/test_cli_contract.py", "tests/test_cli_output.py"]
# the test runner itself: any current release (it does not constrain porter's own floors)
RUNNER = ["pytest>=8"]


def floors(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """``name==floor[; marker]`` for every core dependency; a dependency without a floor is an error."""
    deps = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    pins = []
    for dep in deps:
        spec, _, marker = dep.partition(";")
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\-\[\]]+)\s*>=\s*([^,\s]+)\s*", spec)
        if m is None:
            raise SystemExit(f"dependency {dep!r} has no single '>=' floor to test")
        pins.append(f"{m.group(1)}=={m.group(2)}" + (f";{marker}" if marker else ""))
    return pins


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="porter-minvers-") as tmp:
        env_dir = Path(argv[0]) if argv else Path(tmp) / "venv"
        venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
        py = str(env_dir / "bin" / "python")
        pins = floors()
        print("minimum versions:", " ".join(pins), flush=True)
        pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *pins, *RUNNER], check=True)
        subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], check=True)
        subprocess.run([py, "-m", "pip", "check"], check=True)
        subprocess.run([py, "-m", "pip", "list", "--format=freeze"], check=True)
        return subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *TESTS],
                              cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
