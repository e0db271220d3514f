"""The per-file pass: pre-filter, one parse, all rules in one traversal, then fixes.

``analyze`` returns the findings for one file's text. ``fix`` applies fixes family by
family (in patch order) and records each family's step as a *stage*, so the patch series
is exactly the sequence of texts ``porter apply`` goes through.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from . import registry
from .config import Settings
from .findings import Applicability, Edit, Finding
from .framework import Family, FileContext, PyContext, RepoFacts, TokenPresence, load
from .suppress import Suppressions

T = TypeVar("T")


class _NoParserError(Exception):
    """Stands for LibCST's parser error while LibCST is not loaded (nothing can raise it then)."""


def _cst_error() -> tuple[type[Exception], ...]:
    """LibCST's parse errors if LibCST is loaded (only a LibCST family or a fix loads it): its
    ``ParserSyntaxError``, and the ``CSTValidationError`` its parser raises on code CPython also
    rejects (``"a" b"b"``)."""
    import sys

    mod = sys.modules.get("libcst")
    return (mod.ParserSyntaxError, mod.CSTValidationError) if mod is not None else (_NoParserError,)

MAX_ROUNDS = 12


def families_for(language: str, text: str, settings: Settings, relpath: str = "") -> list[Family]:
    """Families that can report anything on this file (language, pre-filter, selection)."""
    present = TokenPresence(text)  # a token several families name is searched for once
    return [fam for fam in _selected(settings, language) if fam.matches(text, language, relpath, present)]


_SELECTED: dict[tuple[int, str], tuple[Settings, list[Family]]] = {}


def _selected(settings: Settings, language: str) -> list[Family]:
    """Families of ``language`` with at least one enabled rule (once per settings object)."""
    key = (id(settings), language)
    hit = _SELECTED.get(key)
    if hit is not None and hit[0] is settings:
        return hit[1]
    table = registry.rules()
    chosen = [fam for fam in registry.families() if language in fam.languages
              and any(settings.is_enabled(r.code, r.default) for r in fam.rules if r.code in table)]
    if len(_SELECTED) > 64:
        _SELECTED.clear()
    _SELECTED[key] = (settings, chosen)
    return chosen


def _syntax_finding(relpath: str, exc: Exception) -> Finding:
    line = getattr(exc, "raw_line", None) or getattr(exc, "lineno", None) or 1
    col = getattr(exc, "raw_column", None)
    if col is None:
        col = (getattr(exc, "offset", None) or 1) - 1
    message = getattr(exc, "message", None) or str(exc).splitlines()[0]
    return Finding(
        code="PRT001",
        message=f"syntax error: {message}; file skipped",
        path=relpath,
        line=int(line),
        column=int(col) + 1,
        end_line=int(line),
        end_column=int(col) + 1,
    )


def _partial_finding(relpath: str, text: str) -> Finding:
    """CPython's parser refused a file LibCST parses (syntax newer than the Python running porter,
    e.g. PEP 695 ``type X = ...`` under 3.11): the LibCST rules ran, the ``ast``-tier ones could not."""
    import ast
    import sys

    try:
        ast.parse(text)
        exc: Exception = SyntaxError("unknown")
    except SyntaxError as err:
        exc = err
    found = _syntax_finding(relpath, exc)
    message = getattr(exc, "msg", None) or str(exc)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return replace(found, message=f"Python {version} (the Python running porter) cannot parse this file: {message}; "
                   "only the rules that run on LibCST analysed it, not the inventory rules that run on "
                   "CPython's ast: run porter on a Python that parses it for the full audit")


def _libcst_partial(relpath: str, exc: Exception) -> Finding:
    """LibCST refused a file CPython parses (grammar newer than the installed LibCST knows): the
    ``ast``-tier rules ran, the LibCST ones (the structural rewrites) could not."""
    found = _syntax_finding(relpath, exc)
    message = (getattr(exc, "message", None) or str(exc)).splitlines()[0]
    return replace(found, message=f"LibCST cannot parse this file ({message}); the rules that run on CPython's "
                   "ast analysed it, not the ones that run on LibCST (the structural rewrites): upgrade libcst "
                   "for the full audit")


_NESTING_MESSAGES = ("too many nested", "too many levels of indentation", "too many statically nested")


def python_guard(relpath: str, text: str) -> tuple[Finding | None, Any]:
    """Reject inputs that would crash LibCST's native parser (it has no recursion guard).

    CPython's own parser is cheap (about a tenth of LibCST's cost) and bounds nesting; code it
    cannot build (pathological depth) is reported instead of being handed to LibCST. Other
    syntax errors fall through to LibCST, which also knows newer grammar than this interpreter.
    """
    import ast

    try:
        return None, ast.parse(text)  # the tree also gives statement lines for lazy positions
    except (RecursionError, MemoryError):
        return _syntax_finding(relpath, ValueError("expression nesting too deep to parse safely")), None
    except SyntaxError as exc:
        if any(m in (exc.msg or "") for m in _NESTING_MESSAGES):
            return _syntax_finding(relpath, exc), None
    except ValueError as exc:  # e.g. NUL bytes
        return _syntax_finding(relpath, exc), None
    return None, None


def raw_findings(ctx: FileContext, fams: Sequence[Family]) -> list[Finding]:
    """Every finding the families report on ``ctx`` (no selection or suppression yet).

    Python runs in two tiers: the families' stdlib-``ast`` visitors share one traversal of the
    tree the parse guard built; LibCST is parsed only when a family with a LibCST visitor
    matched this file (raises ``cst.ParserSyntaxError`` when it cannot parse).
    """
    found: list[Finding] = []
    if ctx.language == "python":
        assert isinstance(ctx, PyContext)
        ast_fams = [f for f in fams if f.python_ast is not None]
        if ast_fams and ctx.tree is not None:
            from .pyast import walk

            ast_visitors = [load(f.python_ast)(ctx) for f in ast_fams if f.python_ast is not None]
            try:
                walk(ctx.tree, ast_visitors)
            except RecursionError:
                raise
            except Exception:  # noqa: BLE001 - one broken family must not hide the others
                ast_visitors = _ast_one_by_one(ctx, ast_fams, found)
            for av in ast_visitors:
                found.extend(av.findings)
        py_fams = [f for f in fams if f.python is not None]
        if py_fams and ctx.tree is not None:
            # each LibCST family's exact gate, decided on the ast tier: no LibCST parse when none holds
            py_fams = [f for f in py_fams if f.python_gate is None or load(f.python_gate)(ctx)]
        if py_fams and ctx.tree is not None:
            try:
                ctx.module  # noqa: B018 - parse here: a LibCST syntax error is not a family's crash
            except _cst_error() as exc:
                # CPython parsed it (the ast tier's findings stand), LibCST does not know the syntax
                found.append(_libcst_partial(ctx.relpath, exc))
                py_fams = []
        if py_fams:
            ctx.module  # noqa: B018 - parse here: a LibCST syntax error is the file's, not a family's crash
            visitors = [load(f.python)(ctx) for f in py_fams if f.python is not None]
            try:
                from .pycst import StatementTracker

                ctx.wrapper.visit_batched([StatementTracker(ctx), *visitors])
            except RecursionError:
                raise
            except Exception:  # noqa: BLE001 - one broken family must not hide the others
                visitors = _visit_one_by_one(ctx, py_fams, found)
            for v in visitors:
                found.extend(v.findings)
    for fam in fams:
        checker = fam.checkers.get(ctx.language)
        if checker is not None:
            try:
                found.extend(load(checker)(ctx))
            except RecursionError:
                raise
            except Exception as exc:  # noqa: BLE001
                found.append(_crash(ctx.relpath, fam.name, exc))
    return found


def _ast_one_by_one(ctx: PyContext, fams: Sequence[Family], found: list[Finding]) -> list:
    """Re-run the ast-tier families separately after a crash, reporting the one that failed."""
    from .pyast import walk

    survivors = []
    for fam in fams:
        assert fam.python_ast is not None
        visitor = load(fam.python_ast)(ctx)
        try:
            walk(ctx.tree, [visitor])
        except RecursionError:
            raise
        except Exception as exc:  # noqa: BLE001
            found.append(_crash(ctx.relpath, fam.name, exc))
            continue
        survivors.append(visitor)
    return survivors


def _crash(relpath: str, family: str, exc: BaseException) -> Finding:
    return Finding(code="PRT007", message=f"the {family} rules crashed on this file "
                   f"({type(exc).__name__}: {str(exc)[:200]}); their findings are missing", path=relpath)


def _visit_one_by_one(ctx: PyContext, fams: Sequence[Family], found: list[Finding]) -> list:
    """Re-run the Python families separately after a crash, reporting the one that failed."""
    survivors = []
    for fam in fams:
        assert fam.python is not None
        visitor = load(fam.python)(ctx)
        try:
            import libcst as cst

            cst.MetadataWrapper(ctx.module, unsafe_skip_copy=True).visit_batched([visitor])
        except RecursionError:
            raise
        except Exception as exc:  # noqa: BLE001
            found.append(_crash(ctx.relpath, fam.name, exc))
            continue
        survivors.append(visitor)
    return survivors


def make_context(
    relpath: str, text: str, language: str, settings: Settings, facts: RepoFacts | None, ast_tree: Any = None,
) -> FileContext:
    """Build the context; for Python this parses (raises on a syntax error)."""
    if language == "python":
        return PyContext(relpath, text, language, settings, facts, ast_tree=ast_tree)
    return FileContext(relpath, text, language, settings, facts)


def _supersede(findings: list[Finding]) -> list[Finding]:
    specific = [f for f in findings if not f.generic]
    if len(specific) == len(findings):
        return findings
    out = []
    for f in findings:
        if f.generic and any(
            (s.line, s.column) <= (f.line, f.column) and (f.end_line, f.end_column) <= (s.end_line, s.end_column)
            for s in specific
        ):
            continue
        out.append(f)
    return out


def select(findings: Iterable[Finding], ctx: FileContext) -> list[Finding]:
    """Apply rule selection, per-file ignores, supersession, then inline suppressions.

    Supersession runs before suppression: a ``# noqa`` on a site that a specific rule reports
    silences that site, and the generic finding the specific one replaced stays replaced.
    """
    table = registry.rules()
    settings = ctx.settings
    sup = Suppressions(ctx)
    enabled = []
    for f in findings:
        rule = table.get(f.code)
        default = rule.default if rule else True
        if not f.code.startswith("PRT00"):
            if not settings.is_enabled(f.code, default):
                continue
            if settings.ignored_in_file(f.code, ctx.relpath):
                continue
        enabled.append(f if f.path else replace(f, path=ctx.relpath))
    kept = [f for f in _supersede(enabled) if f.code.startswith("PRT00") or not sup.suppressed(f)]
    kept.sort(key=lambda f: f.sort_key)
    return kept


def _quiet(func: Callable[..., T]) -> Callable[..., T]:
    """Run ``func`` with the warnings Python raises about the target's own code switched off:
    ``ast.parse`` of a string with an invalid escape (``"\\d"``) warns (a SyntaxWarning on
    Python 3.12+, printed once per site as ``<unknown>:N: ...``; a DeprecationWarning before). They
    say nothing about porting, and under ``-W error`` they would turn a file into a parse error."""

    @functools.wraps(func)
    def quiet(*args: Any, **kwargs: Any) -> T:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            return func(*args, **kwargs)

    return quiet


@_quiet
def analyze(
    relpath: str, text: str, language: str, settings: Settings, facts: RepoFacts | None = None
) -> list[Finding]:
    """Selected findings for one file's text. A parse failure is itself a finding."""
    fams = families_for(language, text, settings, relpath)
    if not fams:
        return []
    tree = None
    if language == "python":
        problem, tree = python_guard(relpath, text)
        if problem is not None:
            return [problem]
    try:
        ctx = make_context(relpath, text, language, settings, facts, tree)
    except _cst_error() as exc:
        return [_syntax_finding(relpath, exc)]
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [_syntax_finding(relpath, exc if isinstance(exc, SyntaxError) else ValueError(str(exc) or type(exc).__name__))]
    try:
        if isinstance(ctx, PyContext) and ctx.tree is None:
            ctx.module  # noqa: B018 - CPython could not parse it: LibCST's verdict decides (PRT001)
        found = raw_findings(ctx, fams)
    except Exception as exc:  # noqa: BLE001 - only LibCST's parse error is the file's; the rest re-raise
        if not isinstance(exc, _cst_error()):
            raise
        return [_syntax_finding(relpath, exc)]
    if isinstance(ctx, PyContext) and ctx.tree is None and any(f.python_ast is not None for f in fams):
        found.append(_partial_finding(relpath, text))
    if isinstance(ctx, PyContext) and any(f.edits and f.fix != Applicability.NONE for f in found):
        from .fallbacks import guard

        if ctx.tree is not None:  # the ast tier's index: no LibCST parse just to guard a fix
            found = guard(found, ctx.text, ctx.ast_imports, lambda node: node.lineno)
        else:
            found = guard(found, ctx.text, ctx.imports, lambda node: ctx.position_of(node).start.line)
    return select(found, ctx)


# -- fixing ---------------------------------------------------------------------------------


@dataclass
class Stage:
    """One family's step on one file: ``before`` -> ``after`` (``wrap`` counts re-visits)."""

    family: str
    wrap: int
    before: str
    after: str
    findings: list[Finding] = field(default_factory=list)


@dataclass
class FixOutcome:
    text: str
    stages: list[Stage]
    fixed: list[Finding]
    remaining: list[Finding]
    new_files: dict[str, str] = field(default_factory=dict)
    # new files by the family that created them (for the patch series)
    new_files_by_family: dict[str, dict[str, str]] = field(default_factory=dict)
    # dist -> (">=X", sites): what the accepted fixes need from the nearest manifest
    needs: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)


def fixable(f: Finding, settings: Settings) -> bool:
    if not (f.edits or f.new_files):
        return False
    if f.fix == Applicability.SAFE:
        return True
    return f.fix == Applicability.UNSAFE and settings.unsafe_fixes


def _normalise_newlines(text: str, newline: str) -> str:
    if newline == "\n":
        return text
    return text.replace("\r\n", "\n").replace("\n", newline)


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping edits (any order) to ``text``."""
    out = []
    pos = 0
    for e in sorted(edits, key=lambda e: (e.start, e.end)):
        out.append(text[pos : e.start])
        out.append(e.text)
        pos = max(pos, e.end)
    out.append(text[pos:])
    return "".join(out)


def _accept(batch: Sequence[Finding]) -> list[Finding]:
    """Findings whose edits do not overlap an earlier accepted finding's edits."""
    taken: list[Edit] = []
    accepted = []
    for f in sorted(batch, key=lambda f: (f.edits[0].start if f.edits else -1)):
        edits = [e for e in f.edits if e not in taken]
        if any(e.start < t.end and t.start < e.end for e in edits for t in taken):
            continue
        if any(
            e.start == e.end == t.start == t.end and e.text != t.text for e in edits for t in taken
        ):
            pass  # two insertions at one point: both kept, in order
        taken.extend(edits)
        accepted.append(f)
    return accepted


def _key(f: Finding, text: str) -> tuple:
    return (f.code, f.message, tuple((text[e.start : e.end], e.text) for e in f.edits))


def _gate_context(settings: Settings, facts: RepoFacts | None) -> Any:
    from .gate import GateContext

    facts = facts or RepoFacts()
    extra = facts.extra
    return GateContext(
        pins=dict(facts.pins), has_manifest=facts.scope is not None, manifest=facts.scope or "",
        local_modules=frozenset(extra.get("local_modules", ())), unsafe=settings.unsafe_fixes,
        torchao_addable=settings.is_enabled("PRT805"), target_torch=settings.target_torch,
    )


def _apply_batch(text: str, batch: Sequence[Finding], language: str, newline: str,
                 exported: frozenset[str] = frozenset()) -> str:
    """The text after ``batch``'s edits and import bookkeeping (raises when it does not parse)."""
    edits = list(dict.fromkeys(e for f in batch for e in f.edits))
    edits = [Edit(e.start, e.end, _normalise_newlines(e.text, newline)) for e in edits]
    new = apply_edits(text, edits)
    if language == "python":
        adds = [s for f in batch for s in f.add_imports]
        removes = [s for f in batch for s in f.remove_imports]
        import libcst as cst

        from .pyfix import fix_imports

        new = fix_imports(new, adds, removes, exported)
        new = _normalise_newlines(new, newline) if newline != "\n" and "\r\n" not in new else new
        cst.parse_module(new)  # the fixed file must still parse
    return new


def _parse_errors() -> tuple[type[BaseException], ...]:
    return (*_cst_error(), SyntaxError, ValueError, RecursionError)


def _gate(before: str, after: str, batch: Sequence[Finding], gctx: Any) -> Any:
    from .gate import Verdict, check

    created = [p for f in batch for p, _ in f.new_files]
    try:
        return check(before, after, gctx, requires=[r for f in batch for r in f.requires], created=created)
    except RecursionError:
        return Verdict(False, "the fixed module is nested too deeply to check")
    except Exception as exc:  # noqa: BLE001 - a fix porter cannot check is not applied
        return Verdict(False, f"the semantic gate could not check the fix ({type(exc).__name__})")


def _site(f: Finding) -> str:
    return f"`{f.path}:{f.line}` {f.code}"


def _plain_relpath(path: str) -> bool:
    from .safewrite import check_relpath

    try:
        check_relpath(path)
    except ValueError:
        return False
    return True


@_quiet
def fix(
    relpath: str,
    text: str,
    language: str,
    settings: Settings,
    facts: RepoFacts | None = None,
    newline: str = "\n",
    existing: frozenset[str] = frozenset(),
) -> FixOutcome:
    """Apply every applicable fix, family by family, to a fixpoint.

    A Python step passes the semantic gate (:mod:`porter.gate`) before it is accepted; a fix
    that fails it is withheld: its finding stays, without the fix, with the reason.
    """
    findings = analyze(relpath, text, language, settings, facts)
    stages: list[Stage] = []
    fixed: list[Finding] = []
    failed: set[tuple] = set()
    withheld: dict[tuple, str] = {}
    errors: list[Finding] = []
    new_files: dict[str, str] = {}
    by_family: dict[str, dict[str, str]] = {}
    needs: dict[str, tuple[str, tuple[str, ...]]] = {}
    prev_order = -1
    wrap = 0
    order = {f.name: f.order for f in registry.families()}
    gctx = _gate_context(settings, facts) if language == "python" else None
    exported = frozenset(facts.extra.get("imported_names", ())) if facts is not None else frozenset()
    for _ in range(MAX_ROUNDS):
        candidates = [f for f in findings if fixable(f, settings) and _key(f, text) not in failed]
        if not candidates:
            break
        fam = min({registry.family_of(f.code) for f in candidates}, key=lambda n: (order.get(n, 0), n))
        batch = _accept([f for f in candidates if registry.family_of(f.code) == fam])
        outside = [path for f in batch for path, _ in f.new_files if not _plain_relpath(path)]
        if outside:  # the config check refuses such paths first; this guards every other way in
            failed.update(_key(f, text) for f in batch)
            errors.append(Finding(code="PRT007", message=f"fix by {fam} would create {outside[0]!r}, which is not "
                                  "a plain path inside the root; not applied", path=relpath,
                                  line=batch[0].line, column=batch[0].column))
            continue
        try:
            new = _apply_batch(text, batch, language, newline, exported)
        except _parse_errors() as exc:
            failed.update(_key(f, text) for f in batch)
            errors.append(
                Finding(
                    code="PRT007",
                    message=f"fix by {fam} produced invalid code ({str(exc).splitlines()[0]}); reverted",
                    path=relpath,
                    line=batch[0].line,
                    column=batch[0].column,
                    end_line=batch[0].end_line,
                    end_column=batch[0].end_column,
                )
            )
            continue
        step_needs: dict[str, str] = {}
        if gctx is not None and new != text:
            verdict = _gate(text, new, batch, gctx)
            if not verdict.ok:
                # find the fixes that fail on their own; the others go on as a smaller batch
                passing = []
                for f in batch:
                    try:
                        alone = _apply_batch(text, [f], language, newline, exported)
                    except _parse_errors():
                        withheld[_key(f, text)] = "the fix alone produces invalid code"
                        continue
                    v = _gate(text, alone, [f], gctx)
                    if v.ok:
                        passing.append(f)
                    else:
                        withheld[_key(f, text)] = v.reason
                if len(passing) == len(batch):
                    for f in batch:
                        withheld[_key(f, text)] = verdict.reason
                    passing = []
                failed.update(_key(f, text) for f in batch if f not in passing)
                if not passing:
                    continue
                batch = passing
                try:
                    new = _apply_batch(text, batch, language, newline, exported)
                except _parse_errors():
                    failed.update(_key(f, text) for f in batch)
                    continue
                verdict = _gate(text, new, batch, gctx)
                if not verdict.ok:
                    for f in batch:
                        withheld[_key(f, text)] = verdict.reason
                    failed.update(_key(f, text) for f in batch)
                    continue
            step_needs = verdict.needs
        created = {}
        for f in batch:
            for path, body in f.new_files:
                if path not in existing and path not in new_files:
                    created[path] = body
        if new == text and not created:
            failed.update(_key(f, text) for f in batch)
            continue
        if order.get(fam, 0) <= prev_order:
            wrap += 1
        prev_order = order.get(fam, 0)
        stages.append(Stage(fam, wrap, text, new, batch))
        fixed.extend(batch)
        for dist, spec in step_needs.items():
            merge_need(needs, dist, spec, tuple(_site(f) for f in batch))
        new_files.update(created)
        by_family.setdefault(fam if wrap == 0 else f"{fam}-{wrap + 1}", {}).update(created)
        text = new
        findings = analyze(relpath, text, language, settings, facts)
    else:
        errors.append(
            Finding(code="PRT007", message="fixes did not converge; stopped after "
                    f"{MAX_ROUNDS} rounds", path=relpath)
        )
    remaining = [_withhold(f, withheld.get(_key(f, text))) for f in findings if f.code != "PRT007"] + errors
    if settings.annotate:
        annotated = annotate(text, language, remaining)
        if annotated != text:
            stages.append(Stage(ANNOTATE, wrap, text, annotated, []))
            text = annotated
    return FixOutcome(text, stages, fixed, remaining, new_files, by_family, needs)


def merge_need(needs: dict[str, tuple[str, tuple[str, ...]]], dist: str, spec: str,
               sites: tuple[str, ...]) -> None:
    """Keep the strictest ``>=X`` per distribution, with the sites that need exactly that."""
    old = needs.get(dist)
    if old is None or _floor(spec) > _floor(old[0]):
        needs[dist] = (spec, sites)
    elif _floor(spec) == _floor(old[0]):
        needs[dist] = (old[0], old[1] + tuple(s for s in sites if s not in old[1]))


def _floor(spec: str) -> Any:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(spec.lstrip(">="))
    except InvalidVersion:
        return Version("0")


def _withhold(f: Finding, reason: str | None) -> Finding:
    """A fix the semantic gate refused becomes a flag that says why."""
    if reason is None or not fixable_any(f):
        return f
    return replace(f, fix=Applicability.NONE, edits=(), add_imports=(), remove_imports=(), new_files=(),
                   message=f"{f.message} [fix withheld: {reason}]", data={**f.data, "withheld": reason})


def fixable_any(f: Finding) -> bool:
    return bool(f.edits or f.new_files) and f.fix != Applicability.NONE


ANNOTATE = "annotate"
_ANNOTATE_PREFIX = {"python": "#", "cuda": "//", "shell": "#", "yaml": "#", "dockerfile": "#",
                    "requirements": "#", "conda": "#", "setup-cfg": "#", "pyproject": "#"}


def annotate(text: str, language: str, findings: Sequence[Finding]) -> str:
    """Insert a ``porter: CODE reason`` comment line above each flagged (unfixed) site.

    Only warning/error findings without an applied fix are annotated, once per line and code; a
    line that already carries the annotation is left alone, so annotating is idempotent. A
    Python result that no longer parses (a site inside a multi-line string) is abandoned.
    """
    from .registry import is_actionable

    prefix = _ANNOTATE_PREFIX.get(language)
    if prefix is None:
        return text
    lines = re.findall(r".*?(?:\r\n|\n|\r)|.+$", text, flags=re.S)
    by_line: dict[int, list[Finding]] = {}
    for f in findings:
        if f.code.startswith("PRT00") or not is_actionable(f) or f.line > len(lines):
            continue
        by_line.setdefault(f.line, []).append(f)
    if not by_line:
        return text
    out = list(lines)
    for line_no in sorted(by_line, reverse=True):
        idx = line_no - 1
        previous = lines[idx - 1] if idx > 0 else ""
        if previous.rstrip("\r\n").endswith("\\"):
            continue  # inside a macro or a continued line
        body = lines[idx]
        indent = body[: len(body) - len(body.lstrip(" \t"))]
        eol = "\r\n" if body.endswith("\r\n") or (not body.endswith("\n") and "\r\n" in text) else "\n"
        notes = []
        for f in by_line[line_no]:
            tag = f"porter: {f.code}"
            if tag in previous or any(tag in n for n in notes):
                continue
            message = f.message if len(f.message) <= 110 else f.message[:107] + "..."
            notes.append(f"{indent}{prefix} {tag} {message}{eol}")
        out[idx:idx] = notes
    result = "".join(out)
    if language == "python":
        import libcst as cst

        try:
            cst.parse_module(result)
        except (cst.ParserSyntaxError, RecursionError):
            return text
    return result
