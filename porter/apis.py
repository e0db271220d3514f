"""The one place that says which release first provides each API porter's fixes emit.

The semantic gate (:mod:`porter.gate`) compares every fixed module with the module before the
fix: a qualified name (or a keyword argument of a call) that the fix introduces is looked up
here, and its minimum version is checked against the pins of the file's nearest manifest. A
fix may also declare extra requirements itself (``Finding.requires``); both end up in the same
check. Nothing else in porter keeps a copy of these versions.

Keys are dotted qualified names; a key covers itself and everything below it
(``torchao.optim`` covers ``torchao.optim.AdamW8bit``); the longest matching key wins.
``name(keyword)`` keys cover one keyword argument of a call.

The migration target (:data:`DEFAULT_TARGET_TORCH`, :data:`DEFAULT_TARGET_ROCM`) is declared
here too: the newest stable torch release with ROCm wheels on download.pytorch.org that porter's
index matrix knows (``codemods/dependencies/catalog.py`` ``TORCH_ROCM_INDEXES``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

# ``porter migrate`` ports against this torch unless told otherwise (--target-torch,
# --config target-torch=...): torch 2.10 (January 2026) is published for ROCm 7.0 and 7.1; 7.1 is
# the newer. Newer torch releases are left out until their ROCm index is in the matrix.
DEFAULT_TARGET_TORCH = "2.10"
DEFAULT_TARGET_ROCM = "7.1"

# qualified name (or ``name(keyword)``) -> requirements its use needs
MIN_VERSIONS: Mapping[str, tuple[str, ...]] = {
    # torch: attention
    "torch.nn.functional.scaled_dot_product_attention": ("torch>=2.0",),
    "torch.nn.functional.scaled_dot_product_attention(scale)": ("torch>=2.1",),
    "torch.nn.functional.scaled_dot_product_attention(enable_gqa)": ("torch>=2.5",),
    "torch.nn.attention": ("torch>=2.3",),
    "torch.nn.attention.bias": ("torch>=2.3",),
    "torch.nn.attention.flex_attention": ("torch>=2.5",),
    "torch.nn.attention.varlen": ("torch>=2.12",),
    # torch: norms, optimizers, amp
    "torch.nn.RMSNorm": ("torch>=2.4",),
    "torch.nn.modules.normalization.RMSNorm": ("torch>=2.4",),
    "torch.nn.functional.rms_norm": ("torch>=2.4",),
    "torch.optim.AdamW(fused)": ("torch>=2.0",),
    "torch.optim.Adam(fused)": ("torch>=1.13",),
    "torch.optim.Adam(decoupled_weight_decay)": ("torch>=2.7",),  # AdamW became Adam with this flag in 2.7
    "torch.optim.SGD(fused)": ("torch>=2.3",),
    "torch.optim.Adagrad(fused)": ("torch>=2.12",),  # the fused GPU kernel arrived in 2.12
    "torch.nn.functional.cross_entropy(label_smoothing)": ("torch>=1.10",),
    "torch.amp.autocast": ("torch>=1.12",),  # torch.cuda.amp.autocast is 1.6, the torch.amp module 1.12
    "torch.amp.GradScaler": ("torch>=2.3",),
    "torch.amp.custom_fwd": ("torch>=2.4",),
    "torch.amp.custom_bwd": ("torch>=2.4",),
    "torch.get_autocast_dtype": ("torch>=2.4",),
    # DDP's replacement for broadcast_buffers (a TypeError before 2.13)
    "torch.nn.parallel.DistributedDataParallel(forward_sync_buffers)": ("torch>=2.13",),
    # torch: telemetry helpers
    "torch.cuda.mem_get_info": ("torch>=1.10",),
    "torch.cuda.utilization": ("torch>=2.2",),
    "torch.cuda.memory_usage": ("torch>=2.2",),
    "torch.cuda.temperature": ("torch>=2.2",),
    "torch.cuda.power_draw": ("torch>=2.2",),
    "torch.cuda.clock_rate": ("torch>=2.2",),
    "torch.cuda.device_memory_used": ("torch>=2.6",),
    # torch: distributed
    "torch.distributed.fsdp.fully_shard": ("torch>=2.6",),
    "torch.distributed._composable.fsdp": ("torch>=2.4",),
    # torchao (every API porter emits lives in releases built for torch >= 2.5)
    "torchao": ("torchao>=0.10",),
    "torchao.optim": ("torchao>=0.11",),
    "torchao.quantization.quantize_": ("torchao>=0.10",),
    "torchao.quantization.Int8WeightOnlyConfig": ("torchao>=0.10",),
    "torchao.quantization.Int8DynamicActivationInt8WeightConfig": ("torchao>=0.10",),
    "torchao.quantization.Int4WeightOnlyConfig": ("torchao>=0.10",),
    "torchao.float8": ("torchao>=0.10",),
    "torchao.dtypes.to_nf4": ("torchao>=0.10",),
    # transformers
    "transformers.BitsAndBytesConfig": ("transformers>=4.30",),
    "transformers.utils.quantization_config.BitsAndBytesConfig": ("transformers>=4.30",),
    # TorchAoConfig exists from 4.45; a torchao config *instance* as quant_type needs 4.51
    "transformers.TorchAoConfig": ("transformers>=4.51", "torchao>=0.10"),
    "transformers.utils.quantization_config.TorchAoConfig": ("transformers>=4.51", "torchao>=0.10"),
    # accelerate / peft / diffusers symbols porter may emit
    "accelerate.utils.BnbQuantizationConfig": ("accelerate>=0.22",),
    "peft.prepare_model_for_kbit_training": ("peft>=0.4",),
    "diffusers.models.attention_processor.AttnProcessor2_0": ("diffusers>=0.14", "torch>=2.0"),
}

# String settings whose *values* need a release, however they are written (keyword, item, attribute,
# dict literal): the setting's names -> the key used in MIN_VERSIONS ("attn_implementation=sdpa").
SETTING_KEYS: Mapping[str, str] = {
    "attn_implementation": "attn_implementation", "_attn_implementation": "attn_implementation",
}
SETTING_VERSIONS: Mapping[str, tuple[str, ...]] = {
    "attn_implementation=sdpa": ("transformers>=4.36",),
    "attn_implementation=flex_attention": ("transformers>=4.48",),
}

# What a distribution's releases need themselves, keyed by "dist" or "dist>=X" (from release X on):
# torchao builds track torch releases; transformers pins its tokenizers and hub client tightly, so
# raising transformers past a pinned tokenizers would leave an environment pip cannot resolve.
DIST_NEEDS: Mapping[str, tuple[str, ...]] = {
    "torchao": ("torch>=2.5",),
    "bitsandbytes>=0.50": ("torch>=2.4",),
    "transformers>=4.51": ("tokenizers>=0.21", "huggingface-hub>=0.30"),
}

# import name -> distribution, where they differ (the rest: the dist with "-" as "_")
MODULE_DISTS: Mapping[str, str] = {
    "yaml": "pyyaml", "sklearn": "scikit-learn", "PIL": "pillow", "cv2": "opencv-python",
    "pynvml": "nvidia-ml-py", "flash_attn": "flash-attn", "flash_attn_2_cuda": "flash-attn",
    "transformer_engine": "transformer-engine", "google": "protobuf", "attr": "attrs",
    "skimage": "scikit-image", "bs4": "beautifulsoup4", "dateutil": "python-dateutil",
    "sentencepiece": "sentencepiece", "wandb": "wandb", "amdsmi": "amdsmi",
}
# distributions that provide one import name under several distribution names
DIST_ALIASES: Mapping[str, tuple[str, ...]] = {
    "pynvml": ("nvidia-ml-py", "nvidia-ml-py3", "pynvml"),
    "cv2": ("opencv-python", "opencv-python-headless", "opencv-contrib-python", "opencv-contrib-python-headless"),
    "transformer_engine": ("transformer-engine", "transformer-engine-torch", "transformer-engine-cu12"),
    "torch": ("torch",),
}


def dists_for_module(module: str) -> tuple[str, ...]:
    """Distribution names that can provide the top-level import ``module``."""
    root = module.split(".")[0]
    if root in DIST_ALIASES:
        return DIST_ALIASES[root]
    mapped = MODULE_DISTS.get(root)
    if mapped:
        return (mapped,)
    return (canonicalize_name(root),)


def _lookup(key: str) -> tuple[str, ...]:
    """Requirements of the longest catalogue key covering ``key``."""
    if "=" in key:
        return SETTING_VERSIONS.get(key, ())
    name, paren, kw = key.partition("(")
    if paren:
        return MIN_VERSIONS.get(key, ())
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        hit = MIN_VERSIONS.get(".".join(parts[:n]))
        if hit is not None:
            return hit
    return ()


def requirements_for(symbols: Iterable[str], extra: Iterable[str] = ()) -> dict[str, tuple[Requirement, str]]:
    """dist -> (the strictest requirement, the symbol that needs it) for these emitted symbols.

    ``extra`` are requirement texts a fix declared itself. Requirements of a distribution
    (``DIST_NEEDS``) are added for each one named.
    """
    out: dict[str, tuple[Requirement, str]] = {}

    def add(text: str, why: str) -> None:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            return
        dist = canonicalize_name(req.name)
        floor = minimum(req)
        have = out.get(dist)
        if have is None or (floor is not None and (minimum(have[0]) or Version("0")) < floor):
            out[dist] = (req, why)

    for sym in sorted(set(symbols)):
        for text in _lookup(sym):
            add(text, sym)
    for text in extra:
        add(text, "the fix")
    done: set[str] = set()
    changed = True
    while changed:  # transitively: a need can bring needs of its own
        changed = False
        for key, texts in DIST_NEEDS.items():
            trigger = Requirement(key)
            dist = canonicalize_name(trigger.name)
            have = out.get(dist)
            if have is None or key in done:
                continue
            floor, need = minimum(trigger), minimum(have[0])
            if floor is not None and (need is None or need < floor):
                continue
            done.add(key)
            changed = True
            for text in texts:
                add(text, f"{have[0]} (whose releases need {text})" if floor is not None else
                    f"{dist} (its releases with the APIs porter emits are built for {text})")
    return out


def minimum(req: Requirement) -> Version | None:
    """The lowest version a ``>=``/``==`` requirement admits (None when it has no floor)."""
    best: Version | None = None
    for spec in req.specifier:
        if spec.operator in (">=", "==", "~=", "==="):
            try:
                v = Version(spec.version.replace(".*", ""))
            except InvalidVersion:
                continue
            best = v if best is None or v > best else best
    return best


def pin_guarantees(pin: str, floor: Version) -> bool:
    """Whether every release a pinned specifier admits is >= ``floor`` (``torch>=2`` admits 2.0,
    so it does not guarantee 2.5). An empty or unreadable specifier guarantees nothing."""
    pin = pin.strip()
    if not pin:
        return False
    try:
        sset = SpecifierSet(pin)
    except InvalidSpecifier:
        return False
    below = []
    for spec in sset:
        try:
            v = Version(spec.version.replace(".*", ""))
        except InvalidVersion:
            continue
        below.append(Version(v.public))
        below.append(v)
    for major in range(0, floor.major + 1):
        for minor in range(0, 40):
            for micro in (0, 1, 2, 9):
                below.append(Version(f"{major}.{minor}.{micro}"))
    return not any(sset.contains(v, prereleases=True) for v in below if v < floor)


def pin_admits(pin: str, floor: Version) -> bool:
    """Whether a pinned specifier (``==2.1.1+cu121``, ``<2.3``, ``~=4.37``) admits a release >= floor.

    An empty or unreadable specifier admits everything: porter cannot tell, so it does not block.
    """
    pin = pin.strip()
    if not pin:
        return True
    try:
        sset = SpecifierSet(pin)
    except InvalidSpecifier:
        return True
    candidates = [floor]
    for spec in sset:
        try:
            v = Version(spec.version.replace(".*", ""))
        except InvalidVersion:
            continue
        candidates.append(Version(v.public))
        if v >= floor:
            candidates.append(v)
    # a few releases above the floor, so "<X" and "!=" forms are judged fairly
    rel = floor.release + (0,) * (3 - len(floor.release))
    for bump in range(0, 40):
        candidates.append(Version(f"{rel[0]}.{rel[1] + bump}.0"))
    return any(sset.contains(c, prereleases=True) for c in candidates if c >= floor)


__all__ = [
    "DEFAULT_TARGET_ROCM",
    "DEFAULT_TARGET_TORCH",
    "DIST_NEEDS",
    "MIN_VERSIONS",
    "SETTING_KEYS",
    "SETTING_VERSIONS",
    "dists_for_module",
    "minimum",
    "pin_admits",
    "requirements_for",
]
