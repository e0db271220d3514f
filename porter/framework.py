"""What a rule family is, and the context it gets for each file.

A *family* groups related rules (attention, optimizers, warp size...). It declares:

- its rules (stable codes, docs),
- a text pre-filter (``tokens``): the family runs on a file only when one token occurs in it,
- a LibCST visitor class for Python (all families' visitors share one parse and one
  batched traversal), and/or checkers for other languages (CUDA through tree-sitter,
  requirements, TOML, Dockerfiles...).

Families live in ``porter.codemods`` (the top-level ``codemods/`` folder); every module
there that defines ``FAMILY`` is registered automatically.
"""

from __future__ import annotations

import bisect
import importlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .findings import Applicability, Category, Edit, Finding, Rule, Severity

if TYPE_CHECKING:
    import libcst as cst

    from .config import Option, Settings
    from .pyast import AstVisitor
    from .pycst import PyVisitor
    from .pyimports import ImportIndex


def __getattr__(name: str) -> Any:
    # the LibCST visitor base lives in porter.pycst, imported only by families that use LibCST
    if name in ("PyVisitor", "StatementTracker"):
        from . import pycst

        return getattr(pycst, name)
    raise AttributeError(name)


class LazyFacts(Mapping[str, Any]):
    """``RepoFacts.extra`` whose cross-file entries are gathered only when a rule asks for one.

    The eager entries are cheap (file lists, pins). The producers read the whole tree (every
    Python file for Hugging Face attention dispatch and cross-module imports, every header for
    warp macros): a pre-commit check of one ordinary file never pays for them. ``touched`` says
    whether anything asked for a produced entry since it was last reset (the per-file cache keys
    such a file's result on the produced facts, and a file that never asked on nothing).
    """

    def __init__(self, eager: Mapping[str, Any], producers: Sequence[Callable[[], Mapping[str, Any]]] = ()) -> None:
        self._data: dict[str, Any] = dict(eager)
        self._eager = frozenset(self._data)
        self._producers = list(producers)
        self.touched: set[str] = set()  # produced entries asked for (or "*": all of them)

    def force(self) -> None:
        while self._producers:
            self._data.update(self._producers.pop(0)())

    @property
    def produced(self) -> dict[str, Any]:
        """The entries the producers gave (forces them)."""
        self.force()
        return {k: v for k, v in self._data.items() if k not in self._eager}

    def __getitem__(self, key: str) -> Any:
        if key not in self._eager:
            self.touched.add(key)
            self.force()
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        if key not in self._eager:
            self.touched.add(str(key))
            self.force()
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        self.touched.add("*")
        self.force()
        return iter(self._data)

    def __len__(self) -> int:
        self.touched.add("*")
        self.force()
        return len(self._data)

    def digests(self, keys: Iterable[str]) -> dict[str, str]:
        """A stable digest of each produced entry named (``"*"``: all of them together)."""
        import hashlib

        self.force()
        out = {}
        for key in sorted(keys):
            value = self.produced if key == "*" else self._data.get(key)
            out[key] = hashlib.blake2b(repr(stable(value)).encode(), digest_size=8).hexdigest()
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        # a worker process gets the facts computed once here, still telling touched entries apart
        self.force()
        eager = {k: v for k, v in self._data.items() if k in self._eager}
        return (_rebuild_lazy, (eager, self.produced))


def stable(value: Any) -> Any:
    """``value`` with sets sorted and mappings ordered, so its repr is the same in every process
    (a cache key must not depend on the hash seed)."""
    if isinstance(value, Mapping):
        return sorted((repr(k), stable(v)) for k, v in value.items())
    if isinstance(value, (set, frozenset)):
        return sorted(repr(stable(v)) for v in value)
    if isinstance(value, (list, tuple)):
        return [stable(v) for v in value]
    return value


def _rebuild_lazy(eager: Mapping[str, Any], produced: Mapping[str, Any]) -> LazyFacts:
    facts = LazyFacts(eager, [lambda: produced])
    facts.force()
    return facts


@dataclass(frozen=True)
class RepoFacts:
    """Facts about the whole target repository, gathered once before the per-file pass.

    ``pins`` maps a canonical distribution name (``flash-attn``) to the version specifier
    the repo's manifests give it (``==2.0.4``, ``>=2.3``); ``""`` when named without one.
    """

    pins: Mapping[str, str] = field(default_factory=dict)
    manifests: tuple[str, ...] = ()
    # Filled for the second phase of a run (manifest files are processed after every
    # Python/C++ file): top-level modules the repo's Python files import (after fixes in
    # apply mode), and the rule codes whose fixes this run applied.
    imports: frozenset[str] = frozenset()
    applied: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = field(default_factory=dict)
    # Sub-projects: the pins of each folder that holds a manifest ("" is the root), each
    # already completed with the pins of its closest ancestors for distributions it does not
    # name. ``scope`` is the folder whose pins ``pins`` holds (None: not specialised to a file).
    scopes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    scope: str | None = None

    def pin(self, dist: str) -> str | None:
        return self.pins.get(dist)

    def scope_of(self, relpath: str) -> str | None:
        """The folder of the manifest nearest to ``relpath`` (its closest ancestor that has one)."""
        if not self.scopes:
            return None
        parts = relpath.split("/")[:-1]
        for n in range(len(parts), -1, -1):
            folder = "/".join(parts[:n])
            if folder in self.scopes:
                return folder
        return None

    def for_path(self, relpath: str) -> RepoFacts:
        """These facts with the pins of the manifest nearest to ``relpath``.

        A repository without manifests keeps its repo-wide pins; a file outside every folder
        with a manifest gets no pins (except a configured target torch, kept under "").
        """
        if not self.scopes:
            return self
        folder = self.scope_of(relpath)
        if folder is None:
            return replace(self, pins=dict(self.extra.get("unscoped_pins", {})), scope=None)
        return replace(self, pins=self.scopes[folder], scope=folder)


Checker = Callable[["FileContext"], Iterable[Finding]]
_NEWLINE = re.compile(r"\r\n|\r|\n")


@cache
def _import_ref(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def load(ref: Any) -> Any:
    """A family's visitor, checker or pre-scan: the object itself, or imported from its
    ``"package.module:name"`` reference on first use. Families name their heavy parts by
    reference so that a run loads only what the pre-filter selected (no LibCST, no tree-sitter
    for a file no such rule can match)."""
    return _import_ref(ref) if isinstance(ref, str) else ref


@dataclass(frozen=True)
class Family:
    name: str  # short id, used in patch file names ("attention")
    title: str  # one line for patch messages and reports
    order: int  # application order of its patch in a series (lower first)
    rules: tuple[Rule, ...]
    tokens: tuple[str, ...] = ()  # text pre-filter; empty means "always run"
    # Visitors, checkers and the pre-scan may be given as "package.module:name" references (see
    # ``load``), so declaring a family imports nothing heavy.
    python: type[PyVisitor] | str | None = None  # LibCST tier: parsed only when this family matches
    # stdlib-ast tier (porter.pyast): detection without LibCST; a family may have both, each rule in one
    python_ast: type[AstVisitor] | str | None = None
    # Python-only pre-filter replacing ``tokens`` on Python files (None: ``tokens`` apply); C++ tokens
    # such as ``#include`` or ``__all`` say nothing about a Python file
    python_tokens: tuple[str, ...] | None = None
    # A cheap exact test on the stdlib-ast tier (``ctx.tree``, ``ctx.ast_imports``) that must hold for
    # the LibCST visitor to report anything (e.g. "the file imports flash_attn or xformers"); when it
    # fails, LibCST is not parsed for this family. A "module:name" reference to ``(PyContext) -> bool``.
    python_gate: Callable[[PyContext], bool] | str | None = None
    # Python files this family reads, by base name (empty: every Python file), e.g. ("setup.py",)
    python_files: tuple[str, ...] = ()
    checkers: Mapping[str, Checker | str] = field(default_factory=dict)  # language -> checker
    description: str = ""  # what its patch changes and why (Markdown)
    verified: str = ""  # what porter's test-suite verifies for this family
    review: str = ""  # what a human still needs to check after its patch
    # Repo-wide pre-scan over the files of its languages (root, relpaths) -> entries merged into
    # RepoFacts.extra for every file of the run; must only read inside root.
    repo_facts: Callable[[Path, Sequence[str]], Mapping[str, Any]] | str | None = None
    options: tuple[Option, ...] = ()  # its [tool.porter.<family>] keys (porter.config.Option)

    @property
    def languages(self) -> frozenset[str]:
        langs = set(self.checkers)
        if self.python is not None or self.python_ast is not None:
            langs.add("python")
        return frozenset(langs)

    def matches(self, text: str, language: str = "", relpath: str = "",
                present: Mapping[str, bool] | None = None) -> bool:
        """The pre-filter: can this family report anything on this file?

        ``present`` answers "does ``text`` hold this token" (``TokenPresence``: each token is
        searched once per file however many families name it); by default the text is searched.
        """
        if present is None:
            present = TokenPresence(text)
        tokens = self.tokens
        if language == "python":
            if self.python_files and relpath.rsplit("/", 1)[-1] not in self.python_files:
                return bool(self.checkers.get("python")) and (not tokens or any(present[t] for t in tokens))
            if self.python_tokens is not None:
                tokens = self.python_tokens
        if not tokens or any(present[tok] for tok in tokens):
            return True
        # a token ending in a newline (an identifier then the line's end) also matches at the end
        # of a text whose last line has none
        return any(tok[-1:] == "\n" and text.endswith(tok[:-1]) for tok in tokens)


class TokenPresence(dict):
    """``{token: whether the text holds it}``, each token searched for on first use."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def __missing__(self, token: str) -> bool:
        found = self[token] = token in self.text
        return found


class FileContext:
    """One file being analysed: its text, language, settings and lazily built parses."""

    def __init__(
        self,
        relpath: str,
        text: str,
        language: str,
        settings: Settings,
        facts: RepoFacts | None = None,
    ) -> None:
        self.relpath = relpath
        self.text = text
        self.language = language
        self.settings = settings
        self.facts = facts or RepoFacts()
        self._line_starts: list[int] | None = None
        self.cache: dict[str, Any] = {}  # shared parses (e.g. the tree-sitter tree)

    # -- positions ----------------------------------------------------------------------
    @property
    def line_starts(self) -> list[int]:
        """Offsets where each line starts (``\n``, ``\r\n`` and a lone ``\r`` end a line)."""
        if self._line_starts is None:
            text = self.text
            if "\r" in text:
                self._line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]
            else:
                starts = [0]
                find = text.find
                i = find("\n")
                while i >= 0:
                    starts.append(i + 1)
                    i = find("\n", i + 1)
                self._line_starts = starts
        return self._line_starts

    def offset(self, line: int, column0: int) -> int:
        """Offset of 1-based ``line`` and 0-based character ``column0``."""
        starts = self.line_starts
        if line - 1 >= len(starts):
            return len(self.text)
        return min(starts[line - 1] + column0, len(self.text))

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of an offset."""
        idx = bisect.bisect_right(self.line_starts, offset) - 1
        return idx + 1, offset - self.line_starts[idx] + 1

    def line_text(self, line: int) -> str:
        starts = self.line_starts
        if line < 1 or line > len(starts):
            return ""
        end = starts[line] if line < len(starts) else len(self.text)
        return self.text[starts[line - 1] : end].rstrip("\r\n")

    def finding(
        self,
        code: str,
        message: str,
        start: int,
        end: int | None = None,
        *,
        replacement: str | None = None,
        fix: Applicability = Applicability.NONE,
        **kwargs: Any,
    ) -> Finding:
        """A finding over ``text[start:end]``; ``replacement`` makes it a fix of that range."""
        end = start if end is None else end
        line, col = self.position(start)
        end_line, end_col = self.position(end)
        edits = tuple(kwargs.pop("edits", ()))
        if replacement is not None:
            edits = (Edit(start, end, replacement),) + edits
        return Finding(
            code=code,
            message=message,
            path=self.relpath,
            line=line,
            column=col,
            end_line=end_line,
            end_column=end_col,
            fix=fix if edits or kwargs.get("new_files") else Applicability.NONE,
            edits=edits,
            **kwargs,
        )


class PyContext(FileContext):
    """A Python file: the stdlib ``ast`` tree (cheap, always) and, built only when a LibCST
    family needs them, the LibCST module, its metadata wrapper and the import index."""

    def __init__(self, *args: Any, ast_tree: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tree: Any = ast_tree  # ast.Module, or None when this interpreter cannot parse the file
        self._ast = ast_tree
        self._module: cst.Module | None = None
        self._wrapper: cst.MetadataWrapper | None = None
        self._imports: ImportIndex | None = None
        self._ast_imports: Any = None
        self._ascii: bool | None = None
        self._full: Mapping[cst.CSTNode, Any] | None = None
        self._partial: dict[cst.CSTNode, Any] = {}
        self._done: set[int] = set()
        self._starts: list[int] | None = None
        self._top_index: dict[int, int] | None = None
        self.current_statement: int | None = None  # set by the engine's traversal tracker

    # -- LibCST tier (lazy) -----------------------------------------------------------------
    @property
    def module(self) -> cst.Module:
        """The LibCST module (parsed on first use; raises ``cst.ParserSyntaxError``)."""
        if self._module is None:
            import libcst as cst

            self._module = cst.parse_module(self.text)
        return self._module

    @property
    def wrapper(self) -> cst.MetadataWrapper:
        if self._wrapper is None:
            import libcst as cst

            self._wrapper = cst.MetadataWrapper(self.module, unsafe_skip_copy=True)
        return self._wrapper

    @property
    def imports(self) -> ImportIndex:
        if self._imports is None:
            from .pyimports import ImportIndex

            self._imports = ImportIndex(self.module)
        return self._imports

    @property
    def _top(self) -> dict[int, int]:
        if self._top_index is None:
            self._top_index = {id(stmt): i for i, stmt in enumerate(self.module.body)}
        return self._top_index

    @property
    def cst_parsed(self) -> bool:
        return self._module is not None

    # -- stdlib-ast tier --------------------------------------------------------------------
    @property
    def ast_imports(self) -> Any:
        """The file's imports resolved over the ``ast`` tree (``porter.pyast_imports``)."""
        if self._ast_imports is None:
            from .pyast_imports import AstImportIndex

            self._ast_imports = AstImportIndex(self.tree)
        return self._ast_imports

    def _char_offset(self, line: int, byte_col: int) -> int:
        starts = self.line_starts
        if line - 1 >= len(starts):
            return len(self.text)
        base = starts[line - 1]
        if self._ascii is None:
            self._ascii = self.text.isascii()
        if self._ascii:
            return min(base + byte_col, len(self.text))
        prefix = self.line_text(line).encode("utf-8")[:byte_col]
        return min(base + len(prefix.decode("utf-8", errors="replace")), len(self.text))

    def ast_span(self, node: Any) -> tuple[int, int]:
        """Character offsets of an ``ast`` node (its columns are UTF-8 byte offsets)."""
        start = self._char_offset(node.lineno, node.col_offset)
        end_line = getattr(node, "end_lineno", None) or node.lineno
        end_col = getattr(node, "end_col_offset", None)
        end = self._char_offset(end_line, end_col) if end_col is not None else start
        return start, end

    @property
    def positions(self) -> Mapping[cst.CSTNode, Any]:
        """Every node's position (LibCST's position pass: a full code generation)."""
        if self._full is None:
            from libcst.metadata import PositionProvider

            self._full = self.wrapper.resolve(PositionProvider)
        return self._full

    def position_of(self, node: cst.CSTNode) -> Any:
        """One node's position, as cheaply as possible.

        LibCST computes positions by generating the code of the whole module, which costs more
        than parsing it. porter generates only the top-level statement being visited (its first
        line comes from CPython's parse of the file), and falls back to the full pass for a node
        outside it; a file no rule reports on pays nothing.
        """
        if self._full is not None:
            return self._full[node]
        found = self._partial.get(node)
        if found is not None:
            return found
        index = self.current_statement
        if index is not None and index not in self._done:
            self._done.add(index)
            self._position_statement(index)
            found = self._partial.get(node)
            if found is not None:
                return found
        if self._statement_starts() is not None:
            # asked outside the statement being visited (e.g. from leave_Module): generate the
            # remaining statements one by one until the node turns up; never more than one
            # full pass in total, since each statement is generated once
            for i in range(len(self.module.body)):
                if i in self._done:
                    continue
                self._done.add(i)
                self._position_statement(i)
                found = self._partial.get(node)
                if found is not None:
                    return found
        return self.positions[node]

    def _statement_starts(self) -> list[int] | None:
        if self._starts is None:
            import ast

            import libcst as cst

            try:
                tree = self._ast if self._ast is not None else ast.parse(self.text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._starts = []
                return None
            body = tree.body
            starts: list[int] = []
            j = 0
            for stmt in self.module.body:
                if j >= len(body):
                    self._starts = []
                    return None
                first = body[j]
                if isinstance(stmt, cst.SimpleStatementLine):
                    j += len(stmt.body)
                    line = first.lineno
                else:
                    j += 1
                    decorators = getattr(first, "decorator_list", None) or []
                    line = min([first.lineno] + [d.lineno for d in decorators])
                    if decorators and getattr(stmt, "decorators", None):
                        line -= len(stmt.decorators[0].leading_lines)
                starts.append(line - len(stmt.leading_lines))
            self._starts = starts if j == len(body) else []
        return self._starts or None

    def _position_statement(self, index: int) -> None:
        from libcst.metadata.position_provider import PositionProvidingCodegenState

        starts = self._statement_starts()
        if starts is None:
            return

        class _Sink:
            _computed: dict[cst.CSTNode, Any] = {}

        sink = _Sink()
        sink._computed = self._partial
        state = PositionProvidingCodegenState(
            default_indent=self.module.default_indent,
            default_newline=self.module.default_newline,
            provider=sink,  # type: ignore[arg-type]
        )
        state.line = starts[index]
        state.column = 0
        self.module.body[index]._codegen(state)

    def code_for(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)


def rule(
    code: str,
    name: str,
    family: str,
    summary: str,
    category: Category,
    *,
    severity: Severity = Severity.WARNING,
    fix: Applicability = Applicability.NONE,
    effort_hours: float = 0.0,
    explanation: str = "",
    example: str = "",
    default: bool = True,
) -> Rule:
    """Shorthand used by the families' rule tables."""
    return Rule(
        code=code,
        name=name,
        family=family,
        summary=summary,
        category=category,
        severity=severity,
        fix=fix,
        effort_hours=effort_hours,
        explanation=explanation,
        example=example,
        default=default,
    )
