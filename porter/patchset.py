"""Patch sets: ``git apply``-compatible unified diffs, grouped per rule family.

A :class:`PatchSeries` is an ordered list of :class:`Patch` objects, each holding the file
changes one family (or HIPify) made. Applied in order with ``git apply`` they reproduce
exactly what ``porter apply`` writes.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CONTEXT = 3


@dataclass(frozen=True)
class FileChange:
    """One file's change: ``None`` on either side means the file is absent there."""

    path: str  # relative to the root, '/'-separated
    before: bytes | None
    after: bytes | None
    mode: int | None = None  # file mode for new files (e.g. 0o644); None keeps git's default

    @property
    def kind(self) -> str:
        if self.before is None:
            return "add"
        if self.after is None:
            return "delete"
        return "modify"


@dataclass
class Patch:
    name: str  # family name (file-name safe), e.g. "attention"
    title: str  # one line
    description: str = ""  # what it changes and why (Markdown)
    verified: str = ""  # what porter verified
    review: str = ""  # what a human must still check
    changes: list[FileChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # per-site review items (file:line: reason)

    def render(self) -> bytes:
        return render_changes(self.changes)

    def message(self) -> str:
        """The commit message: what the patch changes, why, what was verified, what needs a human."""
        parts = [self.title, ""]
        if self.description:
            parts += [self.description.strip(), ""]
        if self.verified:
            parts += ["Verified: " + self.verified.strip(), ""]
        if self.review:
            parts += ["Needs a human: " + self.review.strip(), ""]
        if self.notes:
            parts += ["Sites:"] + [f"- {one_line(n)}" for n in self.notes[:200]]
            if len(self.notes) > 200:
                parts.append(f"- … and {len(self.notes) - 200} more")
            parts.append("")
        return "\n".join(parts).rstrip() + "\n"

    def render_mail(self, number: int, total: int) -> bytes:
        """The patch in ``git format-patch`` shape: ``git am`` and ``git apply`` both take it."""
        message = self.message().split("\n", 1)
        subject = one_line(f"[PATCH {number}/{total}] {self.name}: {message[0]}")
        body = _mail_body(message[1].strip("\n") if len(message) > 1 else "")
        stat = "".join(f" {quote_path(c.path)} ({c.kind})\n" for c in sorted(self.changes, key=lambda c: c.path))
        head = (
            "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            "From: porter <porter@localhost>\n"
            "Date: Thu, 1 Jan 1970 00:00:00 +0000\n"
            f"Subject: {subject}\n\n{body}\n---\n{stat}\n"
        )
        return head.encode("utf-8") + self.render()

    @property
    def files(self) -> list[str]:
        return [c.path for c in self.changes]


_SPECIAL = re.compile(r'[\x00-\x1f"\\\x7f]')
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# lines git mailsplit / mailinfo / apply would read as a new mail, the end of the message or a patch header
_MAIL_SYNTAX = ("From ", ">From ", "---", "+++", "diff ", "Index:", "@@", "GIT binary patch", "rename ", "copy ",
                "old mode", "new mode", "new file mode", "deleted file mode", "similarity index", "index ")


def one_line(text: str) -> str:
    """``text`` with control characters escaped: a file name from the target cannot start a new line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}" if m.group(0) != "\t" else " ", text)


def _mail_body(body: str) -> str:
    """The message body with every line git would parse as mail or patch syntax indented by a space.

    Paths and notes come from the target; even a line built from them must not end the message,
    start a new mail or inject a diff that ``git am``/``git apply`` would apply.
    """
    return "\n".join(" " + line if line.startswith(_MAIL_SYNTAX) else line for line in body.split("\n"))


def quote_path(path: str) -> str:
    """Quote a path the way git does (C-style, octal for non-ASCII bytes) when needed."""
    if not _SPECIAL.search(path) and all(ord(c) < 128 for c in path):
        return path
    out = ['"']
    for byte in path.encode("utf-8", "surrogateescape"):
        ch = chr(byte)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif byte < 0x20 or byte >= 0x7F:
            out.append(f"\\{byte:03o}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _prefixed(prefix: str, path: str) -> str:
    quoted = quote_path(path)
    if quoted.startswith('"'):
        return '"' + prefix + quoted[1:]
    return prefix + quoted


def _lines(data: bytes) -> list[bytes]:
    """Lines as git sees them: only ``\n`` ends a line (a lone ``\r`` is an ordinary byte).

    ``bytes.splitlines`` also splits at a lone ``\r``, which would put a "No newline at end of
    file" marker in the middle of a file (CR-only files, a stray CR in a comment) and give a patch
    ``git apply`` rejects.
    """
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _range(start: int, count: int) -> str:
    if count == 1:
        return f"{start}"
    return f"{start},{count}"


def _emit(out: list[bytes], marker: bytes, line: bytes) -> None:
    if line.endswith(b"\n"):
        out.append(marker + line)
    else:
        out.append(marker + line + b"\n\\ No newline at end of file\n")


def unified_hunks(a: Sequence[bytes], b: Sequence[bytes], context: int = CONTEXT) -> list[bytes]:
    """Hunks of a unified diff between two line lists (lines keep their endings)."""
    out: list[bytes] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        a1, a2 = group[0][1], group[-1][2]
        b1, b2 = group[0][3], group[-1][4]
        a_start = a1 + 1 if a2 > a1 else a1
        b_start = b1 + 1 if b2 > b1 else b1
        out.append(f"@@ -{_range(a_start, a2 - a1)} +{_range(b_start, b2 - b1)} @@\n".encode())
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for line in a[i1:i2]:
                    _emit(out, b" ", line)
                continue
            for line in a[i1:i2]:
                _emit(out, b"-", line)
            for line in b[j1:j2]:
                _emit(out, b"+", line)
    return out


def render_change(change: FileChange) -> bytes:
    """One file's section of a git-style patch."""
    a_name = _prefixed("a/", change.path)
    b_name = _prefixed("b/", change.path)
    head = [f"diff --git {a_name} {b_name}\n".encode("utf-8", "surrogateescape")]
    if change.kind == "add":
        head.append(f"new file mode {oct(change.mode or 0o100644)[2:]:0>6}\n".encode())
        head.append(b"--- /dev/null\n")
        head.append(f"+++ {b_name}\n".encode("utf-8", "surrogateescape"))
        before: list[bytes] = []
        after = _lines(change.after or b"")
    elif change.kind == "delete":
        head.append(b"deleted file mode 100644\n")
        head.append(f"--- {a_name}\n".encode("utf-8", "surrogateescape"))
        head.append(b"+++ /dev/null\n")
        before = _lines(change.before or b"")
        after = []
    else:
        head.append(f"--- {a_name}\n".encode("utf-8", "surrogateescape"))
        head.append(f"+++ {b_name}\n".encode("utf-8", "surrogateescape"))
        before = _lines(change.before or b"")
        after = _lines(change.after or b"")
    hunks = unified_hunks(before, after)
    if not hunks and change.kind == "modify":
        return b""
    if not hunks:  # empty new or deleted file
        return head[0] + head[1]
    return b"".join(head + hunks)


def render_changes(changes: Iterable[FileChange]) -> bytes:
    return b"".join(render_change(c) for c in sorted(changes, key=lambda c: c.path))


_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class PatchSeries:
    patches: list[Patch] = field(default_factory=list)
    manual: list[str] = field(default_factory=list)  # what remains for manual review

    def nonempty(self) -> list[Patch]:
        return [p for p in self.patches if p.changes]

    def render(self) -> bytes:
        return b"".join(p.render() for p in self.nonempty())

    def combined_changes(self) -> list[FileChange]:
        """One change per file, original → final text over every patch of the series, in path order."""
        first: dict[str, FileChange] = {}
        last: dict[str, FileChange] = {}
        for patch in self.nonempty():
            for change in patch.changes:
                first.setdefault(change.path, change)
                last[change.path] = change
        out = []
        for path in sorted(first):
            a, b = first[path], last[path]
            if a.before != b.after:
                out.append(FileChange(path, a.before, b.after, b.mode if a.before is None else a.mode))
        return out

    def render_combined(self) -> bytes:
        """The whole series as one diff with one section per file (what ``apply --dry-run`` prints)."""
        return render_changes(self.combined_changes())

    def file_names(self) -> list[str]:
        return [f"{i:04d}-{_SAFE_NAME.sub('-', p.name)}.patch" for i, p in enumerate(self.nonempty(), 1)]

    def index_markdown(self, title: str = "porter patch series") -> str:
        lines = [f"# {title}", "", "Apply in order from the repository root:", "", "```sh"]
        names = self.file_names()
        lines += [f"git apply {n}" for n in names] or ["# nothing to apply"]
        lines += ["```", ""]
        if names:
            lines += ["or, to get one commit per patch (`--keep-cr` keeps the CR of CRLF files, which `git am` "
                      "strips by default):", "", "```sh", "git am --keep-cr " + " ".join(names), "```", ""]
        for name, patch in zip(names, self.nonempty(), strict=True):
            lines += [f"## {name}: {patch.title}", ""]
            if patch.description:
                lines += [patch.description.strip(), ""]
            lines += [f"Files: {len(patch.changes)}", ""]
            lines += [f"- `{quote_path(c.path)}` ({c.kind})" for c in sorted(patch.changes, key=lambda c: c.path)]
            lines.append("")
            if patch.verified:
                lines += [f"**Verified:** {patch.verified.strip()}", ""]
            if patch.review:
                lines += [f"**Needs a human:** {patch.review.strip()}", ""]
            if patch.notes:
                lines += ["Sites changed:", ""] + [f"- {one_line(n)}" for n in patch.notes] + [""]
        if self.manual:
            lines += ["## Remaining for manual review", ""] + [f"- {m}" for m in self.manual] + [""]
        return "\n".join(lines).rstrip() + "\n"

    def write_dir(self, directory: Path, title: str = "porter patch series") -> list[Path]:
        """Write ``0001-<family>.patch``... and ``INDEX.md`` into ``directory``."""
        from .textio import atomic_write

        directory.mkdir(parents=True, exist_ok=True)
        written = []
        patches = self.nonempty()
        for number, (name, patch) in enumerate(zip(self.file_names(), patches, strict=True), 1):
            path = directory / name
            atomic_write(path, patch.render_mail(number, len(patches)))
            written.append(path)
        index = directory / "INDEX.md"
        atomic_write(index, self.index_markdown(title).encode("utf-8"))
        written.append(index)
        return written
