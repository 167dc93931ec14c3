"""``python -m training run``: spec -> checks -> Ray -> result JSON.

Order matters: everything that can be checked without Ray (schema, the trainer function, the data path, the
checkpoint to resume from) is checked before Ray starts; resources are checked against the connected cluster before
any placement group is requested, so no run hangs waiting for resources that are not there.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from training import checkpointing, storage
from training.env import apply_quiet_defaults
from training.errors import (
    CheckpointError,
    SpecError,
    TrainingFailed,
    TrainingJobError,
)
from training.result import clean, default_result_path, error_result, validate_result, write_result
from training.spec import (
    DEFAULT_NAME,
    DEFAULT_STORAGE,
    STORAGE_ENV,
    hyperparameters,
    load_job,
    load_spec_file,
    run_path,
)

EXIT_CODES = {
    "spec": 2,
    "resources": 3,
    "data": 4,
    "checkpoint": 5,
    "trainer": 6,
    "not-implemented": 7,
    "cluster": 8,
    "training": 1,
    "internal": 1,
}

FAULT_ENV = "TRAINING_FAULT_INJECTION"
LEDGER_ENV = "TRAINING_EPOCH_LEDGER"


def say(message: str) -> None:
    print(f"[training] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- test hooks (environment of the driver)

def _test_hooks(job: dict[str, Any], environ) -> None:
    fault = environ.get(FAULT_ENV)
    if fault:
        parts = dict(p.split("=", 1) for p in fault.split(",") if "=" in p)
        rp = run_path(job)
        marker_dir = rp if not storage.is_uri(rp) else os.path.join("/tmp", "training-faults", job["name"])
        job["_fault"] = {
            "rank": int(parts.get("rank", 1)),
            "epoch": int(parts.get("epoch", 2)),
            "phase": parts.get("phase", "mid"),
            "delay": float(parts.get("delay", 3.0)),
            "marker": os.path.join(marker_dir, f".fault-injected-rank{parts.get('rank', 1)}-epoch{parts.get('epoch', 2)}"),
        }
        say(f"test hook {FAULT_ENV}: rank {job['_fault']['rank']} will exit at epoch {job['_fault']['epoch']} (once)")
    ledger = environ.get(LEDGER_ENV)
    if ledger:
        job["_ledger"] = os.path.abspath(ledger)


# ---------------------------------------------------------------- error helpers

def _root_cause(exc: BaseException) -> BaseException:
    """The user-level exception inside Ray's wrappers (RayTaskError.cause, WorkerGroupError.worker_failures)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        failures = getattr(exc, "worker_failures", None)
        if failures:
            exc = failures[sorted(failures)[0]]
            continue
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException):
            exc = cause
            continue
        inner = getattr(exc, "controller_failure", None) or getattr(exc, "health_check_failure", None)
        if isinstance(inner, BaseException):
            exc = inner
            continue
        break
    return exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:400]


def _training_failure(exc: BaseException, job: dict[str, Any]) -> TrainingJobError:
    """One clear error out of Ray's wrappers. A worker's own ``TrainingJobError`` (bad data, bad checkpoint) wins;
    otherwise a worker whose process died is named first (the others then fail in their collectives)."""
    failures = getattr(exc, "worker_failures", None) or {}
    roots = {rank: _root_cause(err) for rank, err in sorted(failures.items())}
    for root in roots.values():
        if isinstance(root, TrainingJobError):
            return root
    if not roots:
        root = _root_cause(exc)
        if isinstance(root, TrainingJobError):
            return root
        roots = {None: root}
    died = [r for r, e in roots.items() if "Died" in type(e).__name__ or "Crash" in type(e).__name__]
    primary = died[0] if died else next(iter(roots))
    root = roots[primary]
    who = "the controller" if primary is None else f"worker rank {primary}"
    verb = "died" if died else "failed"
    msg = (f"training failed after {job['checkpoint']['maxFailures']} allowed restart(s): {who} {verb}: "
           f"{type(root).__name__}: {_first_line(root)}")
    others = [f"rank {r}: {type(e).__name__}: {_first_line(e)[:160]}" for r, e in roots.items() if r != primary]
    if others:
        msg += " (then " + "; ".join(others) + ")"
    return TrainingFailed(msg, details=str(exc)[-4000:])


def _fallback_result_path(spec_path: str, environ) -> str:
    """Where an error result goes when the spec is too broken to say (name/storage read best-effort)."""
    name, store = DEFAULT_NAME, environ.get(STORAGE_ENV) or DEFAULT_STORAGE
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


# ---------------------------------------------------------------- modes

def _success_train(job: dict[str, Any], fit_result, cluster: dict, fit_s: float) -> dict:
    rv = fit_result.return_value or {}
    history = rv.get("history") or []
    ck = job["checkpoint"]
    metric, mode = ck["metric"], ck["metricMode"]
    better = (lambda a, b: a > b) if mode == "max" else (lambda a, b: a < b)

    best_path, best_value = None, None
    ranked = []
    for ckpt, metrics in (fit_result.best_checkpoints or []):
        value = (metrics or {}).get(metric)
        ranked.append({"path": ckpt.path, "epoch": (metrics or {}).get("epoch"), metric: value})
        if isinstance(value, (int, float)) and (best_value is None or better(value, best_value)):
            best_path, best_value = ckpt.path, value
    latest = fit_result.checkpoint.path if fit_result.checkpoint is not None else None
    if best_path is None:
        best_path = latest or (rv.get("checkpointSource") or ":").split(":", 1)[1] or None
    final = history[-1] if rv.get("trainedEpochs") else (rv.get("evaluation") or (history[-1] if history else {}))
    if best_value is None and isinstance(final.get(metric), (int, float)):
        best_value = final[metric]

    results: dict[str, Any] = {
        "bestConfig": hyperparameters(job),
        "numTrials": 1,
        "completedTrials": 1,
        "metric": metric,
        "metricMode": mode,
        "framework": job["framework"],
        "numWorkers": job["numWorkers"],
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
        "runPath": run_path(job),
    }
    if best_path:
        out["checkpointPath"] = best_path
    return out


def _pre_ray_checks(job: dict[str, Any]) -> tuple[Any | None, str | None]:
    """Trainer function, data path and resume checkpoint: checked before Ray starts."""
    from training.data import check_source

    user_fn = None
    if job["mode"] not in ("train", "tune"):
        return None, None
    if job["trainerPath"]:
        from training.user_trainer import load_function

        user_fn = load_function(job["trainerPath"], search_dirs=[Path(job.get("_specDir", "."))])
    check_source(job["data"])
    if job["mode"] == "tune":
        from training.tune import check_resume

        check_resume(job, bool(job.get("_resume")))
        return user_fn, None
    resume = checkpointing.checkpoint_to_resume(job, run_path(job))
    if resume:
        try:
            meta = checkpointing.verify(resume, job["framework"])
        except CheckpointError as exc:
            if resume == job["checkpoint"].get("resumeFrom"):
                exc.field = "checkpoint.resumeFrom"
            raise
        say(f"will resume from checkpoint {resume} (epoch {meta['epoch']} of {job['epochs']})")
    return user_fn, resume


def run(spec_path: str, output: str | None = None, environ=None, name: str | None = None, *,
        resume: bool = False, sets: list[str] | None = None,
        num_samples: int | None = None) -> tuple[int, dict, str | None]:
    """Run a spec file; returns (exit code, result dict, where the result was written).

    ``name`` overrides the spec's ``name`` (a new name starts a new run instead of resuming the old one).
    ``sets`` (``--set a.b=value``) and ``num_samples`` (``--num-samples``) change the spec before validation;
    ``resume`` continues an existing Tune experiment of the same name (``mode: tune``)."""
    environ = os.environ if environ is None else environ
    apply_quiet_defaults()
    t0 = time.time()
    timings: dict[str, float] = {}
    job: dict[str, Any] | None = None
    cluster: dict | None = None
    fit_s = 0.0
    code = 0
    try:
        if sets or num_samples is not None:
            from training.spec import normalize, validate_spec
            from training.tune_spec import apply_overrides

            raw = load_spec_file(spec_path)
            changed = apply_overrides(raw, sets, num_samples)
            say(f"spec overrides: {', '.join(changed)}")
            validate_spec(raw)
            job = normalize(raw, environ)
        else:
            job = load_job(spec_path, environ)
        job["_resume"] = bool(resume)
        if name:
            from training.spec import NAME_PATTERN

            if not re.fullmatch(NAME_PATTERN, name):
                raise SpecError(f"--name {name!r} must match {NAME_PATTERN}", field="name")
            job["name"] = name
        job["_specDir"] = str(Path(spec_path).resolve().parent)
        _test_hooks(job, environ)
        say(f"spec {spec_path}: mode={job['mode']} name={job['name']}"
            + (f" framework={job['framework']} workers={job['numWorkers']} epochs={job['epochs']}"
               f" storage={job['checkpoint']['storagePath']} ({job['checkpoint']['storageSource']})"
               if job["mode"] in ("train", "tune") else ""))
        user_fn, _ = _pre_ray_checks(job)

        from training.cluster import RaySession, check_resources, cluster_status

        with RaySession() as session:
            timings["rayInit"] = round(session.init_seconds, 3)
            cluster = cluster_status()
            say(f"Ray {session.kind}: {cluster['numNodes']} node(s), {cluster['totalCpu']:g} CPU, "
                f"{cluster['totalGpu']:g} GPU (connect {session.init_seconds:.1f} s)")
            if job["mode"] == "cluster":
                detail = cluster_status(detail=True)
                result = {
                    "status": "success",
                    "results": {"numTrials": 0, "completedTrials": 0, "nodes": detail["nodes"],
                                "availableCpu": detail["availableCpu"], "availableGpu": detail["availableGpu"]},
                    "clusterStatus": cluster,
                    "trainingTime": 0.0,
                }
            elif job["mode"] == "tune":
                from training.tune import run_experiment

                result, code, fit_s = run_experiment(job, user_fn, cluster, resume=bool(resume), environ=environ)
                timings["fit"] = round(fit_s, 3)
            else:
                t = time.time()
                check_resources(job)
                timings["resourceCheck"] = round(time.time() - t, 3)
                import ray.train

                from training.trainers import build_trainer

                trainer = build_trainer(job, user_fn)
                gpu = f" + {job['gpuPerWorker']:g} GPU" if job["gpuPerWorker"] else ""
                say(f"starting {job['framework']} training: {job['numWorkers']} worker(s) x "
                    f"{job['cpuPerWorker']:g} CPU{gpu}, run folder {run_path(job)}")
                t = time.time()
                try:
                    fit_result = trainer.fit()
                except ray.train.TrainingFailedError as exc:
                    fit_s = time.time() - t
                    raise _training_failure(exc, job) from None
                fit_s = time.time() - t
                timings["fit"] = round(fit_s, 3)
                if getattr(fit_result, "error", None):
                    raise _training_failure(fit_result.error, job)
                result = _success_train(job, fit_result, cluster, fit_s)
        timings["total"] = round(time.time() - t0, 3)
        result.update({"name": job["name"], "mode": job["mode"], "timings": timings})
        code = code if job["mode"] == "tune" else 0
    except TrainingJobError as exc:
        timings["total"] = round(time.time() - t0, 3)
        say(f"error ({exc.kind}): {exc.message}")
        result = error_result(exc, name=job["name"] if job else None, mode=job["mode"] if job else None,
                              cluster=cluster, training_time=fit_s, timings=timings)
        if fit_s and job:
            try:  # what a re-run of the same spec would resume from
                latest = checkpointing.latest_in_run(run_path(job))
            except TrainingJobError:
                latest = None
            if latest:
                result["results"]["latestCheckpointPath"] = latest
        code = EXIT_CODES.get(exc.kind, 1)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a bug or an unforeseen failure: still leave a result behind
        timings["total"] = round(time.time() - t0, 3)
        traceback.print_exc()
        result = error_result(exc, name=job["name"] if job else None, mode=job["mode"] if job else None,
                              cluster=cluster, training_time=fit_s, timings=timings)
        result["error"]["details"] = traceback.format_exc()[-4000:]
        code = 1

    result = clean(result)
    try:
        validate_result(result)
    except Exception as exc:  # never expected; report rather than hide it
        say(f"warning: result does not match the result schema: {exc}")
    path = output or default_result_path(job) or _fallback_result_path(spec_path, environ)
    written = None
    try:
        written = write_result(result, path)
    except Exception as exc:
        say(f"could not write the result to {path}: {exc}")
    print(json.dumps(result, indent=2))
    if written:
        say(f"result ({result['status']}) written to {written}")
    return code, result, written
