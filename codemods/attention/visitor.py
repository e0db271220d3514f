"""The attention family's visitors and checkers; its rules, options and pre-filters are declared
in ``porter.codemods.attention`` (``__init__.py``), which describes what the family does.

``AttentionVisitor`` keeps the context tracking and the dispatch; the flash-attn half is in
``flash.py``, the xformers half in ``xformers.py``, what both share in ``shared.py`` and the name
tables in ``tables.py``.
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from porter.codemods.attention import NAME
from porter.codemods.attention.flash import FlashMixin
from porter.codemods.attention.scope import Scope, collect
from porter.codemods.attention.tables import _FA_CODES, _FA_VARLEN, _XF_FUNCS, _fa_short, _xf_short
from porter.codemods.attention.util import flash_version
from porter.codemods.attention.xformers import XformersMixin
from porter.findings import Applicability, Edit
from porter.framework import PyContext
from porter.pyimports import dotted


class AttentionVisitor(FlashMixin, XformersMixin):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self._scopes: list[cst.CSTNode] = [ctx.module]
        self._facts: dict[int, Scope] = {}
        self._viewed: set[int] = set()  # calls directly followed by .view(...)
        self._returned: set[int] = set()  # calls directly returned
        self._assigned: dict[int, str] = {}  # call -> name it is assigned to
        self._assigned_target: dict[int, str] = {}  # call -> name or attribute chain it is assigned to
        self._classes: list[cst.ClassDef] = []
        # (class, attribute) -> (binding line, indexes of the findings of its calls, bound value)
        self._attr_calls: dict[tuple[int, str], tuple[cst.CSTNode | None, list[int], cst.BaseExpression]] = {}
        self._attr_cache: dict[int, dict[str, list[cst.BaseExpression]]] = {}
        self._fa = flash_version(ctx.facts.pins.get("flash-attn"))
        self._torch_pin = ctx.facts.pins.get("torch")

    # -- context tracking ----------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._scopes.pop()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "view" and isinstance(node.value, cst.Call):
            self._viewed.add(id(node.value))

    def visit_Return(self, node: cst.Return) -> None:
        if isinstance(node.value, cst.Call):
            self._returned.add(id(node.value))

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and len(node.targets) == 1:
            t = node.targets[0].target
            if isinstance(t, cst.Name):
                self._assigned[id(node.value)] = t.value
            if isinstance(t, (cst.Name, cst.Attribute)) and dotted(t):
                self._assigned_target[id(node.value)] = dotted(t) or ""

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.value, cst.Call) and isinstance(node.target, cst.Name):
            self._assigned[id(node.value)] = node.target.value

    def _scope(self) -> Scope:
        root = self._scopes[-1]
        facts = self._facts.get(id(root))
        if facts is None:
            facts = collect(root, self.span)
            self._facts[id(root)] = facts
        return facts

    # -- dispatch ------------------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        cls = self._classes.pop()
        for (cid, attr), (line, hits, value) in list(self._attr_calls.items()):
            if cid != id(cls):
                continue
            self._finish_attribute(attr, line, hits, value)

    def _self_attributes(self, cls: cst.ClassDef) -> dict[str, list[tuple[cst.BaseExpression, cst.CSTNode | None]]]:
        """``self.X = value`` assignments anywhere in the class's methods, with the statement line
        when it holds only that assignment."""
        found = self._attr_cache.get(id(cls))
        if found is None:
            found = {}
            line: list[cst.SimpleStatementLine | None] = [None]

            class _V(cst.CSTVisitor):
                def visit_SimpleStatementLine(inner, n: cst.SimpleStatementLine) -> None:  # noqa: N805
                    line[0] = n if len(n.body) == 1 else None

                def visit_Assign(inner, n: cst.Assign) -> None:  # noqa: N805
                    for t in n.targets:
                        tt = t.target
                        if isinstance(tt, cst.Attribute) and isinstance(tt.value, cst.Name) and \
                                tt.value.value == "self":
                            found.setdefault(tt.attr.value, []).append(
                                (n.value, line[0] if len(n.targets) == 1 else None))

                def visit_AugAssign(inner, n: cst.AugAssign) -> None:  # noqa: N805
                    tt = n.target
                    if isinstance(tt, cst.Attribute) and isinstance(tt.value, cst.Name) and tt.value.value == "self":
                        found.setdefault(tt.attr.value, []).append((n.value, None))

            cls.visit(_V())
            self._attr_cache[id(cls)] = found
        return found

    def _attribute_bound(self, node: cst.Call) -> None:
        """``self._attn(q, k, v)`` where the class binds ``self._attn = flash_attn_func``.

        Rewritten like a direct call when the binding is provably that function at every use: a
        private attribute (leading underscore) bound once, unconditionally, and read nowhere in
        the module but by calls ``self._attn(...)`` in this class; when every such call is
        rewritten, the binding goes too. Otherwise found and reported with the reason."""
        f = node.func
        if not (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value == "self"
                and self._classes):
            return
        cls = self._classes[-1]
        attr = f.attr.value
        values = self._self_attributes(cls).get(attr, ())
        quals = []
        for value, _ in values:
            options = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
            for opt in options:
                q = self.qualname(opt) if isinstance(opt, (cst.Name, cst.Attribute)) else None
                if q and q.startswith(("flash_attn", "xformers.")):
                    quals.append(q)
        if not quals:
            return
        qual = quals[0]
        short = _fa_short(qual) or _xf_short(qual) or qual.rsplit(".", 1)[-1]
        if qual.startswith("xformers."):
            code = "PRT200"
        elif short in _FA_VARLEN:
            code = "PRT103"
        else:
            code = _FA_CODES.get(short, "PRT100")
        conditional = len(values) > 1 or any(isinstance(v, cst.IfExp) for v, _ in values)
        reason = ""
        if conditional:
            reason = "it is bound conditionally or more than once"
        elif not attr.startswith("_"):
            reason = "the attribute is public, so code elsewhere may call or replace it"
        elif self._attr_mentions(attr) != 1 + self._self_calls(cls, attr):
            reason = f"`.{attr}` is also read or assigned elsewhere in this module"
        if reason:
            self.report(node, code, f"{short} called through the attribute self.{attr} (bound to {qual} in this "
                        f"class): not rewritten, because {reason}; call the portable function directly here "
                        "(see this rule's rewrite) or port by hand", fix=Applicability.NONE, data={"qualname": qual})
            return
        before = len(self.findings)
        self._dispatch(node, qual)
        entry = self._attr_calls.setdefault((id(cls), attr), (values[0][1], [], values[0][0]))
        entry[1].extend(range(before, len(self.findings)))

    def _attr_mentions(self, attr: str) -> int:
        import re

        return len(re.findall(rf"\.{re.escape(attr)}\b", self.ctx.text))

    def _self_calls(self, cls: cst.ClassDef, attr: str) -> int:
        count = [0]

        class _V(cst.CSTVisitor):
            def visit_Call(inner, n: cst.Call) -> None:  # noqa: N805
                g = n.func
                if isinstance(g, cst.Attribute) and g.attr.value == attr and isinstance(g.value, cst.Name) \
                        and g.value.value == "self":
                    count[0] += 1

        cls.visit(_V())
        return count[0]

    def _finish_attribute(self, attr: str, line: cst.CSTNode | None, hits: list[int],
                          value: cst.BaseExpression) -> None:
        """Every call through ``self.<attr>`` was rewritten: drop its binding too, with the imports."""
        found = [self.findings[i] for i in hits]
        if not found or line is None or any(f.fix == Applicability.NONE or not f.edits for f in found):
            return
        start, end = self.span(line)
        text = self.ctx.text
        line_start = text.rfind("\n", 0, start) + 1
        if text[line_start:start].strip():
            return
        nl = text.find("\n", end)
        drop = Edit(line_start, len(text) if nl < 0 else nl + 1, "")
        head = (dotted(value) or "").split(".")[0]
        targets = self.ctx.imports.import_targets(head)
        for i in hits:
            f = self.findings[i]
            self.findings[i] = replace(
                f, edits=f.edits + (drop,), remove_imports=tuple(dict.fromkeys(f.remove_imports + targets)),
                message=f"{f.message}; called through self.{attr}, bound once in this class, whose binding "
                "goes with its last call")

    def visit_Call(self, node: cst.Call) -> None:
        qual = self.qualname(node.func)
        if not qual:
            self._attribute_bound(node)
            return
        self._dispatch(node, qual)

    def _dispatch(self, node: cst.Call, qual: str) -> None:
        if qual.startswith("flash_attn"):
            self._flash(node, qual)
        elif qual.startswith("xformers."):
            short = _xf_short(qual)
            if short in _XF_FUNCS:
                self._xformers(node, qual, short)
            elif short == "unbind" or qual == "xformers.ops.unbind.unbind":
                self._xformers_unbind(node, qual)
            elif qual.startswith("xformers.components"):
                self.report(node, "PRT210", f"{qual}: xformers.components was removed in xformers 0.0.34; "
                            "rebuild this on SDPA or nn.MultiheadAttention", fix=Applicability.NONE)
