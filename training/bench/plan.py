"""What bench-train runs, and how: the configurations of the settings (``plan``; ``config_for`` the one a key names),
each run ``repeats`` times, interleaved, each in a fresh process (``run_plan``, ``run_child``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from training.bench.measure import measure
from training.bench.settings import FRAMEWORKS, RESULT_PREFIX, Config, TrainSettings


def say(message: str) -> None:
    print(f"[bench-train] {message}", file=sys.stderr, flush=True)


#: The frameworks whose loop also runs under its own data-parallel wrapper without Ray (``ddp``): PyTorch's DDP.
#: TensorFlow's MultiWorkerMirroredStrategy needs a TF_CONFIG cluster of its own; its cost is measured apart
#: (training/NOTES.md).
DDP_FRAMEWORKS = ("pytorch",)


def plan(settings: TrainSettings) -> list[Config]:
    """Every configuration the settings ask for: per framework, plain with each thread count, plain DDP (PyTorch,
    no Ray) with each worker count above 1, Ray Train with each worker count, and (warm) those again joining one
    Ray started once."""
    out = []
    for fw in settings.frameworks:
        out += [Config(f"{fw}/plain-{t}t", fw, "plain", threads=t, workers=1) for t in settings.threads]
        if fw in DDP_FRAMEWORKS:
            out += [Config(f"{fw}/ddp-{w}p", fw, "ddp", threads=1, workers=w) for w in settings.workers if w > 1]
        out += [Config(f"{fw}/ray-{w}w", fw, "ray", threads=1, workers=w) for w in settings.workers]
        if settings.warm:
            out += [Config(f"{fw}/ray-{w}w-warm", fw, "ray", threads=1, workers=w, warm=True) for w in settings.workers]
    return out


ONLY_KEY = re.compile(r"^(?P<framework>pytorch|tensorflow)/(?:plain-(?P<threads>[1-9][0-9]*)t"
                      r"|ray-(?P<workers>[1-9][0-9]*)w|ddp-(?P<processes>[2-9]|[1-9][0-9]+)p)$")


def config_for(key: str) -> Config:
    """The configuration a key of the plan names (pytorch/plain-1t, tensorflow/ray-2w, pytorch/ddp-2p, ...)."""
    match = ONLY_KEY.match(key)
    if not match or (match.group("processes") and match.group("framework") not in DDP_FRAMEWORKS):
        raise ValueError(f"{key!r}: expected <framework>/plain-<threads>t or <framework>/ray-<workers>w with "
                         f"framework one of {', '.join(FRAMEWORKS)}, or pytorch/ddp-<processes>p with 2 or more "
                         f"(e.g. pytorch/plain-1t, pytorch/ray-2w, pytorch/ddp-2p)")
    fw, threads, workers = match.group("framework"), match.group("threads"), match.group("workers")
    if threads:
        return Config(key, fw, "plain", threads=int(threads), workers=1)
    if match.group("processes"):
        return Config(key, fw, "ddp", threads=1, workers=int(match.group("processes")))
    return Config(key, fw, "ray", threads=1, workers=int(workers))


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


def run_child(cfg: Config, settings: TrainSettings, ray_address: str | None, log_path: Path,
              timeout: float, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """One run in a fresh process (``python -m training.bench.train --one``): its raw result."""
    env = child_env(cfg.threads if cfg.kind in ("plain", "ddp") else None) | (extra_env or {})
    payload = json.dumps({"config": cfg.to_json(), "settings": settings.to_json(), "rayAddress": ray_address})
    spawn = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.run([sys.executable, "-m", "training.bench.train", "--one", payload, "--spawn", repr(spawn)],
                              stdout=subprocess.PIPE, stderr=log, text=True, env=env, timeout=timeout)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(RESULT_PREFIX)), None)
    if proc.returncode != 0 or line is None:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{cfg.key} failed (exit {proc.returncode}); log {log_path}:\n{tail}")
    return json.loads(line[len(RESULT_PREFIX):])


def run_plan(configs: list[Config], settings: TrainSettings, ray_address: str | None, logs: Path,
             timeout: float, extra_env: dict[str, str] | None = None) -> tuple[list[dict], list[dict]]:
    """Every configuration ``repeats`` times, interleaved; each run in a fresh process. Per-run figures and raw marks."""
    runs: list[dict[str, Any]] = []
    raws: list[dict[str, Any]] = []
    for rep in range(settings.repeats):
        for cfg in configs:
            log_path = logs / f"{cfg.key.replace('/', '_')}-{rep + 1}.log"
            raw = run_child(cfg, settings, ray_address if cfg.kind == "ray" else None, log_path, timeout, extra_env)
            m = measure(raw, settings)
            m["repeat"] = rep + 1
            runs.append(m)
            raws.append({"key": cfg.key, "repeat": rep + 1, "driver": raw["driver"],
                         "workers": [{k: v for k, v in w.items() if k != "stepEnds"} | {"steps": len(w["stepEnds"])}
                                     for w in raw["workers"]]})
            say(f"[{rep + 1}/{settings.repeats}] {cfg.key:<22} wall {m['wall_s']:7.2f} s, first step after "
                f"{m['startup_s']:6.2f} s, steady {m['steady_samples_per_s']:8.1f} samples/s, "
                f"val acc {m['val_accuracy']:.3f}")
    return runs, raws
