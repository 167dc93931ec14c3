"""A spec the schema has passed, with every default filled in: the typed, immutable :class:`training.job.parts.Job`.
A default is written once, on the job's dataclasses (a framework's own, on its registry entry); what the spec leaves
out takes it (:func:`training.job.parts.given`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from training.frameworks import registry
from training.frameworks.base import Framework
from training.job.parts import Checkpoint, Data, Job, Model, SearchParam, Training, Tune, Workers, freeze
from training.job.search import target_of

#: Environment variable with the default storage path (the RayJob chart sets it to the checkpoint PVC mount).
STORAGE_ENV = "TRAINING_STORAGE_PATH"
DEFAULT_STORAGE = "results/training"


def _given(block: Mapping[str, Any], fields: Mapping[str, tuple[str, Callable[[Any], Any] | None]]) -> dict[str, Any]:
    """The fields a spec block writes, converted (``{specKey: (field, convert or None to keep it as written)}``):
    what the block leaves out takes the typed job's own default, which is written once, on its dataclass."""
    return {name: convert(block[key]) if convert else block[key] for key, (name, convert) in fields.items()
            if key in block}

def _abs_storage(path: str, base: Path | None = None) -> str:
    """Local paths become absolute; URIs (s3://, gs://, file://...) stay as they are."""
    if "://" in path:
        return path
    p = Path(os.path.expanduser(path))
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    return str(p.resolve())


def normalize(spec: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Job:
    """A validated spec with every default filled in: the typed, immutable job the driver and every worker use."""
    environ = os.environ if environ is None else environ
    tc = spec.get("trainConfig", {}) or {}
    mode = spec["mode"]
    training = _training(tc, registry.get(tc.get("framework") or registry.DEFAULT))
    job = Job(
        name=spec.get("name") or "",
        name_source="spec" if spec.get("name") else "derived",
        mode=mode,
        workers=_workers(spec.get("config", {}) or {}, tc.get("scalingConfig", {}) or {}),
        training=training,
        data=data_block(spec.get("data", {}) or {}),
        checkpoint=_checkpoint(spec.get("checkpoint", {}) or {}, environ),
    )
    if mode == "tune":
        job = dataclasses.replace(job, tune=normalize_tune(spec.get("tuneConfig") or {}, job.training, job.workers))
    if not job.name:
        from training.job.identity import derived_name

        job = dataclasses.replace(job, name=derived_name(job))
    return job


def _workers(cfg: Mapping[str, Any], sc: Mapping[str, Any]) -> Workers:
    """How many workers and what each holds: ``trainConfig.scalingConfig`` over ``config``."""
    rpw = {**(cfg.get("resourcesPerWorker") or {}), **(sc.get("resourcesPerWorker") or {})}
    use_gpu = bool(sc.get("useGpu", cfg.get("useGpu", False))) or float(rpw.get("gpu", 0) or 0) > 0
    workers = sc.get("numWorkers", cfg.get("numWorkers", Workers.count))
    elastic = isinstance(workers, dict)
    return Workers(
        count=int(workers["max"] if elastic else workers),
        min_count=int(workers["min"]) if elastic else None,
        use_gpu=use_gpu,
        gpu=float(rpw.get("gpu", 1 if use_gpu else 0)),
        health_check=freeze(cfg.get("healthCheck") or {}),
        written_in=freeze({key: "trainConfig.scalingConfig" if key in sc else "config"
                           for key in ("numWorkers", "useGpu") if key in sc or key in cfg}),
        **_given(rpw, {"cpu": ("cpu", float)}),
        **_given(sc, {"placementStrategy": ("placement_strategy", str)}),
        **_given(cfg, {"resourceWaitSeconds": ("resource_wait_s", float)}),
    )


def _training(tc: Mapping[str, Any], framework: Framework) -> Training:
    """What is trained and how: the framework's defaults under ``trainConfig``."""
    timeout = tc.get("collectiveTimeoutSeconds")
    return Training(
        framework=framework.name,
        trainer_path=tc.get("trainerPath"),
        epochs=int(tc.get("epochs", framework.epochs)),
        batch_size=int(tc.get("batchSize", framework.batch_size)),
        lr=float(tc.get("lr", framework.lr)),
        model=Model(**_given(tc.get("model") or {}, {
            "filters": ("filters", tuple), "dense": ("dense", int), "convDropout": ("conv_dropout", float),
            "denseDropout": ("dense_dropout", float)})),
        xgboost=freeze(tc.get("xgboost") or {}),
        params=freeze(tc.get("params") or {}),
        collective_timeout_s=int(timeout) if timeout else None,
        builtin_model=framework.builtin_model and not tc.get("trainerPath"),
        params_block=framework.params_block,
        **_given(tc, {"seed": ("seed", int)}),
    )


def data_block(data: Mapping[str, Any]) -> Data:
    """A spec's ``data`` block (validated) with its defaults, as the data loaders take it."""
    return Data(**_given(data, {
        "source": ("source", str), "path": ("path", lambda p: _abs_storage(p) if p else None),
        "validationFraction": ("validation_fraction", float), "maxTrainSamples": ("max_train_samples", None),
        "maxValSamples": ("max_val_samples", None), "numSamples": ("num_samples", int),
        "verifyOnDriver": ("verify_on_driver", bool)}))



def _checkpoint(ck: Mapping[str, Any], environ: Mapping[str, str]) -> Checkpoint:
    """Where checkpoints go (the spec, else $TRAINING_STORAGE_PATH, else the default folder) and how many stay."""
    storage = ck.get("storagePath") or environ.get(STORAGE_ENV) or DEFAULT_STORAGE
    resume_from = ck.get("resumeFrom")
    return Checkpoint(
        storage_path=_abs_storage(storage),
        storage_source="spec" if ck.get("storagePath") else (STORAGE_ENV if environ.get(STORAGE_ENV) else "default"),
        resume_from=_abs_storage(resume_from) if resume_from else None,
        **_given(ck, {"everyEpochs": ("every_epochs", int), "keepBest": ("keep_best", None),
                      "metric": ("metric", None), "metricMode": ("metric_mode", None),
                      "maxFailures": ("max_failures", int)}),
    )


# ---------------------------------------------------------------- mode tune: the search

def resolve_runner(runner: str, workers: int) -> str:
    """``auto``: a multi-worker trial is a Ray Train run; a one-worker trial trains in the trial's own process."""
    if runner == "auto":
        return "train" if workers > 1 else "local"
    return runner


def default_perturbation_interval(epochs: int) -> int:
    return max(1, epochs // 4)


def normalize_tune(tc: Mapping[str, Any], training: Training, workers: Workers) -> Tune:
    """The normalized ``tuneConfig`` (defaults filled in) of a validated ``mode: tune`` spec."""
    space = []
    for key, dist in (tc.get("searchSpace") or {}).items():
        target, info = target_of(key, training.framework, bool(training.trainer_path), f"tuneConfig.searchSpace.{key}")
        space.append(SearchParam(key=key, target=target, kind=info[0], type=dist["type"], min=dist.get("min"),
                                 max=dist.get("max"), q=dist.get("q"), values=freeze(dist.get("values"))))
    scheduler = tc.get("scheduler", Tune.scheduler)
    runner = resolve_runner(tc.get("trialRunner", "auto"), workers.count)
    rpt = tc.get("resourcesPerTrial") or {}
    own_cpu, own_gpu = (workers.cpu, workers.gpu) if runner == "local" else (0, 0)
    return Tune(
        search_space=tuple(space),
        scheduler=scheduler,
        scheduler_config=freeze(_scheduler_options(scheduler, tc.get("schedulerConfig") or {}, training.epochs)),
        metric=tc.get("metric") or "",
        mode=tc.get("mode") or "",
        trial_cpu=float(rpt.get("cpu", own_cpu)),
        trial_gpu=float(rpt.get("gpu", own_gpu)),
        trial_runner=runner,
        seed=int(tc.get("seed", training.seed)),
        **_given(tc, {"numSamples": ("num_samples", int), "maxConcurrentTrials": ("max_concurrent_trials", None),
                     "maxFailures": ("max_failures", int),
                     "keepCheckpointsPerTrial": ("keep_checkpoints_per_trial", int)}),
    )



def _scheduler_options(scheduler: str, opts: Mapping[str, Any], epochs: int) -> dict[str, Any]:
    """A scheduler's options with their defaults (the trial's epochs bound ASHA's maxT and PBT's interval); an option
    of another scheduler stays as written, for the check to name it."""
    own = _own_options(scheduler, opts, epochs)
    return {**{k: v for k, v in opts.items() if k not in own}, **own}


def _own_options(scheduler: str, opts: Mapping[str, Any], epochs: int) -> dict[str, Any]:
    if scheduler == "asha":
        return {"gracePeriod": int(opts.get("gracePeriod", 1)), "reductionFactor": float(opts.get("reductionFactor", 3)),
                "maxT": int(opts.get("maxT", epochs)), "brackets": int(opts.get("brackets", 1))}
    if scheduler == "median":
        return {"gracePeriod": int(opts.get("gracePeriod", 1)),
                "minSamplesRequired": int(opts.get("minSamplesRequired", 3))}
    if scheduler == "pbt":
        return {"perturbationInterval": int(opts.get("perturbationInterval", default_perturbation_interval(epochs))),
                "quantileFraction": float(opts.get("quantileFraction", 0.25)),
                "resampleProbability": float(opts.get("resampleProbability", 0.25)),
                "synch": bool(opts.get("synch", False))}
    return dict(opts)
