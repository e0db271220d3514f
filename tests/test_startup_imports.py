"""What a C++-only audit loads: porter's C++ pass (`porter audit --select PRT5` on a CUDA tree) is
measured as a whole process, start-up included, so it must not import what it does not use: the
LibCST tier, rich (nothing is printed on a console for a JSON report of a small tree), the manifest
parsers (no manifest in the tree), pathspec (no .gitignore; the default excludes are folder names),
and it must compile no tree-sitter query."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

KERNEL = """\
#define FULL_MASK 0xffffffff
__global__ void k(float *out, float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}
"""

# runs porter's command line in a fresh interpreter, then reports what it imported and how many
# tree-sitter queries it compiled
CHILD = textwrap.dedent("""\
    import contextlib, io, json, sys
    import tree_sitter
    compiled = []
    real_query = tree_sitter.Query
    def counting_query(*args, **kwargs):
        compiled.append(1)
        return real_query(*args, **kwargs)
    tree_sitter.Query = counting_query
    from porter.cli import main
    out = io.StringIO()
    code = None
    with contextlib.redirect_stdout(out):
        try:
            main(sys.argv[1:])
        except SystemExit as exc:
            code = exc.code
    print(json.dumps({"code": code, "report": json.loads(out.getvalue()), "modules": sorted(sys.modules),
                      "queries": len(compiled)}))
    """)


def _audit(tmp_path: Path, *args: str) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("PORTER_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, "audit", *args], cwd=tmp_path / "tree", env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _tops(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_a_cpp_only_audit_loads_only_what_the_cpp_pass_needs(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "csrc").mkdir(parents=True)
    (tree / "csrc" / "reduce.cu").write_text(KERNEL, encoding="utf-8")
    (tree / "csrc" / "plain.cpp").write_text("int add(int a, int b) { return a + b; }\n", encoding="utf-8")
    got = _audit(tmp_path, "--no-cache", "--select", "PRT5", "--format", "json", "-j", "1", ".")
    assert got["code"] == 0
    codes = sorted(f["code"] for f in got["report"]["findings"])
    assert "PRT501" in codes and all(c.startswith("PRT5") for c in codes)
    tops = _tops(got["modules"])
    heavy = {"libcst", "rich", "packaging", "pathspec"}
    assert not tops & heavy, sorted(tops & heavy)
    assert "porter.manifests" not in got["modules"] and "porter.patchset" not in got["modules"]  # no patches
    assert got["queries"] == 0


def test_a_tree_with_a_manifest_still_reads_its_pins(tmp_path: Path) -> None:
    """The manifest parsers load when the tree has a manifest (the lazy import changes nothing else)."""
    tree = tmp_path / "tree"
    (tree / "csrc").mkdir(parents=True)
    (tree / "csrc" / "reduce.cu").write_text(KERNEL, encoding="utf-8")
    (tree / "requirements.txt").write_text("torch==2.4.0\n", encoding="utf-8")
    got = _audit(tmp_path, "--no-cache", "--select", "PRT5", "--format", "json", "-j", "1", ".")
    assert "porter.manifests" in got["modules"]
    assert "PRT501" in {f["code"] for f in got["report"]["findings"]}


def test_a_gitignore_still_excludes(tmp_path: Path) -> None:
    """pathspec loads when the walked tree has a .gitignore (the lazy import changes nothing else)."""
    tree = tmp_path / "tree"
    (tree / "csrc" / "gen").mkdir(parents=True)
    (tree / "csrc" / "reduce.cu").write_text(KERNEL, encoding="utf-8")
    (tree / "csrc" / "gen" / "copy.cu").write_text(KERNEL, encoding="utf-8")
    (tree / "build").mkdir()
    (tree / "build" / "old.cu").write_text(KERNEL, encoding="utf-8")  # a default exclude
    (tree / ".gitignore").write_text("gen/\n", encoding="utf-8")
    got = _audit(tmp_path, "--no-cache", "--select", "PRT5", "--format", "json", "-j", "1", ".")
    assert "pathspec" in _tops(got["modules"])
    assert {f["path"] for f in got["report"]["findings"]} == {"csrc/reduce.cu"}
