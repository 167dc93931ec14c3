"""``python -m training run``: spec -> checks -> Ray -> result JSON.

Order matters: everything that can be checked without Ray (schema, the trainer function, the data path, the
checkpoint to resume from) is checked before Ray starts; resources are checked against the connected cluster before
any placement group is requested, so no run hangs waiting for resources that are not there. Each mode (cluster,
train, tune) is one function; :func:`run` wraps them with the one error-and-result handling.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from training.errors import CheckpointError, SpecError, TrainingJobError
from training.job.build import build
from training.job.defaults import DEFAULT_STORAGE, STORAGE_ENV
from training.job.load import INVALID_SPEC_NAME, NAME_PATTERN, apply_overrides, load_spec_file
from training.job.parts import Job
from training.result import clean, default_result_path, error_result, validate_result, write_result
from training.runtime import checkpoints, faults, storage
from training.runtime.env import apply_quiet_defaults
from training.runtime.faults import TestHooks

EXIT_CODES = {
    "spec": 2,
    "resources": 3,
    "data": 4,
    "checkpoint": 5,
    "trainer": 6,
    "cluster": 8,
    "training": 1,
    "internal": 1,
}


def say(message: str) -> None:
    print(f"[training] {message}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class Progress:
    """What a run has got to, for its result whether it succeeds or fails."""

    started: float = dataclasses.field(default_factory=time.time)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    job: Job | None = None
    cluster: dict | None = None
    fit_s: float = 0.0


def _fallback_result_path(spec_path: str, environ) -> str:
    """Where an error result goes when the spec is too broken to say (name/storage read best-effort)."""
    name, store = INVALID_SPEC_NAME, environ.get(STORAGE_ENV) or DEFAULT_STORAGE
    try:
        raw = load_spec_file(spec_path)
        if isinstance(raw.get("name"), str) and raw["name"].strip() and "/" not in raw["name"]:
            name = raw["name"]
        ck = raw.get("checkpoint")
        if isinstance(ck, dict) and isinstance(ck.get("storagePath"), str) and ck["storagePath"]:
            store = ck["storagePath"]
    except Exception:
        pass
    if not storage.is_uri(store):
        store = os.path.abspath(os.path.expanduser(store))
    return storage.join(store, name, "result.json")


# ---------------------------------------------------------------- before Ray

def load(spec_path: str, environ, name: str | None, sets: list[str] | None, num_samples: int | None) -> Job:
    """The validated, normalized job of a spec file, with the command line's overrides."""
    raw = load_spec_file(spec_path)
    if sets or num_samples is not None:
        say(f"spec overrides: {', '.join(apply_overrides(raw, sets, num_samples))}")
    job = build(raw, environ)
    if name:
        if not re.fullmatch(NAME_PATTERN, name):
            raise SpecError(f"--name {name!r} must match {NAME_PATTERN}", field="name")
        job = job.renamed(name, "--name")
    return job


def pre_ray_checks(job: Job, spec_dir: Path, resume: bool) -> tuple[Any | None, bool]:
    """Trainer function, data path, and what this run continues: checked before Ray starts.
    Returns (the user's trainer function or None, whether a Tune experiment is resumed)."""
    from training.runtime.data import check_source

    if job.mode == "cluster":
        return None, False
    user_fn = None
    if job.training.trainer_path:
        from training.frameworks.user import load_function

        user_fn = load_function(job.training.trainer_path, search_dirs=[spec_dir])
    check_source(job.data)
    if job.mode == "tune":
        from training.tune.driver import check_resume

        return user_fn, check_resume(job, resume)
    _check_resume_checkpoint(job)
    return user_fn, False


def _check_resume_checkpoint(job: Job) -> None:
    from training.job.identity import check_same_run

    check_same_run(job)
    resume = checkpoints.checkpoint_to_resume(job.run_path, job.checkpoint.resume_from)
    if not resume:
        return
    try:
        meta = checkpoints.verify(resume, job.training.framework)
    except CheckpointError as exc:
        if resume == job.checkpoint.resume_from:
            exc.field = "checkpoint.resumeFrom"
        raise
    whose = "this spec's run" if job.name_source == "derived" else "run"
    say(f"{whose} {job.name} continues from checkpoint {resume} (epoch {meta['epoch']} of {job.training.epochs})")


# ---------------------------------------------------------------- modes (inside a Ray session)

def run_cluster(job: Job, progress: Progress) -> tuple[dict, int]:
    from training.runtime.cluster import cluster_status

    detail = cluster_status(detail=True)
    return {
        "status": "success",
        "results": {"numTrials": 0, "completedTrials": 0, "nodes": detail["nodes"],
                    "availableCpu": detail["availableCpu"], "availableGpu": detail["availableGpu"]},
        "clusterStatus": progress.cluster,
        "trainingTime": 0.0,
    }, 0


def run_train(job: Job, user_fn, hooks: TestHooks, progress: Progress) -> tuple[dict, int]:
    from training.frameworks.trainer import build_trainer, health_check_settings
    from training.runtime import failures
    from training.runtime.cluster import check_resources

    t = time.time()
    check_resources(job.workers)
    progress.timings["resourceCheck"] = round(time.time() - t, 3)
    check_storage(job, progress)
    from training.job.identity import record
    record(job)
    trainer = build_trainer(job, user_fn, hooks)
    w = job.workers
    gpu = f" + {w.gpu:g} GPU" if w.gpu else ""
    say(f"starting {job.training.framework} training: {w.describe()} worker(s) x {w.cpu:g} CPU{gpu}, "
        f"run folder {job.run_path}")
    t = time.time()
    try:
        with health_check_settings(w.health_check):
            fit_result = failures.fit(trainer, job.checkpoint.max_failures)
    finally:
        progress.fit_s = time.time() - t
    progress.timings["fit"] = round(progress.fit_s, 3)
    return _success_train(job, fit_result, progress.cluster, progress.fit_s), 0


def check_storage(job: Job, progress: Progress) -> None:
    """The checkpoint storage is writable and every Ray node sees it (training.runtime.shared_storage), before any worker
    starts: a storage path one pod alone sees fails here, not after the first epochs."""
    from training.runtime.shared_storage import check_shared

    t = time.time()
    others = check_shared(job.checkpoint.storage_path)
    progress.timings["storageCheck"] = round(time.time() - t, 3)
    if others:
        say(f"checkpoint storage {job.checkpoint.storage_path}: seen by the driver's node and {others} other node(s)")


def run_tune(job: Job, user_fn, hooks: TestHooks, resume: bool, progress: Progress) -> tuple[dict, int]:
    from training.tune.driver import run_experiment

    check_storage(job, progress)
    result, code, progress.fit_s = run_experiment(job, user_fn, progress.cluster, resume=resume, hooks=hooks)
    progress.timings["fit"] = round(progress.fit_s, 3)
    return result, code


def _full_path(job: Job, path: str | None) -> str | None:
    """A checkpoint path as Ray Train reports it (on its filesystem: ``bucket/prefix/...`` for S3), with the storage's
    scheme back on, so that the result names a place the user can open: ``s3://bucket/prefix/...``."""
    store = job.checkpoint.storage_path
    if not path or not storage.is_uri(store) or store.startswith("file://") or storage.is_uri(path):
        return path
    return f"{store.split('://', 1)[0]}://{path}"


def _success_train(job: Job, fit_result, cluster: dict, fit_s: float) -> dict:
    rv = fit_result.return_value or {}
    history = rv.get("history") or []
    metric, mode = job.checkpoint.metric, job.checkpoint.metric_mode
    better = (lambda a, b: a > b) if mode == "max" else (lambda a, b: a < b)

    best_path, best_value = None, None
    ranked = []
    for ckpt, metrics in (fit_result.best_checkpoints or []):
        value = (metrics or {}).get(metric)
        ranked.append({"path": _full_path(job, ckpt.path), "epoch": (metrics or {}).get("epoch"), metric: value})
        if isinstance(value, (int, float)) and (best_value is None or better(value, best_value)):
            best_path, best_value = _full_path(job, ckpt.path), value
    latest = _full_path(job, fit_result.checkpoint.path) if fit_result.checkpoint is not None else None
    if best_path is None:
        best_path = latest or (rv.get("checkpointSource") or ":").split(":", 1)[1] or None
    final = history[-1] if rv.get("trainedEpochs") else (rv.get("evaluation") or (history[-1] if history else {}))
    if best_value is None and isinstance(final.get(metric), (int, float)):
        best_value = final[metric]

    results: dict[str, Any] = {
        "bestConfig": job.hyperparameters(),
        "numTrials": 1,
        "completedTrials": 1,
        "metric": metric,
        "metricMode": mode,
        "framework": job.training.framework,
        "numWorkers": job.workers.count,
        **({"worldSize": int(rv["worldSize"])} if rv.get("worldSize") else {}),
        "epochsCompleted": int(history[-1]["epoch"]) if history else int(rv.get("startEpoch") or 0),
        "epochsTrainedThisRun": list(rv.get("trainedEpochs") or []),
        "resumedFromEpoch": int(rv.get("startEpoch") or 0),
        "finalMetrics": final,
        "history": history,
        "bestCheckpoints": sorted(ranked, key=lambda r: (r.get("epoch") or 0)),
    }
    if best_value is not None:
        results["bestMetric"] = float(best_value)
    if latest:
        results["latestCheckpointPath"] = latest
    if rv.get("checkpointSource"):
        results["restoredFrom"] = rv["checkpointSource"].split(":", 1)[1]
    if rv.get("evaluation"):
        results["evaluation"] = rv["evaluation"]
    if "returnValue" in rv:
        results["trainerReturnValue"] = rv["returnValue"]
    out = {
        "status": "success",
        "results": results,
        "clusterStatus": cluster,
        "trainingTime": round(fit_s, 3),
        "runPath": job.run_path,
    }
    if best_path:
        out["checkpointPath"] = best_path
    return out


def _in_ray(job: Job, user_fn, hooks: TestHooks, resume: bool, progress: Progress) -> tuple[dict, int]:
    from training.runtime.cluster import RaySession, cluster_status

    with RaySession() as session:
        progress.timings["rayInit"] = round(session.init_seconds, 3)
        progress.cluster = cluster = cluster_status()
        say(f"Ray {session.kind}: {cluster['numNodes']} node(s), {cluster['totalCpu']:g} CPU, "
            f"{cluster['totalGpu']:g} GPU (connect {session.init_seconds:.1f} s)")
        if job.mode == "cluster":
            return run_cluster(job, progress)
        if job.mode == "tune":
            return run_tune(job, user_fn, hooks, resume, progress)
        return run_train(job, user_fn, hooks, progress)


def _error(exc: BaseException, progress: Progress) -> tuple[dict, int]:
    job = progress.job
    progress.timings["total"] = round(time.time() - progress.started, 3)
    result = error_result(exc, name=job.name if job else None, mode=job.mode if job else None,
                          cluster=progress.cluster, training_time=progress.fit_s, timings=progress.timings)
    if not isinstance(exc, TrainingJobError):  # a bug or an unforeseen failure: still leave a result behind
        traceback.print_exc()
        result["error"]["details"] = traceback.format_exc()[-4000:]
        return result, 1
    say(f"error ({exc.kind}): {exc.message}")
    if progress.fit_s and job and job.mode == "train":
        try:  # what a re-run of the same spec would resume from
            latest = checkpoints.latest_in_run(job.run_path)
        except TrainingJobError:
            latest = None
        if latest:
            result["results"]["latestCheckpointPath"] = latest
    return result, EXIT_CODES.get(exc.kind, 1)


def _publish(result: dict, path: str) -> str | None:
    """Validate (a mismatch is reported, never hidden), write, print; returns where it was written."""
    result = clean(result)
    try:
        validate_result(result)
    except Exception as exc:  # never expected
        say(f"warning: result does not match the result schema: {exc}")
    written = None
    try:
        written = write_result(result, path)
    except Exception as exc:
        say(f"could not write the result to {path}: {exc}")
    print(json.dumps(result, indent=2))
    if written:
        say(f"result ({result['status']}) written to {written}")
    return written


def run(spec_path: str, output: str | None = None, environ=None, name: str | None = None, *,
        resume: bool = False, sets: list[str] | None = None,
        num_samples: int | None = None) -> tuple[int, dict, str | None]:
    """Run a spec file; returns (exit code, result dict, where the result was written).

    ``name`` overrides the spec's ``name`` (a new name starts a new run instead of resuming the old one).
    ``sets`` (``--set a.b=value``) and ``num_samples`` (``--num-samples``) change the spec before validation;
    ``resume`` continues an existing Tune experiment of the same name (``mode: tune``)."""
    environ = os.environ if environ is None else environ
    apply_quiet_defaults()
    progress = Progress()
    try:
        job = progress.job = load(spec_path, environ, name, sets, num_samples)
        rp = job.run_path
        hooks = faults.from_environ(environ, rp if not storage.is_uri(rp) else os.path.join("/tmp", "training-faults",
                                                                                           job.name))
        say(f"spec {spec_path}: mode={job.mode} name={job.name} ({job.name_source})"
            + (f" framework={job.training.framework} workers={job.workers.count} epochs={job.training.epochs}"
               f" storage={job.checkpoint.storage_path} ({job.checkpoint.storage_source})"
               if job.mode in ("train", "tune") else ""))
        user_fn, resume = pre_ray_checks(job, Path(spec_path).resolve().parent, bool(resume))
        result, code = _in_ray(job, user_fn, hooks, resume, progress)
        progress.timings["total"] = round(time.time() - progress.started, 3)
        result.update({"name": job.name, "mode": job.mode, "timings": progress.timings})
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        result, code = _error(exc, progress)
    path = output or (default_result_path(progress.job.run_path) if progress.job else None) \
        or _fallback_result_path(spec_path, environ)
    written = _publish(result, path)
    return code, clean(result), written
