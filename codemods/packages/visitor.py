"""The packages family's detection on the stdlib ``ast`` tier (loaded when a file matches its tokens).

Every rule of ``porter.codemods.packages`` is reported here: imports, uses and re-exports of the
CUDA-only packages, availability gates and probes, and the Hugging Face attention switches. Names
resolve through ``ctx.ast_imports``; fixes are text edits over node ranges. LibCST is read only for
the statement a proven fix rewrites (a dead import beside live names, a gate whose fallback is kept).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from porter.fallbacks import KEEPS_FALLBACK, describe_gate, gate_facts, keep_fallback, plain_literal
from porter.findings import Applicability, Edit
from porter.framework import PyContext
from porter.pyast import AstVisitor
from porter.pyast_imports import ast_dotted

from . import _BY_MODULE, _ROOTS, ALIASES, NAME, Package, module_of, package_of, package_of_dist
from . import hf_attention as hf

_FA2_VALUES = {"flash_attention_2"}


def _plain_string(node: ast.AST, code: str) -> str | None:
    """The value of a single plain string literal (``"x"``, ``r'x'``; not bytes, an f-string or an
    implicit concatenation: ``ast`` folds those into one constant), given the node's source."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and plain_literal(code):
        return node.value
    return None


def _requote(code: str, value: str) -> str:
    """``value`` written with the prefix and quotes of the literal ``code``."""
    i = 0
    while i < len(code) and code[i] in "rRbBuUfF":
        i += 1
    quote = code[i:i + 3] if code[i:i + 3] in ('"""', "'''") else code[i:i + 1]
    return f"{code[:i]}{quote}{value}{quote}"


_STDLIB_ROOTS = {"importlib", "pkgutil", "pkg_resources"}
_IMPORTERS = {"importlib.import_module", "__import__", "importlib.__import__", "builtins.__import__"}
_PROBES = {"importlib.util.find_spec", "importlib.find_loader", "pkgutil.find_loader",
           "importlib.metadata.version", "importlib.metadata.distribution", "importlib_metadata.version",
           "pkg_resources.get_distribution", "pkg_resources.require"}
# lightning_utilities-style probes: RequirementCache("flash-attn>=2.0"), package_available("apex")
_REQ_PROBES = {"RequirementCache", "package_available", "module_available", "compare_version"}
_REQ_PROBE_LIBS = {"lightning_utilities", "lightning", "pytorch_lightning", "lightning_fabric"}
_CALLEES = {q.rsplit(".", 1)[-1] for q in _IMPORTERS | _PROBES} | _REQ_PROBES


def _requirement_name(text: str) -> str:
    """The distribution name of a PEP 508 requirement string (``flash-attn>=2.0`` -> ``flash-attn``)."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover
        return re.split(r"[<>=!~;\[ ]", text.strip(), maxsplit=1)[0]
    try:
        return Requirement(text).name
    except InvalidRequirement:
        return text.strip()


_HELPER = re.compile(r"^is_(flash_attn(?:_2|_3)?|xformers|bitsandbytes|bnb|apex|transformer_engine|pynvml|"
                     r"cupy|tensorrt|torch_tensorrt)_available$|^is_(flash_attn)_greater_or_equal\w*$")
_HELPER_LIBS = {"transformers", "diffusers", "accelerate", "peft", "trl", "optimum", "lightning",
                "pytorch_lightning", "deepspeed", "vllm", "sentence_transformers"}


def _helper_pkg(key: str) -> Package | None:
    return _BY_MODULE.get({"bnb": "bitsandbytes", "torch_tensorrt": "tensorrt"}.get(
        key, "flash_attn" if key.startswith("flash_attn") else key))


_HELPER_PACKAGES = {k: p for k in ("flash_attn", "flash_attn_2", "flash_attn_3", "xformers", "bitsandbytes",
                                   "bnb", "apex", "transformer_engine", "pynvml", "cupy", "tensorrt",
                                   "torch_tensorrt") if (p := _helper_pkg(k)) is not None}


# imported for what importing them does (a CUDA context, a torch.compile backend): not dead when unused
_SIDE_EFFECT_IMPORTS = ("pycuda.autoinit", "torch_tensorrt", "transformer_engine.pytorch")

_IDENT = re.compile(r"[^\W\d]\w*")
_GAP = re.compile(r"(?:[ \t\f]|\\\r?\n|\\\r)*")  # whitespace inside a logical line (continuations too)


def _first_positional(call: ast.Call) -> ast.expr | None:
    """The first positional argument that is not ``*args``."""
    return next((a for a in call.args if not isinstance(a, ast.Starred)), None)


def _keyword(call: ast.Call, name: str) -> ast.keyword | None:
    """The ``name=`` argument (the last one, as a dict of keywords would keep)."""
    found = None
    for kw in call.keywords:
        if kw.arg == name:
            found = kw
    return found


def _is_true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _is_false(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and (node.value is False or node.value is None)


class PackagesVisitor(AstVisitor):
    """The family's detection on the stdlib ``ast`` tree, with ``ctx.ast_imports`` as the import index."""

    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self.imports = ctx.ast_imports
        self._skip: set[int] = set()  # Name/Attribute nodes that are not references
        self._attn_facts: hf.AttentionFacts | None = None  # read at a switch site only (whole-tree facts)
        self._switch_seen: set[int] = set()  # 'flash_attention_2' literals already reported
        self._impl_names: dict[str, int] = {}  # names passed as attn_implementation=<name>, and how often
        self._fa2_assigns: list[tuple[str, ast.expr]] = []  # name = <'flash_attention_2' ...>
        self._used: set[str] | None = None
        self._pkg_root: dict[str, bool] = {}  # name -> resolves into a CUDA-only package's root module
        self._top: list[ast.stmt] = ctx.tree.body
        # visit_Name does nothing for a name outside a CUDA-only package; only a bound or rebound
        # name resolves at all
        self.name_ids = frozenset(n for n in (*self.imports.bindings, *self.imports.rebinds) if self._in_package(n))

    # -- text helpers -----------------------------------------------------------------------

    @property
    def _attn(self) -> hf.AttentionFacts:
        """The repository's Hugging Face attention facts merged with this file's (gathered on first use:
        a file without a flash-attention switch never makes porter read the whole tree)."""
        if self._attn_facts is None:
            self._attn_facts = hf.facts_for(self.ctx.facts.extra, self.ctx.relpath, self.ctx.text)
        return self._attn_facts

    def _unparen(self, node: ast.AST, lo: int) -> tuple[int, int]:
        """The node's range with the parentheses that wrap it (not before offset ``lo``)."""
        start, end = self.span(node)
        text = self.ctx.text
        i, opened = start, 0
        while i > lo:
            c = text[i - 1]
            if c == "(":
                opened += 1
                start = i - 1
            elif not c.isspace():
                break
            i -= 1
        j = end
        while opened:
            while j < len(text) and text[j].isspace():
                j += 1
            if j >= len(text) or text[j] != ")":
                break
            j += 1
            end = j
            opened -= 1
        return start, end

    def _source(self, node: ast.AST, lo: int) -> str:
        """The node's source with its own parentheses (what the node's code reads in LibCST)."""
        start, end = self._unparen(node, lo)
        return self.ctx.text[start:end]

    def _string(self, node: ast.AST | None) -> str | None:
        if node is None or not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            return None
        return _plain_string(node, self.code(node))

    def _fa2_literals(self, node: ast.AST) -> list[ast.Constant]:
        """The 'flash_attention_2' literals ``node`` evaluates to (itself, or a conditional's branches)."""
        if isinstance(node, ast.Constant):
            return [node] if node.value in _FA2_VALUES and self._string(node) in _FA2_VALUES else []
        if isinstance(node, ast.IfExp):
            return self._fa2_literals(node.body) + self._fa2_literals(node.orelse)
        return []

    def _report_at(self, start: int, end: int, code: str, message: str, **kwargs: Any) -> None:
        self.findings.append(self.ctx.finding(code, message, start, end, **kwargs))

    def _module_range(self, node: ast.ImportFrom) -> tuple[int, int]:
        """The range of the dotted module name of ``from <module> import ...``."""
        text = self.ctx.text
        start, _ = self.span(node)
        i = start + len("from")
        first = None
        end = i
        for n, _part in enumerate((node.module or "").split(".")):
            i = _GAP.match(text, i).end()  # type: ignore[union-attr]
            if n:
                i = _GAP.match(text, i + 1).end()  # type: ignore[union-attr]  # past the dot
            m = _IDENT.match(text, i)
            if m is None:
                break
            if first is None:
                first = m.start()
            i = end = m.end()
        return (first if first is not None else start), end

    # -- imports ----------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            pkg = package_of(alias.name)
            if pkg is not None:
                start, end = self.span(alias)
                self._report_import(start, end, pkg, alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or node.module is None:
            return
        module = node.module
        pkg = package_of(module)
        star = len(node.names) == 1 and node.names[0].name == "*"
        if pkg is None and not star:
            # `from nvidia import dali` style
            for alias in node.names:
                full = f"{module}.{alias.name}"
                sub = package_of(full)
                if sub is not None:
                    start, end = self.span(alias)
                    self._report_import(start, end, sub, full, node)
            return
        if pkg is not None:
            names = "*" if star else ", ".join(a.name for a in node.names)
            start, end = self._module_range(node)
            self._report_import(start, end, pkg, f"{module} ({names})", node)

    def _report_import(self, start: int, end: int, pkg: Package, what: str, stmt: ast.stmt) -> None:
        mine = [b for b in self.imports.statements if b.statement is stmt]
        gated = any(b.gated for b in mine)  # an availability gate, or `if TYPE_CHECKING:` (no gate node)
        in_gate = any(b.gate is not None for b in mine)
        suffix = " (inside an availability gate)" if in_gate else \
            " (under `if TYPE_CHECKING:`, never imported at run time)" if gated else ""
        unused = self._unused_import(mine, stmt)
        if unused is not None:
            edit, names = unused
            self._report_at(start, end, pkg.code, f"import of CUDA-only package {pkg.dist}: {what} is not used in "
                            f"this module; removed ({', '.join(names)}), since importing it fails where {pkg.dist} "
                            "is not installed", fix=Applicability.SAFE, fix_title="remove the unused import",
                            edits=(edit,), data={"package": pkg.dist, "gated": False})
            return
        root = module_of(what.split(" ")[0])
        if root in ALIASES and pkg.module in {"apex", "flash_attn"}:
            head = f"import of {root}, a compiled CUDA extension of {pkg.dist}"
        elif root in ALIASES:
            head = f"import of CUDA-only package {pkg.dist} ({root})"
        else:
            head = f"import of CUDA-only package {pkg.dist}"
        self._report_at(start, end, pkg.code, f"{head}: {what}{suffix}; {pkg.advice}",
                        fix=Applicability.NONE, data={"package": pkg.dist, "gated": gated})
        if in_gate:
            self._report_gate(start, end, pkg, mine)

    def _report_gate(self, start: int, end: int, pkg: Package, mine: list) -> None:
        gate = next((b.gate for b in mine if b.gate is not None), None)
        if gate is None:
            self._report_at(start, end, "PRT021", f"availability gate around {pkg.dist}", fix=Applicability.NONE,
                            data={"package": pkg.dist})
            return
        imports = self.imports
        facts = gate_facts(imports, gate, lambda t: package_of(t) is not None)
        message = describe_gate(facts, pkg.dist)
        text = keep_fallback(imports, gate, self.ctx.tree, lambda m: package_of(m) is not None, self.code)
        if text is None:
            self._report_at(start, end, "PRT021", message, fix=Applicability.NONE, data={"package": pkg.dist})
            return
        edit_start, edit_end = self.span(gate)
        if not text:
            # nothing runs without the package: the statement and its line go
            source = self.ctx.text
            line_start = source.rfind("\n", 0, edit_start) + 1
            nl = source.find("\n", edit_end)
            edit_start, edit_end = line_start, (len(source) if nl < 0 else nl + 1)
            while edit_start >= 2 and source[edit_start - 1] == "\n" and source[edit_start - 2] == "\n":
                edit_start -= 1  # the blank lines that separated it from the code before
        self._report_at(start, end, "PRT021", message + f"; the import branch only serves {pkg.dist}, so the port "
                        "keeps the fallback (what runs without the package) and drops the try/except",
                        fix=Applicability.SAFE, fix_title="keep the fallback, drop the dead import branch",
                        edits=(Edit(edit_start, edit_end, text),), data={"package": pkg.dist, KEEPS_FALLBACK: True})

    def _line_of(self, stmt: ast.stmt) -> tuple[int, int] | None:
        """Indices (first, last) in the module body of the statements on ``stmt``'s logical line
        (``import a; import b``), when ``stmt`` is a module-level statement."""
        top = self._top
        index = next((i for i, s in enumerate(top) if s is stmt), None)
        if index is None:
            return None
        first = last = index
        while first > 0 and top[first - 1].end_lineno == top[first].lineno:
            first -= 1
        while last + 1 < len(top) and top[last + 1].lineno == top[last].end_lineno:
            last += 1
        return first, last

    def _unused_import(self, mine: list, stmt: ast.stmt) -> tuple[Edit, list[str]] | None:
        """An edit removing the statement's CUDA-only bindings that nothing in the module uses, when
        the statement is an ungated top-level import outside a package ``__init__.py``."""
        if not mine or any(b.gated or not b.toplevel or b.local == "*" for b in mine):
            return None
        if self.ctx.relpath.rsplit("/", 1)[-1] == "__init__.py":
            return None
        used = self._used_names()
        dead = [b for b in mine if b.local not in used and package_of(b.target) is not None
                and len(self.imports.bindings.get(b.local, ())) == 1
                and not any(t == m or t.startswith(m + ".") for m in _SIDE_EFFECT_IMPORTS for t in (b.target, b.module))]
        if not dead:
            return None
        # only worth it when the package then goes from the module: dropping unused names beside
        # live ones of the same package changes nothing on a machine without it
        dead_ids = {id(b) for b in dead}
        pkgs = {package_of(b.target) for b in dead}
        for b in self.imports.statements:
            if id(b) in dead_ids or b.gated or package_of(b.target) not in pkgs:
                continue
            return None
        aliases = stmt.names  # type: ignore[attr-defined]
        if any(a.asname is not None and a.asname == a.name for a in aliases):
            return None  # `import x as x`: an explicit re-export
        line = self._line_of(stmt)
        if line is None:
            return None  # only imports at the top of the module body (not under `if TYPE_CHECKING:`)
        dead_locals = {b.local for b in dead}
        keep = [i for i, a in enumerate(aliases)
                if (a.asname if a.asname is not None
                    else a.name.split(".")[0] if isinstance(stmt, ast.Import) else a.name) not in dead_locals]
        if not keep and line[0] == line[1]:
            start, stmt_end = self.span(stmt)
            text = self.ctx.text
            line_start = text.rfind("\n", 0, start) + 1
            if text[line_start:start].strip():
                return None
            end = text.find("\n", stmt_end)
            end = len(text) if end < 0 else end + 1
            # the whole line goes, with its comment
            return Edit(line_start, end, ""), sorted(dead_locals)
        if not keep:
            return None
        code = self._without_aliases(stmt, line, keep)
        if code is None:
            return None
        start, end = self.span(stmt)
        return Edit(start, end, code), sorted(dead_locals)

    def _without_aliases(self, stmt: ast.stmt, line: tuple[int, int], keep: list[int]) -> str | None:
        """The import statement's code with only the aliases at indices ``keep``, written by LibCST
        from the statement's own logical line (a module of its own: it starts a line at column 0)."""
        import libcst as cst  # only for a dead import beside live names: detection never loads it

        text = self.ctx.text
        start, _ = self.span(self._top[line[0]])
        _, last = self.span(self._top[line[1]])
        end = len(text)
        for nl in ("\n", "\r"):
            found = text.find(nl, last)
            if found >= 0:
                end = min(end, found)
        try:
            module = cst.parse_module(text[start:end])
        except cst.ParserSyntaxError:
            return None
        first = module.body[0] if len(module.body) == 1 else None
        if not isinstance(first, cst.SimpleStatementLine) or len(first.body) != line[1] - line[0] + 1:
            return None
        small = first.body[self._top.index(stmt, line[0]) - line[0]]
        if not isinstance(small, (cst.Import, cst.ImportFrom)) or isinstance(small.names, cst.ImportStar):
            return None
        names = [small.names[i] for i in keep]
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        # the edit covers the statement without a `;` after it: its code leaves the `;` out too
        return module.code_for_node(small.with_changes(names=names, semicolon=cst.MaybeSentinel.DEFAULT))

    def _used_names(self) -> set[str]:
        """Names the module still uses (loads, stores, attribute roots, ``__all__`` strings)."""
        if self._used is None:
            used: set[str] = set()
            for node in ast.walk(self.ctx.tree):
                if isinstance(node, ast.Name):
                    used.add(node.id)
                elif isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(
                            node.value, (ast.List, ast.Tuple)
                        ):
                            used.update(e.value for e in node.value.elts
                                        if isinstance(e, ast.Constant) and isinstance(e.value, str))
            self._used = used
        return self._used

    # -- use sites --------------------------------------------------------------------------
    def _in_package(self, name: str) -> bool:
        """Whether ``name`` resolves into the root module of a CUDA-only package (cached)."""
        found = self._pkg_root.get(name)
        if found is None:
            qual = self.imports.resolve_name(name)
            found = self._pkg_root[name] = qual is not None and qual.split(".", 1)[0] in _ROOTS
        return found

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if id(node) in self._skip:
            self._skip.add(id(node.value))
            return
        inner: ast.expr = node.value
        while isinstance(inner, ast.Attribute):
            inner = inner.value
        if not isinstance(inner, ast.Name) or not self._in_package(inner.id):
            return
        qual = self.qualname(node)
        pkg = package_of(qual)
        if pkg is not None:
            # report the outermost chain only
            inner = node.value
            while isinstance(inner, ast.Attribute):
                self._skip.add(id(inner))
                inner = inner.value
            self._skip.add(id(inner))
            self._use(*self.span(node), pkg, qual or "")

    def visit_Name(self, node: ast.Name) -> None:
        if id(node) in self._skip or not self._in_package(node.id):
            return
        self._name_use(node.id, *self.span(node))

    def _name_use(self, name: str, start: int, end: int) -> None:
        if not self._in_package(name):
            return
        imports = self.imports
        if name not in imports.bindings:
            fb = imports.fallback(name)
            if fb is not None and fb.real:
                return  # `RMSNorm = FusedRMSNorm` in a gate, with the project's RMSNorm as fallback
        qual = imports.resolve_name(name)
        pkg = package_of(qual)
        if pkg is not None:
            self._use(start, end, pkg, qual or "")

    # names that are identifiers, not expressions, in ``ast`` (LibCST reads them as names)
    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        if not any(self._in_package(name) for name in node.names):
            return
        start, end = self.span(node)
        i = start + (len("global") if isinstance(node, ast.Global) else len("nonlocal"))
        for m in _IDENT.finditer(self.ctx.text, i, end):
            self._name_use(m.group(), m.start(), m.end())

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name is None or node.type is None or not self._in_package(node.name):
            return
        _, type_end = self._unparen(node.type, self.span(node)[0])
        text = self.ctx.text
        i = text.find("as", type_end)
        m = _IDENT.search(text, i + 2) if i >= 0 else None
        if m is not None:
            self._name_use(m.group(), m.start(), m.end())

    def visit_MatchAs(self, node: ast.AST) -> None:
        name = getattr(node, "name", None)
        if name and self._in_package(name):
            _, end = self.span(node)
            self._name_use(name, end - len(name), end)

    visit_MatchStar = visit_MatchAs

    def visit_MatchMapping(self, node: ast.AST) -> None:
        rest = getattr(node, "rest", None)
        if rest and self._in_package(rest):
            start, end = self.span(node)
            stars = self.ctx.text.rfind("**", start, end)
            m = _IDENT.search(self.ctx.text, stars + 2, end) if stars >= 0 else None
            if m is not None:
                self._name_use(m.group(), m.start(), m.end())

    def visit_MatchClass(self, node: ast.AST) -> None:
        text = self.ctx.text
        for key, pattern in zip(getattr(node, "kwd_attrs", ()), getattr(node, "kwd_patterns", ()), strict=False):
            if not self._in_package(key):
                continue
            pstart, _ = self.span(pattern)
            eq = text.rfind("=", 0, pstart)
            m = next((m for m in _IDENT.finditer(text, text.rfind(key, 0, eq), eq) if m.group() == key), None)
            if m is not None:
                self._name_use(key, m.start(), m.end())

    def _use(self, start: int, end: int, pkg: Package, qual: str) -> None:
        if not pkg.report_uses:
            return
        self._report_at(start, end, "PRT020", f"use of {qual} from CUDA-only package {pkg.dist}; {pkg.advice}",
                        fix=Applicability.NONE, generic=True, category=pkg.use_category or pkg.category,
                        effort_hours=pkg.use_effort, data={"package": pkg.dist, "qualname": qual})

    # -- Hugging Face switches --------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        self._dynamic_import(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _XFORMERS_SWITCHES:
            self._xformers_switch(node, func.attr)
        if not node.keywords:
            return
        impl = _keyword(node, "attn_implementation")
        if impl is not None:
            self._fa2_value(impl.value, call=node, flows=not _is_loader(node))
            if isinstance(impl.value, ast.Name):
                self._impl_names[impl.value.id] = self._impl_names.get(impl.value.id, 0) + 1
        legacy = _keyword(node, "use_flash_attention_2")
        if legacy is not None:
            self._legacy_switch(node, legacy, impl)
        for kw in node.keywords:
            if kw.arg is not None and "flash" in kw.arg and kw.arg != "use_flash_attention_2" and _SWITCH_NAME.match(kw.arg) \
                    and _is_true(kw.value):
                self._plumbing(kw, f"`{kw.arg}=True` passed to `{self._func_source(node)}`")

    def _func_source(self, call: ast.Call) -> str:
        return self._source(call.func, self.span(call)[0])

    def _legacy_switch(self, node: ast.Call, legacy: ast.keyword, impl: ast.keyword | None) -> None:
        val = legacy.value
        if isinstance(val, ast.Constant) and val.value is False:
            return
        start, _ = self.span(legacy)
        if not _is_loader(node):
            self._plumbing(legacy, f"`use_flash_attention_2={self._source(val, start)}` passed to "
                           f"`{self._func_source(node)}`, not to a transformers from_pretrained/from_config "
                           "(renaming the keyword would break the call)")
            return
        if _is_true(val) and impl is None:
            blockers = self._switch_blockers(node, flows=False)
            if blockers:
                self.report(legacy, "PRT031", "use_flash_attention_2=True needs flash-attn; not rewritten to "
                            'attn_implementation="sdpa" because ' + "; ".join(blockers), fix=Applicability.NONE)
                return
            # the keyword and the value change; the `=` keeps its spacing
            text = self.ctx.text
            value_start, _ = self._unparen(val, start)
            equal = text[start + len("use_flash_attention_2"):value_start]
            self.report(legacy, "PRT031",
                        'use_flash_attention_2=True needs flash-attn; use attn_implementation="sdpa" (nothing in '
                        "the repository dispatches on the attention string, and the call loads no remote code)",
                        replacement=f'attn_implementation{equal}"sdpa"',
                        fix=Applicability.SAFE, fix_title='use attn_implementation="sdpa"')
        else:
            reason = ("attn_implementation is also given" if impl is not None
                      else "its value is not a literal True")
            self.report(legacy, "PRT031", f"use_flash_attention_2 needs flash-attn; not rewritten "
                        f"because {reason}", fix=Applicability.NONE)

    def _switch_blockers(self, call: ast.Call | None, *, flows: bool) -> list[str]:
        """Why switching the attention string here might not be exact (empty: it is)."""
        out = self._attn.blockers()
        pin = self.ctx.facts.pin("transformers")
        if not hf.transformers_admits_sdpa(pin):
            out.append(f"the repo pins transformers `{pin}`; attn_implementation=\"sdpa\" needs transformers >= 4.36")
        if call is not None:
            trc = next((kw for kw in call.keywords if kw.arg == "trust_remote_code"), None)
            if trc is not None and not _is_false(trc.value):
                value = self._source(trc.value, self.span(trc)[0])
                out.append(f"the call loads Hub remote code (`trust_remote_code={value}`), whose "
                           "attention classes porter cannot read")
                return out
            if any(kw.arg is None for kw in call.keywords):
                flows = True
        if flows and self._attn.remote:
            site = self._attn.remote[0].show()
            out.append(f"the value flows through a variable, config attribute, **kwargs or project function, and "
                       f"the repository loads Hub remote code ({site}), whose attention classes porter cannot "
                       "read")
        return out

    def _fa2_value(self, value: ast.expr, *, call: ast.Call | None, flows: bool,
                   where: str = "attn_implementation") -> None:
        """Report every 'flash_attention_2' literal that ``value`` can evaluate to."""
        literals = self._fa2_literals(value)
        if not literals:
            return
        blockers = self._switch_blockers(call, flows=flows)
        cond = " (the flash branch of a conditional)" if not isinstance(value, ast.Constant) else ""
        for lit in literals:
            if id(lit) in self._switch_seen:
                continue
            self._switch_seen.add(id(lit))
            if blockers:
                self.report(lit, "PRT030", f'{where} "flash_attention_2"{cond} needs flash-attn; not rewritten '
                            'to "sdpa" because ' + "; ".join(blockers), fix=Applicability.NONE)
                continue
            self.report(lit, "PRT030", f'{where} "flash_attention_2"{cond} needs flash-attn; "sdpa" is portable '
                        "(nothing in the repository dispatches on, patches or redefines the attention string, "
                        "and no remote code is loaded on its path)",
                        replacement=_requote(self.code(lit), "sdpa"), fix=Applicability.SAFE,
                        fix_title='use attn_implementation="sdpa"')

    def _plumbing(self, node: ast.AST, what: str, span: tuple[int, int] | None = None) -> None:
        start, end = span if span is not None else self.span(node)
        self._report_at(start, end, "PRT032", f"{what}: a switch that turns on a flash-attn code path; on ROCm turn "
                        "it off, pass attn_implementation=\"sdpa\" where it reaches transformers, or install AMD's "
                        "flash-attn build", fix=Applicability.NONE)

    def _xformers_switch(self, node: ast.Call, name: str) -> None:
        if name == "set_use_memory_efficient_attention_xformers":
            args = [a.value if isinstance(a, ast.Starred) else a for a in node.args]
            args += [kw.value for kw in node.keywords]
            first = min(args, key=lambda a: (a.lineno, a.col_offset)) if args else None
            if first is None or _is_false(first):
                return
        self.report(node, "PRT033", f"`{name}` turns on xformers attention (diffusers installs "
                    "XFormersAttnProcessor and raises without xformers; a project's own method of that name "
                    "usually selects xformers.ops); with torch >= 2.0, diffusers since early 2023 already uses "
                    "AttnProcessor2_0 (scaled_dot_product_attention, portable): drop the call and its xformers "
                    "availability check, unless processors set before it (LoRA, IP-Adapter, custom) relied on "
                    "being swapped for their xformers variants; a project model needs its SDPA path selected "
                    "instead", fix=Applicability.NONE)

    def visit_arguments(self, node: ast.arguments) -> None:
        positional = [*node.posonlyargs, *node.args]
        pairs = list(zip(positional[len(positional) - len(node.defaults):], node.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None]
        for arg, default in pairs:
            name = arg.arg
            if _IMPL_NAME.search(name):
                self._fa2_value(default, call=None, flows=True, where=f"parameter `{name}` default")
            elif _SWITCH_NAME.match(name) and _is_true(default):
                start, _ = self.span(arg)  # the report covers the parameter's name
                self._plumbing(arg, f"parameter `{name}` defaults to True", span=(start, start + len(name)))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is None or not isinstance(node.target, ast.Name):
            return
        name = node.target.id
        value = node.value
        if isinstance(value, ast.Call) and (ast_dotted(value.func) or "").rsplit(".", 1)[-1] == "field":
            default = next((kw for kw in value.keywords if kw.arg == "default"), None)
            if default is None:
                return
            value = default.value
        if _IMPL_NAME.search(name):
            self._fa2_value(value, call=None, flows=True, where=f"`{name}`")
        elif _SWITCH_NAME.match(name) and _is_true(value):
            self._plumbing(node, f"`{name}` defaults to True")

    def _dynamic_import(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            # a plain name resolves only through an import (or is `__import__`, or a stdlib root)
            name = func.id
            if name not in self.imports.bindings and name not in self.imports.rebinds and \
                    name != "__import__" and name not in _STDLIB_ROOTS:
                return
        text = ast_dotted(func)
        if text is not None and "." in text:
            # every callee below ends with one of these names (resolving keeps the last one)
            last = text[text.rfind(".") + 1:]
            if last not in _CALLEES and not last.startswith("is_"):
                return
        qual = self.qualname(func)
        if qual is None and isinstance(func, ast.Name) and func.id == "__import__":
            qual = "__import__"
        if qual is None:
            qual = self._dunder_import_chain(func)
        if qual is None:
            # `importlib.util.find_spec(...)` in a module that never imports importlib itself (it
            # works when another module imported importlib.util first): resolve the stdlib root
            text = text or ""
            if text.split(".")[0] in _STDLIB_ROOTS and self.imports.resolve_name(text.split(".")[0]) is None:
                qual = text
        if qual is None:
            return
        importer = qual in _IMPORTERS
        probe = not importer and (qual in _PROBES or qual.rsplit(".", 1)[-1] in _REQ_PROBES
                                  and qual.split(".")[0] in _REQ_PROBE_LIBS)
        if importer or probe:
            first = _first_positional(node)
            if first is None:
                kw = next((kw for kw in node.keywords if kw.arg in {"name", "distribution_name"}), None)
                first = kw.value if kw is not None else None
            name = self._string(first)
            if importer:
                pkg = package_of(name) if name else None
                if pkg is not None and name is not None:
                    self.report(node, "PRT019", f"{qual}(\"{name}\") loads CUDA-only {pkg.dist} at run time; "
                                f"{pkg.advice} (uses of the returned module are not traced)",
                                fix=Applicability.NONE, data={"package": pkg.dist, "module": name})
            else:
                pkg = package_of_dist(_requirement_name(name)) if name else None
                if pkg is not None and name is not None:
                    self.report(node, "PRT023", f"{qual}(\"{name}\") probes for CUDA-only {pkg.dist}; check "
                                "the fallback path on ROCm", fix=Applicability.NONE, data={"package": pkg.dist})
        else:
            m = _HELPER.match(qual.rsplit(".", 1)[-1])
            if m and qual.split(".")[0] in _HELPER_LIBS:
                pkg = _HELPER_PACKAGES.get(m.group(1) or m.group(2))
                if pkg is not None:
                    self.report(node, "PRT023", f"{qual}() probes for CUDA-only {pkg.dist}; check the fallback "
                                "path on ROCm", fix=Applicability.NONE, data={"package": pkg.dist})

    def _dunder_import_chain(self, func: ast.expr) -> str | None:
        """``importlib.util.find_spec`` for ``__import__("importlib").util.find_spec``."""
        parts: list[str] = []
        while isinstance(func, ast.Attribute):
            parts.append(func.attr)
            func = func.value
        if not parts or not isinstance(func, ast.Call) or \
                ast_dotted(func.func) not in {"__import__", "importlib.import_module"}:
            return None
        args = [a.value if isinstance(a, ast.Starred) else a for a in func.args]
        args += [kw.value for kw in func.keywords if kw.arg is None]
        arg = min(args, key=lambda a: (a.lineno, a.col_offset)) if args else None
        name = self._string(arg)
        if name not in _STDLIB_ROOTS and name not in {"importlib.util", "importlib.metadata"}:
            return None
        return ".".join([name, *reversed(parts)])  # type: ignore[list-item]

    # -- re-exports -------------------------------------------------------------------------
    def visit_Module(self, node: ast.Module) -> None:
        candidates = [b for b in self.imports.statements if b.toplevel
                      and package_of(b.target if b.local != "*" else b.module) is not None]
        if not candidates:
            return
        exported: set[str] = set()
        for stmt in node.body:
            targets: list[ast.expr] = []
            if isinstance(stmt, ast.Assign):
                targets = stmt.targets
            elif isinstance(stmt, ast.AugAssign):
                targets = [stmt.target]
            else:
                continue
            value = stmt.value
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and \
                    isinstance(value, (ast.List, ast.Tuple)):
                for el in value.elts:
                    v = self._string(el.value if isinstance(el, ast.Starred) else el)
                    if v:
                        exported.add(v)
        is_init = self.ctx.relpath.rsplit("/", 1)[-1] == "__init__.py"
        for b in candidates:
            pkg = package_of(b.target if b.local != "*" else b.module)
            assert pkg is not None
            reason = ""
            if b.local == "*":
                reason = "`from ... import *`"
            elif b.local in exported:
                reason = "listed in __all__"
            elif isinstance(b.statement, ast.ImportFrom) and is_init and not b.gated:
                reason = "imported by a package __init__.py"
            else:
                for alias in b.statement.names:
                    # PEP 484's explicit re-export: `import x as x`, `from m import x as x`
                    if alias.asname is not None and alias.asname == b.local == alias.name:
                        reason = "`import x as x` re-export idiom"
            if reason:
                self.report(b.statement, "PRT022", f"re-export of {b.target} ({pkg.dist}) from this module: "
                            f"{reason}; modules that import it from here are not attributed to {pkg.dist} "
                            "(porter resolves names per file)", fix=Applicability.NONE,
                            data={"package": pkg.dist, "name": b.local})

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            if isinstance(t, ast.Name):  # `bnb = None` in a fallback is not a use
                self._skip.add(id(t))
        if not self._fa2_literals(node.value):
            return
        for target in node.targets:
            key = None
            if isinstance(target, ast.Subscript):
                key = self._string(target.slice)
            elif isinstance(target, ast.Attribute):
                key = target.attr.lstrip("_")
            elif isinstance(target, ast.Name) and _IMPL_NAME.search(target.id):
                key = "attn_implementation"
            elif isinstance(target, ast.Name):
                self._fa2_assigns.append((target.id, node.value))
            if key == "attn_implementation":
                self._fa2_value(node.value, call=None, flows=True,
                                where=f"`{self._source(target, self.span(node)[0])}`")
                return

    def leave_Module(self, node: ast.Module) -> None:
        # `impl = "flash_attention_2" if flag else "eager"` ... `attn_implementation=impl`
        stores: dict[str, int] = {}
        for name, _ in self._fa2_assigns:
            stores[name] = stores.get(name, 0) + 1
        for name, value in self._fa2_assigns:
            if name not in self._impl_names:
                continue
            where = f"`{name}` (passed as attn_implementation)"
            uses = len(re.findall(rf"(?<![\w.]){re.escape(name)}\b", self.ctx.text))
            if uses != stores[name] + self._impl_names[name]:
                for lit in self._fa2_literals(value):
                    if id(lit) not in self._switch_seen:
                        self._switch_seen.add(id(lit))
                        self.report(lit, "PRT030", f'{where} "flash_attention_2" needs flash-attn; not rewritten '
                                    f'to "sdpa" because `{name}` is also used for something else in this file',
                                    fix=Applicability.NONE)
                continue
            self._fa2_value(value, call=None, flows=True, where=where)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if key is not None and isinstance(key, ast.Constant) and key.value == "attn_implementation" \
                    and self._string(key) == "attn_implementation":
                self._fa2_value(value, call=None, flows=True, where='"attn_implementation" entry')


_XFORMERS_SWITCHES = {"set_use_memory_efficient_attention_xformers", "enable_xformers_memory_efficient_attention"}
_LOADERS = {"from_pretrained", "from_config", "_from_config"}
# project switch names that turn on a flash-attn path
_SWITCH_NAME = re.compile(r"^(?:use_|enable_)?flash_?attn(?:_?2)?$|^(?:use_|enable_)flash_attention(?:_?2)?$")
_IMPL_NAME = re.compile(r"(?:^|_)attn_impl|attention_impl", re.IGNORECASE)


def _is_loader(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in _LOADERS


