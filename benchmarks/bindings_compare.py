"""Compare two `porter check --format json` runs of one repository (before/after a change).

Usage: python benchmarks/bindings_compare.py BEFORE.json AFTER.json
Prints the findings only one side has (code, path:line, fix, message), then counts per code.
"""

from __future__ import annotations

import json
import sys
from collections import Counter


def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    return data["findings"] if isinstance(data, dict) else data


def key(f: dict) -> tuple:
    return (f["path"], f["line"], f["code"], f.get("fix"), f["message"])


def main(before_path: str, after_path: str) -> None:
    before, after = load(before_path), load(after_path)
    kb, ka = Counter(map(key, before)), Counter(map(key, after))
    for label, only in (("only before", kb - ka), ("only after", ka - kb)):
        print(f"## {label}: {sum(only.values())}")
        for (path, line, code, fix, message) in sorted(only):
            print(f"{code} {path}:{line} [{fix}] {message[:240]}")
    cb, ca = Counter(f["code"] for f in before), Counter(f["code"] for f in after)
    print("## per code (before -> after), changed only")
    for code in sorted(set(cb) | set(ca)):
        if cb[code] != ca[code]:
            print(f"{code}: {cb[code]} -> {ca[code]}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
