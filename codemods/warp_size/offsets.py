"""Byte-to-character offsets, node text and the constructors of sites and edits."""

from __future__ import annotations

from tree_sitter import Node

from porter.findings import Applicability

from .common import Site


class Offsets:
    """One part of :class:`.engine.Analyser` (see the module docstring)."""

    # -- offsets ------------------------------------------------------------------------------------
    def c(self, byte: int) -> int:
        if self.ascii:
            return byte
        if self._b2c is None:
            table = [0] * (len(self.data) + 1)
            ci = 0
            bi = 0
            for ch in self.text:
                n = len(ch.encode("utf-8", "surrogatepass"))
                for k in range(n):
                    table[bi + k] = ci
                bi += n
                ci += 1
            table[bi] = ci
            self._b2c = table
        return self._b2c[byte]

    def t(self, node: Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")

    def span(self, node: Node) -> tuple[int, int]:
        return self.c(node.start_byte), self.c(node.end_byte)

    def site(self, code: str, node_or_span, message: str, edits=(), fix=Applicability.NONE, header=False,
             info: bool = False) -> Site:
        if isinstance(node_or_span, tuple):
            start, end = node_or_span
        else:
            start, end = self.span(node_or_span)
        s = Site(code, start, end, message, list(edits), fix if edits else Applicability.NONE, header and bool(edits),
                 info and not edits)
        self.sites.append(s)
        return s

    def edit(self, node: Node, text: str) -> tuple[int, int, str]:
        a, b = self.span(node)
        return (a, b, text)
