"""The loops bench-train times, and one configuration run in this process: PyTorch and TensorFlow, each one loop for
the plain runs (1 or N threads, no Ray in the process) and for Ray Train's workers, marking the time of each phase
and of every step; and PyTorch's loop again in N processes under DDP without Ray (``ddp``)."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from training.bench.settings import Config, TrainSettings


def now() -> float:
    return time.time()


def process_start_time() -> float | None:
    """When this process was created (Linux /proc), to split a Ray worker's start from the rest."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/stat", encoding="ascii") as fh:
            btime = next(int(ln.split()[1]) for ln in fh if ln.startswith("btime"))
        return btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except Exception:
        return None


# ---------------------------------------------------------------- PyTorch: one loop for plain and Ray

def torch_train(settings: TrainSettings, shard, threads: int, rank: int = 0, world: int = 1,
                wrap=None, allreduce=None) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from training.frameworks.pytorch import build_cnn
    from training.runtime.data import batch_share

    marks: dict[str, float] = {}
    torch.set_num_threads(threads)
    torch.manual_seed(settings.seed)
    m = settings.model
    model = build_cnn(shard.input_shape, shard.num_classes, m.filters, m.dense, m.conv_dropout, m.dense_dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    bare = model
    if wrap is not None:
        model = wrap(model)  # Ray: prepare_model -> DDP (gloo) when world > 1
    marks["modelReady"] = now()
    x = torch.from_numpy(shard.x_train).permute(0, 3, 1, 2).contiguous()
    y = torch.from_numpy(shard.y_train)
    n = len(x)
    bs = min(batch_share(settings.batch_size, world), n)
    steps = max(n // bs, 1)
    step_ends: list[float] = []
    loss_v = 0.0
    for epoch in range(1, settings.epochs + 1):
        model.train()
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(settings.seed * 1000 + epoch * 10 + rank))
        for b in range(steps):
            idx = perm[b * bs:(b + 1) * bs]
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            optimizer.step()
            loss_v = float(loss.item())
            step_ends.append(now())
    marks["trainDone"] = now()
    bare.eval()
    xv = torch.from_numpy(shard.x_val).permute(0, 3, 1, 2).contiguous()
    yv = torch.from_numpy(shard.y_val)
    with torch.no_grad():
        correct = float(sum((bare(xv[i:i + 512]).argmax(1) == yv[i:i + 512]).sum().item() for i in range(0, len(xv), 512)))
    count = float(len(xv))
    if allreduce is not None:
        correct, count = allreduce([correct, count])
    marks["evalDone"] = now()
    return {"marks": marks, "stepEnds": step_ends, "stepsPerEpoch": steps, "batchSize": bs, "world": world,
            "rank": rank, "valAccuracy": correct / max(count, 1.0), "lastLoss": loss_v,
            "parameters": sum(p.numel() for p in bare.parameters())}


def sum_over_workers(values: list[float]) -> list[float]:
    """The element-wise sum of ``values`` over the process group's workers (unchanged without one)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t)
    return t.tolist()


def _ray_worker_shard(config: dict[str, Any]):
    """What both timed Ray Train workers start with: the settings, this worker's rank and world size, its data
    shard."""
    import ray.train

    from training.runtime.data import load_shard

    settings = config["settings"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    return settings, rank, world, load_shard(settings.data_part, rank, world, settings.seed)


def _ray_worker_result(config: dict[str, Any], res: dict[str, Any], enter: float, data_done: float) -> None:
    """What both timed Ray Train workers end with: their marks, then the result on the run's queue."""
    res["marks"].update({"loopEnter": enter, "dataDone": data_done, "processStart": process_start_time()})
    config["queue"].put(res)


def _ray_torch_worker(config: dict[str, Any]) -> None:
    """Ray Train per-worker function (TorchTrainer)."""
    enter = now()
    from ray.train.torch import prepare_model

    settings, rank, world, shard = _ray_worker_shard(config)
    data_done = now()
    res = torch_train(settings, shard, 1, rank, world, wrap=prepare_model, allreduce=sum_over_workers)
    _ray_worker_result(config, res, enter, data_done)


# ---------------------------------------------------------------- PyTorch DDP without Ray: the all-reduce's own cost

def _ddp_worker(rank: int, world: int, port: int, settings_json: dict[str, Any], results) -> None:
    """One process of the plain DDP run (torch.multiprocessing, spawned): 1 thread, a gloo process group over
    127.0.0.1, this rank's shard, and the Ray workers' own loop with DistributedDataParallel as Ray's prepare_model
    wraps a CPU model (no device ids, DDP's defaults)."""
    enter = now()
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from training.runtime.data import load_shard

    settings = TrainSettings.of(settings_json)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    group_ready = now()
    shard = load_shard(settings.data_part, rank, world, settings.seed)
    data_done = now()
    res = torch_train(settings, shard, 1, rank, world, wrap=DistributedDataParallel, allreduce=sum_over_workers)
    res["marks"].update({"loopEnter": enter, "groupReady": group_ready, "dataDone": data_done,
                         "processStart": process_start_time()})
    dist.destroy_process_group()
    results.put(res)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run_ddp(cfg: Config, settings: TrainSettings, marks: dict[str, float], timeout: float = 1800) -> dict[str, Any]:
    """PyTorch DDP over ``cfg.workers`` processes of 1 thread each, no Ray anywhere: what the same steps cost with
    only DDP's all-reduce added, so that the Ray runs' shortfall splits into DDP's and Ray's."""
    import queue as queue_mod

    import torch.multiprocessing as mp

    marks["imported"] = now()
    ctx = mp.get_context("spawn")  # fresh processes, as Ray's workers are (a fork would inherit this one's torch)
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_ddp_worker, args=(rank, cfg.workers, port, settings.to_json(), results),
                         name=f"ddp-{rank}") for rank in range(cfg.workers)]
    for proc in procs:
        proc.start()
    workers: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(workers) < cfg.workers:
        try:
            workers.append(results.get(timeout=2))
        except queue_mod.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for proc in procs:
                    proc.kill()
                raise RuntimeError(f"{cfg.key}: " + (f"process {dead[0].name} exited with {dead[0].exitcode}" if dead
                                                     else f"no result after {timeout:.0f} s")) from None
    for proc in procs:
        proc.join(timeout=60)
    marks["fitDone"] = now()
    return {"config": cfg.to_json(), "workers": sorted(workers, key=lambda r: r["rank"]), "driver": marks}


# ---------------------------------------------------------------- TensorFlow: one loop for plain and Ray

def _tf_datasets(tf, strategy, shard, bs: int, seed: int, distributed: bool):
    """The training dataset (shuffled, repeated, batches of bs) and the validation one (the largest batch <= 256 that
    divides it), distributed by the strategy when it is; and the validation steps."""
    n, n_val = len(shard.x_train), len(shard.x_val)
    vbs = next((d for d in range(min(256, n_val), 0, -1) if n_val % d == 0), 1)

    def train_fn(_ctx=None):
        ds = tf.data.Dataset.from_tensor_slices((shard.x_train, shard.y_train))
        return ds.shuffle(n, seed=seed).repeat().batch(bs, drop_remainder=True).prefetch(2)

    def val_fn(_ctx=None):
        return tf.data.Dataset.from_tensor_slices((shard.x_val, shard.y_val)).batch(vbs, drop_remainder=True)

    if distributed:
        return (strategy.distribute_datasets_from_function(train_fn),
                strategy.distribute_datasets_from_function(val_fn), max(n_val // vbs, 1))
    return train_fn(), val_fn(), max(n_val // vbs, 1)


def tf_train(settings: TrainSettings, shard, threads: int, rank: int = 0, world: int = 1,
             distributed: bool = False) -> dict[str, Any]:
    from training.frameworks.tensorflow import WORKER_ENV

    for key, value in WORKER_ENV.items():
        os.environ.setdefault(key, value)
    marks: dict[str, float] = {}
    import tensorflow as tf

    from training.frameworks.tensorflow import build_cnn, keras
    from training.runtime.data import batch_share

    k = keras()
    marks["tfImported"] = now()
    tf.get_logger().setLevel("ERROR")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        pass
    k.utils.set_random_seed(settings.seed)
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if distributed else tf.distribute.get_strategy()
    marks["strategyReady"] = now()
    m = settings.model
    with strategy.scope():
        model = build_cnn(shard.input_shape, shard.num_classes, m.filters, m.dense, m.conv_dropout, m.dense_dropout)
        model.compile(optimizer=k.optimizers.Adam(learning_rate=settings.lr),
                      loss=k.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[k.metrics.SparseCategoricalAccuracy(name="accuracy")])
    marks["modelReady"] = now()
    bs = min(batch_share(settings.batch_size, world), len(shard.x_train))
    steps = max(len(shard.x_train) // bs, 1)
    train_ds, val_ds, vsteps = _tf_datasets(tf, strategy, shard, bs, settings.seed + rank, distributed)
    step_ends: list[float] = []

    class Steps(k.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            step_ends.append(now())

    hist = model.fit(train_ds, epochs=settings.epochs, steps_per_epoch=steps, verbose=0, callbacks=[Steps()])
    marks["trainDone"] = now()
    vals = model.evaluate(val_ds, steps=vsteps, verbose=0, return_dict=True)
    marks["evalDone"] = now()
    return {"marks": marks, "stepEnds": step_ends, "stepsPerEpoch": steps, "batchSize": bs, "world": world,
            "rank": rank, "valAccuracy": float(vals["accuracy"]), "lastLoss": float(hist.history["loss"][-1]),
            "parameters": int(model.count_params())}


def _ray_tf_worker(config: dict[str, Any]) -> None:
    """Ray Train per-worker function (TensorflowTrainer: TF_CONFIG is set, MultiWorkerMirroredStrategy)."""
    enter = now()
    settings, rank, world, shard = _ray_worker_shard(config)
    data_done = now()
    res = tf_train(settings, shard, 1, rank, world, distributed=True)
    _ray_worker_result(config, res, enter, data_done)


# ---------------------------------------------------------------- one configuration, in this (child) process

def _run_plain(cfg: Config, settings: TrainSettings, marks: dict[str, float]) -> dict[str, Any]:
    if cfg.framework == "pytorch":
        import torch  # noqa: F401
    from training.runtime.data import load_shard

    marks["imported"] = now()
    shard = load_shard(settings.data_part, 0, 1, settings.seed)
    marks["dataDone"] = now()
    if cfg.framework == "pytorch":
        res = torch_train(settings, shard, cfg.threads)
    else:
        res = tf_train(settings, shard, cfg.threads)
    res["marks"].update(marks)
    return {"config": cfg.to_json(), "workers": [res], "driver": marks}


def _ray_trainer(cfg: Config, loop_config: dict[str, Any], store: str, callbacks: list | None = None):
    import ray.train

    from training.frameworks import registry

    worker_env = registry.get(cfg.framework).worker_env
    scaling = ray.train.ScalingConfig(num_workers=cfg.workers, resources_per_worker={"CPU": 1})
    run_config = ray.train.RunConfig(name=f"bench-{cfg.key.replace('/', '-')}", storage_path=store, callbacks=callbacks,
                                     worker_runtime_env={"env_vars": dict(worker_env)} if worker_env else None)
    if cfg.framework == "pytorch":
        from ray.train.torch import TorchTrainer

        return TorchTrainer(_ray_torch_worker, train_loop_config=loop_config, scaling_config=scaling,
                            run_config=run_config)
    from ray.train.tensorflow import TensorflowTrainer

    return TensorflowTrainer(_ray_tf_worker, train_loop_config=loop_config, scaling_config=scaling,
                             run_config=run_config)


def _run_ray(cfg: Config, settings: TrainSettings, marks: dict[str, float],
             ray_address: str | None) -> dict[str, Any]:
    from training.runtime.env import apply_quiet_defaults

    apply_quiet_defaults()
    import ray
    import ray.train  # noqa: F401  (imported before the mark: part of "python + ray imports")
    from ray.util.queue import Queue

    from training.bench.controller_clock import ControllerClock
    from training.runtime.cluster import export_import_path

    marks["imported"] = now()
    started = False
    if not ray.is_initialized():
        if ray_address:
            ray.init(address=ray_address, logging_level="WARNING")
        else:
            export_import_path()
            ray.init(address="local", include_dashboard=True, logging_level="WARNING")
            started = True
    marks["rayInit"] = now()
    queue = Queue(actor_options={"num_cpus": 0})
    store = tempfile.mkdtemp(prefix="bench-train-")
    trainer = _ray_trainer(cfg, {"settings": settings, "queue": queue}, store, [ControllerClock(queue)])
    marks["fitCall"] = now()
    trainer.fit()
    marks["fitDone"] = now()
    items: list[dict[str, Any]] = []
    while sum("rank" in i for i in items) < cfg.workers:  # every worker's result ...
        items.append(queue.get(timeout=60))
    while not queue.empty():  # ... and the controller's mark (a copy made in this process marks nothing of its own)
        items.append(queue.get_nowait())
    workers = sorted((i for i in items if "rank" in i), key=lambda r: r["rank"])
    ups = [i["marks"]["controllerUp"] for i in items
           if "rank" not in i and i["marks"]["controllerPid"] != os.getpid() and i["marks"]["controllerUp"] >= marks["fitCall"]]
    if ups:
        marks["controllerUp"] = min(ups)
    cluster_cpus = float(ray.cluster_resources().get("CPU", 0))
    if started:
        ray.shutdown()
    import shutil

    shutil.rmtree(store, ignore_errors=True)
    return {"config": cfg.to_json(), "workers": workers, "driver": marks, "rayClusterCpus": cluster_cpus}


def run_one(cfg: Config, settings: TrainSettings, spawn: float, ray_address: str | None) -> dict[str, Any]:
    marks: dict[str, float] = {"spawn": spawn, "childStart": CHILD_START}
    if cfg.kind == "plain":
        return _run_plain(cfg, settings, marks)
    if cfg.kind == "ddp":
        return _run_ddp(cfg, settings, marks)
    return _run_ray(cfg, settings, marks, ray_address)


CHILD_START = now()
