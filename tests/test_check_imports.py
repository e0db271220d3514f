"""What a ``porter check`` process loads: the heavy parts stay out when nothing in the files needs them.

A pre-commit check starts a fresh process for a handful of files, so every library it imports is
paid on every commit. These run the command line in a child process (the imports of this test
process say nothing) and read ``sys.modules`` at its end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, sys
from porter.cli import main
try:
    main(sys.argv[2:], prog_name="porter")
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""

# inventory findings on the ast tier only (a capability gate, a torch.cuda API outside porter's table)
SOURCE = ("import torch\n\n\ndef main() -> None:\n    if torch.cuda.get_device_capability() >= (8, 0):\n"
          "        torch.cuda._sleep(10)\n")


def _check(root: Path, *files: str) -> tuple[int, set[str]]:
    report = root.parent / "modules.json"
    subprocess.run([sys.executable, "-P", "-c", CHILD, str(report), "check", "--no-cache", *files],
                   cwd=root, capture_output=True, text=True, timeout=120, check=False)
    data = json.loads(report.read_text())
    return data["code"], set(data["modules"])


def test_check_without_manifests_or_libcst_triggers_loads_neither(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "train.py").write_text(SOURCE)
    code, modules = _check(root, "pkg/train.py")
    assert code == 1  # the findings are there
    assert "porter.codemods.devices" in modules
    # no manifest in the tree: neither the manifest readers nor packaging
    assert "porter.manifests" not in modules and "packaging" not in modules
    # no LibCST family's tokens or gate hold: LibCST is never imported
    assert not any(m == "libcst" or m.startswith("libcst.") for m in modules)


def test_check_with_a_manifest_reads_its_pins(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "train.py").write_text(SOURCE)
    (root / "requirements.txt").write_text("torch==2.4.0\n")
    code, modules = _check(root, "train.py")
    assert code == 1 and "porter.manifests" in modules
