"""porter.estimate: counts, the effort estimate's arithmetic, blockers and goal placement."""

from __future__ import annotations

import json

import pytest

from porter import registry, reporters
from porter.estimate import (
    HOURS_PER_DAY,
    PACKAGE_HOURS,
    SETUP_HOURS,
    fix_level,
    summarize,
)
from porter.findings import Applicability, Category, Finding
from porter.testing import findings as analyze


def f(code: str, path: str = "a.py", line: int = 1, **kw: object) -> Finding:
    return Finding(code=code, message=f"{code} here", path=path, line=line, **kw)  # type: ignore[arg-type]


def hours(code: str) -> float:
    return registry.rules()[code].effort_hours


def test_empty() -> None:
    s = summarize([], files_scanned=3)
    assert s.total == 0 and s.files_scanned == 3
    assert s.estimate.total_hours == 0 and s.estimate.low_days == 0 and s.estimate.high_days == 0
    assert s.goal == "serve"
    assert s.blockers_total == 0 and s.top_blockers == []
    json.dumps(s.to_dict())


def test_counts_agree_with_json_counts() -> None:
    found = [
        f("PRT011", data={"package": "flash-attn"}),
        f("PRT020", line=2, category=Category.REPLACE, data={"package": "flash-attn"}),
        f("PRT030", line=3, fix=Applicability.SAFE),
        f("PRT040", line=4),
        f("PRT045", line=5),
        f("PRT870", path="k.cu"),
        f("PRT871", path="k.cu", line=3),
    ]
    s = summarize(found, files_scanned=2)
    c = reporters.counts(found)
    assert s.total == c["total"] == len(found)
    assert s.by_category == c["by_category"]
    assert s.by_fix == {"safe": c["by_fix"]["safe"], "unsafe": c["by_fix"]["unsafe"], "manual": c["by_fix"]["none"]}
    assert s.by_severity == c["by_severity"]
    assert sum(s.by_family.values()) == len(found)
    assert {rc.code: rc.count for rc in s.by_rule} == c["by_code"]
    assert s.by_family["packages"] == 3 and s.by_family["device_audit"] == 2 and s.by_family["kernels"] == 2


def test_estimate_arithmetic() -> None:
    found = [
        f("PRT011", data={"package": "flash-attn"}),                   # manual 0.25 h, package flash-attn
        f("PRT014", line=2, data={"package": "bitsandbytes"}),          # manual 0.25 h, package bitsandbytes
        f("PRT020", line=3, data={"package": "flash-attn"}),            # manual 2 h (same package)
        f("PRT030", line=4, fix=Applicability.SAFE),                     # safe: 0 h
        f("PRT049", line=5, fix=Applicability.UNSAFE),                   # unsafe: high end only
        f("PRT045", line=6, effort_hours=3.0),                           # override: 3 h
        f("PRT870", path="csrc/a.cu"),                                   # kernel file
        f("PRT870", path="csrc/b.cu"),                                   # kernel file
        f("PRT871", path="csrc/a.cu", line=9),                           # manual kernel
    ]
    s = summarize(found)
    e = s.estimate
    site = hours("PRT011") + hours("PRT014") + hours("PRT020") + 3.0 + hours("PRT871")
    assert e.site_hours == pytest.approx(site)
    assert e.unsafe_review_hours == pytest.approx(hours("PRT049"))
    assert e.kernel_files == 2 and e.kernel_file_hours == pytest.approx(2 * hours("PRT870"))
    assert e.packages == ["bitsandbytes", "flash-attn"]
    assert e.package_hours == pytest.approx(2 * PACKAGE_HOURS)
    total = site + 2 * hours("PRT870") + 2 * PACKAGE_HOURS + SETUP_HOURS
    assert e.total_hours == pytest.approx(total)
    assert e.low_days <= e.days <= e.high_days
    assert e.days * HOURS_PER_DAY >= total > (e.days - 0.5) * HOURS_PER_DAY
    # custom kernels present: the high end doubles (total + unsafe reviews)
    assert e.high_days * HOURS_PER_DAY >= (total + hours("PRT049")) * 2.0
    assert any("CUDA source file" in r for r in e.reasoning)
    assert s.goal == "bespoke"


def test_safe_fixes_cost_nothing() -> None:
    s = summarize([f("PRT030", fix=Applicability.SAFE, effort_hours=5.0)])
    assert s.estimate.site_hours == 0 and s.estimate.unsafe_review_hours == 0
    assert s.blockers_total == 0  # a safely fixed site is not a blocker
    assert s.automatic == {"PRT030": 1}


def test_finding_category_overrides_rule() -> None:
    s = summarize([f("PRT020", category=Category.SHIM)])
    assert s.by_category["shim"] == 1 and s.by_category["replace"] == 0


@pytest.mark.parametrize(
    ("found", "goal"),
    [
        ([f("PRT041"), f("PRT011", data={"package": "flash-attn"})], "serve"),
        ([f("PRT060"), f("PRT041")], "fine-tune"),
        ([f("PRT060"), f("PRT862", path="setup.py")], "bespoke"),
        ([f("PRT864")], "serve"),  # a Triton kernel is portable: not "custom CUDA kernels"
    ],
)
def test_goal(found: list[Finding], goal: str) -> None:
    s = summarize(found)
    assert s.goal == goal
    assert [g.key for g in s.goals if g.matched] == [goal]
    assert s.goal_fit.evidence


def test_blockers_ranked_replace_first_then_effort() -> None:
    found = [f("PRT041", line=1), f("PRT045", line=2), f("PRT872", path="x.cu", line=3), f("PRT860", line=4)]
    s = summarize(found)
    assert s.blockers_total == 3  # the benign device string is not a blocker
    assert [b.code for b in s.top_blockers] == ["PRT872", "PRT860", "PRT045"]


def test_real_fixture_summary_is_consistent() -> None:
    src = "import flash_attn\nimport torch\nx = torch.zeros(2, device='cuda')\nopt = torch.optim.SGD([x], lr=0.1)\n"
    found = analyze(src, "train.py")
    s = summarize(found, files_scanned=1)
    assert s.total == len(found)
    assert s.goal == "fine-tune"
    assert "flash-attn" in s.estimate.packages
    assert all(fix_level(x) in {"safe", "unsafe", "manual"} for x in found)


def test_versus_typical_and_manual_work() -> None:
    small = summarize([f("PRT870", path="k.cu"), f("PRT871", path="k.cu", line=2), f("PRT041", line=3)])
    assert small.goal == "bespoke"
    assert small.versus_typical.startswith("below the typical 20+ days")
    assert small.manual_work_sites == 1  # the kernel; the device string is benign inventory
    big = summarize([f("PRT872", path=f"k{i}.cu") for i in range(40)] + [f("PRT870", path=f"k{i}.cu") for i in range(40)])
    assert big.versus_typical.startswith("within")
    serve = summarize([f("PRT020", line=i, effort_hours=8.0) for i in range(1, 30)])
    assert serve.goal == "serve" and serve.versus_typical.startswith("above")


def test_benign_sites_cost_nothing_in_the_point_estimate() -> None:
    """57 benign sites (a vendor shim that works unchanged on ROCm) are not 28.5 h of work."""
    benign = [f("PRT043", line=i) for i in range(1, 58)]
    s = summarize(benign)
    e = s.estimate
    assert e.site_hours == 0 and e.total_hours == SETUP_HOURS and e.benign_sites == 57
    assert e.low_days <= 1 and s.manual_work_sites == 0
    assert e.high_only_hours == pytest.approx(57 * hours("PRT043"))  # verification: high end only
    assert e.high_days > e.days


def test_repeats_of_a_rule_in_one_file_cost_less_than_the_first() -> None:
    e = summarize([f("PRT045", line=i) for i in range(1, 11)]).estimate
    full = hours("PRT045")
    assert e.site_hours == pytest.approx(full + 9 * full * 0.25, abs=0.01)
    assert e.repeat_sites == 9 and e.work_sites == 10
    assert e.high_only_hours == pytest.approx(9 * full * 0.75, abs=0.01)
    other_file = summarize([f("PRT045", path="a.py"), f("PRT045", path="b.py")]).estimate
    assert other_file.site_hours == pytest.approx(2 * full)


def test_sites_with_an_existing_fallback_are_not_full_replacements() -> None:
    gate = f("PRT021", data={"package": "xformers"})
    calls = [f("PRT201", line=10 + i) for i in range(4)] + [f("PRT020", line=20, data={"package": "xformers"})]
    with_fallback = summarize([gate, *calls]).estimate
    without = summarize(calls).estimate
    assert with_fallback.fallback_sites == 5 and without.fallback_sites == 0
    assert with_fallback.site_hours == pytest.approx(0.25 * (4 * hours("PRT201") + hours("PRT020")), abs=0.01)
    assert with_fallback.site_hours < without.site_hours
    # the other file has no fallback: full cost there
    elsewhere = summarize([gate, f("PRT201", path="b.py")]).estimate
    assert elsewhere.site_hours == pytest.approx(hours("PRT201"))


def test_estimate_states_its_method_and_range() -> None:
    e = summarize([f("PRT045"), f("PRT020", data={"package": "flash-attn"})]).estimate
    assert e.reasoning[0].startswith("method: ") and "low = 0.8x" in e.method
    assert e.low_days < e.high_days
    assert any("range: low = total x0.8" in r for r in e.reasoning)
