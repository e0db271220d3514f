"""A hand port's HIP-only alias of a shuffle broadcast that drops the width (PRT508, report only).

A port often maps ``__shfl_sync`` to the legacy HIP shuffle in its own HIP branch::

    #ifdef USE_ROCM
    #define ROW_SHFL(mask, var, lane) __shfl(var, lane)        // width: the wavefront
    #else
    #define ROW_SHFL __shfl_sync
    #endif

The CUDA branch is correct and the HIP branch is the human's port, so the rest of the pass does not
look at it. But a legacy ``__shfl`` without a width reads *absolute* lane ``lane`` of the whole
wavefront (64 lanes on CDNA). In a kernel that splits the thread index into 32-lane logical warps
(``t & 31``, ``t >> 5``...) and broadcasts a 32-lane index (a literal 0..31, a loop variable below 32,
a value masked with ``& 31``), lanes 32..63 then read the first logical warp's lanes. That is wrong
at any 32-lane logical warp and is reported at each call site; porter does not rewrite the human's
branch. Other legacy shuffles are left alone: an up/down shift inside a 32-lane segment is usually
guarded by a lane test (``lane >= i``), and whether it is right depends on that guard.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .preproc import CUDA, HIP, Scan

_FN_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(([^)]*)\)(.*)$")
_BROADCAST = re.compile(r"\b__shfl\s*\(")
# 32-lane lane arithmetic on a value: `& 31`, `& 0x1f`, `& (32 - 1)`, `% 32`, `>> 5`
LANE_ARITH_32 = re.compile(r"&\s*(?:31|0x1[fF]|\(\s*32\s*-\s*1\s*\))(?!\w)|%\s*32(?!\w)|>>\s*5(?!\w)")


def _args(text: str, pos: int) -> list[str] | None:
    """The top-level arguments of the call whose '(' ends just before ``pos``."""
    depth, start, out = 0, pos, []
    for i in range(pos, len(text)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                if text[start:i].strip():
                    out.append(text[start:i].strip())
                return out
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    return None


def broadcast_aliases(sc: Scan) -> dict[str, int]:
    """Function-like macros defined only for HIP as a width-less ``__shfl``: name -> index of the
    macro parameter that becomes the source lane."""
    out: dict[str, int] = {}
    for i, line in enumerate(sc.lines):
        if i >= len(sc.status) or sc.status[i][HIP] == 0 or sc.status[i][CUDA] != 0:
            continue
        m = _FN_DEFINE.match(line.rstrip("\r\n"))
        if not m:
            continue
        params = [p.strip() for p in m.group(2).split(",")]
        body = m.group(3)
        call = _BROADCAST.search(body)
        if not call:
            continue
        args = _args(body, call.end())
        if args is None or len(args) != 2:
            continue  # an explicit width: the port chose it
        if args[1] in params:
            out[m.group(1)] = params.index(args[1])
    return out


def lane_index_32(expr: str, body: str, value) -> bool:
    """``expr`` is a 32-lane index: a literal 0..31, a value masked to 32 lanes, or a loop variable
    that a ``for`` in ``body`` keeps below 32 (``value`` resolves constants and macros)."""
    expr = expr.strip()
    v = value(expr)
    if v is not None:
        return 0 <= v < 32
    if LANE_ARITH_32.search(expr):
        return True
    if re.fullmatch(r"[A-Za-z_]\w*", expr):
        for m in re.finditer(rf"\bfor\s*\([^;]*\b{re.escape(expr)}\s*=\s*([^;]+);\s*{re.escape(expr)}\s*(<=?)\s*"
                             r"([^;]+);", body):
            start, bound = value(m.group(1).strip()), value(m.group(3).strip())
            if start is None or bound is None or start < 0:
                continue
            if (m.group(2) == "<" and bound <= 32) or (m.group(2) == "<=" and bound <= 31):
                return True
    return False


# PyTorch's `ATen/cuda/DeviceUtils.cuh` broadcast helper: `WARP_SHFL(value, srcLane, width = warpSize, mask)`.
# Without a width it is, on ROCm, the legacy `__shfl` over the whole wavefront (warpSize is 64 on CDNA).
TORCH_BROADCAST = "WARP_SHFL"
_TORCH_UTILS = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]ATen/cuda/DeviceUtils\.cuh[>"]', re.M)
_OWN_HELPER = re.compile(r"#[ \t]*define[ \t]+WARP_SHFL\b|\bWARP_SHFL\s*\([^;{}]*\)\s*(?:const\s*)?\{")


def torch_broadcast(text: str) -> bool:
    """The file includes PyTorch's device helpers and does not define a `WARP_SHFL` of its own."""
    return "DeviceUtils" in text and bool(_TORCH_UTILS.search(text)) and not _OWN_HELPER.search(text)


def masked_lane_var(name: str, body: str) -> bool:
    """Every assignment to variable ``name`` in ``body`` ends in a 32-lane mask (``x = (t + k) & 31``)."""
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        return False
    inits = re.findall(rf"\b{re.escape(name)}\s*=(?!=)\s*([^;]+);", body)
    return bool(inits) and all(re.search(r"&\s*(?:31|0x1[fF]|\(\s*32\s*-\s*1\s*\))\s*$", i.strip()) for i in inits)


def torch_call_sites(body: str) -> list[tuple[int, int, str, str]]:
    """Width-less `WARP_SHFL(v, lane)` calls whose lane is a 32-lane index computed from the thread
    (a masked expression, or a variable every assignment of which is masked) in one function body.
    A literal lane is left alone: with one 32-lane row per block (`blockDim.y == 1`) it is right."""
    if TORCH_BROADCAST not in body:
        return []
    out = []
    for m in re.finditer(rf"\b{TORCH_BROADCAST}\s*\(", body):
        args = _args(body, m.end())
        if args is None or len(args) != 2:
            continue  # an explicit width (or a mask): the author chose it
        lane = args[1].strip()
        if LANE_ARITH_32.search(lane) and re.search(r"\b(?:threadIdx|lane|tid)\w*", lane) or masked_lane_var(
                lane, body):
            out.append((m.start(), m.end(), TORCH_BROADCAST, lane))
    return out


def call_sites(body: str, aliases: Mapping[str, int], value) -> list[tuple[int, int, str, str]]:
    """(start, end, macro, lane expression) of each 32-lane broadcast through an alias in one
    function body that splits the thread index into 32-lane warps."""
    if not aliases or not LANE_ARITH_32.search(body) or "threadIdx" not in body and not re.search(
            r"\b(?:lane|tid|thread)\w*\b", body):
        return []
    pat = re.compile(r"\b(" + "|".join(map(re.escape, sorted(aliases))) + r")\s*\(")
    out = []
    for m in pat.finditer(body):
        args = _args(body, m.end())
        k = aliases[m.group(1)]
        if args is None or k >= len(args):
            continue
        if lane_index_32(args[k], body, value):
            out.append((m.start(), m.end(), m.group(1), args[k]))
    return out
