"""Availability gates and their fallbacks, for every Python family.

A name imported inside ``try: from pkg import X / except ImportError: <fallback>`` (or
``if is_pkg_available(): ... else: ...``) has a *fallback* when the no-package path binds
the same name to something real (a class, a function, another import, an expression). On a
machine without the package, that fallback is what the code runs, so it is what a port must
keep: rewriting the uses of ``X`` to the vendor-neutral equivalent of the *package's* ``X``
would change the numbers the code computes there (another ``eps``, another dtype...).

``guard`` applies this to every family's findings: a fix whose edits rewrite a use of such
a name is turned into a report that says why. ``describe_gate`` words what a gate provides
(the PRT021 message), and ``keep_fallback`` builds the edit that drops a gate's dead import
branch and keeps its fallback.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import libcst as cst

from .findings import Applicability, Finding
from .pyimports import Fallback, ImportIndex, _is_sentinel, dotted

# findings that carry this key in their data are the gate edits themselves
KEEPS_FALLBACK = "keeps_fallback"


def fallback_names(index: ImportIndex) -> dict[str, Fallback]:
    """Gated names (imports and rebindings) whose no-package path binds a real alternative."""
    out: dict[str, Fallback] = {}
    for name in list(index.bindings) + list(index.rebinds):
        fb = index.fallback(name)
        if fb is not None and fb.real:
            out[name] = fb
    return out


def _count(name: str, text: str) -> int:
    return len(re.findall(rf"(?<![\w.]){re.escape(name)}(?!\w)", text))


def guard(findings: Sequence[Finding], text: str, index: ImportIndex, line_of: object) -> list[Finding]:
    """Turn fixes that rewrite a use of a name with a fallback binding into reports."""
    names = fallback_names(index)
    if not names:
        return list(findings)
    out = []
    for f in findings:
        if not f.edits or f.fix == Applicability.NONE or f.data.get(KEEPS_FALLBACK):
            out.append(f)
            continue
        hit = None
        for e in f.edits:
            original = text[e.start:e.end]
            for name, fb in names.items():
                # any edit over a use of the name changes what that use means (even one that passes
                # the name through: `f(q, k, v, bias=Mask())` with a fallback `Mask`)
                if _count(name, original):
                    hit = (name, fb)
                    break
            if hit:
                break
        if hit is None:
            out.append(f)
            continue
        name, fb = hit
        where = ""
        if callable(line_of):
            where = f" (line {line_of(fb.statement)})"
        reason = (f"not rewritten: `{name}` has a fallback binding, {fb.describe()}{where}, and that fallback "
                  "is what runs without the package: port it by keeping the fallback (drop the import "
                  "branch), not by rewriting its uses")
        out.append(replace(f, message=f"{f.message.split(' → ')[0]} {reason}", fix=Applicability.NONE, edits=(),
                           add_imports=(), remove_imports=(), new_files=(), fix_title=""))
    return out


# -- gates ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateFacts:
    names: tuple[str, ...]  # names the package path binds
    real: tuple[str, ...]  # ... that have a real fallback binding
    sentinel: tuple[str, ...]  # ... that are set to None/False on the no-package path
    reimport: tuple[str, ...]  # ... that the no-package path imports from the same package again
    handler: str  # what the no-package path does when it binds nothing real: "raises", "flag", ...
    branch: str  # "handler" or "else branch"


def _handler_action(body: Sequence[cst.CSTNode]) -> str:
    acts = set()
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Raise):
                    acts.add("raises")
                elif isinstance(small, cst.Pass):
                    acts.add("passes")
                elif isinstance(small, (cst.Assign, cst.AnnAssign)):
                    acts.add("sets a flag" if small.value is not None and _is_sentinel(small.value)
                             else "assigns")
                elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    acts.add("logs or warns")
                else:
                    acts.add("runs code")
        elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            acts.add(f"defines {stmt.name.value}")
        else:
            acts.add("runs code")
    order = ("raises", "logs or warns", "sets a flag", "passes", "assigns", "runs code")
    found = [a for a in order if a in acts] + sorted(a for a in acts if a.startswith("defines "))
    return " and ".join(found) if found else "does nothing"


def _fallback_body(gate: cst.Try | cst.If) -> list[cst.CSTNode]:
    from .pyimports import _handler_catches_import_error

    if isinstance(gate, cst.If):
        orelse = gate.orelse
        if orelse is None:
            return []
        return [orelse] if isinstance(orelse, cst.If) else list(orelse.body.body)
    body: list[cst.CSTNode] = []
    for h in gate.handlers:
        if _handler_catches_import_error(h):
            body.extend(h.body.body)
    return body


def gate_facts(index: ImportIndex, gate: cst.Try | cst.If,
               keep: Callable[[str], bool] | None = None) -> GateFacts:
    """What the gate's no-package path provides for the names its package path binds (only those
    whose imports ``keep`` accepts, e.g. CUDA-only ones, when given)."""
    names = [n for n in index.gate_names(gate)
             if keep is None or any(keep(t) for t in index.import_targets(n))]
    # names the gate overrides (`LlamaRMSNorm = partial(FusedRMSNorm, ...)`) keep their earlier definition
    names += [fb.name for fb in index.fallbacks.values()
              if fb.gate is gate and fb.kind == "earlier" and fb.name not in names]
    real, sentinel, reimport = [], [], []
    for n in names:
        fb = index.fallback_in(gate, n)
        if fb is None:
            continue
        (real if fb.real else reimport if fb.kind == "import" else sentinel).append(n)
    return GateFacts(tuple(names), tuple(real), tuple(sentinel), tuple(reimport),
                     _handler_action(_fallback_body(gate)),
                     "else branch" if isinstance(gate, cst.If) else "handler")


def describe_gate(facts: GateFacts, dist: str) -> str:
    """The PRT021 wording: a fallback is claimed only for names the no-package path rebinds."""
    if facts.real:
        others = [n for n in facts.names if n not in facts.real]
        text = (f"availability gate around {dist}: without it the code runs its fallback binding of "
                f"{', '.join(facts.real)}")
        if others:
            text += f"; no fallback for {', '.join(others)}"
        return text
    path = facts.branch
    if facts.reimport:
        return (f"availability gate around {dist}: no fallback that runs without it; the {path} imports "
                f"{', '.join(facts.reimport)} from {dist} again (another release's name)")
    if facts.sentinel:
        return (f"availability gate around {dist}: no fallback implementation; without it "
                f"{', '.join(facts.sentinel)} only hold a placeholder (None/False), so the code must check "
                "before use")
    return (f"availability gate around {dist}: no fallback binding of {', '.join(facts.names) or 'its names'} "
            f"(the {path} {facts.handler}); without the package those names are undefined")


def _import_handler(gate: cst.Try) -> cst.ExceptHandler | None:
    """The handler that runs when the package is missing: the first one naming ImportError /
    ModuleNotFoundError, else the first broad one (``except Exception``, bare ``except``)."""
    from .pyimports import _handler_catches_import_error

    specific = ("ImportError", "ModuleNotFoundError")
    for h in gate.handlers:
        types = h.type.elements if isinstance(h.type, cst.Tuple) else [h.type] if h.type is not None else []
        names = {(dotted(t.value if isinstance(t, cst.Element) else t) or "").split(".")[-1] for t in types}
        if names & set(specific):
            return h
    for h in gate.handlers:
        if _handler_catches_import_error(h):
            return h
    return None


def _loads_outside(module: cst.Module, gate: cst.CSTNode) -> set[str]:
    import ast

    try:
        rest = module.deep_remove(gate)
        tree = ast.parse(rest.code if isinstance(rest, cst.Module) else "")
    except (SyntaxError, ValueError, RecursionError, cst.ParserSyntaxError):
        return {"*"}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}


def keep_fallback(index: ImportIndex, gate: cst.Try | cst.If, module: cst.Module,
                  is_cuda_only: Callable[[str], bool]) -> str | None:
    """Source that replaces a module-level ``try``/``except ImportError`` gate by the handler that
    runs without the package, when that is exact: every name the package path binds and the
    module reads has a real fallback, the package path imports only CUDA-only packages and
    otherwise only assigns names or calls (prints, logs), and the handler does not read the
    exception. None otherwise."""
    if not isinstance(gate, cst.Try) or gate.orelse is not None or gate.finalbody is not None:
        return None
    if gate not in module.body:
        return None
    handler = _import_handler(gate)
    if handler is None or handler.name is not None:
        return None
    facts = gate_facts(index, gate, is_cuda_only)
    if not facts.names:
        return None
    bound_by_handler = _bound_names(handler.body.body)
    loads: set[str] | None = None
    for stmt in gate.body.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            return None
        for small in stmt.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)):
                continue  # what they bind is checked below: kept by the handler, or read nowhere else
            elif isinstance(small, cst.Expr):
                if not isinstance(small.value, (cst.Call, cst.SimpleString, cst.ConcatenatedString)):
                    return None
            elif not isinstance(small, (cst.Assign, cst.Pass)):
                return None
    # every name the package path binds must mean the same without it: a real fallback, a name the
    # handler sets too (flags), or a name nothing outside the gate reads
    for name in _bound_names(gate.body.body):
        fb = index.fallback_in(gate, name)
        if fb is not None and fb.real:
            continue
        if name in bound_by_handler:
            continue
        if loads is None:
            loads = _loads_outside(module, gate)
        if name in loads or "*" in loads:
            return None
    if not facts.real:
        return None  # nothing is kept: not this rule's business
    body = [s for s in handler.body.body
            if not (isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, cst.Pass) for x in s.body))]
    if not body:
        return ""
    code = cst.Module(body=body, default_indent=module.default_indent,
                      default_newline=module.default_newline).code
    return code.rstrip("\r\n")  # the statement's span ends before its last newline


def _bound_names(body: Sequence[cst.CSTNode]) -> set[str]:
    from .pyfix import _bound

    return _bound(body)
