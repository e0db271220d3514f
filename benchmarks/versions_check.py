"""Versions and manifests on a real checkout: what the semantic gate withheld, which pins the series
raised, and whether any changed module uses an API the nearest manifest (after the series) excludes.

    python benchmarks/versions_check.py /path/to/checkout [--unsafe]

Runs ``porter apply`` in memory (nothing is written) and prints JSON: the manifest folders
(sub-projects), the fixes applied per rule, the manifest edits, the withheld fixes with their
reasons, and "violations": changed Python modules that do not parse, add an unresolved name, or
use an API (``porter/apis.py``) whose first release the pins of their nearest manifest, as the
series leaves them, exclude. The checkout is only read; its code is never run.
"""

from __future__ import annotations

import argparse
import collections
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from porter.apis import minimum, pin_admits, requirements_for
from porter.config import Settings
from porter.gate import read_module
from porter.manifests import collect_pins, manifest_folder
from porter.runner import RunResult, run


def pins_after(result: RunResult) -> dict[str, dict[str, str]]:
    """Per manifest folder, the pins once the series is applied (ancestors fill the gaps)."""
    root = result.root
    texts: dict[str, str] = {}
    for fr in result.files:
        if fr.relpath in result.facts.manifests and fr.changed and fr.final_text is not None:
            texts[fr.relpath] = fr.final_text
    for rel in result.facts.manifests:
        if rel not in texts:
            texts[rel] = (root / rel).read_text(encoding="utf-8", errors="replace")
    by_folder: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for rel, text in texts.items():
        by_folder[manifest_folder(rel)][rel] = text
    out: dict[str, dict[str, str]] = {}
    for folder in sorted(by_folder, key=lambda f: (f.count("/") + bool(f), f)):
        parts = folder.split("/") if folder else []
        parent = next(("/".join(parts[:n]) for n in range(len(parts) - 1, -1, -1) if "/".join(parts[:n]) in out),
                      None)
        out[folder] = {**(out[parent] if parent is not None else {}), **collect_pins(by_folder[folder])}
    return out


def check(root: Path, unsafe: bool) -> dict[str, Any]:
    result = run(root, [root], replace(Settings(), unsafe_fixes=unsafe, jobs=1, cache=False), "fix")
    after = pins_after(result)
    violations = []
    python = [fr for fr in result.files if fr.changed and fr.language == "python"]
    for fr in python:
        new = read_module(fr.final_text or "")
        old = read_module(fr.stages[0].before)
        if new is None or old is None:
            violations.append(f"{fr.relpath}: does not parse")
            continue
        if new.unresolved - old.unresolved:
            violations.append(f"{fr.relpath}: unresolved {sorted(new.unresolved - old.unresolved)}")
        folder = result.facts.scope_of(fr.relpath)
        pins = after.get(folder, {}) if folder is not None else {}
        for dist, (req, why) in requirements_for(new.symbols - old.symbols).items():
            pin, floor = pins.get(dist), minimum(req)
            if pin is not None and floor is not None and not pin_admits(pin, floor):
                violations.append(f"{fr.relpath}: {why} needs {req}, {folder or 'the root'} pins {dist}{pin}")
    return {
        "mode": "unsafe" if unsafe else "safe",
        "manifest_folders": sorted(result.facts.scopes),
        "applied": dict(collections.Counter(f.code for f in result.fixed)),
        "python_files_changed": len(python),
        "manifest_edits": [f"{f.path}:{f.line} {f.code} {f.message}" for fr in result.files
                           if fr.changed and (fr.language != "python" or fr.relpath.endswith("setup.py"))
                           for f in fr.fixed],
        "withheld": [f"{f.path}:{f.line} {f.code}: {f.data['withheld']}" for f in result.findings
                     if "withheld" in f.data],
        "violations": violations,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--unsafe", action="store_true", help="include unsafe fixes")
    args = parser.parse_args()
    print(json.dumps(check(args.root.resolve(), args.unsafe), indent=1))


if __name__ == "__main__":
    main()
