"""The pass runner: discovery → (parallel) per-file analysis or fixing → results.

A run has two phases. Phase 1 handles source files (Python, CUDA/C++, shell, YAML,
Dockerfiles); phase 2 handles dependency manifests, with facts from phase 1 (which
modules the code still imports, which rules' fixes were applied), so that a manifest drops
a CUDA-only requirement only when no code needs it any more.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from . import languages, registry
from .config import Settings
from .discovery import Discovery, SourceRef, discover, is_within
from .engine import FixOutcome, Stage, analyze, fix
from .findings import Finding
from .framework import RepoFacts
from .patchset import FileChange, Patch, PatchSeries
from .textio import Decoded, SourceError, atomic_write, read_source

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
    error: bool = False
    seconds: float = 0.0

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
        order = {f.name: f.order for f in registry.families()}
        buckets: dict[tuple[int, int, str], Patch] = {}
        created: set[str] = set()

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
        patches = [buckets[k] for k in sorted(buckets)] + list(self.extra_patches)
        manual = [
            f"`{f.path}:{f.line}` {f.code} {registry.rules()[f.code].name if f.code in registry.rules() else ''}: "
            f"{f.message}"
            for f in self.findings
            if _needs_human(f)
        ]
        return PatchSeries(patches=patches, manual=manual)


def _needs_human(f: Finding) -> bool:
    rule = registry.rules().get(f.code)
    if rule is None:
        return True
    severity = (f.severity or rule.severity).value
    return severity != "info"


# -- per-file work (runs in workers) --------------------------------------------------------

_STATE: dict[str, Any] = {}


def _init_worker(root: str, settings: Settings, facts: RepoFacts, mode: Mode) -> None:
    _STATE.update(root=root, settings=settings, facts=facts, mode=mode)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):
        pass


class _Timeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: float):  # type: ignore[no-untyped-def]
    usable = seconds > 0 and hasattr(signal, "setitimer")
    if usable:
        try:
            def _raise(signum: int, frame: Any) -> None:
                raise _Timeout

            old = signal.signal(signal.SIGALRM, _raise)
            signal.setitimer(signal.ITIMER_REAL, seconds)
        except ValueError:  # not in the main thread
            usable = False
    try:
        yield
    finally:
        if usable:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def _imports_of(text: str) -> frozenset[str]:
    return frozenset(a or b for a, b in _IMPORT_RE.findall(text))


def process_file(ref: SourceRef, root: str, settings: Settings, facts: RepoFacts, mode: Mode) -> FileResult:
    """Analyse (audit) or fix one file; every problem becomes a finding, never an exception."""
    started = time.perf_counter()
    result = FileResult(ref.relpath, ref.language)
    full = Path(root, ref.relpath)
    try:
        _, decoded = read_source(full, python=ref.language == "python", max_bytes=settings.max_file_size)
    except SourceError as exc:
        result.findings = [Finding(code=exc.code, message=exc.message, path=ref.relpath)]
        result.error = True
        return result
    result.decoded = decoded
    try:
        with _time_limit(settings.timeout):
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
                # a file a fix would create that already exists on disk is reused, never replaced
                result.new_files = {p: t for p, t in outcome.new_files.items()
                                    if not os.path.lexists(os.path.join(root, p))}
                result.new_files_by_family = {
                    fam: {p: t for p, t in files.items() if p in result.new_files}
                    for fam, files in outcome.new_files_by_family.items()
                }
                final = outcome.text
    except _Timeout:
        result.findings = [Finding(code="PRT008", message=f"analysis took longer than {settings.timeout:g} s; "
                                   "file skipped", path=ref.relpath)]
        result.stages, result.fixed, result.error = [], [], True
        final = decoded.text
    except RecursionError:
        result.findings = [Finding(code="PRT001", message="nesting too deep for the parser; file skipped",
                                   path=ref.relpath)]
        result.stages, result.fixed, result.error = [], [], True
        final = decoded.text
    if ref.language == "python":
        result.imports = _imports_of(final)
    result.seconds = time.perf_counter() - started
    return result


def _existing(root: str, settings: Settings, facts: RepoFacts) -> Iterable[str]:
    return facts.extra.get("existing_files", ())


def _work(ref: SourceRef) -> FileResult:
    return process_file(ref, _STATE["root"], _STATE["settings"], _STATE["facts"], _STATE["mode"])


# -- cache ----------------------------------------------------------------------------------


class Cache:
    """Audit results keyed on file content + porter version + settings + repo facts."""

    def __init__(self, directory: Path, key: str) -> None:
        self.path = directory / f"audit-{key}.json"
        self.entries: dict[str, Any] = {}
        self.dirty = False
        try:
            self.entries = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.entries = {}

    @staticmethod
    def digest(root: str, ref: SourceRef) -> str | None:
        try:
            with open(os.path.join(root, ref.relpath), "rb") as fh:
                return hashlib.blake2b(fh.read(), digest_size=16).hexdigest()
        except OSError:
            return None

    def get(self, ref: SourceRef, digest: str) -> FileResult | None:
        hit = self.entries.get(ref.relpath)
        if not hit or hit.get("digest") != digest:
            return None
        findings = [_finding_from_dict(d) for d in hit["findings"]]
        return FileResult(ref.relpath, ref.language, findings=findings, imports=frozenset(hit.get("imports", ())))

    def put(self, ref: SourceRef, digest: str, result: FileResult) -> None:
        if result.error:
            return
        self.entries[ref.relpath] = {
            "digest": digest,
            "findings": [_finding_to_dict(f) for f in result.findings],
            "imports": sorted(result.imports),
        }
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            gitignore = self.path.parent / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("*\n", encoding="utf-8")
            atomic_write(self.path, json.dumps(self.entries, separators=(",", ":")).encode("utf-8"))
        except OSError:
            pass


def _finding_to_dict(f: Finding) -> dict[str, Any]:
    return {
        "code": f.code, "message": f.message, "path": f.path, "line": f.line, "column": f.column,
        "end_line": f.end_line, "end_column": f.end_column, "fix": f.fix.value, "fix_title": f.fix_title,
        "category": f.category.value if f.category else None,
        "severity": f.severity.value if f.severity else None,
        "effort_hours": f.effort_hours, "data": f.data,
    }


def _finding_from_dict(d: dict[str, Any]) -> Finding:
    from .findings import Applicability, Category, Severity

    return Finding(
        code=d["code"], message=d["message"], path=d["path"], line=d["line"], column=d["column"],
        end_line=d["end_line"], end_column=d["end_column"], fix=Applicability(d["fix"]),
        fix_title=d.get("fix_title", ""),
        category=Category(d["category"]) if d.get("category") else None,
        severity=Severity(d["severity"]) if d.get("severity") else None,
        effort_hours=d.get("effort_hours"), data=d.get("data") or {},
    )


# -- orchestration --------------------------------------------------------------------------


LOCK_NAMES = ("poetry.lock", "uv.lock", "Pipfile.lock", "pdm.lock")


def collect_facts(root: Path, refs: Sequence[SourceRef], settings: Settings | None = None) -> RepoFacts:
    """Pinned versions from the repo's manifests and lock files (read, never executed).

    The root's own manifests count even when only some files were named (pre-commit), so a
    file gets the same facts whether it is checked alone or as part of the tree.
    """
    manifest_texts: dict[str, str] = {}
    candidates = [r.relpath for r in refs if is_manifest(r)]
    try:
        top = sorted(os.listdir(root))
    except OSError:
        top = []
    for name in top:
        ref = SourceRef(name, languages.detect(name) or "")
        if (name in LOCK_NAMES or is_manifest(ref)) and name not in candidates:
            full = root / name
            if full.is_file() and not full.is_symlink():
                candidates.append(name)
    for rel in candidates:
        try:
            with open(root / rel, "rb") as fh:
                data = fh.read(4 * 1024 * 1024)
            manifest_texts[rel] = data.decode("utf-8", "replace")
        except OSError:
            continue
    pins: dict[str, str] = {}
    try:
        from .manifests import collect_pins  # provided by the dependencies family
    except ImportError:  # pragma: no cover - during development
        collect_pins = None  # type: ignore[assignment]
    if collect_pins is not None and manifest_texts:
        try:
            pins = dict(collect_pins(manifest_texts))
        except Exception:  # noqa: BLE001 - a broken manifest must not stop the run
            pins = {}
    if settings is not None and settings.target_torch:
        pins["torch"] = f"=={settings.target_torch}"
    existing = frozenset(r.relpath for r in refs)
    extra: dict[str, Any] = {"existing_files": existing}
    for fam in registry.families():
        if fam.repo_facts is None or (settings is not None and not _family_selected(fam, settings)):
            continue
        rels = [r.relpath for r in refs if r.language in fam.languages]
        try:
            extra.update(fam.repo_facts(root, rels))
        except Exception:  # noqa: BLE001 - a failing pre-scan must not stop the run
            continue
    return RepoFacts(pins=pins, manifests=tuple(sorted(manifest_texts)), extra=extra)


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
            digest = Cache.digest(str(root), ref)
            if digest is not None:
                digests[ref.relpath] = digest
                hit = cache.get(ref, digest)
                if hit is not None:
                    results[ref.relpath] = hit
                    continue
        todo.append(ref)
    total = len(refs)
    done = len(results)
    workers = jobs if jobs > 0 else (os.cpu_count() or 1)
    if workers <= 1 or len(todo) < SERIAL_THRESHOLD:
        for ref in todo:
            results[ref.relpath] = process_file(ref, str(root), settings, facts, mode)
            done += 1
            if progress:
                progress(done, total, ref.relpath)
    else:
        chunk = max(1, min(64, len(todo) // (workers * 8) or 1))
        with ProcessPoolExecutor(
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
            if ref.relpath in digests:
                cache.put(ref, digests[ref.relpath], results[ref.relpath])
    return [results[r.relpath] for r in refs]


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
    registry.check_loaded()
    root = Path(os.path.abspath(root))
    found: Discovery = discover(root, list(paths), settings, force_exclude=force_exclude)
    facts = collect_facts(root, found.files, settings)
    jobs = settings.jobs if jobs is None else jobs
    cache_on = settings.cache if use_cache is None else use_cache
    cache = None
    if mode == "audit" and cache_on:
        key = hashlib.blake2b(
            (settings.fingerprint() + repr(sorted(facts.pins.items()))
             + repr(sorted((k, v) for k, v in facts.extra.items() if k != "existing_files"))).encode(),
            digest_size=8
        ).hexdigest()
        cache = Cache(root / settings.cache_dir, key)
    phase1 = [r for r in found.files if not is_manifest(r)]
    phase2 = [r for r in found.files if is_manifest(r)]
    results = _run_batch(phase1, root, settings, facts, mode, jobs, progress, cache)
    if phase2:
        imports = frozenset(m for fr in results for m in fr.imports)
        applied = frozenset(f.code for fr in results for f in fr.fixed)
        remaining = frozenset(f.code for fr in results for f in fr.findings)
        facts2 = replace(facts, imports=imports, applied=applied,
                         extra={**facts.extra, "remaining": remaining})
        # manifests are few, and their results depend on phase 1: never cached
        results += _run_batch(phase2, root, settings, facts2, mode, jobs, progress, None)
    if cache is not None:
        cache.save()
    return RunResult(root, results, found.problems, settings, facts, time.perf_counter() - started)


class WriteError(Exception):
    pass


def write(result: RunResult) -> list[str]:
    """Write every fixed file (atomically) and every new file; return the paths written."""
    root_real = os.path.realpath(result.root)
    written: list[str] = []
    for fr in result.changed_files:
        target = _safe_target(result.root, root_real, fr.relpath)
        text = fr.final_text
        assert text is not None
        atomic_write(target, fr.encode(text))
        written.append(fr.relpath)
    for patch in result.extra_patches:
        for change in patch.changes:
            target = _safe_target(result.root, root_real, change.path)
            if change.after is None:
                if target.exists() and not target.is_symlink():
                    target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(target, change.after)
            written.append(change.path)
    for fr in result.files:
        for path, text in fr.new_files.items():
            target = _safe_target(result.root, root_real, path)
            if os.path.lexists(target):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, text.encode("utf-8"))
            written.append(path)
    return written


def _safe_target(root: Path, root_real: str, relpath: str) -> Path:
    target = Path(root, relpath)
    parent_real = os.path.realpath(target.parent if target.parent.exists() else _existing_parent(target))
    if not is_within(parent_real, root_real) or ".." in Path(relpath).parts or Path(relpath).is_absolute():
        raise WriteError(f"refusing to write outside the root: {relpath}")
    if target.is_symlink():
        raise WriteError(f"refusing to write through a symlink: {relpath}")
    return target


def _existing_parent(path: Path) -> Path:
    p = path.parent
    while not p.exists() and p != p.parent:
        p = p.parent
    return p
