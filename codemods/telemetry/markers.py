"""The telemetry rules that only report, on the stdlib-``ast`` tier: NVTX markers (PRT745, PRT746).

The visitor also notes, for the family's ``python_gate``, the two things besides a pynvml import
that let the LibCST visitor (``visitor.TelemetryVisitor``: the pynvml rewrites and nvidia-smi
calls) report anything: a ``from pynvml import *`` and a subprocess call that may run nvidia-smi.
"""

from __future__ import annotations

import ast

from porter.codemods.telemetry import GATE_FACTS, NAME, NONE, SUBPROCESS
from porter.framework import PyContext
from porter.pyast import AstVisitor

_NVTX_IMPORT = ("import of the nvtx package: NVTX markers reach Nsight only; use torch.cuda.nvtx (roctx on ROCm) "
                "or torch.profiler.record_function")


class TelemetryMarkers(AstVisitor):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self.pynvml_star = False
        self.smi_call = False
        self.ctx.cache[GATE_FACTS] = self  # read by the family's python_gate

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "nvtx":
                self.report(alias, "PRT746", _NVTX_IMPORT, fix=NONE)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or node.module is None:
            return
        if node.module == "pynvml" and any(a.name == "*" for a in node.names):
            self.pynvml_star = True
        if node.module == "nvtx":
            self.report(node, "PRT746", _NVTX_IMPORT, fix=NONE)

    def visit_Call(self, node: ast.Call) -> None:
        qual = self.qualname(node.func)
        if not qual:
            return
        if qual in SUBPROCESS:
            # the LibCST rule reads the strings of the first argument; any argument holding a str
            # Constant with "nvidia-smi" (ast folds concatenated parts into one) is a superset
            if not self.smi_call and any(
                    isinstance(n, ast.Constant) and isinstance(n.value, str) and "nvidia-smi" in n.value
                    for arg in (*node.args, *node.keywords) for n in ast.walk(arg)):
                self.smi_call = True
        elif qual.startswith("torch.cuda.nvtx."):
            self.report(node, "PRT745", f"{qual} kept: ROCm builds map NVTX to roctx, so the marker reaches "
                        "rocprof (torch.profiler.record_function is the vendor-neutral alternative)", fix=NONE)
        elif qual.startswith("nvtx.") and not qual.startswith("nvtx.nvtx"):
            self.report(node, "PRT746", f"{qual} from the nvtx package reaches Nsight only; use "
                        "torch.cuda.nvtx.range (roctx on ROCm) or torch.profiler.record_function", fix=NONE)
