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

import re
from collections.abc import Mapping

from tree_sitter import Node

from porter.findings import Applicability

from .._cuda_tree import parse
from .common import HEADER, LOGICAL, PHYSICAL, Func, Site, _split_args, captures
from .constants import Constants
from .intrinsics import Intrinsics
from .offsets import Offsets
from .physical import Physical
from .preproc import CUDA, HIP, Scan, mask
from .rules import Rules
from .symbols import Symbols

__all__ = ["Analyser", "analyse", "HEADER", "LOGICAL", "PHYSICAL", "Func", "Site"]


class Analyser(Offsets, Constants, Intrinsics, Rules, Physical):
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

    # -- passes -------------------------------------------------------------------------------------
    def run(self) -> list[Site]:
        caps = captures(self.tree.root_node, self.data)
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
            if "__AMDGCN_WAVEFRONT_SIZE" in line and (self.scan.status[i][HIP] != 0 or i in self.scan.blank_directive):
                for m in re.finditer(r"\b__AMDGCN_WAVEFRONT_SIZE(?:__)?\b", line):
                    a = pos + m.start()
                    if a not in seen and self.text[a:a + 1].isspace():
                        self.site("PRT512", (a, a + len(m.group(0))), f"`{m.group(0)}` is deprecated (and removed "
                                  "in recent LLVM: an `#if` on it becomes silently false); in the host pass it is "
                                  "always 64. Use the arch test in porter_warp.h (PORTER_WARP_SIZE) on the device "
                                  "and porter::host_warp_size() on the host.")
            pos += len(line)

    _INFO_CODES = ("PRT502", "PRT503", "PRT504", "PRT505", "PRT506", "PRT507", "PRT514")


def analyse(text: str, strategy: str = LOGICAL, cache: dict | None = None,
            shims: frozenset[str] = frozenset(), known: Mapping[str, str] | None = None,
            includes_warp: bool = False, arch: Mapping[str, tuple[int, int]] | None = None) -> Analyser:
    """Analyse ``text``; ``shims`` are warp intrinsics the repository redefines for HIP itself,
    ``known`` the macros its headers define on one platform only (see ``preproc.scan``), ``arch`` the
    warp constants its headers define per platform (name -> CUDA value, HIP value)."""
    masked, sc = mask(text, known=known)
    a = Analyser(masked, strategy, cache if masked is text else None, sc, shims)
    a.header_arch = dict(arch or {})
    a.includes_warp = includes_warp
    a.original = text
    a.run()
    return a
