"""Property test: rewritten requirements files parse and keep every other line byte for byte."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement

from porter.framework import RepoFacts
from porter.manifests import requirement_lines
from porter.testing import findings, fixed

FAM = "dependencies"
FACTS = RepoFacts(imports=frozenset({"torch", "numpy"}), applied=frozenset({"PRT401"}))

names = st.sampled_from(["numpy", "einops", "torch", "torchvision", "flash-attn", "xformers", "bitsandbytes",
                         "nvidia-cublas-cu12", "cupy-cuda12x", "triton", "Flash_Attn", "requests"])
versions = st.sampled_from(["2.7.1", "0.22.1", "1.26.4", "2.5.8", "0.0.23"])
locals_ = st.sampled_from(["", "", "+cu121", "+cu118", "+pt21cu121"])
ops = st.sampled_from(["==", ">=", "~=", ""])
comments = st.sampled_from(["", "  # keep", "\t# cu121 note", " #flash-attn"])
markers = st.sampled_from(["", " ; python_version >= '3.9'", "; platform_system == \"Linux\""])
options = st.sampled_from(["--extra-index-url https://download.pytorch.org/whl/cu121",
                           "--index-url https://download.pytorch.org/whl/cu126",
                           "-f https://download.pytorch.org/whl/cu118/torch_stable.html",
                           "-r base.txt", "# a comment line", ""])


@st.composite
def requirement_line(draw) -> str:
    if draw(st.integers(0, 4)) == 0:
        return draw(options)
    name, op = draw(names), draw(ops)
    spec = f"{op}{draw(versions)}{draw(locals_) if op == '==' else ''}" if op else ""
    return f"{name}{spec}{draw(markers)}{draw(comments)}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(requirement_line(), min_size=1, max_size=8), st.sampled_from(["\n", "\r\n"]),
       st.booleans())
def test_requirements_round_trip(lines: list[str], newline: str, unsafe: bool) -> None:
    text = newline.join(lines) + newline
    out = fixed(text, "requirements.txt", family=FAM, facts=FACTS, unsafe=unsafe)
    # every requirement still parses
    for line in requirement_lines(out):
        if line.text and not line.option:
            assert line.requirement is not None, line.text
            Requirement(out[line.req_start : line.req_end])
    # lines no finding points at are byte-identical and in order
    reported = {f.line for f in findings(text, "requirements.txt", family=FAM, facts=FACTS)}
    untouched = [ln for i, ln in enumerate(text.splitlines(keepends=True), 1) if i not in reported]
    rest = iter(out.splitlines(keepends=True))
    for ln in untouched:
        assert any(ln == o for o in rest), (ln, out)
    # idempotent
    assert fixed(out, "requirements.txt", family=FAM, facts=FACTS, unsafe=unsafe) == out
