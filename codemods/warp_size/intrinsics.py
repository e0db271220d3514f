"""The rules on warp intrinsic calls: shuffles, votes, ballots, ``__syncwarp`` and default masks."""

from __future__ import annotations

import re

from tree_sitter import Node

from porter.findings import Applicability

from .common import (
    _IDENT,
    BIT_CONSUMERS,
    LOGICAL,
    NV_ONLY,
    PHYSICAL,
    SHUFFLES_LEGACY,
    SHUFFLES_SYNC,
    VOTES_LEGACY,
    VOTES_SYNC,
    Func,
)


class Intrinsics:
    """One part of :class:`.engine.Analyser` (see the module docstring)."""

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
            if not self._mask_param_used(node, dn):
                continue  # nothing HIP compiles reads it (`#if CUDA_VERSION >= 9000 ... _sync(mask, ...)`)
            # the type may be split (`unsigned int`): replace from the type start to the declarator
            a = self.c(ty.start_byte)
            b = self.c(dn.start_byte)
            edits = [(a, b, "porter_lanemask_t "), self.edit(dv, "PORTER_FULL_MASK")]
            self.site("PRT501", node, "a warp-mask parameter defaulting to the 32-bit full mask: on HIP the mask "
                      "must be the 64-bit `PORTER_FULL_MASK`.", edits, Applicability.SAFE, header=True)

    def _mask_param_used(self, node: Node, dn: Node) -> bool:
        """Whether the body of the function that declares mask parameter ``node`` reads it.

        The analysed text has the CUDA-only branches blanked, so a mask that only a `*_sync` call under
        `#if CUDA_VERSION >= 9000` (or `#ifndef USE_ROCM`) reads is unused on HIP: its 32-bit default
        never reaches a HIP builtin. A prototype without a body counts as used.
        """
        name = re.sub(r"[&*\s]", "", self.t(dn))
        p = node.parent
        while p is not None and p.type not in ("function_definition", "lambda_expression", "translation_unit"):
            p = p.parent
        body = p.child_by_field_name("body") if p is not None and p.type != "translation_unit" else None
        if body is None or not name:
            return True
        return re.search(rf"\b{re.escape(name)}\b", self.t(body)) is not None

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
