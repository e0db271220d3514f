"""The express lane: a re-run of a whole-tree audit or check answered before porter loads anything.

``porter audit --format json`` or ``porter check .`` (any format with a plain-text renderer, on
stdout) over a tree that has not changed since the last run prints the same report and exits the
same way. The full run proves that through its warm-run
record (:class:`porter.runner.RunRecord`), but getting there costs the command line, the settings,
discovery and the record itself (~0.2 s on 2,300 files). The express lane keeps, per exact
invocation, what that proof rested on and the bytes it printed, and answers from it when every
input still has the signature it had:

* every analysed file, every folder discovery listed, every ``.gitignore`` it read, every folder
  the pins are gathered from and every manifest and lock file read there, listed by discovery or
  not (``lstat``: type, size, modification and change times, inode);
* the ``.git`` probes above the root (none may exist for a walked tree), or, under git, the
  listing git gives again (re-run through :mod:`porter.proc`) and every listed path;
* the config files the settings could come from (``porter.toml``, ``.porter.toml``,
  ``pyproject.toml`` of the root, and ``--config`` files);
* porter's own code and its parsing libraries (:func:`code_stamp`), the interpreter and its module
  search path and flags, the working folder, the arguments and the environment variables porter
  reads.
* the paths named on the command line (root, paths, ``--config`` files) still resolve through no
  symbolic link (a folder above the root moved away and replaced by a link to it keeps every
  signature, but the full run would name the link's target as the root).

A record is written only for a run that printed nothing else on stderr than progress and the
check's one-line summary (a warning is never swallowed), whose inputs all predate it by
:data:`SETTLE_NS` (an edit within the same clock tick as porter's ``lstat`` would keep every
signature: such inputs are not vouched for), that saw no symbolic link (whose target porter cannot
sign; nor a root, path or ``--config`` named through one), that read nothing no record can sign
(:func:`unsigned_read`) and whose stdout prints its text as its encoding's plain bytes
(:func:`_plain_codec`). Records are files in the user's cache folder, authenticated with the
per-user secret of the audit cache, so the target cannot plant one; a cache folder inside the tree
(``HOME`` is the checkout) is not used at all.

This module imports only ``os`` and ``sys`` at load time; everything else it needs on a hit is
from the standard library and small.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

FORMAT = 2
MAX_RECORD_BYTES = 256 * 1024 * 1024
MAX_RECORDS = 64  # express records kept (one per distinct invocation)
# inputs whose modification or change time is this close to the moment porter signed them are
# not vouched for (an edit in the same file-system clock tick keeps every signature)
SETTLE_NS = 1_000_000_000
# what porter's command line reads from the environment (the record is per value)
ENV_KEYS = ("HOME", "XDG_CACHE_HOME", "PORTER_TRUST_GIT_DIR", "PORTER_DEBUG")
_RECORD_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_CLOEXEC", 0))

Sig = list[int] | None


# -- the user's cache folder, its secret, porter's code ----------------------------------------


def user_cache_dir() -> str:
    """porter's folder in the user's cache: ``$XDG_CACHE_HOME/porter`` or ``~/.cache/porter``."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if base and os.path.isabs(base):
        return os.path.join(base, "porter")
    home = os.path.expanduser("~")
    if home == "~":
        raise KeyError("HOME")
    return os.path.join(home, ".cache", "porter")


def cache_secret(base: str, *, create: bool = True) -> bytes | None:
    """The per-user key that authenticates porter's cache files (``secret`` in the user's cache,
    mode 0600, owned by the user). A target repository cannot know it, so it cannot forge a record;
    None when it cannot be read (or, with ``create``, created) safely."""
    import stat

    path = os.path.join(base, "secret")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(2):
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            if not create:
                return None
            try:
                os.makedirs(base, mode=0o700, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            except FileExistsError:
                continue  # another porter created it meanwhile: read that one
            except OSError:
                return None
            import secrets

            try:
                os.write(fd, secrets.token_hex(32).encode())
            finally:
                os.close(fd)
            continue
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            own = not hasattr(os, "geteuid") or st.st_uid == os.geteuid()
            if not stat.S_ISREG(st.st_mode) or not own or st.st_mode & 0o077:
                return None  # not ours, or readable by others: do not trust it
            key = os.read(fd, 256).strip()
        finally:
            os.close(fd)
        return key if len(key) >= 32 else None
    return None


_STAMP: list[str] = []


# the libraries whose behaviour the reports rest on (parsers, pattern and version matching)
DEPENDENCIES = ("libcst", "tree_sitter", "tree_sitter_cuda", "pathspec", "packaging", "yaml")


def code_stamp() -> str:
    """A digest of porter's own installed code (file names, sizes, times, inodes) and of where its
    dependencies' entry modules are and their signatures: a record written by another build of
    porter (an upgrade, an edited development install) or over other libraries is never reused."""
    if _STAMP:
        return _STAMP[0]
    import hashlib
    import importlib.util

    import porter

    bases = list(porter.__path__)
    for sub in ("porter.codemods", "porter.hipify_wrappers"):  # their own folders in a development install
        spec = importlib.util.find_spec(sub)
        for location in (spec.submodule_search_locations or []) if spec is not None else []:
            if not any(os.path.commonpath([location, b]) == b for b in bases):
                bases.append(location)
    h = hashlib.blake2b(digest_size=8)
    for base in bases:
        for folder, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".json", ".h", ".txt")):
                    try:
                        st = os.stat(os.path.join(folder, name))
                    except OSError:
                        continue
                    # the change time and inode too: a reinstall from a reproducible build keeps sizes and times
                    h.update(f"{folder}/{name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\n"
                             .encode("utf-8", "surrogateescape"))
    for dep in DEPENDENCIES:  # an upgrade rewrites a package's files: its entry module's signature moves
        try:
            spec = importlib.util.find_spec(dep)
            origin = spec.origin if spec is not None else None
            st = os.stat(origin) if origin else None
        except (ImportError, ValueError, OSError):
            origin, st = None, None
        line = f"{dep}\0{origin}\0" + (f"{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}" if st else "")
        h.update((line + "\n").encode("utf-8", "surrogateescape"))
    _STAMP.append(h.hexdigest())
    return _STAMP[0]


def clear_code_stamp() -> None:
    _STAMP.clear()


def sig(path: str) -> Sig:
    """What an input is checked by: file type, size, modification and change times, inode; None
    when nothing is there (its appearing is a change too)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_mode >> 12, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _settled(s: Sig, since_ns: int) -> bool:
    return s is None or max(s[2], s[3]) < since_ns - SETTLE_NS


# -- tracing what a run read -------------------------------------------------------------------


class _Trace:
    def __init__(self, key: str, base: str, secret: bytes | None) -> None:
        import time

        self.key = key
        self.base = base
        self.secret = secret
        self.started_ns = time.time_ns()
        self.inputs: dict[str, Sig] = {}
        self.git: list[list[Any]] = []
        self.refused: list[str] = []
        self.named: dict[str, None] = {}  # in the order named
        self.stderr: _Watch | None = None


_TRACE: list[_Trace] = []


def tracing() -> bool:
    """Whether this process may write an express record (the lane missed on an eligible command)."""
    return bool(_TRACE)


def note(path: str) -> None:
    """``path`` is an input of this run: sign it now, before it is read or listed."""
    if _TRACE and path not in _TRACE[0].inputs:
        _TRACE[0].inputs[path] = sig(path)


def note_git_probes(directory: str) -> bool:
    """Sign the ``.git`` entries porter looks for from ``directory`` up to the file system's root
    (see :func:`porter.proc.locate`); whether any of them exists."""
    found = False
    probe = os.path.abspath(directory)
    while True:
        path = os.path.join(probe, ".git")
        note(path)
        found = found or (bool(_TRACE) and _TRACE[0].inputs.get(path) is not None)
        parent = os.path.dirname(probe)
        if parent == probe:
            return found
        probe = parent


def note_git(directory: str, names: Sequence[str]) -> None:
    """git listed ``names`` under ``directory``: the lane lists again (through :mod:`porter.proc`)
    and compares, and signs every listed path."""
    if _TRACE:
        _TRACE[0].git.append([directory, _digest_names(names)])
        for name in names:
            note(os.path.join(directory, name))


def refuse(reason: str) -> None:
    """This run read something the lane cannot sign (a symbolic link's target, git's opinion of an
    ignored folder): no record."""
    if _TRACE:
        _TRACE[0].refused.append(reason)


_UNSIGNED = [0]


def unsigned_read(reason: str) -> None:
    """This process read what no record can sign (a walk of the tree's other files for cross-file
    facts): neither an express record nor the warm-run record may vouch for the run. Counted in
    every process (a worker's count reaches the runner through its results)."""
    _UNSIGNED[0] += 1
    refuse(reason)


def unsigned_reads() -> int:
    """How many reads :func:`unsigned_read` reported in this process so far."""
    return _UNSIGNED[0]


def note_config(root: str, configs: Iterable[str]) -> None:
    """The files the settings of ``root`` can come from (see :func:`porter.config.resolve`)."""
    if not _TRACE:
        return
    candidates = [os.path.join(root, n) for n in ("porter.toml", ".porter.toml", "pyproject.toml")]
    named = [c for c in configs if "=" not in c]
    note_named(named)
    candidates += [os.path.abspath(c) for c in named]
    for path in candidates:
        note(path)
        s = _TRACE[0].inputs.get(path)
        if s is not None and s[0] == 0o12:  # a symlink: its target's content is not signed
            refuse(f"{path} is a symbolic link")


def note_setting_path(root: str, rel: str) -> None:
    """A path-valued setting ``rel`` (``header-dir``, a target's ``cache-dir``) is checked to stay in
    ``root`` once links are resolved: sign every component down to the first that does not exist
    (one made later, in a folder no signature covers, could be a link out: a config error); a
    link on the way is refused (its target is not signed)."""
    if not _TRACE:
        return
    probe = root
    for part in rel.split("/"):
        if part in ("", "."):
            continue
        probe = os.path.join(probe, part)
        note(probe)
        s = _TRACE[0].inputs.get(probe)
        if s is None:
            return
        if s[0] == 0o12:
            refuse(f"{probe} is a symbolic link")
            return


def note_named(paths: Iterable[str]) -> None:
    """Paths from the command line (the root, the paths, ``--config`` files): one resolved through a
    symbolic link (``repo`` -> a checkout, ``link/../porter.toml``) names whatever the link points
    at when porter runs, which no signature follows: no record."""
    if not _TRACE:
        return
    for path in paths:
        _TRACE[0].named.setdefault(path, None)
        if _through_link(path):
            refuse(f"{path} is named through a symbolic link")


def _through_link(path: str) -> bool:
    """Whether resolving ``path`` as typed (``..`` included) from the working folder, component by
    component, meets a symbolic link (the working folder itself is physical: os.getcwd())."""
    import stat

    probe = os.sep if os.path.isabs(path) else os.getcwd()
    for part in path.split(os.sep):
        if part in ("", "."):
            continue
        probe = os.path.join(probe, part)  # not normalised: "link/.." is the link's target's parent
        try:
            if stat.S_ISLNK(os.lstat(probe).st_mode):
                return True
        except OSError:
            return False  # nothing there: the full run says so
    return False


def _digest_names(names: Sequence[str]) -> str:
    import hashlib

    return hashlib.blake2b("\0".join(names).encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()


class _Watch:
    """sys.stderr, remembering what was written to it. Code that reaches for its binary ``buffer``
    (click does, on an ASCII stream) writes past the watch: such a run is never vouched for."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.text: list[str] = []
        self.bypassed = False

    def write(self, s: Any) -> int:
        n = self._stream.write(s)  # first: a write the stream refuses (click probes with b"") is no output
        self.text.append(s if isinstance(s, str) else bytes(s).decode("utf-8", "replace"))
        return n  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":
            self.bypassed = True
        return getattr(self._stream, name)


def watch_stderr() -> None:
    """Watch this process's stderr (a worker's: the parent's watch does not see it)."""
    if sys.stderr is not None and not isinstance(sys.stderr, _Watch):
        sys.stderr = _Watch(sys.stderr)  # type: ignore[assignment]


def stderr_written() -> tuple[int, bool] | None:
    """How much was written to this process's watched stderr so far, and whether anything reached
    for its buffer; None when it is not watched."""
    watch = sys.stderr
    return (len(watch.text), watch.bypassed) if isinstance(watch, _Watch) else None


_PROGRESS = r"porter: \d+/\d+ files \(\d+%\), [0-9.]+ files/s, \d+ s\n"


def _only_progress(text: str, then: str = "") -> bool:
    """Whether ``text`` (what went to stderr) is progress lines and then exactly ``then``."""
    import re

    return re.fullmatch(f"(?:{_PROGRESS})*", text[: len(text) - len(then)]) is not None and text.endswith(then)


# -- the record --------------------------------------------------------------------------------


def _key(argv: Sequence[str]) -> str:
    import hashlib
    import json

    stream = sys.stdout
    # the interpreter's setup too: PYTHONPATH (sys.path) can put other modules ahead of porter's
    words = [FORMAT, sys.version, sys.executable, sys.path, list(sys.flags), sys.warnoptions, os.getcwd(), list(argv),
             [os.environ.get(k) for k in ENV_KEYS],
             [getattr(stream, "encoding", None), getattr(stream, "errors", None)]]
    return hashlib.blake2b(json.dumps(words).encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()


def in_tree(base: str, trees: Iterable[str]) -> bool:
    """Whether the user's cache folder ``base`` lies in one of ``trees`` (the folders a command may
    read: its working folder, its root and paths; ``--opt=value`` words count by their value). A
    cache folder inside the target (HOME is the checkout, as in some containers) holds the
    target's files: its secret and records could be the target's own, so porter keeps no cache there."""
    try:
        real = os.path.realpath(base)
        for tree in trees:
            if tree.startswith("--") and "=" in tree:
                tree = tree.split("=", 1)[1]
            if not tree or not os.path.isdir(tree):
                continue
            top = os.path.realpath(tree)
            if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
                return True
    except (OSError, ValueError):
        return True
    return False


def _path(base: str, key: str) -> str:
    return os.path.join(base, "express", f"{key}.rec")


def _mac(secret: bytes, key: str, body: bytes) -> bytes:
    import hashlib
    import hmac

    return hmac.new(secret, f"porter-express/{FORMAT}\0{key}\0".encode() + body, hashlib.sha256).hexdigest().encode()


def _read(path: str) -> bytes | None:
    import stat

    try:
        fd = os.open(path, _RECORD_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        own = not hasattr(os, "geteuid") or st.st_uid == os.geteuid()
        if not stat.S_ISREG(st.st_mode) or not own or st.st_size > MAX_RECORD_BYTES:
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _eligible(argv: Sequence[str]) -> bool:
    # POSIX only: elsewhere the full run's text stream translates newlines, the recorded bytes do not
    if os.name != "posix" or not argv or argv[0] not in ("audit", "check"):
        return False
    if any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return False  # click's shell completion (_PORTER_COMPLETE=...): the full run prints completions
    return not any(a in ("-h", "--help", "--no-cache", "-") or a.startswith(("-o", "--output")) for a in argv)


def answer(argv: Sequence[str]) -> int | None:
    """Print the report of ``porter <argv>`` from its express record and return the exit code, or
    None (nothing printed) when there is no valid record; then, for an eligible command, this
    process traces its inputs so that the full run can write one."""
    if not _eligible(argv):
        return None
    try:
        base = user_cache_dir()
    except (KeyError, RuntimeError, OSError):
        return None
    try:
        key = _key(argv)
    except OSError:  # no working folder: the full run says so
        return None
    except Exception:  # noqa: BLE001 - the lane is an optimisation: anything odd goes to the full run
        return None
    try:
        if in_tree(base, [os.getcwd(), *argv[1:]]):
            return None
        secret = cache_secret(base, create=False)  # none yet: the full run creates it, the offer reads it
        hit = _check(_path(base, key), key, secret) if secret is not None else None
    except Exception:  # noqa: BLE001
        return None
    stream = getattr(sys.stdout, "buffer", None)
    if hit is None or stream is None:
        _TRACE[:] = [_Trace(key, base, secret)]
        return None
    out, err, code = hit
    try:
        sys.stdout.flush()
        stream.write(out)
        stream.flush()
    except OSError as exc:  # a closed pipe: what the full command line says and returns then
        if sys.stderr is not None:
            sys.stderr.write(f"porter: internal error: {type(exc).__name__}: {exc}\n")
        try:  # the interpreter's last flush must not fail again
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, stream.fileno())
            os.close(fd)
        except (OSError, ValueError, AttributeError):
            pass
        return 2
    if err and sys.stderr is not None:
        sys.stderr.write(err)
        sys.stderr.flush()
    return code


def _check(path: str, key: str, secret: bytes) -> tuple[bytes, str, int] | None:
    """The recorded (stdout bytes, stderr text, exit code) when the record is authentic and every
    input it names is unchanged."""
    import hmac
    import json

    data = _read(path)
    if not data:
        return None
    mac, sep, body = data.partition(b"\n")
    if not sep or not hmac.compare_digest(mac, _mac(secret, key, body)):
        return None
    size, sep, rest = body.partition(b"\n")
    try:
        meta = json.loads(rest[: int(size)])
        if meta["format"] != FORMAT or meta["stamp"] != code_stamp():
            return None
        for path_, s in meta["inputs"]:
            if sig(path_) != s:
                return None
        for path_ in meta["named"]:
            # a folder on the way turned into a link: every signature holds through it (the same
            # inodes), but the full run resolves the root through it and names another one
            if _through_link(str(path_)):
                return None
        for directory, digest in meta["git"]:
            if not _git_same(directory, digest):
                return None
        out = rest[int(size):]
        exit_code = int(meta["exit"])
        err = str(meta["err"])
    except (ValueError, KeyError, TypeError):
        return None
    return out, err, exit_code


def _git_same(directory: str, digest: str) -> bool:
    from pathlib import Path

    from . import proc
    from .discovery import _git_files

    proc.register_untrusted_root(directory)
    listed = _git_files(Path(directory))
    return listed is not None and _digest_names(listed) == digest


def offer(text: str, exit_code: int, vouched: Iterable[tuple[str, Sig]], err: str = "") -> bool:
    """See :func:`_offer`; the lane is an optimisation: whatever goes wrong in it, the run goes on."""
    try:
        return _offer(text, exit_code, vouched, err)
    except Exception:  # noqa: BLE001
        _TRACE.clear()
        return False


def _offer(text: str, exit_code: int, vouched: Iterable[tuple[str, Sig]], err: str = "") -> bool:
    """Write the express record for this run's report ``text`` (already printed on stdout, then
    ``err`` on stderr), when the lane traced this process and every input is signed, settled and
    unchanged. ``vouched``: inputs the warm-run record signed before the run read them (already
    settled), as (path, signature now)."""
    if not _TRACE:
        return False
    trace = _TRACE[0]
    _TRACE.clear()
    watch = trace.stderr
    if trace.refused or "\x1b" in text + err or (watch is not None and (
            watch.bypassed or not _only_progress("".join(watch.text), err))):
        return False
    inputs = dict(trace.inputs)
    for path, s in trace.inputs.items():
        if not _settled(s, trace.started_ns) or sig(path) != s:
            return False
    for path, s in vouched:
        if s is None or sig(path) != s:
            return False
        inputs[path] = s
    import json

    encoding = getattr(sys.stdout, "encoding", None)
    if not encoding or not _plain_codec(encoding):
        return False
    meta = {"format": FORMAT, "stamp": code_stamp(), "exit": exit_code, "err": err,
            "inputs": sorted([p, s] for p, s in inputs.items()), "git": trace.git, "named": list(trace.named)}
    try:
        head = json.dumps(meta, separators=(",", ":")).encode("utf-8", "surrogateescape")
        out = text.encode(encoding, getattr(sys.stdout, "errors", None) or "strict")
    except (UnicodeError, LookupError):
        return False
    body = str(len(head)).encode() + b"\n" + head + out
    secret = trace.secret or cache_secret(trace.base, create=False)
    if secret is None:
        return False
    data = _mac(secret, trace.key, body) + b"\n" + body
    import tempfile

    folder = os.path.join(trace.base, "express")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".porter-", suffix=".tmp", dir=folder)  # mode 0600
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, _path(trace.base, trace.key))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    _prune(folder, keep=_path(trace.base, trace.key))
    return True


def _plain_codec(encoding: str) -> bool:
    """Whether text printed on a stream of ``encoding`` is ``text.encode(encoding)`` wherever it goes.

    Not for ASCII: click deems such a stdout misconfigured and writes UTF-8 (errors "replace") to
    its buffer. Not for a codec with state across writes: a byte-order mark (UTF-16, UTF-32,
    UTF-8-SIG) is written once per stream, not on a file the stream appends to, not for an empty
    report."""
    import codecs

    probe = "a\u00e9\u65e5\n"
    try:
        if codecs.lookup(encoding).name == "ascii":
            return False
        one = probe.encode(encoding, "replace")
        return "".encode(encoding) == b"" and (probe * 2).encode(encoding, "replace") == one * 2 \
            and not one.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    except (LookupError, UnicodeError):
        return False


def _prune(folder: str, keep: str) -> None:
    """At most :data:`MAX_RECORDS` records (one per distinct invocation): the least recently
    written go first."""
    try:
        with os.scandir(folder) as entries:
            records = [(e.stat(follow_symlinks=False).st_mtime_ns, e.path) for e in entries
                       if e.name.endswith(".rec") and e.is_file(follow_symlinks=False)]
    except OSError:
        return
    records.sort()
    for _mtime, path in records[: max(0, len(records) - MAX_RECORDS)]:
        if path != keep:
            try:
                os.unlink(path)
            except OSError:
                pass


# -- the console entry point -------------------------------------------------------------------


def main() -> None:
    """``porter``: the express lane, else the full command line (:func:`porter.cli.main`)."""
    code = answer(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    if _TRACE and sys.stderr is None:
        # stderr closed (2>&-): a warning would vanish unseen, and a record kept now would answer a
        # later run whose stderr is open without it
        refuse("stderr is closed")
    elif _TRACE:
        _TRACE[0].stderr = _Watch(sys.stderr)
        sys.stderr = _TRACE[0].stderr  # type: ignore[assignment]
    from .cli import main as full

    full()
