"""The warp-size analysis over one CUDA/C++ source text (tree-sitter CUDA grammar).

``analyse(text, strategy)`` returns :class:`Site` objects: a rule code, a character range, a
message and (optionally) edits. ``codemods.warp_size`` turns them into findings and adds the
header include. The same analysis runs on CUDA source embedded in Python strings.

How a literal becomes a hazard (the decision rule): only in a warp context. Warp
intrinsic calls (shuffles, votes, ballots, ``__syncwarp``) are hazards by themselves; loops,
lane arithmetic, shared arrays and block geometry are reported only inside a function that
calls a raw warp intrinsic (directly, through a macro, or through a device function that does),
and only when the operand is lane/warp-index tainted or resolves to a warp constant. Once
porter's rewrite has replaced the raw intrinsics with ``porter_*`` calls those functions are no
longer "raw", so the companion reports disappear and the pass is idempotent.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tree_sitter import Node, Query, QueryCursor

from porter.findings import Applicability

from .._cuda_tree import language, parse
from .preproc import CUDA, HIP, Scan, mask
from .symbols import Symbols

LANG = language()

LOGICAL = "logical"
PHYSICAL = "physical"

SHUFFLES_SYNC = {"__shfl_sync": "shfl", "__shfl_up_sync": "shfl_up", "__shfl_down_sync": "shfl_down",
                 "__shfl_xor_sync": "shfl_xor"}
SHUFFLES_LEGACY = {"__shfl": "shfl", "__shfl_up": "shfl_up", "__shfl_down": "shfl_down", "__shfl_xor": "shfl_xor"}
VOTES_SYNC = {"__ballot_sync": "ballot", "__any_sync": "any", "__all_sync": "all"}
VOTES_LEGACY = {"__ballot": "ballot", "__any": "any", "__all": "all"}
BALLOT_SOURCES = {"__ballot_sync", "__ballot", "__activemask", "__match_any_sync", "__match_all_sync",
                  "__lanemask_lt", "__lanemask_le", "__lanemask_gt", "__lanemask_ge"}
NV_ONLY = re.compile(r"^(?:__reduce_\w+_sync|__match_(?:any|all)_sync|__fns|__builtin_nvvm_bar_warp_sync)$")
BIT_CONSUMERS = {"__popc": "porter_popc", "__ffs": "porter_ffs", "__clz": "porter_clz", "__brev": ""}
RAW_WARP_CALL = re.compile(
    r"\b(?:__shfl(?:_up|_down|_xor)?(?:_sync)?|__ballot(?:_sync)?|__any_sync|__all_sync|__activemask|"
    r"__syncwarp|__match_(?:any|all)_sync|__reduce_\w+_sync)\s*\("
)
PORTER_COLLECTIVE = re.compile(r"\bporter_(?:shfl\w*|ballot\w*|any\w*|all\w*|activemask\w*|syncwarp)\s*\(")
SHFL_CALL = re.compile(r"\b__shfl(?:_up|_down|_xor)?(?:_sync)?\s*\(")
PTX_WARP = re.compile(r"shfl\.sync|vote\.|%%?laneid|%%?lanemask_|redux\.sync|activemask|bar\.warp\.sync")
PTX_MMA = re.compile(r"\bmma\.sync|\bldmatrix|\bwmma\.|\bmma\.")
TAINT_SOURCE = re.compile(r"\bthreadIdx\b|__lane_id\s*\(|laneid|thread_rank\s*\(|\blane_id\s*\(|get_lane_id")
TAINT_NAME = re.compile(
    r"^(?:lane|lane_?id|laneId|laneid|lane_idx|laneIdx|tid|thread_id|threadId|wid|warp_?id|warpId|"
    r"warp_idx|warpIdx|lid)$"
)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_THIRTY_TWO = {32}
HEADER = "porter_warp.h"


@dataclass
class Site:
    code: str
    start: int  # character offsets in the analysed text
    end: int
    message: str
    edits: list[tuple[int, int, str]] = field(default_factory=list)
    fix: Applicability = Applicability.NONE
    needs_header: bool = False
    info: bool = False  # consistent under the chosen strategy: reported for review, no work counted
    work: bool = False  # never informational (a hazard the strategy's rewrite does not cover)


@dataclass
class Func:
    node: Node
    start: int
    end: int
    name: str
    kind: str  # "device" (__global__/__device__), "hd" (__host__ __device__), "host"
    text: str
    raw_warp: bool = False
    collective: bool = False  # raw or porter_* warp collectives (for H17)
    mma: bool = False
    taint: set[str] = field(default_factory=set)
    arch: str = ""  # a warp constant of this function whose value is 64 under HIP


_QUERY_SRC = """
(call_expression function: (_) @callee arguments: (argument_list) @args) @call
(for_statement) @for
(declaration) @decl
(binary_expression) @bin
(gnu_asm_expression) @asm
(if_statement condition: (_) @cond consequence: (_) @then) @if
((identifier) @wid (#match? @wid "^(warpSize|__AMDGCN_WAVEFRONT_SIZE|__AMDGCN_WAVEFRONT_SIZE__|C10_WARP_SIZE)$"))
((type_identifier) @wid (#eq? @wid "warpSize"))
((field_identifier) @wfield (#eq? @wfield "warpSize"))
(preproc_def name: (identifier) @dname value: (preproc_arg) @dbody) @def
(preproc_function_def name: (identifier) @fname parameters: (preproc_params) @fparams value: (preproc_arg) @fbody) @fdef
(function_definition) @fn
(launch_bounds) @lb
(template_type name: (type_identifier) @tname arguments: (template_argument_list) @targs) @ttype
(template_function name: (identifier) @tfname arguments: (template_argument_list) @tfargs) @tfunc
(optional_parameter_declaration) @optparam
(subscript_expression) @sub
"""
_QUERY = Query(LANG, _QUERY_SRC)


class Analyser:
    """One file's analysis. ``text`` is what both targets compile (see ``preproc.mask``):
    CUDA-only branches and human-written HIP branches are blanked, offsets unchanged."""

    def __init__(self, text: str, strategy: str = LOGICAL, cache: dict | None = None,
                 scan: Scan | None = None, shims: frozenset[str] = frozenset()) -> None:
        self.text = text
        self.shims = shims  # intrinsic names the repo itself defines as macros for HIP
        self.strategy = strategy
        self.data = text.encode("utf-8", "surrogatepass")
        self.ascii = len(self.data) == len(text)
        self._b2c: list[int] | None = None
        self.tree = parse(text, cache)
        self.sites: list[Site] = []
        self.scan = scan
        self.sym = Symbols()  # the CUDA view of the file's constants
        self.hsym = Symbols()  # the HIP view (C10_WARP_SIZE and wavefront macros are 64 there)
        self.funcs: list[Func] = []
        self.caps: dict[str, list[Node]] = {}
        self.physical_blockers: list[tuple[int, str]] = []
        self.macro_raw: set[str] = set()
        self.aliases: dict[str, str] = {}

    # -- offsets ------------------------------------------------------------------------------------
    def c(self, byte: int) -> int:
        if self.ascii:
            return byte
        if self._b2c is None:
            table = [0] * (len(self.data) + 1)
            ci = 0
            bi = 0
            for ch in self.text:
                n = len(ch.encode("utf-8", "surrogatepass"))
                for k in range(n):
                    table[bi + k] = ci
                bi += n
                ci += 1
            table[bi] = ci
            self._b2c = table
        return self._b2c[byte]

    def t(self, node: Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")

    def span(self, node: Node) -> tuple[int, int]:
        return self.c(node.start_byte), self.c(node.end_byte)

    def site(self, code: str, node_or_span, message: str, edits=(), fix=Applicability.NONE, header=False,
             info: bool = False) -> Site:
        if isinstance(node_or_span, tuple):
            start, end = node_or_span
        else:
            start, end = self.span(node_or_span)
        s = Site(code, start, end, message, list(edits), fix if edits else Applicability.NONE, header and bool(edits),
                 info and not edits)
        self.sites.append(s)
        return s

    def edit(self, node: Node, text: str) -> tuple[int, int, str]:
        a, b = self.span(node)
        return (a, b, text)

    # -- passes -------------------------------------------------------------------------------------
    def run(self) -> list[Site]:
        cursor = QueryCursor(_QUERY)
        caps = cursor.captures(self.tree.root_node)
        self.caps = {k: sorted(v, key=lambda n: n.start_byte) for k, v in caps.items()}
        self._target_symbols()
        self._symbols()
        self._functions()
        self._macro_bodies()
        self._calls()
        self._default_masks()
        self._loops()
        self._binaries()
        self._declarations()
        self._identifiers()
        self._templates()
        self._asm()
        self._ifs()
        self._launch_bounds()
        self._volatile_trees()
        self._host_warp_vars()
        self._host_dim3()
        self._host_checks()
        self._intrinsic_overloads()
        self._cub_widths()
        for site in self.sites:  # consistent under the logical warp: review notes, not work
            if (site.code in self._INFO_CODES and self.strategy == LOGICAL or site.code == "PRT519") and not (
                    site.edits or site.work):
                site.info = True
        self._arch_guard()
        self._mma_guard()
        self._blanked_wavefront_macros()
        before = len(self.sites)
        self._hip_only_bugs()
        broken = any(site.code == "PRT515" for site in self.sites[before:])  # a port with misplaced arguments
        if self.strategy == LOGICAL and not broken and self._hand_ported():
            for site in self.sites:
                if site.edits:
                    site.edits, site.fix, site.needs_header = [], Applicability.NONE, False
                    site.message += (" (not patched: this file already has hand-written HIP/CUDA branches for its "
                                     "warp code; porter reports what that port left in shared code for review)")
        return self.sites

    _WARPISH = re.compile(r"\b(?:__shfl\w*|__ballot\w*|__any\w*|__all\w*|__activemask|__syncwarp|__lane_id)\s*\(")

    def _hand_ported(self) -> bool:
        """True when branches that only one target compiles hold warp collectives: a person already
        ported them (per-target constants alone do not count: see the arch guard)."""
        if self.scan is None or not self.scan.has_platform_branches:
            return False
        return any(not self.scan.compiled_by_both(i) and self._WARPISH.search(line)
                   for i, line in enumerate(self.scan.lines))

    def _hip_only_bugs(self) -> None:
        """Human-written HIP branches are not rewritten, but two mistakes there are wrong at any width:
        a legacy maskless shuffle given a mask (H15) and `warpSize` as a macro value (not constexpr
        from ROCm 7.0, H11). Reported without a fix."""
        original = getattr(self, "original", self.text)
        if original is self.text or self.scan is None:
            return
        st = self.scan.status
        pos = 0
        regions: list[tuple[int, int]] = []
        for i, line in enumerate(self.scan.lines):
            if st[i][HIP] != 0 and st[i][CUDA] == 0:
                if regions and regions[-1][1] == pos:
                    regions[-1] = (regions[-1][0], pos + len(line))
                else:
                    regions.append((pos, pos + len(line)))
            pos += len(line)
        legacy = re.compile(r"\b(__shfl(?:_up|_down|_xor)?)\s*\(")
        for a, b in regions:
            chunk = original[a:b]
            for m in legacy.finditer(chunk):
                args = _split_args(chunk, m.end())
                if args and len(args) >= 3 and self.sym.is_full_mask32(args[0][0]):
                    self.site("PRT515", (a + m.start(), a + m.end()), f"legacy maskless `{m.group(1)}` called with "
                              "a mask as its first argument in a HIP branch: it shuffles the mask constant, with "
                              "the value as delta. Move the arguments into place by hand (human HIP code is not "
                              "rewritten).")
            for m in re.finditer(r"#[ \t]*define[ \t]+\w+[ \t]+[^\n]*?\b(warpSize)\b", chunk):
                self.site("PRT511", (a + m.start(1), a + m.end(1)), "macro defined as `warpSize` in a HIP branch: "
                          "`warpSize` is not constexpr from ROCm 7.0 (array bounds, template arguments and "
                          "`__launch_bounds__` that use the macro stop compiling) and is 64 in the host pass. Use "
                          "PORTER_WARP_SIZE (device) / porter::host_warp_size() (host) by hand.")

    def _blanked_wavefront_macros(self) -> None:
        """H12 in directives and branches the mask removed: the macro's removal breaks them on AMD too."""
        original = getattr(self, "original", self.text)
        if original is self.text or self.scan is None:
            return
        seen = {s.start for s in self.sites if s.code == "PRT512"}
        pos = 0
        for i, line in enumerate(self.scan.lines):
            if self.scan.status[i][HIP] != 0 or i in self.scan.blank_directive:
                for m in re.finditer(r"\b__AMDGCN_WAVEFRONT_SIZE(?:__)?\b", line):
                    a = pos + m.start()
                    if a not in seen and self.text[a:a + 1].isspace():
                        self.site("PRT512", (a, a + len(m.group(0))), f"`{m.group(0)}` is deprecated (and removed "
                                  "in recent LLVM: an `#if` on it becomes silently false); in the host pass it is "
                                  "always 64. Use the arch test in porter_warp.h (PORTER_WARP_SIZE) on the device "
                                  "and porter::host_warp_size() on the host.")
            pos += len(line)

    _INFO_CODES = ("PRT502", "PRT503", "PRT504", "PRT505", "PRT506", "PRT507", "PRT514")

    # -- per-target constants -------------------------------------------------------------------------
    _CONST_DECL = re.compile(
        r"\b(?:static\s+)?(?:constexpr|const)\s+(?:static\s+)?(?:unsigned\s+|signed\s+)?"
        r"(?:int|long|short|size_t|u?int(?:8|16|32|64)_t|auto|unsigned)\s+([A-Za-z_]\w*)\s*=\s*([^;{}]+);")

    def _target_symbols(self) -> None:
        """Seed ``sym`` (CUDA) and ``hsym`` (HIP) with every definition active in each target."""
        self.hsym.defines.update({"C10_WARP_SIZE": "64", "__AMDGCN_WAVEFRONT_SIZE": "64",
                                  "__AMDGCN_WAVEFRONT_SIZE__": "64"})
        if self.scan is None:
            return
        for sym, config in ((self.sym, CUDA), (self.hsym, HIP)):
            for name, body in self.scan.view(config).items():
                if body:
                    sym.defines.setdefault(name, body)
            for i, line in enumerate(self.scan.lines):
                if self.scan.status[i][config] == 0:
                    continue
                for m in self._CONST_DECL.finditer(line):
                    if self.scan.status[i][config] == 1 or m.group(1) not in sym.consts:
                        sym.consts[m.group(1)] = m.group(2).strip()
        self.sym.defines.setdefault("C10_WARP_SIZE", "32")

    def arch_value(self, name: str) -> int | None:
        """The HIP value of a warp constant whose CUDA value differs (64 vs 32), else None."""
        cache = self.__dict__.setdefault("_arch_cache", {})
        if name not in cache:
            hv = self.hsym.value(name) if name in self.hsym.defines or name in self.hsym.consts else None
            cv = self.sym.value(name)
            cache[name] = hv if hv is not None and cv is not None and hv != cv and (
                self.sym.is_warp_name(name) or hv >= 32 and hv % 32 == 0 or name == "C10_WARP_SIZE") else None
        return cache[name]

    def arch_name(self, text: str) -> str:
        for i in _IDENT.findall(text):
            if self.arch_value(i) is not None:
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
        for f in self.funcs:
            called = set(re.findall(r"([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(", f.text))
            if self._raw_call(f.text) or called & (self.macro_raw | set(self.aliases)):
                f.raw_warp = True
                raw_names.add(f.name)
            if PTX_MMA.search(f.text) or re.search(r"\bwmma::|\bnvcuda::wmma", f.text):
                f.mma = True
        changed = True
        while changed:  # functions calling a raw-warp device function are raw too
            changed = False
            for f in self.funcs:
                if f.raw_warp or f.kind == "host":
                    continue
                called = set(re.findall(r"([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(", f.text))
                if called & raw_names:
                    f.raw_warp = True
                    raw_names.add(f.name)
                    changed = True
        self.raw_names = raw_names
        coll: set[str] = set(raw_names)
        for f in self.funcs:
            if f.raw_warp or PORTER_COLLECTIVE.search(f.text):
                f.collective = True
                coll.add(f.name)
        changed = True
        while changed:
            changed = False
            for f in self.funcs:
                if f.collective or f.kind == "host":
                    continue
                called = set(re.findall(r"([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(", f.text))
                if called & coll:
                    f.collective = True
                    coll.add(f.name)
                    changed = True
        self.collective_names = coll
        self.ballot_wrappers = {
            f.name for f in self.funcs
            if f.kind != "host" and f.name and re.search(r"\breturn\b[^;]*\b(?:__ballot(?:_sync)?|__activemask)\s*\(", f.text)
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

    # -- rules ----------------------------------------------------------------------------------------
    def _callee(self, call: Node) -> tuple[str, Node | None]:
        fn = call.child_by_field_name("function")
        if fn is None:
            return "", None
        if fn.type == "identifier":
            return self.t(fn), fn
        if fn.type == "qualified_identifier":
            name = fn.child_by_field_name("name")
            return (self.t(fn), name) if name is not None else (self.t(fn), None)
        return self.t(fn), fn

    @staticmethod
    def _args(call: Node) -> list[Node]:
        args = call.child_by_field_name("arguments")
        if args is None:
            return []
        return [c for c in args.named_children if c.type != "comment"]

    def _drop_first_arg(self, args: list[Node]) -> tuple[int, int, str]:
        a = self.c(args[0].start_byte)
        b = self.c(args[1].start_byte) if len(args) > 1 else self.c(args[0].end_byte)
        return (a, b, "")

    def _append_width(self, call: Node) -> tuple[int, int, str] | None:
        args = call.child_by_field_name("arguments")
        if args is None:
            return None
        close = args.children[-1]
        pos = self.c(close.start_byte)
        return (pos, pos, ", PORTER_WARP_SIZE")

    def _calls(self) -> None:
        for call in self.caps.get("call", []):
            name, fnode = self._callee(call)
            if fnode is None:
                continue
            if name in self.shims:
                continue  # the repo's own HIP shim handles it (e.g. a vendor header's maskless macros)
            args = self._args(call)
            f = self.func_at(call.start_byte)
            if name in self.aliases:  # reported through the alias, not patched (it may differ per platform)
                before = len(self.sites)
                self._dispatch_call(call, fnode, self.aliases[name], args, f)
                for site in self.sites[before:]:
                    site.edits, site.fix, site.needs_header = [], Applicability.NONE, False
                    site.message += f" (called through the macro alias `{name}`; patch the macro by hand)"
                continue
            self._dispatch_call(call, fnode, name, args, f)

    def _dispatch_call(self, call: Node, fnode: Node, name: str, args: list[Node], f: Func | None) -> None:
        if name in SHUFFLES_SYNC:
            self._shuffle_sync(call, fnode, name, args)
        elif name in SHUFFLES_LEGACY:
            self._shuffle_legacy(call, fnode, name, args)
        elif name in VOTES_SYNC or name == "__activemask" or name in VOTES_LEGACY:
            self._vote(call, fnode, name, args)
        elif name == "__syncwarp":
            self._syncwarp(call, fnode, args)
        elif NV_ONLY.match(name):
            self.site("PRT518", call, f"`{name}` is an NVIDIA-only warp primitive with no portable HIP "
                      "equivalent on every ROCm release; rewrite it with shuffles or ballots (porter_* helpers).")
        elif name in BIT_CONSUMERS and args and f is not None and f.raw_warp:
            a = self.t(args[0])
            ballot_vars = self._ballot_vars(f)
            if re.search(r"__ballot|__activemask|__match_any", a) or set(_IDENT.findall(a)) & ballot_vars:
                edits = []
                if self.strategy == PHYSICAL and BIT_CONSUMERS[name]:
                    edits = [self.edit(fnode, BIT_CONSUMERS[name])]
                self.site("PRT503", call, f"`{name}` on a lane mask assumes 32 bits: HIP ballots are 64-bit "
                          "on wave64. " + ("porter's logical-warp ballot (porter_ballot32) keeps this mask 32-bit."
                                           if self.strategy == LOGICAL else "Use the width-generic porter helper."),
                          edits, Applicability.UNSAFE, header=True)
        elif re.search(r"(?:^|\.|->)meta_group_(?:size|rank)$", name):
            self.site("PRT513", call, f"`{name}()` counts tiles of the cooperative-groups tile size: on HIP it "
                      "must agree with the warp size the rest of the kernel assumes (DeepSpeed replaced it with "
                      "explicit threadIdx / warp-size arithmetic on ROCm).")

    def _mask_kind(self, node: Node) -> str:
        txt = self.t(node)
        if self.sym.is_full_mask32(txt):
            return "full32"
        return "other"

    def _shuffle_sync(self, call: Node, fnode: Node, name: str, args: list[Node]) -> None:
        base = SHUFFLES_SYNC[name]
        if len(args) < 3:
            return
        mask = self._mask_kind(args[0])
        width = args[3] if len(args) > 3 else None
        wv = self.sym.value(self.t(width)) if width is not None else None
        physical = self.strategy == PHYSICAL
        edits: list[tuple[int, int, str]] = []
        if mask == "full32":
            edits.append(self.edit(fnode, f"porter_{base}"))
            edits.append(self._drop_first_arg(args))
        else:
            edits.append(self.edit(fnode, f"porter_{base}_sync"))
        if physical and width is None:
            w = self._append_width(call)
            if w:
                edits.append(w)
        if width is not None and wv is not None and wv > 32:
            self.site("PRT508", call, f"`{name}` with width {wv}: wider than a CUDA warp; porter cannot tell "
                      "which logical group is meant.")
            return
        fix = Applicability.UNSAFE if physical else Applicability.SAFE
        if mask == "full32":
            self.site("PRT501", call, f"`{name}` with a 32-bit full mask `{self.t(args[0])}`: fails to compile on "
                      "ROCm >= 6.3 (the mask must be 64-bit) and excludes lanes 32..63 if widened by zero-extension. "
                      + ("Rewritten to the maskless `porter_" + base + "` (explicit logical width 32)."
                         if not physical else "Rewritten to `porter_" + base + "` over the wavefront width."),
                      edits, fix, header=True)
        elif base == "shfl_xor" and (width is not None or self._xor_small(args[2])):
            msg = (f"`{name}` with a computed 32-bit mask `{self.t(args[0])}`: fails ROCm >= 6.3's 64-bit mask "
                   "check (the XOR offsets stay inside a 32-lane warp, so only the mask needs porter's helper).")
            self.site("PRT508", call, msg, edits, fix, header=True)
        elif width is not None and wv is not None and wv <= 32:
            msg = (f"`{name}` with a computed 32-bit mask `{self.t(args[0])}` (explicit width {wv}): fails "
                   "ROCm >= 6.3's 64-bit mask check; porter's helper converts the mask.")
            self.site("PRT508", call, msg, edits, fix, header=True)
        else:
            msg = (f"`{name}` without porter's width: on a 64-lane wavefront the default width is 64, which "
                   "crosses into the other logical 32-lane warp, and a 32-bit mask fails ROCm >= 6.3's "
                   "64-bit mask check.")
            self.site("PRT508", call, msg, edits, fix, header=True)

    def _shuffle_legacy(self, call: Node, fnode: Node, name: str, args: list[Node]) -> None:
        base = SHUFFLES_LEGACY[name]
        if len(args) >= 3 and self.sym.is_full_mask32(self.t(args[0])):
            edits = [self.edit(fnode, f"porter_{base}"), self._drop_first_arg(args)]
            self.site("PRT515", call, f"legacy maskless `{name}` called with a mask as its first argument: it "
                      "shuffles the mask constant, with the value as delta and the offset as width. porter moves "
                      f"the arguments into place (`porter_{base}(value, offset)`); check the intent.",
                      edits, Applicability.UNSAFE, header=True)
            return
        if len(args) < 2:
            return
        if len(args) >= 3:  # explicit width
            wt = self.t(args[2])
            arch = self.arch_name(wt)
            wv = self.sym.value(wt)
            if arch or (wv is not None and wv > 32):
                self.site("PRT508", call, f"legacy `{name}` with width `{wt}` "
                          f"({'64 under HIP' if arch else wv}): the group spans more than a 32-lane warp on "
                          "AMD; porter cannot pin it to a logical warp.")
            return  # an explicit width of at most 32 lanes (or a sub-warp parameter) is right on HIP
        if base == "shfl_xor" and self._xor_small(args[1]):
            return  # an XOR butterfly with offsets < 32 never leaves a 32-lane half, at any width
        edits = [self.edit(fnode, f"porter_{base}")]
        if self.strategy == PHYSICAL and len(args) == 2:
            w = self._append_width(call)
            if w:
                edits.append(w)
        self.site("PRT508", call, f"legacy `{name}` without an explicit width: the default width is the "
                  "wavefront (64 on CDNA), not 32.", edits,
                  Applicability.UNSAFE if self.strategy == PHYSICAL else Applicability.SAFE, header=True)

    def _xor_small(self, off: Node) -> bool:
        """True when an XOR lane offset is provably below 32 (a constant, or a loop variable/`1 << i`
        whose loop keeps it there)."""
        t = self.t(off).strip()
        v = self.sym.value(t)
        if v is not None:
            return 0 <= v < 32
        m = re.fullmatch(r"\(?\s*1u?\s*<<\s*(\w+)\s*\)?", t)
        var = m.group(1) if m else t
        shift = m is not None
        if not _IDENT.fullmatch(var):
            return False
        p = off.parent
        while p is not None and p.type != "function_definition":
            if p.type == "for_statement":
                hi = self._loop_max(p, var)
                if hi is not None:
                    return (1 << hi if shift else hi) < 32
            p = p.parent
        return False

    def _loop_max(self, loop: Node, var: str) -> int | None:
        """The largest value ``var`` takes in a counted for loop, when the loop shows it."""
        init = loop.child_by_field_name("initializer")
        cond = loop.child_by_field_name("condition")
        upd = loop.child_by_field_name("update")
        if init is None or cond is None or upd is None:
            return None
        it, ct, ut = self.t(init), self.t(cond), re.sub(r"\s+", "", self.t(upd))
        m0 = re.search(rf"\b{re.escape(var)}\s*=\s*([^,;]+)", it)
        if not m0 or not re.match(rf"(?:\+\+|--)?{re.escape(var)}\b", ut):
            return None
        v0 = self.sym.value(m0.group(1))
        if v0 is None:
            return None
        if re.search(r">>=1$|/=2$|=\w+>>1$|=\w+/2$|--$|-=\d+$", ut):
            return v0  # decreasing from its start
        mc = re.fullmatch(rf"\s*{re.escape(var)}\s*(<=?)\s*(.+?)\s*", ct)
        if not mc:
            return None
        bound = self.sym.value(mc.group(2))
        if bound is None:
            return None
        return bound if mc.group(1) == "<=" else bound - 1

    def _vote(self, call: Node, fnode: Node, name: str, args: list[Node]) -> None:
        physical = self.strategy == PHYSICAL
        if name == "__activemask":
            new = "porter_activemask" if physical else "porter_activemask32"
            self.site("PRT509", call, "`__activemask()` returns 64 bits on HIP wave64; under the logical 32-lane "
                      "warp only the caller's half is meant.", [self.edit(fnode, new)],
                      Applicability.UNSAFE if physical else Applicability.SAFE, header=True)
            return
        if name in VOTES_LEGACY:
            if len(args) != 1:
                return
            base = VOTES_LEGACY[name]
            new = f"porter_{base}" if physical else f"porter_{base}32"
            self.site("PRT509", call, f"legacy `{name}` votes over the whole 64-lane wavefront on HIP.",
                      [self.edit(fnode, new)], Applicability.UNSAFE if physical else Applicability.SAFE, header=True)
            return
        base = VOTES_SYNC[name]
        if len(args) != 2:
            return
        full = self.sym.is_full_mask32(self.t(args[0]))
        if full:
            new = f"porter_{base}" if physical else f"porter_{base}32"
            edits = [self.edit(fnode, new), self._drop_first_arg(args)]
            self.site("PRT501", call, f"`{name}` with a 32-bit full mask `{self.t(args[0])}`: fails on ROCm >= 6.3 "
                      "and, on HIP, votes over the whole 64-lane wavefront. Rewritten to "
                      f"`{new}` ({'wavefront-wide, 64-bit' if physical else 'the caller logical 32-lane half'}).",
                      edits, Applicability.UNSAFE if physical else Applicability.SAFE, header=True)
        elif physical:
            self.site("PRT509", call, f"`{name}` with a computed mask: porter cannot widen it for the physical "
                      "strategy; convert the mask to porter_lanemask_t by hand.")
        else:
            edits = [self.edit(fnode, f"porter_{base}32_sync")]
            self.site("PRT509", call, f"`{name}` votes over the whole 64-lane wavefront on HIP; rewritten to the "
                      "logical 32-lane vote restricted to the mask.", edits, Applicability.SAFE, header=True)

    def _syncwarp(self, call: Node, fnode: Node, args: list[Node]) -> None:
        edits = [self.edit(fnode, "porter_syncwarp")]
        if args and self.sym.is_full_mask32(self.t(args[0])):
            edits.append((self.c(args[0].start_byte), self.c(args[0].end_byte), ""))
        self.site("PRT516", call, "`__syncwarp` is missing from HIP headers before ROCm 6.x and a 32-bit mask "
                  "fails the 64-bit mask check; porter_syncwarp is a wavefront barrier on HIP.",
                  edits, Applicability.SAFE, header=True)

    def _default_masks(self) -> None:
        for node in self.caps.get("optparam", []):
            dv = node.child_by_field_name("default_value")
            ty = node.child_by_field_name("type")
            dn = node.child_by_field_name("declarator")
            if dv is None or ty is None or dn is None:
                continue
            if "mask" not in self.t(dn).lower() or not self.sym.is_full_mask32(self.t(dv)):
                continue
            if not self.is_device(node.start_byte):
                continue
            # the type may be split (`unsigned int`): replace from the type start to the declarator
            a = self.c(ty.start_byte)
            b = self.c(dn.start_byte)
            edits = [(a, b, "porter_lanemask_t "), self.edit(dv, "PORTER_FULL_MASK")]
            self.site("PRT501", node, "a warp-mask parameter defaulting to the 32-bit full mask: on HIP the mask "
                      "must be the 64-bit `PORTER_FULL_MASK`.", edits, Applicability.SAFE, header=True)

    def _calls_wrapper(self, text: str) -> bool:
        return any(re.search(rf"\b{re.escape(w)}\s*\(", text) for w in self.ballot_wrappers)

    def _ballot_vars(self, f: Func) -> set[str]:
        out: set[str] = set()
        for d in self.within("decl", f):
            for child in d.children:
                if child.type == "init_declarator":
                    dn = child.child_by_field_name("declarator")
                    v = child.child_by_field_name("value")
                    if dn is not None and v is not None and (re.search(
                        r"__ballot|__activemask|__match_any_sync|__match_all_sync", self.t(v)
                    ) or self._calls_wrapper(self.t(v))):
                        out.add(self.t(dn))
        return out

    def _declarations(self) -> None:
        for d in self.caps.get("decl", []):
            ty = d.child_by_field_name("type")
            if ty is None:
                continue
            tytext = self.t(ty)
            f = self.func_at(d.start_byte)
            txt = self.t(d)
            # H2: 32-bit storage of a ballot
            if re.fullmatch(r"(?:unsigned(?:\s+int)?|uint32_t|int|int32_t|unsigned\s+long|uint)", tytext.strip()):
                for child in d.children:
                    if child.type != "init_declarator":
                        continue
                    v = child.child_by_field_name("value")
                    cg = re.search(r"\b(\w+)\s*\.\s*ballot\s*\(", self.t(v)) if v is not None else None
                    if cg and f is not None and re.search(
                            rf"coalesced_group\s+{re.escape(cg.group(1))}\b|\b{re.escape(cg.group(1))}\s*=\s*"
                            r"(?:\w+::)*coalesced_threads\s*\(", self.t(f.node)):
                        self.site("PRT502", d, f"ballot of the coalesced group `{cg.group(1)}` stored in `{tytext}`: "
                                  "on HIP a coalesced group spans the 64-lane wavefront and its ballot is 64-bit, so "
                                  "lanes 32..63 are dropped (and a 32-bit popcount undercounts). Use a 64-bit mask "
                                  "(porter_lanemask_t) and porter_popc by hand; porter's logical rewrite does not "
                                  "cover cooperative groups.").work = True
                        continue
                    if v is None or not (re.search(r"\b(?:__ballot(?:_sync)?|__activemask|__match_any_sync)\s*\(",
                                                   self.t(v)) or self._calls_wrapper(self.t(v))):
                        continue
                    edits = [self.edit(ty, "porter_lanemask_t")] if self.strategy == PHYSICAL else []
                    self.site("PRT502", d, f"lane mask stored in `{tytext}`: HIP ballots are 64-bit on wave64 and "
                              "the upper 32 lanes are silently dropped. " +
                              ("porter's logical-warp ballot returns the caller's 32-bit half, so the type can stay."
                               if self.strategy == LOGICAL else "Widened to porter_lanemask_t."),
                              edits, Applicability.UNSAFE, header=True)
            # H7: __shared__ arrays sized by the warp
            if "__shared__" in txt and f is not None and f.raw_warp:
                for child in d.children:
                    if child.type == "array_declarator":
                        self._shared_array(child, f)

    def _shared_array(self, arr: Node, f: Func) -> None:
        dims: list[Node] = []
        n = arr
        while n is not None and n.type == "array_declarator":
            size = n.child_by_field_name("size")
            if size is not None:
                dims.append(size)
            n = n.child_by_field_name("declarator")
        if n is None:
            return
        name = self.t(n)
        # bank-conflict padding ([32][33], +1) and data tiles are traps
        if any(re.search(r"\+\s*1\b|\b(?:33|17|65)\b", self.t(s)) or self.sym.value(self.t(s)) in (33, 17, 65)
               for s in dims):
            return
        for size in dims:
            st = self.t(size)
            linked = any(self.sym.is_warp_name(i) for i in _IDENT.findall(st)) or re.search(
                r"/\s*32\b|\b32\s*\*|\*\s*32\b|^\s*32\s*$", st
            )
            if not linked:
                continue
            idx = self._indexed_by_lane(name, f)
            if idx is None and not any(self.sym.is_warp_name(i) for i in _IDENT.findall(st)):
                continue
            edits = []
            if self.strategy == PHYSICAL and st.strip() == "32" and idx == "lane":
                edits = [self.edit(size, "PORTER_WARP_SIZE_MAX")]
            what = {"lane": "indexed by a lane: needs one entry per lane (64 on wave64)",
                    "warp": "indexed by a warp id: holds blockDim/32 entries under the logical warp"}.get(
                idx or "", "sized by the warp constant")
            self.site("PRT507", size, f"shared array `{name}` sized `{st}` and {what}. Correct under porter's "
                      "logical 32-lane warp; with the physical strategy it must follow PORTER_WARP_SIZE.",
                      edits, Applicability.UNSAFE, header=True)
            return

    def _indexed_by_lane(self, name: str, f: Func) -> str | None:
        for sub in self.within("sub", f):
            arg = sub.child_by_field_name("argument")
            if arg is None or self.t(arg) != name:
                continue
            idx = sub.child_by_field_name("indices")
            it = self.t(idx) if idx is not None else ""
            if re.search(r"warp|wid\b|/\s*32|>>\s*5", it, re.I):
                return "warp"
            if self.tainted(it, f):
                return "lane"
        return None

    def _loops(self) -> None:
        for loop in self.caps.get("for", []):
            f = self.func_at(loop.start_byte)
            if f is None or not f.raw_warp:
                continue
            init = loop.child_by_field_name("initializer")
            cond = loop.child_by_field_name("condition")
            upd = loop.child_by_field_name("update")
            body = loop.child_by_field_name("body")
            if init is None or upd is None or body is None:
                continue
            bt = self.t(body)
            has_shfl = bool(SHFL_CALL.search(bt) or any(re.search(rf"\b{re.escape(m)}\s*\(", bt)
                                                        for m in self.macro_raw | set(self.aliases)))
            ut = re.sub(r"\s+", "", self.t(upd))
            value_node = None
            for child in init.named_children:
                if child.type == "init_declarator":
                    value_node = child.child_by_field_name("value")
            if init.type == "assignment_expression":
                value_node = init.child_by_field_name("right")
            if value_node is None:
                continue
            v = self.sym.value(self.t(value_node))
            halving = re.search(r">>=1$|/=2$|=\w+>>1$|=\w+/2$", ut)
            doubling = re.search(r"<<=1$|\*=2$|=\w+<<1$|=\w+\*2$", ut)
            ct = self.t(cond) if cond is not None else ""
            cv = None
            m = re.search(r"(<=?)\s*(.+)$", ct)
            if m:
                cv = self.sym.value(m.group(2))
                if cv is not None and m.group(1) == "<=":
                    cv += 1
            if halving and v == 16 and has_shfl:
                edits = []
                if self.strategy == PHYSICAL:
                    edits = [self.edit(value_node, "PORTER_WARP_SIZE / 2")]
                self.site("PRT504", value_node, "warp reduction loop starting at 16 covers 32 lanes: on wave64 with "
                          "the wavefront-wide default width it leaves each 32-lane half separate. Correct once the "
                          "shuffles carry porter's logical width 32." if self.strategy == LOGICAL else
                          "warp reduction loop starting at 16: starts at PORTER_WARP_SIZE / 2 under the physical "
                          "strategy.", edits, Applicability.UNSAFE, header=True)
            elif (not has_shfl and re.search(r"\+\+$|^\+\+|\+=1$", ut) and v == 0 and cv == 32
                  and re.search(r"\[[^\]]*\b(?:lane\w*|tid)\b[^\]]*\]", bt)):
                self.site("PRT504", cond, "loop over the 32 entries of a warp indexed with a lane id: correct under "
                          "porter's logical 32-lane warp, must follow PORTER_WARP_SIZE under the physical strategy.")
            elif (has_shfl and v == 0 and cv == 5 and re.search(r"\+\+$|^\+\+|\+=1$", ut)
                  and re.search(r"\b1u?\s*<<\s*\w+", bt)):
                self.site("PRT504", cond, "shuffle loop over offsets `1 << i` up to 16 (32 lanes); correct under "
                          "porter's logical 32-lane warp, must run to log2(PORTER_WARP_SIZE) under the physical "
                          "strategy.")
            elif doubling and v == 1 and cv == 32 and has_shfl:
                self.site("PRT504", cond, "scan/reduction loop bounded by 32 lanes; correct under porter's "
                          "logical 32-lane warp, must follow PORTER_WARP_SIZE under the physical strategy.")

    def _binaries(self) -> None:
        for b in self.caps.get("bin", []):
            op = b.child_by_field_name("operator")
            left = b.child_by_field_name("left")
            right = b.child_by_field_name("right")
            if op is None or left is None or right is None:
                continue
            o = self.t(op)
            if o not in ("%", "&", "/", ">>", "*"):
                continue
            f = self.func_at(b.start_byte)
            if f is None:
                continue
            rt = self.t(right).strip()
            if f.kind == "host":
                self._host_geometry(b, o, rt)
                continue
            if not f.raw_warp:
                continue
            rv = self.sym.value(rt)
            if rv is None and re.fullmatch(r"32(?:\.0*)?[fF]?|32\.0*", rt):
                rv = 32
            lt = self.t(left)
            warp_named = any(self.sym.is_warp_name(i) for i in _IDENT.findall(rt))
            if f.kind == "host":
                continue
            if o == "/" and "blockDim" in lt and (rv == 32 or warp_named):
                self.site("PRT506", b, f"warps per block `{self.t(b)}`: 32-lane warps; host launch geometry and "
                          "shared sizing must use the same warp (porter's logical 32 keeps them consistent).")
                continue
            if not self.tainted(lt, f) or "blockDim" in lt or re.search(r"\*\s*(?:33|17|65)\b", lt):
                continue
            holder = b.parent
            while holder is not None and holder.type not in ("init_declarator", "assignment_expression",
                                                             "expression_statement", "compound_statement"):
                holder = holder.parent
            if holder is not None and holder.type in ("init_declarator", "assignment_expression"):
                target = holder.child_by_field_name("declarator") or holder.child_by_field_name("left")
                if target is not None and re.search(r"bank", self.t(target), re.I):
                    continue
            hit = (o == "%" and rv == 32) or (o == "&" and rv == 31) or (o == "/" and rv == 32) or (
                o == ">>" and rv == 5) or (o in ("%", "/") and warp_named) or (o == "*" and (rv == 32 or warp_named))
            if not hit or not self._used_as_lane_or_warp(b, f):
                continue
            edits = []
            if self.strategy == PHYSICAL and not warp_named:
                repl = {"%": "% PORTER_WARP_SIZE", "/": "/ PORTER_WARP_SIZE", "&": "& (PORTER_WARP_SIZE - 1)",
                        ">>": "/ PORTER_WARP_SIZE", "*": "* PORTER_WARP_SIZE"}[o]
                edits = [(self.c(op.start_byte), self.c(right.end_byte), repl)]
            self.site("PRT505", b, f"lane/warp index arithmetic `{self.t(b)}` assumes 32-lane warps: with "
                      "wavefront-wide shuffles (HIP default width 64) the lane ids disagree with the shuffle "
                      "partners. " + ("Consistent with porter's logical 32-lane warp."
                                      if self.strategy == LOGICAL else "Rewritten over PORTER_WARP_SIZE."),
                      edits, Applicability.UNSAFE, header=True)

    _LANE_TARGET = re.compile(r"lane|warp|wid\b|^tid$|leader|^w$", re.I)
    _COMPARE = {"==", "!=", "<", ">", "<=", ">="}

    def _shared_names(self, f: Func) -> set[str]:
        names = self.__dict__.setdefault("_shared_cache", {})
        if f.start not in names:
            found = set(re.findall(r"__shared__[^;=\[]*?\b(\w+)\s*\[", self.t(f.node)))
            found |= set(re.findall(r"__shared__[^;=\[]*?\b(\w+)\s*\[", self.text)) if "__shared__" in self.text else set()
            names[f.start] = found
        return names[f.start]

    def _used_as_lane_or_warp(self, b: Node, f: Func) -> bool:
        """Data flow (spec decision rule): the value is a lane/warp id, not a data-layout offset."""
        node = b
        p = node.parent
        while p is not None and p.type in ("parenthesized_expression", "cast_expression"):
            node, p = p, p.parent
        if p is None:
            return False
        if p.type == "init_declarator":
            target = p.child_by_field_name("declarator")
            return target is not None and bool(self._LANE_TARGET.search(self.t(target)))
        if p.type == "assignment_expression" and p.child_by_field_name("right") == node:
            target = p.child_by_field_name("left")
            tt = self.t(target) if target is not None else ""
            base = re.match(r"\w+", tt)
            return bool(self._LANE_TARGET.search(tt.split("[")[0])) or (
                "[" in tt and base is not None and base.group(0) in self._shared_names(f))
        if p.type == "binary_expression":
            op = p.child_by_field_name("operator")
            if op is not None and self.t(op) in self._COMPARE:
                return True
            if op is not None and self.t(op) in ("+", "-", "*"):
                return self._used_as_lane_or_warp(p, f)
            return False
        if p.type == "subscript_argument_list":
            sub = p.parent
            arr = sub.child_by_field_name("argument") if sub is not None else None
            name = self.t(arr) if arr is not None else ""
            return name in self._shared_names(f) or bool(re.search(r"smem|shared|^s_|^sh_", name, re.I))
        if p.type == "argument_list":
            call = p.parent
            return call is not None and bool(RAW_WARP_CALL.search(self.t(call).split("(", 1)[0] + "("))
        if p.type == "conditional_expression":
            return p.child_by_field_name("condition") == node
        return False

    def _host_geometry(self, b: Node, o: str, rt: str) -> None:
        if o not in ("/", "%") or not self.file_raw_warp():
            return
        rv = self.sym.value(rt)
        warp_named = any(self.sym.is_warp_name(i) for i in _IDENT.findall(rt))
        if rv != 32 and not warp_named:
            return
        left = self.t(b.child_by_field_name("left"))
        f = self.func_at(b.start_byte)
        launches = f is not None and "<<<" in f.text
        if not (re.search(r"thread|block|THREAD|BLOCK|CTA|\+\s*31\b|\+\s*\(?\s*\w*WARP", left) or warp_named
                or launches):
            return
        if o == "%" and not re.search(r"thread|block|THREAD|BLOCK", left):
            return
        self.physical_blockers.append((b.start_byte, "host launch geometry in warps"))
        self.site("PRT506", b, f"host geometry `{self.t(b)}` counts 32-lane warps for kernels in this file: consistent "
                  "with porter's logical 32-lane warp; a physical-warp port must compute it from "
                  "porter::host_warp_size() and dispatch (PORTER_DISPATCH_WARP).")

    def _identifiers(self) -> None:
        const_ctx = ("array_declarator", "template_argument_list", "static_assert_declaration", "launch_bounds",
                     "case_statement", "enumerator", "bitfield_clause")
        for node in self.caps.get("wid", []):
            name = self.t(node)
            f = self.func_at(node.start_byte)
            if name.startswith("__AMDGCN_WAVEFRONT_SIZE"):
                self.site("PRT512", node, f"`{name}` is deprecated (and removed in recent LLVM: an `#if` on it "
                          "becomes silently false); in the host pass it is always 64. Use the arch test in "
                          "porter_warp.h (PORTER_WARP_SIZE) on the device and porter::host_warp_size() on the host.")
                continue
            if name == "C10_WARP_SIZE":
                if f is not None and f.kind == "host":
                    self.site("PRT510", node, "`C10_WARP_SIZE` in host code is the runtime query on ROCm builds of "
                              "torch (64 on CDNA); it must pick the same warp size the device code uses.")
                continue
            # warpSize: a declared local, parameter or global of that name is not the builtin
            if self._user_warpsize(node):
                continue
            p = node.parent
            in_const = None
            while p is not None and p.type not in ("compound_statement", "translation_unit", "function_definition"):
                if p.type in const_ctx:
                    in_const = p.type
                    break
                if p.type == "declaration" and re.match(r"\s*(?:static\s+)?constexpr\b", self.t(p)):
                    in_const = "constexpr"
                    break
                p = p.parent
            if f is not None and f.kind == "host" and in_const != "launch_bounds":
                self.site("PRT510", node, "`warpSize` in host code: not available on CUDA, not constexpr from "
                          "ROCm 7, and 64 in the HIP host pass even for wave32 devices. Query "
                          "porter::host_warp_size() (or use PORTER_LOGICAL_WARP for logical-warp geometry).")
                continue
            physical = self.strategy == PHYSICAL
            if in_const:
                repl = "PORTER_WARP_SIZE_MAX" if physical and in_const == "array_declarator" else (
                    "PORTER_WARP_SIZE" if physical else "PORTER_LOGICAL_WARP")
                self.site("PRT511", node, f"`warpSize` in a constant expression ({in_const}): not a constant on "
                          f"CUDA and not constexpr from ROCm 7.0. Replaced by `{repl}`.",
                          [self.edit(node, repl)], Applicability.UNSAFE if physical else Applicability.SAFE,
                          header=True)
            elif not physical and f is not None and f.kind in ("device", "hd"):
                self.site("PRT521", node, "device `warpSize` is 64 on CDNA: under porter's logical 32-lane warp it "
                          "becomes `PORTER_LOGICAL_WARP` (32, as on every NVIDIA GPU).",
                          [self.edit(node, "PORTER_LOGICAL_WARP")], Applicability.SAFE, header=True)
        for node in self.caps.get("wfield", []):
            f = self.func_at(node.start_byte)
            if f is not None and f.kind == "host" and self.file_raw_warp():
                self.physical_blockers.append((node.start_byte, "host reads the device warp size"))
                self.site("PRT510", node.parent or node, "host code reads the device's warp size (64 on CDNA) in a "
                          "file whose kernels use 32-lane warps: launch geometry and shared-memory sizes computed "
                          "from it disagree with the device code. Use PORTER_LOGICAL_WARP for geometry of "
                          "logical-warp kernels.")

    _DECL_PARENTS = ("init_declarator", "parameter_declaration", "optional_parameter_declaration", "declaration",
                     "pointer_declarator", "reference_declarator", "array_declarator", "field_declaration")

    def _user_scopes(self) -> list[tuple[int, int, int]]:
        """(declaration byte, scope start, scope end) of every user declaration named warpSize."""
        got = self.__dict__.get("_ws_scopes")
        if got is not None:
            return got
        out: list[tuple[int, int, int]] = []
        for node in self.caps.get("wid", []):
            if self.t(node) != "warpSize" or node.parent is None or node.parent.type not in self._DECL_PARENTS:
                continue
            p = node.parent
            if p.type == "init_declarator" and p.child_by_field_name("declarator") != node:
                continue
            if p.type == "array_declarator" and p.child_by_field_name("declarator") != node:
                continue
            param = False
            while p is not None and p.type not in ("compound_statement", "for_statement", "translation_unit",
                                                   "parameter_list", "field_declaration_list"):
                p = p.parent
            if p is not None and p.type == "parameter_list":
                param = True
                while p is not None and p.type not in ("function_definition", "lambda_expression",
                                                       "translation_unit"):
                    p = p.parent
            if p is None:
                continue
            out.append((node.start_byte if not param else p.start_byte, p.start_byte, p.end_byte))
        self.__dict__["_ws_scopes"] = out
        return out

    def _user_warpsize(self, node: Node) -> bool:
        b = node.start_byte
        return any(d <= b and a <= b < e for d, a, e in self._user_scopes())

    def _templates(self) -> None:
        for node in self.caps.get("ttype", []):
            name = self.t(node.child_by_field_name("name"))
            if name in ("thread_block_tile", "tiled_partition"):
                args = node.child_by_field_name("arguments")
                at = self.t(args)[1:-1].strip() if args is not None else ""
                if self.sym.value(at) == 32 or self.sym.is_warp_name(at):
                    self.site("PRT513", node, f"`{name}<{at}>`: a 32-lane tile is a logical warp on HIP wave64 (two "
                              "tiles per wavefront); keep tile-based indexing (meta_group_rank) consistent with it.")
                continue
            if name not in ("WarpReduce", "WarpScan", "WarpExchange", "WarpLoad", "WarpStore"):
                continue
            args = node.child_by_field_name("arguments")
            named = [c for c in args.named_children if c.type != "comment"]
            if len(named) == 1:
                close = args.children[-1]
                pos = self.c(close.start_byte)
                width = "PORTER_WARP_SIZE" if self.strategy == PHYSICAL else "32"
                self.site("PRT513", node, f"`{name}` without an explicit logical width: HIPify maps cub to hipcub, "
                          "whose default width is the wavefront (64 on CDNA). The width is made explicit.",
                          [(pos, pos, f", {width}")],
                          Applicability.UNSAFE if self.strategy == PHYSICAL else Applicability.SAFE,
                          header=self.strategy == PHYSICAL)
        for node in self.caps.get("tfunc", []):
            name = self.t(node.child_by_field_name("name"))
            if name not in ("tiled_partition", "thread_block_tile"):
                continue
            args = node.child_by_field_name("arguments")
            v = self.sym.value(self.t(args)[1:-1]) if args is not None else None
            if v == 32:
                self.site("PRT513", node, f"`{name}<32>`: a 32-lane tile is a logical warp on HIP wave64 (two tiles "
                          "per wavefront); keep indexing consistent with it (meta_group_rank counts 32-lane tiles).")

    def _asm(self) -> None:
        for node in self.caps.get("asm", []):
            code = node.child_by_field_name("assembly_code")
            txt = self.t(code) if code is not None else self.t(node)
            if PTX_MMA.search(txt):
                continue  # reported by the MMA guard
            m = PTX_WARP.search(txt)
            if m:
                self.site("PRT518", node, f"inline PTX warp primitive (`{m.group(0)}`): HIPify cannot translate PTX; "
                          "replace with porter_lane_id()/porter_lanemask_lt()/porter_shfl* by hand.")

    def _ifs(self) -> None:
        for node in self.caps.get("if", []):
            f = self.func_at(node.start_byte)
            if f is None or not f.collective or f.kind == "host":
                continue
            cond = node.child_by_field_name("condition")
            then = node.child_by_field_name("consequence")
            if cond is None or then is None:
                continue
            ct = self.t(cond)
            if not self.tainted(ct, f):
                continue
            if re.search(r"\bthreadIdx\.[yz]\b", ct) and not self.tainted(
                    re.sub(r"\bthreadIdx\.[yz]\b", "0", ct), f):
                continue  # only the y/z thread index: whole rows of threadIdx.x, i.e. whole warps
            # whole-warp conditions keep every lane of a logical warp together
            warp_const = r"(?:32|\w*WARP\w*|warpSize|\w*[Ww]arp[Ss]ize\w*)"
            if re.fullmatch(rf"\(\s*[\w.]+\s*<\s*{warp_const}\s*\)", ct) or re.search(
                rf"\b(?:warp_?id|wid|warpId|warp)\s*==\s*0\b|/\s*{warp_const}\s*\)?\s*==\s*0\b", ct
            ):
                continue
            tt = self.t(then)
            called = set(re.findall(r"([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(", tt))
            if self._raw_call(tt) or PORTER_COLLECTIVE.search(tt) or called & (
                self.collective_names | self.macro_raw
            ):
                self.site("PRT517", node, f"warp collective under a lane-dependent branch `if {ct}`: lanes outside "
                          "the branch do not take part; on HIP the *_sync mask check fails and shuffles read "
                          "inactive lanes. Let every lane of the warp execute the collective.")

    def _launch_bounds(self) -> None:
        for node in self.caps.get("lb", []):
            txt = self.t(node)
            if "warpSize" in txt:
                continue  # PRT511
            ids = [i for i in _IDENT.findall(txt) if self.sym.is_warp_name(i)]
            if ids:
                self.site("PRT519", node, f"`{txt}` scales with the warp constant `{ids[0]}`: if it is ever made "
                          "arch-dependent, launch bounds must use PORTER_WARP_SIZE_MAX (host and device agree).")

    _DIM3_32 = re.compile(r"\bdim3\s+(\w+)\s*(?:=\s*(?:dim3\s*)?)?[({]\s*(32u?|\w*WARP\w*)\s*[,)}]")

    def _host_dim3(self) -> None:
        """H6 on the host: `dim3 threads(32, k)` / `dim3 t = {32u, k, 1}` for warp-collective kernels."""
        if not self.file_raw_warp():
            return
        for f in self.funcs:
            if f.kind != "host":
                continue
            body = f.node.child_by_field_name("body")
            if body is None:
                continue
            for m in self._DIM3_32.finditer(f.text):
                if m.group(2) not in ("32", "32u") and self.sym.warp_const(m.group(2)) != 32:
                    continue
                a = self.c(body.start_byte) + m.start()
                self.physical_blockers.append((body.start_byte + m.start(), "host block shape in warps"))
                self.site("PRT506", (a, a + len(m.group(0))), f"host block shape `{m.group(0).rstrip(',)}')}...` puts "
                          "one 32-lane warp on threadIdx.x: consistent with porter's logical warp; a physical-warp "
                          "port must size it from porter::host_warp_size().")

    def _host_warp_vars(self) -> None:
        """H6 on the host: `warp_size = (n < 32) ? n : 32` picks a 32-lane warp for launch geometry."""
        if not self.file_raw_warp():
            return
        pat = re.compile(r"\b(?:int\s+|auto\s+|const\s+int\s+)?([A-Za-z_]*[Ww]arp_?[Ss]ize\w*)\s*=(?!=)([^;{}]*)")
        for f in self.funcs:
            if f.kind != "host":
                continue
            body = f.node.child_by_field_name("body")
            if body is None:
                continue
            for m in pat.finditer(f.text):
                if not re.search(r"(?<![\w.])32\b", m.group(2)):
                    continue
                a = self.c(body.start_byte) + m.start(1)
                self.physical_blockers.append((body.start_byte + m.start(1), "host picks a 32-lane warp"))
                self.site("PRT506", (a, a + len(m.group(1))), f"host launch geometry `{m.group(0).strip()[:60]}` "
                          "picks a 32-lane warp: consistent with porter's logical warp; a physical-warp port "
                          "must use porter::host_warp_size() and the matching template instantiation.")

    _BARRIER_CALL = re.compile(r"(?:^|[;{}\n])\s*(__syncwarp|__syncthreads|porter_syncwarp)\s*\([^;()]*\)\s*;")
    _STEP = re.compile(r"\[\s*(\w+)\s*\+\s*(\w+)\s*\]")

    def _barrier_separated(self, f: Func) -> bool:
        """Every step of ``f``'s unrolled tree is its own top-level statement, separated from the
        next step by an explicit ``__syncwarp``/``__syncthreads`` statement.

        Such a tree does not rely on implicit warp lockstep, and its step count is fixed by the
        data it reduces (the caller picks the threads), so it is the same on any wavefront.
        """
        body = f.node.child_by_field_name("body")
        if body is None:
            return False
        stmts = [c for c in body.named_children if c.type != "comment"]
        steps = []
        for i, st in enumerate(stmts):
            text = self.t(st)
            offs = [m.group(2) for m in self._STEP.finditer(text) if self.tainted(m.group(1), f)]
            if any(self.sym.value(o) is not None for o in offs):
                steps.append(i)
            elif offs or (self._STEP.search(text) and st.type not in ("expression_statement", "if_statement",
                                                                        "declaration")):
                return False  # a computed offset or a step inside a loop/block: not a plain unrolled tree
        if len(steps) < 2:
            return False
        original = getattr(self, "original", self.text)
        for a, b in zip(steps, steps[1:], strict=False):
            lo, hi = self.c(stmts[a].end_byte), self.c(stmts[b].start_byte)
            between = _uncomment(original[lo:hi])
            ok = False
            for m in self._BARRIER_CALL.finditer(between):
                line = original.count("\n", 0, lo + m.start(1))
                # a barrier CUDA compiles; a human HIP branch may leave it out on purpose (a
                # wavefront runs in lockstep), which is the port's choice, not a 32-lane assumption
                if self.scan is None or line >= len(self.scan.status) or self.scan.status[line][CUDA] != 0:
                    ok = True
                    break
            if not ok:
                return False
        return True

    def _volatile_trees(self) -> None:
        for f in self.funcs:
            if f.kind == "host" or not (f.raw_warp or re.search(r"\bvolatile\b", self.t(f.node))):
                continue
            if self._barrier_separated(f):
                continue  # explicitly synchronised between steps: consistent on any wavefront
            for sub in self.within("sub", f):
                idx = sub.child_by_field_name("indices")
                it = self.t(idx) if idx is not None else ""
                m = re.fullmatch(r"\[\s*(\w+)\s*\+\s*(\w+)\s*\]", it)
                if not m or not self.tainted(m.group(1), f):
                    continue
                off = self.sym.value(m.group(2))
                if off not in (16, 32) or (off == 16 and not re.search(r"\bvolatile\b", self.t(f.node))):
                    continue
                stmt = sub
                while stmt.parent is not None and stmt.type not in ("expression_statement", "if_statement",
                                                                     "function_definition"):
                    stmt = stmt.parent
                if stmt.type == "function_definition" or stmt.parent is None:
                    stmt = sub
                self.site("PRT514", stmt, f"fixed 32-lane step `{self.t(sub)}` before a warp-level reduction: the "
                          "tree covers 32 lanes, not a 64-lane wavefront (and a `volatile` warp-synchronous tree "
                          "relies on implicit lockstep, undefined on Volta+). Correct under porter's logical "
                          "32-lane warp when the rest of the reduction uses porter_shfl*; review it.")
                break

    def _macro_bodies(self) -> None:
        """Warp intrinsics inside #define bodies (opaque to tree-sitter): regex over the body."""
        bodies = []
        for node in self.caps.get("def", []):
            v = node.child_by_field_name("value")
            if v is not None:
                bodies.append(v)
        for node in self.caps.get("fdef", []):
            v = node.child_by_field_name("value")
            if v is not None:
                bodies.append(v)
        call = re.compile(r"\b(__shfl(?:_up|_down|_xor)?_sync|__ballot_sync|__any_sync|__all_sync|"
                          r"__shfl(?:_up|_down|_xor)?|__syncwarp|__activemask)\s*\(")
        for v in bodies:
            owner = v.parent.child_by_field_name("name") if v.parent is not None else None
            if owner is not None and self._INTRINSIC_NAMES.match(self.t(owner)):
                continue  # the repository's own shim of a warp intrinsic (reported once, see PRT524)
            body = self.t(v)
            base = self.c(v.start_byte)
            for m in call.finditer(body):
                name = m.group(1)
                if name in self.shims:
                    continue
                args = _split_args(body, m.end())
                if args is None:
                    continue
                a_start = base + m.start()
                a_end = base + m.end()
                first = args[0] if args else None
                mask_full = bool(first) and self.sym.is_full_mask32(first[0])
                if name in SHUFFLES_SYNC:
                    if mask_full and len(args) >= 3:
                        edits = [(base + m.start(1), base + m.end(1), f"porter_{SHUFFLES_SYNC[name]}"),
                                 (base + first[1], base + args[1][1], "")]
                        self.site("PRT501", (a_start, a_end), f"`{name}` with a 32-bit full mask in a macro body; "
                                  "rewritten to the maskless porter helper (logical width 32).", edits,
                                  Applicability.SAFE, header=True)
                    elif len(args) >= 3:
                        edits = [(base + m.start(1), base + m.end(1), f"porter_{SHUFFLES_SYNC[name]}_sync")]
                        self.site("PRT508", (a_start, a_end), f"`{name}` in a macro body without porter's width.",
                                  edits, Applicability.SAFE, header=True)
                elif name in SHUFFLES_LEGACY:
                    if len(args) >= 3 and not mask_full:
                        continue  # explicit width (a shim that forwards the caller's width)
                    if mask_full and len(args) >= 3:
                        edits = [(base + m.start(1), base + m.end(1), f"porter_{SHUFFLES_LEGACY[name]}"),
                                 (base + first[1], base + args[1][1], "")]
                        self.site("PRT515", (a_start, a_end), f"legacy `{name}` called with a mask in a macro body "
                                  "(arguments in the wrong positions); porter moves them into place.", edits,
                                  Applicability.UNSAFE, header=True)
                    elif len(args) >= 2:
                        self.site("PRT508", (a_start, a_end), f"legacy `{name}` in a macro body without an explicit "
                                  "width.", [(base + m.start(1), base + m.end(1), f"porter_{SHUFFLES_LEGACY[name]}")],
                                  Applicability.SAFE, header=True)
                elif name in VOTES_SYNC and len(args) == 2:
                    if mask_full:
                        edits = [(base + m.start(1), base + m.end(1), f"porter_{VOTES_SYNC[name]}32"),
                                 (base + first[1], base + args[1][1], "")]
                        self.site("PRT501", (a_start, a_end), f"`{name}` with a 32-bit full mask in a macro body.",
                                  edits, Applicability.SAFE, header=True)
                elif name == "__syncwarp":
                    self.site("PRT516", (a_start, a_end), "`__syncwarp` in a macro body.",
                              [(base + m.start(1), base + m.end(1), "porter_syncwarp")]
                              + ([(base + first[1], base + first[2], "")] if mask_full else []),
                              Applicability.SAFE, header=True)
                elif name == "__activemask":
                    self.site("PRT509", (a_start, a_end), "`__activemask()` in a macro body.",
                              [(base + m.start(1), base + m.end(1), "porter_activemask32")], Applicability.SAFE,
                              header=True)
            declared = re.search(r"(?:\b(?:int|auto|unsigned|size_t|long|short|u?int\d+_t)\s+(?:const\s+)?&?|,\s*)"
                                 r"warpSize\s*(?:=|;|,|\)|\{)", body)
            params = set()
            fparams = v.parent.child_by_field_name("parameters") if v.parent is not None else None
            if fparams is not None:
                params = set(_IDENT.findall(self.t(fparams)))
            for m in re.finditer(r"\bwarpSize\b", body):
                if "warpSize" in params or (declared and m.start() >= declared.start()) or re.search(
                        r"(?:\.|->)\s*$", body[:m.start()]):
                    continue  # a name the macro declares (or a parameter or field): not the builtin
                self.site("PRT511", (base + m.start(), base + m.end()), "macro defined as `warpSize`: it is not a "
                          "constant on CUDA nor constexpr from ROCm 7.0, and 64 in the HIP host pass. Replaced by "
                          "PORTER_LOGICAL_WARP." if self.strategy == LOGICAL else "macro defined as `warpSize`.",
                          [(base + m.start(), base + m.end(), "PORTER_LOGICAL_WARP")] if self.strategy == LOGICAL
                          else [], Applicability.SAFE, header=True)
            for m in re.finditer(r"\b__AMDGCN_WAVEFRONT_SIZE(?:__)?\b", body):
                self.site("PRT512", (base + m.start(), base + m.end()), "deprecated wavefront macro in a macro body "
                          "(64 in the host pass, removed in recent LLVM).")

    # -- hazards no logical strategy removes, and per-target constants ------------------------------
    _PIN_CODES = ("PRT501", "PRT508", "PRT509", "PRT511", "PRT513", "PRT521")

    def _arch_guard(self) -> None:
        """Code that uses a warp constant that is 64 under HIP gets no logical-width pin.

        ``#ifdef USE_ROCM / #define WARP_SIZE 64``, ``constexpr int kWarpSize = 64`` under a HIP branch
        and device ``C10_WARP_SIZE`` (64 on gfx9 under ROCm torch) make a loop bound or lane
        arithmetic wavefront-wide on AMD: width-32 helpers would then reduce only half of it.
        """
        self._arch_functions()
        spans: list[tuple[int, int, str]] = []
        for f in self.funcs:
            if f.kind == "host":
                continue
            name = self.arch_name(f.text)
            if name:
                f.arch = name
        changed = True
        while changed:  # device functions called from such code share its warp width
            changed = False
            called = {}
            for f in self.funcs:
                if f.arch:
                    for c in re.findall(r"([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(", f.text):
                        called.setdefault(c, f.arch)
            for f in self.funcs:
                if f.kind != "host" and not f.arch and f.name in called:
                    f.arch = called[f.name]
                    changed = True
        for f in self.funcs:
            if f.arch:
                spans.append((self.c(f.start), self.c(f.end), f.arch))
        for node in self.caps.get("def", []) + self.caps.get("fdef", []):
            v = node.child_by_field_name("value")
            if v is not None:
                name = self.arch_name(self.t(v))
                if name:
                    spans.append((self.c(v.start_byte), self.c(v.end_byte), name))
        shim_spans = []
        if self.shims:
            pat = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(self.shims))) + r")\s*\(")
            shim_spans = [(self.c(f.start), self.c(f.end)) for f in self.funcs if f.kind != "host" and pat.search(f.text)]
        if shim_spans:  # device warpSize there is the repository's physical port: consistent, not a hazard
            self.sites = [s for s in self.sites
                          if not (s.code == "PRT521" and any(a <= s.start < b for a, b in shim_spans))]
        for s in self.sites:
            if self.strategy == LOGICAL and s.code in self._PIN_CODES and s.edits and any(
                    a <= s.start < b for a, b in shim_spans):
                s.message += (" Not patched: the collectives of this function go through the repository's own HIP "
                              "shim of the *_sync intrinsics (wavefront-wide there); a 32-lane pin would disagree "
                              "with them.")
                s.edits, s.fix, s.needs_header = [], Applicability.NONE, False
        if not spans:
            return
        for s in self.sites:
            for a, b, name in spans:
                if not a <= s.start < b:
                    continue
                s.info = False
                if self.strategy == PHYSICAL:
                    break
                if s.code not in self._PIN_CODES:
                    s.message += (f" Here the kernel also uses `{name}` ({self.arch_value(name)} under HIP): "
                                  "host and device must agree on that width; porter leaves it unpatched.")
                    break
                hv = self.arch_value(name)
                s.message += (f" Not patched: this code also uses `{name}`, which is {hv} under HIP, so its "
                              "loops and lane arithmetic span the whole wavefront there; a 32-lane pin would "
                              "change its results on AMD. Port it with the physical strategy "
                              "(PORTER_WARP_SIZE) or by hand.")
                s.edits, s.fix, s.needs_header = [], Applicability.NONE, False
                break

    def _arch_functions(self) -> None:
        """Warp-size functions that return 64 on a HIP path (`#if ... __GFX9__ ... return 64`)."""
        if self.scan is None:
            return
        original = getattr(self, "original", self.text)
        starts = [0]
        for line in self.scan.lines:
            starts.append(starts[-1] + len(line))
        for f in self.funcs:
            if not re.search(r"warp|wave", f.name, re.I):
                continue
            a, b = self.c(f.start), self.c(f.end)
            first = bisect.bisect_right(starts, a) - 1
            last = bisect.bisect_right(starts, b) - 1
            for i in range(max(first, 0), min(last + 1, len(self.scan.lines))):
                if self.scan.status[i][HIP] != 0 and re.search(
                        r"\breturn\s+\(?\s*(?:64|warpSize|__AMDGCN_WAVEFRONT_SIZE\w*)\b", original[starts[i]:starts[i + 1]]):
                    self.hsym.defines.setdefault(f.name, "64")
                    self.sym.defines.setdefault(f.name, "32")
                    self.__dict__.get("_arch_cache", {}).pop(f.name, None)
                    break

    _WS_NAME = re.compile(r"^(?:warpSize|warp_?size|WARP_?SIZE|kWarpSize|warpsize|ws)$")

    def _host_checks(self) -> None:
        """Host checks that pin the device warp size (`prop.warpSize == 32`, `assert(ws == 32)`)."""
        for b in self.caps.get("bin", []):
            op = b.child_by_field_name("operator")
            if op is None or self.t(op) not in ("==", "!="):
                continue
            f = self.func_at(b.start_byte)
            if f is None or f.kind != "host":
                continue
            sides = [b.child_by_field_name("left"), b.child_by_field_name("right")]
            if any(x is None for x in sides):
                continue
            texts = [self.t(x).strip() for x in sides]
            for x, y in ((0, 1), (1, 0)):
                tail = re.split(r"\.|->", texts[x])[-1]
                if not self._WS_NAME.match(tail) or self.sym.value(texts[y]) not in (32, 64):
                    continue
                if "." not in texts[x] and "->" not in texts[x] and tail not in ("warpSize",) and not re.search(
                        rf"\b{re.escape(tail)}\s*=\s*[^;]*(?:warpSize|WarpSize|warp_size\s*\()", f.text):
                    continue
                self.site("PRT510", b, f"host check `{self.t(b)}` pins the device warp size to "
                          f"{self.sym.value(texts[y])}: AMD wave64 devices report 64 and wave32 ones 32, so the "
                          "check (or the code path it guards) changes on AMD. No logical-warp rewrite removes "
                          "it: accept both sizes, or dispatch on porter::host_warp_size().")
                break

    _INTRINSIC_NAMES = re.compile(
        r"^(?:__shfl(?:_up|_down|_xor)?(?:_sync)?|__ballot(?:_sync)?|__any(?:_sync)?|__all(?:_sync)?|"
        r"__activemask|__syncwarp|__lane_id|__lanemask_\w+)$")

    def _intrinsic_overloads(self) -> None:
        """User functions named like warp intrinsics.

        Their bodies forward to the real intrinsic for the caller (the width and mask are the
        caller's), so nothing inside them is reported on its own. One that takes a 32-bit mask
        collides with HIP's declarations after HIPify (64-bit masks): reported, never patched.
        """
        overloads = [f for f in self.funcs if self._INTRINSIC_NAMES.match(f.name)]
        if not overloads:
            return
        spans = [(self.c(f.start), self.c(f.end)) for f in overloads]
        self.sites = [s for s in self.sites if not any(a <= s.start < b for a, b in spans)]
        for f in overloads:
            decl = f.node.child_by_field_name("declarator")
            while decl is not None and decl.type != "function_declarator":
                decl = decl.child_by_field_name("declarator")
            params = decl.child_by_field_name("parameters") if decl is not None else None
            first = next((c for c in params.named_children if c.type != "comment"), None) if params else None
            if first is None:
                continue
            ft = self.t(first)
            pname = first.child_by_field_name("declarator")
            pn = re.sub(r"[&*\s]", "", self.t(pname)) if pname is not None else ""
            if not pn or not re.search(rf"\b__\w+_sync\s*\(\s*{re.escape(pn)}\s*,", f.text):
                continue  # the 32-bit mask never reaches HIP's 64-bit-mask builtins
            if not re.search(r"mask", ft, re.I) or not re.match(
                    r"\s*(?:const\s+)?(?:unsigned(?:\s+int)?|uint32_t|int|unsigned\s+int)\b(?!\s+long)", ft):
                continue
            self.site("PRT524", decl, f"user function named like the warp intrinsic `{f.name}` with a 32-bit mask "
                      f"`{ft.strip()}`: after HIPify it overloads HIP's own `{f.name}`, whose mask is 64-bit "
                      "(and whose default width is the wavefront); calls then resolve to either, or are "
                      "ambiguous. Rename it (or give it a porter_lanemask_t mask) by hand; porter does not "
                      "patch it.")

    def _cub_widths(self) -> None:
        """cub/hipcub code whose width is physical on AMD."""
        for m in re.finditer(r"\bCUB_WARP_THREADS\s*\(\s*\w*\s*\)|\bCUB_PTX_WARP_THREADS\b", self.text):
            ctx = self.text[max(0, m.start() - 40): m.end() + 40]
            if not re.search(r"[=!<>]=|[<>]|%|/", ctx):
                continue
            self.site("PRT525", (m.start(), m.end()), f"`{m.group(0)}` is the hardware warp of the target: "
                      "64 on CDNA under hipcub. Code that compares or divides by it assumes 32 lanes on CUDA "
                      "only; no logical-warp rewrite changes a library constant. Review the branch.")
        for node in self.caps.get("ttype", []):
            name = self.t(node.child_by_field_name("name"))
            if name not in ("BlockReduce", "BlockScan", "BlockLoad", "BlockStore", "BlockRadixSort",
                            "BlockExchange", "BlockHistogram", "BlockDiscontinuity"):
                continue
            args = node.child_by_field_name("arguments")
            named = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            if len(named) < 2:
                continue
            dims = [self.sym.value(self.t(x)) for x in named[1:2]]
            if dims and dims[0] is not None and dims[0] % 64 != 0:
                self.site("PRT525", node, f"`{name}` with a block of {dims[0]} threads: hipcub's block "
                          "primitives need block sizes that are a multiple of the 64-lane wavefront on CDNA "
                          "(warp-level storage is per physical warp). Use a multiple of 64.")

    def _mma_guard(self) -> None:
        """MMA fragment code: report once per function and drop porter's edits inside it."""
        for f in self.funcs:
            if not f.mma:
                continue
            a, b = self.c(f.start), self.c(f.end)
            first = f.node.child_by_field_name("declarator") or f.node
            self.site("PRT522", first, f"`{f.name}` uses MMA/WMMA fragments whose lane maps are NVIDIA-specific: it "
                      "needs a rocWMMA/Composable Kernel rewrite; porter does not patch warp sizes inside it.")
            self.sites = [s for s in self.sites
                          if not (a <= s.start < b and s.code in ("PRT504", "PRT505", "PRT506", "PRT507"))]
            for s in self.sites:
                if a <= s.start < b and s.code != "PRT522" and s.edits:
                    s.edits = []
                    s.fix = Applicability.NONE
                    s.needs_header = False
                    s.message += " (not patched: MMA fragment code in this function)"


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"", re.S)


def _uncomment(text: str) -> str:
    """``text`` with comments blanked (same length; string literals kept)."""
    return _COMMENT.sub(lambda m: m.group(0) if m.group(0).startswith('"') else re.sub(r"[^\n]", " ", m.group(0)),
                        text)


def _split_args(text: str, pos: int) -> list[tuple[str, int, int]] | None:
    """Split the call arguments that start at ``pos`` (just after '('): (text, start, end)."""
    depth = 0
    args = []
    start = pos
    i = pos
    while i < len(text):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                seg = text[start:i]
                if seg.strip():
                    lead = len(seg) - len(seg.lstrip())
                    args.append((seg.strip(), start + lead, start + len(seg.rstrip())))
                return args
            depth -= 1
        elif ch == "," and depth == 0:
            seg = text[start:i]
            lead = len(seg) - len(seg.lstrip())
            args.append((seg.strip(), start + lead, start + len(seg.rstrip())))
            start = i + 1
        i += 1
    return None


def analyse(text: str, strategy: str = LOGICAL, cache: dict | None = None,
            shims: frozenset[str] = frozenset(), known: Mapping[str, str] | None = None,
            includes_warp: bool = False) -> Analyser:
    """Analyse ``text``; ``shims`` are warp intrinsics the repository redefines for HIP itself,
    ``known`` the macros its headers define on one platform only (see ``preproc.scan``)."""
    masked, sc = mask(text, known=known)
    a = Analyser(masked, strategy, cache if masked is text else None, sc, shims)
    a.includes_warp = includes_warp
    a.original = text
    a.run()
    return a
