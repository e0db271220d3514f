"""Hazards no logical strategy removes, and per-target constants (arch guards, host checks)."""

from __future__ import annotations

import bisect
import re

from porter.findings import Applicability

from .common import CALLED, LOGICAL, PHYSICAL
from .hip_alias import _args
from .preproc import CUDA, HIP


class Physical:
    """One part of :class:`.engine.Analyser` (see the module docstring)."""

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
                    for c in CALLED.findall(f.text):
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
        wave_spans = self._hip_wave_functions()
        if wave_spans:  # the same, with the port's wavefront-wide shuffles written in the function's HIP branch
            self.sites = [s for s in self.sites
                          if not (s.code == "PRT521" and any(a <= s.start < b for a, b in wave_spans))]
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

    _LEGACY = re.compile(r"\b__shfl(?:_up|_down|_xor)?\s*\(")

    def _hip_wave_functions(self) -> list[tuple[int, int]]:
        """Device functions whose human-written HIP-only branch shuffles over the whole wavefront (a legacy
        `__shfl*` without a width, or with `warpSize`): `warpSize` in their shared code is that port's
        physical warp, consistent with those shuffles (apex's `#ifdef USE_ROCM __shfl_down(v, i)` next to a
        `for (i = warpSize / 2; ...)` loop), so PRT521's 32-lane pin would break the port."""
        original = getattr(self, "original", self.text)
        if self.scan is None or original is self.text or "__shfl" not in original:
            return []
        st, pos, regions = self.scan.status, 0, []
        for i, line in enumerate(self.scan.lines):
            if st[i][HIP] != 0 and st[i][CUDA] == 0:
                regions.append((pos, pos + len(line)))
            pos += len(line)
        wide = []
        for a, b in regions:
            chunk = original[a:b]
            for m in self._LEGACY.finditer(chunk):
                args = _args(chunk, m.end())
                if args is not None and (len(args) == 2 or len(args) == 3 and args[2].strip() == "warpSize"):
                    wide.append(a + m.start())
        out = []
        for f in self.funcs:
            if f.kind == "host":
                continue
            a, b = self.c(f.start), self.c(f.end)
            if any(a <= w < b for w in wide):
                out.append((a, b))
        return out

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
        found = () if "WARP_THREADS" not in self.text else re.finditer(  # (every match contains it)
            r"\bCUB_WARP_THREADS\s*\(\s*\w*\s*\)|\bCUB_PTX_WARP_THREADS\b", self.text)
        for m in found:
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
            arg = self.t(named[1]).strip()
            if arg in self._scoped_consts():
                continue  # declared with other values in other scopes of the file: no single size
            dims = [self.hsym.value(arg)]  # the size hipcub sees: a per-platform warp constant is 64 there
            if dims and dims[0] is not None and dims[0] % 64 != 0:
                self.site("PRT525", node, f"`{name}` with a block of {dims[0]} threads: hipcub's block "
                          "primitives need block sizes that are a multiple of the 64-lane wavefront on CDNA "
                          "(warp-level storage is per physical warp). Use a multiple of 64.")

    def _scoped_consts(self) -> set[str]:
        """Constant names the file declares more than once with different initialisers (local
        `constexpr int THREADS = ...` in several kernels): the file-wide table holds only one of them."""
        if "_scoped" not in self.__dict__:
            seen: dict[str, set[str]] = {}
            for m in self._CONST_DECL.finditer(self.text):
                seen.setdefault(m.group(1), set()).add(re.sub(r"\s+", "", m.group(2)))
            self.__dict__["_scoped"] = {n for n, bodies in seen.items() if len(bodies) > 1}
        return self.__dict__["_scoped"]

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
