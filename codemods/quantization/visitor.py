"""The quantization family's visitors and checkers; its rules, options and pre-filters are declared
in ``porter.codemods.quantization`` (``__init__.py``), which describes what the family does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from porter.codemods._shared.calls import (
    UNKNOWN,
    Bound,
    bind,
    comments_of,
    is_literal,
    literal,
    reference,
    render_call,
    src,
)
from porter.codemods._shared.class_strings import is_dotted_path, prefix_of, yaml_paths
from porter.codemods._shared.statements import StatementTracker
from porter.codemods.quantization import (
    ADAM_8,
    ADAM_32,
    ADAM_DEFAULTS,
    ADAM_KEYWORDS,
    ADAM_PARAMS,
    BNB_CONFIG_PARAMS,
    BNB_PIN,
    BNB_STATE_CLASSES,
    EMBED_PARAMS,
    HF_BNB_OPTIMS,
    LINEAR4_PARAMS,
    LINEAR8_PARAMS,
    LOW_BIT_OPTIM,
    MOVABLE,
    NAME,
    NO_EQUIVALENT,
    REMOVED_FACTORIES,
    ROCM_NOTE,
    STRATEGIES,
    TORCHAO_STRING_TYPES,
    WITH_OPTIM_BITS,
)
from porter.findings import Applicability, Edit, Finding
from porter.framework import FileContext, PyContext, PyVisitor


def _strategy(ctx: PyContext) -> str:
    value = ctx.settings.option(NAME, "strategy", "torchao")
    return value if value in STRATEGIES else "torchao"


# Real module aliases: bitsandbytes/__init__.py does `from .optim import adam` and
# `from .nn import modules`, so `bnb.adam.Adam8bit` and `bnb.modules.Linear8bitLt` are the same classes.
BNB_MODULE_ALIASES = {"bitsandbytes.adam": "bitsandbytes.optim.adam",
                      "bitsandbytes.modules": "bitsandbytes.nn.modules"}


def low_precision_hint(text: str) -> str | None:
    """A sign in the file's text that parameters may be fp16/bf16 (None when there is none)."""
    m = re.search(r"\.half\(\)|\.bfloat16\(\)|torch\.(?:bfloat16|float16|half)\b|[\"'](?:bf16|fp16|bfloat16|float16)[\"']",
                  text)
    return m.group(0) if m else None


def bnb_canonical(qual: str) -> str:
    """``bitsandbytes.adam.Adam8bit`` → ``bitsandbytes.optim.adam.Adam8bit`` (other names unchanged)."""
    for alias, real in BNB_MODULE_ALIASES.items():
        if qual == alias or qual.startswith(alias + "."):
            return real + qual[len(alias):]
    return qual


def _bnb_name(qual: str | None, package: str) -> str | None:
    """``Adam8bit`` for ``bitsandbytes.optim.Adam8bit`` / ``bitsandbytes.optim.adam.Adam8bit``."""
    if not qual:
        return None
    qual = bnb_canonical(qual)
    if not qual.startswith(package + "."):
        return None
    return qual.rsplit(".", 1)[-1]


class QuantizationVisitor(PyVisitor, StatementTracker):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        PyVisitor.__init__(self, ctx)
        StatementTracker.__init__(self)
        self.strategy = _strategy(ctx)
        self.pin = ctx.facts.pin("bitsandbytes")
        self._optim_seen: set[int] = set()
        self._called: set[int] = set()  # Call.func nodes (constructions are handled in visit_Call)
        self._functions: list[cst.FunctionDef] = []  # enclosing function definitions
        self._swaps: set[int] = set()  # swap helpers already reported

    # -- statement context ------------------------------------------------------------------
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.track_statement(node)

    # -- helpers ----------------------------------------------------------------------------
    def _rocm(self) -> str:
        pinned = f" (the repo pins bitsandbytes{self.pin})" if self.pin else ""
        return ROCM_NOTE + pinned

    def _flag(self, node: cst.CSTNode, code: str, message: str, **kw: object) -> None:
        self.report(node, code, message, fix=Applicability.NONE, **kw)

    # -- dispatch ---------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        self._called.add(id(node.func))
        self._hf_optim_names(node)
        self._name_dispatch(node)
        qual = self.qualname(node.func)
        if qual and qual.startswith("peft.") and qual.rsplit(".", 1)[-1] in PEFT_KBIT:
            self._peft(node, qual.rsplit(".", 1)[-1])
            return
        name = _bnb_name(qual, "bitsandbytes.optim")
        if name is not None:
            self._optimizer(node, name)
            return
        name = _bnb_name(qual, "bitsandbytes.nn")
        if name is not None:
            self._module(node, name)
            return
        if qual in ("transformers.BitsAndBytesConfig",
                    "transformers.utils.quantization_config.BitsAndBytesConfig"):
            self._bnb_config(node)
            return
        if qual in ("transformers.TorchAoConfig", "transformers.utils.quantization_config.TorchAoConfig"):
            self._torchao_config(node)
            return
        if qual and qual.startswith("torchao.quantization.") and qual.rsplit(".", 1)[-1] in REMOVED_FACTORIES:
            old = qual.rsplit(".", 1)[-1]
            self._flag(node, "PRT423", f"torchao `{old}()` was removed (before torchao 0.18); use "
                       f"`{REMOVED_FACTORIES[old]}(...)` from torchao.quantization — its defaults differ "
                       "(version=2 tensor layout), so check the arguments by hand")
            return
        self._load_in_kbit(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        qual = self.qualname(node)
        prefix = "torchao.prototype.low_bit_optim."
        if qual and qual.startswith(prefix) and qual[len(prefix):] in LOW_BIT_OPTIM:
            target, imports = reference(self.ctx, "torchao.optim." + qual[len(prefix):])
            self.report(node, "PRT423", f"`torchao.prototype.low_bit_optim` is gone in torchao 0.18; "
                        f"`{qual[len(prefix):]}` lives in torchao.optim (same class)", replacement=target,
                        fix=Applicability.SAFE, add_imports=imports,
                        remove_imports=("torchao.prototype.low_bit_optim",),
                        fix_title="use torchao.optim")

        elif id(node) not in self._called:
            self._reference(node, qual)

    def visit_Arg(self, node: cst.Arg) -> None:
        if isinstance(node.value, cst.Name) and id(node.value) not in self._called:
            self._reference(node.value, self.qualname(node.value))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._functions.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Name):
            self._reference(node.value, self.qualname(node.value))
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Subscript):
            self._kwargs_switch(node, node.targets[0].target)

    def _kwargs_switch(self, node: cst.Assign, target: cst.Subscript) -> None:
        """`kwargs["load_in_8bit"] = True` ... `from_pretrained(..., **kwargs)`."""
        from porter.codemods.quantization.kwargs import _key, dict_uses

        key = _key(target)
        if key not in ("load_in_8bit", "load_in_4bit") or is_literal(node.value, False, None):
            return
        head = (f"`{src(self.ctx, target)} = {src(self.ctx, node.value)}`: a bitsandbytes quantization switch "
                f"stored in a kwargs dict; transformers v5 removed `{key}=` from from_pretrained")
        problems: list[str] = []
        if not is_literal(node.value, True):
            problems.append("the value is not a literal True")
        if not isinstance(target.value, cst.Name):
            problems.append("the dict is not a local name")
        elif not self._functions:
            problems.append("the dict is not local to a function")
        else:
            problems += dict_uses(self._functions[-1], target.value.value).problems(key)
        if problems:
            self._flag(node, "PRT424", f"{head}; pass quantization_config=BitsAndBytesConfig({key}=True) instead; "
                       "not rewritten because " + "; ".join(problems))
            return
        cfg, imports = reference(self.ctx, "transformers.BitsAndBytesConfig", style="from")
        quote = '"'
        sl = target.slice[0].slice
        if isinstance(sl, cst.Index) and isinstance(sl.value, cst.SimpleString):
            quote = sl.value.quote
        self.report(node, "PRT424", f"{head} → `quantization_config={cfg}({key}=True)` in the same dict: the "
                    "same bitsandbytes quantization (exact); the dict is local, filled by string keys and only "
                    "splatted into from_pretrained",
                    replacement=f"{src(self.ctx, target.value)}[{quote}quantization_config{quote}] = "
                    f"{cfg}({key}=True)", fix=Applicability.SAFE, add_imports=imports,
                    fix_title="store quantization_config=BitsAndBytesConfig(...)")

    def _reference(self, node: cst.BaseExpression, qual: str | None) -> None:
        """A bnb optimizer/module class used as a value (alias, class table, isinstance, base class)."""
        name = _bnb_name(qual, "bitsandbytes.optim")
        code = None
        if name is not None and (name in ADAM_32 or name in ADAM_8):
            code = "PRT403"
            extra = (" bnb's Adam kernels decay decoupled: it maps to AdamW, never to a coupled Adam."
                     if name in ADAM_8 or name in ADAM_32 else "")
        elif name is not None and name.replace("Paged", "").replace("8bit", "").replace("32bit", "") in NO_EQUIVALENT:
            code, extra = "PRT402", ""
        else:
            name = _bnb_name(qual, "bitsandbytes.nn")
            code = {"Linear8bitLt": "PRT410", "Linear4bit": "PRT411", "LinearNF4": "PRT411", "LinearFP4": "PRT411",
                    "Embedding": "PRT413", "StableEmbedding": "PRT414"}.get(name or "")
            if code is None and name in BNB_STATE_CLASSES:
                code = "PRT412"
            extra = ""
        if code is None:
            return
        self._flag(node, code, f"bitsandbytes {name} is referenced as a value (an alias, a class table, "
                   "isinstance or a base class), not constructed here: port it where it is constructed, and "
                   f"update isinstance checks and subclasses by hand.{extra} ROCm route: {self._rocm()}.")

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.module is None or node.relative:
            return
        from porter.pyimports import dotted

        module = dotted(node.module) or ""
        if module == "torchao.prototype.low_bit_optim" and not isinstance(node.names, cst.ImportStar):
            names = [dotted(a.name) or "" for a in node.names]
            if all(n in LOW_BIT_OPTIM for n in names):
                self.report(node.module, "PRT423", "`torchao.prototype.low_bit_optim` is gone in torchao "
                            "0.18; import from torchao.optim (same classes)", replacement="torchao.optim",
                            fix=Applicability.SAFE, fix_title="import from torchao.optim")
            else:
                self._flag(node.module, "PRT423", "`torchao.prototype.low_bit_optim` is gone in torchao 0.18; "
                           "some imported names have no torchao.optim counterpart")

    # -- optimizers -------------------------------------------------------------------------
    def _optimizer(self, node: cst.Call, name: str) -> None:
        if name in ADAM_32 or name in ADAM_8:
            self._adam(node, name)
            return
        base = name.replace("Paged", "").replace("8bit", "").replace("32bit", "")
        reason = NO_EQUIVALENT.get(base)
        if reason is None:
            if name in ("GlobalOptimManager",) or not name[:1].isupper():
                return
            reason = "no verified torch/torchao equivalent"
        self._flag(node, "PRT402", f"bitsandbytes optimizer {name}: {reason}. ROCm route: {self._rocm()}.")

    def _adam(self, node: cst.Call, name: str) -> None:
        positional = 7 if name in WITH_OPTIM_BITS else 6
        params = ADAM_PARAMS + (("optim_bits",) if name in WITH_OPTIM_BITS else ())
        keywords = tuple(k for k in ADAM_KEYWORDS if k not in params)
        b = bind(node, params, positional, keywords)
        decoupled = "AdamW" in name
        default_wd = "1e-2" if decoupled else "0"
        # how many bits?
        bits: int | None = 8 if name in ADAM_8 else 32
        if name in WITH_OPTIM_BITS and b.has("optim_bits"):
            value = literal(b.value("optim_bits"))
            bits = value if value in (8, 32) else None
        blockers = self._adam_blockers(b, bits)
        if blockers:
            self._flag(node, "PRT403", f"bitsandbytes {name}: not rewritten because {blockers}. "
                       f"ROCm route: {self._rocm()}.")
            return
        code = "PRT400" if bits == 32 else "PRT401"
        if self.strategy == "bitsandbytes-rocm":
            self._flag(node, code, f"bitsandbytes {name} ({bits}-bit state): strategy bitsandbytes-rocm; "
                       f"{self._rocm()}")
            return
        wd_node = b.value("weight_decay")
        wd_text = src(self.ctx, wd_node) if wd_node is not None else default_wd
        wd_zero = wd_node is None and not decoupled or is_literal(wd_node, 0, 0.0)
        kwargs = [("params", src(self.ctx, b.value("params")))]
        for key in ("lr", "betas", "eps"):
            value = b.value(key)
            kwargs.append((key, src(self.ctx, value) if value is not None else ADAM_DEFAULTS[key]))
        kwargs.append(("weight_decay", wd_text))
        paged = " Paging (is_paged / Paged*) only placed state in unified memory; it is dropped." if (
            "Paged" in name or not is_literal(b.value("is_paged"), False) and b.has("is_paged")) else ""
        multiline, indent = self.multiline(node)
        if bits == 32:
            target = "torch.optim.Adam" if wd_zero and not decoupled else "torch.optim.AdamW"
            func, imports = reference(self.ctx, target)
            hint = low_precision_hint(self.ctx.text)
            decay = ("bnb applies decoupled weight decay for every Adam class, so this is AdamW"
                     if not decoupled and not wd_zero else "no weight decay" if wd_zero else "decoupled decay")
            caveats = []
            if not wd_zero:
                caveats.append("bnb's CUDA/HIP kernel decays after the update, p' = (p + u)(1 - lr*wd), torch "
                               "before it, p' = p(1 - lr*wd) + u, so every step differs by lr*wd*u (a relative "
                               "lr*wd, e.g. 1e-4 of the update at lr=1e-3, wd=0.1); bnb's CPU backend matches "
                               "torch")
            if hint is not None:
                caveats.append(f"the file mentions `{hint}`: for fp16/bf16 parameters bnb keeps fp32 moments "
                               "and updates in fp32 while torch keeps moments in the parameter dtype, so "
                               "trajectories drift by the half-precision rounding of the moments")
            if caveats:
                fix = Applicability.UNSAFE
                caveat = "unsafe: " + "; ".join(caveats)
            else:
                fix = Applicability.SAFE
                caveat = ("exact for fp32 parameters (bnb keeps fp32 state even for fp16/bf16 parameters; "
                          "torch keeps state in the parameter dtype)")
            message = (f"bitsandbytes {name} (32-bit state) → {target}: {decay}; lr, betas, eps and "
                       f"weight_decay written out; {caveat}.{paged}")
        else:
            func, imports = reference(self.ctx, "torchao.optim.AdamW8bit")
            kwargs.append(("block_size", "256"))
            fix = Applicability.UNSAFE
            trap = (" bnb's Adam8bit applies decoupled decay, so it maps to AdamW8bit, never to torchao's "
                    "coupled Adam8bit." if not decoupled else "")
            message = (f"bitsandbytes {name} → torchao.optim.AdamW8bit (approximation): both keep 8-bit "
                       "blockwise-256 moments and fp32 state for tensors under 4096 elements, but torchao "
                       "quantizes with its own rounding (and keeps tensors whose size is not a multiple of "
                       "256 in fp32), so updates differ by the 8-bit state quantization error; optimizer "
                       "state_dicts are not interchangeable; the step runs through torch.compile."
                       f"{trap}{paged}")
        replacement = render_call(func, kwargs, multiline=multiline, indent=indent, comments=comments_of(b))
        self.report(node, code, message, replacement=replacement, fix=fix, add_imports=imports,
                    remove_imports=("bitsandbytes",), fix_title=f"use {func}")

    def _adam_blockers(self, b: Bound, bits: int | None) -> str:
        out: list[str] = []
        if b.star:
            out.append("*args/**kwargs hide arguments")
        if b.extra_positional:
            out.append("positional arguments past `amsgrad` (their order differs between bnb versions)")
        if b.unknown:
            out.append("unknown argument(s) " + ", ".join(f"`{k}`" for k in b.unknown))
        if not b.has("params"):
            out.append("no `params` argument")
        if bits is None:
            out.append("`optim_bits` is not a literal 8 or 32")
        if b.has("amsgrad") and not is_literal(b.value("amsgrad"), False):
            out.append("`amsgrad` is not False (bnb ignores or rejects it: no AMSGrad kernel)")
        if b.has("percentile_clipping") and not is_literal(b.value("percentile_clipping"), 100):
            out.append("`percentile_clipping` != 100 (torch has no percentile gradient clipping)")
        if b.has("args") and not is_literal(b.value("args"), None):
            out.append("`args=` overrides the hyperparameters")
        if bits == 8:
            if b.has("block_wise") and not is_literal(b.value("block_wise"), True):
                out.append("`block_wise` is not True (torchao quantizes blockwise)")
            if b.has("min_8bit_size") and not is_literal(b.value("min_8bit_size"), 4096):
                out.append("`min_8bit_size` != 4096 (torchao's threshold is fixed at 4096)")
        return "; ".join(out)

    # -- bitsandbytes.nn --------------------------------------------------------------------
    def _swap_helper(self) -> cst.FunctionDef | None:
        """The enclosing function when it walks a model and assigns children (a hand-rolled swap)."""
        for fn in reversed(self._functions):
            text = self.ctx.code_for(fn)
            if _WALK.search(text) and _ASSIGN_CHILD.search(text):
                return fn
        return None

    def _module(self, node: cst.Call, name: str) -> None:
        if name in ("Linear8bitLt", "Linear4bit", "LinearNF4", "LinearFP4", "Embedding", "StableEmbedding") or (
                name in BNB_STATE_CLASSES):
            helper = self._swap_helper()
            if helper is not None:
                if id(helper) not in self._swaps:
                    self._swaps.add(id(helper))
                    self._flag(helper.name, "PRT415", f"`{helper.name.value}` walks the model and swaps layers for "
                               "bitsandbytes ones: port the helper as a whole — build torch.nn.Linear layers and "
                               "quantize once with torchao.quantization.quantize_(model, Int8WeightOnlyConfig(), "
                               "filter_fn=...) (per-row int8 weights, no LLM.int8 outlier path: an "
                               f"approximation), or {self._rocm()}")
                self._flag(node, "PRT415" if name not in BNB_STATE_CLASSES else "PRT412",
                           f"bnb.nn.{name} built inside the layer-swap helper `{helper.name.value}`: not rewritten "
                           "on its own (the helper would stay half-ported and still depend on bitsandbytes); see "
                           "PRT415")
                return
        if name == "Linear8bitLt":
            self._linear8(node)
        elif name in ("Linear4bit", "LinearNF4", "LinearFP4"):
            self._linear4(node, name)
        elif name == "Embedding":
            self._embedding(node)
        elif name == "StableEmbedding":
            self._flag(node, "PRT414", "bnb.nn.StableEmbedding needs a module keeping `weight`, "
                       "`norm.weight`, `norm.bias`, xavier init and a LayerNorm in the default dtype; "
                       f"porter does not emit it: port by hand or {self._rocm()}")
        elif name in BNB_STATE_CLASSES:
            self._flag(node, "PRT412", f"bnb.nn.{name} holds bitsandbytes' own quantization state; no "
                       f"portable equivalent: {self._rocm()}")

    def _linear8(self, node: cst.Call) -> None:
        b = bind(node, LINEAR8_PARAMS)
        problems = []
        if b.star or b.extra_positional or b.unknown:
            problems.append("unknown or hidden arguments")
        if not (b.has("input_features") and b.has("output_features")):
            problems.append("feature sizes not given")
        fp16 = b.value("has_fp16_weights")
        threshold = literal(b.value("threshold")) if b.has("threshold") else 0.0
        if fp16 is not None and not is_literal(fp16, True):
            why = ("has_fp16_weights=False stores int8 inference weights" if is_literal(fp16, False)
                   else "has_fp16_weights is not a literal")
            problems.append(why + "; build torch.nn.Linear and call torchao.quantization.quantize_(model, "
                            "Int8WeightOnlyConfig()) after loading weights (per-row int8 weights, no outlier "
                            "decomposition)")
        if problems or self.strategy == "bitsandbytes-rocm":
            reason = "; ".join(problems) if problems else "strategy bitsandbytes-rocm"
            self._flag(node, "PRT410", f"bnb.nn.Linear8bitLt (LLM.int8): {reason}; or {self._rocm()}")
            return
        func, imports = reference(self.ctx, "torch.nn.Linear")
        kwargs = [("in_features", src(self.ctx, b.value("input_features"))),
                  ("out_features", src(self.ctx, b.value("output_features"))),
                  ("bias", src(self.ctx, b.value("bias")) if b.has("bias") else "True")]
        if b.has("device"):
            kwargs.append(("device", src(self.ctx, b.value("device"))))
        outliers = ("" if threshold in (0, 0.0) else
                    f" (threshold={src(self.ctx, b.value('threshold'))}: outlier activation columns in fp16)")
        multiline, indent = self.multiline(node)
        self.report(node, "PRT410",
                    "bnb.nn.Linear8bitLt with trainable fp16 weights → torch.nn.Linear (approximation): bnb "
                    f"quantizes activations and weights to int8 in every forward{outliers}; torch.nn.Linear "
                    "computes the product in full precision, so outputs differ by the int8 rounding (about "
                    "1% relative); parameter names weight/bias are unchanged and memory use is the same",
                    replacement=render_call(func, kwargs, multiline=multiline, indent=indent,
                                            comments=comments_of(b, {"input_features": "in_features",
                                                                     "output_features": "out_features"})),
                    fix=Applicability.UNSAFE, add_imports=imports, remove_imports=("bitsandbytes",),
                    fix_title="use torch.nn.Linear")

    def _linear4(self, node: cst.Call, name: str) -> None:
        b = bind(node, LINEAR4_PARAMS if name == "Linear4bit" else LINEAR4_PARAMS[:5])
        if name == "LinearNF4":
            qtype = "nf4"
        elif name == "LinearFP4":
            qtype = "fp4"
        elif b.has("quant_type"):
            value = literal(b.value("quant_type"))
            qtype = value if value in ("fp4", "nf4") else None
        else:
            qtype = "fp4"  # bnb's default, not nf4
        compute = ("fp32 compute (compute_dtype=None)" if not b.has("compute_dtype")
                   or is_literal(b.value("compute_dtype"), None) else
                   f"compute dtype {src(self.ctx, b.value('compute_dtype'))}")
        default = " (the default quant_type)" if name == "Linear4bit" and not b.has("quant_type") else ""
        if qtype == "fp4":
            why = f"quant_type fp4{default} has no torchao equivalent format"
        elif qtype == "nf4":
            why = ("nf4 exists in torchao only as `to_nf4(weight, block_size=64, scaler_block_size=256)` "
                   "(an independent implementation, approximate), not as a drop-in module")
        else:
            why = "quant_type is not a literal, so the 4-bit format is unknown"
        self._flag(node, "PRT411", f"bnb.nn.{name}: {why}; {compute}; Int4WeightOnlyConfig is a different "
                   f"integer quantizer (group 128, no CPU kernel); {self._rocm()}",
                   data={"quant_type": qtype or ""})

    def _embedding(self, node: cst.Call) -> None:
        b = bind(node, EMBED_PARAMS)
        problems = []
        if b.star or b.extra_positional or b.unknown:
            problems.append("unknown or hidden arguments")
        if not (b.has("num_embeddings") and b.has("embedding_dim")):
            problems.append("sizes not given")
        has_weight = b.has("_weight") and not is_literal(b.value("_weight"), None)
        site = self.assign_sites.get(id(node))
        if not has_weight and site is None:
            problems.append("the xavier initialisation needs the call to be the whole right-hand side of "
                            "an assignment")
        pad = b.value("padding_idx")
        if pad is not None and not is_literal(pad, None) and not isinstance(pad, (cst.Name, cst.Attribute,
                                                                                     cst.Integer,
                                                                                     cst.UnaryOperation)):
            problems.append("padding_idx is not a name or literal (it would be evaluated twice)")
        if problems or self.strategy == "bitsandbytes-rocm":
            reason = "; ".join(problems) if problems else "strategy bitsandbytes-rocm"
            self._flag(node, "PRT413", f"bnb.nn.Embedding: {reason}; or {self._rocm()}")
            return
        func, imports = reference(self.ctx, "torch.nn.Embedding")
        kwargs = [(k, src(self.ctx, b.value(k))) for k in EMBED_PARAMS if b.has(k)]
        multiline, indent = self.multiline(node)
        edits: list[Edit] = []
        if not has_weight and site is not None:
            init, more = reference(self.ctx, "torch.nn.init.xavier_uniform_")
            imports = tuple(dict.fromkeys(imports + more))
            target = src(self.ctx, site.target)
            lines = [f"{init}({target}.weight)"]
            if pad is not None and not is_literal(pad, None):
                no_grad, more = reference(self.ctx, "torch.no_grad")
                imports = tuple(dict.fromkeys(imports + more))
                lines += [f"with {no_grad}():", f"    {target}.weight[{src(self.ctx, pad)}].fill_(0)"]
            edits.append(self.insert_after(site.statement, lines))
        message = ("bnb.nn.Embedding → torch.nn.Embedding: same forward; bnb's xavier_uniform_ init (and zeroed "
                   "padding row) written out; unsafe because bnb also forces 32-bit optimizer state for this "
                   "weight in bnb 8-bit optimizers and the init draws from a different point of the RNG stream")
        if has_weight:
            message = ("bnb.nn.Embedding with an explicit _weight → torch.nn.Embedding: same forward and weight; "
                       "unsafe because bnb also forces 32-bit optimizer state for this weight in bnb 8-bit "
                       "optimizers")
        self.report(node, "PRT413", message,
                    replacement=render_call(func, kwargs, multiline=multiline, indent=indent,
                                            comments=comments_of(b)),
                    fix=Applicability.UNSAFE, add_imports=imports, remove_imports=("bitsandbytes",),
                    edits=tuple(edits), fix_title="use torch.nn.Embedding")

    # -- transformers -----------------------------------------------------------------------
    def _load_in_kbit(self, node: cst.Call) -> None:
        kw = {a.keyword.value: a for a in node.args if a.keyword is not None}
        eight, four = kw.get("load_in_8bit"), kw.get("load_in_4bit")
        if eight is None and four is None:
            return
        on = [a for a in (eight, four) if a is not None and is_literal(a.value, True)]
        unknown = [a for a in (eight, four) if a is not None and literal(a.value) is UNKNOWN]
        if not on and not unknown:
            return  # `=False` everywhere: nothing is quantized
        func = node.func
        is_fp = isinstance(func, cst.Attribute) and func.attr.value == "from_pretrained" or (
            isinstance(func, cst.Name) and func.value == "from_pretrained")
        first = on[0] if on else unknown[0]
        kwname = first.keyword.value if first.keyword is not None else "load_in_8bit"
        if not is_fp:
            if not on:
                return  # a value forwarded to a project function: reported where it reaches from_pretrained
            first = on[0]
            kwname = first.keyword.value if first.keyword is not None else "load_in_8bit"
            callee = src(self.ctx, func)
            self._flag(first, "PRT424", f"`{kwname}={src(self.ctx, first.value)}` passed to `{callee}`: a "
                       "bitsandbytes quantization switch outside from_pretrained; it needs a ROCm-capable "
                       f"bitsandbytes ({BNB_PIN}) or a port to torchao; if it reaches transformers' "
                       "from_pretrained, v5 removed it (use quantization_config=BitsAndBytesConfig(...))")
            return
        problems = []
        if unknown:
            problems.append(f"`{unknown[0].keyword.value if unknown[0].keyword else ''}` is not a literal True/False")
        if len(on) == 2:
            problems.append("both load_in_8bit and load_in_4bit are True (a ValueError in transformers)")
        if "quantization_config" in kw:
            problems.append("quantization_config is also given (drop the redundant kwarg by hand once they agree)")
        if any(a.star == "**" for a in node.args):
            problems.append("**kwargs may already hold quantization_config")
        if problems:
            self._flag(first, "PRT420", f"{kwname}= was removed from from_pretrained in transformers v5; "
                       f"pass quantization_config=BitsAndBytesConfig({kwname}=True); not rewritten because "
                       + "; ".join(problems))
            return
        cfg, imports = reference(self.ctx, "transformers.BitsAndBytesConfig", style="from")
        moved = [a for a in node.args if a.keyword is not None and a.keyword.value in MOVABLE]
        inner = [f"{kwname}=True"] + [f"{a.keyword.value}={src(self.ctx, a.value)}" for a in moved
                                      if a.keyword is not None]
        drop = {id(a) for a in moved} | {id(a) for a in (eight, four) if a is not None and a is not first}
        # targeted edits keep every other argument (and its layout) byte for byte
        spans = [self.span(a) for a in node.args]
        edits: list[Edit] = []
        i = 0
        n = len(node.args)
        while i < n:
            if id(node.args[i]) not in drop:
                i += 1
                continue
            j = i
            while j + 1 < n and id(node.args[j + 1]) in drop:
                j += 1
            if j + 1 < n:  # a run followed by a kept argument: delete up to that argument
                edits.append(Edit(spans[i][0], spans[j + 1][0], ""))
            else:  # a trailing run: delete from the end of the previous argument
                edits.append(Edit(spans[i - 1][1], spans[j][1], ""))
            i = j + 1
        moved_note = (" with " + ", ".join(f"`{a.keyword.value}`" for a in moved if a.keyword is not None)
                      + " moved into the config" if moved else "")
        self.report(first, "PRT420", f"{kwname}=True was removed from from_pretrained in transformers v5 "
                    f"→ quantization_config=BitsAndBytesConfig({kwname}=True){moved_note}: the same "
                    "bitsandbytes quantization (exact)",
                    replacement=f"quantization_config={cfg}({', '.join(inner)})", fix=Applicability.SAFE,
                    edits=tuple(edits), add_imports=imports,
                    fix_title="use quantization_config=BitsAndBytesConfig(...)")

    def _hf_optim_names(self, node: cst.Call) -> None:
        """`optim="paged_adamw_8bit"` and `optim: str = field(default="paged_adamw_32bit")`."""
        site = self.assign_sites.get(id(node))
        target = src(self.ctx, site.target).rsplit(".", 1)[-1] if site is not None else ""
        option = any(isinstance(a.value, cst.SimpleString) and "optim" in str(literal(a.value))
                     for a in node.args if a.keyword is None)
        if any(a.keyword is not None and a.keyword.value == "choices" for a in node.args):
            option = False  # a changed default would fall outside the declared choices
        for arg in node.args:
            if arg.keyword is None or not isinstance(arg.value, cst.SimpleString):
                continue
            name = arg.keyword.value
            if name == "optim" or (name == "default" and (target == "optim" or option)):
                self._hf_optim(arg.value, fixable=True)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if id(node) not in self._optim_seen and literal(node) in HF_BNB_OPTIMS:
            self._hf_optim(node, fixable=False)
        value = literal(node)
        if isinstance(value, str) and is_dotted_path(value, "bitsandbytes"):
            advice = bnb_class_advice(value)
            if advice is not None:
                self._flag(node, "PRT426", f"bitsandbytes class named by a string ({value!r}): imported at run "
                           f"time, so it needs bitsandbytes; port the name and its arguments by hand: {advice}; "
                           f"or {self._rocm()}", data={"qualname": value})

    def _name_dispatch(self, node: cst.Call) -> None:
        """`name.startswith("bitsandbytes.")`: code that picks behaviour by a bnb class name."""
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "startswith" and node.args:
            value = literal(node.args[0].value)
            if isinstance(value, str) and (prefix_of(value, "bitsandbytes") or prefix_of(value, "bnb")):
                self._flag(node, "PRT426", f"dispatch on a bitsandbytes class name (`{src(self.ctx, node)}`): the "
                           "branch serves bnb classes named by strings elsewhere (a registry or config); port "
                           "those names and this branch together")

    def _peft(self, node: cst.Call, name: str) -> None:
        removed = (" It was deprecated and then removed from peft: the current name is "
                   "prepare_model_for_kbit_training (the oldest signature took output_embedding_layer_name and "
                   "layer_norm_names, so check the arguments)." if name == "prepare_model_for_int8_training" else "")
        self._flag(node, "PRT427", f"peft {name} prepares a bitsandbytes-quantized model (fp32 upcast of the "
                   f"non-quantized parameters, gradient checkpointing, input gradients).{removed} On ROCm keep "
                   f"{BNB_PIN}, or, if the model is no longer quantized, use model.gradient_checkpointing_enable() "
                   "and model.enable_input_require_grads() and decide about the fp32 upcast")

    def _hf_optim(self, node: cst.SimpleString, *, fixable: bool) -> None:
        self._optim_seen.add(id(node))
        name = literal(node)
        if name not in HF_BNB_OPTIMS:
            return
        target = HF_BNB_OPTIMS[name]
        base = f"transformers optimizer {name!r} is built from bitsandbytes"
        if target is None or self.strategy == "bitsandbytes-rocm" or not fixable:
            why = ("no torch equivalent" if target is None else
                   "strategy bitsandbytes-rocm" if self.strategy == "bitsandbytes-rocm" else
                   f"the string is not the value of optim= (the portable name is {target!r})")
            self._flag(node, "PRT425", f"{base}: {why}; {self._rocm()}")
            return
        diff = ("torchao's AdamW8bit: 8-bit blockwise moments with its own rounding, updates differ by the "
                "8-bit state quantization error; needs torchao" if target == "adamw_torch_8bit" else
                "torch AdamW with state in the parameter dtype (bnb: fp32 state); with weight decay bnb's GPU "
                "kernel decays after the update, a difference of lr*wd*update per step")
        self.report(node, "PRT425", f"{base} → {target!r} (approximation): {diff}",
                    replacement=f"{node.prefix}{node.quote}{target}{node.quote}", fix=Applicability.UNSAFE,
                    fix_title=f"use optim={target!r}")

    def visit_DictElement(self, node: cst.DictElement) -> None:
        key = literal(node.key) if isinstance(node.key, cst.SimpleString) else None
        if key in ("load_in_8bit", "load_in_4bit") and not is_literal(node.value, False):
            self._flag(node, "PRT424", f"{key!r} in a kwargs dict: a bitsandbytes quantization switch; "
                       f"transformers v5 removed `{key}=` from from_pretrained: pass "
                       f"quantization_config=BitsAndBytesConfig({key}=True) instead (not rewritten: porter "
                       "cannot see where the dict is used)")

    def _bnb_config(self, node: cst.Call) -> None:
        b = bind(node, BNB_CONFIG_PARAMS)
        eight = b.value("load_in_8bit")
        four = b.value("load_in_4bit")
        if b.star or b.extra_positional or b.unknown:
            self._flag(node, "PRT421", "BitsAndBytesConfig with unknown or hidden arguments; "
                       f"{self._rocm()}")
            return
        if is_literal(four, True):
            qnode = b.value("bnb_4bit_quant_type")
            q = literal(qnode) if qnode is not None else "fp4"
            qdesc = ("fp4 (the default bnb_4bit_quant_type, not nf4)" if qnode is None else
                     f"{q}" if q in ("fp4", "nf4") else "a non-literal quant type")
            cdt = b.value("bnb_4bit_compute_dtype")
            cdesc = ("bnb_4bit_compute_dtype=None means fp32 compute" if cdt is None or is_literal(cdt, None)
                     else f"compute dtype {src(self.ctx, cdt)}")
            why = ("fp4 has no torchao equivalent format" if q == "fp4" else
                   "nf4 has no stable TorchAoConfig path (torchao NF4 is a tensor, not a config)" if q == "nf4"
                   else "the 4-bit format is unknown")
            self._flag(node, "PRT421", f"BitsAndBytesConfig(load_in_4bit=True) uses {qdesc}; {cdesc}; {why}; "
                       f"{self._rocm()}", data={"quant_type": q if isinstance(q, str) else ""})
            return
        if not is_literal(eight, True):
            if (eight is None or is_literal(eight, False)) and (four is None or is_literal(four, False)):
                return  # a config with both modes off quantizes nothing
            self._flag(node, "PRT421", "BitsAndBytesConfig whose mode (load_in_8bit/load_in_4bit) is not a "
                       f"literal; {self._rocm()}")
            return
        problems = []
        offload = b.value("llm_int8_enable_fp32_cpu_offload")
        if offload is not None and not is_literal(offload, False):
            problems.append("llm_int8_enable_fp32_cpu_offload keeps modules in fp32 on the CPU")
        fp16w = b.value("llm_int8_has_fp16_weight")
        if fp16w is not None and not is_literal(fp16w, False):
            problems.append("llm_int8_has_fp16_weight trains fp16 weights (torchao weights are frozen int8)")
        if four is not None and not is_literal(four, False):
            problems.append("load_in_4bit is not a literal False")
        if problems or self.strategy == "bitsandbytes-rocm":
            reason = "; ".join(problems) if problems else "strategy bitsandbytes-rocm"
            self._flag(node, "PRT421", f"BitsAndBytesConfig(load_in_8bit=True): {reason}; {self._rocm()}")
            return
        ao, imports = reference(self.ctx, "transformers.TorchAoConfig", style="from")
        int8, more = reference(self.ctx, "torchao.quantization.Int8WeightOnlyConfig", style="from")
        kwargs = [("quant_type", f"{int8}()")]
        skip = b.value("llm_int8_skip_modules")
        if skip is not None and not is_literal(skip, None):
            kwargs.append(("modules_to_not_convert", src(self.ctx, skip)))
        thr = b.value("llm_int8_threshold")
        thr_text = src(self.ctx, thr) if thr is not None else "6.0 (the default)"
        multiline, indent = self.multiline(node)
        self.report(node, "PRT421",
                    "BitsAndBytesConfig(load_in_8bit=True) → TorchAoConfig(quant_type=Int8WeightOnlyConfig()) "
                    "(approximation): LLM.int8 multiplies int8 activations by int8 weights and keeps "
                    f"activation outliers above llm_int8_threshold={thr_text} in fp16; torchao keeps "
                    "activations in full precision with per-row int8 weights and no outlier path, so logits "
                    "differ by the int8 weight rounding (about 0.5% relative on a linear layer); "
                    "llm_int8_skip_modules → modules_to_not_convert; bnb_4bit_* options are unused in "
                    "8-bit mode; saved quantized checkpoints are not interchangeable",
                    replacement=render_call(ao, kwargs, multiline=multiline, indent=indent,
                                            comments=comments_of(b, {"llm_int8_skip_modules":
                                                                     "modules_to_not_convert"})),
                    fix=Applicability.UNSAFE, add_imports=imports + more,
                    remove_imports=("transformers.BitsAndBytesConfig",),
                    fix_title="use TorchAoConfig(Int8WeightOnlyConfig())")

    def _torchao_config(self, node: cst.Call) -> None:
        first = node.args[0] if node.args else None
        kw = {a.keyword.value: a for a in node.args if a.keyword is not None}
        arg = kw.get("quant_type") or (first if first is not None and first.keyword is None else None)
        if arg is None:
            return
        value = literal(arg.value)
        if isinstance(value, str):
            hint = TORCHAO_STRING_TYPES.get(value)
            advice = f"quant_type={hint}" if hint else "an AOBaseConfig instance from torchao.quantization"
            self._flag(arg, "PRT422", f"TorchAoConfig({value!r}): transformers 5 accepts only config "
                       f"instances; pass {advice} and move quant_type_kwargs into it")


PEFT_KBIT = {"prepare_model_for_kbit_training", "prepare_model_for_int8_training"}
_WALK = re.compile(r"\.(?:named_children|named_modules|children|modules)\(")
_ASSIGN_CHILD = re.compile(r"\bsetattr\(|\._modules\[|\.add_module\(")
_NN_ADVICE = {
    "Linear8bitLt": "torch.nn.Linear, then torchao.quantization.quantize_(model, Int8WeightOnlyConfig()) "
                    "(per-row int8 weights, no outlier path: an approximation)",
    "Linear4bit": "no exact torchao format (the default quant_type is fp4; nf4 only as torchao to_nf4)",
    "LinearNF4": "torchao to_nf4 weights (an independent nf4 implementation: an approximation)",
    "LinearFP4": "no torchao fp4 format",
    "Embedding": "torch.nn.Embedding with xavier_uniform_ initialisation",
    "StableEmbedding": "a module keeping weight, norm.weight and norm.bias (embedding + LayerNorm, xavier init)",
}


def bnb_class_advice(qual: str) -> str | None:
    """The portable class for a bitsandbytes class named by a string (None: not a known class)."""
    name = _bnb_name(qual, "bitsandbytes.optim")
    if name is not None:
        if name in ADAM_32:
            return ("torch.optim.AdamW with weight_decay written out (bnb decays decoupled; with weight_decay=0 "
                    "torch.optim.Adam is the same)")
        if name in ADAM_8:
            return ("torchao.optim.AdamW8bit with weight_decay written out (an approximation; never torchao's "
                    "coupled Adam8bit)")
        reason = NO_EQUIVALENT.get(name.replace("Paged", "").replace("8bit", "").replace("32bit", ""))
        return f"no verified equivalent: {reason}" if reason else None
    name = _bnb_name(qual, "bitsandbytes.nn")
    if name is not None:
        if name in _NN_ADVICE:
            return _NN_ADVICE[name]
        return "no portable equivalent (bitsandbytes' own quantization state)" if name in BNB_STATE_CLASSES else None
    return None


def check_yaml(ctx: FileContext) -> Iterator[Finding]:
    """Hydra `_target_:` / Lightning `class_path:` values (any YAML scalar) naming bitsandbytes classes."""
    for start, end, path in yaml_paths(ctx.text, "bitsandbytes"):
        advice = bnb_class_advice(path)
        if advice is not None:
            yield ctx.finding("PRT426", f"bitsandbytes class named in a config ({path}): instantiated at run time, "
                              f"so it needs bitsandbytes; port the target and its keys by hand: {advice}; or "
                              f"{ROCM_NOTE}", start, end, data={"qualname": path})


