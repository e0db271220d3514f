"""The same files give the same findings audited alone or in a tree, serially or in parallel."""

from __future__ import annotations

import shutil
from pathlib import Path

from porter import runner
from porter.config import Settings
from porter.findings import Finding
from porter.runner import SERIAL_THRESHOLD

FIXTURES = Path(__file__).parent / "fixtures"
FAMILIES = ("device_audit", "kernels", "packages")


def _key(f: Finding) -> tuple[object, ...]:
    return (f.path, f.line, f.column, f.end_line, f.end_column, f.code, f.message, f.fix.value)


def _build(root: Path) -> list[str]:
    """A tree made of this task's fixture inputs, copied into several directories (enough files
    for the runner to use its process pool)."""
    files: list[str] = []
    inputs = [p for fam in FAMILIES for p in sorted((FIXTURES / fam).glob("*.in.*"))]
    copies = max(1, -(-(SERIAL_THRESHOLD + 4) // len(inputs)))
    for i in range(copies):
        for src in inputs:
            name = src.name.replace(".in.", ".")
            rel = f"d{i}/{src.parent.name}/{name}"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, root / rel)
            files.append(rel)
    return files


def _audit(root: Path, paths: list[Path], jobs: int) -> list[Finding]:
    result = runner.run(root, paths, Settings(cache=False), "audit", jobs=jobs, use_cache=False)
    return result.findings


def test_alone_tree_serial_parallel(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    files = _build(root)
    assert len(files) >= SERIAL_THRESHOLD
    serial = sorted(map(_key, _audit(root, [root], jobs=1)))
    parallel = sorted(map(_key, _audit(root, [root], jobs=2)))
    assert serial, "the tree must produce findings"
    assert serial == parallel
    # every distinct input, audited alone, gives exactly its share of the tree's findings
    for rel in [r for r in files if r.startswith("d0/")]:
        alone = sorted(map(_key, _audit(root, [root / rel], jobs=1)))
        assert alone == [k for k in serial if k[0] == rel], rel
