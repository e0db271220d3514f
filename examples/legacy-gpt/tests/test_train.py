import math
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_model

import train
from utils.gpu_monitor import GPUMonitor


def _args(**kw):
    args = train.get_args([])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def _batch(vocab, seed=0, b=2, t=16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (b, t + 1), generator=g)
    return x[:, :-1].contiguous(), x[:, 1:].contiguous()


def test_one_training_step_with_fused_adam():
    model = tiny_model(seed=11).train()
    opt = train.build_optimizer(model, _args(lr=3e-3))
    assert type(opt).__name__ == "FusedAdam"
    assert all(g["weight_decay"] == 0.0 for g in opt.param_groups)
    before = [p.detach().clone() for p in model.parameters()]
    batches = [_batch(model.config.vocab_size, seed=s) for s in range(2)]
    losses = [train.train_step(model, batches, opt, grad_clip=1.0) for _ in range(4)]
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())  # zero_grad(set_to_none=True)


def test_weight_decay_groups():
    model = tiny_model(seed=12)
    opt = train.build_optimizer(model, _args(weight_decay=0.1))
    assert sorted(g["weight_decay"] for g in opt.param_groups) == [0.0, 0.1]


def test_one_training_step_with_8bit_adam():
    model = tiny_model(seed=13).train()
    opt = train.build_optimizer(model, _args(use_8bit=True, lr=3e-3, weight_decay=0.1))
    assert type(opt).__name__ == "Adam8bit"
    loss = train.train_step(model, [_batch(model.config.vocab_size)], opt)
    assert math.isfinite(loss)


def test_lr_schedule():
    args = _args(lr=1.0, min_lr=0.1, warmup_iters=10, max_iters=110)
    assert train.get_lr(0, args) < train.get_lr(9, args) <= 1.0
    assert train.get_lr(10, args) == pytest.approx(1.0)
    assert train.get_lr(110, args) == pytest.approx(0.1)


def test_load_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  n_layer: 3\n  n_head: 4\n  n_kv_head: 1\n  n_embd: 32\n")
    c = train.load_config(str(cfg), block_size=16)
    assert (c.n_layer, c.n_kv_head, c.head_dim, c.block_size) == (3, 1, 8, 16)


def test_gpu_monitor_reports_watts_and_gigabytes():
    mon = GPUMonitor(0)
    stats = mon.snapshot()
    assert "A100" in mon.name
    assert stats["gpu/power_w"] == pytest.approx(287.5)  # NVML reports milliwatts
    assert stats["gpu/mem_used_gb"] == pytest.approx(12.0)
    assert 0 <= stats["gpu/util_pct"] <= 100
    assert mon.log(step=1)["gpu/temp_c"] == 61
    mon.close()


def test_train_step_with_grad_scaler_disabled():
    model = tiny_model(seed=14).train()
    opt = train.build_optimizer(model, _args())
    scaler = SimpleNamespace(
        scale=lambda loss: loss, unscale_=lambda o: None, step=lambda o: o.step(), update=lambda: None)
    assert math.isfinite(train.train_step(model, [_batch(model.config.vocab_size)], opt, scaler=scaler))
