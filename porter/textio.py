"""Reading and writing source files without losing a byte.

Decoding keeps what is needed to write the file back exactly: the codec, a UTF-8 BOM and
the newline convention (text is kept with its original line endings).
"""

from __future__ import annotations

import codecs
import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
# O_NONBLOCK: opening a FIFO named like a source file must not hang the run (fstat then refuses it)
READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
              | getattr(os, "O_CLOEXEC", 0))


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """At most ``limit`` bytes of a regular file, without following a final symlink or blocking.

    Raises OSError when it cannot be opened, is not a regular file, or is larger than ``limit``.
    """
    fd = os.open(path, READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{os.fspath(path)}: not a regular file")
        if st.st_size > limit:
            raise OSError(f"{os.fspath(path)}: larger than {limit} bytes")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(f"{os.fspath(path)}: larger than {limit} bytes")
    return data


class SourceError(Exception):
    """A file that cannot be analysed: the code names the engine rule (PRT00x)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Decoded:
    text: str
    encoding: str  # codec name used to decode
    bom: bool
    newline: str  # "\n", "\r\n" or "\r" (dominant convention)
    exact: bool = True  # encoding each line on its own gives back the original bytes exactly

    def encode(self, text: str) -> bytes:
        if codecs.lookup(self.encoding).name in _BIJECTIVE:
            data = text.encode(self.encoding)
        else:
            # line by line: a line porter did not edit gets exactly the bytes it had (checked by
            # ``exact`` when the file was read); a stateful codec cannot carry state across lines
            data = b"".join(line.encode(self.encoding) for line in text.splitlines(keepends=True))
        return (codecs.BOM_UTF8 + data) if self.bom else data

    def decode_back(self, data: bytes) -> str:
        """Decode bytes produced by :meth:`encode` (to check that a text survives the trip)."""
        body = data[3:] if self.bom and data.startswith(codecs.BOM_UTF8) else data
        return body.decode(self.encoding)


# codecs whose decode/encode is a byte-exact round trip for every input they decode
_BIJECTIVE = frozenset({"utf-8", "ascii", "iso8859-1"})  # as codecs.lookup() names them


def round_trips(text: str, body: bytes, encoding: str) -> bool:
    """Whether encoding ``text`` line by line in ``encoding`` gives back ``body`` byte for byte.

    cp932 and big5 map several byte sequences to one character, utf-7 and the iso-2022 codecs
    carry state: for them decode → encode can change bytes in lines nobody edited.
    """
    if codecs.lookup(encoding).name in _BIJECTIVE:
        return True
    try:
        return b"".join(line.encode(encoding) for line in text.splitlines(keepends=True)) == body
    except (UnicodeError, LookupError):
        return False


def detect_newline(text: str) -> str:
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    cr = text.count("\r") - crlf
    if crlf > lf and crlf >= cr:
        return "\r\n"
    if cr > lf:
        return "\r"
    return "\n"


def decode(data: bytes, *, python: bool) -> Decoded:
    """Decode ``data``; raise SourceError for binary or undecodable content."""
    if b"\x00" in data[:8192] or (len(data) > 8192 and b"\x00" in data):
        raise SourceError("PRT003", "binary file (contains NUL bytes); skipped")
    bom = data.startswith(codecs.BOM_UTF8)
    body = data[3:] if bom else data
    encoding = "utf-8"
    if python:
        try:
            enc, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as exc:  # bad cookie or BOM/cookie conflict
            raise SourceError("PRT002", f"cannot determine encoding: {exc}") from None
        encoding = "utf-8" if enc in ("utf-8-sig", "utf-8") else enc
    try:
        text = body.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        raise SourceError("PRT002", f"not valid {encoding}: {exc}") from None
    return Decoded(text=text, encoding=encoding, bom=bom, newline=detect_newline(text),
                   exact=round_trips(text, body, encoding))


def read_source(path: Path, *, python: bool, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[bytes, Decoded]:
    """Read ``path`` without following a final symlink; raise SourceError on any problem."""
    try:
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        raise SourceError("PRT005", "file vanished before it could be read") from None
    except OSError as exc:
        raise SourceError("PRT005", f"cannot open: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError("PRT005", "not a regular file")
        if st.st_size > max_bytes:
            raise SourceError(
                "PRT004", f"file too large ({st.st_size} bytes > max-file-size {max_bytes}); skipped"
            )
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise SourceError("PRT005", f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise SourceError("PRT004", f"file too large (> max-file-size {max_bytes} bytes); skipped")
    return data, decode(data, python=python)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder + rename).

    The file's permission bits are kept. A symlink is never written through.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise SourceError("PRT006", "refusing to write through a symlink")
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=".porter-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
