"""Smoke test of benchmarks/run.py: it runs end to end on a tiny tree and prints its tables.

Not a timed test: nothing here looks at the numbers, only at the report's shape.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "run.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the benchmark reads /proc")

MODEL = '''\
import torch


def main() -> None:
    model = torch.nn.Linear(4, 4).cuda()
    x = torch.zeros(2, 4, device="cuda")
    print(torch.cuda.get_device_name(0), model(x).sum())
'''

KERNEL = '''\
__global__ void reduce(float* out, const float* in) {
    float v = in[threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) {
        v += __shfl_down_sync(0xffffffff, v, offset);
    }
    if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}
'''


def _tiny_tree(root: Path) -> Path:
    tree = root / "tiny"
    (tree / "pkg").mkdir(parents=True)
    (tree / "csrc").mkdir()
    (tree / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tree / "pkg" / "model.py").write_text(MODEL, encoding="utf-8")
    (tree / "csrc" / "reduce.cu").write_text(KERNEL, encoding="utf-8")
    (tree / "requirements.txt").write_text("torch==2.4.0+cu121\nflash-attn==2.6.3\n", encoding="utf-8")
    return tree


def test_quick_run_prints_the_table(tmp_path: Path) -> None:
    tree = _tiny_tree(tmp_path)
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--trees", str(tree), "--jobs", "1", "--no-hipify",
         "--slowest", "2", "--scratch", str(tmp_path / "scratch"), "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    text = proc.stdout
    header = next(line for line in text.splitlines() if line.startswith("tree "))
    for column in ("tool", "-j", "runs", "wall s", "files/s", "lines/s", "max RSS MiB", "tree RSS MiB", "ratio"):
        assert column in header
    for tool in ("grep audit (playbook)", "porter audit (cold)", "porter audit (warm cache)",
                 "porter apply --dry-run", "C++ pass (audit --select PRT5)", "porter check (2 files)"):
        assert tool in text, tool
    assert "× grep" in text
    listed = text.split("slowest files:", 1)[1]
    assert any(name in listed for name in ("pkg/model.py", "csrc/reduce.cu", "requirements.txt", "pkg/__init__.py"))
    # the tiny tree: 4 files porter analyses (two Python files, one kernel, one requirements file)
    assert "tiny: 4 files (1 C/C++/CUDA)" in text

    md = out.read_text(encoding="utf-8")
    assert md.startswith("# porter benchmarks")
    assert "Machine: " in md and "cores" in md
    assert "| tree | tool | -j | runs | wall s |" in md
    assert "| tiny | grep audit (playbook) | 1 | 1 |" in md
    assert "## Targets" in md
    assert "## Where porter spends its time" in md
    # the scratch copy is the only thing written; the source tree is left as it was
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()) == [
        "csrc/reduce.cu", "pkg/__init__.py", "pkg/model.py", "requirements.txt"]
