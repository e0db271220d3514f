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
from typing import Any

import click

from . import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


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
            elif isinstance(exc, FamilyLoadError):
                click.echo(f"porter: {exc}", err=True)
            else:
                click.echo(f"porter: internal error: {type(exc).__name__}: {exc}", err=True)
                if os.environ.get("PORTER_DEBUG"):
                    raise
            sys.exit(EXIT_ERROR)


@click.group(cls=PorterGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="porter")
def main() -> None:
    """porter: port PyTorch code off NVIDIA lock-in (CUDA → ROCm, vendor-neutral).

    \b
    porter audit PATH       inventory the CUDA surface, classified, with an effort estimate
    porter apply --dry-run  preview the fixes as a git-apply-able diff
    porter apply            write the safe fixes (--unsafe-fixes adds approximations)
    porter check FILES      fail when CUDA lock-in is present (pre-commit)
    porter rules / rule X   rule documentation
    """


def common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.argument("paths", nargs=-1, type=click.Path(path_type=Path)),
        click.option("--select", multiple=True, help="Rule codes or prefixes to enable (comma-separated or repeated); ALL for every rule."),
        click.option("--extend-select", multiple=True, help="Codes or prefixes to enable on top of the configured selection."),
        click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable."),
        click.option("--config", "config", multiple=True, help="A config file, or a KEY=VALUE override in TOML syntax."),
        click.option("--isolated", is_flag=True, help="Ignore configuration files."),
        click.option("--root", type=click.Path(path_type=Path, file_okay=False), help="The target root (default: the single directory given, else the current directory)."),
        click.option("-j", "--jobs", type=int, default=None, help="Worker processes (default: all cores; 1 = serial)."),
        click.option("--force-exclude", is_flag=True, help="Apply configured excludes to files named on the command line too (pre-commit)."),
        click.option("--no-cache", is_flag=True, help="Do not read or write the audit cache."),
        click.option("--timeout", type=float, default=None, help="Seconds allowed per file (default 60)."),
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


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for v in values:
        out += [p.strip().upper() for p in v.split(",") if p.strip()]
    return tuple(out)


def _root_for(paths: tuple[Path, ...], root: Path | None) -> Path:
    if root is not None:
        return root
    real = [p for p in paths if str(p) != "-"]
    if len(real) == 1 and real[0].is_dir() and not real[0].is_symlink():
        return real[0]
    return Path.cwd()


def _settings(kw: dict[str, Any], root: Path, unsafe: bool | None = None):  # type: ignore[no-untyped-def]
    from .config import ConfigRequest, resolve

    extra: dict[str, Any] = {}
    if kw.get("timeout") is not None:
        extra["timeout"] = kw["timeout"]
    if kw.get("annotate"):
        extra["annotate"] = True
    request = ConfigRequest(
        config=kw.get("config", ()),
        isolated=kw.get("isolated", False),
        select=_split(kw.get("select", ())),
        extend_select=_split(kw.get("extend_select", ())),
        ignore=_split(kw.get("ignore", ())),
        unsafe_fixes=unsafe,
        extra=extra,
    )
    return resolve(root, request)


def _stderr_console(quiet: bool):  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(stderr=True, quiet=quiet, highlight=False)


def _progress(console: Any, enabled: bool) -> Callable[[int, int, str], None] | None:
    if not enabled or not console.is_terminal:
        return None
    state = {"last": 0}

    def report(done: int, total: int, path: str) -> None:
        if total < 50 or (done - state["last"] < max(1, total // 100) and done != total):
            return
        state["last"] = done
        console.print(f"\r[dim]{done}/{total} files[/dim]", end="")
        if done == total:
            console.print("\r" + " " * 30 + "\r", end="")

    return report


def _run(kw: dict[str, Any], mode: str, unsafe: bool | None = None):  # type: ignore[no-untyped-def]
    from .runner import run

    paths = kw["paths"] or (Path("."),)
    root = _root_for(paths, kw.get("root"))
    if not root.is_dir():
        raise click.UsageError(f"root {root} is not a directory")
    settings = _settings(kw, root, unsafe)
    console = _stderr_console(kw.get("quiet", False))
    result = run(
        root, list(paths), settings, mode,  # type: ignore[arg-type]
        jobs=kw.get("jobs"), force_exclude=kw.get("force_exclude", False),
        progress=_progress(console, not kw.get("quiet")),
        use_cache=False if kw.get("no_cache") else None,
    )
    if kw.get("verbose"):
        console.print(f"[dim]{result.files_scanned} files in {result.seconds:.2f} s (root {root})[/dim]")
    return result, console


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
    try:
        decoded = decode(data, python=language == "python")
    except SourceError as exc:
        raise click.ClickException(f"{name}: {exc.message}") from None
    root = kw.get("root") or Path.cwd()
    return name, language, decoded, _settings(kw, root)


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=False)
        return
    from .textio import atomic_write

    atomic_write(output, text.encode("utf-8"))


# -- audit ----------------------------------------------------------------------------------


@main.command()
@common_options
@click.option("--format", "fmt", type=click.Choice(["text", "concise", "json", "sarif", "markdown", "github"]),
              default="text", show_default=True, help="Output format.")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), help="Write the report to a file.")
def audit(fmt: str, output: Path | None, **kw: Any) -> None:
    """Inventory the CUDA surface of PATHS: every finding, classified, with an effort estimate."""
    from . import reporters

    if _stdin_mode(kw):
        from .engine import analyze

        name, language, decoded, settings = _read_stdin(kw)
        findings = analyze(name, decoded.text, language, settings)
        files, root_label, root = 1, name, None
    else:
        result, console = _run(kw, "audit")
        findings, files, root_label, root = result.findings, result.files_scanned, str(result.root), result.root
    if fmt == "json":
        _emit(reporters.render_json(findings, root=root_label, files_scanned=files), output)
    elif fmt == "sarif":
        _emit(reporters.render_sarif(findings, root=root), output)
    elif fmt == "markdown":
        title = f"porter audit: {Path(root_label).name or root_label}"
        _emit(reporters.render_markdown(findings, title=title, files_scanned=files), output)
    elif fmt == "concise":
        _emit(reporters.render_concise(findings), output)
    elif fmt == "github":
        _emit(reporters.render_github(findings), output)
    else:
        from rich.console import Console

        if output is not None:
            with open(output, "w", encoding="utf-8") as fh:
                reporters.print_text(findings, Console(file=fh, width=120), files_scanned=files,
                                     show_summary=not kw["quiet"], audit_summary=True)
        else:
            reporters.print_text(findings, Console(highlight=False, soft_wrap=True), files_scanned=files,
                                 show_summary=not kw["quiet"], audit_summary=not kw["quiet"])
    sys.exit(EXIT_OK)


# -- check ----------------------------------------------------------------------------------


@main.command()
@common_options
@click.option("--format", "fmt", type=click.Choice(["text", "concise", "json", "sarif", "github"]),
              default="concise", show_default=True)
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain.")
@click.option("--include-benign", is_flag=True, help="Also fail on benign (info-level) findings.")
def check(fmt: str, exit_zero: bool, include_benign: bool, **kw: Any) -> None:
    """Exit 1 when CUDA lock-in porter can see remains in PATHS (the pre-commit entry point).

    Info-level findings (benign sites such as `device="cuda"`) are reported with
    --include-benign only; warnings and errors fail the check.
    """
    from . import reporters
    from .findings import Severity

    if _stdin_mode(kw):
        from .engine import analyze

        name, language, decoded, settings = _read_stdin(kw)
        findings = analyze(name, decoded.text, language, settings)
        root = None
    else:
        result, _ = _run(kw, "audit")
        findings, root = result.findings, result.root
    if not include_benign:
        findings = [f for f in findings if reporters.severity_of(f) != Severity.INFO]
    if fmt == "json":
        click.echo(reporters.render_json(findings), nl=False)
    elif fmt == "sarif":
        click.echo(reporters.render_sarif(findings, root=root), nl=False)
    elif fmt == "github":
        click.echo(reporters.render_github(findings), nl=False)
    elif fmt == "text":
        from rich.console import Console

        reporters.print_text(findings, Console(highlight=False, soft_wrap=True), show_summary=not kw["quiet"])
    else:
        click.echo(reporters.render_concise(findings), nl=False)
        if findings and not kw["quiet"]:
            fixable = sum(1 for f in findings if f.fix.value == "safe")
            click.echo(f"porter: {len(findings)} finding(s)"
                       + (f", {fixable} fixable with `porter apply`" if fixable else ""), err=True)
    sys.exit(EXIT_FINDINGS if findings and not exit_zero else EXIT_OK)


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
    from . import reporters
    from .runner import write

    if _stdin_mode(kw):
        from .engine import fix

        name, language, decoded, settings = _read_stdin(kw)
        if unsafe_fixes is not None:
            from dataclasses import replace

            settings = replace(settings, unsafe_fixes=unsafe_fixes)
        outcome = fix(name, decoded.text, language, settings, newline=decoded.newline)
        sys.stdout.buffer.write(decoded.encode(outcome.text))
        sys.exit(EXIT_OK)
    if annotate:
        kw["annotate"] = True
    result, console = _run(kw, "fix", unsafe_fixes)
    parity = None
    if emit_parity is not None:
        from .parity import parity_patch

        parity = parity_patch(result, _contained_dir(result.root, emit_parity))
        if parity is not None:
            result.extra_patches.append(parity)
    series = result.series()
    changed = result.changed_files
    if dry_run:
        sys.stdout.buffer.write(series.render())
        sys.stdout.flush()
    elif patch_dir is not None:
        if patch_dir.is_symlink() or (patch_dir.exists() and not patch_dir.is_dir()):
            raise click.UsageError(f"--patch-dir {patch_dir} must be a directory (not a symlink)")
        written = series.write_dir(patch_dir, title=f"porter patch series for {result.root.name}")
        console.print(f"porter: wrote {len(written) - 1} patch(es) and INDEX.md to {patch_dir}", highlight=False)
    else:
        write(result)
        if parity is not None:
            from .textio import atomic_write

            for change in parity.changes:
                target = result.root / change.path
                if target.is_symlink() or (target.exists() and not target.is_file()):
                    raise click.UsageError(f"--emit-parity: {change.path} exists and is not a regular file")
                target.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(target, change.after or b"")
            console.print(f"porter: wrote parity tests to {parity.changes[0].path}", highlight=False)
    fixed = result.fixed
    if show_fixes or kw.get("verbose"):
        for f in fixed:
            console.print(f"  fixed {f.path}:{f.line}:{f.column} {f.code} {f.message}", highlight=False)
    remaining = [f for f in result.findings if reporters.severity_of(f).value != "info"]
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
        console.print(f"  [red]{f.code}[/red] {f.path}: {f.message}", highlight=False)
    if dry_run:
        sys.exit(EXIT_FINDINGS if changed else EXIT_OK)
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


if __name__ == "__main__":  # pragma: no cover
    main()
