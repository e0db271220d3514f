"""
Pre-training script for legacy-gpt.

Single GPU:
    python train.py --config configs/gpt2_small.yaml
DDP, one node with 8 GPUs (see scripts/launch.sh for the cluster settings):
    torchrun --standalone --nproc_per_node=8 train.py --config configs/gpt2_small.yaml
"""

import argparse
import math
import os
import time
from contextlib import nullcontext

import numpy as np
import torch
import torch.distributed as dist
import yaml
from apex.optimizers import FusedAdam
from torch.nn.parallel import DistributedDataParallel as DDP

from model import GPT, GPTConfig
from utils.gpu_monitor import GPUMonitor


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/gpt2_small.yaml")
    p.add_argument("--data-dir", default="data/openwebtext")
    p.add_argument("--out-dir", default="out")
    p.add_argument("--batch-size", type=int, default=12, help="micro batch per GPU")
    p.add_argument("--grad-accum", type=int, default=40)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--min-lr", type=float, default=6e-5)
    p.add_argument("--warmup-iters", type=int, default=2000)
    p.add_argument("--max-iters", type=int, default=600000)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    p.add_argument("--use-8bit", action="store_true", help="bitsandbytes 8-bit Adam (saves ~75%% optimizer memory)")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--seed", type=int, default=1337)
    return p.parse_args(argv)


def load_config(path, **overrides):
    with open(path) as f:
        cfg = yaml.safe_load(f)
    cfg = {k: v for k, v in cfg.get("model", cfg).items()}
    cfg.update(overrides)
    return GPTConfig(**cfg)


def setup_precision(requested="auto"):
    # TF32 matmuls are ~free accuracy-wise for LM training and 2-3x faster on Ampere
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    if requested != "auto":
        return getattr(torch, requested)
    if torch.cuda.get_device_capability()[0] >= 8:  # A100/H100: native bf16
        return torch.bfloat16
    return torch.float16  # V100/T4: fp16 + GradScaler


def default_micro_batch(batch_size):
    # the 80GB parts fit twice the micro batch of the 40GB ones at 2k context
    name = torch.cuda.get_device_name()
    if ("A100" in name and "80GB" in name) or "H100" in name:
        return batch_size * 2
    return batch_size


def build_optimizer(model, args):
    betas = (args.beta1, args.beta2)
    if args.weight_decay > 0:
        params = model.configure_optimizer_groups(args.weight_decay)
    else:
        params = model.parameters()
    if args.use_8bit:
        import bitsandbytes as bnb

        return bnb.optim.Adam8bit(params, lr=args.lr, betas=betas, weight_decay=args.weight_decay)
    return FusedAdam(params, lr=args.lr, betas=betas, eps=1e-8)


def get_lr(it, args):
    if it < args.warmup_iters:
        return args.lr * (it + 1) / (args.warmup_iters + 1)
    if it > args.max_iters:
        return args.min_lr
    ratio = (it - args.warmup_iters) / (args.max_iters - args.warmup_iters)
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (args.lr - args.min_lr)


def get_batch(data, block_size, batch_size, device):
    ix = torch.randint(len(data) - block_size - 1, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    if device.startswith("cuda"):
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


def train_step(model, batches, optimizer, scaler=None, ctx=None, grad_clip=1.0):
    """One optimizer step over ``batches`` (a list of (x, y) micro batches). Returns the mean loss."""
    ctx = ctx or nullcontext()
    total = 0.0
    for x, y in batches:
        with ctx:
            _, loss = model(x, targets=y)
            loss = loss / len(batches)
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        total += loss.item()
    if grad_clip > 0:
        if scaler is not None:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total


def main(argv=None):
    args = get_args(argv)
    ddp = int(os.environ.get("RANK", -1)) != -1
    if ddp:
        dist.init_process_group(backend="nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(device)
        master = dist.get_rank() == 0
    else:
        local_rank, device, master = 0, "cuda", True
    torch.manual_seed(args.seed + local_rank)

    ptdtype = setup_precision(args.dtype)
    ctx = torch.cuda.amp.autocast(dtype=ptdtype) if ptdtype != torch.float32 else nullcontext()
    scaler = torch.cuda.amp.GradScaler(enabled=(ptdtype == torch.float16))

    config = load_config(args.config)
    model = GPT(config).to(device)
    if master:
        print(f"{model.num_params() / 1e6:.1f}M parameters, dtype {ptdtype}")
    optimizer = build_optimizer(model, args)
    if args.compile:
        model = torch.compile(model)
    if ddp:
        model = DDP(model, device_ids=[local_rank])

    data = np.memmap(os.path.join(args.data_dir, "train.bin"), dtype=np.uint16, mode="r")
    batch_size = default_micro_batch(args.batch_size)
    monitor = GPUMonitor(local_rank) if master else None

    t0 = time.time()
    for it in range(args.max_iters):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it, args)
        batches = [get_batch(data, config.block_size, batch_size, device) for _ in range(args.grad_accum)]
        loss = train_step(model, batches, optimizer, scaler, ctx, args.grad_clip)
        if master and it % args.log_interval == 0:
            dt, t0 = time.time() - t0, time.time()
            stats = monitor.log(it)
            print(f"iter {it}: loss {loss:.4f}, {dt * 1000:.0f} ms, {stats['gpu/power_w']:.0f} W")
        if master and it > 0 and it % 5000 == 0:
            raw = model.module if ddp else model
            os.makedirs(args.out_dir, exist_ok=True)
            torch.save({"model": raw.state_dict(), "config": vars(config), "iter": it},
                       os.path.join(args.out_dir, "ckpt.pt"))
    if monitor is not None:
        monitor.close()
    if ddp:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
