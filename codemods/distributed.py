"""NCCL environment tuning in code, shell scripts, Dockerfiles and launch configs.

On ROCm, torch.distributed's "nccl" backend is RCCL, AMD's fork of NCCL. RCCL reads the
same ``NCCL_*`` variables, so nothing breaks, but the values were tuned for NVIDIA
fabrics: some keep their meaning (interfaces, InfiniBand HCAs, debug output), some need
re-tuning on AMD (P2P levels, channel counts, algorithms and protocols), and some steer
NVIDIA-only features (NVLink SHARP, NVLink bridges) and do nothing on RCCL.

Every site is reported with its note; nothing is rewritten (tuning values have no exact
translation). ``backend="nccl"`` is left alone and not reported: it maps to RCCL, and
PyTorch's own ``TORCH_NCCL_*`` variables behave the same on both builds.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from porter.findings import Category, Finding, Severity
from porter.framework import Family, FileContext, PyContext, rule
from porter.pyast import AstVisitor
from porter.pyast_strings import literal_parts

NAME = "distributed"

# Same meaning on RCCL (configuration that follows the machine, or debugging).
SHARED = {
    "NCCL_DEBUG": "RCCL honours it (INFO prints the topology); RCCL_LOG_LEVEL is RCCL's own knob",
    "NCCL_DEBUG_SUBSYS": "RCCL honours it",
    "NCCL_DEBUG_FILE": "RCCL honours it",
    "NCCL_SOCKET_IFNAME": "same meaning on RCCL: it names the host's network interfaces",
    "NCCL_SOCKET_FAMILY": "same meaning on RCCL",
    "NCCL_IB_HCA": "same meaning on RCCL; check the HCA names on the AMD hosts",
    "NCCL_IB_GID_INDEX": "same meaning on RCCL (RoCE GID); it follows the fabric, not the GPU",
    "NCCL_IB_DISABLE": "same meaning on RCCL",
    "NCCL_IB_TIMEOUT": "same meaning on RCCL",
    "NCCL_IB_RETRY_CNT": "same meaning on RCCL",
    "NCCL_IB_SL": "same meaning on RCCL",
    "NCCL_IB_TC": "same meaning on RCCL",
    "NCCL_IB_PCI_RELAXED_ORDERING": "same meaning on RCCL",
    "NCCL_HOSTID": "same meaning on RCCL",
    "NCCL_CONF_FILE": "RCCL reads it too (its default files are ~/.rccl.conf and /etc/rccl.conf)",
    "NCCL_COMM_ID": "same meaning on RCCL",
    "NCCL_TOPO_DUMP_FILE": "RCCL honours it",
    "NCCL_IGNORE_CPU_AFFINITY": "same meaning on RCCL",
    "NCCL_SHM_DISABLE": "same meaning on RCCL",
    "NCCL_P2P_DISABLE": "same meaning on RCCL (P2P is xGMI or PCIe between AMD GPUs)",
    "NCCL_NET": "same meaning on RCCL",
    "NCCL_LAUNCH_MODE": "RCCL honours it",
    "NCCL_ASYNC_ERROR_HANDLING": "read by PyTorch itself, the same on ROCm builds (now TORCH_NCCL_ASYNC_ERROR_HANDLING)",
    "NCCL_BLOCKING_WAIT": "read by PyTorch itself, the same on ROCm builds (now TORCH_NCCL_BLOCKING_WAIT)",
}

# Tuning values: the name works on RCCL, the value was tuned for an NVIDIA system.
RETUNE = {
    "NCCL_P2P_LEVEL": "P2P distance levels follow the PCIe/NVLink topology; AMD nodes use xGMI, re-tune or unset",
    "NCCL_NET_GDR_LEVEL": "GPUDirect RDMA distance; on AMD it depends on ROCm peer memory and the NIC placement",
    "NCCL_NET_GDR_READ": "GPUDirect RDMA read; re-tune on AMD",
    "NCCL_ALGO": "forcing an algorithm (Ring/Tree/NVLS/CollNet) bypasses RCCL's tuner; NVLS and CollNet do not "
    "exist on RCCL",
    "NCCL_PROTO": "forcing a protocol bypasses RCCL's tuner; LL128 support depends on the AMD GPU",
    "NCCL_MIN_NCHANNELS": "channel counts were tuned for NVIDIA SM counts; re-tune for the AMD GPU's CU count",
    "NCCL_MAX_NCHANNELS": "channel counts were tuned for NVIDIA SM counts; re-tune for the AMD GPU's CU count",
    "NCCL_MIN_CTAS": "CTA counts were tuned for NVIDIA GPUs; re-tune",
    "NCCL_MAX_CTAS": "CTA counts were tuned for NVIDIA GPUs; re-tune",
    "NCCL_NTHREADS": "thread counts per block were tuned for NVIDIA warps of 32; AMD wavefronts are 64",
    "NCCL_BUFFSIZE": "buffer sizes were tuned for the NVIDIA fabric; re-tune",
    "NCCL_LL_THRESHOLD": "protocol thresholds were tuned for NVIDIA; re-tune",
    "NCCL_LL128_BUFFSIZE": "LL128 support and sizes depend on the AMD GPU",
    "NCCL_LL128_NTHREADS": "LL128 support and sizes depend on the AMD GPU",
    "NCCL_TREE_THRESHOLD": "protocol thresholds were tuned for NVIDIA; re-tune",
    "NCCL_SOCKET_NTHREADS": "socket threading was tuned for the old hosts; re-tune",
    "NCCL_NSOCKS_PERTHREAD": "socket threading was tuned for the old hosts; re-tune",
    "NCCL_CROSS_NIC": "depends on how NICs attach to the AMD GPUs; re-tune",
    "NCCL_IB_QPS_PER_CONNECTION": "queue pairs were tuned for the old fabric; re-tune",
    "NCCL_IB_SPLIT_DATA_ON_QPS": "queue pairs were tuned for the old fabric; re-tune",
    "NCCL_IB_ADAPTIVE_ROUTING": "fabric tuning; re-check on the AMD cluster",
    "NCCL_P2P_NET_CHUNKSIZE": "chunk sizes were tuned for NVIDIA; re-tune",
    "NCCL_P2P_PCI_CHUNKSIZE": "chunk sizes were tuned for NVIDIA; re-tune",
    "NCCL_TOPO_FILE": "a topology file describes the NVIDIA machine; dump a new one on the AMD host",
    "NCCL_GRAPH_FILE": "a graph file describes the NVIDIA machine; regenerate it on the AMD host",
    "NCCL_CUMEM_ENABLE": "cuMem VMM; RCCL's default and requirements differ, re-check",
    "NCCL_NET_PLUGIN": "network plugins are built per library: use the RCCL build (e.g. aws-ofi-rccl), not the "
    "NCCL one",
    "NCCL_TUNER_PLUGIN": "tuner plugins are built against NCCL and tuned for NVIDIA; RCCL needs its own",
    "NCCL_TUNER_CONFIG_PATH": "tuner configurations were tuned for NVIDIA; RCCL needs its own",
}

# NVIDIA-only features: no effect on RCCL.
NVIDIA_ONLY = {
    "NCCL_NVLS_ENABLE": "NVLink SHARP exists only on NVIDIA NVSwitch systems",
    "NCCL_NVB_DISABLE": "NVLink bridges exist only on NVIDIA GPUs",
    "NCCL_NVB_PRECONNECT": "NVLink bridges exist only on NVIDIA GPUs",
    "NCCL_P2P_NVL_CHUNKSIZE": "NVLink chunk size; AMD GPUs use xGMI",
    "NCCL_COLLNET_ENABLE": "CollNet (SHARP in-network reduction) needs NVIDIA's SHARP plugin",
    "NCCL_MNNVL_ENABLE": "multi-node NVLink exists only on NVIDIA GB200-class systems",
    "NCCL_GDRCOPY_ENABLE": "GDRCopy is an NVIDIA driver feature",
    "NCCL_NVLSTREE_MAX_CHUNKSIZE": "NVLink SHARP exists only on NVIDIA NVSwitch systems",
}

RULES = (
    rule("PRT760", "nccl-env-shared", NAME,
         "An NCCL_* variable RCCL honours with the same meaning.",
         Category.BENIGN, severity=Severity.INFO, effort_hours=0.0,
         explanation="RCCL, the \"nccl\" backend of ROCm PyTorch, reads the same variable with the same "
         "meaning (network interfaces, InfiniBand HCAs, debug output). Nothing to change; check that "
         "interface and HCA names match the AMD hosts."),
    rule("PRT761", "nccl-env-retune", NAME,
         "An NCCL_* tuning value that was tuned for an NVIDIA system and needs re-tuning on RCCL.",
         Category.SHIM, severity=Severity.WARNING, effort_hours=1.0,
         explanation="RCCL reads the variable, but its value encodes the NVIDIA machine (P2P levels, "
         "channel and thread counts, forced algorithms or protocols, topology files). Unset it first, "
         "measure with rccl-tests (`all_reduce_perf`), and only then re-tune."),
    rule("PRT762", "nccl-env-nvidia-only", NAME,
         "An NCCL_* variable for an NVIDIA-only feature (NVLink SHARP, NVLink bridges, SHARP, GDRCopy).",
         Category.SHIM, severity=Severity.WARNING, effort_hours=0.25,
         explanation="The feature does not exist on AMD systems; the variable has no effect on RCCL. Drop "
         "it from the ROCm configuration, or keep it only for the NVIDIA fleet."),
    rule("PRT763", "nccl-env-unknown", NAME,
         "An NCCL_* variable porter has no RCCL note for.",
         Category.SHIM, severity=Severity.INFO, effort_hours=0.25,
         explanation="Check the RCCL environment-variable reference: RCCL tracks NCCL but not every "
         "variable exists in every release."),
)

# Cloud network plugins that exist only for NVIDIA GPUs
NVIDIA_NET_PLUGINS = ("NCCL_FASTRAK_", "NCCL_GPUDIRECTTCPX_", "NCCL_SHIMNET_", "NCCL_TCPX_")

_VAR = re.compile(r"^NCCL_[A-Z0-9_]+$")


def classify(var: str) -> tuple[str, str]:
    """(code, note) for an NCCL_* variable."""
    if var in SHARED:
        return "PRT760", SHARED[var]
    if var in RETUNE:
        return "PRT761", RETUNE[var]
    if var in NVIDIA_ONLY:
        return "PRT762", NVIDIA_ONLY[var]
    for prefix, table in (("NCCL_NVLS_", NVIDIA_ONLY), ("NCCL_COLLNET_", NVIDIA_ONLY)):
        if var.startswith(prefix):
            return "PRT762", next(iter(v for k, v in table.items() if k.startswith(prefix)))
    if var.startswith(NVIDIA_NET_PLUGINS) or var == "NCCL_USE_SNAP":
        return "PRT762", ("setting of an NVIDIA-only network plugin (GPUDirect-TCPX/TCPXO 'FasTrak' on Google "
                          "Cloud A3 VMs); AMD clusters use RCCL's own network plugins")
    if var.startswith("NCCL_IB_"):
        return "PRT761", "InfiniBand tuning; re-check on the AMD cluster's fabric"
    return "PRT763", "no RCCL note for this variable; check the RCCL environment-variable reference"


def _finding(ctx: FileContext, var: str, start: int, where: str) -> Finding:
    code, note = classify(var)
    return ctx.finding(code, f"{var} {where}: {note}", start, start + len(var), data={"variable": var})


# -- Python ----------------------------------------------------------------------------------------


class DistributedVisitor(AstVisitor):
    """A string that is exactly an NCCL_* name (``os.environ["NCCL_..."]``, ``getenv``, env dicts).

    Every literal counts on its own, also inside an implicit concatenation; f-string text does
    not, the literals in its replacement fields do."""

    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self._text_parts: set[int] = set()  # ids of f-string text (Constant values of a JoinedStr)
        self._specs: set[int] = set()  # ids of format specs (JoinedStr that are no literal)

    def visit_FormattedValue(self, node: ast.FormattedValue) -> None:
        if node.format_spec is not None:
            self._specs.add(id(node.format_spec))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        hit = False
        for value in node.values:
            if isinstance(value, ast.Constant):
                self._text_parts.add(id(value))
                hit = hit or "NCCL_" in value.value
        if hit and id(node) not in self._specs:
            self._scan(node)  # plain literals concatenated with the f-string

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if type(value) is str and "NCCL_" in value and id(node) not in self._text_parts:
            self._scan(node)

    def _scan(self, node: ast.Constant | ast.JoinedStr) -> None:
        for part in literal_parts(self.ctx, node):
            if not isinstance(part.value, str):
                continue
            var = part.value.split("=", 1)[0]
            if _VAR.match(var):
                self.findings.append(_finding(self.ctx, var, part.body_start, "in the environment"))

    def visit_keyword(self, node: ast.keyword) -> None:
        # os.environ.update(NCCL_DEBUG="INFO"), dict(NCCL_ALGO="Tree")
        if node.arg is not None and _VAR.match(node.arg):
            start, _ = self.span(node)
            self.findings.append(_finding(self.ctx, node.arg, start, "in the environment"))


# -- shell, Dockerfile, YAML ---------------------------------------------------------------------

_ASSIGN = re.compile(r"(?<![A-Za-z0-9_$])(NCCL_[A-Z0-9_]+)(?==)")
_DOCKER_ENV = re.compile(r"^\s*ENV\s+(NCCL_[A-Z0-9_]+)\s+\S")
_YAML_KEY = re.compile(r"(?<![A-Za-z0-9_$])[\"']?(NCCL_[A-Z0-9_]+)[\"']?\s*:(?=\s|$)")
_YAML_NAME = re.compile(r"\bname\s*:\s*[\"']?(NCCL_[A-Z0-9_]+)[\"']?\s*(?:#.*)?$")


def _code_part(line: str) -> str:
    """The line up to a comment (``#`` at the start or after whitespace)."""
    m = re.search(r"(^|\s)#", line)
    return line if m is None else line[: m.start()]


def _scan(ctx: FileContext, patterns: tuple[re.Pattern[str], ...]) -> Iterator[Finding]:
    text = ctx.text
    if "NCCL_" not in text:
        return
    pos = 0
    for raw in text.splitlines(keepends=True):
        line = _code_part(raw.rstrip("\r\n"))
        seen: set[int] = set()
        for pat in patterns:
            for m in pat.finditer(line):
                if m.start(1) in seen:
                    continue
                seen.add(m.start(1))
                yield _finding(ctx, m.group(1), pos + m.start(1), "is set")
        pos += len(raw)


def check_shell(ctx: FileContext) -> Iterator[Finding]:
    yield from _scan(ctx, (_ASSIGN,))


def check_dockerfile(ctx: FileContext) -> Iterator[Finding]:
    yield from _scan(ctx, (_ASSIGN, _DOCKER_ENV))


def check_yaml(ctx: FileContext) -> Iterator[Finding]:
    yield from _scan(ctx, (_ASSIGN, _YAML_KEY, _YAML_NAME))


FAMILY = Family(
    name=NAME,
    title="Distributed: NCCL environment tuning on RCCL",
    order=70,
    rules=RULES,
    tokens=("NCCL_",),
    python_ast=DistributedVisitor,
    checkers={"shell": check_shell, "dockerfile": check_dockerfile, "yaml": check_yaml,
              "conda": check_yaml},
    description="Reports NCCL_* settings with what they mean on RCCL; changes nothing.",
    verified="Fixture tests (tests/fixtures/distributed) cover Python, shell, Dockerfile and YAML sites, and "
    "check that backend=\"nccl\", TORCH_NCCL_* variables, comments and prose are not reported.",
    review="Re-tune the PRT761 values with rccl-tests on the AMD cluster before the first training run.",
)
