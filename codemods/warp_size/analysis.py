"""The warp_size family's analysis; its rules, options and pre-filters are declared
in ``porter.codemods.warp_size`` (``__init__.py``), which describes what the family does.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path

from porter.codemods.warp_size import _I, _NONE, NAME
from porter.codemods.warp_size.engine import HEADER, LOGICAL, PHYSICAL, Analyser, Site, analyse
from porter.codemods.warp_size.hip_alias import broadcast_aliases, call_sites, torch_broadcast, torch_call_sites
from porter.codemods.warp_size.preproc import CUDA, HIP, Scan, hip_defined, scan
from porter.codemods.warp_size.reach import OVERLOAD_DECL, hip_unreached_headers
from porter.codemods.warp_size.symbols import WARP_NAME, Symbols
from porter.findings import Category, Edit, Finding
from porter.framework import FileContext


@lru_cache(maxsize=1)
def header_text() -> str:
    """The portable header porter adds (package data)."""
    return resources.files("porter.codemods").joinpath("templates", HEADER).read_text(encoding="utf-8")


def _include_point(a: Analyser, before: int) -> int:
    """Character offset where the header include goes: after the last leading #include."""
    root = a.tree.root_node
    container = root
    named = [c for c in root.named_children if c.type != "comment"]
    if len(named) == 1 and named[0].type == "preproc_ifdef":  # include guard
        container = named[0]
    last = None
    anchor = None
    for child in container.named_children:
        if a.c(child.start_byte) >= before:
            break
        if child.type == "preproc_include":
            last = child
        elif child.type == "preproc_def" and container is not root and anchor is None:
            anchor = child
        elif child.type == "preproc_call" and "once" in a.t(child):
            anchor = anchor or child
    node = last or anchor
    if node is None:
        return 0
    end = a.c(node.end_byte)
    text = a.text
    if end > 0 and text[end - 1] == "\n":
        return end
    nl = text.find("\n", end)
    return len(text) if nl < 0 else nl + 1


def _header_paths(ctx: FileContext) -> tuple[str, str]:
    """(new file path relative to the root, the path to write in the #include)."""
    here = posixpath.dirname(ctx.relpath)
    where = ctx.settings.option(NAME, "header-dir", None) or ctx.settings.option(NAME, "header_dir", None)
    if where is None:
        return posixpath.join(here, HEADER) if here else HEADER, HEADER
    where = str(where).strip("/")
    path = posixpath.join(where, HEADER) if where else HEADER
    return path, posixpath.relpath(path, here or ".")


def _strategy(ctx: FileContext) -> str:
    s = str(ctx.settings.option(NAME, "strategy", LOGICAL)).lower()
    return PHYSICAL if s == PHYSICAL else LOGICAL


SHIMS_FACT = "warp_hip_shims"
PLATFORM_FACT = "warp_platform_macros"
WARP_HEADERS_FACT = "warp_collective_headers"
UNREACHED_FACT = "warp_hip_unreached_headers"
BROADCAST_FACT = "warp_hip_broadcast_aliases"
ARCH_CONST_FACT = "warp_arch_constants"
_RAW_COLLECTIVE = re.compile(rb"\b(__shfl(?:_up|_down|_xor)?(?:_sync)?|__ballot(?:_sync)?|__any_sync|__all_sync|"
                             rb"__activemask|__syncwarp)\s*\(")
_LOCAL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
_PLATFORM_HINT = re.compile(rb"HIP|ROCM|__CUDA_ARCH__|__NVCC__|_sync\s*\(")
_WARP_DEFINE = re.compile(rb"#[ \t]*define[ \t]+\w*(?:WARP|[Ww]arp|WAVE|[Ww]ave)")
_SHIM_DEF = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+(__shfl(?:_up|_down|_xor)?_sync|__ballot_sync|__any_sync|__all_sync|"
                       rb"__activemask|__syncwarp)[ \t]*\(", re.M)


def repo_facts(root: Path, relpaths: Sequence[str]) -> dict[str, tuple]:
    """Repository-wide facts for the per-file analysis, from its headers (first 1 MiB of each,
    never followed out of ``root``):

    - warp intrinsics the repository redefines as macros (ggml's ``vendors/hip.h``): calls to
      them are the repository's own port, neither reported nor rewritten;
    - macros a header defines on one platform only (``#if !defined(GGML_USE_HIP) ...
      #define TURING_MMA_AVAILABLE``): other files' ``#ifdef`` on them select that platform.
    """
    names: set[str] = set()
    where: dict[str, set[str]] = {}
    collective: dict[str, set[str]] = {}
    overloads: list[str] = []
    broadcasts: dict[str, int] = {}
    arch: dict[str, set[tuple[int, int]]] = {}
    for rel in relpaths:
        if not rel.endswith((".h", ".cuh", ".hpp", ".hh", ".hxx", ".inl")):
            continue
        path = root / rel
        try:
            if path.is_symlink() or not path.is_file():
                continue
            with open(path, "rb") as fh:
                data = fh.read(1 << 20)
        except OSError:
            continue
        if OVERLOAD_DECL.search(data):
            overloads.append(rel)
        called = {m.group(1).decode() for m in _RAW_COLLECTIVE.finditer(data)}
        if called:
            collective[posixpath.basename(rel)] = called
        if b"#" not in data or not (_PLATFORM_HINT.search(data) or _WARP_DEFINE.search(data)):
            continue
        text = data.decode("utf-8", "replace")
        sc = scan(text)
        for i, line in enumerate(sc.lines):
            m = _SHIM_DEF.match(line.encode("utf-8", "replace"))
            if m and sc.status[i][HIP] != 0:
                names.add(m.group(1).decode())
        for d in sc.defines:
            where.setdefault(d.name, set()).update(c for c in (CUDA, HIP) if d.active[c] != 0)
        broadcasts.update(broadcast_aliases(sc))
        for name, values in _arch_constants(sc).items():
            arch.setdefault(name, set()).add(values)
    out: dict[str, tuple] = {}
    consts = tuple(sorted((n, *next(iter(v))) for n, v in arch.items() if len(v) == 1))
    if consts:
        out[ARCH_CONST_FACT] = consts
    warp_headers = {h for h, called in collective.items() if called - names}  # the repo's own shims do not count
    if warp_headers:
        out[WARP_HEADERS_FACT] = tuple(sorted(warp_headers))
    if names:
        out[SHIMS_FACT] = tuple(sorted(names))
    one = tuple(sorted((n, next(iter(c))) for n, c in where.items() if len(c) == 1))
    if one:
        out[PLATFORM_FACT] = one
    if broadcasts:
        out[BROADCAST_FACT] = tuple(sorted(broadcasts.items()))
    if overloads:
        try:
            unreached = hip_unreached_headers(root, relpaths, overloads, dict(one))
        except Exception:  # noqa: BLE001 - a hostile or odd tree: keep the other facts, report PRT524 as errors
            unreached = {}
        if unreached:
            out[UNREACHED_FACT] = tuple(sorted(unreached.items()))
    return out


def _arch_constants(sc: Scan) -> dict[str, tuple[int, int]]:
    """Warp constants a header defines per platform: 32 for CUDA, a wider value (64) for HIP; and
    warp-named constants that are 32 on both (`#define WARP_SIZE 32`: only tile checks read those).

    ``#if MY_HIP / #if IS_CDNA / #define LIB_WARP 64 ...``: a kernel in another file that sizes its
    warps with the name spans the wavefront on AMD, so no 32-lane pin may be applied there.
    """
    views = {c: Symbols() for c in (CUDA, HIP)}
    for c, sym in views.items():
        sym.defines.update({k: v for k, v in sc.view(c).items() if v})
    out: dict[str, tuple[int, int]] = {}
    for name in {d.name for d in sc.defines}:
        cv, hv = views[CUDA].value(name), views[HIP].value(name)
        if cv == 32 and isinstance(hv, int) and (hv > cv and hv % 32 == 0 or hv == 32 and WARP_NAME.match(name)):
            out[name] = (cv, hv)
    return out


_SYCL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](?:sycl/sycl\.hpp|CL/sycl\.hpp)[>"]', re.M)


_GUARD = re.compile(r"\A((?:[ \t]*(?://[^\n]*)?\n|[ \t]*/\*.*?\*/[ \t]*\n)*)[ \t]*#[ \t]*ifndef[ \t]+(\w+)"
                    r"([ \t]*\n[ \t]*#[ \t]*define[ \t]+\2\b)", re.S)


def _sycl_source(text: str) -> bool:
    """A SYCL translation (an Intel XPU port next to the CUDA code) includes the SYCL runtime in code that
    both the CUDA and the HIP configurations would compile: neither nvcc nor hipcc builds such a file, and
    leftover CUDA intrinsics in it (uninstantiated templates) are not the CUDA build's."""
    if "sycl" not in text:
        return False
    ms = list(_SYCL_INCLUDE.finditer(text))
    if not ms:
        return False
    sc = scan(_GUARD.sub(r"\1#if 1\3", text, count=1))  # an include guard is not a condition
    for m in ms:
        line = text.count("\n", 0, m.start())
        if line < len(sc.status) and sc.status[line][CUDA] == 1 and sc.status[line][HIP] == 1:
            return True
    return False


def check_cuda(ctx: FileContext) -> list[Finding]:
    if posixpath.basename(ctx.relpath) == HEADER:
        return []  # porter's own header: its raw intrinsics are the implementation
    if _sycl_source(ctx.text):
        return []
    strategy = _strategy(ctx)
    shims = frozenset(ctx.facts.extra.get(SHIMS_FACT, ()))
    known = dict(ctx.facts.extra.get(PLATFORM_FACT, ()))
    headers = set(ctx.facts.extra.get(WARP_HEADERS_FACT, ()))
    includes_warp = bool(headers) and any(posixpath.basename(m.group(1)) in headers
                                          for m in _LOCAL_INCLUDE.finditer(ctx.text))
    arch = {n: (cv, hv) for n, cv, hv in ctx.facts.extra.get(ARCH_CONST_FACT, ())}
    a = analyse(ctx.text, strategy, ctx.cache, shims, known, includes_warp, arch)
    extra: list[Finding] = []
    if strategy == PHYSICAL and a.physical_blockers:
        byte, why = a.physical_blockers[0]
        pos = a.c(byte)
        a = analyse(ctx.text, LOGICAL, ctx.cache, shims, known, includes_warp, arch)
        extra.append(ctx.finding("PRT523", f"physical warp strategy not applied to this file ({why} at line "
                                 f"{ctx.position(pos)[0]}); porter used the logical 32-lane warp instead.", pos, pos))
    unreached = dict(ctx.facts.extra.get(UNREACHED_FACT, ()))
    if ctx.relpath in unreached:
        _unreached_overloads(a.sites, unreached[ctx.relpath])
    return extra + _to_findings(ctx, a.sites, a) + _hip_broadcasts(ctx, a) + _jit_sources(ctx)


def _hip_broadcasts(ctx: FileContext, a: Analyser) -> list[Finding]:
    """Calls of a hand port's HIP-only width-less ``__shfl`` alias with a 32-lane source lane."""
    aliases = dict(ctx.facts.extra.get(BROADCAST_FACT, ()))
    if a.scan is not None:
        aliases.update(broadcast_aliases(a.scan))
    out: list[Finding] = []
    if torch_broadcast(ctx.text):
        out.extend(_torch_broadcasts(ctx, a))
    if not aliases:
        return out
    for f in a.funcs:
        body = f.node.child_by_field_name("body")
        if f.kind == "host" or body is None:
            continue
        base = a.c(body.start_byte)
        for start, end, name, lane in call_sites(f.text, aliases, a.sym.value):
            out.append(ctx.finding("PRT508", f"`{name}` is, in this repository's HIP branch, the legacy `__shfl` "
                                   "without a width: it reads absolute lane "
                                   f"`{lane}` of the whole wavefront (64 lanes on CDNA), but `{f.name}` splits the "
                                   "thread index into 32-lane warps, so lanes 32..63 read the first logical warp. "
                                   "Give the HIP branch an explicit width of 32 (`__shfl(var, lane, 32)`); porter "
                                   "reports the hand port and does not rewrite it.", base + start, base + end))
    return out


def _torch_broadcasts(ctx: FileContext, a: Analyser) -> list[Finding]:
    """PyTorch's width-less `WARP_SHFL(v, lane)` with a lane masked to 32 in device code."""
    out: list[Finding] = []
    for f in a.funcs:
        body = f.node.child_by_field_name("body")
        if f.kind == "host" or body is None:
            continue
        base = a.c(body.start_byte)
        for start, end, name, lane in torch_call_sites(f.text):
            at = body.start_byte + len(f.text[:start].encode("utf-8", "surrogatepass"))
            if _not_on_hip(a.tree.root_node.descendant_for_byte_range(at, at + 1), a):
                continue
            out.append(ctx.finding("PRT508", f"`{name}(..., {lane})` is PyTorch's shuffle helper without a width: "
                                   "its width defaults to `warpSize`, 64 on CDNA, so the 32-lane source lane "
                                   f"`{lane}` is an absolute lane of the wavefront and lanes 32..63 read the "
                                   "first 32 lanes' values. Pass the width of the lane arithmetic "
                                   f"(`{name}(value, {lane}, 32)`) or port the reduction to the wavefront; porter "
                                   "reports it and does not rewrite it.", base + start, base + end))
    return out


def _not_on_hip(node, a: Analyser) -> bool:
    """``node`` sits in the branch of a run-time platform test (`if (USE_ROCM) ... else <here>`,
    `if (!USE_ROCM) <here>`) that HIP never takes."""
    child, p = node, node.parent if node is not None else None
    while p is not None:
        if p.type == "if_statement":
            cond = p.child_by_field_name("condition")
            ct = re.sub(r"[\s()]", "", a.t(cond)) if cond is not None else ""
            neg = ct.startswith("!")
            name = ct[1:] if neg else ct
            if re.fullmatch(r"[A-Za-z_]\w*", name) and hip_defined(name):
                branch = p.child_by_field_name("consequence" if neg else "alternative")
                if branch is not None and branch.start_byte <= child.start_byte < branch.end_byte:
                    return True
        child, p = p, p.parent
    return False


def _unreached_overloads(sites: list[Site], macros: tuple[str, ...]) -> None:
    """PRT524 in a header that no HIP-compiled file of the tree includes becomes a note."""
    if macros:
        names = ", ".join(f"`{m}`" for m in macros[:3])
        why = (f"every `#include` of this header in the tree sits under a condition on {names}, which nothing "
               "in the tree defines (no `#define`, no build-script or documented flag), so no HIP build of this "
               "tree compiles it")
    else:
        why = "every `#include` of this header in the tree sits in a branch the HIP build does not compile"
    for s in sites:
        if s.code == "PRT524" and not s.edits:
            s.info = True
            s.message += (f" Not actionable in this tree: {why}. If a build of yours defines it for AMD, rename the "
                          "overload before HIPify.")


_RAW_STRING = re.compile(r'\bR"([^()\\\s]{0,16})\((.*?)\)\1"', re.S)
_EMBEDDED = re.compile(r"__global__|__device__")


def _jit_sources(ctx: FileContext) -> list[Finding]:
    """CUDA source in C++ raw string literals (NVRTC/JIT kernels): analysed, reported, never patched."""
    out: list[Finding] = []
    if 'R"' not in ctx.text:
        return out
    for m in _RAW_STRING.finditer(ctx.text):
        body = m.group(2)
        if not _EMBEDDED.search(body):
            continue
        base = m.start(2)
        for site in analyse(body, LOGICAL).sites:
            out.append(ctx.finding(site.code, site.message + " (CUDA source in a C++ string literal, compiled at run "
                                   "time: report only; port the kernel text by hand)", base + site.start,
                                   base + site.end))
    return out


def _to_findings(ctx: FileContext, sites: list[Site], a: Analyser) -> list[Finding]:
    out: list[Finding] = []
    needs = [s for s in sites if s.edits and s.needs_header]
    include_edit: Edit | None = None
    new_files: tuple[tuple[str, str], ...] = ()
    if needs:
        path, inc = _header_paths(ctx)
        new_files = ((path, header_text()),)
        if not re.search(r'#\s*include\s*[<"](?:[^">]*/)?porter_warp\.h[">]', ctx.text):
            pos = _include_point(a, min(s.start for s in needs))
            include_edit = Edit(pos, pos, f'#include "{inc}"\n')
    for s in sites:
        edits = tuple(Edit(x, y, t) for x, y, t in s.edits)
        kwargs = {}
        if edits and s.needs_header:
            if include_edit is not None:
                edits = edits + (include_edit,)
            kwargs["new_files"] = new_files
        if s.info and not edits:
            kwargs.update(category=Category.BENIGN, severity=_I, effort_hours=0.0)
        out.append(ctx.finding(s.code, s.message, s.start, s.end, fix=s.fix if edits else _NONE, edits=edits,
                               **kwargs))
    return out
