"""The devices family and the capability module it adds (codemods/templates/porter_device.py).

The capability module is executed on CPU against mocked NVIDIA and AMD device properties
(torch.cuda / torch.version monkeypatched), and every capability-gate rewrite porter marks
safe is executed before and after the rewrite on every NVIDIA compute capability.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from porter.codemods import devices
from porter.codemods.devices import NVIDIA_CAPS, Gate, device_module, intent_of, template_text
from porter.engine import fix
from porter.findings import Applicability
from porter.framework import FileContext
from porter.testing import findings, fixed, settings_for

torch = pytest.importorskip("torch")


@dataclass(frozen=True)
class Dev:
    name: str
    cap: tuple[int, int]
    hip: str | None = None
    arch: str | None = None


A100 = Dev("NVIDIA A100-SXM4-80GB", (8, 0))
H100 = Dev("NVIDIA H100 80GB HBM3", (9, 0))
L4 = Dev("NVIDIA L4", (8, 9))
V100 = Dev("Tesla V100-SXM2-16GB", (7, 0))
MI250X = Dev("AMD Instinct MI250X/MI250", (9, 0), "6.2.41133", "gfx90a:sramecc+:xnack-")
MI300X = Dev("AMD Instinct MI300X", (9, 4), "6.3.42131", "gfx942:sramecc+:xnack-")
MI355X = Dev("AMD Instinct MI355X", (9, 5), "7.0.0", "gfx950:sramecc+:xnack-")
RX7900 = Dev("AMD Radeon RX 7900 XTX", (11, 0), "6.3.42131", "gfx1100")


@contextlib.contextmanager
def on_device(dev: Dev | None, *, power: int = 0) -> Iterator[None]:
    """torch.cuda / torch.version as a CUDA or ROCm build with ``dev`` (None: CPU-only) reports them."""
    if dev is None:
        props = None
    elif dev.hip:
        props = SimpleNamespace(name=dev.name, major=dev.cap[0], minor=dev.cap[1], gcnArchName=dev.arch)
    else:
        props = SimpleNamespace(name=dev.name, major=dev.cap[0], minor=dev.cap[1])

    def need_gpu(*_a: object, **_k: object) -> object:
        raise AssertionError("Invalid device id")

    with contextlib.ExitStack() as stack:
        patch = stack.enter_context
        patch(mock.patch.object(torch.cuda, "is_available", lambda: dev is not None))
        patch(mock.patch.object(torch.version, "hip", dev.hip if dev else None))
        patch(mock.patch.object(torch.version, "cuda", None if (dev and dev.hip) else "12.8"))
        patch(mock.patch.object(torch.cuda, "get_device_properties", (lambda d=None: props) if dev else need_gpu))
        patch(mock.patch.object(torch.cuda, "get_device_capability", (lambda d=None: dev.cap) if dev else need_gpu))
        patch(mock.patch.object(torch.cuda, "get_device_name", (lambda d=None: dev.name) if dev else need_gpu))
        patch(mock.patch.object(torch.cuda, "power_draw", lambda d=None: power))
        patch(mock.patch.object(torch.backends.mps, "is_available", lambda: False))
        yield


def load_template() -> types.ModuleType:
    module = types.ModuleType("porter_device")
    exec(compile(template_text(), "porter_device.py", "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def pd() -> types.ModuleType:
    return load_template()


# -- the capability module ----------------------------------------------------------------------
TABLE = [
    # device, vendor, arch, bf16, tf32, fp8, e4m3 dtype name, cuda_capability
    (A100, "nvidia", "sm_80", True, True, False, "float8_e4m3fn", (8, 0)),
    (H100, "nvidia", "sm_90", True, True, True, "float8_e4m3fn", (9, 0)),
    (L4, "nvidia", "sm_89", True, True, True, "float8_e4m3fn", (8, 9)),
    (V100, "nvidia", "sm_70", False, False, False, "float8_e4m3fn", (7, 0)),
    (MI250X, "amd", "gfx90a", True, False, False, "float8_e4m3fn", None),
    (MI300X, "amd", "gfx942", True, True, True, "float8_e4m3fnuz", None),
    (MI355X, "amd", "gfx950", True, True, True, "float8_e4m3fn", None),
    (RX7900, "amd", "gfx1100", True, False, False, "float8_e4m3fn", None),
    (None, "cpu", "", False, False, False, "float8_e4m3fn", None),
]


@pytest.mark.parametrize(("dev", "vendor", "arch", "bf16", "tf32", "fp8", "e4m3", "cc"), TABLE,
                         ids=[d.name if d else "cpu" for d, *_ in TABLE])
def test_capability_module_on_mocked_devices(pd: types.ModuleType, dev: Dev | None, vendor: str, arch: str,
                                             bf16: bool, tf32: bool, fp8: bool, e4m3: str,
                                             cc: tuple[int, int] | None) -> None:
    with on_device(dev):
        assert pd.vendor() == vendor
        assert pd.is_rocm() is bool(dev and dev.hip)
        assert pd.is_nvidia() is (vendor == "nvidia")
        assert pd.is_amd() is (vendor == "amd")
        assert pd.gpu_arch() == arch
        assert pd.supports_bf16() is bf16
        assert pd.supports_tf32() is tf32
        assert pd.supports_fp8() is fp8
        assert pd.float8_e4m3_dtype() == getattr(torch, e4m3)
        assert pd.cuda_capability() == cc
        assert pd.get_device() == torch.device("cuda" if dev else "cpu")
        assert pd.attention_backend() == "sdpa"


def test_hopper_test_is_wrong_on_amd_but_capability_functions_are_right(pd: types.ModuleType) -> None:
    """The reason the module exists: `major >= 9` calls MI250X "Hopper"; supports_fp8 does not."""
    for dev, has_fp8 in ((A100, False), (H100, True), (MI250X, False), (MI300X, True)):
        with on_device(dev):
            naive = torch.cuda.get_device_capability()[0] >= 9
            assert pd.supports_fp8() is has_fp8
            if dev is MI250X:
                assert naive and not has_fp8


def test_power_draw_is_normalised_to_milliwatts(pd: types.ModuleType) -> None:
    with on_device(H100, power=312_000):  # NVML: mW
        assert pd.power_draw_mw() == 312_000
    with on_device(MI300X, power=312):  # amdsmi through torch: W
        assert pd.power_draw_mw() == 312_000


def test_capability_module_runs_unmocked_on_this_machine(pd: types.ModuleType) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert pd.vendor() in ("cpu", "apple")
    assert pd.supports_bf16() is False and pd.supports_fp8() is False
    assert pd.cuda_capability() is None and pd.gpu_arch() == ""


def test_template_is_lint_clean_and_typed() -> None:
    import ast

    tree = ast.parse(template_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            assert node.returns is not None, f"{node.name} lacks a return annotation"
            assert ast.get_docstring(node) or node.name in {"utilization_rates"}, node.name


# -- gate arithmetic ---------------------------------------------------------------------------
def test_gate_mismatch_names_the_nvidia_parts_that_differ() -> None:
    assert Gate("major", ">=", 8).nvidia_mismatch("bf16") == (False, [])
    assert Gate("major", "<", 8).nvidia_mismatch("bf16") == (True, [])
    assert Gate("cap", ">=", (8, 9)).nvidia_mismatch("fp8") == (False, [])
    assert Gate("major", ">=", 9).nvidia_mismatch("fp8") == (False, [(8, 9)])
    assert Gate("major", ">=", 9).table() == "A100 false, H100 true, MI250X/gfx90a true, MI300X/gfx942 true"


def test_intent_needs_exactly_one_feature() -> None:
    assert intent_of("use_bf16") == "bf16"
    assert intent_of("dtype = torch.float8_e4m3fn") == "fp8"
    assert intent_of("torch.backends.cuda.matmul.allow_tf32 = True") == "tf32"
    assert intent_of("bf16_and_fp8") is None
    assert intent_of("is_hopper") is None


OPS = (">=", ">", "<=", "<", "==", "!=")


@settings(max_examples=80, deadline=None)
@given(
    feature=st.sampled_from(("bf16", "fp8", "tf32")),
    op=st.sampled_from(OPS),
    kind=st.sampled_from(("major", "cap", "props")),
    major=st.integers(min_value=6, max_value=12),
    minor=st.integers(min_value=0, max_value=9),
)
def test_gate_rewrites_keep_nvidia_answers(pd: types.ModuleType, feature: str, op: str, kind: str,
                                           major: int, minor: int) -> None:
    """A SAFE gate rewrite answers like the original on every NVIDIA capability, an UNSAFE one
    differs on exactly one, a gate left alone would differ on more; every rewrite gives the
    capability module's answer on AMD."""
    expr = {
        "major": f"torch.cuda.get_device_capability()[0] {op} {major}",
        "props": f"torch.cuda.get_device_properties(0).major {op} {major}",
        "cap": f"torch.cuda.get_device_capability() {op} ({major}, {minor})",
    }[kind]
    source = f"import torch\n\n\ndef gate():\n    use_{feature} = {expr}\n    return use_{feature}\n"
    found = [f for f in findings(source, family="devices") if f.code == "PRT700"]

    def run(src: str, dev: Dev) -> bool:
        ns: dict[str, object] = {}
        with on_device(dev), mock.patch.dict(sys.modules, {"porter_device": pd}):
            exec(compile(src, "t.py", "exec"), ns)
            return bool(ns["gate"]())  # type: ignore[operator]

    if op in ("==", "!="):  # a model test, never turned into a feature test
        assert len(found) == 1 and found[0].fix == Applicability.NONE
        assert fixed(source, family="devices", unsafe=True) == source
        return
    assert len(found) == 1
    finding = found[0]
    rewritten = fixed(source, family="devices", unsafe=True)
    assert (f"porter_device.supports_{feature}(" in rewritten) is (finding.fix != Applicability.NONE)
    if finding.fix == Applicability.NONE:  # what the rejected rewrite would have been
        assert rewritten == source
        for candidate in (f"porter_device.supports_{feature}()", f"not porter_device.supports_{feature}()"):
            hypothetical = "import porter_device\n" + source.replace(expr, candidate)
            assert sum(run(source, Dev("NVIDIA", c)) != run(hypothetical, Dev("NVIDIA", c))
                       for c in NVIDIA_CAPS) > 1, finding.message
        return

    differs = [cap for cap in NVIDIA_CAPS if run(source, Dev("NVIDIA", cap)) != run(rewritten, Dev("NVIDIA", cap))]
    if finding.fix == Applicability.SAFE:
        assert differs == [], finding.message
        assert fixed(source, family="devices") == rewritten
    elif finding.fix == Applicability.UNSAFE:
        assert len(differs) == 1, finding.message
        assert fixed(source, family="devices") == source
    else:
        raise AssertionError(finding.fix)
    truth = {"bf16": "supports_bf16", "fp8": "supports_fp8", "tf32": "supports_tf32"}[feature]
    for dev in (MI250X, MI300X, MI355X):
        with on_device(dev):
            expected = getattr(pd, truth)()
        negated = "not porter_device" in rewritten
        assert run(rewritten, dev) is (expected != negated)


# -- where the module goes -------------------------------------------------------------------------
def _ctx(relpath: str, **options: object) -> FileContext:
    s = settings_for("devices", devices=dict(options)) if options else settings_for("devices")
    return FileContext(relpath, "", "python", s)


def test_device_module_default_is_a_root_module() -> None:
    dm = device_module(_ctx("train/loop.py"))
    assert dm is not None
    assert (dm.module, dm.path, dm.import_stmt, dm.local) == (
        "porter_device", "porter_device.py", "import porter_device", "porter_device")
    assert dm.new_files == (("porter_device.py", template_text()),)


def test_device_module_in_a_package_and_relative_imports() -> None:
    dm = device_module(_ctx("mypkg/models/llama.py", module="mypkg.porter_device"))
    assert dm is not None and dm.path == "mypkg/porter_device.py"
    assert dm.import_stmt == "from mypkg import porter_device"
    dm = device_module(_ctx("src/mypkg/models/llama.py", module="mypkg._device",
                            path="src/mypkg/_device.py", **{"import-style": "relative"}))
    assert dm is not None and dm.import_stmt == "from .. import _device" and dm.local == "_device"
    dm = device_module(_ctx("src/mypkg/cli.py", module="mypkg._device", path="src/mypkg/_device.py",
                            **{"import-style": "relative"}))
    assert dm is not None and dm.import_stmt == "from . import _device"
    dm = device_module(_ctx("scripts/run.py", module="mypkg._device", path="src/mypkg/_device.py",
                            **{"import-style": "relative"}))
    assert dm is not None and dm.import_stmt == "from mypkg import _device"  # outside the package
    assert device_module(_ctx("porter_device.py")) is None


GATE = "import torch\n\nuse_bf16 = torch.cuda.get_device_capability()[0] >= 8\n"


def test_rewrite_uses_configured_module_and_creates_it_once() -> None:
    s = settings_for("devices", devices={"module": "mypkg.porter_device"})
    out = fix("mypkg/train.py", GATE, "python", s)
    assert "from mypkg import porter_device\n" in out.text
    assert "use_bf16 = porter_device.supports_bf16()" in out.text
    assert out.new_files == {"mypkg/porter_device.py": template_text()}
    again = fix("mypkg/train.py", GATE, "python", s, existing=frozenset({"mypkg/porter_device.py"}))
    assert again.text == out.text and again.new_files == {}


def test_relative_import_style_end_to_end() -> None:
    s = settings_for("devices", devices={"module": "pkg.porter_device", "import-style": "relative"})
    source = '"""doc"""\nfrom __future__ import annotations\n\nimport torch\n\n' + GATE.split("\n", 2)[2]
    out = fix("pkg/sub/m.py", source, "python", s)
    assert out.text.splitlines()[4] == "from .. import porter_device"
    assert "use_bf16 = porter_device.supports_bf16()" in out.text
    assert list(out.new_files) == ["pkg/porter_device.py"]


def test_the_capability_module_itself_is_never_rewritten() -> None:
    assert fixed(GATE, "porter_device.py", family="devices") == GATE
    found = findings(template_text(), "porter_device.py", family="devices")
    assert all(f.fix == Applicability.NONE for f in found)


def test_family_registered_with_its_code_range() -> None:
    codes = [r.code for r in devices.FAMILY.rules]
    assert all("PRT700" <= c <= "PRT729" for c in codes)
    assert devices.FAMILY.order == 60


def test_allow_tf32_is_kept_because_the_precision_api_is_not_equivalent() -> None:
    """`set_float32_matmul_precision("high")` is not an exact spelling of `allow_tf32 = True`: it also
    switches oneDNN (CPU) matmuls to TF32. So porter reports the flag and leaves it."""
    import subprocess

    found = findings("import torch\n\ntorch.backends.cuda.matmul.allow_tf32 = True\n", family="devices")
    assert [(f.code, f.fix) for f in found] == [("PRT710", Applicability.NONE)]
    probe = (
        "import torch\n"
        "torch.backends.cuda.matmul.allow_tf32 = True\n"
        "a = torch.backends.mkldnn.matmul.fp32_precision\n"
        "torch.backends.cuda.matmul.allow_tf32 = False\n"
        "torch.set_float32_matmul_precision('high')\n"
        "b = torch.backends.mkldnn.matmul.fp32_precision\n"
        "print(a, b, torch.backends.cuda.matmul.allow_tf32)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    legacy, modern, cuda_flag = out.stdout.split()
    assert cuda_flag == "True"  # both spellings set the CUDA/ROCm flag...
    assert legacy != modern  # ...but only one of them changes CPU matmul precision


# -- the stdlib-ast tier ---------------------------------------------------------------------------
def test_family_runs_on_the_ast_tier_without_libcst(monkeypatch: pytest.MonkeyPatch) -> None:
    """Detection needs no LibCST parse: a file with report-only findings never builds a LibCST tree."""
    import libcst

    assert devices.FAMILY.python is None and devices.FAMILY.python_ast is devices.DevicesVisitor

    def no_libcst(*_a: object, **_k: object) -> object:
        raise AssertionError("LibCST parsed")

    monkeypatch.setattr(libcst, "parse_module", no_libcst)
    source = ("import torch\n\nif torch.version.cuda:\n    v = float(torch.version.cuda)\n"
              "torch.backends.cudnn.benchmark = True\nok = torch.cuda.get_device_capability()[0] >= 8\n")
    assert [f.code for f in findings(source, family="devices")] == ["PRT702", "PRT713", "PRT700"]


def _gates(source: str) -> list[tuple[int, str, str | None]]:
    return [(f.line, f.data["gate"], f.data["feature"]) for f in findings(source, family="devices")
            if f.code == "PRT700"]


def test_gate_text_keeps_its_own_parentheses_not_a_calls() -> None:
    """The gate is shown as written, with the parentheses around it (its range excludes them);
    the parentheses of a call or class header around it are not the gate's, those after a
    keyword are."""
    source = ("import torch\nfrom torch.cuda import get_device_capability as cap\n"
              "a = ((cap()[0] >= 8))\n"
              "b = bool(cap()[0] >= 8)\n"
              "c = print((cap()[0] >= 8))\n"
              "if(cap()[0] >= 8):\n    pass\n"
              "d = (  # a comment inside\n    cap()[0] >= 8\n)\n")
    assert _gates(source) == [
        (3, "((cap()[0] >= 8))", None), (4, "cap()[0] >= 8", None), (5, "(cap()[0] >= 8)", None),
        (6, "(cap()[0] >= 8)", None), (9, "(  # a comment inside\n    cap()[0] >= 8\n)", None)]
    found = [f for f in findings(source, family="devices") if f.line == 3]
    assert (found[0].column, found[0].end_column) == (7, 20)  # the comparison itself


def test_multiline_gate_and_arguments_drop_the_statement_indentation() -> None:
    """A gate over several lines reads like LibCST prints it: continuation lines lose the
    enclosing statement's indentation (string contents and backslash continuations keep it),
    and the rewrite carries the capability call's arguments as written."""
    source = ("import torch\n\n\ndef f(dev):\n    if True:\n"
              "        use_bf16 = (torch.cuda.get_device_capability(\n            dev,\n        )[0]\n"
              "                    >= 8)\n"
              "        tf32 = torch.cuda.get_device_capability()[0] \\\n            >= 8\n"
              "    return use_bf16, tf32\n")
    assert _gates(source) == [
        (6, "(torch.cuda.get_device_capability(\n    dev,\n)[0]\n            >= 8)", "bf16"),
        (10, "torch.cuda.get_device_capability()[0] \\\n            >= 8", "tf32")]
    out = fixed(source, family="devices")
    assert "use_bf16 = (porter_device.supports_bf16(dev,\n))\n" in out
    assert "tf32 = porter_device.supports_tf32()\n" in out


def test_intent_read_from_the_block_and_its_trailing_comments() -> None:
    """An `if` gate's feature comes from its block: the header comment, the statements and the
    comment lines after them indented at the block's level (not a comment that belongs to the
    code after the block)."""
    source = ("import torch\nfrom torch.cuda import get_device_capability as cap\n"
              "if cap()[0] >= 8:\n    x = 1\n    # bf16 path\ny = 2\n"
              "if cap()[0] >= 8:\n    x = 1\n# tf32 note for what follows\ny = 2\n"
              "if cap()[0] >= 8:  # tf32 matmuls\n    x = 1\n"
              "if cap()[0] >= 8: x = 1  # bf16\n# fp8 below\n")
    assert [(line, feature) for line, _gate, feature in _gates(source)] == [
        (3, "bf16"), (7, None), (11, "tf32"), (13, "bf16")]


def test_cuda_version_guards_follow_branches_and_and_or_chains() -> None:
    """A ROCm/HIP test or a test of torch.version.cuda before it in the same `and`/`or` chain,
    or the `if`/conditional expression branch, makes a torch.version.cuda use deliberate."""
    source = ("import torch\n"
              "a = torch.version.hip or float(torch.version.cuda) > 11\n"
              "b = x or float(torch.version.cuda) > 11\n"
              "c = float(torch.version.cuda) if ok else 0.0\n"
              "e = float(torch.version.cuda) if torch.version.hip is None else 0.0\n"
              "if torch.version.hip:\n    @skip(float(torch.version.cuda) > 11)\n    def f(): pass\n"
              "if torch.version.cuda:\n    d = 1\nelif torch.version.hip:\n    d = 2\n")
    assert [(f.code, f.line) for f in findings(source, family="devices")] == [("PRT702", 3), ("PRT702", 4)]


def test_name_checks_take_single_string_literals_only() -> None:
    source = ("import torch\nname = torch.cuda.get_device_name()\n"
              "if \"nvidia\" in name.lower(): pass\n"
              "if \"nvi\" \"dia\" in name: pass\n"
              "if b\"nvidia\" in name: pass\n")
    found = findings(source, family="devices")
    assert [(f.code, f.line, f.fix) for f in found] == [("PRT701", 3, Applicability.UNSAFE)]
