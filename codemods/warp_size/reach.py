"""Which headers a HIP build of the tree can include (for PRT524, warp-intrinsic overloads).

A user function named like a warp intrinsic with a 32-bit mask collides with HIP's 64-bit-mask
builtins only where hipcc compiles it. A header is *not reached by the HIP build* when every
``#include`` of it in the tree (direct, or through headers that are themselves not reached) sits
in a conditional branch that the HIP configuration of :mod:`.preproc` does not compile.

To decide that, the conditions are evaluated as usual (platform macros, the repository's own
platform-derived macros) plus one more class: a *project macro that nothing in the tree defines*
counts as undefined. Such a macro is

- not reserved (no leading underscore) and not named like a toolkit or library macro (CUDA, NV,
  HIP, ROCm, torch/ATen/c10, cub, thrust, version/compiler names) that system headers define, and
- never ``#define``\\ d in the tree's C/C++ sources, never named in its Python files outside
  comments (``define_macros=[...]``, ``-D`` flags of ``torch.utils.cpp_extension``), nor in its
  build, CI or documentation files (CMake, Make, Bazel, meson, shell, YAML/TOML/cfg, Markdown/rst).

Then no build the tree describes defines it. A backend switch like
``#ifdef MYLIB_USE_OTHER_FRAMEWORK / #include "other_helper.hpp" / #else / #include "torch_helper.hpp"``
whose macro is set only by another framework's own build tooling leaves ``other_helper.hpp`` (and
what it includes) outside every HIP build of the tree. A header included by nothing in the tree is
treated as reached (it may be a public header), and so is every non-header source file.

The result is a fact per header: the macros that exclude it. Findings there stay visible as notes.
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import tokenize
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .preproc import HIP, _builtin, scan

HEADER_EXT = (".h", ".cuh", ".hpp", ".hh", ".hxx", ".inl")
CXX_EXT = HEADER_EXT + (".cu", ".hip", ".cpp", ".cc", ".cxx", ".c")
_READ_CAP = 1 << 20
_WALK_CAP = 50_000

# a declaration (not a call) of a function named like a warp intrinsic: a type keyword follows "("
OVERLOAD_DECL = re.compile(
    rb"\b(?:__shfl(?:_up|_down|_xor)?(?:_sync)?|__ballot(?:_sync)?|__any(?:_sync)?|__all(?:_sync)?)\s*\(\s*"
    rb"(?:const\s+)?(?:unsigned|uint32_t|int)\b")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^">\n]+)[">]')
_COND_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|elifdef|elifndef)\b(.*)$")
_NOT_A_DEFINITION = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|elifdef|elifndef|else|endif|undef|error|"
                               r"warning|pragma)\b.*$", re.M)
_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_TOOLKIT = re.compile(r"CUDA|CUDART|CUBLAS|CUDNN|NVRTC|NV|HIP|ROCM|ROCm|HCC|AMD|TORCH|ATEN|AT_|C10|CUB|THRUST|"
                      r"VERSION|GNUC|CLANG|MSC|WIN|APPLE|LINUX|POSIX|NDEBUG|DEBUG|STDC|OPENMP|MPI|EIGEN|PYBIND",
                      re.I)
_BUILD_NAMES = {"CMakeLists.txt", "Makefile", "makefile", "GNUmakefile", "BUILD", "BUILD.bazel", "WORKSPACE",
                "meson.build", "SConstruct", "SConscript", "configure.ac", "configure", "Dockerfile",
                "setup.cfg", "pyproject.toml"}
_BUILD_EXT = (".cmake", ".mk", ".bzl", ".bazel", ".gn", ".gni", ".sh", ".bash", ".yml", ".yaml", ".toml", ".cfg",
              ".ini", ".in", ".md", ".rst", ".txt", ".py", ".pyx", ".json")
_HASH_COMMENT_EXT = (".cmake", ".mk", ".bzl", ".bazel", ".gn", ".gni", ".sh", ".bash", ".yml", ".yaml", ".toml",
                     ".cfg", ".ini")
_DIRECTIVE_LINE = re.compile(r"^[ \t]*#")


def _read(root: Path, rel: str) -> str | None:
    path = root / rel
    try:
        if path.is_symlink() or not path.is_file():
            return None
        with open(path, "rb") as fh:
            data = fh.read(_READ_CAP)
    except OSError:
        return None
    if b"\0" in data:
        return None
    return data.decode("utf-8", "replace")


def _py_code(text: str) -> str:
    """Python text without comments (strings and docstrings kept); the raw text if it does not tokenize."""
    out: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type != tokenize.COMMENT:
                out.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text
    return " ".join(out)


def _hash_code(text: str) -> str:
    """Build-file text without ``#`` comments (a line's text from an unquoted ``#`` on)."""
    lines = []
    for line in text.splitlines():
        quote = ""
        for i, ch in enumerate(line):
            if quote:
                if ch == quote:
                    quote = ""
            elif ch in "\"'":
                quote = ch
            elif ch == "#":
                line = line[:i]
                break
        lines.append(line)
    return "\n".join(lines)


def project_macro(name: str) -> bool:
    """A name that only the project itself would define (see the module docstring)."""
    if name.startswith("_") or _TOOLKIT.search(name):
        return False
    return _builtin(name, HIP) is None


class Reach:
    """Include reachability of headers from the HIP build of one tree."""

    def __init__(self, root: Path, relpaths: Sequence[str], known: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.relpaths = list(relpaths)
        self.known = dict(known or {})
        self._texts: dict[str, str | None] = {}
        self._includers: dict[str, list[tuple[str, int]]] | None = None
        self._mentioned: dict[str, bool] = {}
        self._others: list[tuple[str, str]] | None = None

    def text(self, rel: str) -> str | None:
        if rel not in self._texts:
            self._texts[rel] = _read(self.root, rel)
        return self._texts[rel]

    def includers(self, header: str) -> list[tuple[str, int]]:
        """(file, 0-based line) of every ``#include`` whose target has ``header``'s file name."""
        if self._includers is None:
            index: dict[str, list[tuple[str, int]]] = {}
            for rel in self.relpaths:
                if not rel.endswith(CXX_EXT):
                    continue
                text = self.text(rel)
                if not text or "include" not in text:
                    continue
                for i, line in enumerate(text.splitlines()):
                    m = _INCLUDE.match(line)
                    if m:
                        index.setdefault(posixpath.basename(m.group(1).strip()), []).append((rel, i))
            self._includers = index
        return [x for x in self._includers.get(posixpath.basename(header), []) if x[0] != header]

    # -- is a macro defined anywhere in the tree? -------------------------------------------------
    def _other_files(self) -> list[tuple[str, str]]:
        """(name, text) of the build, CI, Python and documentation files under the root."""
        if self._others is not None:
            return self._others
        from porter import express

        # files discovery never lists (build scripts, docs, ignored folders): no record can sign them
        express.unsigned_read("the warp_size pass read the tree's build and documentation files")
        out: list[tuple[str, str]] = []
        seen = 0
        root = str(self.root)
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in ("node_modules", "__pycache__")]
            for fn in filenames:
                seen += 1
                if seen > _WALK_CAP:
                    break
                if fn not in _BUILD_NAMES and not fn.endswith(_BUILD_EXT + CXX_EXT):
                    continue  # C/C++ files outside the run (ignored or excluded folders) may still define it
                rel = os.path.relpath(os.path.join(dirpath, fn), root).replace(os.sep, "/")
                text = self.text(rel)
                if text is not None:
                    out.append((fn, text))
            if seen > _WALK_CAP:
                break
        self._others = out
        return out

    def defined_in_tree(self, name: str) -> bool:
        """Whether anything in the tree may define ``name`` (conservative: any mention that is not a
        C/C++ conditional, a comment or another non-defining directive counts)."""
        if name in self._mentioned:
            return self._mentioned[name]
        word = re.compile(rf"(?:(?<!\w)|(?<=-D)|(?<=/D)){re.escape(name)}(?!\w)")  # also as a -D flag
        found = False
        for rel in self.relpaths:
            if not rel.endswith(CXX_EXT):
                continue
            text = self.text(rel)
            if not text or name not in text:
                continue
            code = _NOT_A_DEFINITION.sub("", _C_COMMENT.sub(" ", text))
            if word.search(code):
                found = True
                break
        if not found:
            for fn, text in self._other_files():
                if name not in text:
                    continue
                if fn.endswith(CXX_EXT):
                    code = _NOT_A_DEFINITION.sub("", _C_COMMENT.sub(" ", text))
                elif fn.endswith((".py", ".pyx")):
                    code = _py_code(text)
                elif fn.endswith(_HASH_COMMENT_EXT) or fn in ("CMakeLists.txt", "Makefile", "makefile",
                                                              "GNUmakefile", "BUILD", "WORKSPACE", "meson.build",
                                                              "Dockerfile", "setup.cfg", "pyproject.toml"):
                    code = _hash_code(text)
                else:
                    code = text
                if word.search(code):
                    found = True
                    break
        self._mentioned[name] = found
        return found

    # -- reachability ------------------------------------------------------------------------------
    def _undefined_here(self, text: str) -> dict[str, str]:
        """Project macros in ``text``'s conditionals that nothing in the tree defines."""
        names: set[str] = set()
        for line in text.splitlines():
            if not _DIRECTIVE_LINE.match(line):
                continue
            m = _COND_DIRECTIVE.match(line)
            if m:
                names.update(n for n in _IDENT.findall(_C_COMMENT.sub(" ", m.group(1))) if n != "defined")
        return {n: "none" for n in sorted(names)
                if n not in self.known and project_macro(n) and not self.defined_in_tree(n)}

    def excluded_by(self, header: str) -> tuple[str, ...] | None:
        """The tree-undefined macros that keep every inclusion of ``header`` out of the HIP build,
        or None when a HIP-compiled unit may include it."""
        why: set[str] = set()
        if self._reached(header, [header], why):
            return None
        return tuple(sorted(why))

    def _reached(self, header: str, stack: list[str], why: set[str]) -> bool:
        incl = self.includers(header)
        if not incl:
            return True  # included by nothing here: a public header, or used in ways porter cannot see
        for rel, line in incl:
            text = self.text(rel) or ""
            undefined = self._undefined_here(text)
            status = scan(text, {**self.known, **undefined}).status
            if line >= len(status) or status[line][HIP] != 0:
                if not rel.endswith(HEADER_EXT):
                    return True  # a source file the HIP build may compile
                if rel in stack:
                    continue
                if self._reached(rel, stack + [rel], why):
                    return True
                continue
            if not undefined or scan(text, self.known).status[line][HIP] == 0:
                continue  # a branch HIP does not compile anyway (a CUDA-only branch)
            needed = {n for n in undefined  # the macros this exclusion needs
                      if scan(text, {**self.known, **{k: v for k, v in undefined.items() if k != n}}
                              ).status[line][HIP] != 0}
            why.update(needed or undefined)
        return False


def hip_unreached_headers(root: Path, relpaths: Sequence[str], candidates: Iterable[str],
                          known: Mapping[str, str] | None = None) -> dict[str, tuple[str, ...]]:
    """For each candidate header no HIP-compiled file of the tree includes: the macros that exclude it."""
    reach = Reach(root, relpaths, known)
    out: dict[str, tuple[str, ...]] = {}
    for rel in candidates:
        why = reach.excluded_by(rel)
        if why is not None:
            out[rel] = why
    return out
