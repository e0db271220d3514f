"""Python's warnings about the target's own code (an invalid escape in a string) are not porter's
output: on Python 3.12+ ``ast.parse`` prints them as ``<unknown>:N: SyntaxWarning`` once per site."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SOURCE = 'import re\nimport torch\npat = re.compile("\\d+")\nx = torch.zeros(1).cuda()\n'


def test_the_targets_invalid_escapes_print_nothing(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(SOURCE)
    # -W always: the warning Python 3.11 files as a DeprecationWarning is shown like 3.12's SyntaxWarning
    p = subprocess.run([sys.executable, "-W", "always", "-m", "porter", "audit", "--format", "concise",
                        "--no-cache", "m.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "m.py:4:5: PRT040" in p.stdout, (p.stdout, p.stderr)
    assert "escape" not in p.stderr and "Warning" not in p.stderr, p.stderr


def test_under_w_error_the_file_is_still_analysed(tmp_path: Path) -> None:
    # the warning turned into an error made ast.parse fail: the file's ast-tier findings vanished
    (tmp_path / "m.py").write_text(SOURCE)
    p = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-W", "error::SyntaxWarning",
                        "-m", "porter", "audit", "--format", "concise", "--no-cache", "m.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "m.py:4:5: PRT040" in p.stdout, (p.stdout, p.stderr)


def test_a_setup_py_with_an_invalid_escape_still_gives_its_pins(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text('from setuptools import setup\nNOTE = "\\d"\n'
                                       'setup(name="x", install_requires=["torch==2.1.0"])\n')
    p = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-W", "error::SyntaxWarning",
                        "-c", "from porter.manifests import setup_py_requirements; import sys;"
                        "print(setup_py_requirements(sys.stdin.read()))"],
                       input=(tmp_path / "setup.py").read_text(), capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "['torch==2.1.0']", (p.stdout, p.stderr)
