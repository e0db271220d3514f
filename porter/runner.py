"""The pass runner: discovery → (parallel) per-file analysis or fixing → results.

A run has two phases. Phase 1 handles source files (Python, CUDA/C++, shell, YAML,
Dockerfiles); phase 2 handles dependency manifests, with facts from phase 1 (which
modules the code still imports, which rules' fixes were applied), so that a manifest drops
a CUDA-only requirement only when no code needs it any more.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import posixpath
import re
import signal
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from . import express, languages, proc, registry
from .config import Settings
from .discovery import Discovery, SourceRef, discover, is_within
from .engine import FixOutcome, Stage, analyze, fix
from .findings import Finding
from .framework import LazyFacts, RepoFacts, load
from .safewrite import RootWriter, WriteRefused, content_digest
from .textio import READ_FLAGS, Decoded, SourceError, atomic_write, read_bounded, read_source

if TYPE_CHECKING:
    from .patchset import Patch, PatchSeries

Mode = Literal["audit", "fix"]
MANIFEST_LANGUAGES = {languages.REQUIREMENTS, languages.PYPROJECT, languages.SETUP_CFG, languages.CONDA}
SERIAL_THRESHOLD = 24  # fewer candidate files than this run in-process
_IMPORT_RE = re.compile(r"^[ \t]*(?:from[ \t]+([A-Za-z_]\w*)|import[ \t]+([A-Za-z_]\w*))", re.M)


def is_manifest(ref: SourceRef) -> bool:
    return ref.language in MANIFEST_LANGUAGES or ref.relpath.rsplit("/", 1)[-1] == "setup.py"


@dataclass
class FileResult:
    relpath: str
    language: str
    findings: list[Finding] = field(default_factory=list)  # remaining after fixes (audit: all)
    fixed: list[Finding] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)
    decoded: Decoded | None = None
    new_files: dict[str, str] = field(default_factory=dict)
    new_files_by_family: dict[str, dict[str, str]] = field(default_factory=dict)
    imports: frozenset[str] = frozenset()  # top-level modules imported (after fixes)
    # dist -> (">=X", sites) that the fixes applied to this file need from its nearest manifest
    needs: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    digest: str = ""  # content hash of the bytes analysed (write() refuses a file changed since)
    # cross-file facts this file's analysis read (LazyFacts keys -> digest): what its cache entry depends on
    facts_used: dict[str, str] = field(default_factory=dict)
    error: bool = False
    seconds: float = 0.0
    # no record may vouch for a run with this result: its analysis read files no record signs
    # (porter.express.unsigned_read) or wrote to stderr (a warning a record would not repeat)
    unvouched: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.stages)

    @property
    def final_text(self) -> str | None:
        return self.stages[-1].after if self.stages else None

    def encode(self, text: str) -> bytes:
        assert self.decoded is not None
        return self.decoded.encode(text)


@dataclass
class RunResult:
    root: Path
    files: list[FileResult]
    problems: list[Finding]
    settings: Settings
    facts: RepoFacts
    seconds: float = 0.0
    extra_patches: list[Patch] = field(default_factory=list)  # e.g. HIPify, after families
    # the warm-run record that vouches for this result (None: not a whole-tree audit with the cache)
    record: RunRecord | None = None

    @property
    def findings(self) -> list[Finding]:
        out = list(self.problems)
        for fr in self.files:
            out.extend(fr.findings)
        return sorted(out, key=lambda f: f.sort_key)

    @property
    def fixed(self) -> list[Finding]:
        return sorted((f for fr in self.files for f in fr.fixed), key=lambda f: f.sort_key)

    @property
    def changed_files(self) -> list[FileResult]:
        return [fr for fr in self.files if fr.changed]

    @property
    def files_scanned(self) -> int:
        return len(self.files)

    def series(self) -> PatchSeries:
        """One patch per family (in application order), then any extra patches (HIPify)."""
        from .patchset import FileChange, Patch, PatchSeries  # an audit never builds patches

        order = {f.name: f.order for f in registry.families()}
        buckets: dict[tuple[int, int, str], Patch] = {}
        created: set[str] = set()
        codes: dict[int, set[str]] = {}

        def bucket(fam: str, wrap: int) -> Patch:
            key = (wrap, order.get(fam, 999), fam)
            if key not in buckets:
                family = registry.family(fam)
                name = fam if wrap == 0 else f"{fam}-{wrap + 1}"
                buckets[key] = Patch(
                    name=name,
                    title=family.title if family else fam,
                    description=family.description if family else "",
                    verified=family.verified if family else "",
                    review=family.review if family else "",
                )
            return buckets[key]

        for fr in self.files:
            for stage in fr.stages:
                patch = bucket(stage.family, stage.wrap)
                patch.changes.append(FileChange(fr.relpath, fr.encode(stage.before), fr.encode(stage.after)))
                for f in stage.findings:
                    patch.notes.append(f"`{f.path}:{f.line}` {f.code}: {f.message}")
                    codes.setdefault(id(patch), set()).add(f.code)
            for name, files in fr.new_files_by_family.items():
                fam, _, wrap_s = name.partition("-")
                if fam not in order:
                    fam, wrap_s = name, ""
                wrap = int(wrap_s) - 1 if wrap_s.isdigit() else 0
                for path, text in files.items():
                    if path in created:
                        continue
                    created.add(path)
                    bucket(fam, wrap).changes.append(FileChange(path, None, text.encode("utf-8")))
        rules = registry.rules()
        for (wrap, _, fam), patch in buckets.items():
            if wrap:  # a family's later pass: name it after what it fixes, not "<family>-2"
                names = sorted({rules[c].name for c in codes.get(id(patch), ()) if c in rules})
                what = "-".join(names[:2]) + ("-and-more" if len(names) > 2 else "") if names else "follow-up"
                patch.name = f"{fam}-{what}"
                patch.title = (f"{patch.title} (pass {wrap + 1}: {', '.join(names) or 'follow-up'}, on what "
                               "the earlier patches changed)")
        patches = [buckets[k] for k in sorted(buckets)] + list(self.extra_patches)
        manual = [
            f"`{f.path}:{f.line}` {f.code} {registry.rules()[f.code].name if f.code in registry.rules() else ''}: "
            f"{f.message}"
            for f in self.findings
            if registry.is_actionable(f)
        ]
        return PatchSeries(patches=patches, manual=manual)


# -- per-file work (runs in workers) --------------------------------------------------------

_STATE: dict[str, Any] = {}


@contextmanager
def gc_tuned():  # type: ignore[no-untyped-def]
    """Cyclic GC tuned for a run: parse trees are acyclic garbage freed by reference counting, so the
    collector's frequent young-generation passes (a tenth of a cold audit's CPU) buy nothing. What
    exists before the run (imported modules, rule tables) is frozen out of every collection."""
    import gc

    before = gc.get_threshold()
    gc.set_threshold(max(before[0], 100_000), before[1], before[2])
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def _init_worker(root: str, settings: Settings, facts: RepoFacts, mode: Mode) -> None:
    import gc

    _STATE.update(root=root, settings=settings, facts=facts, mode=mode)
    express.watch_stderr()  # what a worker writes there is seen (FileResult.unvouched)
    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], 100_000), threshold[1], threshold[2])
    gc.freeze()
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):
        pass


class _Timeout(BaseException):
    """The file's CPU time ran out. Not an ``Exception``: the engine's ``except Exception`` guards (one
    crashing family must not hide the others) would otherwise swallow it wherever the timer fires inside
    one, and re-run the families with no limit left."""


class _Limit:
    """What :func:`_time_limit` saw: whether the file's CPU time ran out."""

    expired = False


TIMEOUT_REPEAT = 0.1  # CPU seconds between repeated signals once the limit has passed


@contextmanager
def _time_limit(seconds: float):  # type: ignore[no-untyped-def]
    """Limit the CPU time (user + system) spent in the block, not the wall clock.

    On a loaded machine (two cores shared by a CI job's other steps) a file that needs 0.1 s
    of CPU can take seconds of wall time; ``ITIMER_PROF`` counts only this process's CPU time.
    The signal can land anywhere, also where Python or a library turns it into another exception
    (``__set_name__`` during a lazy import wraps it in a ``RuntimeError``) or swallows it: the
    yielded :class:`_Limit` records that it fired, and it fires again every
    :data:`TIMEOUT_REPEAT` CPU seconds until the block is left, so no analysis runs on unlimited.
    """
    state = _Limit()
    usable = seconds > 0 and hasattr(signal, "setitimer") and hasattr(signal, "SIGPROF")
    if usable:
        try:
            def _raise(signum: int, frame: Any) -> None:
                state.expired = True
                raise _Timeout

            old = signal.signal(signal.SIGPROF, _raise)
            signal.setitimer(signal.ITIMER_PROF, seconds, TIMEOUT_REPEAT)
        except ValueError:  # not in the main thread
            usable = False
    try:
        yield state
    finally:
        if usable:
            while True:  # a repeated signal may land here too: disarm until it holds
                try:
                    signal.setitimer(signal.ITIMER_PROF, 0)
                    signal.signal(signal.SIGPROF, old)
                    break
                except _Timeout:
                    continue


def _reusable(root: str, relpath: str) -> bool:
    """An existing file a fix would create can be reused when it is a regular file in the root."""
    full = os.path.join(root, relpath)
    return os.path.isfile(full) and is_within(os.path.realpath(full), os.path.realpath(root))


def _encodes_exactly(decoded: Decoded, texts: Sequence[str]) -> bool:
    if decoded.encoding in ("utf-8", "utf_8"):
        return True
    for text in texts:
        try:
            if decoded.decode_back(decoded.encode(text)) != text:
                return False
        except (UnicodeError, LookupError):
            return False
    return True


def _imports_of(text: str) -> frozenset[str]:
    return frozenset(a or b for a, b in _IMPORT_RE.findall(text))


def process_file(ref: SourceRef, root: str, settings: Settings, facts: RepoFacts, mode: Mode) -> FileResult:
    """Analyse (audit) or fix one file; every problem becomes a finding, never an exception."""
    started = time.perf_counter()
    unsigned, spoke = express.unsigned_reads(), express.stderr_written()
    result = FileResult(ref.relpath, ref.language)
    facts = facts.for_path(ref.relpath)
    full = Path(root, ref.relpath)
    try:
        data, decoded = read_source(full, python=ref.language == "python", max_bytes=settings.max_file_size)
    except SourceError as exc:
        result.findings = [Finding(code=exc.code, message=exc.message, path=ref.relpath)]
        result.error = True
        return result
    result.decoded = decoded
    result.digest = content_digest(data)
    not_exact: list[Finding] = []
    if mode == "fix" and not decoded.exact:
        # decode → encode would change bytes nobody edited: analyse, never edit
        mode = "audit"
        not_exact.append(Finding(
            code="PRT000", path=ref.relpath,
            message=f"{decoded.encoding} does not round-trip this file byte for byte (decoding then encoding "
                    "it changes bytes porter never edited); porter reports its findings but does not edit it"))
    lazy = facts.extra if isinstance(facts.extra, LazyFacts) else None
    if lazy is not None:
        lazy.touched = set()
    limit: _Limit | None = None
    try:
        with _time_limit(settings.timeout) as limit:
            if mode == "audit":
                result.findings = analyze(ref.relpath, decoded.text, ref.language, settings, facts)
                final = decoded.text
            else:
                outcome: FixOutcome = fix(
                    ref.relpath, decoded.text, ref.language, settings, facts, newline=decoded.newline,
                    existing=frozenset(_existing(root, settings, facts)),
                )
                result.findings = outcome.remaining
                result.fixed = outcome.fixed
                result.stages = outcome.stages
                result.needs = dict(outcome.needs)
                # a file a fix would create that already exists on disk is reused, never replaced
                result.new_files = {p: t for p, t in outcome.new_files.items()
                                    if not os.path.lexists(os.path.join(root, p))}
                result.new_files_by_family = {
                    fam: {p: t for p, t in files.items() if p in result.new_files}
                    for fam, files in outcome.new_files_by_family.items()
                }
                final = outcome.text
                blocked = [p for p in outcome.new_files if os.path.lexists(os.path.join(root, p))
                           and not _reusable(root, p)]
                why = ""
                if blocked:
                    why = (f"its fix needs {blocked[0]}, and what is there is not a regular file inside the root "
                           "(a folder, or a dangling or outside symlink); porter does not edit this file")
                elif result.stages and not _encodes_exactly(decoded, [st.after for st in result.stages]):
                    # a fix or annotation brought a character the file's encoding cannot hold
                    why = (f"the fixed text cannot be written in the file's encoding ({decoded.encoding}); "
                           "porter reports its findings but does not edit it")
                if why:
                    result.findings = [Finding(code="PRT000", path=ref.relpath, message=why)] + analyze(
                        ref.relpath, decoded.text, ref.language, settings, facts)
                    result.fixed, result.stages, result.new_files, result.new_files_by_family = [], [], {}, {}
                    final = decoded.text
        if limit.expired:
            raise _Timeout  # the signal was swallowed on the way (a broad except): the limit still holds
    except (_Timeout, Exception) as exc:
        # the limit's signal, also when it came back wrapped (a RuntimeError from __set_name__, say)
        if isinstance(exc, _Timeout) or (limit is not None and limit.expired):
            result.findings = [Finding(code="PRT008", message=f"analysis used more than {settings.timeout:g} s "
                                       "of CPU time; file skipped", path=ref.relpath)]
        elif isinstance(exc, RecursionError):
            result.findings = [Finding(code="PRT001", message="nesting too deep for the parser; file skipped",
                                       path=ref.relpath)]
        else:
            raise
        result.stages, result.fixed, result.error = [], [], True
        final = decoded.text
    result.findings = not_exact + result.findings
    if lazy is not None and lazy.touched:
        result.facts_used = lazy.digests(lazy.touched)
    if ref.language == "python":
        result.imports = _imports_of(final)
    # (in a worker too, where the facts may be gathered and whose stderr the parent does not see)
    result.unvouched = express.unsigned_reads() != unsigned or express.stderr_written() != spoke
    result.seconds = time.perf_counter() - started
    return result


def _existing(root: str, settings: Settings, facts: RepoFacts) -> Iterable[str]:
    return facts.extra.get("existing_files", ())


def _work(ref: SourceRef) -> FileResult:
    return process_file(ref, _STATE["root"], _STATE["settings"], _STATE["facts"], _STATE["mode"])


# -- cache ----------------------------------------------------------------------------------


CACHE_FORMAT = 3
MAX_CACHE_BYTES = 256 * 1024 * 1024


class Cache:
    """Audit results keyed on file content + porter version and code stamp + settings + repo facts.

    The cache is untrusted input like everything else near the target: it lives in the user's
    cache folder by default (one file per resolved root and settings), every file carries an
    HMAC under a per-user key kept outside the tree, and any file or entry that does not verify
    or does not have the expected shape is ignored and rewritten. A ``cache-dir`` inside the root
    is written without following symlinks.
    """

    def __init__(self, root: Path, key: str, directory: Path | None = None, kind: str = "audit") -> None:
        self.root = os.path.realpath(root)
        try:
            base: Path | None = Path(express.user_cache_dir())
        except (RuntimeError, KeyError, OSError):  # no home folder: run without a cache
            base = None
        if base is not None and express.in_tree(str(base), [self.root]):
            base = None  # the user's cache folder is in the target (HOME is the checkout): its secret is the target's
        self.secret = express.cache_secret(str(base)) if base is not None else None
        self.key = key
        scope = hashlib.blake2b(f"{self.root}\0{key}".encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()
        if directory is None:
            directory = (base or Path(self.root, ".porter_cache")) / "audit"  # unused without a secret
        elif not directory.is_absolute():
            directory = Path(self.root, directory)
        self.path = directory / f"{kind}-{scope}.json"
        self.entries: dict[str, Any] = {}
        self.dirty = False
        if self.secret is not None:
            self.entries = self._load()

    # -- files -----------------------------------------------------------------------------
    def _in_root(self) -> str | None:
        """The cache file's root-relative path when it lies inside the root, else None."""
        absolute = os.path.normpath(os.path.abspath(self.path))
        if not is_within(absolute, self.root):
            return None
        return os.path.relpath(absolute, self.root).replace(os.sep, "/")

    def _mac(self, body: bytes) -> str:
        assert self.secret is not None
        head = f"porter-cache/{CACHE_FORMAT}\0{self.root}\0{self.key}\0".encode("utf-8", "surrogateescape")
        return hmac.new(self.secret, head + body, hashlib.sha256).hexdigest()

    def _read_bytes(self) -> bytes | None:
        rel = self._in_root()
        if rel is not None and os.path.realpath(self.path.parent) != os.path.normpath(str(self.path.parent)):
            return None  # a folder on the way is a symlink: do not read through it
        try:
            fd = os.open(self.path, READ_FLAGS)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CACHE_BYTES:
                return None
            with os.fdopen(fd, "rb", closefd=False) as fh:
                return fh.read(MAX_CACHE_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)

    def _load(self) -> dict[str, Any]:
        data = self._read_bytes()
        if not data:
            return {}
        head, sep, body = data.partition(b"\n")
        if not sep or not hmac.compare_digest(head.strip(), self._mac(body).encode()):
            return {}  # forged, stale or damaged: start afresh (save() rewrites it)
        try:
            entries = json.loads(body)
        except ValueError:
            return {}
        return entries if isinstance(entries, dict) else {}

    @staticmethod
    def digest(root: str, ref: SourceRef, max_bytes: int) -> str | None:
        """Content hash of a file of at most ``max_bytes`` (never more is read); None otherwise."""
        try:
            fd = os.open(os.path.join(root, ref.relpath), READ_FLAGS)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
                return None
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(max_bytes + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(data) > max_bytes:
            return None
        return content_digest(data)  # the same hash process_file records

    def get(self, ref: SourceRef, digest: str, facts: RepoFacts | None = None) -> FileResult | None:
        hit = self.entries.get(ref.relpath)
        try:
            if not isinstance(hit, dict) or hit.get("digest") != digest:
                return None
            used = hit.get("facts") or {}
            if used:
                # the entry read cross-file facts: valid only while those facts are the same
                lazy = facts.extra if facts is not None and isinstance(facts.extra, LazyFacts) else None
                if lazy is None or lazy.digests(used) != used:
                    return None
            findings = [Finding.from_dict(d) for d in hit["findings"]]
            imports = frozenset(str(m) for m in hit.get("imports", ()))
        except (KeyError, TypeError, ValueError, AttributeError):
            self.entries.pop(ref.relpath, None)  # a damaged entry: analyse again and rewrite it
            return None
        if any(f.path != ref.relpath for f in findings):
            return None
        return FileResult(ref.relpath, ref.language, findings=findings, imports=imports)

    def put(self, ref: SourceRef, digest: str, result: FileResult) -> None:
        if result.error:
            return
        self.entries[ref.relpath] = {
            "digest": digest,
            "findings": [f.to_dict() for f in result.findings],
            "imports": sorted(result.imports),
            "facts": dict(result.facts_used),
        }
        self.dirty = True

    def save(self) -> None:
        if not self.dirty or self.secret is None:
            return
        body = json.dumps(self.entries, separators=(",", ":"), sort_keys=True).encode("utf-8")
        data = self._mac(body).encode() + b"\n" + body
        rel = self._in_root()
        try:
            if rel is not None:
                # inside the target: descriptors only, no symlink followed (see porter.safewrite)
                with RootWriter(self.root) as writer:
                    folder = posixpath.dirname(rel)
                    try:
                        writer.create(posixpath.join(folder, ".gitignore") if folder else ".gitignore", b"*\n")
                    except WriteRefused:
                        pass  # something else is there (a planted symlink): leave it, never follow it
                    writer.put(rel, data)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                atomic_write(self.path, data)
        except (OSError, WriteRefused, SourceError):
            pass  # the cache is an optimisation: a run never fails for it


def _stat_key(root: str, relpath: str) -> list[int] | None:
    """What a file's bytes are checked by on a warm run: size, modification and change times and
    inode (the change time moves on every write, whatever a tool does to the modification time)."""
    try:
        st = os.lstat(os.path.join(root, relpath))
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _settled(signatures: Sequence[tuple[str, str, list[int] | None]], side: list[list[Any]], signed_ns: int) -> bool:
    """Whether every signed input's modification and change times predate its signing by
    :data:`porter.express.SETTLE_NS` (within one file-system clock tick an edit keeps them)."""
    limit = signed_ns - express.SETTLE_NS
    for _rel, _lang, sig in signatures:
        if sig is not None and max(sig[1], sig[2]) >= limit:
            return False
    for name, sig in side:
        if sig is None:
            continue
        times = sig[0:2] if name.endswith("/") else sig[1:3]
        if max(times) >= limit:
            return False
    return True


def _side_inputs(root: str, refs: Sequence[SourceRef]) -> list[list[Any]]:
    """What a whole-tree result depends on besides the discovered files: every folder the pins are
    gathered from (a file added or removed there changes the folder's times) and the manifests and
    lock files read there that discovery did not list (lock files; manifests ignored or excluded)."""
    out: list[list[Any]] = []
    folders, listed = _fact_files(root, refs)
    for folder in folders:
        try:
            st = os.lstat(os.path.join(root, folder) if folder else root)
        except OSError:
            out.append([folder + "/", None])
            continue
        out.append([folder + "/", [st.st_mtime_ns, st.st_ctime_ns, st.st_ino]])
        pipfile = f"{folder}/Pipfile" if folder else "Pipfile"  # (signed as before, though not read today)
        sig = _stat_key(root, pipfile)
        if sig is not None:
            out.append([pipfile, sig])
    for rel in listed:
        out.append([rel, _stat_key(root, rel)])
    return out


def _fact_files(root: str | Path, refs: Sequence[SourceRef]) -> tuple[list[str], list[str]]:
    """The folders :func:`collect_facts` lists (every folder that holds one of ``refs``, and the
    folders above it) and the manifests and lock files it reads there besides ``refs``."""
    seen = {r.relpath for r in refs}  # a listed file is read (and signed) as itself
    folders: set[str] = {""}
    for r in refs:
        parts = r.relpath.split("/")[:-1]
        for n in range(1, len(parts) + 1):
            folders.add("/".join(parts[:n]))
    listed: list[str] = []
    for folder in sorted(folders):
        try:
            names = sorted(os.listdir(os.path.join(root, folder) if folder else root))
        except OSError:
            continue
        for name in names:
            rel = f"{folder}/{name}" if folder else name
            if rel in seen or not (name in LOCK_NAMES or is_manifest(SourceRef(rel, languages.detect(name) or ""))):
                continue
            full = os.path.join(root, rel)
            if os.path.isfile(full) and not os.path.islink(full):
                listed.append(rel)
                seen.add(rel)
    return sorted(folders), listed


class RunRecord:
    """The whole result of the last full audit of a root, reused when nothing changed.

    A warm re-run compares the discovered file list and every file's ``lstat`` signature with
    the record's (no file is read, no rule family or parser is loaded); any difference, a
    different porter build or different settings falls back to the per-file cache. Signed and
    stored like :class:`Cache`.
    """

    def __init__(self, root: Path, key: str, directory: Path | None = None) -> None:
        self.store = Cache(root, key + express.code_stamp(), directory, kind="run")
        self.saved = False

    def lookup(self, found: Discovery, settings: Settings) -> RunResult | None:
        rec = self.store.entries
        if not rec or rec.get("format") != 1:
            return None
        try:
            files = rec["files"]
            if len(files) != len(found.files):
                return None
            root = self.store.root
            now = {ref.relpath: ref.language for ref in found.files}
            for relpath, language, sig in files:
                if now.get(relpath) != language or sig != _stat_key(root, relpath):
                    return None
            if rec["side"] != _side_inputs(root, found.files):
                return None
            problems = [Finding.from_dict(d) for d in rec["problems"]]
            if sorted(f.sort_key for f in problems) != sorted(f.sort_key for f in found.problems):
                return None
            results = []
            for (relpath, language, _sig), res in zip(files, rec["results"], strict=True):
                results.append(FileResult(relpath, language, findings=[Finding.from_dict(d) for d in res[0]],
                                          imports=frozenset(str(m) for m in res[1])))
            facts = RepoFacts(pins=dict(rec["pins"]), manifests=tuple(rec["manifests"]),
                              scopes={k: dict(v) for k, v in rec["scopes"].items()})
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return RunResult(Path(self.store.root), results, problems, settings, facts, 0.0)

    def save(self, signatures: Sequence[tuple[str, str, list[int] | None]], side: list[list[Any]],
             result: RunResult, signed_ns: int | None = None) -> None:
        """Record ``result``; ``signatures`` and ``side`` were taken at ``signed_ns`` (time.time_ns()),
        before any file was read."""
        if any(sig is None for _, _, sig in signatures) or any(fr.error for fr in result.files):
            return  # a file porter could not stat or analyse is never vouched for
        if signed_ns is not None and not _settled(signatures, side, signed_ns):
            return  # an input written in the clock tick it was signed in: a later edit could keep its signature
        by_path = {rel: (rel, lang, sig) for rel, lang, sig in signatures}
        if sorted(by_path) != sorted(fr.relpath for fr in result.files):
            return
        self.store.entries = {
            "format": 1,
            "files": [list(by_path[fr.relpath]) for fr in result.files],
            "side": side,
            "problems": [f.to_dict() for f in result.problems],
            "results": [[[f.to_dict() for f in fr.findings], sorted(fr.imports)] for fr in result.files],
            "pins": dict(result.facts.pins), "manifests": list(result.facts.manifests),
            "scopes": {k: dict(v) for k, v in result.facts.scopes.items()},
        }
        self.store.dirty = True
        self.store.save()
        self.saved = True

    def vouched(self) -> list[tuple[str, list[int] | None]]:
        """The inputs this record signed, as (absolute path, :func:`porter.express.sig` now); the
        signature is None where the input no longer has the one recorded."""
        root = self.store.root
        out: list[tuple[str, list[int] | None]] = []
        try:
            for relpath, _language, recorded in self.store.entries["files"]:
                path = os.path.join(root, relpath)
                now = express.sig(path)
                out.append((path, now if now is not None and now[1:] == recorded else None))
            for name, recorded in self.store.entries["side"]:
                path = os.path.join(root, name.rstrip("/")) if name.rstrip("/") else root
                now = express.sig(path)
                if recorded is None:
                    out.append((path, None))  # a folder that could not be read: never vouched for
                elif name.endswith("/"):
                    out.append((path, now if now is not None and now[2:] == recorded else None))
                else:
                    out.append((path, now if now is not None and now[1:] == recorded else None))
        except (KeyError, TypeError, ValueError):
            return [("", None)]
        return out

    def rendered(self, key: str) -> str | None:
        """A report this record's result was already rendered to (``key`` names the format and
        everything else the rendering reads), so a warm run prints it without loading a reporter."""
        text = (self.store.entries.get("rendered") or {}).get(key)
        return text if isinstance(text, str) else None

    def remember(self, key: str, text: str) -> None:
        if self.store.entries.get("format") != 1:
            return
        rendered = self.store.entries.setdefault("rendered", {})
        if not isinstance(rendered, dict):
            return
        if len(rendered) >= 4 and key not in rendered:
            rendered.pop(next(iter(rendered)))
        rendered[key] = text
        self.store.dirty = True
        self.store.save()


# -- orchestration --------------------------------------------------------------------------


LOCK_NAMES = ("poetry.lock", "uv.lock", "Pipfile.lock", "pdm.lock")


def collect_facts(root: Path, refs: Sequence[SourceRef], settings: Settings | None = None,
                  tree: Sequence[SourceRef] | Callable[[], Sequence[SourceRef]] | None = None) -> RepoFacts:
    """Pinned versions from the repo's manifests and lock files (read, never executed).

    Pins are gathered per folder that holds a manifest (sub-projects have their own): a file
    gets the pins of its nearest manifest (``RepoFacts.for_path``), completed by its ancestors'
    for distributions the nearest does not name. The manifests of every folder above a named
    file count even when only some files were named (pre-commit), so a file gets the same facts
    whether it is checked alone or as part of the tree.
    """
    manifest_texts: dict[str, str] = {}
    candidates = [r.relpath for r in refs if is_manifest(r)]
    candidates += _fact_files(root, refs)[1]  # the warm-run record signs the same files (_side_inputs)
    for rel in candidates:
        try:
            data = read_bounded(root / rel, settings.max_file_size if settings else 4 * 1024 * 1024)
            manifest_texts[rel] = data.decode("utf-8", "replace")
        except OSError:
            continue
    pins: dict[str, str] = {}
    scopes: dict[str, dict[str, str]] = {}
    if manifest_texts:  # the manifest readers (and packaging) load only for a tree that has manifests
        from .manifests import collect_pins, manifest_folder

        by_folder: dict[str, dict[str, str]] = {}
        for rel, text in manifest_texts.items():
            by_folder.setdefault(manifest_folder(rel), {})[rel] = text
        for folder in sorted(by_folder, key=lambda f: (f.count("/") + bool(f), f)):
            try:
                own = dict(collect_pins(by_folder[folder]))
            except Exception:  # noqa: BLE001 - a broken manifest must not stop the run
                own = {}
            parent = _nearest(folder, scopes)
            scopes[folder] = {**(scopes[parent] if parent is not None else {}), **own}
        try:
            pins = dict(collect_pins(manifest_texts))
        except Exception:  # noqa: BLE001
            pins = {}
    unscoped: dict[str, str] = {}
    if settings is not None and settings.target_torch:
        pins["torch"] = f"=={settings.target_torch}"
        unscoped["torch"] = pins["torch"]
        for folder in scopes:
            scopes[folder]["torch"] = pins["torch"]
    existing = frozenset(r.relpath for r in refs)
    local: set[str] = set()
    for rel in existing:
        parts = rel.split("/")
        local.update(parts[:-1])
        if parts[-1].endswith(".py"):
            local.add(parts[-1][:-3])
    eager: dict[str, object] = {"existing_files": existing, "unscoped_pins": unscoped,
                                "local_modules": frozenset(local)}

    def cross_file() -> dict[str, object]:
        # cross-file facts come from the whole tree (when known), so a file checked alone gets the
        # same findings as in a full run; gathered on the first rule that asks (LazyFacts)
        whole = refs if tree is None else (tree() if callable(tree) else tree)
        extra: dict[str, object] = {}
        imported: set[str] = set()
        attention = _attention_facts(root, whole, imported)
        if attention is not None:
            extra[attention[0]] = attention[1]
        extra["imported_names"] = frozenset(imported)
        for fam in registry.families():
            if fam.repo_facts is None or (settings is not None and not _family_selected(fam, settings)):
                continue
            rels = [r.relpath for r in whole if r.language in fam.languages]
            try:
                extra.update(load(fam.repo_facts)(root, rels))
            except Exception:  # noqa: BLE001 - a failing pre-scan must not stop the run
                continue
        return extra

    return RepoFacts(pins=pins, manifests=tuple(sorted(manifest_texts)), scopes=scopes,
                     extra=LazyFacts(eager, [cross_file]))


def _nearest(folder: str, scopes: Mapping[str, object]) -> str | None:
    """The closest proper ancestor of ``folder`` in ``scopes`` ("" is the root)."""
    if not folder:
        return None
    parts = folder.split("/")
    for n in range(len(parts) - 1, -1, -1):
        cand = "/".join(parts[:n])
        if cand in scopes:
            return cand
    return None


def _under(relpath: str, folder: str) -> bool:
    return not folder or relpath.startswith(folder + "/")


def usable_cpus() -> int:
    """The CPUs this process may run on (affinity / cgroup-aware where the platform says)."""
    counter = getattr(os, "process_cpu_count", None)
    if counter is not None:
        return max(1, counter() or 1)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+\.*[\w.]*[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)", re.M)


def imported_names(text: str) -> set[str]:
    """Names a module imports with ``from X import a, b as c`` (``a``, ``b``): what it takes from others."""
    out: set[str] = set()
    for m in _FROM_IMPORT.finditer(text):
        for part in m.group(1).strip("()").replace("\\\n", " ").split(","):
            name = part.strip().split(" as ")[0].strip()
            if name.isidentifier():
                out.add(name)
    return out


def _attention_facts(root: Path, refs: Sequence[SourceRef], imported: set[str]) -> tuple[str, object] | None:
    """Where the repo dispatches on Hugging Face's flash-attention string (read, never executed); also
    fills ``imported`` with the names the tree's modules import from one another."""
    from .codemods.packages import hf_attention as hf

    def texts() -> Iterable[tuple[str, str]]:
        for ref in refs:
            if ref.language != languages.PYTHON:
                continue
            try:  # a regular file inside the root, read bounded and without blocking (never a FIFO)
                data = read_bounded(root / ref.relpath, 2 * 1024 * 1024)
            except OSError:
                continue
            text = data.decode("utf-8", "replace")
            imported.update(imported_names(text))
            yield ref.relpath, text

    return hf.FACTS_KEY, hf.collect(texts())


def _family_selected(fam: Any, settings: Settings) -> bool:
    try:
        return any(settings.is_enabled(r.code) for r in fam.rules)
    except AttributeError:
        return True


def _os_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def _pool_context():  # type: ignore[no-untyped-def]
    """``fork`` when this process is single-threaded (the CLI: cheapest), else ``forkserver``.

    Forking a process that runs other threads (an embedding program, a test run that imported
    torch and its thread pools) can deadlock the child on a lock another thread held.
    """
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and _os_threads() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


def _run_batch(
    refs: Sequence[SourceRef], root: Path, settings: Settings, facts: RepoFacts, mode: Mode, jobs: int,
    progress: Callable[[int, int, str], None] | None, cache: Cache | None,
) -> list[FileResult]:
    results: dict[str, FileResult] = {}
    todo: list[SourceRef] = []
    digests: dict[str, str] = {}
    for ref in refs:
        if cache is not None:
            digest = Cache.digest(str(root), ref, settings.max_file_size)
            if digest is not None:
                digests[ref.relpath] = digest
                hit = cache.get(ref, digest, facts)
                if hit is not None:
                    results[ref.relpath] = hit
                    continue
        todo.append(ref)
    total = len(refs)
    done = len(results)
    cpus = usable_cpus()
    # never more workers than cores or files, whatever `jobs` says (the target's config can set it)
    workers = max(1, min(jobs if jobs > 0 else cpus, cpus, len(todo)))
    if workers <= 1 or len(todo) < SERIAL_THRESHOLD:
        for ref in todo:
            results[ref.relpath] = process_file(ref, str(root), settings, facts, mode)
            done += 1
            if progress:
                progress(done, total, ref.relpath)
    else:
        chunk = max(1, min(64, len(todo) // (workers * 8) or 1))
        from concurrent.futures import ProcessPoolExecutor  # only a pool run pays for it

        with proc.isolated_python_children(), ProcessPoolExecutor(
            max_workers=workers, initializer=_init_worker, initargs=(str(root), settings, facts, mode),
            mp_context=_pool_context(),
        ) as pool:
            for ref, res in zip(todo, pool.map(_work, todo, chunksize=chunk), strict=True):
                results[ref.relpath] = res
                done += 1
                if progress:
                    progress(done, total, ref.relpath)
    if cache is not None:
        for ref in todo:
            # only when the bytes analysed are the bytes hashed (a file edited in between is not cached)
            if ref.relpath in digests and results[ref.relpath].digest == digests[ref.relpath]:
                cache.put(ref, digests[ref.relpath], results[ref.relpath])
    return [results[r.relpath] for r in refs]


def resolve_root(root: Path, paths: Sequence[Path]) -> tuple[Path, list[Path]]:
    """The root with every symlink in its own path resolved (followed once, explicitly, since the
    user named it), and ``paths`` under the name the user gave re-based onto the resolved root.

    Everything after this is contained in the resolved root: a root given as a symlink to the
    repository scans the repository instead of finding a single out-of-root symlink.
    """
    given = os.path.normpath(os.path.abspath(root))
    real = os.path.realpath(given)
    if real == given:
        return Path(real), list(paths)
    out: list[Path] = []
    for p in paths:
        if str(p) == "-":
            out.append(p)
            continue
        absolute = os.path.normpath(os.path.abspath(p))
        if is_within(absolute, given):
            rel = os.path.relpath(absolute, given)
            out.append(Path(real) if rel == "." else Path(real, rel))
        else:
            out.append(p)
    return Path(real), out


def run(
    root: Path,
    paths: Sequence[Path],
    settings: Settings,
    mode: Mode = "audit",
    *,
    jobs: int | None = None,
    force_exclude: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    use_cache: bool | None = None,
) -> RunResult:
    """Discover and process files. Nothing is written here (see :func:`write`)."""
    started = time.perf_counter()
    unsigned = express.unsigned_reads()
    root, paths = resolve_root(root, paths)
    found: Discovery = discover(root, list(paths), settings, force_exclude=force_exclude)
    whole_tree = [os.path.abspath(p) for p in paths] == [str(root)]
    cache_on = settings.cache if use_cache is None else use_cache
    record = None
    signed_ns = 0
    signatures: list[tuple[str, str, list[int] | None]] = []
    side: list[list[Any]] = []
    if mode == "audit" and cache_on and whole_tree:
        # a warm re-run of a whole tree: stat every file, and when nothing changed answer from the
        # record without loading a rule family or reading a file
        signed_ns = time.time_ns()
        signatures = [(r.relpath, r.language, _stat_key(str(root), r.relpath)) for r in found.files]
        side = _side_inputs(str(root), found.files)
        record = RunRecord(root, settings.fingerprint() + repr(force_exclude),
                           Path(settings.cache_dir) if settings.cache_dir else None)
        hit = record.lookup(found, settings)
        if hit is not None:
            hit.seconds = time.perf_counter() - started
            hit.record = record
            return hit
    registry.check_loaded()
    whole: Sequence[SourceRef] | Callable[[], Sequence[SourceRef]] = found.files
    if not whole_tree:
        def whole() -> Sequence[SourceRef]:  # only when a rule asks for cross-file facts
            return discover(root, [root], settings).files
    facts = collect_facts(root, found.files, settings, tree=whole)
    jobs = settings.jobs if jobs is None else jobs
    cache = None
    if mode == "audit" and cache_on:
        key = hashlib.blake2b(
            (settings.fingerprint() + repr(sorted(facts.pins.items()))
             + repr(sorted((k, sorted(v.items())) for k, v in facts.scopes.items()))
             + express.code_stamp()  # another build of porter (an edited checkout, a reinstall) analyses afresh
             ).encode(), digest_size=8
        ).hexdigest()
        cache = Cache(root, key, Path(settings.cache_dir) if settings.cache_dir else None)
    phase1 = [r for r in found.files if not is_manifest(r)]
    phase2 = [r for r in found.files if is_manifest(r)]
    with gc_tuned():
        results = _run_batch(phase1, root, settings, facts, mode, jobs, progress, cache)
    if phase2:
        # manifests are few, and their results depend on phase 1: never cached. Each manifest
        # sees the facts of its own sub-project: imports of the files below its folder, the
        # fixes applied (and what they need) in the files it is the nearest manifest of.
        from .manifests import manifest_folder

        groups: dict[str, list[SourceRef]] = {}
        for ref in phase2:
            groups.setdefault(manifest_folder(ref.relpath), []).append(ref)
        by_ref: dict[str, FileResult] = {}
        for folder, refs in sorted(groups.items()):
            facts2 = phase2_facts(facts, results, folder)
            for fr in _run_batch(refs, root, settings, facts2, mode, jobs, progress, None):
                by_ref[fr.relpath] = fr
        results += [by_ref[r.relpath] for r in phase2]
    if cache is not None:
        cache.save()
    outcome = RunResult(root, results, found.problems, settings, facts, time.perf_counter() - started)
    if record is not None and express.unsigned_reads() == unsigned and not any(fr.unvouched for fr in results):
        # (a run that read files no record signs is never vouched for)
        record.save(signatures, side, outcome, signed_ns)
        if record.saved:
            outcome.record = record
    return outcome


def phase2_facts(facts: RepoFacts, results: Sequence[FileResult], folder: str) -> RepoFacts:
    """The facts a manifest in ``folder`` is judged with, from the phase-1 results.

    ``imports``: modules the files below the folder import after the fixes (a requirement stays
    while any of them needs it). ``applied`` and ``extra["needs"]``: the fixes applied to the
    files whose nearest manifest is in this folder, and the requirements those fixes need.
    """
    below = [fr for fr in results if _under(fr.relpath, folder)]
    own = [fr for fr in below if not facts.scopes or facts.scope_of(fr.relpath) == folder]
    from .engine import merge_need

    needs: dict[str, tuple[str, tuple[str, ...]]] = {}
    for fr in own:
        for dist, (spec, sites) in fr.needs.items():
            merge_need(needs, dist, spec, sites)
    return replace(
        facts,
        imports=frozenset(m for fr in below for m in fr.imports),
        applied=frozenset(f.code for fr in own for f in fr.fixed),
        extra={**facts.extra, "remaining": frozenset(f.code for fr in below for f in fr.findings),
               "needs": needs},
    )


def write(result: RunResult) -> list[str]:
    """Write every fixed file and every new file; return the paths written.

    Writes go through :class:`porter.safewrite.RootWriter` (never outside the root, never
    through a symlink, never over a file changed since it was read). A file porter cannot or
    will not write becomes a PRT000 finding in ``result.problems`` and the run goes on.
    """
    written: list[str] = []

    def refused(relpath: str, reason: str) -> None:
        result.problems.append(Finding(code="PRT000", message=reason, path=relpath))

    with RootWriter(str(result.root)) as writer:
        present: dict[str, bool] = {}
        for fr in result.files:
            # the files a fix imports first: a fixed file must never import a module that is missing
            ready = True
            for path, text in fr.new_files.items():
                if path not in present:
                    try:
                        if writer.create(path, text.encode("utf-8")):
                            written.append(path)
                        present[path] = True
                    except WriteRefused as exc:
                        refused(path, exc.reason)
                        present[path] = False
                ready = ready and present[path]
            if not fr.changed:
                continue
            if not ready:
                missing = ", ".join(p for p in fr.new_files if not present.get(p))
                refused(fr.relpath, f"not written: its fix needs {missing}, which porter could not create")
                continue
            text = fr.final_text
            assert text is not None
            try:
                writer.replace(fr.relpath, fr.encode(text), fr.digest or None)
                written.append(fr.relpath)
            except WriteRefused as exc:
                refused(fr.relpath, exc.reason)
        for patch in result.extra_patches:
            for change in patch.changes:
                expected = content_digest(change.before) if change.before is not None else None
                try:
                    if change.after is None:
                        writer.delete(change.path, expected)
                    elif change.before is None:
                        if not writer.create(change.path, change.after):
                            refused(change.path, "not created: something already exists at this path")
                            continue
                    else:
                        writer.replace(change.path, change.after, expected)
                    written.append(change.path)
                except WriteRefused as exc:
                    refused(change.path, exc.reason)
    return written
