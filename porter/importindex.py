"""What an import index records and every query on it, whatever the tree kind (no parser imported).

porter resolves names through the module's own import statements (``import a.b as c``,
``from a.b import x as y``) instead of a scope analysis: an order of magnitude cheaper and
enough for library APIs, which are reached through imports. Local shadowing of an imported name
is not modelled. :class:`porter.pyimports.ImportIndex` fills these records from a LibCST module,
:class:`porter.pyast_imports.AstImportIndex` from a stdlib ``ast`` module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Union

if TYPE_CHECKING:
    import ast

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
Gate = Union["cst.Try", "cst.TryStar", "cst.If", "ast.Try", "ast.If"]
Node = Union["cst.CSTNode", "ast.AST"]


# by class name, which LibCST and ast share: no parser needs importing to tell them apart
_TRY_GATES = frozenset({"Try", "TryStar"})


_PLAIN_IMPORTS = frozenset({"Import"})  # `import a.b` (not `from a import b`)


_GATE_EXCEPTIONS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "OSError"}


@dataclass(frozen=True)
class Binding:
    local: str  # the name bound in the module ("F", "flash_attn", "fa")
    target: str  # what it refers to ("torch.nn.functional", "flash_attn.flash_attn_func")
    statement: cst.Import | cst.ImportFrom | ast.Import | ast.ImportFrom
    # not bound on every run: inside `try: ... except ImportError`, `if is_x_available():` (or an
    # `elif` of one), or `if TYPE_CHECKING:` (a binding for type checkers only, never at run time)
    gated: bool
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
    # None only for an "other-*" binding of an import outside any gate
    gate: Gate | None = field(repr=False, compare=False)
    statement: Node = field(repr=False, compare=False)  # the binding statement (class, def, ...)
    # "class", "function", "assignment", "import", "earlier" (bound before the gate), or "other-<kind>":
    # a binding of the imported name on another path than the import (another branch of a plain
    # `if`/`match`, a function's local, a later redefinition), so a use need not be the imported object
    kind: str
    real: bool  # False for a sentinel (`name = None`, a literal) or a re-import from the same
    # package (another release's name): not an implementation that runs without the package
    module: str = ""  # for "import": the module the fallback imports from

    def describe(self) -> str:
        if self.kind == "earlier":
            return f"the definition of {self.name} before its availability gate, which the gate only overrides"
        base = self.kind.removeprefix("other-")
        what = {"class": f"class {self.name}", "function": f"def {self.name}",
                "import": f"an import of {self.name}", "assignment": f"`{self.name} = ...`"}[base]
        if base != self.kind:
            return f"{what} elsewhere in the module (another branch or scope, or a redefinition after the import)"
        if type(self.gate).__name__ in _TRY_GATES:
            where = "the except handler"
        elif _has_elif(self.gate):
            where = "the elif/else branches"
        else:
            where = "the else branch"
        return f"{what} in {where} of its availability gate"


def _has_elif(gate: Gate) -> bool:
    """Whether an ``if`` gate continues with ``elif`` (LibCST: its ``orelse`` is an ``If``; ast: the
    ``orelse`` is one ``If`` at the gate's own column, not one nested under ``else:``)."""
    orelse = getattr(gate, "orelse", None)
    if isinstance(orelse, list):
        return len(orelse) == 1 and type(orelse[0]).__name__ == "If" \
            and orelse[0].col_offset == getattr(gate, "col_offset", -1)
    return type(orelse).__name__ == "If"


class _Bound(NamedTuple):
    """A binding of a name in the module or a function, for the competing-binding check."""

    seq: int  # walk order
    paths: tuple[Any, ...]  # the gates whose no-package path holds it
    kind: str  # "import", "class", "function", "assignment"
    statement: Any
    real: bool  # False for a sentinel (`name = None`, a literal)
    target: str  # what an import names ("" otherwise; rebindings are looked up by statement)
    conditional: bool  # inside a gate or a branch that may not run (within its scope)
    scope: Any  # the enclosing def (None: the module)


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
        # other top-level bindings -> the gates whose no-package path binds them (empty: none)
        self._defs: dict[str, list[tuple[Gate, ...]]] = {}
        # the first plain module-level binding of a name (outside any gate): (kind, statement)
        self._earlier: dict[str, tuple[str, Node]] = {}
        self._rebind_earlier: dict[str, tuple[str, Node] | None] = {}
        # every binding of a name in the module and its functions, in walk order (imports, defs,
        # classes, real assignments; class bodies are scopes of their own and are not recorded)
        self._bound: dict[str, list[_Bound]] = {}
        self._rebind_targets: dict[int, str] = {}  # id(rebinding statement) -> the target it names
        self._seq = 0
        self._scope: Any = None  # the def whose body is walked (None: the module)
        self._in_class = False
        self._conditional = 0  # > 0 inside a branch that may not run (plain `if`/`match` arm, loop, handler)
        # imported names with a competing module-level binding outside their gate's fallback
        self.alternatives: dict[str, Fallback] = {}

    def _finish(self) -> None:
        for name, rb in list(self.rebinds.items()):
            others = self._defs.get(name, ())
            earlier = self._rebind_earlier.get(name)
            if rb.gate is not None and earlier is not None and len(others) == 1 and not others[0]:
                # `class RMSNorm: ...` then `try: from apex... import FusedRMSNorm; RMSNorm = FusedRMSNorm`
                # `except ImportError: pass`: the earlier definition is what runs without the package
                # (`flash_attn_func = None` before the gate is only a placeholder)
                self._fallback(name, (rb.gate,), earlier[1], "earlier", earlier[0] != "sentinel")
                continue
            if any(not any(g is rb.gate for g in gates) for gates in others):
                del self.rebinds[name]  # bound twice outside its gate's fallback: not provably this
        for name, found in self.bindings.items():
            records = self._bound.get(name, ())
            if len(records) < 2 or name == "*":
                continue  # bound once
            scopes: set[int] = set()
            for binding in found:  # the first import of the name in each scope (module, each def)
                mine = next((r for r in records if r.kind == "import" and r.statement is binding.statement), None)
                if mine is None or id(mine.scope) in scopes:
                    continue
                scopes.add(id(mine.scope))
                alternative = self._competitor(name, binding, mine, records)
                if alternative is not None:
                    self.alternatives[name] = alternative
                    break

    def _competitor(self, name: str, binding: Binding, mine: _Bound, records: list[_Bound]) -> Fallback | None:
        """A real binding of an imported name that a use may see instead of the import (names
        resolve module-wide): in the import's scope a later one (it overrides the import on its
        path), or, when the import itself is conditional, an earlier one (it survives where the
        import's branch does not run); in another scope (a function's local) any. A binding on the
        import's own no-package path is its gate's fallback (recorded there); a rebinding to the same
        object (`attn = flash_attn_func`, the same import again) is no competitor."""
        if binding.gate is not None:
            fb = self.fallback_in(binding.gate, name)
            if fb is not None and fb.real:
                return None  # the gate's own fallback already says so
        for other in records:
            if other is mine or not other.real:
                continue
            target = other.target or self._rebind_targets.get(id(other.statement), "")
            if target and canonical(target) == canonical(binding.target):
                continue
            if binding.gate is not None and any(g is binding.gate for g in other.paths):
                continue
            if other.scope is mine.scope and other.seq < mine.seq and not mine.conditional:
                continue  # the import overrides it on every path
            return Fallback(name, binding.gate, other.statement, f"other-{other.kind}", True, other.target)
        return None

    def _note(self, name: str, paths: tuple[Gate, ...], kind: str, statement: Node, real: bool,
              target: str = "", gated: bool = False) -> None:
        """Record a binding of ``name`` in the current scope for ``_competitor``."""
        if self._in_class:
            return  # a class attribute: no bare name in the module or its functions
        self._seq += 1
        records = self._bound.get(name)
        if records is None:
            records = self._bound[name] = []
        records.append(_Bound(self._seq, paths, kind, statement, real, target, gated or self._conditional > 0,
                              self._scope))

    def _enter(self, scope: Any, is_class: bool) -> tuple[Any, bool, int]:
        """Start walking the body of ``scope`` (a def or class); returns what ``_leave`` restores."""
        saved = (self._scope, self._in_class, self._conditional)
        self._scope, self._in_class, self._conditional = scope, is_class, 0
        return saved

    def _leave(self, saved: tuple[Any, bool, int]) -> None:
        self._scope, self._in_class, self._conditional = saved

    def _rebind(self, name: str, value: Any, statement: Any, gate: Gate | None) -> None:
        """``name = <a chain rooted at an imported name>`` at module level resolves like the import."""
        text = self._dotted(value)
        head = (text or "").split(".")[0]
        target = self.resolve(value) if head in self.bindings or head in self.rebinds else None
        if target is not None and text is not None:
            via = self.rebinds[head].via if head in self.rebinds and head not in self.bindings else head
            self.rebinds[name] = Rebind(name, target, via, statement, gate)
            self._rebind_targets[id(statement)] = target
            self._rebind_earlier[name] = self._earlier.get(name)
            self._defs[name].pop()  # the rebind itself is not a competing binding

    def _fallback(self, name: str, gates: tuple[Gate, ...], stmt: Node, kind: str, real: bool) -> None:
        """Record a binding on the no-package path of every gate in ``gates``: a branch nested in
        the fallback of an outer gate (an ``elif``, an inner gate's handler) runs without both."""
        for gate in gates:
            key = (id(gate), name)
            old = self.fallbacks.get(key)
            # a binding on the no-package path shadows the definition before the gate
            if old is None or (real and not old.real) or (old.kind == "earlier" and kind != "earlier"):
                self.fallbacks[key] = Fallback(name, gate, stmt, kind, real)

    def _fallback_module(self, name: str, gates: tuple[Gate, ...], stmt: Node, module: str) -> None:
        """An import of ``name`` from ``module`` on the no-package path of every gate in ``gates``."""
        for gate in gates:
            key = (id(gate), name)
            old = self.fallbacks.get(key)
            if old is None or not old.real or old.kind == "earlier":
                self.fallbacks[key] = Fallback(name, gate, stmt, "import", True, module)

    def _if(self, stmt: Any, *, gated: bool, toplevel: bool, gate: Gate | None, fallback_of: tuple[Gate, ...],
            module_level: bool) -> None:
        """An ``if`` and its ``elif`` chain, each ``elif`` walked as the ``if`` it is inside the
        ``else`` branch before it: its test may be a probe (a gate of its own), and it and every
        branch after it run when a probe before it failed (a fallback of that probe's gate). Each
        tree's index supplies ``_walk``, ``_probe`` and the chain's shape: ``_elif`` (the ``elif``
        continuing ``stmt``, or None) and ``_else`` (the final ``else:`` block's statements, or None)."""
        self._conditional += 1  # every branch may not run
        while True:
            typing_only = self._typing_only(stmt.test)
            probe = not typing_only and self._probe(stmt.test)  # type: ignore[attr-defined]
            if probe:
                self.gates.append(stmt)
            self._walk(stmt.body, gated=gated or probe or typing_only, toplevel=toplevel,  # type: ignore[attr-defined]
                       gate=stmt if probe else gate, fallback_of=fallback_of, module_level=module_level)
            if probe:
                fallback_of = (stmt, *fallback_of)
            following = self._elif(stmt)  # type: ignore[attr-defined]
            if following is None:
                break
            stmt = following
        rest = self._else(stmt)  # type: ignore[attr-defined]
        if rest is not None:
            self._walk(rest, gated=gated, toplevel=toplevel, gate=gate,  # type: ignore[attr-defined]
                       fallback_of=fallback_of, module_level=module_level)
        self._conditional -= 1

    def _typing_only(self, test: Any) -> bool:
        """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): its body never runs, so what it
        imports is no run-time binding."""
        return (self._dotted(test) or "").split(".")[-1] == "TYPE_CHECKING"

    def _bind(self, binding: Binding, paths: tuple[Gate, ...] = ()) -> None:
        """Record an import binding; ``paths``: the gates whose no-package path it is on."""
        self.bindings.setdefault(binding.local, []).append(binding)
        self.statements.append(binding)
        if binding.local == "*":
            return
        self._note(binding.local, paths, "import", binding.statement, True, binding.target, binding.gated)
        earlier = self._earlier.get(binding.local)
        if binding.toplevel and binding.gate is not None and earlier is not None:
            # `def flash_attn_func(...)` then `try: from flash_attn import flash_attn_func` / `except
            # ImportError: pass`: the earlier definition is what runs without the package
            self._fallback(binding.local, (binding.gate,), earlier[1], "earlier", earlier[0] != "sentinel")

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
        """The binding of ``name`` on its gate's no-package path (handler or else branch), if any;
        else, for an imported name, a real module-level binding on another path than the import
        (``if USE_FLASH: from flash_attn import f`` / ``else: def f(...)``), if any."""
        gate = self.gate_of(name)
        fb = self.fallback_in(gate, name) if gate is not None else None
        if fb is None or not fb.real:
            alternative = self.alternatives.get(name) if name in self.bindings else None
            if alternative is not None:
                return alternative
        return fb

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
            if type(binding.statement).__name__ in _PLAIN_IMPORTS and not binding.gated:
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
            key = (0 if type(binding.statement).__name__ in _PLAIN_IMPORTS else 1, len(candidate), candidate)
            if best is None or key < best:
                best = key
        return best[2] if best else None

    def modules(self) -> Iterator[Binding]:
        return iter(self.statements)


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


# the first component of every defining module above: a name outside them is its own spelling
_CANONICAL_HEADS = tuple(sorted({prefix.split(".", 1)[0] + "." for prefix, _, _ in _CANONICAL}))


def canonical(qualname: str) -> str:
    """The exported spelling of ``qualname`` when it goes through a defining submodule."""
    if not qualname.startswith(_CANONICAL_HEADS):
        return qualname
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
