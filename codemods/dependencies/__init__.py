"""Dependency manifests: CUDA wheel indexes, ``+cuNNN`` pins, CUDA-only packages, torchao.

Runs on requirements*/constraints* files, ``pyproject.toml`` (PEP 621, dependency groups,
Poetry, uv/Poetry package sources), ``setup.cfg``, ``environment.yml`` and ``setup.py``
(parsed, never executed). Manifests are processed in the second phase of a run, so the
family knows which modules the repository's Python still imports (``ctx.facts.imports``)
and which rewrites were applied (``ctx.facts.applied``):

- a CUDA-only package (flash-attn, xformers, apex, bitsandbytes, Transformer Engine,
  DALI, pynvml) is dropped only when no Python file imports it any more; otherwise it is
  reported with the reason and the portable route;
- ``torchao`` is added only when a fix applied in this run and sub-project emits torchao
  (``ctx.facts.extra["needs"]``, recorded by the semantic gate), and only next to an existing
  ``torch`` requirement; a pin that excludes the release an applied fix needs is raised
  (PRT812, unsafe).

Every edit is an exact-offset text edit: untouched lines, comments and formatting stay
byte-identical. Requirement text is parsed with :mod:`packaging`.
"""

from __future__ import annotations

from porter.config import Option
from porter.findings import Applicability, Category, Severity
from porter.framework import Family, rule

NAME = "dependencies"
DEFAULT_ROCM_VERSION = "6.3"  # the ROCm wheel index when nothing else decides
DEFAULT_TORCHAO = "torchao>=0.11"  # the torchao requirement porter adds
SAFE, UNSAFE, NONE = Applicability.SAFE, Applicability.UNSAFE, Applicability.NONE

RULES = (
    rule("PRT800", "cuda-wheel-index", NAME,
         "A PyTorch CUDA wheel index (`download.pytorch.org/whl/cuNNN`) or another CUDA-only package index.",
         Category.REPLACE, severity=Severity.WARNING, fix=SAFE, effort_hours=0.25,
         explanation="The index decides which build of torch, torchvision and torchaudio pip installs. "
         "porter replaces the CUDA index with the ROCm index of the configured ROCm version "
         "(`[tool.porter.dependencies] rocm-version`, default 6.3): "
         "`https://download.pytorch.org/whl/rocm6.3`. The option keeps its kind: `--index-url` stays "
         "exclusive, `--extra-index-url` stays additive (with an additive index pip takes the highest "
         "version from either index, so an unpinned torch can still come from PyPI: pin it). A CUDA "
         "`torch_stable.html` find-links page becomes `--extra-index-url`. When `+cuNNN` pins are "
         "stripped from a file with no PyTorch index at all, the ROCm index line is added above the "
         "first of them. The move is SAFE only when every exact torch/torchvision/torchaudio pin of the "
         "file is published on that ROCm index (porter carries PyTorch's torch-minor to ROCm-index "
         "matrix for torch 2.0-2.10); otherwise the line is reported with the ROCm versions that carry "
         "the pin. Files in hash-checking mode keep their CUDA index while hashed `+cu` pins remain. "
         "Other CUDA-only indexes (pypi.nvidia.com, PyG/DGL CUDA wheel pages) are reported.",
         example="```\n--extra-index-url https://download.pytorch.org/whl/cu121\n# becomes\n"
         "--extra-index-url https://download.pytorch.org/whl/rocm6.3\n```"),
    rule("PRT801", "cuda-local-version", NAME,
         "A `+cuNNN` local version label pins a CUDA build of a wheel.",
         Category.REPLACE, severity=Severity.WARNING, fix=SAFE, effort_hours=0.1,
         explanation="`torch==2.1.0+cu121` can only install the CUDA 12.1 build. For torch, "
         "torchvision and torchaudio porter strips the label: under PEP 440 `==2.1.0` matches every "
         "local build of 2.1.0, so the ROCm index's `2.1.0+rocmX.Y` satisfies it. Check that the "
         "pinned version is published for the chosen ROCm version. For other packages (PyG "
         "extensions, ...) the label is reported: their ROCm builds, if any, live elsewhere.",
         example="```\ntorch==2.1.0+cu121\n# becomes\ntorch==2.1.0\n```"),
    rule("PRT802", "cuda-only-requirement", NAME,
         "A CUDA-only package (flash-attn, xformers, apex, bitsandbytes, Transformer Engine, DALI, pynvml).",
         Category.REPLACE, severity=Severity.WARNING, fix=SAFE, effort_hours=0.5,
         explanation="porter drops the requirement (SAFE) only when no Python file of the repository "
         "imports the package any more, i.e. after the rewrite families removed every use. While "
         "the code still imports it the requirement is reported with the portable route. Packages "
         "reached only dynamically (`importlib`, `trust_remote_code` model code from the Hub) are "
         "invisible to porter: review the drop when the project loads remote model code.",
         example="```\nflash-attn==2.5.8   # dropped when nothing imports flash_attn\n```"),
    rule("PRT803", "cuda-build-requirement", NAME,
         "A distribution built for CUDA only (nvidia-* runtime wheels, `-cu12` packages, onnxruntime-gpu...).",
         Category.REPLACE, severity=Severity.WARNING, fix=UNSAFE, effort_hours=0.5,
         explanation="These names select a CUDA build and have no ROCm build under the same name. "
         "NVIDIA runtime wheels (`nvidia-cublas-cu12`...) are only needed by code that loads them "
         "directly; porter offers to drop them as an UNSAFE fix when no Python file imports `nvidia`."),
    rule("PRT804", "cupy-cuda-wheel", NAME,
         "A CuPy wheel for one CUDA version (`cupy-cuda12x`).",
         Category.REPLACE, severity=Severity.WARNING, fix=SAFE, effort_hours=0.5,
         explanation="CuPy publishes ROCm wheels only for ROCm 4.3 (`cupy-rocm-4-3`) and 5.0 "
         "(`cupy-rocm-5-0`). When the configured ROCm version is one of those porter renames the "
         "requirement and keeps its specifier; otherwise it reports it: build CuPy from source with "
         "`CUPY_INSTALL_USE_HIP=1`."),
    rule("PRT805", "torchao-added", NAME,
         "A fix applied in this run imports torchao: torchao is added next to torch.",
         Category.SHIM, severity=Severity.INFO, fix=SAFE, effort_hours=0.1,
         explanation="Added only when a fix this run applied, in a file this manifest is the nearest "
         "manifest of, emits a torchao API (the semantic gate records what each accepted fix needs, from "
         "`porter/apis.py`), the file requires torch and does not already require torchao. Code that "
         "imported torchao before porter ran is the repository's own business and adds nothing. The "
         "requirement text is `[tool.porter.dependencies] torchao-requirement` (default "
         f"`{DEFAULT_TORCHAO}`, or the newer release an emitted API needs); torchao releases track torch "
         "releases, and the gate withholds torchao fixes under a torch pin older than 2.5."),
    rule("PRT806", "cuda-url-requirement", NAME,
         "A direct-URL requirement points to a wheel built for CUDA.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=0.5,
         explanation="A URL such as a flash-attn release wheel `...+cu122torch2.3...whl` or a "
         "download.pytorch.org `cu121` wheel cannot install on ROCm. Replace it with a ROCm build or a "
         "plain requirement."),
    rule("PRT807", "triton-requirement", NAME,
         "An explicit `triton` requirement can replace the Triton build that ROCm torch depends on.",
         Category.BENIGN, severity=Severity.INFO, effort_hours=0.1,
         explanation="ROCm builds of torch depend on `pytorch-triton-rocm`, which provides the `triton` "
         "module. Installing `triton` from PyPI over it can break torch.compile on ROCm. Keep the pin "
         "only when it matches the torch build."),
    rule("PRT808", "torch-from-pypi", NAME,
         "torch is installed from PyPI, which serves CUDA builds on Linux.",
         Category.BENIGN, severity=Severity.INFO, effort_hours=0.1,
         explanation="On Linux, `pip install torch` from PyPI installs a CUDA build. On an AMD machine "
         "install torch from the ROCm index (`pip install torch --index-url "
         "https://download.pytorch.org/whl/rocm6.3`) or start from the `rocm/pytorch` container; a "
         "requirements file without an index line does not say which build it wants."),
    rule("PRT809", "bitsandbytes-rocm-pin", NAME,
         "bitsandbytes stays: versions 0.50 and later support ROCm, so pin `bitsandbytes>=0.50`.",
         Category.SHIM, severity=Severity.WARNING, fix=UNSAFE, effort_hours=0.1,
         explanation="bitsandbytes 0.50 supports AMD GPUs for LLM.int8, 8-bit optimizers and 4-bit "
         "QLoRA. When the requirement has no version porter adds `>=0.50` as an UNSAFE fix: 0.50 itself "
         "needs torch >= 2.4 and Python >= 3.10, so on a repository that pins an older torch or admits an "
         "older Python the raised floor makes the environment unresolvable; check the other pins first. "
         "A pin that excludes 0.50 is reported."),
    rule("PRT810", "conda-cuda-package", NAME,
         "A conda environment installs CUDA packages (`pytorch-cuda`, `cudatoolkit`, the `nvidia` channel).",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=0.5,
         explanation="The pytorch and nvidia conda channels have no ROCm builds of torch. Install torch "
         "with pip from the ROCm index inside the environment (a `pip:` section with "
         "`--index-url https://download.pytorch.org/whl/rocm6.3`) or use the rocm/pytorch container."),
    rule("PRT811", "torch-below-target", NAME,
         "The torch requirement excludes the `target-torch` version the ported code is written for.",
         Category.SHIM, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=0.25,
         explanation="`[tool.porter] target-torch` says which torch the ported code runs on (SDPA's "
         "`enable_gqa`, `torch.nn.RMSNorm` and the lower-right causal mask need 2.5). A requirement that "
         "excludes it would install a torch the rewritten code fails on, so porter raises it to "
         "`torch>=<target>` (the `+cuNNN` label, if any, is dropped in the same edit); torchvision and "
         "torchaudio pins are raised to the releases that go with it."),
    rule("PRT812", "requirement-raised-for-fix", NAME,
         "A pin excludes the release an applied fix needs (transformers for `TorchAoConfig`...): raised.",
         Category.SHIM, severity=Severity.WARNING, fix=UNSAFE, effort_hours=0.25,
         explanation="Every API porter emits has a first release (`porter/apis.py`). A fix whose API the "
         "nearest manifest's pin excludes is withheld in safe mode; with `--unsafe-fixes` it is applied and "
         "this rule raises the pin of that sub-project's manifest to `>=<first release>` in the same series. "
         "Unsafe: the rest of the code may rely on the old release. torch is never raised this way; set "
         "`target-torch`."),
)


FAMILY = Family(
    name=NAME,
    title="Dependencies: ROCm wheel index, CUDA pins and CUDA-only packages",
    order=80,
    rules=RULES,
    tokens=(),
    python="porter.codemods.dependencies.visitor:SetupPyVisitor",
    python_files=("setup.py",),  # the Python visitor reads setup() calls in setup.py only
    python_tokens=("setup",),
    checkers={
        "requirements": "porter.codemods.dependencies.visitor:check_requirements",
        "pyproject": "porter.codemods.dependencies.visitor:check_pyproject",
        "setup-cfg": "porter.codemods.dependencies.visitor:check_setup_cfg",
        "conda": "porter.codemods.dependencies.visitor:check_conda",
    },
    description="Dependency manifests follow the code: this patch may point PyTorch wheel indexes at the ROCm "
    "index, drop `+cuNNN` labels, raise torch to the target torch, remove CUDA-only packages that no Python file "
    "imports any more, add torchao where an applied fix imports it, and (unsafe) raise a pin an applied fix "
    "needs. The sites below list which of these this patch makes, and why.",
    verified="Fixture tests (tests/fixtures/dependencies) and tests/test_dependencies.py: rewritten "
    "requirements parse with packaging, pyproject.toml still loads with tomllib, untouched lines stay "
    "byte-identical, and drops depend on the import facts of the run.",
    review="Check that the pinned torch version is published for the chosen ROCm version, and that nothing "
    "loads a dropped package dynamically.",
    options=(
        Option("rocm-version", "string", "", "The ROCm wheel index (e.g. 6.3; default: the newest one that "
               f"carries target-torch, else {DEFAULT_ROCM_VERSION})."),
        Option("torchao-requirement", "string", DEFAULT_TORCHAO, "The torchao requirement porter adds."),
    ),
)
