"""What porter's commands share: consoles, progress, the settings of a command and writing a
report (``porter.cli`` and ``porter.migrate`` both use it)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console

    from .config import Settings
    from .findings import Finding


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for v in values:
        out += [p.strip().upper() for p in v.split(",") if p.strip()]
    return tuple(out)


def _check_selectors(option: str, selectors: tuple[str, ...]) -> None:
    """An unknown code or prefix is a usage error (as in Ruff), never a silent empty selection."""
    if not selectors:
        return
    from . import registry

    registry.check_loaded()
    codes = registry.rules().keys()
    unknown = [sel for sel in selectors if sel != "ALL" and not any(code.startswith(sel) for code in codes)]
    if unknown:
        raise click.BadParameter(f"unknown rule selector(s) {', '.join(map(repr, unknown))}: not a rule code, "
                                 "a prefix of one, or ALL (see `porter rules`)", param_hint=f"'{option}'")


def resolve_settings(root: Path, *, config: Sequence[str] = (), isolated: bool = False,
                     select: Sequence[str] = (), extend_select: Sequence[str] = (), ignore: Sequence[str] = (),
                     unsafe_fixes: bool | None = None, timeout: float | None = None,
                     annotate: bool = False) -> Settings:
    """The settings of a command: ``root``'s configuration with the command line's options on top.

    Selectors may be comma-separated or repeated; an unknown one is a usage error (``--select``...).
    """
    from .config import ConfigRequest, resolve

    for option, values in (("--select", select), ("--extend-select", extend_select), ("--ignore", ignore)):
        _check_selectors(option, _split(tuple(values)))
    extra: dict[str, Any] = {}
    if timeout is not None:
        extra["timeout"] = timeout
    if annotate:
        extra["annotate"] = True
    request = ConfigRequest(
        config=tuple(config),
        isolated=isolated,
        select=_split(tuple(select)),
        extend_select=_split(tuple(extend_select)),
        ignore=_split(tuple(ignore)),
        unsafe_fixes=unsafe_fixes,
        extra=extra,
    )
    return resolve(root, request)


def make_console(*, stderr: bool = False, quiet: bool = False, file: Any = None, width: int | None = None) -> Console:
    """A rich console that never renders ``:name:`` as an emoji and never hard-wraps piped output.

    On a terminal rich uses the terminal's width; anywhere else (a pipe, a CI log, a file) lines
    are written at their full length (a very wide console plus ``soft_wrap``).
    """
    from rich.console import Console

    console: Console = Console(stderr=stderr, quiet=quiet, file=file, highlight=False, emoji=False,
                               soft_wrap=True, width=width)
    if width is None and not console.is_terminal:
        console.width = NO_WRAP_WIDTH
    return console


NO_WRAP_WIDTH = 10_000


class LazyConsole:
    """A :func:`make_console` console made on first use: a command that prints nothing on it (a JSON
    audit of a small tree, ``-q``) never imports rich. Attributes are the console's."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            self._console = make_console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


def real_console(console: Any) -> Any:
    """The rich console behind ``console`` (itself when it is not a :class:`LazyConsole`)."""
    return console.console if isinstance(console, LazyConsole) else console


PROGRESS_MIN_FILES = 50  # smaller runs finish before progress would help
PROGRESS_INTERVAL = 5.0  # seconds between progress lines when stderr is not a terminal


class Progress:
    """Files done / total / rate while porter works.

    On a terminal: a ``rich.progress`` bar (spinner, bar, done/total, files per second, elapsed),
    removed when the run ends. Elsewhere (CI logs, pipes): one plain line on stderr every
    :data:`PROGRESS_INTERVAL` seconds and a final one, e.g. ``porter: 120/800 files (15%), 41.2 files/s``.
    Runs of fewer than :data:`PROGRESS_MIN_FILES` files print nothing.
    """

    def __init__(self, console: Any, label: str = "porter", *, interval: float = PROGRESS_INTERVAL,
                 min_files: int = PROGRESS_MIN_FILES, clock: Callable[[], float] | None = None) -> None:
        import time

        self.console = console
        self.label = label
        self.interval = interval
        self.min_files = min_files
        self.clock = clock or time.monotonic
        self.started: float | None = None
        self.last_done = self.last_total = 0
        self.first_done = 0
        self.last_line = 0.0
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, done: int, total: int, path: str) -> None:
        if total < self.min_files:
            return
        now = self.clock()
        if self.started is not None and (done < self.last_done or total != self.last_total):
            self.close()  # a new pass (migrate audits, fixes, then audits again)
        self.last_done, self.last_total = done, total
        if self.started is None:
            self.started = now
            self.first_done = done
            self.last_line = now
        if self.console.is_terminal:
            self._tty(done, total)
            return
        if done == total or now - self.last_line >= self.interval:
            self.last_line = now
            elapsed = max(now - self.started, 1e-9)
            rate = (done - self.first_done) / elapsed
            self.console.print(f"{self.label}: {done}/{total} files ({100 * done // total}%), {rate:.1f} files/s, "
                               f"{elapsed:.0f} s", markup=False, highlight=False)

    def _tty(self, done: int, total: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as RichProgress

        if self.bar is None or (self.task is not None and self.bar.tasks[0].total != total):
            self.close()
            self.bar = RichProgress(
                SpinnerColumn(), TextColumn(f"{self.label}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("files"), TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                console=real_console(self.console), transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total, rate="")
        elapsed = max(self.clock() - (self.started or 0.0), 1e-9)
        self.bar.update(self.task, completed=done, rate=f"{done / elapsed:.1f} files/s")
        if done >= total:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
            self.task = None
        self.started = None


def emit(text: str, output: Path | None) -> None:
    """``text`` on stdout, or written to ``output``: a file is replaced atomically; a device or a
    pipe (``-o /dev/null``, a FIFO) is written to, never replaced by a file."""
    if output is None:
        click.echo(text, nl=False)
        return
    from .textio import atomic_write

    try:
        st = os.lstat(output)
    except OSError:
        st = None
    try:
        if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            with open(output, "wb") as fh:
                fh.write(text.encode("utf-8"))
        else:
            atomic_write(output, text.encode("utf-8"))
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(output)) from None


# -- reports: one dispatcher for every format ---------------------------------------------------


@dataclass(frozen=True)
class Report:
    """What a report is rendered from."""

    findings: Sequence[Finding]
    root: Path | None = None  # the analysed tree (SARIF reads fixed files' text from it); None: stdin
    root_label: str = ""  # the root as shown: JSON's "root", the titles
    files_scanned: int = 0
    link_base: str = ""  # HTML: where the line links point

    @property
    def title(self) -> str:
        return f"porter audit: {Path(self.root_label).name or self.root_label}"


def _reporters() -> Any:
    from . import reporters  # imported when a report is written: the CLI starts without the rules

    return reporters


def _render_html(r: Report) -> str:
    from .estimate import summarize
    from .html_report import render_html

    return render_html(r.findings, summarize(list(r.findings), files_scanned=r.files_scanned), r.title,
                       link_base=r.link_base, root_label=r.root_label)


# format -> renderer; "text" (grouped, coloured, on a console) is porter.reporters.print_text
RENDERERS: dict[str, Callable[[Report], str]] = {
    "concise": lambda r: _reporters().render_concise(r.findings),
    "json": lambda r: _reporters().render_json(r.findings, root=r.root_label, files_scanned=r.files_scanned),
    "sarif": lambda r: _reporters().render_sarif(r.findings, root=r.root),
    "markdown": lambda r: _reporters().render_markdown(r.findings, title=r.title, files_scanned=r.files_scanned),
    "github": lambda r: _reporters().render_github(r.findings),
    "html": _render_html,
}
FORMATS = ("text", *RENDERERS)


def write_report(fmt: str, report: Report, output: Path | None = None, *, quiet: bool = False,
                 audit_summary: bool = False) -> None:
    """``report`` in ``fmt`` on stdout or to ``output``: the one output route of the commands.

    ``text`` is printed on a console (coloured on a terminal), with the counts unless ``quiet``
    and, with ``audit_summary``, the audit's summary (always in a file, unless ``quiet`` on stdout).
    """
    if fmt != "text":
        emit(RENDERERS[fmt](report), output)
        return
    reporters = _reporters()
    if output is not None:
        with open(output, "w", encoding="utf-8") as fh:
            reporters.print_text(report.findings, make_console(file=fh), files_scanned=report.files_scanned,
                                 show_summary=not quiet, audit_summary=audit_summary)
    else:
        reporters.print_text(report.findings, make_console(), files_scanned=report.files_scanned,
                             show_summary=not quiet, audit_summary=audit_summary and not quiet)

