"""bench-train's figures: per run from the raw marks of its driver and workers (``measure``), the medians of a
configuration's repeats (``aggregate``), and the plain-vs-Ray comparison with the targets (``compare``). Settings and
configurations may come typed or as their JSON (a run's raw result, a report)."""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Mapping
from typing import Any

from training.bench.settings import Config, TrainSettings

DEFINITIONS = {
    "wall_s": "process start -> trained model evaluated (cold start included)",
    "startup_s": "process start -> end of the first training step (time to first step)",
    "fit_to_first_step_s": "Ray runs: trainer.fit() called -> end of the first training step (Ray Train's start-up)",
    "steady_samples_per_s": "training samples/s of all workers together, after the first epoch to the last step",
    "train_s": "end of the first step -> end of the last step",
    "fit_tail_s": "end of the last step -> the training call (loop / model.fit) returned",
    "speedup": "baseline (plain, 1 thread) wall time / this wall time",
    "efficiency": "speedup / workers",
    "steady_vs_equal_cpu_baseline": "steady throughput / the plain baseline's with as many threads as workers",
    "steady_vs_plain_ddp": "Ray Train's steady throughput / plain DDP's (the same loop in as many processes, no Ray)",
}


def _steady_throughput(ws: list[dict], settings: TrainSettings, global_batch: int, first_step: float) -> float:
    """Samples per second after the first epoch (or the first fifth of the steps), over every worker."""
    w0 = ws[0]
    steps = len(w0["stepEnds"])
    if steps <= 1:
        return global_batch / max(first_step - w0["marks"]["modelReady"], 1e-9)
    warm = w0["stepsPerEpoch"] if settings.epochs >= 2 else max(1, steps // 5)
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


def _ddp_phases(d: dict, ws: list[dict], spawn: float, first_step: float) -> dict[str, float]:
    group = max(w["marks"]["groupReady"] for w in ws)
    data_done = max(w["marks"]["dataDone"] for w in ws)
    ready = max(w["marks"]["modelReady"] for w in ws)
    return {"python + torch import": d["imported"] - spawn,
            "processes (torch import) + gloo process group": group - d["imported"],
            "data (incl. scikit-learn import)": data_done - group,
            "model + DDP": ready - data_done,
            "first step": first_step - ready}


def _ray_phases(d: dict, ws: list[dict], spawn: float, first_step: float) -> dict[str, float]:
    enter = max(w["marks"]["loopEnter"] for w in ws)
    data_done = max(w["marks"]["dataDone"] for w in ws)
    phases = {"python + ray imports": d["imported"] - spawn, "ray.init": d["rayInit"] - d["imported"],
              "trainer setup (result queue actor, trainer import)": d["fitCall"] - d["rayInit"]}
    starts = [w["marks"].get("processStart") for w in ws]
    controller = d.get("controllerUp")
    if all(starts) and all(d["fitCall"] <= s <= enter for s in starts):
        last_start = max(starts)
        if controller and d["fitCall"] <= controller <= min(starts):
            phases["fit -> Train controller up"] = controller - d["fitCall"]
            phases["controller -> worker group (processes started)"] = last_start - controller
        else:
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


def measure(raw: dict[str, Any], settings: TrainSettings | Mapping[str, Any]) -> dict[str, Any]:
    """Per-run figures from the raw marks of the driver and of each worker."""
    settings = TrainSettings.of(settings)
    cfg, d, ws = Config.of(raw["config"]), raw["driver"], raw["workers"]
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
        "key": cfg.key, "framework": cfg.framework, "kind": cfg.kind, "threads": cfg.threads,
        "workers": cfg.workers, "label": cfg.label,
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
    if cfg.kind == "plain":
        phases = _plain_phases(w0, spawn, first_step)
    elif cfg.kind == "ddp":
        phases = _ddp_phases(d, ws, spawn, first_step)
    else:
        phases = _ray_phases(d, ws, spawn, first_step)
        out["teardown_s"] = end - eval_done
        out["fit_to_first_step_s"] = first_step - d["fitCall"]
        out["ray_cluster_cpus"] = raw.get("rayClusterCpus")
    out["startup_phases"] = {k: round(v, 3) for k, v in phases.items()}
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


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


def aggregate(runs: list[dict[str, Any]], configs: list[Config | Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each configuration's medians (and min, max) over its repeats."""
    out = {}
    configs = [Config.of(c) for c in configs]
    fields = ("wall_s", "startup_s", "train_s", "fit_tail_s", "steady_samples_per_s", "val_accuracy", "teardown_s",
              "fit_to_first_step_s")
    for cfg in configs:
        mine = [r for r in runs if r["key"] == cfg.key]
        if not mine:
            continue
        agg: dict[str, Any] = {"label": cfg.label, "framework": cfg.framework, "kind": cfg.kind,
                               "threads": cfg.threads, "workers": cfg.workers, "runs": len(mine),
                               "warm": cfg.warm, "comparisonKey": cfg.comparison_key if cfg.kind == "ray" else None,
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
        out[cfg.key] = agg
    return out


def compare(agg: dict[str, dict[str, Any]], settings: TrainSettings | Mapping[str, Any]) -> dict[str, Any]:
    """The plain-vs-distributed comparison (baseline vs Ray: time, accuracy, speedup, efficiency) per framework, plus the
    steady-throughput and equal-CPU figures."""
    settings = TrainSettings.of(settings)
    out: dict[str, Any] = {}
    for fw in settings.frameworks:
        base = agg.get(f"{fw}/plain-1t")
        if not base:
            continue
        entry: dict[str, Any] = {
            "baseline": _seed_block("baseline", base, settings),
        }
        for t in settings.threads:
            if t != 1 and f"{fw}/plain-{t}t" in agg:
                entry[f"baseline_{t}_threads"] = _seed_block("baseline", agg[f"{fw}/plain-{t}t"], settings)
        for ddp in (a for k, a in agg.items() if k.startswith(fw + "/") and a["kind"] == "ddp"):
            w = ddp["workers"]
            equal = agg.get(f"{fw}/plain-{w}t")
            block = _seed_block("ddp_without_ray", ddp, settings)
            block["num_processes"] = w
            if equal:
                block["equal_cpu_baseline"] = f"plain, {w} thread(s)"
                block["steady_vs_equal_cpu_baseline"] = round(
                    ddp["steady_samples_per_s"] / equal["steady_samples_per_s"], 3)
            entry[f"ddp_{w}_processes"] = block
        for ray_cfg in (a for k, a in agg.items() if k.startswith(fw + "/") and a["kind"] == "ray"):
            w = ray_cfg["workers"]
            equal = agg.get(f"{fw}/plain-{w}t")
            ddp = agg.get(f"{fw}/ddp-{w}p")
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
                # issue 26's measure of Ray Train's own start-up: from trainer.fit() to the first step
                block["fit_to_first_step_seconds"] = ray_cfg["fit_to_first_step_s"]
                block["target_fit_to_first_step_le_10s"] = ray_cfg["fit_to_first_step_s"] <= 10.0
            if equal:
                block["equal_cpu_baseline"] = f"plain, {w} thread(s)"
                block["steady_vs_equal_cpu_baseline"] = round(ray_cfg["steady_samples_per_s"] / equal["steady_samples_per_s"], 3)
                block["wall_vs_equal_cpu_baseline"] = round(equal["wall_s"] / ray_cfg["wall_s"], 3)
                block["accuracy_difference_vs_equal_cpu_baseline"] = round(ray_cfg["val_accuracy"] - equal["val_accuracy"], 4)
                block["target_steady_ge_0.9x_equal_cpu"] = block["steady_vs_equal_cpu_baseline"] >= 0.9
            if ddp:  # the same steps and all-reduce without Ray: what of the shortfall is Ray's
                block["steady_vs_plain_ddp"] = round(ray_cfg["steady_samples_per_s"] / ddp["steady_samples_per_s"], 3)
            block["startup_extra_s"] = round(ray_cfg["startup_s"] - base["startup_s"], 3)
            entry[ray_cfg["comparisonKey"]] = block
        out[fw] = entry
    return out


def _seed_block(kind: str, agg: dict[str, Any], settings: TrainSettings) -> dict[str, Any]:
    block = {
        "training_type": kind,
        "training_time_seconds": agg["wall_s"],
        "time_to_first_step_seconds": agg["startup_s"],
        "steady_samples_per_second": agg["steady_samples_per_s"],
        "epochs_completed": settings.epochs,
        "test_accuracy": agg["val_accuracy"],
    }
    if agg["kind"] == "plain":
        block["threads"] = agg["threads"]
    return block
