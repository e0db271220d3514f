"""One tree-sitter CUDA parse per file, shared by every family that reads CUDA/C++ source.

The first family that needs the tree of a file parses it and leaves it in ``ctx.cache`` under
:data:`CACHE_KEY`; the others find it there. An entry is valid only for the very text object it
was parsed from (a family that analyses another text, e.g. a masked copy, parses that one).
Importing this module imports nothing heavy: tree-sitter is loaded on the first parse.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

CACHE_KEY = "tree-sitter-cuda"


@lru_cache(maxsize=1)
def language() -> Any | None:
    """The tree-sitter CUDA ``Language`` (``None`` when the grammar is not installed)."""
    try:
        import tree_sitter_cuda
        from tree_sitter import Language
    except ImportError:  # pragma: no cover - declared dependency
        return None
    return Language(tree_sitter_cuda.language())


@lru_cache(maxsize=1)
def _parser() -> Any | None:
    lang = language()
    if lang is None:  # pragma: no cover - declared dependency
        return None
    from tree_sitter import Parser

    return Parser(lang)


class _Cached:
    """A cache entry: the tree and the text object it was parsed from."""

    def __init__(self, tree: Any, text: str) -> None:
        self.tree = tree
        self._porter_text = text


def parse(text: str, cache: dict | None = None) -> Any | None:
    """The tree-sitter tree of ``text``, shared through ``cache`` (a file's ``ctx.cache``) when
    given; ``None`` only when tree-sitter is not installed."""
    if cache is not None:
        got = cache.get(CACHE_KEY)
        if got is not None and getattr(got, "_porter_text", None) is text and hasattr(got, "tree"):
            return got.tree
    parser = _parser()
    if parser is None:  # pragma: no cover - declared dependency
        return None
    tree = parser.parse(text.encode("utf-8", "surrogatepass"))
    if cache is not None:
        cache[CACHE_KEY] = _Cached(tree, text)
    return tree
