"""The legacy example repository (examples/legacy-gpt) and helpers for end-to-end migration tests.

``examples/legacy-gpt`` is a CUDA-locked research repo: flash-attn with an xformers fallback,
apex norms and FusedAdam, bitsandbytes 8-bit Adam, pynvml telemetry, capability checks, a custom
CUDA extension with warp-size hazards, CUDA-pinned requirements, a Dockerfile and NCCL launch
script. Its own test-suite runs on CPU through pure-torch doubles of the CUDA-only packages in
``examples/legacy-gpt/tests/doubles``.

:func:`run_model_outputs` loads the model from any copy of that repo (the original, or the tree
``porter apply`` produced) in a fresh interpreter and returns its prefill and decode logits, so a
migration test can compare "original + doubles" with "migrated + plain torch".
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "legacy-gpt"

# Top-level modules that must not be importable in a "plain torch" run.
CUDA_ONLY_MODULES = ("flash_attn", "xformers", "apex", "bitsandbytes", "pynvml", "transformer_engine")

# The tiny model every comparison uses (kept here, not read from the repo, so a migration that
# touches configs/ cannot change what is compared).
TINY_CONFIG = dict(vocab_size=96, block_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, mlp_ratio=2.0,
                   dropout=0.0, bias=False, mup_attn=True)
PROMPT_LEN = 8
DECODE_STEPS = 4

_DRIVER = textwrap.dedent(
    '''
    import importlib.abc
    import sys

    repo, use_doubles, out_path, train_steps = sys.argv[1], sys.argv[2] == "1", sys.argv[3], int(sys.argv[4])
    blocked = set(sys.argv[5].split(","))
    config = eval(sys.argv[6])
    prompt_len, decode_steps, use_flash = int(sys.argv[7]), int(sys.argv[8]), sys.argv[9] == "1"

    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked: plain-torch run)", name=name)
            return None

    if use_doubles:
        sys.path.insert(0, repo + "/tests/doubles")
    else:
        sys.meta_path.insert(0, _Block())
    sys.path.insert(0, repo)

    import torch

    torch.set_num_threads(1)
    from model import GPT, GPTConfig

    out = {}
    g = torch.Generator().manual_seed(99)
    tokens = torch.randint(0, config["vocab_size"], (2, prompt_len + decode_steps), generator=g)
    torch.manual_seed(1234)
    model = GPT(GPTConfig(use_flash=use_flash, **config)).eval()
    with torch.no_grad():
        out["full"] = model(tokens)[0]
        cache = model.new_kv_cache(2, max_len=prompt_len + decode_steps)
        out["prefill"] = model(tokens[:, :prompt_len], kv_cache=cache, start_pos=0)[0]
        for i in range(decode_steps):
            pos = prompt_len + i
            out[f"decode_{i}"] = model(tokens[:, pos:pos + 1], kv_cache=cache, start_pos=pos)[0][:, 0]

    if train_steps:
        import train

        torch.manual_seed(4321)
        model = GPT(GPTConfig(use_flash=use_flash, **config)).train()
        args = train.get_args(["--lr", "3e-3"])
        optimizer = train.build_optimizer(model, args)
        x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        out["train/losses"] = torch.tensor([train.train_step(model, [(x, y)], optimizer)
                                            for _ in range(train_steps)])
        out["train/lm_head"] = model.lm_head.weight.detach().clone()

    torch.save({k: v.detach().cpu() for k, v in out.items()}, out_path)
    '''
)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LEGACY_GPT_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def run_model_outputs(repo_dir: str | os.PathLike[str], use_doubles: bool, *, use_flash: bool = True,
                      train_steps: int = 0, timeout: float = 120.0) -> dict[str, torch.Tensor]:
    """Prefill and decode logits of the example's tiny GPT, loaded from ``repo_dir``.

    Runs in a fresh interpreter with ``repo_dir`` first on ``sys.path`` and a fixed seed. With
    ``use_doubles`` the repo's ``tests/doubles`` stand in for the CUDA-only packages; without,
    importing any of :data:`CUDA_ONLY_MODULES` raises ``ModuleNotFoundError`` (a plain-torch run,
    as on a ROCm machine). ``use_flash`` is the model config switch: True takes the flash-attn
    branch of ``CausalSelfAttention.forward``, False the xformers fallback. Keys:

    - ``full``: (2, PROMPT_LEN + DECODE_STEPS, vocab) logits of one uncached forward;
    - ``prefill``: (2, PROMPT_LEN, vocab) logits of the prompt written into a fresh KV cache;
    - ``decode_0`` ... ``decode_{DECODE_STEPS-1}``: (2, vocab) logits of one-token steps against
      the cache (the causal-alignment trap: one query against a longer cache);
    - with ``train_steps > 0``: ``train/losses`` (train.train_step with train.build_optimizer's
      default optimizer) and ``train/lm_head`` (the weights after those steps).

    Raises ``RuntimeError`` with the child's stderr when the repo fails to load or run.
    """
    repo = Path(repo_dir).resolve()
    with tempfile.TemporaryDirectory(prefix="porter-example-") as tmp:
        driver = Path(tmp) / "driver.py"
        driver.write_text(_DRIVER, encoding="utf-8")
        out_path = Path(tmp) / "outputs.pt"
        cmd = [sys.executable, str(driver), str(repo), "1" if use_doubles else "0", str(out_path),
               str(train_steps), ",".join(CUDA_ONLY_MODULES), repr(TINY_CONFIG), str(PROMPT_LEN),
               str(DECODE_STEPS), "1" if use_flash else "0"]
        proc = subprocess.run(cmd, cwd=str(repo), env=_clean_env(TMPDIR=tmp), capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"loading the model from {repo} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        return torch.load(out_path, weights_only=True)


# -- the example's own test-suite ---------------------------------------------------------------


def test_original_runs_with_doubles(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=str(EXAMPLE), env=_clean_env(TMPDIR=str(tmp_path)), capture_output=True, text=True, timeout=300,
    )
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    m = re.search(r"(\d+) passed", proc.stdout)
    assert m and int(m.group(1)) >= 25, tail
    assert "skipped" not in proc.stdout and "failed" not in proc.stdout, tail


def test_model_outputs_with_doubles_are_self_consistent() -> None:
    out = run_model_outputs(EXAMPLE, use_doubles=True, train_steps=2)
    xformers = run_model_outputs(EXAMPLE, use_doubles=True, use_flash=False)
    for run in (out, xformers):
        full = run["full"]
        assert full.shape == (2, PROMPT_LEN + DECODE_STEPS, TINY_CONFIG["vocab_size"])
        torch.testing.assert_close(run["prefill"], full[:, :PROMPT_LEN], rtol=1e-5, atol=1e-5)
        for i in range(DECODE_STEPS):
            torch.testing.assert_close(run[f"decode_{i}"], full[:, PROMPT_LEN + i], rtol=1e-5, atol=1e-5)
    for key in xformers:
        torch.testing.assert_close(xformers[key], out[key], rtol=1e-5, atol=1e-5)
    losses = out["train/losses"]
    assert losses.shape == (2,) and torch.isfinite(losses).all() and losses[1] < losses[0]


def test_plain_torch_run_of_the_original_fails() -> None:
    # negative control: without doubles the original cannot import its CUDA-only packages
    with pytest.raises(RuntimeError, match=r"No module named '(apex|flash_attn|xformers)"):
        run_model_outputs(EXAMPLE, use_doubles=False)


# -- what the example contains (the lock-in porter must find) -----------------------------------

# file -> fragments that must stay in the example (porter's families are verified against them)
LOCK_IN = {
    "model.py": [
        "from flash_attn import flash_attn_func",
        "import xformers.ops as xops",
        "flash_attn_func(q, k, v, dropout_p, softmax_scale=self.softmax_scale, causal=True)",
        "xops.memory_efficient_attention(q, k, v, attn_bias, dropout_p, self.softmax_scale)",
        "xops.LowerTriangularMask()",
        "from apex.normalization import FusedLayerNorm, FusedRMSNorm",
        "FusedRMSNorm(config.n_embd)",
        "FusedLayerNorm(config.n_embd, eps=config.norm_eps)",
        "y = y.view(B, T, C)",
    ],
    "train.py": [
        "from apex.optimizers import FusedAdam",
        "FusedAdam(params, lr=args.lr, betas=betas, eps=1e-8)",
        "import bitsandbytes as bnb",
        "bnb.optim.Adam8bit(params, lr=args.lr, betas=betas, weight_decay=args.weight_decay)",
        "torch.cuda.get_device_capability()[0] >= 8",
        '"A100" in name',
        "torch.backends.cuda.matmul.allow_tf32 = True",
        "torch.cuda.amp.autocast(dtype=ptdtype)",
        "torch.cuda.amp.GradScaler(",
        'dist.init_process_group(backend="nccl")',
    ],
    "utils/gpu_monitor.py": [
        "import pynvml",
        "pynvml.nvmlDeviceGetPowerUsage(self.handle)",
        "power_mw / 1000.0",
        "pynvml.nvmlDeviceGetMemoryInfo(self.handle)",
        "pynvml.nvmlDeviceGetUtilizationRates(self.handle)",
    ],
    "kernels/fused_softmax.cuh": [
        "#define WARP_SIZE 32",
        "for (int offset = 16; offset > 0; offset >>= 1)",
        "__shfl_xor_sync(0xffffffff, val, offset)",
        "__shared__ T warp_sums[32];",
        "threadIdx.x & 31",
        "threadIdx.x / 32",
        "blockDim.x / WARP_SIZE",
        "if (warp == 0) val = warp_reduce_sum(val);",  # shuffle under a lane-dependent branch
    ],
    "kernels/fused_softmax.cu": [
        "const unsigned any_valid = __ballot_sync(0xffffffff, limit >= lane);",
        "__popc(any_valid)",
        "__shfl_sync(0xffffffff, s, 0)",
        "c += WARP_SIZE",
        "kThreadsPerBlock / 32",
    ],
    "setup.py": ["CUDAExtension(", '"arch=compute_80,code=sm_80"', '"--use_fast_math"'],
    "requirements.txt": [
        "--extra-index-url https://download.pytorch.org/whl/cu121",
        "torch==2.1.0+cu121",
        "flash-attn==2.5.6",
        "xformers==",
        "apex @ git+https://github.com/NVIDIA/apex.git",
        "bitsandbytes==",
        "pynvml==",
        "nvidia-cublas-cu12==",
    ],
    "Dockerfile": ["FROM nvcr.io/nvidia/pytorch:23.10-py3", "TORCH_CUDA_ARCH_LIST"],
    "scripts/launch.sh": ["NCCL_IB_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SOCKET_IFNAME", "docker run --rm --gpus all"],
}


# Literals that look like warp sizes but are not (a 32 outside a warp context: the decision rule in
# codemods/warp_size/engine.py): the warp-size family must report nothing on the lines holding these fragments.
WARP_LOOK_ALIKES = {
    "kernels/fused_softmax.cuh": [
        "#define TILE_DIM 32",  # transpose tile edge
        "#define HEAD_DIM_SMALL 32",  # model head dim
        "struct alignas(32) SoftmaxParams",  # alignment in bytes
        "static_cast<uint32_t>(seed & 0xffffffffull)",  # low half of a 64-bit seed
        "static_cast<uint32_t>(seed >> 32)",  # high half of a 64-bit seed
    ],
    "kernels/fused_softmax.cu": [
        "__shared__ float tile[32][33];",  # bank-conflict padding
        "const dim3 block(TILE_DIM, BLOCK_ROWS);",  # blockDim (32, 8), no warp intrinsics
        "const dim3 block(32, heads);",  # head_dim 64 / 2 threads, no warp intrinsics
        "rotary_kernel<HEAD_DIM_SMALL>",  # head-dim template instantiation
        "static_cast<int64_t>(row) * p.cols",  # 64-bit offsets
    ],
}


def fragment_lines(relpath: str, fragments: list[str]) -> dict[str, int]:
    """1-based line of each fragment in the example file (for line-level expectations)."""
    lines = (EXAMPLE / relpath).read_text(encoding="utf-8").splitlines()
    found = {}
    for frag in fragments:
        hits = [i for i, line in enumerate(lines, 1) if frag in line]
        assert hits, f"{relpath}: {frag!r} not found"
        found[frag] = hits[0]
    return found


@pytest.mark.parametrize("relpath", sorted(WARP_LOOK_ALIKES))
def test_example_keeps_its_look_alikes(relpath: str) -> None:
    assert len(fragment_lines(relpath, WARP_LOOK_ALIKES[relpath])) == len(WARP_LOOK_ALIKES[relpath])


@pytest.mark.parametrize("relpath", sorted(LOCK_IN))
def test_example_keeps_its_lock_in(relpath: str) -> None:
    text = (EXAMPLE / relpath).read_text(encoding="utf-8")
    missing = [frag for frag in LOCK_IN[relpath] if frag not in text]
    assert not missing, f"{relpath} lost: {missing}"


@pytest.mark.slow
def test_example_kernel_compiles_with_nvcc(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    proc = subprocess.run(
        [nvcc, "-arch=sm_80", "-c", str(EXAMPLE / "kernels" / "fused_softmax.cu"), "-o", str(tmp_path / "k.o")],
        cwd=str(EXAMPLE / "kernels"), env=_clean_env(TMPDIR=str(tmp_path)), capture_output=True, text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "k.o").stat().st_size > 0
