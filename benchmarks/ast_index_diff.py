"""Differential check of porter's two import indexes: ImportIndex (LibCST) against AstImportIndex (ast).

Usage: python benchmarks/ast_index_diff.py [--lines] FOLDER [FOLDER ...]

Builds both indexes for every ``.py`` file CPython and LibCST can parse and compares their records
and every query (``compare``); prints each disagreement, their count, and the CPU time of
``ast.parse``, ``AstImportIndex``, ``libcst.parse_module`` and ``ImportIndex`` over all files.
tests/test_pyast_imports.py runs ``compare`` on porter's fixtures and on its own snippets.
"""

from __future__ import annotations

import ast
import sys
import time
import warnings
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from porter.pyast_imports import AstImportIndex
from porter.pyimports import _LOADED_BY_PARENT, Fallback, ImportIndex


def parse_both(source: str) -> tuple[ast.Module, cst.Module] | None:
    """Both trees of ``source``, or None when either parser rejects it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
        module = cst.parse_module(source)
    except (SyntaxError, ValueError, cst.ParserSyntaxError, RecursionError):
        return None
    return tree, module


def _cst_chain(text: str) -> cst.BaseExpression:
    parts = text.split(".")
    expr: cst.BaseExpression = cst.Name(parts[0])
    for part in parts[1:]:
        expr = cst.Attribute(value=expr, attr=cst.Name(part))
    return expr


def compare(tree: ast.Module, module: cst.Module, *, lines: bool = True) -> list[str]:
    """Every way the two indexes of one source disagree (empty when they agree).

    Gates pair up by walk order and node type; ``lines`` also compares the first line of every
    gate and record statement (LibCST positions cost ten times the parse on big files)."""
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider) if lines else {}
    old = ImportIndex(module)
    new = AstImportIndex(tree)
    out: list[str] = []

    def cst_line(node: object) -> int:
        pos = positions.get(node)  # type: ignore[call-overload]
        return pos.start.line if pos is not None else -1

    def _ast_line(node: object) -> int:
        return getattr(node, "lineno", -1) if lines else -1

    # gates pair up by walk order; a gate is named by its place in that order and its first line
    if len(old.gates) != len(new.gates):
        out.append(f"gates: {len(old.gates)} != {len(new.gates)}")
        return out
    old_gate = {id(g): i for i, g in enumerate(old.gates)}
    new_gate = {id(g): i for i, g in enumerate(new.gates)}
    for i, (g_old, g_new) in enumerate(zip(old.gates, new.gates, strict=True)):
        a = (type(g_old).__name__, cst_line(g_old))
        b = (type(g_new).__name__, _ast_line(g_new))
        if a != b:
            out.append(f"gate {i}: {a} != {b}")
        if old.gate_names(g_old) != new.gate_names(g_new):
            out.append(f"gate_names {b}: {old.gate_names(g_old)} != {new.gate_names(g_new)}")

    def gid_old(gate: object) -> object:
        return None if gate is None else old_gate.get(id(gate), "?")

    def gid_new(gate: object) -> object:
        return None if gate is None else new_gate.get(id(gate), "?")

    def fb_old(fb: Fallback | None) -> tuple | None:
        if fb is None:
            return None
        return fb.name, fb.kind, fb.real, fb.module, gid_old(fb.gate), cst_line(fb.gate), cst_line(fb.statement)

    def fb_new(fb: Fallback | None) -> tuple | None:
        if fb is None:
            return None
        return fb.name, fb.kind, fb.real, fb.module, gid_new(fb.gate), _ast_line(fb.gate), _ast_line(fb.statement)

    def check(what: str, a: object, b: object) -> None:
        if a != b:
            out.append(f"{what}: {a!r} != {b!r}")

    check("statements",
          [(b.local, b.target, b.module, b.gated, b.toplevel, gid_old(b.gate), cst_line(b.statement))
           for b in old.statements],
          [(b.local, b.target, b.module, b.gated, b.toplevel, gid_new(b.gate), _ast_line(b.statement))
           for b in new.statements])
    check("rebinds", {n: (r.target, r.via, gid_old(r.gate)) for n, r in old.rebinds.items()},
          {n: (r.target, r.via, gid_new(r.gate)) for n, r in new.rebinds.items()})
    check("flags", sorted(old.flags), sorted(new.flags))
    check("fallbacks", sorted(str(fb_old(f)) for f in old.fallbacks.values()),
          sorted(str(fb_new(f)) for f in new.fallbacks.values()))
    check("alternatives", {n: fb_old(f) for n, f in old.alternatives.items()},
          {n: fb_new(f) for n, f in new.alternatives.items()})

    chains: dict[str, list[ast.expr]] = {}
    names: set[str] = set(old.bindings) | set(old.rebinds) | set(new.bindings) | set(new.rebinds)
    names.update(f.name for f in old.fallbacks.values())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)):
            text = AstImportIndex._dotted(node)
            if text is not None:
                chains.setdefault(text, []).append(node)
                if isinstance(node, ast.Name):
                    names.add(node.id)
    targets: set[str] = set(_LOADED_BY_PARENT)
    for text, nodes in chains.items():
        expected = old.resolve(_cst_chain(text))
        for node in nodes:
            got = new.resolve(node)
            if got != expected:
                out.append(f"resolve {text} (line {node.lineno}): {expected!r} != {got!r}")
                break
        if expected is not None:
            parts = expected.split(".")
            targets.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    for b in old.statements:
        targets.add(b.target)
        targets.add(b.target + ".x")
        targets.add(b.module)
    for name in sorted(names):
        check(f"resolve_name {name}", old.resolve_name(name), new.resolve_name(name))
        check(f"import_targets {name}", old.import_targets(name), new.import_targets(name))
        check(f"gate_of {name}", gid_old(old.gate_of(name)), gid_new(new.gate_of(name)))
        check(f"fallback {name}", fb_old(old.fallback(name)), fb_new(new.fallback(name)))
    # fallback_in answers from the fallback records: every (gate, name) either side recorded
    pairs = {(old_gate.get(gate_key, -1), name) for gate_key, name in old.fallbacks}
    pairs |= {(new_gate.get(gate_key, -1), name) for gate_key, name in new.fallbacks}
    for i, name in sorted(pairs):
        if i >= 0:
            check(f"fallback_in {i} {name}", fb_old(old.fallback_in(old.gates[i], name)),
                  fb_new(new.fallback_in(new.gates[i], name)))
        else:
            out.append(f"fallback {name} recorded for a gate outside the gate list")
    for target in sorted(targets):
        check(f"alias_for {target}", old.alias_for(target), new.alias_for(target))
    return out


def main(argv: list[str]) -> int:
    lines = "--lines" in argv
    argv = [a for a in argv if a != "--lines"]
    files = sorted(p for folder in argv for p in Path(folder).rglob("*.py") if p.is_file())
    timings = {"ast.parse": 0.0, "AstImportIndex": 0.0, "libcst.parse_module": 0.0, "ImportIndex": 0.0}
    compared = skipped = disagreements = 0
    sys.setrecursionlimit(10000)
    for path in files:
        source = path.read_text(encoding="utf-8", errors="replace")
        t0 = time.process_time()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError):
            skipped += 1
            continue
        t1 = time.process_time()
        AstImportIndex(tree)
        t2 = time.process_time()
        try:
            module = cst.parse_module(source)
        except (cst.ParserSyntaxError, RecursionError, ValueError):
            skipped += 1
            continue
        t3 = time.process_time()
        ImportIndex(module)
        t4 = time.process_time()
        for key, dt in zip(timings, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            timings[key] += dt
        compared += 1
        for line in compare(tree, module, lines=lines):
            disagreements += 1
            print(f"{path}: {line}", flush=True)
    print(f"files compared: {compared}, skipped (unparsable): {skipped}, disagreements: {disagreements}")
    for key, value in timings.items():
        print(f"CPU {key}: {value:.3f}s")
    return 1 if disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
