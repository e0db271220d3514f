"""The telemetry family's visitors and checkers; its rules, options and pre-filters are declared
in ``porter.codemods.telemetry`` (``__init__.py``), which describes what the family does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from porter.codemods.devices import DeviceModule, device_module
from porter.codemods.telemetry import _VIS, NAME, NONE, SAFE, SUBPROCESS, UNSAFE
from porter.findings import Applicability
from porter.framework import PyContext, PyVisitor
from porter.pycst import ImportDepthMixin
from porter.pyimports import dotted

# pynvml name -> (rule code, base applicability) for calls porter can rewrite
_DIRECT = {
    "nvmlInit": "PRT730", "nvmlInitWithFlags": "PRT730", "nvmlShutdown": "PRT730",
    "nvmlDeviceGetCount": "PRT731", "nvmlDeviceGetHandleByIndex": "PRT732",
    "nvmlDeviceGetMemoryInfo": "PRT733", "nvmlDeviceGetUtilizationRates": "PRT734",
    "nvmlDeviceGetPowerUsage": "PRT735", "nvmlDeviceGetTemperature": "PRT736",
    "nvmlDeviceGetClockInfo": "PRT737", "nvmlDeviceGetName": "PRT738",
}
_HINTS = {
    "nvmlSystemGetDriverVersion": "on ROCm report torch.version.hip (or amdsmi_get_gpu_driver_info)",
    "nvmlSystemGetCudaDriverVersion": "on ROCm report torch.version.hip",
    "nvmlDeviceGetCudaComputeCapability": "use porter_device.gpu_arch()/supports_* instead of capability numbers",
    "nvmlDeviceGetComputeRunningProcesses": "amdsmi_get_gpu_process_list on ROCm",
    "nvmlDeviceGetGraphicsRunningProcesses": "amdsmi_get_gpu_process_list on ROCm",
    "nvmlDeviceGetUUID": "torch.cuda.get_device_properties(i).uuid (torch >= 2.1)",
    "nvmlDeviceGetPowerManagementLimit": "amdsmi_get_power_cap_info on ROCm",
    "nvmlDeviceGetEnforcedPowerLimit": "amdsmi_get_power_cap_info on ROCm",
    "nvmlDeviceGetTotalEccErrors": "amdsmi_get_gpu_ecc_count on ROCm",
    "nvmlDeviceGetPciInfo": "torch.cuda.get_device_properties(i).pci_bus_id (torch >= 2.6)",
}
_TEMP_OK = {"pynvml.NVML_TEMPERATURE_GPU"}
_CLOCK_OK = {"pynvml.NVML_CLOCK_SM"}
_MEM_FIELDS = {"free": 0, "total": 1}
_UTIL_FIELDS = {"gpu": "utilization", "memory": "memory_usage"}


def _pynvml_fn(qual: str | None) -> str | None:
    if qual and qual.startswith("pynvml."):
        return qual[len("pynvml."):]
    return None


@dataclass
class _Site:
    """One rewritable pynvml call (or statement) and its replacement."""

    node: cst.CSTNode  # range replaced
    code: str
    message: str
    replacement: str | None
    fix: Applicability
    edits_override: tuple[int, int, str] | None = None  # raw (start, end, text) edit
    needs_torch: bool = False
    needs_module: bool = False
    stmt_id: int | None = None  # the statement a removal deletes


@dataclass
class _State:
    calls: list[cst.Call] = field(default_factory=list)  # every pynvml call
    attr_of: dict[int, cst.Attribute] = field(default_factory=dict)  # id(call) -> `.field` parent
    decode_of: dict[int, cst.Call] = field(default_factory=dict)  # id(call) -> `.decode()` parent
    stmt_of: dict[int, cst.SimpleStatementLine | cst.SimpleStatementSuite] = field(default_factory=dict)
    sole_stmt: set[int] = field(default_factory=set)  # statement is the only one in its block
    blocks: list[list[int]] = field(default_factory=list)  # statement ids of every indented block
    assigned: dict[int, str] = field(default_factory=dict)  # id(call) -> target name of `x = call`
    targets: dict[str, int] = field(default_factory=dict)  # name -> number of store sites
    loads: dict[str, list[cst.Name]] = field(default_factory=dict)
    attr_loads: dict[str, set[str]] = field(default_factory=dict)  # name -> fields read as name.X
    refs: list[cst.CSTNode] = field(default_factory=list)  # pynvml references outside calls' func
    mask_line: int | None = None  # where the file names CUDA_VISIBLE_DEVICES & co.
    # attribute handles (`self.handle = ...`): stores and every access by attribute name
    attr_stores: dict[str, int] = field(default_factory=dict)  # "self.handle" -> stores
    attr_targets: set[int] = field(default_factory=set)  # ids of Attribute store targets
    attr_name_loads: dict[str, int] = field(default_factory=dict)  # "handle" -> accesses (not stores)


class TelemetryVisitor(ImportDepthMixin, PyVisitor):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self.s = _State()
        self._skip: set[int] = set()
        self._block_sizes: list[int] = []
        self.has_pynvml = any(b.target == "pynvml" or b.target.startswith("pynvml.")
                              for b in ctx.imports.statements)

    # -- bookkeeping ----------------------------------------------------------------------
    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        super().visit_ImportFrom(node)
        if node.module is not None and not node.relative and dotted(node.module) == "pynvml" and \
                isinstance(node.names, cst.ImportStar):
            self.report(node, "PRT739", "`from pynvml import *`: porter cannot tell which names come from "
                        "pynvml, so no call in this file is rewritten; import the names explicitly (or "
                        "`import pynvml`) and run porter again", fix=NONE)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self.s.blocks.append([id(stmt) for stmt in node.body])
        for stmt in node.body:
            if isinstance(stmt, cst.SimpleStatementLine) and len(node.body) == 1:
                self.s.sole_stmt.add(id(stmt))

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        if len(node.body) == 1 and isinstance(node.body[0], cst.Expr) and isinstance(node.body[0].value, cst.Call):
            self.s.stmt_of[id(node.body[0].value)] = node

    def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> None:
        if len(node.body) == 1 and isinstance(node.body[0], cst.Expr) and isinstance(node.body[0].value, cst.Call):
            self.s.stmt_of[id(node.body[0].value)] = node
            self.s.sole_stmt.add(id(node))

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            for name in _target_names(t.target):
                self.s.targets[name.value] = self.s.targets.get(name.value, 0) + 1
                self._skip.add(id(name))
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) and isinstance(node.value, cst.Call):
            self.s.assigned[id(node.value)] = node.targets[0].target.value
        for t in node.targets:
            if isinstance(t.target, cst.Attribute):
                key = self.code(t.target)
                self.s.attr_stores[key] = self.s.attr_stores.get(key, 0) + 1
                self.s.attr_targets.add(id(t.target))
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Attribute) and \
                isinstance(node.value, cst.Call):
            self.s.assigned[id(node.value)] = self.code(node.targets[0].target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        for name in _target_names(node.target):
            self.s.targets[name.value] = self.s.targets.get(name.value, 0) + 1
            self._skip.add(id(name))
        if isinstance(node.target, cst.Name) and isinstance(node.value, cst.Call):
            self.s.assigned[id(node.value)] = node.target.value

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        for name in _target_names(node.target):
            self.s.targets[name.value] = self.s.targets.get(name.value, 0) + 2  # never a single store

    def visit_For(self, node: cst.For) -> None:
        for name in _target_names(node.target):
            self.s.targets[name.value] = self.s.targets.get(name.value, 0) + 2

    def visit_Param(self, node: cst.Param) -> None:
        self._skip.add(id(node.name))
        self.s.targets[node.name.value] = self.s.targets.get(node.name.value, 0) + 2

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._skip.add(id(node.keyword))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._skip.add(id(node.name))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._skip.add(id(node.name))

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) in self._skip or self.in_import:
            return
        self.s.loads.setdefault(node.value, []).append(node)
        if self.has_pynvml and _pynvml_fn(self.ctx.imports.resolve_name(node.value)) is not None:
            self.s.refs.append(node)
        elif self.has_pynvml and self.ctx.imports.resolve_name(node.value) == "pynvml":
            self.s.refs.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._skip.add(id(node.attr))
        if id(node) not in self.s.attr_targets:
            self.s.attr_name_loads[node.attr.value] = self.s.attr_name_loads.get(node.attr.value, 0) + 1
        if isinstance(node.value, cst.Name):
            self.s.attr_loads.setdefault(node.value.value, set()).add(node.attr.value)
        if isinstance(node.value, cst.Call):
            self.s.attr_of[id(node.value)] = node
        if id(node) in self._skip or self.in_import:
            self._skip.add(id(node.value))
            return
        qual = self.qualname(node)
        if self.has_pynvml and qual and (qual == "pynvml" or qual.startswith("pynvml.")):
            inner: cst.BaseExpression = node.value
            while isinstance(inner, cst.Attribute):
                self._skip.add(id(inner))
                self._skip.add(id(inner.attr))
                inner = inner.value
            self._skip.add(id(inner))
            self.s.refs.append(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if self.has_pynvml and self.s.mask_line is None and _MASK.search(node.value):
            self.s.mask_line = self._line(node)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "decode" and isinstance(func.value, cst.Call):
            self.s.decode_of[id(func.value)] = node
        qual = self.qualname(func)
        if self.has_pynvml and _pynvml_fn(qual) is not None:
            self.s.calls.append(node)
        elif qual in SUBPROCESS:
            self._subprocess(node, qual or "")

    # -- nvidia-smi ---------------------------------------------------------------------------
    def _subprocess(self, node: cst.Call, qual: str) -> None:
        if not node.args:
            return
        first = node.args[0].value
        texts = _strings(first)
        if not texts:
            return
        if isinstance(first, (cst.List, cst.Tuple)):
            head = texts[0].strip()
            if not _SMI_LIST.fullmatch(head) and not _SMI_CMD.search(head):
                return
        elif not _SMI_CMD.search(texts[0] if len(texts) == 1 else " ".join(texts)):
            return
        joined = " ".join(texts)
        fields = []
        for m in re.finditer(r"--query-gpu[= ]([\w.,]+)", joined):
            fields += [f for f in m.group(1).split(",") if f]
        mapped = [f"{f} → {_SMI_FIELDS[f]}" for f in fields if f in _SMI_FIELDS]
        unmapped = [f for f in fields if f not in _SMI_FIELDS]
        detail = ""
        if mapped:
            detail += "; portable replacements: " + ", ".join(mapped)
        if unmapped:
            detail += "; no torch equivalent for " + ", ".join(unmapped) + " (amd-smi on AMD)"
        if not fields:
            detail = ("; use torch.cuda telemetry (mem_get_info, utilization, temperature, "
                      "porter_device.power_draw_mw) or amd-smi/rocm-smi on AMD")
        self.report(node, "PRT740", f"{qual} runs nvidia-smi, which does not exist on AMD machines{detail}", fix=NONE)

    # -- the pynvml decision ----------------------------------------------------------------------
    def leave_Module(self, original_node: cst.Module) -> None:
        if not self.s.calls and not self.s.refs:
            return
        dm = device_module(self.ctx)
        sites: list[_Site] = []
        blockers: list[tuple[cst.CSTNode, str]] = []
        covered: set[int] = set()  # ids of nodes inside a site's replaced range
        handles: dict[str, cst.Call] = {}
        calls_by_id = {id(c): c for c in self.s.calls}
        # handles first: `h = pynvml.nvmlDeviceGetHandleByIndex(i)`
        for call in self.s.calls:
            if _pynvml_fn(self.qualname(call.func)) == "nvmlDeviceGetHandleByIndex":
                name = self.s.assigned.get(id(call))
                if name is None:
                    continue
                if "." in name:  # an attribute such as self.handle: stored once in this file
                    if self.s.attr_stores.get(name) == 1:
                        handles[name] = call
                elif self.s.targets.get(name) == 1:
                    handles[name] = call
        handle_uses: dict[str, int] = {n: 0 for n in handles}
        for call in self.s.calls:
            if id(call) in covered:
                continue
            fn = _pynvml_fn(self.qualname(call.func)) or ""
            site = self._site(call, fn, handles, handle_uses, calls_by_id, covered, dm)
            if isinstance(site, str):
                blockers.append((call, site))
            elif site is not None:
                sites.append(site)
        # handles whose every load is a rewritten call's argument
        for name, call in handles.items():
            if "." in name:  # every access to `.handle`, on any object, must be a rewritten call's argument
                loads = self.s.attr_name_loads.get(name.rsplit(".", 1)[1], 0)
            else:
                loads = len(self.s.loads.get(name, ()))
            if loads != handle_uses[name]:
                blockers.append((call, f"the handle `{name}` is used outside the pynvml calls porter rewrites"))
            else:
                stmt_arg = _arg(call, 0, "index")
                sites.append(_Site(call, "PRT732", f"NVML handle `{name}` becomes the torch device index",
                                   self.code(stmt_arg) if stmt_arg is not None else "None", UNSAFE))
        for ref in self.s.refs:
            if not any(_contains(self, c, ref) for c in self.s.calls):
                what = dotted(ref) if isinstance(ref, (cst.Name, cst.Attribute)) else "pynvml"
                blockers.append((ref, f"`{what}` is used outside a call porter rewrites"))
        # a file that sets a visibility mask makes NVML and torch indices disagree
        if self.s.mask_line is not None:
            for site in sites:
                if site.code in ("PRT731", "PRT732"):
                    blockers.append((site.node, f"this file names a device visibility mask (line "
                                     f"{self.s.mask_line}): NVML indices are physical, torch indices are "
                                     "relative to CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES"))
                    break
        # decide
        if blockers:
            node0, why0 = blockers[0]
            line0 = self._line(node0)
            blocked = {id(n) for n, _ in blockers}
            for node, why in blockers:
                if "visibility mask" in why:
                    hint = "use torch device indices throughout, or keep pynvml for this file"
                else:
                    hint = _HINTS.get(why.split("`")[1].rsplit(".", 1)[-1], "") if "`" in why else ""
                    hint = hint or "port it to amdsmi behind porter_device.is_rocm()"
                self.report(node, "PRT739", f"pynvml use porter does not rewrite: {why}; {hint}",
                            fix=NONE, remove_imports=("pynvml",))
            for site in sites:
                if id(site.node) in blocked:
                    continue
                self.report(site.node, site.code, f"{site.message}; not rewritten: the file keeps pynvml because "
                            f"{why0} (line {line0})", fix=NONE)
            return
        # a block made only of removed statements keeps its first one as `pass`
        removed = {s.stmt_id: s for s in sites if s.stmt_id is not None and s.edits_override is not None}
        for block in self.s.blocks:
            if block and all(i in removed for i in block):
                first = removed[block[0]]
                first.edits_override, first.replacement = None, "pass"
        level = SAFE if all(s.fix == SAFE for s in sites) else UNSAFE
        imports: list[str] = []
        if any(s.needs_torch for s in sites):
            imports.append("import torch")
        new_files: tuple[tuple[str, str], ...] = ()
        if any(s.needs_module for s in sites):
            if dm is None:
                for site in sites:
                    self.report(site.node, site.code, f"{site.message}; not rewritten inside the capability module",
                                fix=NONE)
                return
            imports.append(dm.import_stmt)
            new_files = dm.new_files
        for site in sites:
            note = "" if site.fix == level else " (unsafe because other pynvml rewrites in this file are)"
            kwargs = dict(fix=level, add_imports=tuple(imports), remove_imports=("pynvml",), new_files=new_files)
            if site.edits_override is not None:
                start, end, text = site.edits_override
                self.findings.append(self.ctx.finding(site.code, site.message + note, start, end,
                                                      replacement=text, **kwargs))
            else:
                self.report(site.node, site.code, site.message + note, replacement=site.replacement, **kwargs)

    def _line(self, node: cst.CSTNode) -> int:
        return self.ctx.position(self.span(node)[0])[0]

    def _device(self, call: cst.Call, handles: dict[str, cst.Call], uses: dict[str, int],
                calls_by_id: dict[int, cst.Call], covered: set[int]) -> str | None:
        arg = _arg(call, 0, "handle")
        if isinstance(arg, cst.Name) and arg.value in handles:
            uses[arg.value] += 1
            return arg.value
        if isinstance(arg, cst.Attribute) and self.code(arg) in handles:
            uses[self.code(arg)] += 1
            return self.code(arg)
        if isinstance(arg, cst.Call) and id(arg) in calls_by_id and \
                _pynvml_fn(self.qualname(arg.func)) == "nvmlDeviceGetHandleByIndex":
            covered.add(id(arg))
            index = _arg(arg, 0, "index")
            return self.code(index) if index is not None else None
        return None

    def _site(self, call: cst.Call, fn: str, handles: dict[str, cst.Call], uses: dict[str, int],
              calls_by_id: dict[int, cst.Call], covered: set[int], dm: DeviceModule | None) -> _Site | str | None:
        site = self._site_of(call, fn, handles, uses, calls_by_id, covered, dm)
        arg = _arg(call, 0, "handle")
        if isinstance(site, _Site) and arg is not None and id(arg) in covered and site.fix == SAFE:
            # the nested nvmlDeviceGetHandleByIndex(i) became the torch index i
            site.fix = UNSAFE
            site.message += f"; unsafe: {_VIS}"
        return site

    def _site_of(self, call: cst.Call, fn: str, handles: dict[str, cst.Call], uses: dict[str, int],
                 calls_by_id: dict[int, cst.Call], covered: set[int], dm: DeviceModule | None) -> _Site | str | None:
        code = _DIRECT.get(fn)
        if code is None:
            return f"`pynvml.{fn}`"
        if fn == "nvmlDeviceGetHandleByIndex":
            return None if self.s.assigned.get(id(call)) in handles else \
                "`pynvml.nvmlDeviceGetHandleByIndex` result is not kept in a variable or attribute stored once"
        if code == "PRT730":
            stmt = self.s.stmt_of.get(id(call))
            if stmt is None:
                return f"`pynvml.{fn}()` is used as a value"
            return self._removal(call, stmt, fn)
        if fn == "nvmlDeviceGetCount":
            return _Site(call, code, "nvmlDeviceGetCount() → torch.cuda.device_count() (" + _VIS + ")",
                         "torch.cuda.device_count()", UNSAFE, needs_torch=True)
        dev = self._device(call, handles, uses, calls_by_id, covered)
        if dev is None:
            arg = _arg(call, 0, "handle")
            shown = self.code(arg) if arg is not None else "?"
            return (f"`pynvml.{fn}` gets the handle `{shown}`, which does not come from "
                    "nvmlDeviceGetHandleByIndex in this file")
        parent = self.s.attr_of.get(id(call))
        if fn == "nvmlDeviceGetMemoryInfo":
            if parent is not None and parent.attr.value in _MEM_FIELDS:
                return _Site(parent, code, f"memory .{parent.attr.value} → torch.cuda.mem_get_info (bytes, exact)",
                             f"torch.cuda.mem_get_info({dev})[{_MEM_FIELDS[parent.attr.value]}]", SAFE,
                             needs_torch=True)
            if parent is not None and parent.attr.value == "used":
                return _Site(parent, code, "memory .used → torch.cuda.device_memory_used (amdsmi vram_used in MiB "
                             "on AMD)", f"torch.cuda.device_memory_used({dev})", UNSAFE, needs_torch=True)
            if parent is not None:
                return f"`pynvml.nvmlDeviceGetMemoryInfo(...).{parent.attr.value}`"
            stored = self.s.assigned.get(id(call))
            extra = self.s.attr_loads.get(stored, set()) - {"free", "total", "used"} if stored else set()
            if extra:
                return f"`pynvml.nvmlDeviceGetMemoryInfo` result field(s) {', '.join(sorted(extra))}"
            return _Site(call, code, "nvmlDeviceGetMemoryInfo → porter_device.memory_info (free, total, used; "
                         "used is amdsmi vram_used in MiB on AMD)", dm.call("memory_info", dev) if dm else None,
                         UNSAFE, needs_module=True)
        if fn == "nvmlDeviceGetUtilizationRates":
            if parent is not None and parent.attr.value in _UTIL_FIELDS:
                target = _UTIL_FIELDS[parent.attr.value]
                return _Site(parent, code, f"utilization .{parent.attr.value} → torch.cuda.{target} (amdsmi "
                             "activity counter on AMD)", f"torch.cuda.{target}({dev})", UNSAFE, needs_torch=True)
            if parent is not None:
                return f"`pynvml.nvmlDeviceGetUtilizationRates(...).{parent.attr.value}`"
            stored = self.s.assigned.get(id(call))
            extra = self.s.attr_loads.get(stored, set()) - {"gpu", "memory"} if stored else set()
            if extra:
                return f"`pynvml.nvmlDeviceGetUtilizationRates` result field(s) {', '.join(sorted(extra))}"
            return _Site(call, code, "nvmlDeviceGetUtilizationRates → porter_device.utilization_rates (amdsmi "
                         "activity counters on AMD)", dm.call("utilization_rates", dev) if dm else None, UNSAFE,
                         needs_module=True)
        if fn == "nvmlDeviceGetPowerUsage":
            return _Site(call, code, "nvmlDeviceGetPowerUsage (mW) → porter_device.power_draw_mw: "
                         "torch.cuda.power_draw is mW on NVIDIA but W on ROCm, the helper normalises to mW",
                         dm.call("power_draw_mw", dev) if dm else None, UNSAFE, needs_module=True)
        if fn == "nvmlDeviceGetTemperature":
            sensor = _arg(call, 1, "sensor")
            if not (sensor is not None and (self.qualname(sensor) in _TEMP_OK or _is_int(sensor, 0))):
                return "`pynvml.nvmlDeviceGetTemperature` reads a sensor other than NVML_TEMPERATURE_GPU"
            return _Site(call, code, "nvmlDeviceGetTemperature(GPU) → torch.cuda.temperature (junction sensor "
                         "on AMD)", f"torch.cuda.temperature({dev})", UNSAFE, needs_torch=True)
        if fn == "nvmlDeviceGetClockInfo":
            kind = _arg(call, 1, "type")
            if not (kind is not None and (self.qualname(kind) in _CLOCK_OK or _is_int(kind, 1))):
                return "`pynvml.nvmlDeviceGetClockInfo` reads a clock other than NVML_CLOCK_SM"
            return _Site(call, code, "nvmlDeviceGetClockInfo(SM) → torch.cuda.clock_rate (GFX clock on AMD)",
                         f"torch.cuda.clock_rate({dev})", UNSAFE, needs_torch=True)
        if fn == "nvmlDeviceGetName":
            dec = self.s.decode_of.get(id(call))
            if dec is not None:
                return _Site(dec, code, "nvmlDeviceGetName(...).decode() → torch.cuda.get_device_name (already str)",
                             f"torch.cuda.get_device_name({dev})", SAFE, needs_torch=True)
            level = UNSAFE if ".decode(" in self.ctx.text else SAFE
            why = " (the file calls .decode(): check it is not applied to this name, now a str)" if level == UNSAFE else ""
            return _Site(call, code, "nvmlDeviceGetName → torch.cuda.get_device_name" + why,
                         f"torch.cuda.get_device_name({dev})", level, needs_torch=True)
        return f"`pynvml.{fn}`"

    def _removal(self, call: cst.Call, stmt: cst.CSTNode, fn: str) -> _Site:
        msg = f"pynvml.{fn}() removed: torch.cuda telemetry initialises NVML/amdsmi itself"
        expr = stmt.body[0]  # type: ignore[attr-defined]
        start, end = self.span(expr)
        line, col = self.ctx.position(start)
        text = self.ctx.line_text(line)
        if id(stmt) in self.s.sole_stmt or isinstance(stmt, cst.SimpleStatementSuite):
            return _Site(expr, "PRT730", msg, "pass", SAFE)
        if text[: col - 1].strip() == "" and text[col - 1 + (end - start):].strip() == "":
            line_start = self.ctx.offset(line, 0)
            next_start = self.ctx.line_starts[line] if line < len(self.ctx.line_starts) else len(self.ctx.text)
            return _Site(expr, "PRT730", msg, None, SAFE, edits_override=(line_start, next_start, ""),
                         stmt_id=id(stmt))
        return _Site(expr, "PRT730", msg, "pass", SAFE)


def _contains(v: PyVisitor, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    a, b = v.span(outer)
    c, d = v.span(inner)
    return a <= c and d <= b


def _target_names(t: cst.BaseExpression) -> list[cst.Name]:
    if isinstance(t, cst.Name):
        return [t]
    if isinstance(t, (cst.Tuple, cst.List)):
        out: list[cst.Name] = []
        for el in t.elements:
            out += _target_names(el.value)
        return out
    if isinstance(t, cst.StarredElement):
        return _target_names(t.value)
    return []


def _arg(call: cst.Call, index: int, keyword: str) -> cst.BaseExpression | None:
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for a in call.args:
        if a.keyword is not None and a.keyword.value == keyword:
            return a.value
    return positional[index].value if index < len(positional) else None


def _is_int(node: cst.BaseExpression, value: int) -> bool:
    return isinstance(node, cst.Integer) and node.evaluated_value == value


def _strings(node: cst.CSTNode) -> list[str]:
    out: list[str] = []
    if isinstance(node, cst.SimpleString):
        try:
            v = node.evaluated_value
        except Exception:  # noqa: BLE001
            return out
        if isinstance(v, str):
            out.append(v)
    elif isinstance(node, cst.FormattedString):
        out.append("".join(p.value for p in node.parts if isinstance(p, cst.FormattedStringText)))
    elif isinstance(node, cst.ConcatenatedString):
        out += _strings(node.left) + _strings(node.right)
    elif isinstance(node, (cst.List, cst.Tuple)):
        for el in node.elements:
            out += _strings(el.value)
    elif isinstance(node, cst.Call):
        for a in node.args:  # shlex.split("nvidia-smi ...")
            out += _strings(a.value)
    return out


# the command word: at the start, or after a shell separator, optionally with a directory
_SMI_CMD = re.compile(r"(?:^|[;&|(]\s*|\bsudo\s+)\s*(?:\S*/)?nvidia-smi(?=\s|$|[;&|)])")
_SMI_LIST = re.compile(r"(?:\S*/)?nvidia-smi")
_MASK = re.compile(r"\b(CUDA|HIP|ROCR)_VISIBLE_DEVICES\b")
_SMI_FIELDS = {
    "memory.used": "torch.cuda.device_memory_used(i) (bytes)",
    "memory.total": "torch.cuda.mem_get_info(i)[1] (bytes)",
    "memory.free": "torch.cuda.mem_get_info(i)[0] (bytes)",
    "utilization.gpu": "torch.cuda.utilization(i)",
    "utilization.memory": "torch.cuda.memory_usage(i)",
    "temperature.gpu": "torch.cuda.temperature(i)",
    "power.draw": "porter_device.power_draw_mw(i) / 1000 (W)",
    "clocks.sm": "torch.cuda.clock_rate(i)",
    "clocks.current.sm": "torch.cuda.clock_rate(i)",
    "name": "torch.cuda.get_device_name(i)",
    "count": "torch.cuda.device_count()",
    "index": "the torch device index",
    "compute_cap": "porter_device.gpu_arch(i) / supports_*()",
}


