"""The built-in trainer of ``framework: pytorch``: the small CNN under Ray Train's TorchTrainer (DDP, gloo on CPU)."""

from __future__ import annotations

import os

from training.worker import WorkerContext

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

    from training.models_torch import build_cnn, count_parameters

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
