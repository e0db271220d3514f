"""The semantic gate: a Python fix counts only if the fixed module still makes sense.

The engine applies fixes family by family. Before it accepts a family's step on a file it
asks :func:`check` to compare the module before and after the step (stdlib :mod:`ast` only,
cheap). The step is refused, and its findings downgraded to flags with the reason, when the
fixed module

1. introduces a name that nothing defines or imports (and no builtin provides), where the
   module before the fix had no such unresolved name;
2. newly imports a top-level module that neither the standard library, torch, the repository
   itself, a file the fix creates, nor the nearest manifest provides (``torchao`` counts as
   provided when the manifest requires torch: the dependencies family adds it next to torch);
3. uses an API whose first release (:mod:`porter.apis`, or the fix's own ``requires``) the
   nearest manifest's pins exclude. With ``--unsafe-fixes`` a pin of another distribution than
   torch may be raised instead: the need is recorded and the dependencies family raises the pin
   (PRT812, unsafe) in the same series; torch is only ever raised through ``target-torch``;
4. leaves a live (ungated) import of a CUDA-only package that the nearest manifest names,
   whose names the module used before the fix and no longer uses: the requirement would go
   while the module still fails to import without the package.

Pre-existing unresolved names (star imports, names injected at run time) never block: only
what the fix adds is judged.
"""

from __future__ import annotations

import ast
import builtins
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .apis import SETTING_KEYS, dists_for_module, minimum, pin_admits, pin_guarantees, requirements_for

_BUILTINS = frozenset(dir(builtins)) | {
    "__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__",
    "__path__", "__annotations__", "__dict__", "__module__", "__qualname__", "__class__", "__debug__",
}
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__", "typing_extensions"}
_ALWAYS = frozenset({"torch"})  # the target environment has torch by definition
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


@dataclass
class ModuleFacts:
    """What the gate reads from one module text."""

    unresolved: frozenset[str]
    imports: frozenset[str]  # dotted modules imported (absolute only)
    live: dict[str, frozenset[str]]  # root module -> names bound by its live (ungated) imports
    symbols: frozenset[str]  # qualified names used, plus "qual(keyword)" for call keywords
    names_used: frozenset[str]


@dataclass
class Verdict:
    ok: bool
    reason: str = ""
    needs: dict[str, str] = field(default_factory=dict)  # dist -> ">=X" the series must require


@dataclass(frozen=True)
class GateContext:
    """The nearest manifest's view, as the engine knows it for one file."""

    pins: Mapping[str, str]  # nearest manifest's pins (dist -> specifier); {} when none
    has_manifest: bool  # the file has a nearest manifest at all
    manifest: str = ""  # its folder, for messages ("" is the root)
    local_modules: frozenset[str] = frozenset()  # top-level names the repository itself provides
    unsafe: bool = False  # --unsafe-fixes: pins of other distributions may be raised
    torchao_addable: bool = True  # the dependencies family may add torchao next to torch
    target_torch: str = ""


# -- reading a module ------------------------------------------------------------------------


def _inner(node: ast.AST) -> list[ast.AST]:
    """The children of a scope node that are evaluated inside that scope."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node.args, *node.body]
    if isinstance(node, ast.Lambda):
        return [node.args, node.body]
    if isinstance(node, ast.ClassDef):
        return list(node.body)
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        return [*node.generators, node.elt]
    if isinstance(node, ast.DictComp):
        return [*node.generators, node.key, node.value]
    return list(ast.iter_child_nodes(node))


def _outer(node: ast.AST) -> list[ast.AST]:
    """The parts of a nested scope node evaluated in the enclosing scope."""
    out: list[ast.AST] = []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = node.args
        out += node.decorator_list + a.defaults + [d for d in a.kw_defaults if d is not None]
        out += [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                if x is not None and x.annotation is not None]
        if node.returns is not None:
            out.append(node.returns)
    elif isinstance(node, ast.ClassDef):
        out += node.decorator_list + node.bases + [k.value for k in node.keywords]
    elif isinstance(node, ast.Lambda):
        out += node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
    elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        out.append(node.generators[0].iter)
    return out


def _own(scope: ast.AST) -> Iterable[ast.AST]:
    """Nodes belonging to ``scope`` itself (nested scope nodes are yielded, not entered)."""
    stack = list(reversed(_inner(scope)))
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, _SCOPES):
            stack.extend(_outer(n))
            continue
        stack.extend(ast.iter_child_nodes(n))


def _bound(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [node.id]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name.split(".")[0]) for a in node.names if a.name != "*"]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [node.name]
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    if isinstance(node, ast.MatchAs) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchStar) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    return []


def unresolved_names(tree: ast.Module) -> frozenset[str]:
    """Names loaded somewhere that no enclosing scope binds (flow-insensitive) and no builtin is."""
    out: set[str] = set()
    module_bound: set[str] = set()

    def walk(scope: ast.AST, chain: list[set[str]]) -> None:
        own = list(_own(scope))
        bound: set[str] = set()
        for n in own:
            bound.update(_bound(n))
            if isinstance(n, ast.Global):
                module_bound.update(n.names)
        if isinstance(scope, ast.Module):
            module_bound.update(bound)
            bound = module_bound
        visible = [bound, *chain]
        for n in own:
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                if n.id not in _BUILTINS and not any(n.id in s for s in visible):
                    out.add(n.id)
        # a class body's names are not visible inside its methods
        inner_chain = chain if isinstance(scope, ast.ClassDef) else visible
        for n in own:
            if isinstance(n, _SCOPES):
                walk(n, inner_chain)

    walk(tree, [])
    # names a later global statement binds at module level
    return frozenset(n for n in out if n not in module_bound)


def _gated(stack: Sequence[ast.AST]) -> bool:
    """Inside a try whose handlers catch ImportError (or broader), or under an if/with."""
    for node in stack:
        if isinstance(node, ast.Try):
            for h in node.handlers:
                names = []
                if h.type is None:
                    return True
                types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
                for t in types:
                    names.append(t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", ""))
                if any(x in ("ImportError", "ModuleNotFoundError", "Exception", "BaseException") for x in names):
                    return True
        if isinstance(node, ast.If):
            return True
    return False


def read_module(text: str) -> ModuleFacts | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    imports: set[str] = set()
    live: dict[str, set[str]] = {}
    aliases: dict[str, str] = {}
    symbols: set[str] = set()
    used: set[str] = set()

    def visit(node: ast.AST, stack: list[ast.AST]) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                imports.add(a.name)
                local = a.asname or a.name.split(".")[0]
                aliases.setdefault(local, a.name if a.asname else a.name.split(".")[0])
                symbols.add(a.name)
                if not _gated(stack):
                    live.setdefault(a.name.split(".")[0], set()).add(local)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imports.add(node.module)
            for a in node.names:
                if a.name == "*":
                    continue
                local = a.asname or a.name
                aliases.setdefault(local, f"{node.module}.{a.name}")
                symbols.add(f"{node.module}.{a.name}")
                if not _gated(stack):
                    live.setdefault(node.module.split(".")[0], set()).add(local)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            used.add(node.id)
        stack.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child, stack)
        stack.pop()

    try:
        visit(tree, [])
    except RecursionError:
        return None

    def qual(expr: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name) or expr.id not in aliases:
            return None
        return ".".join([aliases[expr.id], *reversed(parts)])

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            q = qual(node)
            if q:
                symbols.add(q)
        elif isinstance(node, ast.Call):
            q = qual(node.func)
            if q:
                symbols.update(f"{q}({k.arg})" for k in node.keywords if k.arg)
        symbols.update(_setting_values(node))
    return ModuleFacts(unresolved_names(tree), frozenset(imports), {k: frozenset(v) for k, v in live.items()},
                       frozenset(symbols), frozenset(used))


def _setting_values(node: ast.AST) -> Iterable[str]:
    """``key=value`` for string settings whose values need a release (``attn_implementation='sdpa'``),
    however they are written: a keyword, ``d['key'] = v``, ``obj.key = v`` or a dict literal."""
    pairs: list[tuple[str, ast.AST]] = []
    if isinstance(node, ast.Call):
        pairs += [(k.arg, k.value) for k in node.keywords if k.arg]
    elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if isinstance(t, ast.Attribute):
                pairs.append((t.attr, node.value))
            elif isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str):
                pairs.append((t.slice.value, node.value))
    elif isinstance(node, ast.Dict):
        pairs += [(k.value, v) for k, v in zip(node.keys, node.values, strict=False)
                  if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    for key, value in pairs:
        if key in SETTING_KEYS and isinstance(value, ast.Constant) and isinstance(value.value, str):
            yield f"{SETTING_KEYS[key]}={value.value}"


# -- the check -------------------------------------------------------------------------------


def _provided(root: str, g: GateContext, created: Iterable[str]) -> bool:
    if root in _STDLIB or root in _ALWAYS or root in g.local_modules:
        return True
    if any(root in (part.removesuffix(".py") for part in p.split("/")) for p in created):
        return True
    if not g.has_manifest:
        return True  # no manifest to disagree with
    if root == "torchao" and g.torchao_addable and "torch" in g.pins:
        return True
    return any(d in g.pins for d in dists_for_module(root))


def _where(g: GateContext) -> str:
    return f"the nearest manifest ({g.manifest + '/' if g.manifest else 'the root'})" if g.has_manifest \
        else "the repository"


def _what(why: str) -> str:
    return why if " " in why else f"`{why}`"


def check(before: str, after: str, g: GateContext, *, requires: Sequence[str] = (),
          created: Iterable[str] = ()) -> Verdict:
    """Judge one fix step on a Python module (``before`` -> ``after``)."""
    a = read_module(after)
    if a is None:
        return Verdict(False, "the fixed module does not parse")
    b = read_module(before)
    if b is None:
        return Verdict(True)  # nothing to compare with (the engine only fixes parsed files)
    created = list(created)
    new_names = sorted(a.unresolved - b.unresolved)
    if new_names:
        return Verdict(False, f"the fixed code uses {', '.join(f'`{n}`' for n in new_names[:4])}, which the "
                       "module neither defines nor imports")
    old_roots = {m.split(".")[0] for m in b.imports}
    for mod in sorted(a.imports - b.imports):
        root = mod.split(".")[0]
        if root in old_roots:
            continue
        if not _provided(root, g, created):
            why = ""
            if root == "torchao" and g.torchao_addable:
                why = " (porter adds torchao only next to a torch requirement, and this manifest names no torch)"
            return Verdict(False, f"the fix imports `{mod}`, which {_where(g)} does not provide{why}")
    needed = requirements_for(a.symbols - b.symbols, extra=requires)
    needs: dict[str, str] = {}
    for dist, (req, why) in sorted(needed.items()):
        floor = minimum(req)
        if floor is None:
            continue
        pin = g.pins.get(dist)
        if dist == "torch" and pin and pin.strip() and pin_admits(pin, floor) and not pin_guarantees(pin, floor):
            # `torch>=2` declares support for releases without the API: the repo's own pins would
            # install a torch the fixed module cannot import
            return Verdict(False, f"{_what(why)} needs torch>={floor}, but {_where(g)} pins torch{pin}, which "
                           "also admits older releases (set target-torch, or raise the torch floor, to port "
                           "against a newer torch)")
        if pin is None or pin_admits(pin, floor):
            if dist != "torch":
                needs[dist] = f">={floor}"
            continue
        if dist == "torch":
            return Verdict(False, f"{_what(why)} needs torch>={floor}, but {_where(g)} pins torch{pin} "
                           "(set target-torch to port against a newer torch)")
        if not g.unsafe:
            return Verdict(False, f"{_what(why)} needs {dist}>={floor}, but {_where(g)} pins {dist}{pin}; "
                           "--unsafe-fixes raises the pin in the same series")
        needs[dist] = f">={floor}"
    # a CUDA-only package left imported although the fix removed its last use
    from .codemods.dependencies.catalog import cuda_only_for

    dropping = {m for d in g.pins if (e := cuda_only_for(d)) is not None for m in e.modules}
    for root in sorted(dropping & set(a.live)):
        names = a.live[root]
        if names & a.names_used:
            continue
        if names & b.names_used:
            return Verdict(False, f"the fix leaves `{root}` imported (unused) while {_where(g)} names a "
                           "CUDA-only package the series drops once nothing imports it: the module would "
                           "still fail to import without it")
    return Verdict(True, needs=needs)


__all__ = ["GateContext", "ModuleFacts", "Verdict", "check", "read_module", "unresolved_names"]
