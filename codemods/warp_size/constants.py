"""Per-target constants: the CUDA and HIP symbol tables, the functions and their lane taint."""

from __future__ import annotations

import bisect
import re

from tree_sitter import Node

from .common import (
    _IDENT,
    CALLED,
    PORTER_COLLECTIVE,
    PTX_MMA,
    RAW_WARP_CALL,
    RAW_WARP_NEEDLES,
    TAINT_NAME,
    TAINT_SOURCE,
    Func,
    _uncomment,
)
from .preproc import CUDA, HIP


class Constants:
    """One part of :class:`.engine.Analyser` (see the module docstring)."""

    # -- per-target constants -------------------------------------------------------------------------
    _CONST_DECL = re.compile(
        r"\b(?:static\s+)?(?:constexpr|const)\s+(?:static\s+)?(?:unsigned\s+|signed\s+)?"
        r"(?:int|long|short|size_t|u?int(?:8|16|32|64)_t|auto|unsigned)\s+([A-Za-z_]\w*)\s*=\s*([^;{}]+);")

    def _target_symbols(self) -> None:
        """Seed ``sym`` (CUDA) and ``hsym`` (HIP) with every definition active in each target."""
        self.hsym.defines.update({"C10_WARP_SIZE": "64", "__AMDGCN_WAVEFRONT_SIZE": "64",
                                  "__AMDGCN_WAVEFRONT_SIZE__": "64"})
        if self.scan is None:
            self._header_arch()
            return
        for sym, config in ((self.sym, CUDA), (self.hsym, HIP)):
            for name, body in self.scan.view(config).items():
                if body:
                    sym.defines.setdefault(name, body)
            for i, line in enumerate(self.scan.lines):
                if self.scan.status[i][config] == 0 or "const" not in line:  # (the pattern needs `const`)
                    continue
                for m in self._CONST_DECL.finditer(line):
                    if self.scan.status[i][config] == 1 or m.group(1) not in sym.consts:
                        sym.consts[m.group(1)] = m.group(2).strip()
        self.sym.defines.setdefault("C10_WARP_SIZE", "32")
        self._header_arch()

    def header_value(self, name: str) -> int | None:
        """The HIP value of a warp constant from the file or, failing that, from the tree's headers."""
        v = self.hsym.value(name)
        if v is None and name in getattr(self, "header_arch", {}) and name not in self.hsym.defines:
            v = self.header_arch[name][1]
        return v

    def _header_arch(self) -> None:
        """Per-platform warp constants of the tree's headers (32 on CUDA, 64 on HIP); the file's own win."""
        for name, (cv, hv) in getattr(self, "header_arch", {}).items():
            if cv == hv:
                continue  # same on both platforms: read by the tile check only (header_value)
            if name not in self.sym.defines and name not in self.hsym.defines:
                self.sym.defines[name] = str(cv)
                self.hsym.defines[name] = str(hv)

    def arch_value(self, name: str) -> int | None:
        """The HIP value of a warp constant whose CUDA value differs (64 vs 32), else None."""
        cache = self.__dict__.setdefault("_arch_cache", {})
        if name not in cache:
            hv = self.hsym.value(name) if name in self.hsym.defines or name in self.hsym.consts else None
            cv = self.sym.value(name) if hv is not None else None  # (no HIP value: the CUDA one does not matter)
            cache[name] = hv if hv is not None and cv is not None and hv != cv and (
                self.sym.is_warp_name(name) or hv >= 32 and hv % 32 == 0 or name == "C10_WARP_SIZE") else None
        return cache[name]

    def arch_name(self, text: str) -> str:
        """The first identifier in ``text`` that is a warp constant of another value under HIP, or ""."""
        cache = self.__dict__.setdefault("_arch_cache", {})
        for i in dict.fromkeys(_IDENT.findall(text)):  # each name once, in order of first use
            if (cache[i] if i in cache else self.arch_value(i)) is not None:
                return i
        return ""

    def _symbols(self) -> None:
        for node in self.caps.get("def", []):
            name = node.child_by_field_name("name")
            value = node.child_by_field_name("value")
            if name is None or value is None:
                continue
            body = self.t(value).strip()
            self.sym.defines.setdefault(self.t(name), body)
            if re.search(r"\bwarpSize\b|__AMDGCN_WAVEFRONT_SIZE|__GFX9__|__gfx9", body):
                self.sym.dependent.add(self.t(name))
            # a define inside #if on a wavefront macro is arch-dependent
            p = node.parent
            while p is not None and p.type not in ("translation_unit",):
                if p.type in ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_else"):
                    cond = p.child_by_field_name("condition") or p.child_by_field_name("name")
                    if cond is not None and re.search(r"__AMDGCN_WAVEFRONT_SIZE|__GFX9__|__gfx9|GFX9",
                                                      self.t(cond)):
                        self.sym.dependent.add(self.t(name))
                p = p.parent
        for node in self.caps.get("fdef", []):
            name = node.child_by_field_name("name")
            params = node.child_by_field_name("parameters")
            value = node.child_by_field_name("value")
            if name is None or value is None:
                continue
            ps = tuple(_IDENT.findall(self.t(params))) if params is not None else ()
            self.sym.fn_macros[self.t(name)] = (ps, self.t(value))
        for node in self.caps.get("decl", []):
            txt = self.t(node)
            if not re.match(r"\s*(?:static\s+)?(?:constexpr|const)\b|.*\bconstexpr\b", txt):
                continue
            for child in node.children:
                if child.type == "init_declarator":
                    d = child.child_by_field_name("declarator")
                    v = child.child_by_field_name("value")
                    if d is not None and v is not None and d.type == "identifier":
                        self.sym.consts.setdefault(self.t(d), self.t(v))
        # object-like aliases of warp intrinsics (`#define SHFL_DOWN __shfl_down`)
        # (the HIP view first: what the alias means on AMD decides the hazard)
        self.aliases = {}
        for table in (self.hsym.defines, self.sym.defines):
            for n, b in table.items():
                if n not in self.aliases and re.fullmatch(
                        r"__shfl(?:_up|_down|_xor)?(?:_sync)?|__ballot(?:_sync)?|__any_sync|__all_sync|"
                        r"__activemask|__syncwarp", b.strip()):
                    self.aliases[n] = b.strip()
        if self.aliases and self.scan is not None:
            # a name the HIP branch defines as a function-like macro of its own (`#ifdef USE_ROCM /
            # #define SHFL(mask, v, l) __shfl(v, l) / #else / #define SHFL __shfl_sync`) is a per-platform
            # port: the CUDA alias says nothing about AMD (the HIP side is checked by hip_alias)
            hip_fn = set()
            for i, line in enumerate(self.scan.lines):
                st = self.scan.status[i] if i < len(self.scan.status) else None
                m = re.match(r"[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(", line)
                if m and st is not None and st[HIP] != 0 and st[CUDA] == 0:
                    hip_fn.add(m.group(1))
            for n in hip_fn & set(self.aliases):
                if n not in self.hsym.defines:
                    del self.aliases[n]
        # function-like macros whose bodies call raw warp intrinsics
        changed = True
        while changed:
            changed = False
            for name, (_ps, body) in self.sym.fn_macros.items():
                if name in self.macro_raw:
                    continue
                if self._raw_call(body) or any(
                    m in self.macro_raw for m in re.findall(r"([A-Za-z_]\w*)\s*\(", body)
                ):
                    self.macro_raw.add(name)
                    changed = True

    def _functions(self) -> None:
        for node in self.caps.get("fn", []):
            quals = set()
            name = ""
            decl = node.child_by_field_name("declarator")
            for child in node.children:
                if child.type in ("__global__", "__device__", "__host__"):
                    quals.add(child.type)
            while decl is not None and decl.type not in ("function_declarator",):
                decl = decl.child_by_field_name("declarator")
            if decl is not None:
                d = decl.child_by_field_name("declarator")
                name = self.t(d) if d is not None else ""
                # qualifiers hidden behind macros (`#define DEVICE_FUNCTION static inline __device__`)
                prefix = self.data[node.start_byte : decl.start_byte].decode("utf-8", "surrogatepass")
                for ident in _IDENT.findall(prefix):
                    body = self.sym.defines.get(ident, "")
                    for q in ("__global__", "__device__", "__host__"):
                        if q in body:
                            quals.add(q)
            if "__host__" in quals and quals & {"__global__", "__device__"}:
                kind = "hd"
            elif quals & {"__global__", "__device__"}:
                kind = "device"
            else:
                kind = "host"
            body = node.child_by_field_name("body")
            self.funcs.append(Func(node, node.start_byte, node.end_byte, name.split("::")[-1], kind,
                                   _uncomment(self.t(body)) if body is not None else ""))
        raw_names: set[str] = set()
        calls = {id(f): set(CALLED.findall(f.text)) for f in self.funcs}  # what each function calls, by name
        for f in self.funcs:
            called = calls[id(f)]
            if self._raw_call(f.text) or called & (self.macro_raw | set(self.aliases)):
                f.raw_warp = True
                raw_names.add(f.name)
            t = f.text  # (each pattern after a test for a substring all its matches contain)
            if ("mma." in t or "ldmatrix" in t) and PTX_MMA.search(t) or "wmma" in t and re.search(
                    r"\bwmma::|\bnvcuda::wmma", t):
                f.mma = True
        changed = True
        while changed:  # functions calling a raw-warp device function are raw too
            changed = False
            for f in self.funcs:
                if f.raw_warp or f.kind == "host":
                    continue
                if calls[id(f)] & raw_names:
                    f.raw_warp = True
                    raw_names.add(f.name)
                    changed = True
        self.raw_names = raw_names
        coll: set[str] = set(raw_names)
        for f in self.funcs:
            if f.raw_warp or "porter_" in f.text and PORTER_COLLECTIVE.search(f.text):
                f.collective = True
                coll.add(f.name)
        changed = True
        while changed:
            changed = False
            for f in self.funcs:
                if f.collective or f.kind == "host":
                    continue
                if calls[id(f)] & coll:
                    f.collective = True
                    coll.add(f.name)
                    changed = True
        self.collective_names = coll
        self.ballot_wrappers = {
            f.name for f in self.funcs
            if f.kind != "host" and f.name and ("__ballot" in f.text or "__activemask" in f.text)
            and re.search(r"\breturn\b[^;]*\b(?:__ballot(?:_sync)?|__activemask)\s*\(", f.text)
        }
        for f in self.funcs:
            self._taint(f)

    def _taint(self, f: Func) -> None:
        names: set[str] = set()
        # parameters named like lanes
        decls = self.within("decl", f)
        for _ in range(2):
            for d in decls:
                for child in d.children:
                    if child.type != "init_declarator":
                        continue
                    dn = child.child_by_field_name("declarator")
                    v = child.child_by_field_name("value")
                    if dn is None or v is None or dn.type != "identifier":
                        continue
                    vt = self.t(v)
                    if TAINT_SOURCE.search(vt) or set(_IDENT.findall(vt)) & names:
                        names.add(self.t(dn))
        f.taint = names

    def _raw_call(self, text: str) -> bool:
        """A raw warp intrinsic call in ``text`` that is not one of the repository's own HIP shims."""
        if not any(n in text for n in RAW_WARP_NEEDLES):
            return False
        if not self.shims:
            return bool(RAW_WARP_CALL.search(text))
        return any(m.group(0).split("(")[0].strip() not in self.shims for m in RAW_WARP_CALL.finditer(text))

    def func_at(self, byte: int) -> Func | None:
        """The innermost function containing ``byte`` (functions sorted by start; nesting is shallow)."""
        if not hasattr(self, "_fstarts"):
            self.funcs.sort(key=lambda f: f.start)
            self._fstarts = [f.start for f in self.funcs]
        i = bisect.bisect_right(self._fstarts, byte) - 1
        for j in range(i, max(i - 16, -1), -1):
            f = self.funcs[j]
            if f.start <= byte < f.end:
                return f
        return None

    def within(self, cap: str, f: Func) -> list[Node]:
        """Captured nodes of kind ``cap`` that start inside function ``f``."""
        nodes = self.caps.get(cap, [])
        key = "_starts_" + cap
        starts = self.__dict__.get(key)
        if starts is None:
            starts = [n.start_byte for n in nodes]
            self.__dict__[key] = starts
        return nodes[bisect.bisect_left(starts, f.start) : bisect.bisect_left(starts, f.end)]

    def tainted(self, text: str, f: Func | None) -> bool:
        if TAINT_SOURCE.search(text):
            return True
        idents = set(_IDENT.findall(text))
        if f is not None and idents & f.taint:
            return True
        return any(TAINT_NAME.match(i) for i in idents)

    def is_device(self, byte: int) -> bool:
        f = self.func_at(byte)
        return f is not None and f.kind in ("device", "hd")

    def file_raw_warp(self) -> bool:
        """The file's kernels use raw warp collectives (here, or in a header of the repository it includes)."""
        return any(f.raw_warp for f in self.funcs) or bool(self.macro_raw) or self.includes_warp
