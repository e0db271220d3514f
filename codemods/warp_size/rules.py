"""The companion rules: declarations, loops, lane arithmetic, identifiers, templates, asm, macros."""

from __future__ import annotations

import re

from tree_sitter import Node

from porter.findings import Applicability

from .common import (
    _IDENT,
    CALLED,
    LOGICAL,
    PHYSICAL,
    PORTER_COLLECTIVE,
    PTX_MMA,
    PTX_WARP,
    RAW_WARP_CALL,
    SHFL_CALL,
    SHUFFLES_LEGACY,
    SHUFFLES_SYNC,
    VOTES_SYNC,
    Func,
    _split_args,
    _uncomment,
)
from .preproc import CUDA

_TILE_OK = (" Consistent here: the function indexes its tiles with 32-lane arithmetic only (no meta_group_rank, "
            "no warpSize, no constant that is 64 under HIP), which is porter's logical warp.")

class Rules:
    """One part of :class:`.engine.Analyser` (see the module docstring)."""

    # -- rules: what a warp context makes a hazard -----------------------------------------------
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
                    info = self._tile_consistent(node, at)
                    self.site("PRT513", node, f"`{name}<{at}>`: a 32-lane tile is a logical warp on HIP wave64 (two "
                              "tiles per wavefront); keep tile-based indexing (meta_group_rank) consistent with it."
                              + (_TILE_OK if info else ""), info=info)
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
                info = self._tile_consistent(node, self.t(args)[1:-1].strip())
                self.site("PRT513", node, f"`{name}<32>`: a 32-lane tile is a logical warp on HIP wave64 (two tiles "
                          "per wavefront); keep indexing consistent with it (meta_group_rank counts 32-lane tiles)."
                          + (_TILE_OK if info else ""), info=info)

    def _tile_consistent(self, node: Node, size: str) -> bool:
        """The function that makes a 32-lane tile indexes nothing by another warp width: no
        `meta_group_rank/size` (tiles of the group, reported on their own), no `warpSize` and no
        constant that is 64 under HIP. Its tiles are then porter's logical warp: a note, not work."""
        f = self.func_at(node.start_byte)
        if f is None or f.kind == "host" or self.header_value(size) != 32:
            return False  # (a size porter cannot read in the HIP view stays a warning)
        return not re.search(r"\bmeta_group_(?:rank|size)\b|\bwarpSize\b", f.text) and not self.arch_name(f.text)

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
            called = set(CALLED.findall(tt))
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
