"""``python -m training.bench.train`` (``make bench-train``): what Ray Train buys on this machine.

The same model (the built-in CNN of :mod:`training.frameworks.pytorch` / :mod:`training.frameworks.tensorflow`), the same data
(:mod:`training.runtime.data`, digits by default, or synthetic CIFAR-shaped tensors) and the same epochs, trained

* plain, single process, with 1 thread and with 2 threads (PyTorch: ``torch.set_num_threads``; TensorFlow:
  intra/inter-op threads) -- no Ray anywhere in the process;
* with Ray Train on 1 worker and on 2 workers (TorchTrainer with DDP over gloo; TensorflowTrainer with
  MultiWorkerMirroredStrategy), 1 CPU per worker: Ray pins each worker to one thread (``OMP_NUM_THREADS=1``);
  *cold*: each run starts its own local Ray, as a first ``make train`` does; *warm*: every run joins one Ray the
  benchmark started once, as a RayJob's entrypoint joins its cluster (``ray-Nw-warm``; ``--no-warm`` leaves them
  out, ``--warm-address`` joins a Ray that is already running).

The global batch is the same everywhere (``--batch-size``, the training spec's ``batchSize``): N workers train
batch / N each on 1/N of the data, so every configuration runs the same number of optimizer steps on the same
gradient (DDP and MWMS average over workers) -- a per-worker batch would give N workers N times fewer steps per
epoch and a lower accuracy after the same epochs. Each configuration runs in a fresh process, ``--repeats`` times
(interleaved, so that machine noise spreads over all of them), and the medians are reported:

* ``wall_s``: process start -> trained model evaluated (everything a user waits for, cold start included);
* ``startup_s`` (time to first step): process start -> end of the first training step, and where its seconds go
  (imports, ``ray.init``, worker group start and process group / TF_CONFIG, data, model, the first step itself);
* ``steady_samples_per_s``: training samples per second after the first epoch (warm-up) to the last step, all
  workers together -- the throughput that start-up does not blur;
* final validation accuracy, and the difference from the 1-thread baseline.

Speedup and efficiency (speedup / workers) are against the 1-thread baseline (the benchmark brief's definition); the
equal-CPU ratio compares Ray on N workers with the plain baseline on N threads -- the honest comparison, since
N workers hold N CPUs.

Output (``--out``, default ``results/bench-train``): ``bench-train.json``, ``bench-train.md``, ``bench-train.png``
and the runs' logs. With ``RAY_ADDRESS`` set, the Ray runs join that cluster (the plain ones run here).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULT_PREFIX = "BENCH_RESULT "
DEFAULT_OUT = "results/bench-train"
FRAMEWORKS = ("pytorch", "tensorflow")
DEFINITIONS = {
    "wall_s": "process start -> trained model evaluated (cold start included)",
    "startup_s": "process start -> end of the first training step (time to first step)",
    "steady_samples_per_s": "training samples/s of all workers together, after the first epoch to the last step",
    "train_s": "end of the first step -> end of the last step",
    "fit_tail_s": "end of the last step -> the training call (loop / model.fit) returned",
    "speedup": "baseline (plain, 1 thread) wall time / this wall time",
    "efficiency": "speedup / workers",
    "steady_vs_equal_cpu_baseline": "steady throughput / the plain baseline's with as many threads as workers",
}


def say(message: str) -> None:
    print(f"[bench-train] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- settings and plan

def settings_from_args(args) -> dict[str, Any]:
    if args.tiny:
        data = {"source": args.data, "maxTrainSamples": 256, "maxValSamples": 128, "numSamples": 256,
                "validationFraction": 0.2}
        model = {"filters": [8, 16, 32], "dense": 32, "convDropout": 0.25, "denseDropout": 0.5}
        epochs, repeats = args.epochs or 1, args.repeats or 1
    else:
        data = {"source": args.data, "numSamples": args.num_samples, "validationFraction": 0.2}
        model = {"filters": [64, 128, 256], "dense": 512, "convDropout": 0.25, "denseDropout": 0.5}
        epochs, repeats = args.epochs or 5, args.repeats or 3
    return {
        "tiny": bool(args.tiny),
        "data": data,
        "model": model,
        "epochs": int(epochs),
        "repeats": int(repeats),
        "batchSize": int(args.batch_size),
        "lr": float(args.lr),
        "seed": 42,
        "frameworks": list(args.frameworks),
        "workers": list(args.workers),
        "threads": list(args.threads),
        # Warm runs join one Ray: the one at --warm-address, else one started here -- not when --ray-address already
        # makes every Ray run join a cluster.
        "warm": args.warm and (not args.ray_address or bool(args.warm_address)),
    }


def plan(settings: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for fw in settings["frameworks"]:
        for t in settings["threads"]:
            out.append({"key": f"{fw}/plain-{t}t", "framework": fw, "kind": "plain", "threads": t, "workers": 1})
        for w in settings["workers"]:
            out.append({"key": f"{fw}/ray-{w}w", "framework": fw, "kind": "ray", "threads": 1, "workers": w})
        if settings.get("warm"):
            for w in settings["workers"]:
                out.append({"key": f"{fw}/ray-{w}w-warm", "framework": fw, "kind": "ray", "threads": 1, "workers": w,
                            "warm": True})
    return out


ONLY_KEY = re.compile(r"^(?P<framework>pytorch|tensorflow)/(?:plain-(?P<threads>[1-9][0-9]*)t|ray-(?P<workers>[1-9][0-9]*)w)$")


def config_for(key: str) -> dict[str, Any]:
    """The configuration a key of the plan names (pytorch/plain-1t, tensorflow/ray-2w, ...)."""
    match = ONLY_KEY.match(key)
    if not match:
        raise ValueError(f"{key!r}: expected <framework>/plain-<threads>t or <framework>/ray-<workers>w with "
                         f"framework one of {', '.join(FRAMEWORKS)} (e.g. pytorch/plain-1t, pytorch/ray-2w)")
    fw, threads, workers = match.group("framework"), match.group("threads"), match.group("workers")
    if threads:
        return {"key": key, "framework": fw, "kind": "plain", "threads": int(threads), "workers": 1}
    return {"key": key, "framework": fw, "kind": "ray", "threads": 1, "workers": int(workers)}


def label(cfg: dict[str, Any]) -> str:
    if cfg["kind"] == "plain":
        return f"plain, {cfg['threads']} thread{'s' if cfg['threads'] > 1 else ''}"
    return f"Ray Train, {cfg['workers']} worker{'s' if cfg['workers'] > 1 else ''}" + (", warm Ray" if cfg.get("warm") else "")


def comparison_key(cfg: dict[str, Any]) -> str:
    """The key of a Ray configuration's block in the comparison: ray_1_worker, ray_2_workers, ray_2_workers_warm."""
    return f"ray_{cfg['workers']}_worker{'s' if cfg['workers'] > 1 else ''}" + ("_warm" if cfg.get("warm") else "")


# ---------------------------------------------------------------- timing helpers (shared by every loop)

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


def _data_cfg(settings):
    """The benchmark's data block, as a job spec would have it (the same loaders as ``python -m training run``)."""
    from training.job.defaults import data_block

    return data_block(settings["data"])


# ---------------------------------------------------------------- PyTorch: one loop for plain and Ray

def torch_train(settings: dict[str, Any], shard, threads: int, rank: int = 0, world: int = 1,
                wrap=None, allreduce=None) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from training.frameworks.pytorch import build_cnn
    from training.runtime.data import batch_share

    marks: dict[str, float] = {}
    torch.set_num_threads(threads)
    torch.manual_seed(settings["seed"])
    m = settings["model"]
    model = build_cnn(shard.input_shape, shard.num_classes, m["filters"], m["dense"], m["convDropout"], m["denseDropout"])
    optimizer = torch.optim.Adam(model.parameters(), lr=settings["lr"])
    bare = model
    if wrap is not None:
        model = wrap(model)  # Ray: prepare_model -> DDP (gloo) when world > 1
    marks["modelReady"] = now()
    x = torch.from_numpy(shard.x_train).permute(0, 3, 1, 2).contiguous()
    y = torch.from_numpy(shard.y_train)
    n = len(x)
    bs = min(batch_share(settings["batchSize"], world), n)
    steps = max(n // bs, 1)
    step_ends: list[float] = []
    loss_v = 0.0
    for epoch in range(1, settings["epochs"] + 1):
        model.train()
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(settings["seed"] * 1000 + epoch * 10 + rank))
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


def _ray_torch_worker(config: dict[str, Any]) -> None:
    """Ray Train per-worker function (TorchTrainer)."""
    enter = now()
    import ray.train
    import torch
    import torch.distributed as dist
    from ray.train.torch import prepare_model

    from training.runtime.data import load_shard

    settings = config["settings"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    shard = load_shard(_data_cfg(settings), rank, world, settings["seed"])
    data_done = now()

    def allreduce(values):
        t = torch.tensor(values, dtype=torch.float64)
        if dist.is_initialized() and world > 1:
            dist.all_reduce(t)
        return t.tolist()

    res = torch_train(settings, shard, 1, rank, world, wrap=prepare_model, allreduce=allreduce)
    res["marks"].update({"loopEnter": enter, "dataDone": data_done, "processStart": process_start_time()})
    config["queue"].put(res)


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


def tf_train(settings: dict[str, Any], shard, threads: int, rank: int = 0, world: int = 1,
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
    k.utils.set_random_seed(settings["seed"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if distributed else tf.distribute.get_strategy()
    marks["strategyReady"] = now()
    m = settings["model"]
    with strategy.scope():
        model = build_cnn(shard.input_shape, shard.num_classes, m["filters"], m["dense"], m["convDropout"], m["denseDropout"])
        model.compile(optimizer=k.optimizers.Adam(learning_rate=settings["lr"]),
                      loss=k.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[k.metrics.SparseCategoricalAccuracy(name="accuracy")])
    marks["modelReady"] = now()
    bs = min(batch_share(settings["batchSize"], world), len(shard.x_train))
    steps = max(len(shard.x_train) // bs, 1)
    train_ds, val_ds, vsteps = _tf_datasets(tf, strategy, shard, bs, settings["seed"] + rank, distributed)
    step_ends: list[float] = []

    class Steps(k.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            step_ends.append(now())

    hist = model.fit(train_ds, epochs=settings["epochs"], steps_per_epoch=steps, verbose=0, callbacks=[Steps()])
    marks["trainDone"] = now()
    vals = model.evaluate(val_ds, steps=vsteps, verbose=0, return_dict=True)
    marks["evalDone"] = now()
    return {"marks": marks, "stepEnds": step_ends, "stepsPerEpoch": steps, "batchSize": bs, "world": world,
            "rank": rank, "valAccuracy": float(vals["accuracy"]), "lastLoss": float(hist.history["loss"][-1]),
            "parameters": int(model.count_params())}


def _ray_tf_worker(config: dict[str, Any]) -> None:
    """Ray Train per-worker function (TensorflowTrainer: TF_CONFIG is set, MultiWorkerMirroredStrategy)."""
    enter = now()
    import ray.train

    from training.runtime.data import load_shard

    settings = config["settings"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    shard = load_shard(_data_cfg(settings), rank, world, settings["seed"])
    data_done = now()
    res = tf_train(settings, shard, 1, rank, world, distributed=True)
    res["marks"].update({"loopEnter": enter, "dataDone": data_done, "processStart": process_start_time()})
    config["queue"].put(res)


# ---------------------------------------------------------------- one configuration, in this (child) process

def _run_plain(cfg: dict[str, Any], settings: dict[str, Any], marks: dict[str, float]) -> dict[str, Any]:
    if cfg["framework"] == "pytorch":
        import torch  # noqa: F401
    from training.runtime.data import load_shard

    marks["imported"] = now()
    shard = load_shard(_data_cfg(settings), 0, 1, settings["seed"])
    marks["dataDone"] = now()
    if cfg["framework"] == "pytorch":
        res = torch_train(settings, shard, cfg["threads"])
    else:
        res = tf_train(settings, shard, cfg["threads"])
    res["marks"].update(marks)
    return {"config": cfg, "workers": [res], "driver": marks}


def _ray_trainer(cfg: dict[str, Any], loop_config: dict[str, Any], store: str):
    import ray.train

    from training.frameworks import registry

    worker_env = registry.get(cfg["framework"]).worker_env
    scaling = ray.train.ScalingConfig(num_workers=cfg["workers"], resources_per_worker={"CPU": 1})
    run_config = ray.train.RunConfig(name=f"bench-{cfg['key'].replace('/', '-')}", storage_path=store,
                                     worker_runtime_env={"env_vars": dict(worker_env)} if worker_env else None)
    if cfg["framework"] == "pytorch":
        from ray.train.torch import TorchTrainer

        return TorchTrainer(_ray_torch_worker, train_loop_config=loop_config, scaling_config=scaling,
                            run_config=run_config)
    from ray.train.tensorflow import TensorflowTrainer

    return TensorflowTrainer(_ray_tf_worker, train_loop_config=loop_config, scaling_config=scaling,
                             run_config=run_config)


def _run_ray(cfg: dict[str, Any], settings: dict[str, Any], marks: dict[str, float],
             ray_address: str | None) -> dict[str, Any]:
    from training.runtime.env import apply_quiet_defaults

    apply_quiet_defaults()
    import ray
    import ray.train  # noqa: F401  (imported before the mark: part of "python + ray imports")
    from ray.util.queue import Queue

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
    trainer = _ray_trainer(cfg, {"settings": settings, "queue": queue}, store)
    marks["fitCall"] = now()
    trainer.fit()
    marks["fitDone"] = now()
    workers = sorted((queue.get(timeout=60) for _ in range(cfg["workers"])), key=lambda r: r["rank"])
    cluster_cpus = float(ray.cluster_resources().get("CPU", 0))
    if started:
        ray.shutdown()
    import shutil

    shutil.rmtree(store, ignore_errors=True)
    return {"config": cfg, "workers": workers, "driver": marks, "rayClusterCpus": cluster_cpus}


def run_one(cfg: dict[str, Any], settings: dict[str, Any], spawn: float, ray_address: str | None) -> dict[str, Any]:
    marks: dict[str, float] = {"spawn": spawn, "childStart": CHILD_START}
    if cfg["kind"] == "plain":
        return _run_plain(cfg, settings, marks)
    return _run_ray(cfg, settings, marks, ray_address)


CHILD_START = now()


# ---------------------------------------------------------------- metrics of one run

def _steady_throughput(ws: list[dict], settings: dict[str, Any], global_batch: int, first_step: float) -> float:
    """Samples per second after the first epoch (or the first fifth of the steps), over every worker."""
    w0 = ws[0]
    steps = len(w0["stepEnds"])
    if steps <= 1:
        return global_batch / max(first_step - w0["marks"]["modelReady"], 1e-9)
    warm = w0["stepsPerEpoch"] if settings["epochs"] >= 2 else max(1, steps // 5)
    warm = min(warm, steps - 1)
    t_start = max(w["stepEnds"][warm - 1] if warm else w["stepEnds"][0] for w in ws)
    t_end = max(w["stepEnds"][-1] for w in ws)
    window_steps = steps - warm if warm else steps - 1
    return window_steps * global_batch / max(t_end - t_start, 1e-9)


def _plain_phases(w0: dict, spawn: float, first_step: float) -> dict[str, float]:
    m = w0["marks"]
    phases = {"python + imports": m["imported"] - spawn,
              "data (incl. scikit-learn import)": m["dataDone"] - m["imported"]}
    if "tfImported" in m:
        phases["TensorFlow import + setup"] = m["strategyReady"] - m["dataDone"]
        phases["model"] = m["modelReady"] - m["strategyReady"]
    else:
        phases["model"] = m["modelReady"] - m["dataDone"]
    phases["first step"] = first_step - m["modelReady"]
    return phases


def _ray_phases(d: dict, ws: list[dict], spawn: float, first_step: float) -> dict[str, float]:
    enter = max(w["marks"]["loopEnter"] for w in ws)
    data_done = max(w["marks"]["dataDone"] for w in ws)
    phases = {"python + ray imports": d["imported"] - spawn, "ray.init": d["rayInit"] - d["imported"],
              "trainer setup (result queue actor, trainer import)": d["fitCall"] - d["rayInit"]}
    starts = [w["marks"].get("processStart") for w in ws]
    if all(starts) and all(d["fitCall"] <= s <= enter for s in starts):
        last_start = max(starts)
        phases["fit -> worker processes started"] = last_start - d["fitCall"]
        phases["worker init + backend (process group / TF_CONFIG)"] = enter - last_start
    else:
        phases["fit -> workers ready (incl. process group / TF_CONFIG)"] = enter - d["fitCall"]
    phases["data (incl. scikit-learn import)"] = data_done - enter
    ready = max(w["marks"]["modelReady"] for w in ws)
    if "tfImported" in ws[0]["marks"]:
        tf_ready = max(w["marks"]["strategyReady"] for w in ws)
        phases["TensorFlow import + MWMS strategy"] = tf_ready - data_done
        phases["model"] = ready - tf_ready
    else:
        phases["model + prepare_model (DDP)"] = ready - data_done
    phases["first step"] = first_step - ready
    return phases


def measure(raw: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """Per-run figures from the raw marks of the driver and of each worker."""
    cfg, d, ws = raw["config"], raw["driver"], raw["workers"]
    w0 = ws[0]
    spawn = d["spawn"]
    first_step = max(w["stepEnds"][0] for w in ws)
    last_step = max(w["stepEnds"][-1] for w in ws)
    train_done = max(w["marks"]["trainDone"] for w in ws)
    eval_done = max(w["marks"]["evalDone"] for w in ws)
    end = d.get("fitDone", eval_done)
    steps = len(w0["stepEnds"])
    global_batch = w0["batchSize"] * len(ws)
    out = {
        "key": cfg["key"], "framework": cfg["framework"], "kind": cfg["kind"], "threads": cfg["threads"],
        "workers": cfg["workers"], "label": label(cfg),
        "wall_s": end - spawn,
        "startup_s": first_step - spawn,
        "train_s": last_step - first_step,
        # After the last step until the training call returned: ~0 for PyTorch; TensorFlow's model.fit sometimes
        # sits idle here for seconds (see training/NOTES.md).
        "fit_tail_s": train_done - last_step,
        "steady_samples_per_s": _steady_throughput(ws, settings, global_batch, first_step),
        "samples_trained": steps * global_batch,
        "steps": steps,
        "global_batch": global_batch,
        "val_accuracy": w0["valAccuracy"],
        "last_loss": w0["lastLoss"],
        "parameters": w0["parameters"],
    }
    # Where the start-up seconds go (consecutive phases; they add up to startup_s).
    if cfg["kind"] == "plain":
        phases = _plain_phases(w0, spawn, first_step)
    else:
        phases = _ray_phases(d, ws, spawn, first_step)
        out["teardown_s"] = end - eval_done
        out["ray_cluster_cpus"] = raw.get("rayClusterCpus")
    out["startup_phases"] = {k: round(v, 3) for k, v in phases.items()}
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


# ---------------------------------------------------------------- parent: run every configuration

def child_env(threads: int | None = None) -> dict[str, str]:
    """The environment of a run's process (and of the warm Ray): this checkout importable; for a plain run, thread
    pools sized before the frameworks start them (set_num_threads alone leaves OpenMP at the core count)."""
    env = dict(os.environ)
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([repo] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(threads)
        env.pop("RAY_ADDRESS", None)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("TF_USE_LEGACY_KERAS", "1")
    return env


def run_child(cfg: dict[str, Any], settings: dict[str, Any], ray_address: str | None, log_path: Path,
              timeout: float, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    env = child_env(cfg["threads"] if cfg["kind"] == "plain" else None) | (extra_env or {})
    payload = json.dumps({"config": cfg, "settings": settings, "rayAddress": ray_address})
    spawn = now()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.run([sys.executable, "-m", "training.bench.train", "--one", payload, "--spawn", repr(spawn)],
                              stdout=subprocess.PIPE, stderr=log, text=True, env=env, timeout=timeout)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(RESULT_PREFIX)), None)
    if proc.returncode != 0 or line is None:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{cfg['key']} failed (exit {proc.returncode}); log {log_path}:\n{tail}")
    return json.loads(line[len(RESULT_PREFIX):])


WARM_PREFIX = "WARM_RAY_ADDRESS "


def warm_host() -> int:
    """The warm Ray's own process: start a local Ray, print its address, keep it until stdin closes."""
    from training.runtime.env import apply_quiet_defaults

    apply_quiet_defaults()
    import ray

    from training.runtime.cluster import export_import_path

    export_import_path()
    ray.init(address="local", include_dashboard=True, logging_level="WARNING")
    # A local Ray turns token authentication on (RAY_AUTH_MODE=token in this process, the token in ~/.ray): a driver
    # joining by address needs the same mode, so the runs get it with the address.
    joining_env = {k: os.environ[k] for k in ("RAY_AUTH_MODE",) if k in os.environ}
    print(WARM_PREFIX + json.dumps({"address": ray.get_runtime_context().gcs_address, "env": joining_env}), flush=True)
    sys.stdin.read()
    ray.shutdown()
    return 0


class WarmRay:
    """One local Ray, started once in a process of its own, that every warm run joins (as a RayJob's entrypoint joins
    its cluster); stopped when the benchmark ends, also when it fails. ``address`` given: join that one instead."""

    def __init__(self, log_path: Path, address: str | None = None, timeout: float = 180):
        self.log_path, self.address, self.timeout = log_path, address, timeout
        self.env: dict[str, str] = {}  # what a driver joining it needs in its environment
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> WarmRay:
        if self.address:
            return self
        log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115 -- the child writes to it until __exit__
        self.proc = subprocess.Popen([sys.executable, "-m", "training.bench.train", "--warm-host"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                     env=child_env())
        log.close()
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith(WARM_PREFIX):
            self.__exit__(None, None, None)
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the warm Ray did not start; log {self.log_path}:\n{tail}")
        joined = json.loads(line[len(WARM_PREFIX):])
        self.address, self.env = joined["address"], joined["env"]
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            info["memoryGiB"] = round(int(fh.readline().split()[1]) / 2**20, 1)
        info["loadAverage"] = [round(x, 2) for x in os.getloadavg()]
    except Exception:
        pass
    from importlib.metadata import PackageNotFoundError, version

    for pkg in ("torch", "tensorflow", "tf_keras", "ray"):
        try:
            info[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return info


def median_of(values):
    vals = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(vals) if vals else None


def aggregate(runs: list[dict[str, Any]], configs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    fields = ("wall_s", "startup_s", "train_s", "fit_tail_s", "steady_samples_per_s", "val_accuracy", "teardown_s")
    for cfg in configs:
        mine = [r for r in runs if r["key"] == cfg["key"]]
        if not mine:
            continue
        agg: dict[str, Any] = {"label": label(cfg), "framework": cfg["framework"], "kind": cfg["kind"],
                               "threads": cfg["threads"], "workers": cfg["workers"], "runs": len(mine),
                               "warm": bool(cfg.get("warm")),
                               "comparisonKey": comparison_key(cfg) if cfg["kind"] == "ray" else None,
                               "global_batch": mine[0]["global_batch"], "samples_trained": mine[0]["samples_trained"]}
        for f in fields:
            vals = [r[f] for r in mine if f in r]
            if vals:
                agg[f] = round(median_of(vals), 4)
                agg[f + "_min"] = round(min(vals), 4)
                agg[f + "_max"] = round(max(vals), 4)
        phases = {}
        for name in mine[0]["startup_phases"]:
            phases[name] = round(median_of([r["startup_phases"].get(name) for r in mine]), 3)
        agg["startup_phases"] = phases
        out[cfg["key"]] = agg
    return out


def compare(agg: dict[str, dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """The plain-vs-distributed comparison (baseline vs Ray: time, accuracy, speedup, efficiency) per framework, plus the
    steady-throughput and equal-CPU figures."""
    out: dict[str, Any] = {}
    for fw in settings["frameworks"]:
        base = agg.get(f"{fw}/plain-1t")
        if not base:
            continue
        entry: dict[str, Any] = {
            "baseline": _seed_block("baseline", base, settings),
        }
        for t in settings["threads"]:
            if t != 1 and f"{fw}/plain-{t}t" in agg:
                entry[f"baseline_{t}_threads"] = _seed_block("baseline", agg[f"{fw}/plain-{t}t"], settings)
        for ray_cfg in (a for k, a in agg.items() if k.startswith(fw + "/") and a["kind"] == "ray"):
            w = ray_cfg["workers"]
            equal = agg.get(f"{fw}/plain-{w}t")
            block = _seed_block("ray_distributed", ray_cfg, settings)
            block["num_workers"] = w
            block["warm_ray"] = ray_cfg.get("warm", False)
            block["speedup"] = round(base["wall_s"] / ray_cfg["wall_s"], 3)
            block["efficiency"] = round(block["speedup"] / w, 3)
            block["steady_speedup"] = round(ray_cfg["steady_samples_per_s"] / base["steady_samples_per_s"], 3)
            block["steady_efficiency"] = round(block["steady_speedup"] / w, 3)
            block["accuracy_difference"] = round(ray_cfg["val_accuracy"] - base["val_accuracy"], 4)
            block["target_accuracy_within_2_points"] = abs(block["accuracy_difference"]) < 0.02
            if block["warm_ray"]:
                block["target_first_step_le_10s"] = ray_cfg["startup_s"] <= 10.0
            if equal:
                block["equal_cpu_baseline"] = f"plain, {w} thread(s)"
                block["steady_vs_equal_cpu_baseline"] = round(ray_cfg["steady_samples_per_s"] / equal["steady_samples_per_s"], 3)
                block["wall_vs_equal_cpu_baseline"] = round(equal["wall_s"] / ray_cfg["wall_s"], 3)
                block["accuracy_difference_vs_equal_cpu_baseline"] = round(ray_cfg["val_accuracy"] - equal["val_accuracy"], 4)
                block["target_steady_ge_0.9x_equal_cpu"] = block["steady_vs_equal_cpu_baseline"] >= 0.9
            block["startup_extra_s"] = round(ray_cfg["startup_s"] - base["startup_s"], 3)
            entry[comparison_key(ray_cfg)] = block
        out[fw] = entry
    return out


def _seed_block(kind: str, agg: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    block = {
        "training_type": kind,
        "training_time_seconds": agg["wall_s"],
        "time_to_first_step_seconds": agg["startup_s"],
        "steady_samples_per_second": agg["steady_samples_per_s"],
        "epochs_completed": settings["epochs"],
        "test_accuracy": agg["val_accuracy"],
    }
    if agg["kind"] == "plain":
        block["threads"] = agg["threads"]
    return block


def _int_list(text: str) -> list[int]:
    values = sorted({int(x) for x in text.split(",") if x.strip()})
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: positive integers, comma-separated")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.bench.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="seconds-long run for tests: 256 samples, small CNN, 1 epoch, 1 repeat")
    p.add_argument("--repeats", type=int, help="runs per configuration (median reported); default 3 (--tiny: 1)")
    p.add_argument("--epochs", type=int, help="epochs per run (the first is warm-up); default 5 (--tiny: 1)")
    p.add_argument("--batch-size", type=int, default=64,
                   help="global batch of one step (N workers train batch/N each), as the spec's batchSize; default 64")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--data", choices=["digits", "synthetic"], default="digits",
                   help="digits (1,437 train / 360 val, 8x8x1) or synthetic CIFAR-shaped tensors (32x32x3)")
    p.add_argument("--num-samples", type=int, default=4096, help="synthetic: training samples")
    p.add_argument("--frameworks", type=lambda s: [x for x in s.split(",") if x], default=list(FRAMEWORKS),
                   help="comma-separated: pytorch,tensorflow")
    p.add_argument("--workers", type=_int_list, default=[1, 2],
                   help="Ray Train worker counts (1 CPU each), comma-separated; default 1,2")
    p.add_argument("--threads", type=_int_list, default=[1, 2],
                   help="plain baseline thread counts, comma-separated (1 is the baseline); default 1,2")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder; default {DEFAULT_OUT}")
    p.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS"),
                   help="join this Ray cluster for the Ray runs (default: $RAY_ADDRESS, else a local Ray per run)")
    p.add_argument("--no-warm", dest="warm", action="store_false",
                   help="leave out the warm runs (Ray Train joining one Ray started once by the benchmark)")
    p.add_argument("--warm-address", metavar="ADDRESS",
                   help="the warm runs join this Ray instead of one the benchmark starts")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per run before giving up")
    p.add_argument("--only", metavar="KEY",
                   help="run this one configuration in this process (pytorch/plain-1t, pytorch/ray-2w, ...) and "
                        "print its raw result on a line starting with 'BENCH_RESULT ' (a cluster job of "
                        "make bench-cluster; the Ray runs join $RAY_ADDRESS, which a Ray job sets)")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--warm-host", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--spawn", type=float, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)

    if args.warm_host:
        return warm_host()
    if args.one:
        payload = json.loads(args.one)
        raw = run_one(payload["config"], payload["settings"], args.spawn or CHILD_START, payload.get("rayAddress"))
        print(RESULT_PREFIX + json.dumps(raw), flush=True)
        return 0

    if args.only:
        return run_only(args, p)
    bad = [f for f in args.frameworks if f not in FRAMEWORKS]
    if bad:
        p.error(f"unknown framework(s) {bad}; choose from {', '.join(FRAMEWORKS)}")
    if 1 not in args.threads:
        p.error("--threads must include 1: the 1-thread plain run is the baseline")
    settings = settings_from_args(args)
    configs = plan(settings)
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    say(f"{len(configs)} configuration(s) x {settings['repeats']} repeat(s), {settings['epochs']} epoch(s), "
        f"data {settings['data']['source']}, global batch {settings['batchSize']}; cold Ray runs "
        + (f"join {args.ray_address}" if args.ray_address else "start a local Ray each")
        + ("; warm runs join " + (args.warm_address or "one Ray started once") if settings["warm"] else ""))
    t0 = now()
    # The cold runs first, with no other Ray on the machine; then the warm Ray is started once for the warm runs.
    runs, raws = run_plan([c for c in configs if not c.get("warm")], settings, args.ray_address, out / "logs",
                          args.timeout)
    warm_configs = [c for c in configs if c.get("warm")]
    if warm_configs:
        with WarmRay(out / "logs" / "warm-ray.log", args.warm_address) as warm:
            more = run_plan(warm_configs, settings, warm.address, out / "logs", args.timeout, warm.env)
        runs, raws = runs + more[0], raws + more[1]
    agg = aggregate(runs, configs)
    report = {
        "benchmark": "bench-train",
        "createdAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "durationSeconds": round(now() - t0, 1),
        "machine": machine_info(),
        "rayAddress": args.ray_address or "local (one per Ray run)",
        "warmRayAddress": (args.warm_address or "local (one for every warm run)") if warm_configs else None,
        "settings": settings,
        "definitions": DEFINITIONS,
        "configurations": agg,
        "comparison": compare(agg, settings),
        "runs": runs,
        "raw": raws,
    }
    from training.bench.report import write_train_report

    paths = write_train_report(report, out)
    say(f"done in {report['durationSeconds']:.0f} s: " + ", ".join(str(p) for p in paths))
    return 0


def run_only(args, p: argparse.ArgumentParser) -> int:
    """``--only KEY``: one configuration in this process, its raw result printed (a job of make bench-cluster)."""
    try:
        cfg = config_for(args.only)
    except ValueError as exc:
        p.error(str(exc))
    settings = settings_from_args(args) | {"warm": False}  # one configuration: no warm runs
    say(f"{cfg['key']}: {settings['epochs']} epoch(s), data {settings['data']['source']}, global batch "
        f"{settings['batchSize']}" + (f"; Ray at {args.ray_address}" if cfg["kind"] == "ray" and args.ray_address
                                      else ""))
    raw = run_one(cfg, settings, process_start_time() or CHILD_START,
                  args.ray_address if cfg["kind"] == "ray" else None)
    raw["settings"], raw["machine"] = settings, machine_info()
    print(RESULT_PREFIX + json.dumps(raw), flush=True)
    return 0


def run_plan(configs: list[dict[str, Any]], settings: dict[str, Any], ray_address: str | None, logs: Path,
             timeout: float, extra_env: dict[str, str] | None = None) -> tuple[list[dict], list[dict]]:
    """Every configuration ``repeats`` times, interleaved; each run in a fresh process. Per-run figures and raw marks."""
    runs: list[dict[str, Any]] = []
    raws: list[dict[str, Any]] = []
    for rep in range(settings["repeats"]):
        for cfg in configs:
            log_path = logs / f"{cfg['key'].replace('/', '_')}-{rep + 1}.log"
            raw = run_child(cfg, settings, ray_address if cfg["kind"] == "ray" else None, log_path, timeout, extra_env)
            m = measure(raw, settings)
            m["repeat"] = rep + 1
            runs.append(m)
            raws.append({"key": cfg["key"], "repeat": rep + 1, "driver": raw["driver"],
                         "workers": [{k: v for k, v in w.items() if k != "stepEnds"} | {"steps": len(w["stepEnds"])}
                                     for w in raw["workers"]]})
            say(f"[{rep + 1}/{settings['repeats']}] {cfg['key']:<22} wall {m['wall_s']:7.2f} s, first step after "
                f"{m['startup_s']:6.2f} s, steady {m['steady_samples_per_s']:8.1f} samples/s, "
                f"val acc {m['val_accuracy']:.3f}")
    return runs, raws

if __name__ == "__main__":
    sys.exit(main())
