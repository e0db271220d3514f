"""Device code inventory: ``.cuda()``, device strings, ``torch.cuda.*`` classified (PRT040-PRT069).

The ROCm build of PyTorch *is* ``torch.cuda``: ``device="cuda"``, ``.cuda()`` and most of
``torch.cuda.*`` run unchanged on AMD GPUs. This family lists every such site so the audit is
complete, marks the portable ones as benign (severity info), and flags the few that need a
look on ROCm with what to do: CUDA graphs, ``CUDA_VISIBLE_DEVICES`` and friends,
``get_arch_list``, ``CUDA_HOME``, NVIDIA-only corners of ``torch.cuda``. The deprecated
``torch.cuda.amp`` entry points get an exact rewrite to ``torch.amp``.

Vendor and capability checks (``get_device_capability``, ``get_device_name``,
``torch.version.cuda``), TF32/cuDNN flags (family ``devices``), NVML/nvtx (family
``telemetry``) and NCCL variables (family ``distributed``) are left to their owners.
"""

from __future__ import annotations

import ast
import io
import re
import shlex
import tokenize
from collections.abc import Iterator
from typing import Any

from porter.findings import Applicability, Category, Finding, Severity
from porter.framework import Family, FileContext, PyContext, rule
from porter.pyast import AstVisitor

NAME = "device_audit"

# -- classification tables ---------------------------------------------------------------------

# torch.cuda.<first attribute> that behave the same on ROCm builds.
PORTABLE = frozenset(
    {
        "is_available", "device_count", "current_device", "set_device", "device", "device_of",
        "synchronize", "empty_cache", "ipc_collect", "init", "is_initialized",
        "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
        "memory_cached", "max_memory_cached", "memory_stats", "memory_stats_as_nested_dict",
        "memory_summary", "memory_snapshot", "mem_get_info", "reset_peak_memory_stats",
        "reset_max_memory_allocated", "reset_max_memory_cached", "reset_accumulated_memory_stats",
        "host_memory_stats", "host_memory_stats_as_nested_dict", "reset_peak_host_memory_stats",
        "reset_accumulated_host_memory_stats", "set_per_process_memory_fraction",
        "get_per_process_memory_fraction", "caching_allocator_alloc", "caching_allocator_delete",
        "caching_allocator_enable", "caching_allocator_disabled", "get_allocator_backend",
        "list_gpu_processes", "memory", "MemPool", "use_mem_pool",
        "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
        "get_rng_state_all", "set_rng_state", "set_rng_state_all", "random", "default_generators",
        "Stream", "Event", "ExternalStream", "StreamContext", "stream", "current_stream",
        "default_stream", "set_stream", "streams", "get_stream_from_external",
        "set_sync_debug_mode", "get_sync_debug_mode", "can_device_access_peer",
        "is_bf16_supported", "amp", "comm", "nccl", "sparse", "tunable", "profiler",
        "OutOfMemoryError", "CudaError", "AcceleratorError", "DeferredCudaCallError",
        "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor",
        "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor", "has_half", "has_magma",
    }
)
# Owned by other families (devices: vendor/capability checks; telemetry: nvtx).
OWNED_ELSEWHERE = frozenset(
    {"get_device_capability", "get_device_name", "get_device_properties", "is_tf32_supported", "nvtx"}
)
GRAPHS = frozenset({"graph", "CUDAGraph", "make_graphed_callables", "graph_pool_handle", "graphs",
                    "is_current_stream_capturing"})
ARCH = frozenset({"get_arch_list", "get_gencode_flags"})
TELEMETRY = frozenset({"power_draw", "temperature", "clock_rate", "utilization", "memory_usage",
                       "device_memory_used"})
VERIFY = frozenset({"jiterator", "cudart", "current_blas_handle", "current_solver_handle",
                    "CUDAPluggableAllocator", "change_current_allocator", "check_error", "cudaStatus"})
NVIDIA_ONLY = frozenset({"gds", "green_contexts", "GreenContext"})

AMP_DEPRECATED = {
    "torch.cuda.amp.autocast": ("autocast", ("enabled", "dtype", "cache_enabled")),
    "torch.cuda.amp.GradScaler": ("GradScaler", ("init_scale", "growth_factor", "backoff_factor",
                                                 "growth_interval", "enabled")),
    "torch.cuda.amp.autocast_mode.autocast": ("autocast", ("enabled", "dtype", "cache_enabled")),
    "torch.cuda.amp.grad_scaler.GradScaler": ("GradScaler", ("init_scale", "growth_factor",
                                                             "backoff_factor", "growth_interval",
                                                             "enabled")),
    "torch.cuda.amp.custom_fwd": ("custom_fwd", ("fwd",)),
    "torch.cuda.amp.custom_bwd": ("custom_bwd", ("bwd",)),
    "torch.cuda.amp.autocast_mode.custom_fwd": ("custom_fwd", ("fwd",)),
    "torch.cuda.amp.autocast_mode.custom_bwd": ("custom_bwd", ("bwd",)),
}

# Environment variables (exact names) -> rule code.
ENV_VARS = {
    "CUDA_VISIBLE_DEVICES": "PRT045",
    "CUDA_HOME": "PRT047",
    "CUDA_PATH": "PRT047",
    "CUDA_ROOT": "PRT047",
    "TORCH_CUDA_ARCH_LIST": "PRT048",
    "CUDA_LAUNCH_BLOCKING": "PRT053",
    "CUDA_DEVICE_MAX_CONNECTIONS": "PRT053",
    "CUDA_DEVICE_ORDER": "PRT053",
    "CUDA_MODULE_LOADING": "PRT053",
    "PYTORCH_CUDA_ALLOC_CONF": "PRT053",
}
_ENV_ADVICE = {
    "CUDA_VISIBLE_DEVICES": (
        "ROCm honours CUDA_VISIBLE_DEVICES too, but AMD schedulers and containers often restrict "
        "GPUs with ROCR_VISIBLE_DEVICES (applied first, at the runtime level) or HIP_VISIBLE_DEVICES; "
        "when reading it, also consult HIP_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES, and when setting it "
        "set only one of them (indices of the second are relative to the first)"),
    "CUDA_HOME": "CUDA_HOME/CUDA_PATH are unset on ROCm machines; use ROCM_HOME (or ROCM_PATH) "
    "when torch.version.hip is set",
    "TORCH_CUDA_ARCH_LIST": "ROCm extension builds read PYTORCH_ROCM_ARCH (e.g. gfx90a;gfx942) "
    "instead; set both, or choose by torch.version.hip",
    "CUDA_LAUNCH_BLOCKING": "HIP's equivalent is HIP_LAUNCH_BLOCKING=1 (or AMD_SERIALIZE_KERNEL=3); "
    "set it too when debugging on ROCm",
    "CUDA_DEVICE_MAX_CONNECTIONS": "no effect on ROCm (the HIP analogue is GPU_MAX_HW_QUEUES); code "
    "that relies on it for compute/communication ordering (Megatron-style overlap) needs a check",
    "CUDA_DEVICE_ORDER": "no effect on ROCm, where devices are enumerated in PCI bus order",
    "CUDA_MODULE_LOADING": "no effect on ROCm",
    "PYTORCH_CUDA_ALLOC_CONF": "ROCm builds also read PYTORCH_HIP_ALLOC_CONF (and the generic "
    "PYTORCH_ALLOC_CONF in recent releases); check that each option is supported on ROCm",
}
_ENV_ADVICE["CUDA_PATH"] = _ENV_ADVICE["CUDA_ROOT"] = _ENV_ADVICE["CUDA_HOME"]

DEVICE_KEYWORDS = frozenset({"device", "map_location", "device_type", "output_device"})
DEVICE_ARG0 = frozenset({"torch.device", "torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler",
                         "torch.Generator", "torch.get_autocast_dtype", "torch.is_autocast_enabled",
                         "torch.cuda.device"})
_CUDA_STR = re.compile(r"^cuda(:\d+)?$")
_CUDA_PREFIX = re.compile(r"^cuda(:|$)")

# -- rules -------------------------------------------------------------------------------------

_BENIGN_DOC = (
    "The ROCm build of PyTorch keeps the `cuda` device type and the `torch.cuda` namespace (it is "
    "the HIP backend; `torch.version.hip` is set), so this runs unchanged on AMD GPUs. It is listed "
    "so the inventory is complete; no change is needed."
)

RULES = (
    rule("PRT040", "cuda-method-call", NAME, "`.cuda()` moves a tensor or module to the GPU.",
         Category.BENIGN, severity=Severity.INFO, explanation=_BENIGN_DOC,
         example="```python\nmodel = model.cuda()  # runs unchanged on ROCm\n```"),
    rule("PRT041", "cuda-device-string", NAME,
         "A `\"cuda\"`/`\"cuda:N\"` device string (`device=`, `torch.device`, `.to()`).",
         Category.BENIGN, severity=Severity.INFO, explanation=_BENIGN_DOC + " Prefer one `get_device()` "
         "helper (see the devices family) over scattered literals, but that is hygiene, not porting work.",
         example='```python\nx = torch.zeros(4, device="cuda")  # runs unchanged on ROCm\n```'),
    rule("PRT042", "torch-cuda-portable", NAME,
         "A portable `torch.cuda` API (availability, devices, memory stats, streams, RNG, amp...).",
         Category.BENIGN, severity=Severity.INFO, explanation=_BENIGN_DOC),
    rule("PRT043", "torch-cuda-verify", NAME,
         "A `torch.cuda` API that exists on ROCm but whose behaviour should be verified there.",
         Category.BENIGN, severity=Severity.WARNING, effort_hours=0.5,
         explanation="`jiterator` compiles C++ at run time (NVRTC on CUDA, hipRTC on ROCm); "
         "`cudart()` exposes the raw runtime; `current_blas_handle()` returns a cuBLAS or rocBLAS "
         "handle that only native code can use; a pluggable allocator is a shared library built "
         "against the CUDA runtime and must be rebuilt with HIP. Names porter does not know are "
         "reported here too. Check each on a ROCm machine."),
    rule("PRT044", "cuda-graph", NAME,
         "CUDA graph capture (`torch.cuda.graph`, `CUDAGraph`, `make_graphed_callables`).",
         Category.BENIGN, severity=Severity.WARNING, effort_hours=1.0,
         explanation="CUDA graphs are implemented on ROCm through HIP graphs, so the code runs. "
         "Capture is stricter about allocations, host synchronisation and some collectives, and "
         "the speed-up differs; run the captured region once on ROCm and compare outputs and "
         "step time with graphs on and off."),
    rule("PRT045", "cuda-visible-devices", NAME,
         "`CUDA_VISIBLE_DEVICES` read or set from Python.", Category.SHIM, severity=Severity.WARNING,
         effort_hours=0.5,
         explanation="ROCm honours `CUDA_VISIBLE_DEVICES`, but AMD clusters restrict GPUs with "
         "`ROCR_VISIBLE_DEVICES` (applied first, at the ROCr runtime level) and `HIP_VISIBLE_DEVICES`. "
         "Code that *reads* the variable to count or name GPUs must also look at those two; code that "
         "*sets* it should set one variable only, because each later mask indexes into the GPUs the "
         "earlier one left visible.",
         example='```python\nvisible = (os.environ.get("CUDA_VISIBLE_DEVICES")\n'
         '           or os.environ.get("HIP_VISIBLE_DEVICES")\n'
         '           or os.environ.get("ROCR_VISIBLE_DEVICES"))\n```'),
    rule("PRT046", "cuda-arch-list", NAME,
         "`torch.cuda.get_arch_list()`/`get_gencode_flags()` return `sm_XX` names on CUDA only.",
         Category.SHIM, severity=Severity.WARNING, effort_hours=0.5,
         explanation="On ROCm `get_arch_list()` returns `gfx90a`, `gfx942`... and `get_gencode_flags()` "
         "has no meaning. Code that parses `sm_` numbers to pick kernels must branch on "
         "`torch.version.hip` or test a capability instead."),
    rule("PRT047", "cuda-home", NAME,
         "`CUDA_HOME` (`torch.utils.cpp_extension.CUDA_HOME`, `CUDA_HOME`/`CUDA_PATH` variables).",
         Category.SHIM, severity=Severity.WARNING, effort_hours=0.5,
         explanation="`torch.utils.cpp_extension.CUDA_HOME` is `None` on a ROCm machine and the "
         "`CUDA_HOME`/`CUDA_PATH` variables are unset, so code that builds paths from them, or refuses "
         "to build without them, fails. Use `torch.utils.cpp_extension.ROCM_HOME` when "
         "`torch.version.hip` is set."),
    rule("PRT048", "torch-cuda-arch-list-env", NAME,
         "`TORCH_CUDA_ARCH_LIST` set from Python; ROCm builds read `PYTORCH_ROCM_ARCH`.",
         Category.SHIM, severity=Severity.WARNING, effort_hours=0.25,
         explanation="Extension builds on ROCm take their GPU targets from `PYTORCH_ROCM_ARCH` "
         "(`gfx90a;gfx942`). Set it next to `TORCH_CUDA_ARCH_LIST`."),
    rule("PRT049", "cuda-amp-deprecated", NAME,
         "Deprecated `torch.cuda.amp` entry point; `torch.amp` with `\"cuda\"` is the same.",
         Category.BENIGN, severity=Severity.INFO, fix=Applicability.SAFE, effort_hours=0.1,
         explanation="`torch.cuda.amp.autocast(args...)`, `GradScaler(args...)`, `custom_fwd` and "
         "`custom_bwd` are thin deprecated wrappers that forward to `torch.amp` with device `\"cuda\"` "
         "(torch 2.13 `torch/cuda/amp/*.py`). porter binds positional arguments by the deprecated "
         "signature and writes keywords. Both spellings work on ROCm; the rewrite removes the "
         "FutureWarning. The rewrite is marked unsafe when the file changes process-wide autocast "
         "defaults (`torch.set_autocast_dtype`), because `torch.cuda.amp.autocast` pins fp16 where "
         "`torch.amp.autocast` reads that default.",
         example="```python\nwith torch.cuda.amp.autocast(True, torch.bfloat16):\n"
         "# becomes\nwith torch.amp.autocast(\"cuda\", enabled=True, dtype=torch.bfloat16):\n```"),
    rule("PRT051", "torch-cuda-telemetry", NAME,
         "`torch.cuda` telemetry (power, temperature, clocks, utilisation) has different units on ROCm.",
         Category.BENIGN, severity=Severity.INFO, effort_hours=0.25,
         explanation="These helpers read amdsmi on ROCm: `power_draw` is in W there (mW on NVIDIA), "
         "`temperature` is the junction sensor, `utilization`/`memory_usage` are activity counters. "
         "Check dashboards and thresholds."),
    rule("PRT052", "torch-cuda-nvidia-only", NAME,
         "A `torch.cuda` API with no ROCm implementation (GPUDirect Storage, green contexts).",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=4.0,
         explanation="`torch.cuda.gds` wraps NVIDIA cuFile and `green_contexts` wraps CUDA green "
         "contexts; neither exists on ROCm. Fall back to ordinary file I/O (`torch.load` with "
         "`mmap=True`) or ordinary streams."),
    rule("PRT060", "training-code", NAME,
         "Training code: an optimizer, DDP/FSDP wrapper, process-group setup or trainer.",
         Category.BENIGN, severity=Severity.INFO,
         explanation="Not a porting problem: torch optimizers, DDP, FSDP and `init_process_group(\"nccl\")` "
         "run on ROCm (RCCL). The audit uses these sites as evidence that the repository trains or "
         "fine-tunes models, which places it in the fine-tune goal (1-3 weeks: collectives, "
         "checkpoint portability, re-tuning)."),
    rule("PRT053", "cuda-env-tuning", NAME,
         "A CUDA runtime/debug environment variable set or read from Python "
         "(`CUDA_LAUNCH_BLOCKING`, `CUDA_DEVICE_MAX_CONNECTIONS`, `PYTORCH_CUDA_ALLOC_CONF`...).",
         Category.SHIM, severity=Severity.INFO, effort_hours=0.25,
         explanation="Each has a HIP/ROCm counterpart or none; the message says which."),
)

# -- helpers -----------------------------------------------------------------------------------


def _str_value(node: ast.AST) -> str | None:
    """The value of a string literal (implicit concatenation of plain strings included)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _string_tokens(code: str) -> int:
    """How many string literals ``code`` (one string expression's source) is made of.

    An f-string counts as one (its replacement fields may hold strings of their own)."""
    count = 0
    depth = 0
    fstring_start = getattr(tokenize, "FSTRING_START", None)
    fstring_end = getattr(tokenize, "FSTRING_END", None)
    try:
        for tok in tokenize.generate_tokens(io.StringIO("(" + code + ")").readline):
            if fstring_start is not None and tok.type == fstring_start:
                count += depth == 0
                depth += 1
            elif fstring_end is not None and tok.type == fstring_end:
                depth -= 1
            elif tok.type == tokenize.STRING and depth == 0:
                count += 1
    except (tokenize.TokenError, SyntaxError):
        return 0
    return count


def _fstring_head(code: str) -> str | None:
    """The source text of a single f-string literal before its first replacement field."""
    i = 0
    while i < len(code) and code[i] not in "'\"":
        i += 1
    quote = code[i : i + 3] if code[i : i + 3] in ('"""', "'''") else code[i : i + 1]
    if not quote or not code.endswith(quote) or len(code) < i + 2 * len(quote):
        return None
    body = code[i + len(quote) : len(code) - len(quote)]
    j = 0
    while j < len(body):
        if body[j] == "{":
            if body[j + 1 : j + 2] != "{":
                break
            j += 1
        j += 1
    return body[:j]


class _Literals:
    """Finds the string literals of a device expression that name a CUDA device."""

    def __init__(self, visitor: DeviceAuditVisitor) -> None:
        self.v = visitor

    def single(self, node: ast.AST) -> bool:
        """Whether a string node is one literal (not an implicit concatenation)."""
        return _string_tokens(self.v.code(node)) == 1

    def find(self, expr: ast.AST) -> list[ast.AST]:
        if isinstance(expr, ast.Constant):
            value = _str_value(expr)
            return [expr] if value is not None and _CUDA_STR.match(value) else []
        if isinstance(expr, ast.JoinedStr):
            first = expr.values[0] if expr.values else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)
                    and first.value.startswith("cuda")):
                return []
            if not self.single(expr):  # `"cuda:" f"{i}"`: a concatenation, not one f-string
                return []
            head = _fstring_head(self.v.code(expr))
            return [expr] if head is not None and _CUDA_PREFIX.match(head) else []
        if isinstance(expr, ast.IfExp):
            return self.find(expr.body) + self.find(expr.orelse)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left = expr.left
            value = _str_value(left)
            if value is not None and _CUDA_PREFIX.match(value) and self.single(left):
                return [expr]
            return self.find(left) if isinstance(left, ast.BinOp) else []
        if isinstance(expr, ast.BoolOp):
            return [lit for value in expr.values for lit in self.find(value)]
        return []


TRAINING_CALLS = frozenset({
    "torch.nn.parallel.DistributedDataParallel", "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel",
    "torch.distributed.fsdp.FullyShardedDataParallel", "torch.distributed.fsdp.fully_shard",
    "torch.distributed._composable.fsdp.fully_shard", "torch.distributed.init_process_group",
    "transformers.Trainer", "transformers.Seq2SeqTrainer", "transformers.TrainingArguments",
    "trl.SFTTrainer", "trl.DPOTrainer", "trl.GRPOTrainer", "deepspeed.initialize",
    "accelerate.Accelerator", "lightning.Trainer", "pytorch_lightning.Trainer",
})
_TRAINING_PREFIXES = ("torch.optim.",)
_NOT_OPTIMIZERS = ("torch.optim.lr_scheduler", "torch.optim.swa_utils", "torch.optim.Optimizer")


def is_training_call(qual: str | None) -> bool:
    if not qual:
        return False
    if qual in TRAINING_CALLS:
        return True
    if qual.startswith(_TRAINING_PREFIXES) and not qual.startswith(_NOT_OPTIMIZERS):
        return qual.rsplit(".", 1)[-1][:1].isupper()
    return False


def _target_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


_TORCH_CUDA = "torch.cuda"
_CUDA_HOME = "torch.utils.cpp_extension.CUDA_HOME"
_ENV_FUNCS = frozenset({"os.getenv", "os.putenv", "os.environ.get", "os.environ.pop", "os.environ.setdefault",
                        "os.unsetenv"})
_ENV_UPDATES = frozenset({"os.environ.update", "dict"})
_IDENT = re.compile(r"[^\W\d]\w*")
# last names of the calls visit_Call looks up (besides capitalised ones: torch.optim optimizers)
_CALL_NAMES = frozenset(q.rsplit(".", 1)[-1] for q in (*TRAINING_CALLS, *AMP_DEPRECATED, *DEVICE_ARG0,
                                                         *_ENV_FUNCS, *_ENV_UPDATES)) | {"cuda", "update"}


def _is_torch_cuda(qual: str) -> bool:
    return qual == _TORCH_CUDA or qual.startswith("torch.cuda.")


def _arg_texts(code: str, func_end: int) -> list[tuple[int, int]] | None:
    """(start, end) in ``code`` (a call's source) of each argument's value as LibCST delimits it:
    the value's own parentheses included, the keyword's ``name=`` and the surrounding whitespace
    and comments excluded. None when ``code`` does not read as a call."""
    starts = [0]
    src = io.StringIO(code)

    def readline() -> str:
        line = src.readline()
        starts.append(starts[-1] + len(line))
        return line

    depth = 0
    opened = False
    spans: list[tuple[int, int]] = []
    seg: list[Any] = []  # [start, end, tokens so far, first token is a NAME]
    try:
        for tok in tokenize.generate_tokens(readline):
            if tok.type in _NOISE:
                continue
            start = starts[tok.start[0] - 1] + tok.start[1]
            end = starts[tok.end[0] - 1] + tok.end[1]
            op = tok.string if tok.type == tokenize.OP else ""
            if not opened:
                if op == "(" and depth == 0 and start >= func_end:
                    opened = True
                    depth = 1
                elif op in _OPEN:
                    depth += 1
                elif op in _CLOSE:
                    depth -= 1
                continue
            if depth == 1 and op in _CLOSE:
                if seg:
                    spans.append((seg[0], seg[1]))
                return spans
            if depth == 1 and op == ",":
                if seg:
                    spans.append((seg[0], seg[1]))
                seg = []
                continue
            if depth == 1 and op == "=" and seg and seg[2] == 1 and seg[3]:
                seg = []  # `name=`: the value starts after it
                continue
            if op in _OPEN:
                depth += 1
            elif op in _CLOSE:
                depth -= 1
            if seg:
                seg[1] = end
                seg[2] += 1
            else:
                seg = [start, end, 1, tok.type == tokenize.NAME]
    except (tokenize.TokenError, SyntaxError):
        return None
    return None


_NOISE = frozenset({tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                    tokenize.ENDMARKER})
_OPEN = frozenset({"(", "[", "{"})
_CLOSE = frozenset({")", "]", "}"})


class DeviceAuditVisitor(AstVisitor):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self._skip: set[int] = set()
        self._amp_handled: set[int] = set()
        self._unsafe: bool | None = None
        self._literals = _Literals(self)
        imports = ctx.ast_imports
        self._imports = imports
        names = set(imports.bindings) | set(imports.rebinds)
        self._bound = names
        # local names that resolve to torch.cuda[.x] or CUDA_HOME, and the roots of attribute chains
        # that may: {name: the first attributes after it that can lead there (None: any)}
        self._direct: dict[str, str] = {}
        self._roots: dict[str, frozenset[str] | None] = {}
        for name in names:
            qual = imports.resolve_name(name)
            if qual is None:
                continue
            if _is_torch_cuda(qual):
                self._direct[name] = qual
                self._roots[name] = None
                continue
            if qual == _CUDA_HOME:
                self._direct[name] = qual
            firsts = frozenset(t[len(qual) + 1 :].split(".")[0] for t in (_TORCH_CUDA, _CUDA_HOME)
                               if t.startswith(qual + "."))
            if firsts:
                self._roots[name] = firsts
        self.name_ids = frozenset(self._direct)  # visit_Name does nothing for any other name

    def span(self, node: Any) -> tuple[int, int]:
        if isinstance(node, _Span):
            return node.start, node.end
        return self.ctx.ast_span(node)

    @property
    def _unsafe_amp(self) -> bool:
        if self._unsafe is None:
            text = self.ctx.text
            self._unsafe = "set_autocast_dtype" in text or "set_autocast_cache_enabled" in text
        return self._unsafe

    def _qual(self, node: ast.AST) -> str | None:
        """``qualname`` for a Name/Attribute chain, skipping the lookup when its root is not imported."""
        root = _root(node)
        if isinstance(root, ast.Name) and root.id in self._bound:
            return self._imports.resolve(node)
        return None

    # -- definitions: decorators, bases, parameters, global names ---------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for dec in node.decorator_list:
            self._decorator(dec)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            value = base.value if isinstance(base, ast.Starred) else base
            qual = self._qual(value)
            if is_training_call(qual) or qual == "torch.optim.Optimizer":
                self.report(value, "PRT060", f"training code: subclass of {qual}", fix=Applicability.NONE,
                            data={"qualname": qual})
        for dec in node.decorator_list:
            self._decorator(dec)

    def visit_arguments(self, node: ast.arguments) -> None:
        positional = [*node.posonlyargs, *node.args]
        pairs = list(zip(positional[len(positional) - len(node.defaults):], node.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None]
        for arg, default in pairs:
            if "device" in arg.arg.lower():
                self._device_strings(default)

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        # `global CUDA_HOME`: the names are plain strings in ast, each still a reference
        hits = [name for name in node.names if name in self._direct]
        if not hits:
            return
        start, end = self.span(node)
        idents = list(_IDENT.finditer(self.ctx.text, start, end))[1:]  # after the keyword
        for name, m in zip(node.names, idents, strict=False):
            if name in self._direct and m.group() == name:
                self._name_ref(m.start(), m.end(), self._direct[name])

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        name = node.name
        if name is None or name not in self._direct or node.type is None:
            return
        _, after = self.span(node.type)
        m = re.compile(r"\)*\s*as\s+(" + re.escape(name) + r")\b").match(self.ctx.text, after)
        if m is not None:
            self._name_ref(m.start(1), m.end(1), self._direct[name])

    def _name_ref(self, start: int, end: int, qual: str) -> None:
        node = _Span(start, end)
        if qual == _CUDA_HOME:
            self._cuda_home(node)
        else:
            self._torch_cuda(node, qual)

    # -- torch.cuda references --------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        first = node
        root = node.value
        while isinstance(root, ast.Attribute):
            first = root
            root = root.value
        if not isinstance(root, ast.Name) or root.id not in self._roots:
            return
        firsts = self._roots[root.id]
        if firsts is not None and first.attr not in firsts:
            return  # `torch.nn.x`: cannot resolve to torch.cuda or CUDA_HOME
        if id(node) in self._skip:
            self._skip.add(id(node.value))
            return
        qual = self._imports.resolve(node)
        if qual and _is_torch_cuda(qual):
            inner: ast.AST = node.value
            while isinstance(inner, ast.Attribute):
                self._skip.add(id(inner))
                inner = inner.value
            self._skip.add(id(inner))
            self._torch_cuda(node, qual)
        elif qual == _CUDA_HOME:
            self._skip.add(id(node.value))
            self._cuda_home(node)

    def visit_Name(self, node: ast.Name) -> None:
        qual = self._direct.get(node.id)
        if qual is None or id(node) in self._skip:
            return
        if qual == _CUDA_HOME:
            self._cuda_home(node)
        else:
            self._torch_cuda(node, qual)

    def _cuda_home(self, node: ast.AST) -> None:
        # generic: the build family's finding on the same expression (setup.py) supersedes it
        self.report(node, "PRT047", "torch.utils.cpp_extension.CUDA_HOME is None on ROCm; use ROCM_HOME "
                    "when torch.version.hip is set", fix=Applicability.NONE, generic=True)

    def _torch_cuda(self, node: ast.AST, qual: str) -> None:
        if id(node) in self._amp_handled:
            return
        rest = qual[len("torch.cuda."):] if qual != "torch.cuda" else ""
        head = rest.split(".")[0]
        if qual in AMP_DEPRECATED or (head == "amp" and rest in {"amp.autocast_mode", "amp.grad_scaler"}):
            new = AMP_DEPRECATED.get(qual, ("", ()))[0]
            target = f"torch.amp.{new}" if new else "torch.amp"
            self.report(node, "PRT049", f"{qual} is deprecated; use {target} with device \"cuda\" "
                        "(not rewritten here: not a plain call)", fix=Applicability.NONE)
            return
        if not head:
            self.report(node, "PRT042", "torch.cuda module reference: portable on ROCm (the HIP backend)",
                        fix=Applicability.NONE)
        elif head in OWNED_ELSEWHERE:
            return
        elif head in GRAPHS:
            self.report(node, "PRT044", f"CUDA graph API {qual}: works on ROCm through HIP graphs; verify "
                        "capture and outputs there", fix=Applicability.NONE)
        elif head in ARCH:
            self.report(node, "PRT046", f"{qual} returns sm_XX names on CUDA and gfx names on ROCm; do not "
                        "parse it, branch on torch.version.hip or a capability", fix=Applicability.NONE)
        elif head in TELEMETRY:
            self.report(node, "PRT051", f"{qual} reads amdsmi on ROCm: different units/sensors "
                        "(power_draw is W on ROCm, mW on NVIDIA)", fix=Applicability.NONE)
        elif head in NVIDIA_ONLY:
            self.report(node, "PRT052", f"{qual} has no ROCm implementation; fall back to ordinary I/O or "
                        "streams", fix=Applicability.NONE)
        elif head in VERIFY:
            self.report(node, "PRT043", f"{qual} exists on ROCm but behaves differently (raw runtime or "
                        "native handles); verify it there", fix=Applicability.NONE)
        elif head in PORTABLE:
            self.report(node, "PRT042", f"{qual}: portable on ROCm (torch.cuda is the HIP backend)",
                        fix=Applicability.NONE)
        else:
            self.report(node, "PRT043", f"{qual} is not in porter's table of torch.cuda APIs; check it on "
                        "ROCm", fix=Applicability.NONE)

    # -- calls: .cuda(), device strings, amp rewrites, os.environ ----------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        attr = func.attr if isinstance(func, ast.Attribute) else None
        # an attribute chain's qualified name ends with its last attribute: resolve only the
        # chains whose name some rule below can match
        qual = self._qual(func) if attr is None or attr in _CALL_NAMES or attr[:1].isupper() else None
        if qual is not None and is_training_call(qual):
            self.report(func, "PRT060", f"training code: {qual}", fix=Applicability.NONE,
                        data={"qualname": qual})
        if qual in AMP_DEPRECATED:
            self._amp_call(node, qual)
        elif attr == "cuda" and qual != "torch.cuda":
            self.report(node, "PRT040", ".cuda(): portable on ROCm (the device type stays \"cuda\")",
                        fix=Applicability.NONE)
        # device strings
        for kw in node.keywords:
            if kw.arg in DEVICE_KEYWORDS:
                self._device_strings(kw.value)
        first = next((a for a in node.args if not isinstance(a, ast.Starred)), None)
        if first is not None:
            if qual in DEVICE_ARG0 or attr == "to":
                self._device_strings(first)
            # environment access
            if qual in _ENV_FUNCS:
                self._env_key(first, "read or set")
        if node.keywords and (qual in _ENV_UPDATES or (attr == "update" and qual is None)):
            for kw in node.keywords:
                if kw.arg in ENV_VARS:
                    start = self.span(kw)[0]
                    end = start + len(kw.arg)
                    if self.ctx.text[start:end] == kw.arg:  # as written (ast normalises identifiers)
                        self._env_report(_Span(start, end), kw.arg, "set")

    def _device_strings(self, expr: ast.AST) -> None:
        for lit in self._literals.find(expr):
            self.report(lit, "PRT041", "CUDA device string: portable on ROCm (the device type stays "
                        "\"cuda\")", fix=Applicability.NONE)

    def visit_Assign(self, node: ast.Assign) -> None:
        if any("device" in _target_name(t).lower() for t in node.targets):
            self._device_strings(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None and "device" in _target_name(node.target).lower():
            self._device_strings(node.value)

    def _is_environ(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            if node.attr != "environ":
                return False
        elif not isinstance(node, ast.Name):
            return False
        return self._qual(node) == "os.environ"

    def visit_Subscript(self, node: ast.Subscript) -> None:
        idx = node.slice
        if isinstance(idx, ast.Tuple):
            # `environ["A",]` is one subscript element; `environ[("A",)]` a tuple key
            if len(idx.elts) != 1 or (idx.lineno, idx.col_offset) != (idx.elts[0].lineno, idx.elts[0].col_offset):
                return
            idx = idx.elts[0]
            if isinstance(idx, ast.Starred):
                return
        elif isinstance(idx, ast.Slice):
            return
        if self._is_environ(node.value):
            self._env_key(idx, "read or set")

    def visit_Compare(self, node: ast.Compare) -> None:
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.In, ast.NotIn)) and self._is_environ(comparator):
                self._env_key(node.left, "tested")

    def visit_Dict(self, node: ast.Dict) -> None:
        for key in node.keys:
            if key is not None:
                self._env_key(key, "set")

    def _env_key(self, expr: ast.AST, how: str) -> None:
        value = _str_value(expr)
        if value in ENV_VARS:
            self._env_report(expr, value, how)

    def _env_report(self, node: ast.AST, var: str, how: str) -> None:
        # generic: a more specific finding (build family, setup.py) on the same node supersedes it
        self.report(node, ENV_VARS[var], f"{var} {how} from Python: {_ENV_ADVICE[var]}",
                    fix=Applicability.NONE, data={"variable": var}, generic=var != "CUDA_VISIBLE_DEVICES")

    # -- torch.cuda.amp rewrites ------------------------------------------------------------
    def _decorator(self, dec: ast.expr) -> None:
        if not isinstance(dec, (ast.Name, ast.Attribute)):
            return
        qual = self._qual(dec)
        if qual in AMP_DEPRECATED and AMP_DEPRECATED[qual][0] in {"custom_fwd", "custom_bwd"}:
            new = AMP_DEPRECATED[qual][0]
            self._mark(dec)
            blocked = self._amp_blocked(f"torch.amp.{new}")
            if blocked:
                self.report(dec, "PRT049", f"{qual} is deprecated; torch.amp.{new}(device_type=\"cuda\") is "
                            "the same" + blocked, fix=Applicability.NONE)
                return
            prefix, adds = self._amp_prefix()
            self.report(dec, "PRT049", f"{qual} is deprecated; torch.amp.{new}(device_type=\"cuda\") is "
                        "the same", replacement=f'{prefix}.{new}(device_type="cuda")',
                        fix=Applicability.SAFE, fix_title=f"use torch.amp.{new}",
                        add_imports=adds, remove_imports=(qual,))

    def _amp_blocked(self, target: str) -> str:
        """Why a deprecation rewrite to ``target`` is not applied here ("" when it may be): the new API
        needs a torch the repository's pins must guarantee. The old spelling works on ROCm, so the
        rewrite is a clean-up, never worth emitting code an older pinned (or unpinned) torch cannot run."""
        from packaging.version import Version

        from porter.apis import MIN_VERSIONS, pin_guarantees

        need = next((r for r in MIN_VERSIONS.get(target, ()) if r.startswith("torch>=")), None)
        if need is None:
            return ""
        floor = Version(need.split(">=", 1)[1])
        pin = self.ctx.facts.pins.get("torch") if self.ctx.facts is not None else None
        if pin and pin_guarantees(pin, floor):
            return ""
        shown = f"torch{pin}" if pin else "no torch version"
        return (f" (not rewritten: {target} needs torch>={floor} and the repository's pins ({shown}) do not "
                "guarantee it; the old spelling works on ROCm)")

    def _mark(self, func: ast.AST) -> None:
        self._amp_handled.add(id(func))
        inner = func
        while isinstance(inner, ast.Attribute):
            self._skip.add(id(inner.value))
            inner = inner.value
        self._skip.add(id(inner))

    def _amp_prefix(self) -> tuple[str, tuple[str, ...]]:
        alias = self._imports.alias_for("torch.amp")
        if alias:
            return alias, ()
        return "torch.amp", ("import torch",)

    def _amp_call(self, node: ast.Call, qual: str) -> None:
        new, params = AMP_DEPRECATED[qual]
        self._mark(node.func)
        target = f"torch.amp.{new}"
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            self.report(node, "PRT049", f"{qual} is deprecated; use {target} with device \"cuda\" (not "
                        "rewritten: *args/**kwargs)", fix=Applicability.NONE)
            return
        if len(node.args) > len(params):
            self.report(node, "PRT049", f"{qual}: too many positional arguments; not rewritten",
                        fix=Applicability.NONE)
            return
        values = self._argument_sources(node)
        blocked = self._amp_blocked(target)
        if blocked or values is None:
            self.report(node, "PRT049", f"{qual} is deprecated; use {target} with device \"cuda\"" + blocked,
                        fix=Applicability.NONE)
            return
        parts = [f"{name}={values[id(arg)]}" for name, arg in zip(params, node.args, strict=False)]
        parts += [f"{kw.arg}={values[id(kw)]}" for kw in node.keywords]
        prefix, adds = self._amp_prefix()
        if new in {"custom_fwd", "custom_bwd"}:
            args = ", ".join(parts + ['device_type="cuda"'])
        else:
            args = ", ".join(['"cuda"'] + parts)
        fix = Applicability.UNSAFE if self._unsafe_amp and new == "autocast" else Applicability.SAFE
        same = (f'{target}(..., device_type="cuda")' if new in {"custom_fwd", "custom_bwd"}
                else f'{target}("cuda", ...)')
        self.report(node, "PRT049", f"{qual} is deprecated; {same} is the same",
                    replacement=f"{prefix}.{new}({args})", fix=fix, fix_title=f"use {target}",
                    add_imports=adds, remove_imports=(qual,))

    def _argument_sources(self, node: ast.Call) -> dict[int, str] | None:
        """Each argument's value as written, parentheses around it included (``enabled=(x := f())``
        must keep them), keyed by the id of the positional node or the keyword."""
        items: list[ast.AST] = sorted([*node.args, *node.keywords], key=lambda a: (a.lineno, a.col_offset))
        if not items:
            return {}
        start, _ = self.span(node)
        code = self.code(node)
        spans = _arg_texts(code, self.span(node.func)[1] - start)
        if spans is None or len(spans) != len(items):
            return None
        return {id(item): code[a:b] for item, (a, b) in zip(items, spans, strict=True)}


class _Span:
    """A bare source range, for a name ``ast`` keeps as a string (a keyword's name, ``global x``)."""

    __slots__ = ("start", "end")

    def __init__(self, start: int, end: int) -> None:  # character offsets
        self.start = start
        self.end = end


# -- shell scripts --------------------------------------------------------------------------------

_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "{", "}", "do", "then", "else", "\n"}
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")


def _logical_lines(text: str) -> Iterator[tuple[str, list[tuple[int, int]]]]:
    """Logical lines (backslash-newline continuations joined) with a map of
    (index in the joined line, offset in the text) for each physical piece."""
    offset = 0
    buf = ""
    pieces: list[tuple[int, int]] = []
    for raw in text.splitlines(keepends=True):
        body = raw.rstrip("\r\n")
        pieces.append((len(buf), offset))
        offset += len(raw)
        if body.endswith("\\"):
            buf += body[:-1] + " "
            continue
        yield buf + body, pieces
        buf, pieces = "", []
    if pieces:
        yield buf, pieces


def _text_offset(pieces: list[tuple[int, int]], col: int) -> int:
    joined, raw = max((p for p in pieces if p[0] <= col), key=lambda p: p[0])
    return raw + col - joined


_SHELL_PREFIXES = {"export", "env", "declare", "local", "readonly"}


def check_shell(ctx: FileContext) -> Iterator[Finding]:
    """Assignments of CUDA environment variables in shell scripts (``CUDA_VISIBLE_DEVICES=0 python ...``,
    ``export CUDA_VISIBLE_DEVICES=...``), found with a real shell lexer (quotes and comments honoured)."""
    for line, pieces in _logical_lines(ctx.text):
        if not any(var in line for var in ENV_VARS):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:  # unbalanced quotes: not a line porter can read safely
            continue
        command_start = True
        prev = ""
        search_from = 0
        for tok in tokens:
            if tok in _SEPARATORS:
                command_start = True
                prev = tok
                continue
            m = _ASSIGN.match(tok)
            if m and (command_start or prev in _SHELL_PREFIXES):
                var = m.group(1)
                col = line.find(var + "=", search_from)
                if var in ENV_VARS and col >= 0:
                    search_from = col + len(var)
                    start = _text_offset(pieces, col)
                    yield ctx.finding(ENV_VARS[var], f"{var} set in a shell script: {_ENV_ADVICE[var]}",
                                      start, start + len(var), data={"variable": var},
                                      generic=var != "CUDA_VISIBLE_DEVICES")
                # an assignment keeps the command-start position (`A=1 B=2 cmd`)
            elif tok not in _SHELL_PREFIXES:
                command_start = False
            prev = tok


# The Python pre-filter: each rule needs one of these in the text. torch.cuda names, `.cuda()`,
# CUDA_HOME, the environment variables and device strings spell "cuda"/"CUDA"; a training call
# or base class names its API (DistributedDataParallel and FullyShardedDataParallel contain
# "DataParallel", every trainer class "Trainer"). A torch.optim optimizer is reached through the
# identifier `optim` (`torch.optim.AdamW`, `from torch import optim`, `from torch.optim import
# AdamW`, `O = torch.optim`), which in valid Python is followed by one of these characters (or
# ends the file: a token ending in a newline also matches there), never by another identifier
# character: `optimizer`/`optimize` alone do not admit a file.
_AFTER_IDENTIFIER = (".", " ", "\t", "\n", "\r", "\f", "\\", ",", ")", ";", "#")
PYTHON_TOKENS = ("cuda", "CUDA", *("optim" + c for c in _AFTER_IDENTIFIER), "DataParallel", "fully_shard",
                 "init_process_group", "Trainer", "TrainingArguments", "deepspeed", "Accelerator")


FAMILY = Family(
    name=NAME,
    title="Device code inventory: .cuda(), device strings, torch.cuda classified",
    order=15,
    rules=RULES,
    # shell: every variable the checker reports contains "CUDA"
    tokens=("CUDA",),
    python_tokens=PYTHON_TOKENS,
    python_ast=DeviceAuditVisitor,
    checkers={"shell": check_shell},
    description="Rewrites the deprecated `torch.cuda.amp` entry points to `torch.amp` with device "
    "`\"cuda\"`; everything else in this family is inventory (what runs unchanged on ROCm, what to "
    "verify, what to change).",
    verified="Fixture tests (tests/fixtures/device_audit) cover every rule, the amp rewrite with "
    "positional arguments, and traps: comments, docstrings, log strings, CLI options, unrelated "
    "`.cuda` attributes and project names.",
    review="CUDA graphs and the torch.cuda APIs marked 'verify' need one run on a ROCm machine.",
)

__all__ = ["FAMILY", "RULES", "is_training_call"]
