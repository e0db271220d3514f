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

    def leave_Module(self, node: ast.Module) -> None:
        self.ctx.cache[GATE_FACTS] = self  # a complete walk's facts, read by the family's python_gate

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
            if not self.smi_call and any(_names_smi(n) for arg in (*node.args, *node.keywords)
                                         for n in ast.walk(arg)):
                self.smi_call = True
        elif qual.startswith("torch.cuda.nvtx."):
            self.report(node, "PRT745", f"{qual} kept: ROCm builds map NVTX to roctx, so the marker reaches "
                        "rocprof (torch.profiler.record_function is the vendor-neutral alternative)", fix=NONE)
        elif qual.startswith("nvtx.") and not qual.startswith("nvtx.nvtx"):
            self.report(node, "PRT746", f"{qual} from the nvtx package reaches Nsight only; use "
                        "torch.cuda.nvtx.range (roctx on ROCm) or torch.profiler.record_function", fix=NONE)


def _names_smi(node: ast.AST) -> bool:
    """A string that may give the LibCST rule an "nvidia-smi" to match.

    That rule reads each literal part (``ast`` folds the parts into one Constant containing each)
    and the text of an f-string with its replacement fields left out (``f"nvidia-{x}smi"`` reads
    "nvidia-smi"), so the f-string's Constant pieces are joined the same way.
    """
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and "nvidia-smi" in node.value
    if isinstance(node, ast.JoinedStr):
        return "nvidia-smi" in "".join(v.value for v in node.values
                                       if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return False
