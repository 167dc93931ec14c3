"""An example user trainer for ``trainConfig.trainerPath``: a small MLP in PyTorch on the digits.

It runs on every Ray Train worker (here under TorchTrainer, because the spec says ``framework: pytorch``), or in a
Tune trial's own process, and gets a ``training.WorkerContext``, its one door to the run: the job's
hyperparameters, this worker's data shard, the checkpoint to resume from (``restore``), the device and model
preparation (``prepare_model``: DDP across the workers), and ``report`` (progress, checkpoints every
``checkpoint.everyEpochs``, keep-best, fault tolerance).
"""

import os


def train(ctx):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(ctx.seed)
    shard = ctx.data()
    features = int(shard.x_train[0].size)
    hidden = int(ctx.params.get("hidden", 128))
    model = nn.Sequential(nn.Flatten(), nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, shard.num_classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=ctx.lr)

    def load(directory):  # resume: a previous attempt or run left a checkpoint
        state = torch.load(os.path.join(directory, "mlp.pt"), weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    ctx.restore(load)
    bare = model
    model = ctx.prepare_model(model)  # DDP across the workers

    x = torch.from_numpy(shard.x_train)
    y = torch.from_numpy(shard.y_train)
    xv = torch.from_numpy(shard.x_val)
    yv = torch.from_numpy(shard.y_val)
    steps = max(len(x) // ctx.batch_size, 1)

    def all_sum(*values):
        t = torch.tensor(values, dtype=torch.float64)
        if dist.is_initialized():
            dist.all_reduce(t)
        return t.tolist()

    for epoch in ctx.epochs():
        model.train()
        perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(ctx.seed + epoch))
        total = 0.0
        for step in range(steps):
            idx = perm[step * ctx.batch_size:(step + 1) * ctx.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            optimizer.step()
            total += loss.item()
        with torch.no_grad():
            correct = (bare(xv).argmax(1) == yv).sum().item()
        loss_sum, correct, count = all_sum(total / steps, correct, len(xv))
        ctx.report(
            epoch,
            {"loss": loss_sum / ctx.world_size, "val_accuracy": correct / count},
            save=lambda d: torch.save({"model": bare.state_dict(), "optimizer": optimizer.state_dict()},
                                      os.path.join(d, "mlp.pt")),
        )
    return {"hidden": hidden, "parameters": sum(p.numel() for p in bare.parameters())}
