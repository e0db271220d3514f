"""A light import index for one Python module.

porter resolves names through the module's own import statements (``import a.b as c``,
``from a.b import x as y``) instead of LibCST's ScopeProvider: it is an order of magnitude
cheaper and enough for library APIs, which are reached through imports. Local shadowing of
an imported name is not modelled.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Union

import libcst as cst

# Submodules that importing their package loads (checked against torch 2.13's import side
# effects), so `torch.nn.functional.x` works after a plain `import torch`.
_LOADED_BY_PARENT = frozenset({
    "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.parallel", "torch.nn.utils",
    "torch.nn.attention", "torch.optim", "torch.amp", "torch.cuda", "torch.cuda.amp", "torch.cuda.nvtx",
    "torch.backends", "torch.backends.cuda", "torch.backends.cudnn", "torch.version", "torch.distributed",
    "torch.utils", "torch.utils.data", "torch.utils.checkpoint", "torch.autograd", "torch.testing",
})

# the node kinds of either tree: an availability gate (ast.TryStar too on Python 3.11+), any node
Gate = Union[cst.Try, cst.TryStar, cst.If, ast.Try, ast.If]
Node = Union[cst.CSTNode, ast.AST]
_TRY_GATES: tuple[type, ...] = (cst.Try, cst.TryStar, ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))
_PLAIN_IMPORTS = (cst.Import, ast.Import)  # `import a.b` (not `from a import b`)

_GATE_EXCEPTIONS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "OSError"}


def dotted(expr: cst.BaseExpression) -> str | None:
    """``a.b.c`` as a string for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if isinstance(expr, cst.Name):
        parts.append(expr.value)
        return ".".join(reversed(parts))
    return None


@dataclass(frozen=True)
class Binding:
    local: str  # the name bound in the module ("F", "flash_attn", "fa")
    target: str  # what it refers to ("torch.nn.functional", "flash_attn.flash_attn_func")
    statement: cst.Import | cst.ImportFrom | ast.Import | ast.ImportFrom
    gated: bool  # inside `try: ... except ImportError` or `if is_x_available():`
    toplevel: bool  # at module level (not inside a def/class)
    module: str  # the imported module ("flash_attn" for both import forms)
    gate: Gate | None = None  # the innermost availability gate around it


@dataclass(frozen=True)
class Rebind:
    """``name = <imported name or attribute of one>`` at module level (``attn = flash_attn_func``)."""

    local: str
    target: str  # the qualified name it resolves to
    via: str  # the imported local name the value goes through ("flash_attn_func")
    statement: cst.SimpleStatementLine | ast.Assign | ast.AnnAssign
    gate: Gate | None


@dataclass(frozen=True)
class Fallback:
    """Another binding of a gated name on the path that runs when the package is missing."""

    name: str
    gate: Gate = field(repr=False, compare=False)
    statement: Node = field(repr=False, compare=False)  # the binding statement (class, def, ...)
    kind: str  # "class", "function", "assignment", "import", "earlier" (bound before the gate)
    real: bool  # False for a sentinel (`name = None`, a literal) or a re-import from the same
    # package (another release's name): not an implementation that runs without the package
    module: str = ""  # for "import": the module the fallback imports from

    def describe(self) -> str:
        if self.kind == "earlier":
            return f"the definition of {self.name} before its availability gate, which the gate only overrides"
        what = {"class": f"class {self.name}", "function": f"def {self.name}",
                "import": f"an import of {self.name}", "assignment": f"`{self.name} = ...`"}[self.kind]
        where = "the except handler" if isinstance(self.gate, _TRY_GATES) else "the else branch"
        return f"{what} in {where} of its availability gate"


def _handler_catches_import_error(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types: list[cst.BaseExpression]
    if isinstance(handler.type, cst.Tuple):
        types = [el.value for el in handler.type.elements]
    else:
        types = [handler.type]
    return any((dotted(t) or "").split(".")[-1] in _GATE_EXCEPTIONS for t in types)


_SENTINELS = (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _is_sentinel(value: cst.BaseExpression) -> bool:
    """`None`, `False`, a number or string: a marker, not an alternative implementation."""
    if isinstance(value, cst.Name):
        return value.value in {"None", "True", "False"}
    return isinstance(value, _SENTINELS)


def _probe_call(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        op = expr.comparisons[0]
        if isinstance(op.operator, (cst.IsNot, cst.NotEqual)) and isinstance(op.comparator, cst.Name) \
                and op.comparator.value == "None":
            return _probe_call(expr.left)
        return False
    if not isinstance(expr, cst.Call):
        return False
    func = expr.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    if name in {"find_spec", "find_loader", "module_available", "package_available"}:
        return True
    return name.startswith("is_") and name.endswith("_available") and name not in {"is_available"} \
        and not name.startswith("is_torch")


class BaseImportIndex:
    """The records an import index keeps and every query on them, whatever the tree kind.

    ``ImportIndex`` fills them from a LibCST module, ``porter.pyast_imports.AstImportIndex`` from a
    stdlib ``ast`` module; the ``statement`` and ``gate`` fields hold nodes of that tree.
    """

    _dotted: Callable[[Any], str | None]  # `a.b.c` for a Name/Attribute chain of the tree kind

    def __init__(self) -> None:
        self.bindings: dict[str, list[Binding]] = {}
        self.statements: list[Binding] = []
        self.rebinds: dict[str, Rebind] = {}
        self.fallbacks: dict[tuple[int, str], Fallback] = {}
        self.gates: list[Gate] = []
        # availability flags: `HAS_X = True` in a gate's try body, `HAS_X = find_spec("x") is not None`
        self.flags: dict[str, Node] = {}
        self._defs: dict[str, list[Gate | None]] = {}  # other top-level bindings -> fallback gate
        # the first plain module-level binding of a name (outside any gate): (kind, statement)
        self._earlier: dict[str, tuple[str, Node]] = {}
        self._rebind_earlier: dict[str, tuple[str, Node] | None] = {}

    def _finish(self) -> None:
        for name, rb in list(self.rebinds.items()):
            others = self._defs.get(name, ())
            earlier = self._rebind_earlier.get(name)
            if rb.gate is not None and earlier is not None and len(others) == 1 and others[0] is None:
                # `class RMSNorm: ...` then `try: from apex... import FusedRMSNorm; RMSNorm = FusedRMSNorm`
                # `except ImportError: pass`: the earlier definition is what runs without the package
                # (`flash_attn_func = None` before the gate is only a placeholder)
                self._fallback(name, rb.gate, earlier[1], "earlier", earlier[0] != "sentinel")
                continue
            if any(g is not rb.gate or g is None for g in others):
                del self.rebinds[name]  # bound twice outside its gate's fallback: not provably this

    def _fallback(self, name: str, gate: Gate, stmt: Node, kind: str, real: bool) -> None:
        key = (id(gate), name)
        old = self.fallbacks.get(key)
        if old is None or (real and not old.real):
            self.fallbacks[key] = Fallback(name, gate, stmt, kind, real)

    def _bind(self, binding: Binding) -> None:
        self.bindings.setdefault(binding.local, []).append(binding)
        self.statements.append(binding)

    # -- queries ------------------------------------------------------------------------
    def resolve_name(self, name: str) -> str | None:
        found = self.bindings.get(name)
        if found:
            return canonical(found[0].target)
        rebind = self.rebinds.get(name)
        return rebind.target if rebind is not None else None

    def import_targets(self, name: str) -> tuple[str, ...]:
        """Targets of the imports ``name`` goes through (following module-level rebindings)."""
        found = self.bindings.get(name)
        if found:
            return tuple(b.target for b in found)
        rebind = self.rebinds.get(name)
        if rebind is not None and rebind.via != name:
            return self.import_targets(rebind.via)
        return ()

    def gate_of(self, name: str) -> Gate | None:
        """The availability gate the binding of ``name`` (import or rebind) sits in."""
        found = self.bindings.get(name)
        if found:
            return found[0].gate
        rebind = self.rebinds.get(name)
        return rebind.gate if rebind is not None else None

    def fallback(self, name: str) -> Fallback | None:
        """The binding of ``name`` on its gate's no-package path (handler or else branch), if any."""
        gate = self.gate_of(name)
        if gate is None:
            return None
        return self.fallback_in(gate, name)

    def fallback_in(self, gate: Gate, name: str) -> Fallback | None:
        """The no-package binding of ``name`` in ``gate``; a re-import from the same package counts
        as no real fallback."""
        fb = self.fallbacks.get((id(gate), name))
        if fb is not None and fb.kind == "import" and fb.real:
            targets = self.import_targets(name)
            root = fb.module.split(".")[0]
            if root and targets and all(t.split(".")[0] == root for t in targets):
                # `except ImportError: from flash_attn.x import other_release_name as name`
                return Fallback(fb.name, fb.gate, fb.statement, fb.kind, False, fb.module)
        return fb

    def gate_names(self, gate: Gate) -> list[str]:
        """Names a gate's package path binds through imports and rebindings, in order."""
        names = [b.local for b in self.statements if b.gate is gate and b.local != "*"]
        names += [r.local for r in self.rebinds.values() if r.gate is gate]
        return list(dict.fromkeys(names))

    def resolve(self, expr: cst.BaseExpression) -> str | None:
        """Qualified name of a Name/Attribute chain rooted at an imported name, else None."""
        text = self._dotted(expr)
        if text is None:
            return None
        head, _, rest = text.partition(".")
        target = self.resolve_name(head)
        if target is None:
            return None
        return canonical(f"{target}.{rest}") if rest else target

    def alias_for(self, target: str) -> str | None:
        """A local expression that names ``target`` through an existing import, if any.

        ``alias_for("torch.nn.functional")`` is ``"F"`` after ``import torch.nn.functional as F``
        and ``"torch.nn.functional"`` after ``import torch``. A path through a submodule is used
        only when that submodule is loaded: by the file's own imports, or because importing its
        package loads it (``import torch`` loads ``torch.nn`` but not ``torch.nn.attention.bias``).
        """
        loaded = set(_LOADED_BY_PARENT)
        for binding in self.statements:
            if isinstance(binding.statement, _PLAIN_IMPORTS) and not binding.gated:
                parts = binding.module.split(".")
                loaded.update(".".join(parts[: i + 1]) for i in range(len(parts)))
        best: tuple[int, int, str] | None = None  # (rank, length, text): `import` forms first
        for binding in self.statements:
            if not binding.toplevel or binding.gated or binding.local == "*":
                continue
            if binding.target == target:
                return binding.local
            if not target.startswith(binding.target + "."):
                continue
            # the longest loaded module on the way; what follows it must be one attribute
            module = binding.target
            for name in loaded:
                if target.startswith(name + ".") and len(name) > len(module) and name.startswith(module + "."):
                    module = name
            if "." in target[len(module) + 1 :]:
                continue
            candidate = binding.local + target[len(binding.target):]
            key = (0 if isinstance(binding.statement, _PLAIN_IMPORTS) else 1, len(candidate), candidate)
            if best is None or key < best:
                best = key
        return best[2] if best else None

    def modules(self) -> Iterator[Binding]:
        return iter(self.statements)


class ImportIndex(BaseImportIndex):
    """Every import binding in a module, found by walking statements only.

    Besides imports it records, for names bound inside an availability gate (``try: import
    x / except ImportError:`` or ``if is_x_available(): ... else: ...``), the *fallback*
    bindings of the same names on the path that runs without the package, and module-level
    rebindings of imported names (``attn = flash_attn_func``), which resolve like the import.
    """

    _dotted = staticmethod(dotted)

    def __init__(self, module: cst.Module) -> None:
        super().__init__()
        self._walk(module.body, gated=False, toplevel=True)
        self._finish()

    # -- construction -------------------------------------------------------------------
    def _walk(self, body: object, *, gated: bool, toplevel: bool, gate: cst.Try | cst.If | None = None,
              fallback_of: cst.Try | cst.If | None = None, module_level: bool = True) -> None:
        for stmt in _iter_statements(body):
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)):
                        self._add(small, gated=gated, toplevel=toplevel, gate=gate)
                        if fallback_of is not None:
                            self._fallback_import(small, fallback_of)
                    elif isinstance(small, (cst.Assign, cst.AnnAssign)) and module_level:
                        self._assignment(stmt, small, gate, fallback_of)
                    elif isinstance(small, cst.Assign) and fallback_of is not None:
                        # a gate inside a function: `except ImportError: attn = naive_attention`
                        for t in small.targets:
                            if isinstance(t.target, cst.Name):
                                real = not (len(small.targets) == 1 and _is_sentinel(small.value))
                                self._fallback(t.target.value, fallback_of, small, "assignment", real)
            elif isinstance(stmt, (cst.Try, cst.TryStar)):
                catches = any(_handler_catches_import_error(h) for h in stmt.handlers)
                inner = stmt if catches else gate
                if catches:
                    self.gates.append(stmt)
                self._walk(stmt.body, gated=gated or catches, toplevel=toplevel, gate=inner,
                           fallback_of=fallback_of, module_level=module_level)
                for handler in stmt.handlers:
                    fb = stmt if catches and _handler_catches_import_error(handler) else fallback_of
                    self._walk(handler.body, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fb,
                               module_level=module_level)
                if stmt.orelse is not None:
                    self._walk(stmt.orelse.body, gated=gated or catches, toplevel=toplevel, gate=inner,
                               fallback_of=fallback_of, module_level=module_level)
                if stmt.finalbody is not None:
                    self._walk(stmt.finalbody.body, gated=gated, toplevel=toplevel, gate=gate,
                               fallback_of=fallback_of, module_level=module_level)
            elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                if module_level:
                    self._defs.setdefault(stmt.name.value, []).append(fallback_of)
                    if gate is None and fallback_of is None:
                        self._earlier.setdefault(stmt.name.value, ("def", stmt))
                if fallback_of is not None:
                    kind = "class" if isinstance(stmt, cst.ClassDef) else "function"
                    self._fallback(stmt.name.value, fallback_of, stmt, kind, True)
                self._walk(stmt.body, gated=gated, toplevel=False, gate=gate, fallback_of=None,
                           module_level=False)
            elif isinstance(stmt, cst.If):
                probe = self._probe(stmt.test)
                if probe:
                    self.gates.append(stmt)
                self._walk(stmt.body, gated=gated or probe, toplevel=toplevel, gate=stmt if probe else gate,
                           fallback_of=fallback_of, module_level=module_level)
                orelse = stmt.orelse
                if probe and orelse is not None:
                    self._walk(orelse if isinstance(orelse, cst.If) else orelse.body, gated=gated,
                               toplevel=toplevel, gate=gate, fallback_of=stmt, module_level=module_level)
                    continue
                while orelse is not None:
                    self._walk(orelse.body, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fallback_of,
                               module_level=module_level)
                    orelse = orelse.orelse if isinstance(orelse, cst.If) else None
            elif isinstance(stmt, (cst.With, cst.For, cst.While)):
                self._walk(stmt.body, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fallback_of,
                           module_level=module_level)
                orelse = getattr(stmt, "orelse", None)
                if orelse is not None:
                    self._walk(orelse.body, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fallback_of,
                               module_level=module_level)

    def _probe(self, test: cst.BaseExpression) -> bool:
        if isinstance(test, cst.Name):
            return test.value in self.flags
        return _probe_call(test)


    def _fallback_import(self, node: cst.Import | cst.ImportFrom, gate: cst.Try | cst.If) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            else:
                local = (dotted(alias.name) or "").split(".")[0] if isinstance(node, cst.Import) \
                    else dotted(alias.name) or ""
            module = dotted(alias.name) if isinstance(node, cst.Import) else (
                "." * len(node.relative) + (dotted(node.module) or "") if node.module is not None else ".")
            key = (id(gate), local)
            old = self.fallbacks.get(key)
            if old is None or not old.real:
                self.fallbacks[key] = Fallback(local, gate, node, "import", True, module or "")

    def _assignment(self, line: cst.SimpleStatementLine, node: cst.Assign | cst.AnnAssign,
                    gate: cst.Try | cst.If | None, fallback_of: cst.Try | cst.If | None) -> None:
        targets = [node.target] if isinstance(node, cst.AnnAssign) else [t.target for t in node.targets]
        value = node.value
        # (name, the value it gets when that is known element-wise)
        pairs: list[tuple[str, cst.BaseExpression | None]] = []
        for t in targets:
            if isinstance(t, cst.Name):
                pairs.append((t.value, value if len(targets) == 1 else None))
            elif isinstance(t, (cst.Tuple, cst.List)):
                values: list[cst.BaseExpression | None] = [None] * len(t.elements)
                if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(t.elements) and not any(
                        isinstance(e, cst.StarredElement) for e in (*t.elements, *value.elements)):
                    values = [e.value for e in value.elements]  # `a, b = x, y`
                for el, v in zip(t.elements, values, strict=True):
                    if isinstance(el.value, cst.Name):
                        pairs.append((el.value.value, v if len(targets) == 1 else None))
        for name, v in pairs:
            self._defs.setdefault(name, []).append(fallback_of)
            if gate is None and fallback_of is None and value is not None:
                self._earlier.setdefault(name, ("assignment" if v is None or not _is_sentinel(v) else "sentinel", node))
            if fallback_of is not None:
                real = value is not None and not (v is not None and _is_sentinel(v))
                self._fallback(name, fallback_of, node, "assignment", real)
            elif gate is not None and name in self._earlier and not (v is not None and isinstance(
                    v, (cst.Name, cst.Attribute))):
                # `LlamaRMSNorm = partial(FusedRMSNorm, eps=1e-6)` in the gate overrides an earlier
                # definition: that definition is what runs without the package
                kind, stmt = self._earlier[name]
                self._fallback(name, gate, stmt, "earlier", kind != "sentinel")
            if v is None:
                continue
            if isinstance(gate, cst.Try) and fallback_of is None and isinstance(v, cst.Name) and v.value == "True":
                self.flags[name] = gate
            elif _probe_call(v):  # `HAS_FLASH = importlib.util.find_spec("flash_attn") is not None`
                self.flags[name] = node
            if fallback_of is None and isinstance(v, (cst.Name, cst.Attribute)):
                text = dotted(v)
                head = (text or "").split(".")[0]
                target = self.resolve(v) if head in self.bindings or head in self.rebinds else None
                if target is not None and text is not None:
                    via = self.rebinds[head].via if head in self.rebinds and head not in self.bindings else head
                    self.rebinds[name] = Rebind(name, target, via, line, gate)
                    self._rebind_earlier[name] = self._earlier.get(name)
                    self._defs[name].pop()  # the rebind itself is not a competing binding

    def _add(self, node: cst.Import | cst.ImportFrom, *, gated: bool, toplevel: bool,
             gate: cst.Try | cst.If | None = None) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                name = dotted(alias.name) or ""
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local, target = alias.asname.name.value, name
                else:
                    local = target = name.split(".")[0]
                self._bind(Binding(local, target, node, gated, toplevel, name, gate))
            return
        if node.module is None:  # `from . import x`
            base = "." * len(node.relative)
        else:
            base = "." * len(node.relative) + (dotted(node.module) or "")
        if isinstance(node.names, cst.ImportStar):
            self._bind(Binding("*", base + ".*", node, gated, toplevel, base, gate))
            return
        for alias in node.names:
            name = dotted(alias.name) or ""
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            sep = "" if base.endswith(".") else "."
            self._bind(Binding(local, f"{base}{sep}{name}", node, gated, toplevel, base, gate))



# Real module aliases of library APIs: a class or function reached through the module that
# defines it is the object its package exports (`bitsandbytes.optim.adam.Adam8bit` is
# `bitsandbytes.optim.Adam8bit`). Families match the exported spelling.
_CANONICAL: tuple[tuple[str, str, frozenset[str] | None], ...] = (
    # (defining module, exporting package, names it exports; None: every public class name)
    ("bitsandbytes.optim.adam.", "bitsandbytes.optim.", None),
    ("bitsandbytes.optim.adamw.", "bitsandbytes.optim.", None),
    ("bitsandbytes.optim.lion.", "bitsandbytes.optim.", None),
    ("bitsandbytes.optim.sgd.", "bitsandbytes.optim.", None),
    ("bitsandbytes.optim.lamb.", "bitsandbytes.optim.", None),
    ("bitsandbytes.optim.lars.", "bitsandbytes.optim.", None),
    ("bitsandbytes.optim.rmsprop.", "bitsandbytes.optim.", None),
    ("bitsandbytes.optim.adagrad.", "bitsandbytes.optim.", None),
    ("bitsandbytes.optim.ademamix.", "bitsandbytes.optim.", None),
    ("bitsandbytes.nn.modules.", "bitsandbytes.nn.", None),
    ("apex.optimizers.fused_adam.", "apex.optimizers.", frozenset({"FusedAdam"})),
    ("apex.optimizers.fused_sgd.", "apex.optimizers.", frozenset({"FusedSGD"})),
    ("apex.optimizers.fused_lamb.", "apex.optimizers.", frozenset({"FusedLAMB"})),
    ("apex.optimizers.fused_adagrad.", "apex.optimizers.", frozenset({"FusedAdagrad"})),
    ("apex.optimizers.fused_novograd.", "apex.optimizers.", frozenset({"FusedNovoGrad"})),
    ("apex.optimizers.fused_mixed_precision_lamb.", "apex.optimizers.", frozenset({"FusedMixedPrecisionLamb"})),
    ("apex.normalization.fused_layer_norm.", "apex.normalization.",
     frozenset({"FusedLayerNorm", "MixedFusedLayerNorm", "FusedRMSNorm", "MixedFusedRMSNorm"})),
)
# bitsandbytes internals that its packages do not export
_INTERNAL = ("Optimizer", "State", "Function", "MatmulLtState")


def canonical(qualname: str) -> str:
    """The exported spelling of ``qualname`` when it goes through a defining submodule."""
    for prefix, export, names in _CANONICAL:
        if not qualname.startswith(prefix):
            continue
        rest = qualname[len(prefix):]
        name = rest.split(".")[0]
        if names is None:
            if name.startswith("_") or not name[:1].isupper() or any(x in name for x in _INTERNAL):
                return qualname
        elif name not in names:
            return qualname
        return export + rest
    return qualname


def _iter_statements(body: object) -> Iterator[cst.CSTNode]:
    if isinstance(body, cst.Module):
        yield from body.body
    elif isinstance(body, cst.IndentedBlock):
        yield from body.body
    elif isinstance(body, cst.SimpleStatementSuite):
        yield cst.SimpleStatementLine(body=body.body)
    elif isinstance(body, (list, tuple)):
        yield from body
