"""The dependencies family's visitors and checkers; its rules, options and pre-filters are declared
in ``porter.codemods.dependencies`` (``__init__.py``), which describes what the family does.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import libcst as cst
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from porter.codemods.dependencies import NAME, NONE, SAFE, UNSAFE
from porter.codemods.dependencies.catalog import (
    CUDA_LOCAL,
    CUDA_TORCH_INDEX,
    CUPY,
    CUPY_ROCM,
    DEFAULT_ROCM_VERSION,
    DEFAULT_TORCHAO,
    ROCM_VERSION_RE,
    TORCH_DISTS,
    companion_version,
    cuda_build_reason,
    cuda_only_for,
    import_roots,
    rocm_for_torch,
    rocm_index,
    rocm_index_problem,
)
from porter.findings import Applicability, Edit, Finding
from porter.framework import FileContext, PyContext, PyVisitor
from porter.manifests import requirement_lines, toml_strings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# -- settings -------------------------------------------------------------------------------


def _rocm_version(ctx: FileContext) -> str:
    """The configured ROCm version; unset, the newest ROCm index that carries target-torch (when
    porter knows it), else the default."""
    default = rocm_for_torch(getattr(ctx.settings, "target_torch", "")) or DEFAULT_ROCM_VERSION
    value = str(ctx.settings.option(NAME, "rocm-version", default))
    return value if ROCM_VERSION_RE.match(value) else default


def _torchao_req(ctx: FileContext) -> str:
    default = DEFAULT_TORCHAO
    need = _needs(ctx).get("torchao", ("", ()))[0]
    if need.startswith(">="):
        try:
            if Version(need[2:]) > Version(DEFAULT_TORCHAO.split(">=", 1)[1]):
                default = f"torchao{need}"
        except InvalidVersion:
            pass
    value = str(ctx.settings.option(NAME, "torchao-requirement", default))
    try:
        Requirement(value)
    except InvalidRequirement:
        return default
    return value


def _needs(ctx: FileContext) -> Mapping[str, tuple[str, tuple[str, ...]]]:
    """dist -> (">=X", sites): what the fixes applied in this manifest's sub-project need."""
    extra = ctx.facts.extra if isinstance(ctx.facts.extra, Mapping) else {}
    needs = extra.get("needs", {})
    return needs if isinstance(needs, Mapping) else {}


def _needs_torchao(ctx: FileContext) -> bool:
    """Only when a fix applied in this run and sub-project emits torchao (porter.apis says which)."""
    return "torchao" in _needs(ctx)


def _torchao_because(ctx: FileContext) -> str:
    sites = _needs(ctx).get("torchao", ("", ()))[1]
    shown = ", ".join(sites[:3]) + (f" and {len(sites) - 3} more" if len(sites) > 3 else "")
    return f"the fixes applied at {shown} import torchao" if shown else "the applied fixes import torchao"


def rocm_url(url: str, version: str) -> str | None:
    """The ROCm index replacing a CUDA PyTorch index URL (None when not one)."""
    m = CUDA_TORCH_INDEX.fullmatch(url.strip())
    if not m:
        return None
    return rocm_index(version, nightly=bool(m.group("nightly")))


def exact_torch_pins(reqs: list[Requirement]) -> list[tuple[str, str]]:
    """(dist, version) for ``==`` pins of torch, torchvision and torchaudio (local labels dropped)."""
    out = []
    for req in reqs:
        dist = canonicalize_name(req.name)
        if dist not in TORCH_DISTS:
            continue
        for spec in req.specifier:
            if spec.operator in ("==", "===") and "*" not in spec.version:
                out.append((dist, spec.version.split("+", 1)[0]))
    return out


def _after_target(reqs: list[Requirement], ctx: FileContext) -> list[Requirement]:
    """The requirements as they stand after this file's raises to target-torch (those go)."""
    target = getattr(ctx.settings, "target_torch", "")
    if not target:
        return reqs
    out = []
    for req in reqs:
        dist = canonicalize_name(req.name)
        goal = companion_version(dist, target) if dist in TORCH_DISTS else None
        if goal and not req.url and str(req.specifier) and not _admits(req, goal):
            continue
        out.append(req)
    return out


def _blocked(f: Finding, ctx: FileContext, problem: str | None) -> Finding:
    """A SAFE index rewrite downgraded to a report when the ROCm index cannot serve the pins."""
    if problem is None or f.fix != SAFE:
        return f
    start = ctx.offset(f.line, f.column - 1)
    end = ctx.offset(f.end_line, f.end_column - 1)
    return ctx.finding(f.code, f.message.split(":")[0] + f": not rewritten: {problem}", start, end)


# -- the decision for one requirement ------------------------------------------------------


@dataclass
class Action:
    code: str
    message: str
    fix: Applicability = NONE
    kind: str = ""  # "drop", "replace" or "" (report only)
    text: str = ""  # replacement requirement text for "replace"
    data: dict = field(default_factory=dict)


def assess(req: Requirement, raw: str, ctx: FileContext) -> list[Action]:
    """What to do with one requirement (``raw`` is its source text)."""
    dist = canonicalize_name(req.name)
    facts = ctx.facts
    actions: list[Action] = []
    if req.url:
        if CUDA_LOCAL.search(req.url.replace("%2B", "+").replace("%2b", "+")) or "/cu1" in req.url:
            actions.append(Action("PRT806", f"{dist} is installed from a CUDA wheel URL ({req.url}); replace it "
                                  "with a ROCm build or a plain requirement"))
    entry = cuda_only_for(dist)
    if entry is not None:
        roots = import_roots(entry.modules)
        still = sorted(roots & facts.imports)
        extra = facts.extra if isinstance(facts.extra, Mapping) else {}
        remaining = set(extra.get("remaining", ())) if "remaining" in extra else None
        applied_port = any(c.startswith(("PRT4", "PRT6")) for c in facts.applied)
        if dist == "bitsandbytes" and (still or not facts.imports or not applied_port
                                       or any(m in facts.imports for m, _ in entry.indirect)):
            # KEEP + pin is the exact move (bitsandbytes >= 0.50 runs on ROCm); it is dropped only after
            # a quantization port, when nothing can still load it.
            return actions + _bitsandbytes(req, raw, dist, still)
        indirect = [(m, how) for m, how in entry.indirect if m in facts.imports]
        if dist == "flash-attn" and remaining is not None and not (remaining & {"PRT030", "PRT031"}):
            indirect = []
        if not facts.imports:
            actions.append(Action("PRT802", f"{dist} is CUDA-only; porter has no import facts for this run, so "
                                  f"the requirement is kept: {entry.advice}", data={"dist": dist}))
        elif still:
            actions.append(Action("PRT802", f"{dist} is CUDA-only and the code still imports "
                                  f"{', '.join(still)}: {entry.advice}", data={"dist": dist}))
        elif indirect:
            m, how = indirect[0]
            actions.append(Action("PRT802", f"{dist} is no longer imported, but the code imports {m}, which can "
                                  f"load it ({how}): kept; {entry.advice}", data={"dist": dist}))
        else:
            actions.append(Action("PRT802", f"{dist} is CUDA-only and no Python file imports "
                                  f"{', '.join(sorted(roots))} any more: dropped", SAFE, "drop",
                                  data={"dist": dist}))
        return actions
    if CUPY.match(dist):
        version = _rocm_version(ctx)
        target = CUPY_ROCM.get(".".join(version.split(".")[:2]))
        if target is not None:
            new = _rename(raw, req, target)
            if new is not None:
                actions.append(Action("PRT804", f"{dist} is a CUDA build of CuPy; {target} is its ROCm {version} "
                                      "build", SAFE, "replace", new))
                return actions
        actions.append(Action("PRT804", f"{dist} is a CUDA build of CuPy and CuPy publishes no wheel for ROCm "
                              f"{version}: build it from source with CUPY_INSTALL_USE_HIP=1"))
        return actions
    target = getattr(ctx.settings, "target_torch", "")
    local = [s for s in req.specifier if "+" in s.version and re.search(r"cu\d+", s.version.split("+", 1)[1])]
    if local:
        if dist in TORCH_DISTS and all(CUDA_LOCAL.search(s.version) for s in local):
            new = CUDA_LOCAL.sub("", raw)
            goal = companion_version(dist, target) if target else None
            raised = _raise_to_target(new, dist, goal) if goal else None
            if raised is not None:
                actions.append(Action("PRT801", f"{dist}{local[0]} pins a CUDA build below target-torch {target}: "
                                      f"the label is dropped and the pin raised to >={goal}", SAFE, "replace",
                                      raised, data={"stripped": True}))
            elif _parses_as(new, dist):
                actions.append(Action("PRT801", f"{dist}{local[0]} pins a CUDA build; the label is dropped so the "
                                      "ROCm index's build satisfies it", SAFE, "replace", new,
                                      data={"stripped": True}))
            else:
                actions.append(Action("PRT801", f"{dist}{local[0]} pins a CUDA build"))
        else:
            actions.append(Action("PRT801", f"{dist}{local[0]} pins a CUDA build of {dist}; its ROCm build (if "
                                  "any) is published elsewhere"))
        return actions
    if dist in TORCH_DISTS and target:
        goal = companion_version(dist, target)
        raised = _raise_to_target(raw, dist, goal) if goal else None
        if raised is not None:
            actions.append(Action("PRT811", f"{dist}{req.specifier} excludes target-torch {target}: raised to "
                                  f">={goal}", SAFE, "replace", raised))
            return actions
    need = _needs(ctx).get(dist)
    if need is not None and dist not in TORCH_DISTS and need[0].startswith(">="):
        raised = _raise_to_target(raw, dist, need[0][2:])
        if raised is not None:
            sites = ", ".join(need[1][:3]) + (" …" if len(need[1]) > 3 else "")
            actions.append(Action("PRT812", f"{dist}{req.specifier} excludes {dist}{need[0]}, which the fixes "
                                  f"applied at {sites} need: raised to {need[0]} (unsafe: other code may depend "
                                  "on the old release, and other pins of this file may not fit the new one: "
                                  "resolve the environment, e.g. pip install --dry-run -r, before relying on "
                                  "it)", UNSAFE, "replace", raised))
            return actions
    reason = cuda_build_reason(req)
    if reason is not None:
        if dist.startswith("nvidia-") and facts.imports and "nvidia" not in facts.imports:
            actions.append(Action("PRT803", f"{reason}; no Python file imports nvidia: dropped (unsafe: C++ "
                                  "extensions may still link it)", UNSAFE, "drop"))
        elif dist == "nvidia-pyindex":
            actions.append(Action("PRT803", reason + ": dropped (unsafe)", UNSAFE, "drop"))
        else:
            actions.append(Action("PRT803", reason))
        return actions
    if dist in ("triton", "pytorch-triton"):
        actions.append(Action("PRT807", f"{dist}: ROCm torch depends on pytorch-triton-rocm, which provides the "
                              "triton module; an explicit pin can replace it"))
    return actions


def _bitsandbytes(req: Requirement, raw: str, dist: str, still: list[str]) -> list[Action]:
    spec = req.specifier
    if not str(spec) and not req.url:
        new = _with_specifier(raw, req, ">=0.50")
        if new is not None:
            # unsafe: bitsandbytes 0.50 itself needs torch >= 2.4 and Python >= 3.10, which the
            # repository's other pins may exclude (then pip can no longer resolve the environment)
            return [Action("PRT809", "bitsandbytes supports ROCm from 0.50: pinned bitsandbytes>=0.50 (unsafe: "
                           "0.50 needs torch >= 2.4 and Python >= 3.10; check the other pins admit them)",
                           UNSAFE, "replace", new)]
    if req.url:
        return [Action("PRT809", "bitsandbytes from a URL: make sure it is 0.50 or later (ROCm support)")]
    if not any(spec.contains(v, prereleases=True) for v in ("0.50.0", "0.51.0", "1.0.0")):
        return [Action("PRT809", f"bitsandbytes{spec} excludes 0.50, the first release with ROCm support; "
                       "raise the pin (bitsandbytes>=0.50)")]
    if any(spec.contains(v, prereleases=True) for v in ("0.45.0", "0.49.0")):
        return [Action("PRT809", f"bitsandbytes{spec} allows releases without ROCm support; "
                       "pin bitsandbytes>=0.50")]
    return []


def _parses_as(text: str, dist: str) -> bool:
    try:
        return canonicalize_name(Requirement(text).name) == dist
    except InvalidRequirement:
        return False


def _rename(raw: str, req: Requirement, target: str) -> str | None:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._\-]*)", raw)
    if not m or canonicalize_name(m.group(1)) != canonicalize_name(req.name):
        return None
    new = raw[: m.start(1)] + target + raw[m.end(1) :]
    return new if _parses_as(new, target) else None


def _admits(req: Requirement, target: str) -> bool:
    """Whether the requirement allows some torch at or above ``target`` (``==2.5.1`` admits 2.5)."""
    from packaging.version import InvalidVersion, Version

    try:
        floor = Version(target)
    except InvalidVersion:
        return True
    candidates = [floor]
    for spec in req.specifier:
        try:
            v = Version(spec.version.replace(".*", ""))
        except InvalidVersion:
            continue
        if v >= floor:
            candidates.append(v)
    return any(req.specifier.contains(c, prereleases=True) for c in candidates)


def _raise_to_target(raw: str, dist: str, target: str) -> str | None:
    """``raw`` with its version specifier replaced by ``>=target`` when it excludes ``target``."""
    if not target:
        return None
    try:
        req = Requirement(raw.split("#", 1)[0].strip())
    except InvalidRequirement:
        return None
    if req.url or not str(req.specifier) or _admits(req, target):
        return None
    m = re.match(r"(\s*[A-Za-z0-9][A-Za-z0-9._\-]*(?:\s*\[[^\]]*\])?\s*)([^;#]*?)(\s*(?:[;#].*)?)$", raw, re.S)
    if not m:
        return None
    new = m.group(1) + f">={target}" + m.group(3)
    try:
        check = Requirement(new.split("#", 1)[0].strip())
    except InvalidRequirement:
        return None
    if check.name.lower() != dist or str(check.specifier) != f">={target}" or check.marker != req.marker:
        return None
    return new


def _with_specifier(raw: str, req: Requirement, spec: str) -> str | None:
    m = re.match(r"\s*[A-Za-z0-9][A-Za-z0-9._\-]*(\s*\[[^\]]*\])?", raw)
    if not m:
        return None
    new = raw[: m.end()] + spec + raw[m.end() :]
    try:
        ok = str(Requirement(new).specifier) == str(Requirement(f"x{spec}").specifier)
    except InvalidRequirement:
        return None
    return new if ok else None


# -- text helpers -----------------------------------------------------------------------------


def drop_item(text: str, start: int, end: int) -> tuple[int, int]:
    """The span to delete for a list item at ``text[start:end]`` (with its comma/line)."""
    n = len(text)
    j = end
    while j < n and text[j] in " \t":
        j += 1
    had_comma = j < n and text[j] == ","
    if had_comma:
        j += 1
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", j)
    line_end = n if line_end < 0 else line_end
    rest = text[j:line_end].strip()
    if not text[line_start:start].strip() and (not rest or rest.startswith("#")):
        return line_start, min(line_end + 1, n)
    if had_comma:
        while j < n and text[j] in " \t":
            j += 1
        return start, j
    k = start
    while k > 0 and text[k - 1] in " \t":
        k -= 1
    if k > 0 and text[k - 1] == ",":
        return k - 1, end
    return start, end


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    ls = text.rfind("\n", 0, pos) + 1
    le = text.find("\n", pos)
    return ls, (len(text) if le < 0 else le + 1)


def _finding(ctx: FileContext, a: Action, start: int, end: int, edit: tuple[int, int, str] | None) -> Finding:
    if edit is None or a.fix == NONE:
        message = a.message
        if a.fix != NONE:
            message = message.rsplit(": ", 1)[0] + ": porter cannot edit this form of the entry; change it by hand"
        return ctx.finding(a.code, message, start, end, data=a.data)
    s, e, t = edit
    f = ctx.finding(a.code, a.message, s, e, replacement=t, fix=a.fix, data=a.data,
                    fix_title=a.message.split(": ")[-1])
    # report at the requirement, edit wherever needed
    line, col = ctx.position(start)
    eline, ecol = ctx.position(end)
    f.line, f.column, f.end_line, f.end_column = line, col, eline, ecol
    return f


# -- requirements files -------------------------------------------------------------------------


def check_requirements(ctx: FileContext) -> Iterator[Finding]:
    text = ctx.text
    version = _rocm_version(ctx)
    lines = requirement_lines(text)
    has_torch_index = any(ln.option and "download.pytorch.org" in ln.value for ln in lines)
    added_index = False
    torch_line = None
    has_torchao = False
    produced: set[str] = {ln.value.rstrip("/") for ln in lines if ln.option and "/rocm" in ln.value}
    frozen = looks_frozen(lines)
    problem = rocm_index_problem(exact_torch_pins(_after_target([ln.requirement for ln in lines if ln.requirement],
                                                                ctx)), version)
    # a +cu torch pin that cannot be rewritten (hashes) still needs the CUDA index: keep both as they are
    blocked = any(ln.requirement is not None and ln.name in TORCH_DISTS and "--hash" in ln.text
                  and CUDA_LOCAL.search(str(ln.requirement.specifier)) for ln in lines)
    for ln in lines:
        if ln.option in ("-i", "--index-url", "--extra-index-url", "-f", "--find-links"):
            for f in _index_option(ctx, ln, version):
                target = f.data.get("target")
                if blocked and target is not None:
                    yield ctx.finding("PRT800", f"CUDA wheel index {ln.value}: not rewritten while hashed +cu pins "
                                      "remain in this file (regenerate the hashes for the ROCm build first)",
                                      ln.value_start, ln.value_end)
                    continue
                if target is not None and target in produced and f.fix == SAFE:
                    f = ctx.finding("PRT800", f"CUDA wheel index {ln.value}: the ROCm {version} index is already "
                                    "listed, so the line is dropped", ln.value_start, ln.value_end,
                                    replacement="", fix=SAFE, fix_title="drop the duplicate index line",
                                    edits=())
                    f.edits = (Edit(ln.start, ln.end, ""),)
                elif target is not None:
                    produced.add(target)
                yield _blocked(f, ctx, problem)
            continue
        if ln.requirement is None:
            continue
        raw = text[ln.req_start : ln.req_end]
        name = ln.name or ""
        if name == "torch" and torch_line is None:
            torch_line = ln
        if name == "torchao":
            has_torchao = True
        for a in assess(ln.requirement, raw, ctx):
            if a.kind == "replace" and "--hash" in ln.text:
                a.fix = NONE
                a.message = (a.message.split(";")[0] + "; not rewritten: the --hash options pin the CUDA wheel, "
                             "regenerate them for the ROCm build (pip-compile --generate-hashes)")
            if a.kind == "drop" and a.fix == SAFE and frozen:
                a.fix = UNSAFE
                a.message += (" (unsafe: the file looks like a pip freeze, so another pinned package may "
                              "depend on it)")
            if a.kind == "drop":
                edit = (ln.start, ln.end, "")
            elif a.kind == "replace":
                edit = (ln.req_start, ln.req_end, a.text)
            else:
                edit = None
            yield _finding(ctx, a, ln.req_start, ln.req_end, edit)
            if a.data.get("stripped") and a.fix == SAFE and not has_torch_index and not added_index:
                added_index = True
                url = rocm_index(version)
                if problem is not None:
                    yield ctx.finding("PRT800", f"+cu pins were stripped and the file names no PyTorch index; the "
                                      f"ROCm index is not added: {problem}", ln.req_start, ln.req_end)
                else:
                    yield ctx.finding("PRT800", f"+cu pins were stripped and the file names no PyTorch index: the "
                                      f"ROCm {version} index is added", ln.start, ln.start,
                                      replacement=f"--extra-index-url {url}\n", fix=SAFE,
                                      fix_title="add the ROCm wheel index")
    if torch_line is not None and not has_torch_index and not added_index:
        yield ctx.finding("PRT808", "torch comes from PyPI here (CUDA builds on Linux); on AMD install it from "
                          f"{rocm_index(version)} or use the rocm/pytorch container",
                          torch_line.req_start, torch_line.req_end)
    if torch_line is not None and not has_torchao and _needs_torchao(ctx):
        if any("--hash" in ln.text for ln in lines):
            yield ctx.finding("PRT805", f"{_torchao_because(ctx)}, but this file is in hash-checking mode: add "
                              "torchao with its hashes (pip-compile --generate-hashes)", torch_line.req_start,
                              torch_line.req_end)
        else:
            yield _torchao_after_line(ctx, torch_line.end, torch_line.req_start, torch_line.req_end, "")


def looks_frozen(lines: list) -> bool:
    """A pip-freeze style file: many requirements, nearly all pinned with ``==``.

    Dropping a package from a freeze is not exact: it may be a dependency of another pinned
    package, which would pull it back at another version.
    """
    reqs = [ln.requirement for ln in lines if ln.requirement is not None]
    pinned = [r for r in reqs if any(s.operator in ("==", "===") for s in r.specifier) or r.url]
    return len(reqs) >= 20 and len(pinned) >= 0.9 * len(reqs)


def _torchao_after_line(ctx: FileContext, insert_at: int, start: int, end: int, indent: str) -> Finding:
    req = _torchao_req(ctx)
    text = ctx.text
    prefix = "" if insert_at == 0 or text[insert_at - 1] == "\n" else "\n"
    f = ctx.finding("PRT805", f"{_torchao_because(ctx)}: {req} added next to torch", insert_at, insert_at,
                    replacement=f"{prefix}{indent}{req}\n", fix=SAFE, fix_title=f"add {req}")
    f.line, f.column = ctx.position(start)
    f.end_line, f.end_column = ctx.position(end)
    return f


def _index_option(ctx: FileContext, ln, version: str) -> Iterator[Finding]:
    value = ln.value
    new = rocm_url(value, version)
    stable = new is not None and value.rstrip("/").endswith("torch_stable.html")
    if new is not None and not stable and ln.option not in ("-f", "--find-links"):
        yield ctx.finding("PRT800", f"CUDA PyTorch wheel index {value}: the ROCm {version} index replaces it",
                          ln.value_start, ln.value_end, replacement=new, fix=SAFE,
                          fix_title=f"use {new}", data={"target": new})
    elif new is not None:
        opt_start = ctx.text.index(ln.option, ln.start)
        yield ctx.finding("PRT800", f"CUDA wheel page {value}: the ROCm {version} index replaces it",
                          opt_start, ln.value_end, replacement=f"--extra-index-url {new}", fix=SAFE,
                          fix_title=f"use --extra-index-url {new}", data={"target": new})
    elif "pypi.nvidia.com" in value or "pypi.ngc.nvidia.com" in value:
        yield ctx.finding("PRT800", f"NVIDIA package index {value}: it serves CUDA-only packages",
                          ln.value_start, ln.value_end)
    elif re.search(r"(cu\d{3}|cuda\d)", value) and ("pyg.org" in value or "dgl.ai" in value
                                                      or "download.pytorch.org" in value):
        yield ctx.finding("PRT800", f"CUDA wheel page {value}: its wheels are CUDA builds; find the ROCm "
                          "build or build from source", ln.value_start, ln.value_end)


# -- pyproject.toml -------------------------------------------------------------------------------

_PEP621_KEYS = {("project", "dependencies"), ("build-system", "requires")}
_POETRY_TABLE = re.compile(r"^tool\.poetry\.(dependencies|dev-dependencies|group\.[^.]+\.dependencies)$")


def _is_req_array(table: str, key: str) -> bool:
    return ((table, key) in _PEP621_KEYS or table in ("project.optional-dependencies", "dependency-groups")
            or (table == "project" and key.startswith("optional-dependencies.")))


def check_pyproject(ctx: FileContext) -> Iterator[Finding]:
    text = ctx.text
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    version = _rocm_version(ctx)
    strings = toml_strings(text)
    reqs = []
    for s in strings:
        if s.in_array and not s.inline_key and _is_req_array(s.table, s.key):
            try:
                reqs.append(Requirement(s.value))
            except InvalidRequirement:
                pass
        elif _POETRY_TABLE.match(s.table) and s.inline_key in ("", "version") and s.key in TORCH_DISTS:
            try:
                reqs.append(Requirement(f"{s.key}=={s.value}"))
            except InvalidRequirement:
                pass
    problem = rocm_index_problem(exact_torch_pins(_after_target(reqs, ctx)), version)
    torch_item = None
    torch_poetry = None
    has_torchao = False
    for s in strings:
        url = rocm_url(s.value, version)
        if url is not None and not s.value.rstrip("/").endswith("torch_stable.html"):
            quote = text[s.start]
            yield _blocked(ctx.finding("PRT800", f"CUDA PyTorch wheel index {s.value}: the ROCm {version} index "
                                       "replaces it", s.start, s.end, replacement=f"{quote}{url}{quote}", fix=SAFE,
                                       fix_title=f"use {url}"), ctx, problem)
            continue
        if s.in_array and not s.inline_key and _is_req_array(s.table, s.key):
            try:
                req = Requirement(s.value)
            except InvalidRequirement:
                continue
            dist = canonicalize_name(req.name)
            if dist == "torch" and torch_item is None and (s.table, s.key) == ("project", "dependencies"):
                torch_item = s
            if dist == "torchao":
                has_torchao = True
            for a in assess(req, s.value, ctx):
                yield _toml_action(ctx, a, s, drop=lambda s=s: drop_item(text, s.start, s.end))
        elif _POETRY_TABLE.match(s.table) and s.key and s.inline_key == "url" and (
                CUDA_LOCAL.search(s.value.replace("%2B", "+")) or "/cu1" in s.value):
            yield ctx.finding("PRT806", f"{s.key} is installed from a CUDA wheel URL ({s.value}); replace it with a "
                              "ROCm build or a version from the ROCm index", s.start, s.end)
        elif _POETRY_TABLE.match(s.table) and s.key and not s.in_array and s.inline_key in ("", "version"):
            dist = canonicalize_name(s.key)
            if dist == "python":
                continue
            if dist == "torch" and torch_poetry is None:
                torch_poetry = s
            if dist == "torchao":
                has_torchao = True
            yield from _poetry_entry(ctx, s, dist)
    if _needs_torchao(ctx) and not has_torchao:
        if torch_item is not None:
            f = _torchao_toml_array(ctx, torch_item)
            if f is not None:
                yield f
        elif torch_poetry is not None:
            ls, le = _line_bounds(text, torch_poetry.start)
            line = text[ls:le]
            if line.lstrip().startswith(("torch", '"torch"')) and (line.count("{") == line.count("}")):
                req = Requirement(_torchao_req(ctx))
                spec = str(req.specifier) or "*"
                yield _torchao_after_line_poetry(ctx, le, torch_poetry, f'torchao = "{spec}"')


def _torchao_after_line_poetry(ctx: FileContext, insert_at: int, s, line: str) -> Finding:
    prefix = "" if ctx.text[insert_at - 1 : insert_at] == "\n" else "\n"
    f = ctx.finding("PRT805", f"{_torchao_because(ctx)}: {line} added next to torch", insert_at, insert_at,
                    replacement=f"{prefix}{line}\n", fix=SAFE, fix_title="add torchao")
    f.line, f.column = ctx.position(s.start)
    f.end_line, f.end_column = ctx.position(s.end)
    return f


def _torchao_toml_array(ctx: FileContext, s) -> Finding | None:
    def valid(new: str, req: str) -> bool:
        try:
            return req in tomllib.loads(new).get("project", {}).get("dependencies", [])
        except tomllib.TOMLDecodeError:
            return False

    return insert_after_item(ctx, s.start, s.end, ctx.text[s.start], valid)


def insert_after_item(ctx: FileContext, start: int, end: int, quote: str, valid) -> Finding | None:
    """PRT805: add the torchao requirement after the list item ``text[start:end]`` (torch)."""
    text = ctx.text
    req = _torchao_req(ctx)
    j = end
    while j < len(text) and text[j] in " \t":
        j += 1
    has_comma = j < len(text) and text[j] == ","
    ls = text.rfind("\n", 0, start) + 1
    if not text[ls:start].strip():
        indent = text[ls:start]
        le = text.find("\n", end)
        if le < 0:
            return None
        edits = [(le + 1, le + 1, f"{indent}{quote}{req}{quote},\n")]
        if not has_comma:
            edits.append((end, end, ","))
    else:
        edits = [(end, end, f", {quote}{req}{quote}")]
    new = text
    for a, b, t in sorted(edits, reverse=True):
        new = new[:a] + t + new[b:]
    if not valid(new, req):
        return None
    (a0, b0, t0), *rest = sorted(edits)
    f = ctx.finding("PRT805", f"{_torchao_because(ctx)}: {req} added next to torch", a0, b0,
                    replacement=t0, fix=SAFE, fix_title=f"add {req}",
                    edits=tuple(Edit(a, b, t) for a, b, t in rest))
    f.line, f.column = ctx.position(start)
    f.end_line, f.end_column = ctx.position(end)
    return f


def _toml_action(ctx: FileContext, a: Action, s, drop) -> Finding:
    if a.kind == "drop":
        edit = (*drop(), "")
    elif a.kind == "replace":
        quote = ctx.text[s.start]
        if (quote == '"' and ('"' in a.text or "\\" in a.text)) or (quote == "'" and "'" in a.text):
            edit = None
        else:
            edit = (s.start, s.end, f"{quote}{a.text}{quote}")
    else:
        edit = None
    return _finding(ctx, a, s.start, s.end, edit)


def _poetry_entry(ctx: FileContext, s, dist: str) -> Iterator[Finding]:
    text = ctx.text
    spec = s.value
    raw = s.key
    try:
        req = Requirement(dist)
    except InvalidRequirement:
        return
    m = CUDA_LOCAL.search(spec)
    if m and dist in TORCH_DISTS:
        quote = text[s.start]
        new = CUDA_LOCAL.sub("", spec)
        yield ctx.finding("PRT801", f"{dist} {spec} pins a CUDA build; the label is dropped so the ROCm index's "
                          "build satisfies it", s.start, s.end, replacement=f"{quote}{new}{quote}", fix=SAFE,
                          fix_title="drop the +cu label")
        return
    if m:
        yield ctx.finding("PRT801", f"{dist} {spec} pins a CUDA build of {dist}", s.start, s.end)
        return
    for a in assess(req, raw, ctx):
        if a.kind == "drop":
            ls, le = _line_bounds(text, s.start)
            line = text[ls:le]
            key_ok = re.match(rf"\s*[\"']?{re.escape(s.key)}[\"']?\s*=", line) is not None
            balanced = line.count("{") == line.count("}") and line.count("[") == line.count("]")
            edit = (ls, le, "") if key_ok and balanced else None
            yield _finding(ctx, a, s.start, s.end, edit)
        else:
            a = Action(a.code, a.message, NONE, "", "", a.data)
            yield _finding(ctx, a, s.start, s.end, None)


# -- setup.cfg --------------------------------------------------------------------------------------


def check_setup_cfg(ctx: FileContext) -> Iterator[Finding]:
    text = ctx.text
    section = ""
    in_list = False
    torch_line: tuple[int, int, int, str] | None = None
    has_torchao = False
    for ls, le in _lines(text):
        line = text[ls:le].rstrip("\r\n")
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1].strip()
            in_list = False
            continue
        if not stripped or stripped.startswith(("#", ";")):
            continue
        indented = line[:1] in (" ", "\t")
        if not indented:
            key, sep, value = line.partition("=")
            key = key.strip()
            in_list = bool(sep) and (
                (section == "options" and key in ("install_requires", "setup_requires"))
                or section == "options.extras_require")
            if in_list and value.strip():
                body = value.split(" #", 1)[0].split(" ;", 1)[0].strip()
                yield from _cfg_requirement(ctx, ls + line.index("=") + 1 + (len(value) - len(value.lstrip())),
                                            body, ls, le, single=True)
            continue
        if not in_list:
            continue
        body = stripped.split(" #", 1)[0].split(" ;", 1)[0].strip()
        start = ls + line.index(body[:1]) if body else ls
        try:
            req = Requirement(body)
        except InvalidRequirement:
            continue
        dist = canonicalize_name(req.name)
        if dist == "torch" and torch_line is None and section == "options":
            torch_line = (ls, le, start, line[: len(line) - len(line.lstrip())])
        if dist == "torchao":
            has_torchao = True
        yield from _cfg_requirement(ctx, start, body, ls, le, single=False)
    if torch_line is not None and not has_torchao and _needs_torchao(ctx):
        ls, le, start, indent = torch_line
        yield _torchao_after_line(ctx, le, start, start + 5, indent)


def _cfg_requirement(ctx: FileContext, start: int, body: str, ls: int, le: int, *, single: bool) -> Iterator[Finding]:
    try:
        req = Requirement(body)
    except InvalidRequirement:
        return
    for a in assess(req, body, ctx):
        if a.kind == "drop":
            edit = None if single else (ls, le, "")
        elif a.kind == "replace":
            edit = (start, start + len(body), a.text)
        else:
            edit = None
        yield _finding(ctx, a, start, start + len(body), edit)


def _lines(text: str) -> Iterator[tuple[int, int]]:
    pos = 0
    while pos < len(text):
        nl = text.find("\n", pos)
        end = len(text) if nl < 0 else nl + 1
        yield pos, end
        pos = end


# -- environment.yml --------------------------------------------------------------------------------

_YAML_ITEM = re.compile(r"^(?P<indent>[ \t]*)-[ \t]+(?P<body>.*?)[ \t]*(?:#.*)?$")
_CONDA_CUDA = re.compile(r"^(?:[\w\-]+::)?(pytorch-cuda|cudatoolkit|cuda-toolkit|cuda-runtime|cuda-nvcc|"
                         r"cuda-libraries(?:-dev)?|cudnn|nccl|cuda)(?:[\s=<>!]|$)")


def check_conda(ctx: FileContext) -> Iterator[Finding]:
    text = ctx.text
    version = _rocm_version(ctx)
    pip_reqs = []
    for m in re.finditer(r"^[ \t]*-[ \t]+[\"']?((?:torch|torchvision|torchaudio)\b[^#\n\"']*)", text, re.MULTILINE):
        try:
            pip_reqs.append(Requirement(m.group(1).strip()))
        except InvalidRequirement:
            pass
    problem = rocm_index_problem(exact_torch_pins(_after_target(pip_reqs, ctx)), version)
    pip_indent: int | None = None
    top_key = ""
    for ls, le in _lines(text):
        line = text[ls:le].rstrip("\r\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0 and not line.startswith("-"):
            top_key = line.split(":", 1)[0].strip()
            pip_indent = None
            continue
        m = _YAML_ITEM.match(line)
        if not m:
            continue
        body = m.group("body").strip().strip("\"'")
        item_indent = len(m.group("indent"))
        if pip_indent is not None and item_indent <= pip_indent:
            pip_indent = None
        if top_key == "channels":
            if body == "nvidia":
                yield ctx.finding("PRT810", "the nvidia channel serves CUDA packages only", ls + indent,
                                  ls + len(line))
            continue
        if top_key != "dependencies":
            continue
        if body.rstrip(":") == "pip" and body.endswith(":"):
            pip_indent = item_indent
            continue
        start = ls + line.index(m.group("body"))
        if pip_indent is not None:
            bstart = ls + line.index(body)
            if body.startswith("-"):
                om = re.match(r"(--index-url|--extra-index-url|-i|-f|--find-links)[ =]+(\S+)", body)
                if om:
                    new = rocm_url(om.group(2), version)
                    if new is not None and not om.group(2).endswith("torch_stable.html"):
                        vs = bstart + om.start(2)
                        yield _blocked(ctx.finding("PRT800", f"CUDA PyTorch wheel index {om.group(2)}: the ROCm "
                                                   f"{version} index replaces it", vs, vs + len(om.group(2)),
                                                   replacement=new, fix=SAFE, fix_title=f"use {new}"), ctx, problem)
                continue
            try:
                req = Requirement(body)
            except InvalidRequirement:
                continue
            for a in assess(req, body, ctx):
                if a.kind == "drop":
                    edit = (ls, le, "")
                elif a.kind == "replace":
                    edit = (bstart, bstart + len(body), a.text)
                else:
                    edit = None
                yield _finding(ctx, a, bstart, bstart + len(body), edit)
            continue
        if _CONDA_CUDA.match(body):
            yield ctx.finding("PRT810", f"conda package {body} is a CUDA package: install torch from the ROCm "
                              f"index with pip ({rocm_index(version)}) instead", start, start + len(body))


# -- setup.py -----------------------------------------------------------------------------------------


class SetupPyVisitor(PyVisitor):
    """``setup(install_requires=[...], extras_require={...: [...]})`` in a setup.py."""

    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self.active = ctx.relpath == "setup.py" or ctx.relpath.endswith("/setup.py")
        self._assigned: dict[str, cst.BaseExpression] = {}
        self._used: list[cst.BaseExpression] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        if self.active and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            self._assigned[node.targets[0].target.value] = node.value

    def visit_Call(self, node: cst.Call) -> None:
        if not self.active:
            return
        func = node.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
        if name != "setup":
            return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in ("install_requires", "extras_require",
                                                                   "setup_requires"):
                self._used.append(arg.value)

    def leave_Module(self, original_node: cst.Module) -> None:
        seen: set[int] = set()
        self._torch: cst.SimpleString | None = None
        self._has_torchao = False
        for expr in self._used:
            self._lists(expr, seen)
        if self._torch is not None and not self._has_torchao and _needs_torchao(self.ctx):
            start, end = self.span(self._torch)

            def valid(new: str, req: str) -> bool:
                import ast

                try:
                    ast.parse(new)
                except SyntaxError:
                    return False
                return req in new

            f = insert_after_item(self.ctx, start, end, self._torch.quote, valid)
            if f is not None:
                self.findings.append(f)

    def _lists(self, expr: cst.BaseExpression, seen: set[int]) -> None:
        if isinstance(expr, cst.Name) and expr.value in self._assigned:
            expr = self._assigned[expr.value]
        if id(expr) in seen:
            return
        seen.add(id(expr))
        if isinstance(expr, cst.Dict):
            for el in expr.elements:
                if isinstance(el, cst.DictElement):
                    self._lists(el.value, seen)
        elif isinstance(expr, (cst.List, cst.Tuple)):
            for el in expr.elements:
                if isinstance(el, cst.Element) and isinstance(el.value, cst.SimpleString):
                    self._item(el.value)

    def _item(self, node: cst.SimpleString) -> None:
        value = node.evaluated_value
        if not isinstance(value, str):
            return
        try:
            req = Requirement(value)
        except InvalidRequirement:
            return
        start, end = self.span(node)
        text = self.ctx.text
        dist = canonicalize_name(req.name)
        if dist == "torch" and self._torch is None and len(node.quote) == 1:
            self._torch = node
        self._has_torchao = self._has_torchao or dist == "torchao"
        for a in assess(req, value, self.ctx):
            if a.kind == "drop":
                s, e = drop_item(text, start, end)
                edit: tuple[int, int, str] | None = (s, e, "")
            elif a.kind == "replace" and node.prefix == "" and node.quote not in a.text and "\\" not in a.text:
                edit = (start, end, f"{node.quote}{a.text}{node.quote}")
            else:
                edit = None
            self.findings.append(_finding(self.ctx, a, start, end, edit))



__all__ = ["assess", "drop_item", "insert_after_item", "rocm_url"]
