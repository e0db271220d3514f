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

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .findings import Applicability, Finding
from .pyast_imports import _handler_catches_import_error, _is_elif, _is_sentinel, ast_dotted

if TYPE_CHECKING:
    from .pyimports import BaseImportIndex, Fallback, ImportIndex

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
        if fb.kind.startswith("other-"):
            reason = (f"not rewritten: `{name}` is also bound by {fb.describe()}{where}, so a use need not be "
                      "the imported object: port the code that picks between them, not its uses")
        else:
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


def _handler_action(body: Sequence[ast.stmt]) -> str:
    acts = set()
    for stmt in body:
        if isinstance(stmt, ast.Raise):
            acts.add("raises")
        elif isinstance(stmt, ast.Pass):
            acts.add("passes")
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            acts.add("sets a flag" if stmt.value is not None and _is_sentinel(stmt.value) else "assigns")
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            acts.add("logs or warns")
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            acts.add(f"defines {stmt.name}")
        else:
            acts.add("runs code")
    order = ("raises", "logs or warns", "sets a flag", "passes", "assigns", "runs code")
    found = [a for a in order if a in acts] + sorted(a for a in acts if a.startswith("defines "))
    return " and ".join(found) if found else "does nothing"


def _fallback_body(gate: ast.Try | ast.If) -> list[ast.stmt]:
    if isinstance(gate, ast.If):
        if not gate.orelse:
            return []
        return [gate.orelse[0]] if _is_elif(gate) else list(gate.orelse)
    body: list[ast.stmt] = []
    for h in gate.handlers:
        if _handler_catches_import_error(h):
            body.extend(h.body)
    return body


def gate_facts(index: BaseImportIndex, gate: ast.Try | ast.If,
               keep: Callable[[str], bool] | None = None) -> GateFacts:
    """What the gate's no-package path provides for the names its package path binds (only those
    whose imports ``keep`` accepts, e.g. CUDA-only ones, when given). ``gate`` is an ``ast`` node
    of the tree ``index`` (``porter.pyast_imports.AstImportIndex``) was built from."""
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
                     "else branch" if isinstance(gate, ast.If) else "handler")


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


def _import_handler(gate: ast.Try) -> ast.ExceptHandler | None:
    """The handler that runs when the package is missing: the first one naming ImportError /
    ModuleNotFoundError, else the first broad one (``except Exception``, bare ``except``)."""
    specific = ("ImportError", "ModuleNotFoundError")
    for h in gate.handlers:
        types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type] if h.type is not None else []
        names = {(ast_dotted(t) or "").split(".")[-1] for t in types}
        if names & set(specific):
            return h
    for h in gate.handlers:
        if _handler_catches_import_error(h):
            return h
    return None


def _loads_outside(tree: ast.Module, gate: ast.stmt) -> set[str]:
    """Names read (not only stored) anywhere in the module outside ``gate``."""
    return {n.id for stmt in tree.body if stmt is not gate for n in ast.walk(stmt)
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}


def plain_literal(text: str) -> bool:
    """Whether ``text`` (a string expression's source) is one literal, not an implicit concatenation."""
    i = 0
    while i < len(text) and text[i] in "rRbBuUfF":
        i += 1
    quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else text[i:i + 1]
    if quote not in ('"', "'", '"""', "'''"):
        return False
    j = i + len(quote)
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text.startswith(quote, j):
            return j + len(quote) == len(text)
        j += 1
    return False


def keep_fallback(index: BaseImportIndex, gate: ast.Try | ast.If, tree: ast.Module,
                  is_cuda_only: Callable[[str], bool], source: Callable[[ast.AST], str]) -> str | None:
    """Source that replaces a module-level ``try``/``except ImportError`` gate by the handler that
    runs without the package, when that is exact: every name the package path binds and the
    module reads has a real fallback, the package path imports only CUDA-only packages and
    otherwise only assigns names or calls (prints, logs), and the handler does not read the
    exception. None otherwise.

    ``gate`` belongs to the ``ast`` tree ``tree``; ``source(node)`` is a node's source text. The
    handler's statements keep their text, moved to the gate's (module) level."""
    if not isinstance(gate, ast.Try) or gate.orelse or gate.finalbody:
        return None
    if not any(stmt is gate for stmt in tree.body):
        return None
    handler = _import_handler(gate)
    if handler is None or handler.name is not None:
        return None
    facts = gate_facts(index, gate, is_cuda_only)
    if not facts.names:
        return None
    bound_by_handler = _bound_names(handler.body)
    loads: set[str] | None = None
    for stmt in gate.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Assign, ast.Pass)):
            continue  # what imports bind is checked below: kept by the handler, or read nowhere else
        if not isinstance(stmt, ast.Expr):
            return None
        value = stmt.value
        if isinstance(value, ast.Call):
            continue
        if isinstance(value, ast.Constant) and isinstance(value.value, (str, bytes)):
            continue
        if isinstance(value, ast.JoinedStr) and not plain_literal(source(value)):
            continue  # an implicit concatenation with an f-string part
        return None
    # every name the package path binds must mean the same without it: a real fallback, a name the
    # handler sets too (flags), or a name nothing outside the gate reads
    for name in _bound_names(gate.body):
        fb = index.fallback_in(gate, name)
        if fb is not None and fb.real:
            continue
        if name in bound_by_handler:
            continue
        if loads is None:
            loads = _loads_outside(tree, gate)
        if name in loads:
            return None
    if not facts.real:
        return None  # nothing is kept: not this rule's business
    if all(isinstance(s, ast.Pass) for s in handler.body):
        return ""
    return _dedented_handler(source(gate), gate.handlers.index(handler))


def _dedented_handler(gate_source: str, index: int) -> str | None:
    """The statements of the gate's ``index``-th handler (``pass`` lines dropped), each with the
    comment lines before it, re-indented to the gate's level.

    The gate is a module-level statement, so its source (from ``try`` to the end of its last
    statement) is a module of its own; LibCST reads that slice alone (only when the fix is proven),
    and its code generation moves the statements out of their block: nested blocks and
    continuation lines keep their indentation relative to the statement, string contents stay
    as written."""
    import libcst as cst  # only for a gate whose fix is proven: detection never loads it

    try:
        module = cst.parse_module(gate_source)
    except cst.ParserSyntaxError:
        return None
    if len(module.body) != 1 or not isinstance(module.body[0], cst.Try):
        return None
    block = module.body[0].handlers[index].body
    if not isinstance(block, cst.IndentedBlock):
        return None
    body = [s for s in block.body
            if not (isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, cst.Pass) for x in s.body))]
    code = cst.Module(body=body, default_indent=module.default_indent,
                      default_newline=module.default_newline).code
    return code.rstrip("\r\n")  # the statement's span ends before its last newline


def _bound_names(body: Sequence[ast.stmt]) -> set[str]:
    """Names a block binds at its own level (assignments, defs, classes, imports; the body of an
    ``if`` or ``try`` too)."""
    names: set[str] = set()
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if alias.name == "*":
                    continue
                names.add(alias.asname if alias.asname is not None else alias.name.split(".")[0])
        elif isinstance(stmt, (ast.If, ast.Try)):
            header_end = stmt.test.end_lineno if isinstance(stmt, ast.If) else stmt.lineno
            if stmt.body[0].lineno != header_end:  # a one-line `if x: a = 1` is not counted (conservative)
                names |= _bound_names(stmt.body)
    return names
