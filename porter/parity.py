"""Per-site parity tests emitted into the ported repository (``porter migrate``, ``apply --emit-parity``).

For every site a fix of the attention, apex, quantization or fp8 family rewrote, porter records what
it knows of the site — the original call and the statements the fix removed with it, the original
file's imports, which argument expressions are the tensors / shape / parameters, where the
rewritten call sits (enclosing function, API name, occurrence) — and writes one test module. The
module is ``porter/data/parity_harness.py`` (references of the original libraries and the runtime
checks) followed by the site table; it needs only torch and pytest in the target repository.
"""

from __future__ import annotations

import ast
import bisect
import pprint
import textwrap
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .engine import Stage
from .findings import Finding
from .patchset import FileChange, Patch
from .runner import RunResult

PARITY_DIR = "tests/porter_parity"
PARITY_FILE = "test_porter_parity.py"


@dataclass(frozen=True)
class SiteKind:
    kind: str  # attention | norm | optimizer
    roles: tuple[tuple[str, int, str], ...]  # (keyword, position, role name)
    layout: str = ""
    packages: tuple[str, ...] = ()
    xfail: str = ""
    skip: str = ""
    needs_gpu: bool = False


_QKV = (("q", 0, "q"), ("k", 1, "k"), ("v", 2, "v"))
_NORM = (("normalized_shape", 0, "dim"), ("hidden_size", 0, "dim"))
_PARAMS = (("params", 0, "params"),)

KINDS: dict[str, SiteKind] = {
    "PRT100": SiteKind("attention", _QKV, "bshd", ("flash_attn",)),
    "PRT101": SiteKind("attention", (("qkv", 0, "qkv"),), "qkvpacked", ("flash_attn",)),
    "PRT102": SiteKind("attention", (("q", 0, "q"), ("kv", 1, "kv")), "kvpacked", ("flash_attn",)),
    "PRT200": SiteKind("attention", (("query", 0, "q"), ("key", 1, "k"), ("value", 2, "v")), "bmhk",
                       ("xformers",)),
    "PRT300": SiteKind("optimizer", _PARAMS, packages=("apex",)),
    "PRT301": SiteKind("optimizer", _PARAMS, packages=("apex",)),
    "PRT302": SiteKind("optimizer", _PARAMS, packages=("apex",)),
    "PRT310": SiteKind("norm", _NORM, packages=("apex",)),
    "PRT311": SiteKind("norm", _NORM, packages=("apex",)),
    "PRT312": SiteKind("norm", _NORM, packages=("apex",),
                       xfail="MixedFused norms return the parameter dtype, torch norms the input dtype (unsafe fix)"),
    "PRT352": SiteKind("norm", _NORM, packages=("apex",)),
    "PRT400": SiteKind("optimizer", _PARAMS, packages=("bitsandbytes",)),
    "PRT401": SiteKind("optimizer", _PARAMS, packages=("bitsandbytes",),
                       skip="bitsandbytes' 8-bit optimizer state is approximated by torchao's (an unsafe fix, "
                       "PRT401): there is no exact reference; compare training curves instead"),
    "PRT601": SiteKind("norm", _NORM, packages=("transformer_engine",)),
    "PRT602": SiteKind("norm", _NORM, packages=("transformer_engine",)),
}
FAMILIES = ("attention", "apex", "quantization", "fp8")


def harness_source() -> str:
    return resources.files("porter").joinpath("data/parity_harness.py").read_text(encoding="utf-8")


class _Lines:
    """Character offsets <-> (line, UTF-8 byte column) for one text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0]  # line starts after \n, \r\n or a lone \r, as Python's tokenizer counts lines
        for i, ch in enumerate(text):
            if ch == "\n" or (ch == "\r" and text[i + 1:i + 2] != "\n"):
                self.starts.append(i + 1)

    def offset(self, line: int, col_bytes: int) -> int:
        start = self.starts[line - 1]
        raw = self.text[start:].encode("utf-8")[:col_bytes]
        return start + len(raw.decode("utf-8", errors="ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def position(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _chain_root(expr: ast.AST) -> ast.Call | None:
    """``F.sdpa(...).transpose(1, 2).contiguous()`` -> the ``F.sdpa(...)`` call."""
    node = expr
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value,
                                                                                            ast.Call):
        node = node.func.value
    return node if isinstance(node, ast.Call) else None


def _scopes(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    out: list[tuple[str, ast.AST]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}" if prefix else child.name
                out.append((name, child))
                walk(child, name)
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def _innermost_scope(tree: ast.Module, lines: _Lines, offset: int) -> tuple[str, ast.AST]:
    best: tuple[str, ast.AST] = ("<module>", tree)
    best_len = len(lines.text) + 1
    for name, node in _scopes(tree):
        if isinstance(node, ast.ClassDef):
            continue  # class bodies are not scopes a call's names resolve in
        start, end = lines.span(node)
        if start <= offset < end and end - start < best_len:
            best, best_len = (name, node), end - start
    return best


def _original_imports(text: str) -> list[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Import) or (isinstance(n, ast.ImportFrom) and n.level == 0)]


def _statement_source(tree: ast.Module, lines: _Lines, start: int, end: int) -> list[str]:
    """Whole statements of ``tree`` inside [start, end), dedented, in order."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.If, ast.For,
                                                                  ast.While, ast.With, ast.Try)):
            s, e = lines.span(node)
            if start <= s and e <= end:
                out.append((s, textwrap.dedent(lines.text[s:e])))
    return [src for _, src in sorted(out)]


def _site(fr_path: str, original_text: str, stage: Stage, finding: Finding, index_in_stage: int,
          same_text_rank: int) -> dict[str, Any]:
    kind = KINDS[finding.code]
    site: dict[str, Any] = {
        "id": f"{fr_path}:{finding.line}:{finding.code}",
        "path": fr_path,
        "rule": finding.code,
        "fix": finding.fix.value,
        "kind": kind.kind,
        "layout": kind.layout,
        "packages": list(kind.packages),
        "needs_gpu": kind.needs_gpu,
    }
    if kind.skip:
        site["skip"] = kind.skip
    if kind.xfail:
        site["xfail"] = kind.xfail
    before = _Lines(stage.before)
    after = _Lines(stage.after)
    try:
        tree_before = ast.parse(stage.before)
        tree_after = ast.parse(stage.after)
    except SyntaxError:
        return {**site, "skip": "porter could not parse the file to record this site"}
    site_offset = before.offset(finding.line, 0) + finding.column - 1
    main = None
    for edit in finding.edits:
        if edit.start <= site_offset < max(edit.end, edit.start + 1):
            main = edit
    if main is None and finding.edits:
        main = max(finding.edits, key=lambda e: e.end - e.start)
    if main is None:
        return {**site, "skip": "the fix recorded no edit at the site"}
    try:
        original_call = ast.parse(stage.before[main.start:main.end].strip(), mode="eval").body
        replacement = ast.parse(main.text.strip(), mode="eval").body
    except SyntaxError:
        return {**site, "skip": "the rewrite is not a single expression porter can locate"}
    root = _chain_root(replacement)
    if not isinstance(original_call, ast.Call) or root is None:
        return {**site, "skip": "the rewrite is not a call porter can locate"}
    marker = _call_name(root)
    # where the replacement landed in the stage's result: the same_text_rank-th copy of its text
    pos = -1
    for _ in range(same_text_rank + 1):
        pos = stage.after.find(main.text, pos + 1)
        if pos < 0:
            return {**site, "skip": "the rewritten text was changed again by another fix"}
    scope_name, scope = _innermost_scope(tree_after, after, pos)
    calls = sorted((n for n in ast.walk(scope) if isinstance(n, ast.Call) and _call_name(n) == marker),
                   key=lambda n: (n.lineno, n.col_offset))
    occurrence = next((i for i, n in enumerate(calls) if pos <= after.span(n)[0] < pos + len(main.text)), None)
    if occurrence is None:
        return {**site, "skip": "porter could not find the rewritten call in the result"}
    roles: dict[str, str] = {}
    for keyword, position, role in kind.roles:
        expr = None
        for kw in original_call.keywords:
            if kw.arg == keyword:
                expr = kw.value
        if expr is None and position < len(original_call.args) and not isinstance(original_call.args[position],
                                                                                    ast.Starred):
            expr = original_call.args[position]
        if expr is not None:
            roles[ast.unparse(expr)] = f"__porter_{role}__"
    wanted = {role for _, _, role in kind.roles}
    if len(set(roles.values())) < len(wanted) and kind.kind != "norm":
        return {**site, "skip": "porter could not tell which arguments are the site's inputs"}
    context: list[str] = []
    for edit in finding.edits:
        if edit is not main:
            context += _statement_source(tree_before, before, edit.start, edit.end)
    # named by where it lives in today's code, not by a line number of some intermediate text
    site["id"] = f"{fr_path}:{scope_name}:{finding.code}:{occurrence + 1}"
    site.update(
        scope=scope_name,
        marker=marker,
        occurrence=occurrence,
        roles=roles,
        original="\n".join(context + [ast.unparse(original_call)]),
        original_imports=_original_imports(original_text),
    )
    return site


def collect_sites(result: RunResult) -> list[dict[str, Any]]:
    """The parity sites of a fix run: every applied fix of a supported rule, in path/line order."""
    sites: list[dict[str, Any]] = []
    for fr in sorted(result.files, key=lambda f: f.relpath):
        if fr.language != "python" or not fr.stages:
            continue
        original_text = fr.stages[0].before
        for stage in fr.stages:
            if stage.family not in FAMILIES:
                continue
            seen: dict[str, int] = {}
            ordered = sorted(stage.findings, key=lambda f: (f.line, f.column))
            for i, finding in enumerate(ordered):
                if not finding.edits:
                    continue
                if finding.code not in KINDS:  # still one test per site: a skip that says why
                    sites.append({"id": f"{fr.relpath}:{finding.line}:{finding.code}", "path": fr.relpath,
                                  "rule": finding.code, "fix": finding.fix.value, "kind": "unmodelled",
                                  "skip": f"porter has no parity model for {finding.code} yet: check this "
                                  "rewrite by hand against the rule's documentation (`porter rule "
                                  f"{finding.code}`)"})
                    continue
                main_text = max(finding.edits, key=lambda e: e.end - e.start).text
                rank = seen.get(main_text, 0)
                seen[main_text] = rank + 1
                try:
                    sites.append(_site(fr.relpath, original_text, stage, finding, i, rank))
                except (LookupError, ValueError, SyntaxError, RecursionError) as exc:
                    sites.append({"id": f"{fr.relpath}:{finding.line}:{finding.code}", "path": fr.relpath,
                                  "rule": finding.code, "fix": finding.fix.value, "kind": KINDS[finding.code].kind,
                                  "skip": f"porter could not record this site ({type(exc).__name__})"})
    return sites


def render_module(sites: list[dict[str, Any]], depth: int) -> str:
    """The test module: the harness, then the site table and the test function."""
    table = pprint.pformat(sites, width=110, sort_dicts=True)
    tail = f'''

# -- the sites of this migration (written by porter) -------------------------------------------------

ROOT = Path(__file__).resolve().parents[{depth}]

SITES = {table}


def _param(site):
    marks = [pytest.mark.xfail(reason=site["xfail"], strict=False)] if site.get("xfail") else []
    return pytest.param(site, id=site["id"], marks=marks)


@pytest.mark.parametrize("site", [_param(s) for s in SITES])
def test_porter_parity(site):
    check_site(site, ROOT)
'''
    head = ("# porter: noqa  (this module names the original CUDA-only packages on purpose)\n"
            "# Generated by porter: per-site parity tests of this migration's rewrites.\n"
            "# Re-generate with `porter migrate` (or `porter apply --emit-parity`); edit freely.\n")
    return head + harness_source() + tail


def parity_files(result: RunResult, directory: str = PARITY_DIR) -> dict[str, str]:
    """``{relative path: text}`` of the parity module for ``result`` (empty when no site qualifies)."""
    sites = collect_sites(result)
    if not sites:
        return {}
    directory = directory.strip("/")
    depth = directory.count("/") + 1
    return {f"{directory}/{PARITY_FILE}": render_module(sites, depth)}


RUN_INSTRUCTIONS = (
    "Run `pytest tests/porter_parity` on the NVIDIA machine before switching (the original side uses the "
    "installed flash-attn / xformers / apex / bitsandbytes / Transformer Engine on the GPU) and again on the "
    "AMD machine after it (the original side uses the float64 references in the module). *passed*: the "
    "rewritten site computes what the original computed on inputs shaped like the site; *failed*: it does "
    "not, or the site can no longer be found because the code changed since the migration; *skipped*: the "
    "site needs a GPU, or the reference does not model an argument it passes (the reason says which); "
    "*xfailed*: an approximate (unsafe) rewrite whose difference its rule documents."
)


def parity_patch(result: RunResult, directory: str = PARITY_DIR) -> Patch | None:
    """The parity module as its own patch (``None`` when no rewritten site qualifies)."""
    files = parity_files(result, directory)
    if not files:
        return None
    sites = collect_sites(result)
    runnable = sum(1 for s in sites if not s.get("skip"))
    by_family: dict[str, int] = {}
    for s in sites:
        by_family[s["kind"]] = by_family.get(s["kind"], 0) + 1
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(by_family.items()))
    return Patch(
        name="parity-tests",
        title=f"Add parity tests for {len(sites)} rewritten site(s)",
        description=(
            f"One test per rewritten site ({counts}; {runnable} runnable, the rest skip with their reason). "
            "Each test reads the rewritten expression from the current source file and compares it with the "
            "original call on random inputs shaped like the site.\n\n" + RUN_INSTRUCTIONS
        ),
        verified="porter's own suite runs an emitted module against its references and against pure-torch "
        "stand-ins of the original packages, and checks that a broken rewrite (a dropped transpose, a lost "
        "scale, a changed eps) fails it.",
        review="Run the module on both vendors; a skipped site is one porter could not test for you.",
        changes=[FileChange(path, None, text.encode("utf-8")) for path, text in files.items()],
    )
