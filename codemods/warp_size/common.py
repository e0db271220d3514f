"""What the warp-size analysis shares: the intrinsic tables and patterns, the tree-sitter query, the
:class:`Site` and :class:`Func` records, and two text helpers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from tree_sitter import Node

from porter.findings import Applicability

from .._cuda_tree import language

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
# substrings every match of RAW_WARP_CALL contains: a text with none of them has no raw warp call (tested
# first, in C, before the pattern scans a whole function body)
RAW_WARP_NEEDLES = ("__shfl", "__ballot", "__any_sync", "__all_sync", "__activemask", "__syncwarp", "__match_",
                    "__reduce_")
SHFL_CALL = re.compile(r"\b__shfl(?:_up|_down|_xor)?(?:_sync)?\s*\(")
PTX_WARP = re.compile(r"shfl\.sync|vote\.|%%?laneid|%%?lanemask_|redux\.sync|activemask|bar\.warp\.sync")
PTX_MMA = re.compile(r"\bmma\.sync|\bldmatrix|\bwmma\.|\bmma\.")
TAINT_SOURCE = re.compile(r"\bthreadIdx\b|__lane_id\s*\(|laneid|thread_rank\s*\(|\blane_id\s*\(|get_lane_id")
TAINT_NAME = re.compile(
    r"^(?:lane|lane_?id|laneId|laneid|lane_idx|laneIdx|tid|thread_id|threadId|wid|warp_?id|warpId|"
    r"warp_idx|warpIdx|lid)$"
)
_IDENT = re.compile(r"[A-Za-z_]\w*")
# a call's name: `name(`, `name<...>(`. The look-behind only skips positions inside a name (after a letter or
# `_`), where a match cannot start but a scan would try every shorter tail of the name: findall() gives what
# it gives without it.
CALLED = re.compile(r"(?<![A-Za-z_])([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(")
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


# What the analysis reads from a file's tree: the nodes of these kinds, by capture name, in source order.
# It is the tree-sitter query
#
#   (call_expression function: (_) @callee arguments: (argument_list) @args) @call
#   (for_statement) @for  (declaration) @decl  (binary_expression) @bin  (gnu_asm_expression) @asm
#   (if_statement condition: (_) @cond consequence: (_) @then) @if
#   ((identifier) @wid (#match? @wid "^(warpSize|__AMDGCN_WAVEFRONT_SIZE|__AMDGCN_WAVEFRONT_SIZE__|C10_WARP_SIZE)$"))
#   ((type_identifier) @wid (#eq? @wid "warpSize"))  ((field_identifier) @wfield (#eq? @wfield "warpSize"))
#   (preproc_def name: (identifier) value: (preproc_arg)) @def
#   (preproc_function_def name: (identifier) parameters: (preproc_params) value: (preproc_arg)) @fdef
#   (function_definition) @fn  (launch_bounds) @lb  (optional_parameter_declaration) @optparam
#   (subscript_expression) @sub
#   (template_type name: (type_identifier) arguments: (template_argument_list)) @ttype
#   (template_function name: (identifier) arguments: (template_argument_list)) @tfunc
#
# matched by one walk over the tree instead: compiling any query against the CUDA grammar costs a fixed
# ~10 ms (tree-sitter analyses the grammar's whole parse table), more than the C++ pass spends on a small
# tree, and the walk is no slower than the query's own matching. tests/test_warp_captures.py checks the walk
# against the query above, node for node.
_PLAIN = {"for_statement": "for", "declaration": "decl", "binary_expression": "bin", "gnu_asm_expression": "asm",
          "function_definition": "fn", "launch_bounds": "lb", "optional_parameter_declaration": "optparam",
          "subscript_expression": "sub"}
# kind -> (capture, ((field, required kind of the field's node; None: any named node), ...))
_WITH_FIELDS = {
    "call_expression": ("call", (("function", None), ("arguments", "argument_list"))),
    "if_statement": ("if", (("condition", None), ("consequence", None))),
    "preproc_def": ("def", (("name", "identifier"), ("value", "preproc_arg"))),
    "preproc_function_def": ("fdef", (("name", "identifier"), ("parameters", "preproc_params"),
                                      ("value", "preproc_arg"))),
    "template_type": ("ttype", (("name", "type_identifier"), ("arguments", "template_argument_list"))),
    "template_function": ("tfunc", (("name", "identifier"), ("arguments", "template_argument_list"))),
}
# kind -> (capture, the texts it captures)
_BY_TEXT = {"identifier": ("wid", frozenset({b"warpSize", b"__AMDGCN_WAVEFRONT_SIZE", b"__AMDGCN_WAVEFRONT_SIZE__",
                                             b"C10_WARP_SIZE"})),
            "type_identifier": ("wid", frozenset({b"warpSize"})),
            "field_identifier": ("wfield", frozenset({b"warpSize"}))}


_TEXTS = frozenset().union(*(texts for _cap, texts in _BY_TEXT.values()))


@lru_cache(maxsize=2)
def _kinds(by_text: bool = True) -> dict[int, tuple]:
    """Node kind id (as ``Node.kind_id`` gives it) -> what to do with such a node; named kinds only.
    Without ``by_text``, the kinds captured by their text are left out (a source that holds none
    of those texts)."""
    lang = language()
    out: dict[int, tuple] = {}
    for kind_id in range(lang.node_kind_count):
        name = lang.node_kind_for_id(kind_id)
        if name is None or not lang.node_kind_is_named(kind_id):
            continue
        if name in _PLAIN:
            out[kind_id] = (0, _PLAIN[name])
        elif name in _WITH_FIELDS:
            out[kind_id] = (1, *_WITH_FIELDS[name])
        elif name in _BY_TEXT and by_text:
            out[kind_id] = (2, *_BY_TEXT[name])
    return out


def captures(root: Node, data: bytes) -> dict[str, list[Node]]:
    """The nodes under ``root`` (itself included) that the query above captures, per capture name, in
    pre-order (by start byte; a node before the nodes it contains). ``data`` is the parsed source."""
    kinds = _kinds(any(text in data for text in _TEXTS))
    caps: dict[str, list[Node]] = {}
    cursor = root.walk()
    down, right, up = cursor.goto_first_child, cursor.goto_next_sibling, cursor.goto_parent
    while True:
        node = cursor.node
        todo = kinds.get(node.kind_id)
        if todo is not None:
            how = todo[0]
            if how == 0:
                caps.setdefault(todo[1], []).append(node)
            elif how == 1:
                for name, kind in todo[2]:
                    child = node.child_by_field_name(name)
                    if child is None or (not child.is_named if kind is None else child.type != kind):
                        break
                else:
                    caps.setdefault(todo[1], []).append(node)
            elif data[node.start_byte : node.end_byte] in todo[2]:
                caps.setdefault(todo[1], []).append(node)
        if down():
            continue
        while not right():
            if not up():
                return caps


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
