"""The built-in trainer of ``framework: pytorch``: the small CNN under Ray Train's TorchTrainer (DDP, gloo on CPU)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from training.errors import SpecError
from training.frameworks.base import Framework

if TYPE_CHECKING:
    from training.runtime.worker import WorkerContext

MODEL_FILE = "model.pt"


def _allreduce_sum(values, device):
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def train(ctx: WorkerContext) -> None:
    import torch

    
    torch.manual_seed(ctx.seed)
    torch.set_num_threads(ctx.threads)
    shard = ctx.data()
    mc = ctx.model
    model = build_cnn(shard.input_shape, shard.num_classes, mc.filters, mc.dense, mc.conv_dropout, mc.dense_dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=ctx.lr)

    def load(directory: str) -> None:
        state = torch.load(ctx.checkpoint_file(MODEL_FILE), map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    if not ctx.restore(load) and ctx.rank == 0:
        ctx.log(f"pytorch CNN {list(mc.filters)}/{mc.dense}: {count_parameters(model):,} parameters; "
                f"{ctx.world_size} worker(s) x {len(shard.x_train)} training samples "
                f"({shard.source}, input {shard.input_shape})")
    bare = model
    device = ctx.device()
    model = ctx.prepare_model(model)  # moves to device, wraps in DDP when world_size > 1
    x_train, y_train, x_val, y_val = (_nchw(shard.x_train), torch.from_numpy(shard.y_train),
                                      _nchw(shard.x_val), torch.from_numpy(shard.y_val))

    def evaluate():
        return _evaluate(bare, x_val, y_val, device)

    def save(directory: str) -> None:
        torch.save({"model": bare.state_dict(), "optimizer": optimizer.state_dict()}, os.path.join(directory, MODEL_FILE))

    for epoch in ctx.epochs():
        metrics = _train_epoch(ctx, epoch, model, optimizer, x_train, y_train, device)
        ctx.report(epoch, {**metrics, **evaluate()}, save=save)

    if not ctx.trained_epochs:
        ctx.record_evaluation(evaluate())


def _nchw(images):
    """NHWC numpy images as a contiguous NCHW tensor (what Conv2d takes)."""
    import torch

    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()


def _train_epoch(ctx: WorkerContext, epoch: int, model, optimizer, x_train, y_train, device) -> dict:
    """One pass over this worker's shard in batches of its share of the global batch; loss, accuracy, samples and
    steps summed over all workers."""
    import torch
    import torch.nn.functional as F

    n = len(x_train)
    bs = min(ctx.batch_size, n)
    # With equal shards every rank runs the same number of steps, and as many as one worker would with all the data.
    num_batches = max(n // bs, 1)
    model.train()
    gen = torch.Generator().manual_seed(ctx.seed * 100003 + epoch * 101 + ctx.rank)
    perm = torch.randperm(n, generator=gen)
    loss_sum = correct = seen = 0.0
    for b in range(num_batches):
        idx = perm[b * bs:(b + 1) * bs]
        xb, yb = x_train[idx].to(device), y_train[idx].to(device)
        optimizer.zero_grad(set_to_none=True)
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * len(idx)
        correct += (out.argmax(1) == yb).sum().item()
        seen += len(idx)
        ctx.batch_hook(epoch, b, num_batches)
    loss_sum, correct, seen = _allreduce_sum([loss_sum, correct, seen], device)
    return {"loss": loss_sum / seen, "accuracy": correct / seen, "samples": int(round(seen)), "steps": num_batches}


def _evaluate(bare, x_val, y_val, device) -> dict:
    """Validation loss and accuracy over every worker's validation shard. The unwrapped module: no DDP buffer
    broadcasts (collectives) during evaluation."""
    import torch
    import torch.nn.functional as F

    bare.eval()
    loss_sum = correct = 0.0
    with torch.no_grad():
        for i in range(0, len(x_val), 512):
            xb, yb = x_val[i:i + 512].to(device), y_val[i:i + 512].to(device)
            out = bare(xb)
            loss_sum += F.cross_entropy(out, yb, reduction="sum").item()
            correct += (out.argmax(1) == yb).sum().item()
    loss_sum, correct, count = _allreduce_sum([loss_sum, correct, float(len(x_val))], device)
    return {"val_loss": loss_sum / count, "val_accuracy": correct / count}


# ---------------------------------------------------------------- the model
# The built-in image CNN in PyTorch: 3 conv blocks (64/128/256 filters, batch norm, dropout), dense 512.
# 
# Each block is conv-BN-ReLU, conv-BN-ReLU, 2x2 max-pool (only while the feature map is at least 2x2, so 8x8 digits
# and 32x32 CIFAR both work), dropout. Then flatten, dense 512, BN, ReLU, dropout, and the class layer.
# Parameters: ~3.25 M for 32x32x3 inputs, ~1.3 M for 8x8x1.
def build_cnn(
    input_shape: tuple[int, int, int],
    num_classes: int,
    filters: Sequence[int] = (64, 128, 256),
    dense: int = 512,
    conv_dropout: float = 0.25,
    dense_dropout: float = 0.5,
):
    import torch.nn as nn

    h, w, c = input_shape
    layers = []
    in_ch = c
    for f in filters:
        layers += [
            nn.Conv2d(in_ch, f, 3, padding=1), nn.BatchNorm2d(f), nn.ReLU(inplace=True),
            nn.Conv2d(f, f, 3, padding=1), nn.BatchNorm2d(f), nn.ReLU(inplace=True),
        ]
        if h >= 2 and w >= 2:
            layers.append(nn.MaxPool2d(2))
            h, w = h // 2, w // 2
        layers.append(nn.Dropout(conv_dropout))
        in_ch = f
    layers += [
        nn.Flatten(),
        nn.Linear(in_ch * h * w, dense), nn.BatchNorm1d(dense), nn.ReLU(inplace=True), nn.Dropout(dense_dropout),
        nn.Linear(dense, num_classes),
    ]
    return nn.Sequential(*layers)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- under Ray Train

#: Set by the charts from the cluster value ``nccl.collectiveTimeoutSeconds``; ``trainConfig.collectiveTimeoutSeconds``
#: overrides it for one job.
COLLECTIVE_TIMEOUT_ENV = "TRAINING_COLLECTIVE_TIMEOUT_SECONDS"


def collective_timeout(training, environ=None) -> int | None:
    """The process group's collective timeout in seconds (what makes a hung collective fail instead of waiting
    forever): the spec's ``trainConfig.collectiveTimeoutSeconds``, else the chart's environment variable, else None
    (Ray Train's default, 1800 s)."""
    if training.collective_timeout_s:
        return training.collective_timeout_s
    environ = os.environ if environ is None else environ
    raw = environ.get(COLLECTIVE_TIMEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        seconds = int(raw)
    except ValueError:
        raise SpecError(f"{COLLECTIVE_TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if seconds <= 0:
        raise SpecError(f"{COLLECTIVE_TIMEOUT_ENV}={raw!r} must be a positive number of seconds")
    return seconds


def ray_trainer(run_worker, job, **common):
    from ray.train.torch import TorchConfig, TorchTrainer

    timeout = collective_timeout(job.training)
    return TorchTrainer(run_worker, torch_config=TorchConfig(timeout_s=timeout) if timeout else TorchConfig(), **common)


def adjust_restored(directory: str, training) -> None:
    """PyTorch's saved optimizer state carries the learning rate it was saved with: after a PBT exploit the trial
    trains with its own ``lr``, so ``param_groups[*].lr`` is set to it (and the manifest's SHA-256 rewritten)."""
    path = os.path.join(directory, MODEL_FILE)
    if not os.path.exists(path):
        return
    import torch

    from training.runtime import checkpoints

    lr = training.lr
    meta = checkpoints.verify(directory, FRAMEWORK.name)
    state = torch.load(path, map_location="cpu", weights_only=True)
    groups = state.get("optimizer", {}).get("param_groups", [])
    if any(abs(g.get("lr", lr) - lr) > 1e-15 for g in groups):
        for g in groups:
            g["lr"] = lr
        torch.save(state, path)
        checkpoints.write_manifest(directory, epoch=meta["epoch"], framework=meta["framework"],
                                   history=meta.get("history") or [], metrics=meta.get("metrics") or {},
                                   extra={**(meta.get("extra") or {}), "lrSetOnRestore": lr})


FRAMEWORK = Framework(
    name="pytorch", epochs=5, batch_size=64, lr=1e-3,
    metrics=("loss", "accuracy", "val_loss", "val_accuracy", "samples", "steps"),
    loop=train, ray_trainer=ray_trainer, collective_timeout=True, adjust_restored=adjust_restored)
