"""The audit summary: counts by class, family, rule and fix level, top blockers, and an effort
estimate placed against three typical porting goals.

Everything is computed from the findings alone, so ``porter audit --format json`` and the
Markdown report agree by construction. Rule metadata (class, effort per site, best fix) comes
from :func:`porter.registry.rules`; a finding's own ``category``/``effort_hours`` win.

The estimate (all hours are engineer hours; a day is :data:`HOURS_PER_DAY` focused hours) counts
only what needs work:

- *work sites*: the effort of every shim/replace site porter cannot fix by itself (fix level
  ``none``). Repeats are cheaper than the first: in one file, the first site of a rule costs the
  rule's full effort and each further site of the same rule :data:`REPEAT_FACTOR` of it (the
  same edit again); the high end counts every site in full,
- *sites with a fallback*: uses of a CUDA-only package in a file that already runs without it
  (an availability gate or probe, PRT021/PRT023, e.g. an xformers call next to an SDPA path) cost
  :data:`FALLBACK_FACTOR` of their effort (drop the CUDA-only branch, test the fallback); full in
  the high end,
- *benign sites* (run unchanged on ROCm) cost nothing; those with a verification effort (CUDA
  graphs, Triton kernels) count in the high end only,
- *unsafe fixes*: a review, in the high end only; *safe fixes* cost nothing,
- *kernel files*: a fixed cost per CUDA source file (rule PRT870: HIPify, build, test),
- *packages*: a fixed cost per CUDA-only package the code or manifests use (install route,
  CI image, version pin), :data:`PACKAGE_HOURS` each,
- *setup*: :data:`SETUP_HOURS` once (ROCm container, smoke test) when anything needs work.

The point estimate is the sum; the low end is 0.8x the sum; the high end adds the full cost of
repeats and fallback sites, the benign verifications and the unsafe-fix reviews, and multiplies
by 1.5 (2.0 when custom kernels are present: kernel ports are the least predictable work).
"""

from __future__ import annotations

import math
import posixpath
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from . import registry
from .findings import Applicability, Category, Finding, Severity
from .registry import category_of, effort_of, is_actionable, rule_of, severity_of

HOURS_PER_DAY = 6.0
PACKAGE_HOURS = 4.0
SETUP_HOURS = 4.0
LOW_FACTOR = 0.8
HIGH_FACTOR = 1.5
HIGH_FACTOR_KERNELS = 2.0
TOP_BLOCKERS = 10
REPEAT_FACTOR = 0.25
FALLBACK_FACTOR = 0.25
FALLBACK_CODES = frozenset({"PRT021", "PRT023"})  # availability gate / probe: the code runs without the package
# attention findings carry no package: flash-attn (PRT100-199) and xformers (PRT200-299)
_ATTENTION_PACKAGE = (("PRT1", "flash-attn"), ("PRT2", "xformers"))

METHOD = ("sum of per-site effort for shim/replace sites porter cannot fix (repeats of a rule in one file at "
          f"{REPEAT_FACTOR:g}x, sites in files with a fallback at {FALLBACK_FACTOR:g}x, benign sites 0) + "
          "a fixed cost per CUDA source file and per CUDA-only package + setup; low = 0.8x; high = every "
          "site in full plus reviews, x1.5 (x2 with custom kernels)")

KERNEL_FILE_CODE = "PRT870"
# Custom-kernel evidence (bespoke research code): the kernels family's "replace" rules.
KERNEL_FAMILY = "kernels"
# Training evidence (fine-tune with FSDP/DDP): explicit training-code sites, plus families whose
# findings only occur in training code.
TRAINING_CODES = frozenset({"PRT060"})
TRAINING_FAMILIES = frozenset({"distributed"})
TRAINING_NAME_HINTS = ("optim", "grad-scaler", "ddp", "fsdp", "sync-batchnorm", "syncbn")

# The typical effort per goal, in engineer-days (low, high; None = open-ended).
TYPICAL_DAYS: dict[str, tuple[float, float | None]] = {"serve": (1.0, 5.0), "fine-tune": (5.0, 15.0),
                                                       "bespoke": (20.0, None)}

GOALS: tuple[tuple[str, str, str, str], ...] = (
    ("serve", "Serve an open-weights model on cheaper hardware", "days", "low"),
    ("fine-tune", "Train/fine-tune with FSDP on rented capacity", "1-3 weeks", "medium"),
    ("bespoke", "Run bespoke research code with custom kernels", "4+ weeks", "high"),
)


# -- per-finding metadata ------------------------------------------------------------------------


def family_of(f: Finding) -> str:
    return registry.family_of(f.code)


def fix_level(f: Finding) -> str:
    """``safe``/``unsafe``/``manual``: what porter can do for this site."""
    if f.fix == Applicability.SAFE:
        return "safe"
    if f.fix == Applicability.UNSAFE:
        return "unsafe"
    return "manual"


def is_blocker(f: Finding) -> bool:
    """A site that stands between the repo and ROCm: shim/replace work porter does not do safely."""
    return category_of(f) != Category.BENIGN and f.fix != Applicability.SAFE and not f.code.startswith("PRT00")


def package_of(f: Finding) -> str | None:
    """The CUDA-only distribution a finding is about (from its data), normalised."""
    for key in ("package", "dist", "distribution"):
        value = f.data.get(key) if f.data else None
        if isinstance(value, str) and value:
            name = value.strip().lower().replace("_", "-")
            return _SAME_PACKAGE.get(name, name)
    return None


# Several names of one distribution (import name vs PyPI name) count once in the estimate.
_SAME_PACKAGE = {"pynvml": "nvidia-ml-py", "nvidia-ml-py3": "nvidia-ml-py", "transformer-engine-torch":
                 "transformer-engine", "flash-attn-2": "flash-attn", "apex-cuda": "apex"}


def _site_package(f: Finding) -> str | None:
    """The CUDA-only package a site uses: its data, else the attention family's code range."""
    pkg = package_of(f)
    if pkg is None:
        pkg = next((p for prefix, p in _ATTENTION_PACKAGE if f.code.startswith(prefix)), None)
    return pkg


def directory_of(path: str) -> str:
    d = posixpath.dirname(path)
    return d or "."


# -- the summary ---------------------------------------------------------------------------------


@dataclass
class Blocker:
    code: str
    name: str
    family: str
    category: str
    severity: str
    path: str
    line: int
    column: int
    effort_hours: float
    fix: str
    message: str


@dataclass
class RuleCount:
    code: str
    name: str
    family: str
    category: str
    count: int
    safe: int
    unsafe: int
    manual: int
    hours: float  # manual hours these sites contribute to the estimate (point value)


@dataclass
class Estimate:
    site_hours: float  # manual sites (fix: none), kernel-file findings excluded
    unsafe_review_hours: float  # sites with an unsafe fix (high end only)
    kernel_files: int
    kernel_file_hours: float
    packages: list[str]
    package_hours: float
    setup_hours: float
    total_hours: float  # point estimate: site + kernel files + packages + setup
    low_days: float
    high_days: float
    days: float
    hours_per_day: float
    reasoning: list[str]
    method: str = METHOD
    work_sites: int = 0  # shim/replace sites without a fix that carry effort
    repeat_sites: int = 0  # of those, further sites of a rule already counted in the same file
    fallback_sites: int = 0  # of those, uses of a package in a file that already runs without it
    benign_sites: int = 0  # benign sites without a fix: 0 h (verification in the high end)
    high_only_hours: float = 0.0  # repeats/fallbacks in full, benign verifications (high end only)


@dataclass
class GoalFit:
    key: str
    goal: str
    typical_effort: str
    risk: str
    matched: bool
    evidence: list[str]


@dataclass
class AuditSummary:
    files_scanned: int
    total: int
    by_category: dict[str, int]
    by_family: dict[str, int]
    by_rule: list[RuleCount]
    by_fix: dict[str, int]
    by_severity: dict[str, int]
    blockers_total: int
    top_blockers: list[Blocker]
    estimate: Estimate
    goal: str  # key of the goal this repo matches
    goals: list[GoalFit]
    what_it_takes: list[str]
    automatic: dict[str, int] = field(default_factory=dict)  # code -> sites porter fixes (safe)
    manual_work_sites: int = 0  # sites with no fix that carry effort (benign inventory excluded)
    versus_typical: str = ""  # this estimate against the typical effort for the goal (TYPICAL_DAYS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def goal_fit(self) -> GoalFit:
        return next(g for g in self.goals if g.key == self.goal)


def _h(hours: float) -> str:
    """Hours for a sentence: one decimal at most."""
    return f"{round(hours, 1):g}"


def _round(x: float, step: float = 0.5) -> float:
    return math.ceil(x / step) * step if x > 0 else 0.0


def summarize(findings: list[Finding], files_scanned: int = 0) -> AuditSummary:
    """Counts, blockers, the effort estimate and the goal placement for a list of findings."""
    table = registry.rules()
    by_category = {c.value: 0 for c in Category}
    by_fix = {"safe": 0, "unsafe": 0, "manual": 0}
    by_severity = {s.value: 0 for s in Severity}
    by_family: Counter[str] = Counter()
    rules: dict[str, RuleCount] = {}
    site_hours = unsafe_hours = high_only = 0.0
    work_sites = repeat_sites = fallback_sites = benign_sites = 0
    kernel_files: set[str] = set()
    packages: set[str] = set()
    kernel_evidence: list[Finding] = []
    training_evidence: list[Finding] = []
    fallbacks = {(f.path, p) for f in findings if (p := package_of(f)) and
                 (f.code in FALLBACK_CODES or (f.data or {}).get("gated") is True)}
    seen_in_file: set[tuple[str, str]] = set()
    for f in findings:
        cat = category_of(f)
        level = fix_level(f)
        fam = family_of(f)
        by_category[cat.value] += 1
        by_fix[level] += 1
        by_severity[severity_of(f).value] += 1
        by_family[fam] += 1
        r = table.get(f.code)
        rc = rules.get(f.code)
        if rc is None:
            rc = rules[f.code] = RuleCount(f.code, r.name if r else f.code, fam, (r.category if r else cat).value,
                                           0, 0, 0, 0, 0.0)
        rc.count += 1
        setattr(rc, level, getattr(rc, level) + 1)
        hours = effort_of(f)
        if f.code == KERNEL_FILE_CODE:
            kernel_files.add(f.path)
        elif level == "manual" and cat == Category.BENIGN:
            if hours > 0:
                benign_sites += 1
                high_only += hours
        elif level == "manual" and hours > 0:
            work_sites += 1
            if (f.path, _site_package(f)) in fallbacks:
                fallback_sites += 1
                counted = hours * FALLBACK_FACTOR
            elif (f.path, f.code) in seen_in_file:
                repeat_sites += 1
                counted = hours * REPEAT_FACTOR
            else:
                counted = hours
            seen_in_file.add((f.path, f.code))
            site_hours += counted
            high_only += hours - counted
            rc.hours += counted
        elif level == "unsafe":
            unsafe_hours += hours
        pkg = package_of(f)
        if pkg and cat != Category.BENIGN:
            packages.add(pkg)
        if fam == KERNEL_FAMILY and cat == Category.REPLACE:
            kernel_evidence.append(f)
        name = r.name if r else ""
        if f.code in TRAINING_CODES or fam in TRAINING_FAMILIES or any(h in name for h in TRAINING_NAME_HINTS):
            training_evidence.append(f)

    kernel_rule = table.get(KERNEL_FILE_CODE)
    file_cost = kernel_rule.effort_hours if kernel_rule else 4.0
    kernel_hours = file_cost * len(kernel_files)
    package_hours = PACKAGE_HOURS * len(packages)
    needs_work = bool(site_hours or kernel_files or packages or unsafe_hours or high_only)
    setup = SETUP_HOURS if needs_work else 0.0
    total = site_hours + kernel_hours + package_hours + setup
    high_factor = HIGH_FACTOR_KERNELS if kernel_evidence else HIGH_FACTOR
    low_days = _round(total * LOW_FACTOR / HOURS_PER_DAY)
    high_days = _round((total + high_only + unsafe_hours) * high_factor / HOURS_PER_DAY)
    days = _round(total / HOURS_PER_DAY)
    manual_info = sum(1 for f in findings if fix_level(f) == "manual" and not is_actionable(f))
    reasoning = [
        f"method: {METHOD}",
        f"{work_sites} shim/replace site(s) without an automatic fix: {_h(site_hours)} h "
        f"(each rule's per-site effort; {repeat_sites} repeat(s) of a rule in the same file at "
        f"{REPEAT_FACTOR:g}x, {fallback_sites} site(s) in files that already run without the package at "
        f"{FALLBACK_FACTOR:g}x; kernel files counted below)",
        f"{benign_sites} benign site(s) with a verification effort: 0 h (high end only); "
        f"{by_fix['manual'] - work_sites - benign_sites} other site(s) without a fix are inventory "
        f"({manual_info} informational): 0 h",
        f"{by_fix['safe']} site(s) with a safe fix: 0 h (`porter apply` rewrites them)",
        f"{by_fix['unsafe']} site(s) with an unsafe fix: {_h(unsafe_hours)} h of review, counted in the high "
        "end only (`porter apply --unsafe-fixes`)",
        f"{len(kernel_files)} CUDA source file(s) x {file_cost:g} h (HIPify, build for the AMD target, test) "
        f"= {_h(kernel_hours)} h",
        f"{len(packages)} CUDA-only package(s) x {PACKAGE_HOURS:g} h (install route, CI image, pins) "
        f"= {_h(package_hours)} h" + (f": {', '.join(sorted(packages))}" if packages else ""),
        f"setup (ROCm container, smoke test): {setup:g} h",
        f"total {_h(total)} h / {HOURS_PER_DAY:g} focused h per day = {days:g} day(s); range: low = total "
        f"x{LOW_FACTOR:g}, high = (total + {_h(high_only + unsafe_hours)} h of repeats, fallbacks, benign checks "
        f"and reviews in full) x{high_factor:g}" + (" (custom kernels widen the range)" if kernel_evidence
                                                    else "") + f" = {low_days:g}-{high_days:g} day(s)",
    ]
    estimate = Estimate(
        site_hours=round(site_hours, 2), unsafe_review_hours=round(unsafe_hours, 2),
        kernel_files=len(kernel_files), kernel_file_hours=kernel_hours, packages=sorted(packages),
        package_hours=package_hours, setup_hours=setup, total_hours=round(total, 2), low_days=low_days,
        high_days=high_days, days=days, hours_per_day=HOURS_PER_DAY, reasoning=reasoning,
        work_sites=work_sites, repeat_sites=repeat_sites, fallback_sites=fallback_sites,
        benign_sites=benign_sites, high_only_hours=round(high_only, 2),
    )

    goals = _goals(kernel_evidence, training_evidence, kernel_files)
    goal = next(g.key for g in goals if g.matched)
    manual_work = work_sites
    blockers = sorted((f for f in findings if is_blocker(f)), key=_blocker_key)
    top = [_blocker(f) for f in blockers[:TOP_BLOCKERS]]
    by_rule = sorted(rules.values(), key=lambda rc: (-rc.hours, -rc.count, rc.code))
    automatic = {rc.code: rc.safe for rc in sorted(rules.values(), key=lambda r: r.code) if rc.safe}
    return AuditSummary(
        files_scanned=files_scanned, total=len(findings), by_category=by_category,
        by_family=dict(sorted(by_family.items())), by_rule=by_rule, by_fix=by_fix, by_severity=by_severity,
        blockers_total=len(blockers), top_blockers=top, estimate=estimate, goal=goal, goals=goals,
        what_it_takes=_what_it_takes(goal, estimate, by_fix, manual_work, kernel_evidence),
        automatic=automatic, manual_work_sites=manual_work,
        versus_typical=_versus_typical(goal, estimate, len(kernel_evidence), len(kernel_files)),
    )


def _versus_typical(goal: str, est: Estimate, kernel_sites: int, kernel_files: int) -> str:
    low, high = TYPICAL_DAYS[goal]
    typical = f"{low:g}-{high:g} days" if high is not None else f"{low:g}+ days"
    if est.high_days < low:
        why = {"bespoke": f"the custom-kernel surface is small ({kernel_sites} site(s) in {kernel_files} CUDA "
                          "file(s))",
               "fine-tune": "few training-specific dependencies need porting",
               "serve": "little needs porting"}[goal]
        return f"below the typical {typical} for this goal: {why}"
    if high is not None and est.low_days > high:
        return (f"above the typical {typical} for this goal: many sites need manual work; "
                "check the blockers first")
    return f"within the typical {typical} for this goal"


def _blocker_key(f: Finding) -> tuple[Any, ...]:
    cat_rank = {Category.REPLACE: 0, Category.SHIM: 1, Category.BENIGN: 2}[category_of(f)]
    sev_rank = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}[severity_of(f)]
    return (cat_rank, -effort_of(f), sev_rank, f.path, f.line, f.column, f.code)


def _blocker(f: Finding) -> Blocker:
    r = rule_of(f)
    return Blocker(
        code=f.code, name=r.name if r else f.code, family=family_of(f), category=category_of(f).value,
        severity=severity_of(f).value, path=f.path, line=f.line, column=f.column, effort_hours=effort_of(f),
        fix=f.fix.value, message=f.message,
    )


def _where(fs: list[Finding], limit: int = 3) -> str:
    locs = [f"{f.path}:{f.line}" for f in fs[:limit]]
    more = f" and {len(fs) - limit} more" if len(fs) > limit else ""
    return ", ".join(locs) + more


def _goals(kernels: list[Finding], training: list[Finding], kernel_files: set[str]) -> list[GoalFit]:
    bespoke = bool(kernels)
    fine_tune = not bespoke and bool(training)
    serve = not bespoke and not fine_tune
    out = []
    for key, goal, typical, risk in GOALS:
        if key == "bespoke":
            evidence = ([f"custom kernels: {len(kernels)} site(s) in {len(kernel_files)} CUDA file(s) "
                         f"({_where(kernels)})"] if kernels else ["no custom kernels found"])
            matched = bespoke
        elif key == "fine-tune":
            evidence = ([f"training code (optimizers, DDP/FSDP, distributed setup): {len(training)} site(s) "
                         f"({_where(training)})"] if training else ["no training loop, optimizer or DDP/FSDP found"])
            matched = fine_tune
        else:
            evidence = ["no custom kernels and no training code: an inference/serving workload"] if serve else []
            matched = serve
        out.append(GoalFit(key, goal, typical, risk, matched, evidence))
    return out


def _what_it_takes(goal: str, est: Estimate, by_fix: dict[str, int], manual_work: int,
                   kernels: list[Finding]) -> list[str]:
    steps = []
    if by_fix["safe"]:
        steps.append(f"run `porter apply` for the {by_fix['safe']} safe rewrite(s) and review the patch series")
    if by_fix["unsafe"]:
        steps.append(f"review the {by_fix['unsafe']} approximation(s) offered by `porter apply --unsafe-fixes`")
    if est.packages:
        steps.append(f"replace or rebuild {len(est.packages)} CUDA-only package(s): {', '.join(est.packages)}")
    if kernels:
        steps.append(f"port {est.kernel_files} CUDA file(s) and {len(kernels)} custom-kernel site(s): delete, "
                     "rewrite in Triton, or HIPify and fix warp-size hazards")
    if manual_work:
        steps.append(f"work through {manual_work} manual site(s) ({est.site_hours:g} h), blockers first")
    if goal == "fine-tune":
        steps.append("validate collectives with rccl-tests and checkpoint portability before the first long run")
    if goal == "serve":
        steps.append("benchmark cost per million tokens on the ROCm fleet against the current one")
    steps.append(f"estimated {est.low_days:g}-{est.high_days:g} engineer-day(s) (point {est.days:g})")
    return steps


__all__ = [
    "AuditSummary", "Blocker", "Estimate", "GoalFit", "RuleCount", "directory_of", "fix_level", "is_blocker",
    "summarize",
]
