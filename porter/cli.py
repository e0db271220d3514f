"""porter's command line (click).

Exit codes follow Ruff: 0 clean / done, 1 findings remain (``check``) or changes pending
(``apply --dry-run``), 2 usage, configuration or internal error.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console

    from .config import Settings

from . import __version__, express
from .config import setting_keys
from .console import FORMATS, RENDERERS, LazyConsole, Progress, Report, emit, resolve_settings, write_report

CHECK_FORMATS = tuple(f for f in FORMATS if f not in ("markdown", "html"))  # no long-form report for a check

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
NOT_ANALYSED = frozenset({"PRT003", "PRT004"})  # binary, too large: `check` fails on them


LAZY_COMMANDS = {"migrate": ("porter.migrate", "migrate"), "doctor": ("porter.doctor", "doctor")}


class PorterGroup(click.Group):
    """Loads heavy commands lazily; turns unexpected exceptions into exit code 2."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            import importlib

            module, attr = LAZY_COMMANDS[cmd_name]
            try:
                command = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError):
                return None
            self.add_command(command)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("porter: interrupted", err=True)
            sys.exit(EXIT_ERROR)
        except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
            from .config import ConfigError
            from .registry import FamilyLoadError

            if isinstance(exc, ConfigError):
                click.echo(f"porter: config error: {exc}", err=True)
            elif isinstance(exc, FileNotFoundError) and getattr(exc, "install_hint", None):
                click.echo(f"porter: {exc}", err=True)
            elif isinstance(exc, FamilyLoadError):
                click.echo(f"porter: {exc}", err=True)
            elif isinstance(exc, OSError) and exc.filename is not None:
                # an output path of the user's (-o, --patch-dir): a plain message, not a crash
                click.echo(f"porter: error: {exc.filename}: {exc.strerror or exc}", err=True)
            else:
                click.echo(f"porter: internal error: {type(exc).__name__}: {exc}", err=True)
                if os.environ.get("PORTER_DEBUG"):
                    raise
            sys.exit(EXIT_ERROR)


@click.group(cls=PorterGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="porter")
@click.option("--trust-git-dir", is_flag=True,
              help="Follow a .git file or symlink (gitdir: ...) that points elsewhere, e.g. a linked worktree; "
              "by default porter treats such a tree as not under git (also PORTER_TRUST_GIT_DIR=1).")
def main(trust_git_dir: bool = False) -> None:
    """porter: port PyTorch code off NVIDIA lock-in (CUDA → ROCm, vendor-neutral).

    \b
    porter migrate REPO     the whole port as a reviewed patch series plus MIGRATION.md
    porter audit PATH       inventory the CUDA surface, classified, with an effort estimate
    porter apply --dry-run  preview the fixes as a git-apply-able diff
    porter apply            write the safe fixes (--unsafe-fixes adds approximations)
    porter check FILES      fail when CUDA lock-in is present (pre-commit)
    porter doctor           smoke-test this machine's torch, GPU and ROCm/CUDA stack
    porter rules / rule X   rule documentation
    """
    if trust_git_dir:
        from . import proc

        proc.set_trust_git_dir(True)


def common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.argument("paths", nargs=-1, type=click.Path(path_type=Path)),
        click.option("--select", multiple=True, help="Rule codes or prefixes to enable (comma-separated or repeated); ALL for every rule."),
        click.option("--extend-select", multiple=True, help="Codes or prefixes to enable on top of the configured selection."),
        click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable."),
        click.option("--config", "config", multiple=True, help="A config file, or a KEY=VALUE override in TOML syntax; "
                     f"KEY is one of {', '.join(setting_keys())}, or FAMILY.KEY (see `porter options`)."),
        click.option("--isolated", is_flag=True, help="Ignore configuration files."),
        click.option("--root", type=click.Path(path_type=Path, file_okay=False), help="The target root (default: the single directory given, else the current directory)."),
        click.option("-j", "--jobs", type=int, default=None, help="Worker processes (default: all cores; 1 = serial)."),
        click.option("--force-exclude", is_flag=True, help="Apply configured excludes to files named on the command line too (pre-commit)."),
        click.option("--no-cache", is_flag=True, help="Do not read or write the audit cache."),
        click.option("--timeout", type=float, default=None, help="CPU seconds allowed per file (default 60)."),
        click.option("--stdin-filename", default=None, help="File name to assume for '-' (stdin)."),
        click.option("-q", "--quiet", is_flag=True, help="Print findings only, no summary or progress."),
        click.option("-v", "--verbose", is_flag=True, help="Print timing and per-file details."),
    ]
    for option in reversed(options):
        func = option(func)

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        return func(**kwargs)

    return wrapper


def _root_for(paths: tuple[Path, ...], root: Path | None) -> Path:
    if root is not None:
        return root
    real = [p for p in paths if str(p) != "-"]
    if len(real) == 1 and real[0].is_dir():
        return real[0]  # a symlink to a folder too: the runner resolves it (followed once, explicitly)
    return Path.cwd()


def _settings(kw: dict[str, Any], root: Path, unsafe: bool | None = None) -> Settings:
    return resolve_settings(root, config=kw.get("config", ()), isolated=kw.get("isolated", False),
                            select=kw.get("select", ()), extend_select=kw.get("extend_select", ()),
                            ignore=kw.get("ignore", ()), unsafe_fixes=unsafe, timeout=kw.get("timeout"),
                            annotate=bool(kw.get("annotate")))


def _stderr_console(quiet: bool) -> Console:
    return LazyConsole(stderr=True, quiet=quiet)  # type: ignore[return-value] # rich is imported on first use


def _progress(console: Any, enabled: bool) -> Callable[[int, int, str], None] | None:
    if not enabled:
        return None
    return Progress(console)


def _run(kw: dict[str, Any], mode: str, unsafe: bool | None = None, *,  # type: ignore[no-untyped-def]
         missing_ok: bool = False):
    from .runner import run

    paths = kw["paths"] or (Path("."),)
    root = _root_for(paths, kw.get("root"))
    if not missing_ok:  # `check` reports a missing file as PRT005 (pre-commit may pass deleted paths)
        # a path outside an explicit --root is the runner's to report (PRT009), existing or not
        inside = os.path.abspath(root).rstrip(os.sep) + os.sep
        missing = [str(p) for p in paths if not os.path.lexists(p)
                   and (kw.get("root") is None or (os.path.abspath(p) + os.sep).startswith(inside))]
        if missing:
            raise click.BadParameter(f"no such file or directory: {', '.join(missing)}", param_hint="'PATHS'")
    if not root.is_dir():
        raise click.UsageError(f"root {root} is not a directory")
    from .runner import resolve_root

    express.note_named([str(root), *(str(p) for p in paths)])  # a symlink named here is followed: no record
    root, resolved_paths = resolve_root(root, list(paths))
    express.note_config(str(root), kw.get("config", ()))  # signed before they are read (porter.express)
    settings = _settings(kw, root, unsafe)
    for note in settings.notes:
        click.echo(f"porter: warning: {note}", err=True)
    console = _stderr_console(kw.get("quiet", False))
    progress = _progress(console, not kw.get("quiet"))
    try:
        result = run(
            root, resolved_paths, settings, mode,  # type: ignore[arg-type]
            jobs=kw.get("jobs"), force_exclude=kw.get("force_exclude", False),
            progress=progress, use_cache=False if kw.get("no_cache") else None,
        )
    finally:
        if isinstance(progress, Progress):
            progress.close()
    if kw.get("verbose"):
        console.print(f"[dim]{result.files_scanned} files in {result.seconds:.2f} s (root {root})[/dim]")
    if result.files_scanned == 0 and not result.problems:
        # never a silent "clean": say that nothing was looked at
        click.echo(f"porter: warning: no files to analyse under {', '.join(str(p) for p in paths)} "
                   f"(root {root}); nothing was checked", err=True)
    return result, console


def _shown(text: str) -> str:
    """Target-controlled text (file names, quoted source) for a rich console: no markup, no control codes."""
    from rich.markup import escape

    from .reporters import printable

    return escape(printable(text))


def _stdin_mode(kw: dict[str, Any]) -> bool:
    return any(str(p) == "-" for p in kw["paths"])


def _read_stdin(kw: dict[str, Any]):  # type: ignore[no-untyped-def]
    from . import languages
    from .textio import SourceError, decode

    name = kw.get("stdin_filename") or "stdin.py"
    language = languages.detect(name)
    if language is None:
        raise click.UsageError(f"--stdin-filename {name!r}: porter does not know this file type")
    data = sys.stdin.buffer.read()
    kw["stdin_bytes"] = data
    try:
        decoded = decode(data, python=language == "python")
    except SourceError as exc:
        raise click.ClickException(f"{name}: {exc.message}") from None
    root = kw.get("root") or Path.cwd()
    return name, language, decoded, _settings(kw, root)


# -- audit ----------------------------------------------------------------------------------


def _link_base(root: Path | None, output: Path | None) -> str:
    """Where the HTML report's line links point: relative to the report file when it is written
    with -o (the links survive moving report and tree together), else the root's file:// URI."""
    from urllib.parse import quote

    if root is None:
        return ""
    root_abs = Path(os.path.abspath(root))
    if output is not None:
        rel = os.path.relpath(root_abs, Path(os.path.abspath(output)).parent)
        return "" if rel == "." else quote(Path(rel).as_posix(), safe="/.") + "/"
    return root_abs.as_uri() + "/"


@main.command()
@common_options
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              default="text", show_default=True,
              help="Output format (html: one self-contained page with charts; best with -o).")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), help="Write the report to a file.")
def audit(fmt: str, output: Path | None, **kw: Any) -> None:
    """Inventory the CUDA surface of PATHS: every finding, classified, with an effort estimate."""
    if _stdin_mode(kw):
        from .engine import analyze

        name, language, decoded, settings = _read_stdin(kw)
        findings = analyze(name, decoded.text, language, settings)
        files, root_label, root, record = 1, name, None, None
    else:
        result, console = _run(kw, "audit")
        findings, files, root_label, root = result.findings, result.files_scanned, str(result.root), result.root
        record = result.record
    report = Report(findings, root=root, root_label=root_label, files_scanned=files,
                    link_base=_link_base(root, output) if fmt == "html" else "")
    if record is not None and fmt in RENDERERS and output is None:
        # a whole-tree audit the warm-run record vouches for: the same report as last time, from the record
        key = f"{fmt}\0{root_label}\0{files}"
        text = record.rendered(key)
        if text is None:
            text = RENDERERS[fmt](report)
            record.remember(key, text)
        emit(text, None)
        express.offer(text, EXIT_OK, record.vouched())  # the next identical command answers from this
        sys.exit(EXIT_OK)
    write_report(fmt, report, output, quiet=kw["quiet"], audit_summary=True)
    sys.exit(EXIT_OK)


# -- check ----------------------------------------------------------------------------------


@main.command()
@common_options
@click.option("--format", "fmt", type=click.Choice(CHECK_FORMATS),
              default="concise", show_default=True)
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain.")
@click.option("--include-benign", is_flag=True, help="Also fail on benign (info-level) findings.")
def check(fmt: str, exit_zero: bool, include_benign: bool, **kw: Any) -> None:
    """Exit 1 when CUDA lock-in porter can see remains in PATHS (the pre-commit entry point).

    Info-level findings (benign sites such as `device="cuda"`) are reported with
    --include-benign only; warnings and errors fail the check.
    """
    from .registry import is_actionable

    record = None
    if _stdin_mode(kw):
        from .engine import analyze

        name, language, decoded, settings = _read_stdin(kw)
        findings = analyze(name, decoded.text, language, settings)
        root = None
    else:
        result, _ = _run(kw, "audit", missing_ok=True)
        findings, root, record = result.findings, result.root, result.record
    if not include_benign:
        # a file porter could not analyse (binary, too large) is never a silent pass: padding a file
        # past max-file-size or adding one NUL byte must not hide what it holds (exclude it explicitly)
        findings = [f for f in findings if is_actionable(f) or f.code in NOT_ANALYSED]
    report = Report(findings, root=root)
    text = RENDERERS[fmt](report) if fmt in RENDERERS else None
    if text is not None:
        emit(text, None)
    else:
        write_report(fmt, report, quiet=kw["quiet"])
    summary = ""
    if fmt == "concise" and findings and not kw["quiet"]:
        fixable = sum(1 for f in findings if f.fix.value == "safe")
        summary = (f"porter: {len(findings)} finding(s)"
                   + (f", {fixable} fixable with `porter apply`" if fixable else ""))
        click.echo(summary, err=True)
    code = EXIT_FINDINGS if findings and not exit_zero else EXIT_OK
    if record is not None and text is not None:
        # a whole tree the warm-run record vouches for: the next identical check answers from this
        express.offer(text, code, record.vouched(), err=summary + "\n" if summary else "")
    sys.exit(code)


# -- apply ----------------------------------------------------------------------------------


def _contained_dir(root: Path, directory: str) -> str:
    """``directory`` as a '/'-separated path inside ``root``, refusing absolute paths, ``..`` and
    symbolic links on the way (the target repository is not trusted)."""
    parts = Path(directory).parts
    if not parts or Path(directory).is_absolute() or ".." in parts:
        raise click.UsageError(f"--emit-parity {directory!r} must be a relative folder inside the root")
    here = root
    for part in parts:
        here = here / part
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            raise click.UsageError(f"--emit-parity: {here} is a symbolic link or not a folder")
    return "/".join(parts)


@main.command()
@common_options
@click.option("--dry-run", "--diff", "dry_run", is_flag=True, help="Print the unified diff; write nothing.")
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Also apply approximate (unsafe) fixes.")
@click.option("--patch-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Write one patch per rule family (plus INDEX.md) here instead of changing files.")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit 1 when any file was changed.")
@click.option("--show-fixes", is_flag=True, help="List every fix applied.")
@click.option("--annotate", is_flag=True, help="Write a `porter: CODE reason` comment above each flagged site.")
@click.option("--emit-parity", "emit_parity", metavar="DIR",
              help="Also write per-site parity tests of the rewrites to DIR (relative to the root), e.g. "
              "tests/porter_parity.")
def apply(dry_run: bool, unsafe_fixes: bool | None, patch_dir: Path | None, exit_non_zero_on_fix: bool,
          show_fixes: bool, annotate: bool, emit_parity: str | None, **kw: Any) -> None:
    """Apply porter's fixes to PATHS (safe ones; --unsafe-fixes adds approximations)."""

    from .registry import is_actionable
    from .runner import write

    if _stdin_mode(kw):
        from .engine import fix

        name, language, decoded, settings = _read_stdin(kw)
        if unsafe_fixes is not None:
            from dataclasses import replace

            settings = replace(settings, unsafe_fixes=unsafe_fixes)
        if not decoded.exact:
            click.echo(f"porter: {name}: {decoded.encoding} does not round-trip byte for byte; "
                       "input passed through unchanged", err=True)
            sys.stdout.buffer.write(kw["stdin_bytes"])
            sys.exit(EXIT_ERROR)
        outcome = fix(name, decoded.text, language, settings, newline=decoded.newline)
        fixed_bytes = decoded.encode(outcome.text)
        if dry_run:
            from .patchset import FileChange, render_change

            original = decoded.encode(decoded.text)
            sys.stdout.buffer.write(render_change(FileChange(name, original, fixed_bytes)))
            sys.stdout.flush()
            sys.exit(EXIT_FINDINGS if fixed_bytes != original else EXIT_OK)
        sys.stdout.buffer.write(fixed_bytes)
        sys.exit(EXIT_OK)
    if annotate:
        kw["annotate"] = True
    result, console = _run(kw, "fix", unsafe_fixes)
    parity = None
    if emit_parity is not None:
        from .parity import parity_patch

        parity = parity_patch(result, _contained_dir(result.root, emit_parity))
        if parity is not None:
            from dataclasses import replace as _replace

            changes = []
            for change in parity.changes:  # a re-run replaces the module it wrote before
                existing = result.root / change.path
                if existing.is_file() and not existing.is_symlink():
                    change = _replace(change, before=existing.read_bytes())
                changes.append(change)
            parity.changes = changes
            result.extra_patches.append(parity)
    series = result.series()
    changed = result.changed_files
    if dry_run:
        # one diff per file, in path order, from the original to the final text (all families' passes)
        sys.stdout.buffer.write(series.render_combined())
        sys.stdout.flush()
    elif patch_dir is not None:
        if patch_dir.is_symlink() or (patch_dir.exists() and not patch_dir.is_dir()):
            raise click.UsageError(f"--patch-dir {patch_dir} must be a directory (not a symlink)")
        written = series.write_dir(patch_dir, title=f"porter patch series for {result.root.name}")
        console.print(f"porter: wrote {len(written) - 1} patch(es) and INDEX.md to {patch_dir}", markup=False)
    else:
        written = write(result)
        if kw.get("verbose"):
            console.print(f"[dim]wrote {len(written)} file(s)[/dim]", highlight=False)
        if parity is not None and not any(f.code == "PRT000" and f.path == parity.changes[0].path
                                           for f in result.problems):
            console.print(f"porter: wrote parity tests to {parity.changes[0].path}", markup=False)
    fixed = result.fixed
    if not dry_run and patch_dir is None:
        refused = {f.path for f in result.problems if f.code == "PRT000"}
        fixed = [f for f in fixed if f.path not in refused]  # count only what reached the disk
        changed = [fr for fr in changed if fr.relpath not in refused]
    if show_fixes or kw.get("verbose"):
        for f in fixed:
            console.print(f"  fixed {_shown(f.path)}:{f.line}:{f.column} {f.code} {_shown(f.message)}",
                          highlight=False)
    remaining = [f for f in result.findings if is_actionable(f)]
    unsafe_left = sum(1 for f in remaining if f.fix.value == "unsafe")
    verb = "would fix" if dry_run or patch_dir else "fixed"
    console.print(
        f"porter: {verb} {len(fixed)} site(s) in {len(changed)} file(s); {len(remaining)} finding(s) remain"
        + (f" ({unsafe_left} fixable with --unsafe-fixes)" if unsafe_left and not result.settings.unsafe_fixes
           else "") + ".",
        highlight=False,
    )
    errors = [f for f in result.findings if f.code.startswith("PRT00")]
    for f in errors:
        console.print(f"  [red]{f.code}[/red] {_shown(f.path)}: {_shown(f.message)}", highlight=False)
    if dry_run:
        sys.exit(EXIT_FINDINGS if changed else EXIT_OK)
    if any(f.code == "PRT000" for f in result.findings):
        sys.exit(EXIT_ERROR)  # some fixes were not written (each is listed above)
    sys.exit(EXIT_FINDINGS if exit_non_zero_on_fix and changed else EXIT_OK)


# -- rules ----------------------------------------------------------------------------------


@main.command("rule")
@click.argument("code")
def rule_cmd(code: str) -> None:
    """Explain one rule (by code such as PRT101, or by name)."""
    from . import registry

    found = registry.lookup(code)
    if found is None:
        raise click.UsageError(f"no rule {code!r}; see `porter rules`")
    click.echo(found.markdown(), nl=False)


@main.command("rules")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable list.")
@click.option("--family", default=None, help="Only this family.")
def rules_cmd(as_json: bool, family: str | None) -> None:
    """List every rule: code, name, class, fix availability, family."""
    import json

    from . import registry

    registry.check_loaded()
    table = [r for r in registry.rules().values() if family is None or r.family == family]
    if as_json:
        click.echo(json.dumps([
            {"code": r.code, "name": r.name, "family": r.family, "summary": r.summary,
             "category": r.category.value, "severity": r.severity.value, "fix": r.fix.value,
             "effort_hours": r.effort_hours, "default": r.default, "explanation": r.explanation}
            for r in table
        ], indent=2))
        return
    for r in table:
        click.echo(f"{r.code}  {r.name:<34} {r.category.value:<8} fix={r.fix.value:<6} {r.family:<12} {r.summary}")


@main.command("options")
@click.option("--markdown", is_flag=True, help="As Markdown tables (the README's list).")
def options_cmd(markdown: bool) -> None:
    """List every setting of [tool.porter] and of each family's [tool.porter.<family>]: type, default, help."""
    from . import registry
    from .config import render_options

    registry.check_loaded()
    click.echo(render_options(markdown), nl=False)


if __name__ == "__main__":  # pragma: no cover
    main()
