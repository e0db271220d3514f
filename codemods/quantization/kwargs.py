"""How a function uses a keyword-argument dict (the LLaVA/FastChat model-builder idiom).

::

    kwargs = {"device_map": device_map}
    if load_8bit:
        kwargs["load_in_8bit"] = True
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)

Moving the switch into ``quantization_config`` is exact only when the dict is a local that
is filled by string-keyed stores and then only splatted into ``from_pretrained`` calls: no
parameter, no reads, no ``update``/``pop``/``get``, no escape to another function, and no
``quantization_config`` already stored in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from porter.codemods._shared.calls import literal

_LOADERS = {"from_pretrained", "from_config", "_from_config"}
# from_pretrained kwargs transformers 4.x folded into BitsAndBytesConfig beside load_in_8bit/load_in_4bit
BNB_OPTIONS = frozenset({"llm_int8_threshold", "llm_int8_skip_modules", "llm_int8_enable_fp32_cpu_offload",
                         "llm_int8_has_fp16_weight", "bnb_4bit_compute_dtype", "bnb_4bit_quant_type",
                         "bnb_4bit_use_double_quant", "bnb_4bit_quant_storage"})


@dataclass
class DictUses:
    name: str
    bindings: int = 0  # `d = {...}` / `d = dict(...)`
    other_bindings: list[str] = field(default_factory=list)  # `d = something_else`, parameters, loops
    stores: dict[str, int] = field(default_factory=dict)  # string key -> count of `d["key"] = ...`
    loaders: list[cst.Call] = field(default_factory=list)  # from_pretrained(..., **d)
    others: list[str] = field(default_factory=list)  # any other use (why the dict escapes)

    def problems(self, key: str) -> list[str]:
        out: list[str] = []
        if self.other_bindings:
            out.append(f"`{self.name}` is {self.other_bindings[0]}")
        elif self.bindings == 0:
            out.append(f"`{self.name}` is not created in this function")
        if self.others:
            out.append(f"`{self.name}` is also {self.others[0]}")
        if not self.loaders:
            out.append(f"`{self.name}` reaches no from_pretrained/from_config call in this function")
        for call in self.loaders:
            if any(a.keyword is not None and a.keyword.value == "quantization_config" for a in call.args):
                out.append("the from_pretrained call also passes quantization_config")
                break
            if sum(1 for a in call.args if a.star == "**") > 1:
                out.append("the from_pretrained call splats another dict too")
                break
        moved = sorted(k for k in self.stores if k in BNB_OPTIONS)
        if moved:
            out.append(f"`{self.name}` also carries bitsandbytes options ({', '.join(moved)}) that transformers "
                       "folded into the config only beside the kwarg: move them into BitsAndBytesConfig together")
        if "quantization_config" in self.stores:
            out.append(f"`{self.name}` also gets a quantization_config in this function (where both reach "
                       "from_pretrained, recent transformers 4.x reject the pair and a config that already says "
                       f"{key}=True makes this line redundant: delete it there)")
        return out


class _Collector(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.uses = DictUses(name)
        self._known: set[int] = set()  # Name nodes whose use is understood
        self._nested = 0

    def _is(self, node: cst.CSTNode | None) -> bool:
        return isinstance(node, cst.Name) and node.value == self.uses.name

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._nested += 1
        return self._nested == 1  # a nested function is another scope: look only at the outer one

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._nested -= 1

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Param(self, node: cst.Param) -> None:
        if self._is(node.name):
            self.uses.other_bindings.append("a parameter (the caller's dict)")
            self._known.add(id(node.name))

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            target = t.target
            if self._is(target):
                self._known.add(id(target))
                value = node.value
                if isinstance(value, cst.Dict) or isinstance(value, cst.Call) and isinstance(
                        value.func, cst.Name) and value.func.value == "dict":
                    self.uses.bindings += 1
                    if isinstance(value, cst.Dict):
                        for el in value.elements:
                            if isinstance(el, cst.DictElement):
                                key = literal(el.key)
                                if isinstance(key, str):
                                    self.uses.stores[key] = self.uses.stores.get(key, 0) + 1
                            else:
                                self.uses.others.append("built from another dict (`**` in its literal)")
                    else:
                        for a in value.args:
                            if a.keyword is not None:
                                self.uses.stores[a.keyword.value] = self.uses.stores.get(a.keyword.value, 0) + 1
                            else:
                                self.uses.others.append("built from another mapping (`dict(...)` argument)")
                else:
                    self.uses.other_bindings.append(f"bound to `{cst.Module(body=[]).code_for_node(value)[:40]}`")
            elif isinstance(target, cst.Subscript) and self._is(target.value):
                self._known.add(id(target.value))
                key = _key(target)
                if key is None:
                    self.uses.others.append("stored with a non-literal key")
                else:
                    self.uses.stores[key] = self.uses.stores.get(key, 0) + 1

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if self._is(node.target):
            self._known.add(id(node.target))
            self.uses.other_bindings.append("bound with an annotation")

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        for a in node.args:
            if a.star == "**" and self._is(a.value):
                self._known.add(id(a.value))
                if name in _LOADERS:
                    self.uses.loaders.append(node)
                else:
                    self.uses.others.append(f"splatted into `{name or 'a call'}`")

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.uses.name and id(node) not in self._known:
            self._known.add(id(node))
            self.uses.others.append("read or passed elsewhere (porter cannot follow it)")


def _key(sub: cst.Subscript) -> str | None:
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
        return None
    value = literal(sub.slice[0].slice.value)
    return value if isinstance(value, str) else None


def dict_uses(function: cst.FunctionDef, name: str) -> DictUses:
    collector = _Collector(name)
    function.visit(collector)
    return collector.uses
