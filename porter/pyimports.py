"""A light import index for one Python module.

porter resolves names through the module's own import statements (``import a.b as c``,
``from a.b import x as y``) instead of LibCST's ScopeProvider: it is an order of magnitude
cheaper and enough for library APIs, which are reached through imports. Local shadowing of
an imported name is not modelled.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from .importindex import (  # noqa: F401 - re-exported for the families
    _CANONICAL,
    _GATE_EXCEPTIONS,
    _INTERNAL,
    _LOADED_BY_PARENT,
    _PLAIN_IMPORTS,
    _TRY_GATES,
    BaseImportIndex,
    Binding,
    Fallback,
    Gate,
    Node,
    Rebind,
    canonical,
)


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




class ImportIndex(BaseImportIndex):
    """Every import binding in a module, found by walking statements only.

    Besides imports it records, for names bound inside an availability gate (``try: import
    x / except ImportError:`` or ``if is_x_available(): ... elif ...: ... else: ...``), the
    *fallback* bindings of the same names on the path that runs without the package (every later
    branch of the chain, and gates nested in it), other module-level bindings of an imported name
    on another path, and module-level rebindings of imported names (``attn = flash_attn_func``),
    which resolve like the import.
    """

    _dotted = staticmethod(dotted)

    def __init__(self, module: cst.Module) -> None:
        super().__init__()
        self._walk(module.body, gated=False, toplevel=True)
        self._finish()

    # -- construction -------------------------------------------------------------------
    def _walk(self, body: object, *, gated: bool, toplevel: bool, gate: Gate | None = None,
              fallback_of: tuple[Gate, ...] = (), module_level: bool = True) -> None:
        """Record ``body``'s bindings. ``gate``: the innermost availability gate whose package path
        this is; ``fallback_of``: every gate whose no-package path this is (innermost first)."""
        for stmt in _iter_statements(body):
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)):
                        self._add(small, gated=gated, toplevel=toplevel, gate=gate, paths=fallback_of)
                        if fallback_of:
                            self._fallback_import(small, fallback_of)
                    elif isinstance(small, (cst.Assign, cst.AnnAssign)) and module_level:
                        self._assignment(stmt, small, gate, fallback_of)
                    elif isinstance(small, cst.Assign):
                        first = small.targets[0].target
                        if fallback_of or len(small.targets) > 1 or not isinstance(first, cst.Name) \
                                or first.value in self.bindings:
                            self._local_assignment(small, fallback_of)
                    elif isinstance(small, cst.AnnAssign):
                        self._local_assignment(small, fallback_of)
            elif isinstance(stmt, (cst.Try, cst.TryStar)):
                catches = any(_handler_catches_import_error(h) for h in stmt.handlers)
                inner = stmt if catches else gate
                if catches:
                    self.gates.append(stmt)
                self._walk(stmt.body, gated=gated or catches, toplevel=toplevel, gate=inner,
                           fallback_of=fallback_of, module_level=module_level)
                self._conditional += 1  # a handler or the else block may not run
                for handler in stmt.handlers:
                    fb = (stmt, *fallback_of) if catches and _handler_catches_import_error(handler) else fallback_of
                    self._walk(handler.body, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fb,
                               module_level=module_level)
                if stmt.orelse is not None:
                    self._walk(stmt.orelse.body, gated=gated or catches, toplevel=toplevel, gate=inner,
                               fallback_of=fallback_of, module_level=module_level)
                self._conditional -= 1
                if stmt.finalbody is not None:
                    self._walk(stmt.finalbody.body, gated=gated, toplevel=toplevel, gate=gate,
                               fallback_of=fallback_of, module_level=module_level)
            elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                kind = "class" if isinstance(stmt, cst.ClassDef) else "function"
                if module_level:
                    self._defs.setdefault(stmt.name.value, []).append(fallback_of)
                    if gate is None and not fallback_of:
                        self._earlier.setdefault(stmt.name.value, ("def", stmt))
                if not self._in_class:  # a method is an attribute, not a name
                    self._note(stmt.name.value, fallback_of, kind, stmt, True)
                if fallback_of:
                    self._fallback(stmt.name.value, fallback_of, stmt, kind, True)
                saved = self._enter(stmt, kind == "class")
                self._walk(stmt.body, gated=gated, toplevel=False, gate=gate, fallback_of=(),
                           module_level=False)
                self._leave(saved)
            elif isinstance(stmt, cst.If):
                self._if(stmt, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fallback_of,
                         module_level=module_level)
            elif isinstance(stmt, (cst.With, cst.For, cst.While)):
                loop = not isinstance(stmt, cst.With)  # a loop's body and else block may not run
                self._conditional += loop
                self._walk(stmt.body, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fallback_of,
                           module_level=module_level)
                orelse = getattr(stmt, "orelse", None)
                if orelse is not None:
                    self._walk(orelse.body, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fallback_of,
                               module_level=module_level)
                self._conditional -= loop
            elif isinstance(stmt, cst.Match):
                self._conditional += 1
                for case in stmt.cases:  # any case may run: each is walked like an `if` branch
                    self._walk(case.body, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fallback_of,
                               module_level=module_level)
                self._conditional -= 1

    def _elif(self, stmt: cst.If) -> cst.If | None:
        return stmt.orelse if isinstance(stmt.orelse, cst.If) else None

    def _else(self, stmt: cst.If) -> object | None:
        return stmt.orelse.body if isinstance(stmt.orelse, cst.Else) else None

    def _probe(self, test: cst.BaseExpression) -> bool:
        if isinstance(test, cst.Name):
            return test.value in self.flags
        return _probe_call(test)


    def _fallback_import(self, node: cst.Import | cst.ImportFrom, gates: tuple[Gate, ...]) -> None:
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
            self._fallback_module(local, gates, node, module or "")

    def _local_assignment(self, small: cst.Assign | cst.AnnAssign, fallback_of: tuple[Gate, ...]) -> None:
        """An assignment in a def or class body: a fallback in a function-local gate (`except
        ImportError: attn = naive_attention`), and a binding for the competing-binding check."""
        if small.value is None:
            return  # `x: int` binds nothing
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
        imported = self.bindings  # only names imported so far can compete (a local walk is cheap)
        for t in targets:
            if isinstance(t, cst.Name):
                if (fallback_of and isinstance(small, cst.Assign)) or t.value in imported:
                    real = not (len(targets) == 1 and _is_sentinel(small.value))
                    if fallback_of and isinstance(small, cst.Assign):
                        self._fallback(t.value, fallback_of, small, "assignment", real)
                    if real and t.value in imported:
                        self._note(t.value, fallback_of, "assignment", small, True)
            elif isinstance(t, (cst.Tuple, cst.List)):
                for el in t.elements:
                    if isinstance(el.value, cst.Name) and el.value.value in imported:
                        self._note(el.value.value, fallback_of, "assignment", small, True)

    def _assignment(self, line: cst.SimpleStatementLine, node: cst.Assign | cst.AnnAssign,
                    gate: Gate | None, fallback_of: tuple[Gate, ...]) -> None:
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
            if gate is None and not fallback_of and value is not None:
                self._earlier.setdefault(name, ("assignment" if v is None or not _is_sentinel(v) else "sentinel", node))
            real = value is not None and not (v is not None and _is_sentinel(v))
            if value is not None:
                self._note(name, fallback_of, "assignment", line, real)
            if fallback_of:
                self._fallback(name, fallback_of, node, "assignment", real)
            elif gate is not None and name in self._earlier and not (v is not None and isinstance(
                    v, (cst.Name, cst.Attribute))):
                # `LlamaRMSNorm = partial(FusedRMSNorm, eps=1e-6)` in the gate overrides an earlier
                # definition: that definition is what runs without the package
                kind, stmt = self._earlier[name]
                self._fallback(name, (gate,), stmt, "earlier", kind != "sentinel")
            if v is None:
                continue
            if isinstance(gate, cst.Try) and not fallback_of and isinstance(v, cst.Name) and v.value == "True":
                self.flags[name] = gate
            elif _probe_call(v):  # `HAS_FLASH = importlib.util.find_spec("flash_attn") is not None`
                self.flags[name] = node
            if not fallback_of and isinstance(v, (cst.Name, cst.Attribute)):
                self._rebind(name, v, line, gate)

    def _add(self, node: cst.Import | cst.ImportFrom, *, gated: bool, toplevel: bool,
             gate: Gate | None = None, paths: tuple[Gate, ...] = ()) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                name = dotted(alias.name) or ""
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local, target = alias.asname.name.value, name
                else:
                    local = target = name.split(".")[0]
                self._bind(Binding(local, target, node, gated, toplevel, name, gate), paths)
            return
        if node.module is None:  # `from . import x`
            base = "." * len(node.relative)
        else:
            base = "." * len(node.relative) + (dotted(node.module) or "")
        if isinstance(node.names, cst.ImportStar):
            self._bind(Binding("*", base + ".*", node, gated, toplevel, base, gate), paths)
            return
        for alias in node.names:
            name = dotted(alias.name) or ""
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            sep = "" if base.endswith(".") else "."
            self._bind(Binding(local, f"{base}{sep}{name}", node, gated, toplevel, base, gate), paths)







def _iter_statements(body: object) -> Iterator[cst.CSTNode]:
    if isinstance(body, cst.Module):
        yield from body.body
    elif isinstance(body, cst.IndentedBlock):
        yield from body.body
    elif isinstance(body, cst.SimpleStatementSuite):
        yield cst.SimpleStatementLine(body=body.body)
    elif isinstance(body, (list, tuple)):
        yield from body
