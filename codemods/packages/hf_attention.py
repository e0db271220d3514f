"""Repository-wide facts that decide whether a Hugging Face attention switch may change.

Switching ``attn_implementation="flash_attention_2"`` to ``"sdpa"`` is exact only when the string
reaches an upstream transformers model that implements SDPA. It is wrong when

- the repository keeps its own attention-class table keyed by the string (``*_ATTENTION_CLASSES``,
  ``ATTENTION_CLASSES``, any dict literal or subscript keyed by ``"flash_attention_2"``): its own
  model may map only ``eager``/``flash_attention_2`` (``KeyError: 'sdpa'``), or a patch replaces
  the flash entry (packed-sequence monkeypatches), which a changed string silently bypasses;
- other code compares against the string (``if config._attn_implementation == "flash_attention_2"``),
  so the switch changes more than the kernel;
- a repository model declares flash-attn support but not SDPA (``_supports_flash_attn_2 = True``
  without ``_supports_sdpa = True``): transformers rejects ``"sdpa"`` for it;
- the model comes from the Hub's remote code (``trust_remote_code``), which porter cannot read.

The scan is textual (a line-based pattern match that skips comment lines) and deliberately
conservative: a match in a docstring also counts. ``porter.runner.collect_facts`` runs it over the
repository once; each file merges it with a scan of its own text, so single-file runs and fixtures
see the same facts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

FACTS_KEY = "hf_attention"
TOKENS = ("flash_attention_2", "trust_remote_code", "_supports_flash_attn")

_FA2 = r"""['"]flash_attention_2['"]"""
_TABLE = re.compile(
    rf"{_FA2}\s*:"  # a dict literal keyed by the string
    rf"|\[\s*{_FA2}\s*\]"  # a subscript (lookup or patch)
    rf"|\.register\(\s*{_FA2}"  # AttentionInterface.register("flash_attention_2", fn)
    r"|\b\w*ATTENTION_CLASSES\b"  # LLAMA_ATTENTION_CLASSES, ATTENTION_CLASSES
    r"|\bflash_attention_2\s*=(?!=)"  # dict(flash_attention_2=...) (a keyword named like the string)
)
_KEYED = re.compile(
    rf"(?:==|!=)\s*{_FA2}|{_FA2}\s*(?:==|!=|(?:not\s+)?in\b)"
    rf"|\.get\(\s*{_FA2}|\bcase\s+{_FA2}"
    rf"|\.startswith\(\s*['\"]flash"
)
# a name other than an attn_implementation-like variable bound to the string: a constant porter does
# not trace (it may key a table or a comparison elsewhere)
_CONSTANT = re.compile(rf"^\s*(?P<name>[A-Za-z_]\w*)\s*(?::[^=\n]*)?=\s*{_FA2}\s*(?:#.*)?$")
_IMPL_LIKE = re.compile(r"(?:^|_)attn_impl|attention_impl", re.IGNORECASE)
_LONG = 2000  # longer lines are not pattern-matched (bounded work on hostile input)
_MEMBER = re.compile(r"\bin\s*[(\[{]")  # `x in ("sdpa", "flash_attention_2")`: checked with _FA2_AT
_FA2_AT = re.compile(_FA2)
_FA2_SUPPORT = re.compile(r"\b_supports_flash_attn(?:_2)?\s*=\s*True\b")
_SDPA_SUPPORT = re.compile(r"\b_supports_sdpa\s*=\s*True\b")
_REMOTE = re.compile(
    r"""\btrust_remote_code\s*=\s*(?!False\b|None\b|=)\S"""  # a keyword or assignment
    r"""|['"]trust_remote_code['"]\s*:\s*(?!False\b|None\b)\S"""  # a dict entry
    r"""|\btrust_remote_code\s*:[^=\n]*=\s*(?:field\([^#\n]*default\s*=\s*)?True\b"""  # a field default
)


@dataclass(frozen=True)
class Site:
    path: str
    line: int
    text: str

    def show(self) -> str:
        return f"{self.path}:{self.line} `{self.text}`"


@dataclass(frozen=True)
class AttentionFacts:
    """Where the repository dispatches on, patches or redefines the flash-attention string."""

    tables: tuple[Site, ...] = ()  # attention-class tables and lookups keyed by the string
    keyed: tuple[Site, ...] = ()  # comparisons and branches on the string, constants holding it
    fa2_only: tuple[Site, ...] = ()  # models that declare flash-attn support but not SDPA
    remote: tuple[Site, ...] = ()  # trust_remote_code that is not literally False

    def merge(self, other: AttentionFacts) -> AttentionFacts:
        def join(a: tuple[Site, ...], b: tuple[Site, ...]) -> tuple[Site, ...]:
            return tuple(dict.fromkeys(a + b))

        return AttentionFacts(join(self.tables, other.tables), join(self.keyed, other.keyed),
                              join(self.fa2_only, other.fa2_only), join(self.remote, other.remote))

    def blockers(self) -> list[str]:
        """Reasons, from anywhere in the repository, why the string must not change."""
        out = []
        if self.tables:
            out.append(f"the repository has its own attention table or patch keyed by the string "
                       f"({_first(self.tables)}): a model there may map only eager/flash_attention_2 "
                       "(KeyError: 'sdpa'), and a patched flash entry would be bypassed")
        if self.keyed:
            out.append(f"other code branches on the string or keeps it in a constant porter does not trace "
                       f"({_first(self.keyed)}), so the switch may change more than the kernel")
        if self.fa2_only:
            out.append(f"a repository model declares flash-attn support but not SDPA "
                       f"({_first(self.fa2_only)}); transformers rejects \"sdpa\" for it")
        return out


def _first(sites: tuple[Site, ...]) -> str:
    more = f" and {len(sites) - 1} more" if len(sites) > 1 else ""
    return sites[0].show() + more


def scan(relpath: str, text: str) -> AttentionFacts:
    """The facts one Python file contributes."""
    if not any(tok in text for tok in TOKENS):
        return AttentionFacts()
    tables: list[Site] = []
    keyed: list[Site] = []
    remote: list[Site] = []
    fa2: list[Site] = []
    for i, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        shown = stripped if len(stripped) <= 80 else stripped[:77] + "..."
        site = Site(relpath, i, shown)
        if len(line) > _LONG and ("flash_attention_2" in line or "trust_remote_code" in line):
            tables.append(site)  # a huge (generated or minified) line is not pattern-matched: assume the worst
            continue
        if "flash_attention_2" in line or "ATTENTION_CLASSES" in line:
            const = _CONSTANT.match(line)
            member = _MEMBER.search(line)
            if _KEYED.search(line) or member is not None and _FA2_AT.search(line, member.end()) is not None:
                keyed.append(site)
            elif _TABLE.search(line):
                tables.append(site)
            elif const is not None and not _IMPL_LIKE.search(const.group("name")):
                keyed.append(site)
        elif ".startswith(" in line and _KEYED.search(line):
            keyed.append(site)
        if "trust_remote_code" in line and _REMOTE.search(line):
            remote.append(site)
        if "_supports_flash_attn" in line and _FA2_SUPPORT.search(line):
            fa2.append(site)
    if fa2 and _SDPA_SUPPORT.search(text):
        fa2 = []
    return AttentionFacts(tuple(tables), tuple(keyed), tuple(fa2), tuple(remote))


def collect(files: Iterable[tuple[str, str]]) -> AttentionFacts:
    """The facts of a set of (relpath, text) Python files."""
    out = AttentionFacts()
    for relpath, text in files:
        found = scan(relpath, text)
        if found != AttentionFacts():
            out = out.merge(found)
    return out


# transformers releases probed against a pin; "sdpa" and `attn_implementation=` arrived in 4.36
_TRANSFORMERS = ("4.30.2", "4.33.3", "4.35.2", "4.36.2", "4.38.2", "4.41.2", "4.46.3", "4.51.3", "4.57.1", "5.0.0",
                 "5.24.0")
SDPA_SINCE = (4, 36)


def transformers_admits_sdpa(spec: str | None) -> bool:
    """Whether a transformers pin admits a release with ``attn_implementation="sdpa"`` (unknown: yes)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    text = (spec or "").strip()
    if not text:
        return True
    if text.startswith("==") and "," not in text and "*" not in text:
        try:
            return Version(text.lstrip("=").strip()).release[:2] >= SDPA_SINCE
        except InvalidVersion:
            return True
    try:
        sset = SpecifierSet(text)
    except InvalidSpecifier:
        return True
    return any(sset.contains(v, prereleases=True) for v in _TRANSFORMERS if Version(v).release[:2] >= SDPA_SINCE)


def facts_for(extra: Mapping[str, object], relpath: str, text: str) -> AttentionFacts:
    """The repository's facts (when a run collected them) merged with this file's own."""
    repo = extra.get(FACTS_KEY)
    own = scan(relpath, text)
    return repo.merge(own) if isinstance(repo, AttentionFacts) else own
