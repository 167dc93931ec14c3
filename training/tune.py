"""``mode: tune``: a Ray Tune search over the #5 trainers; one result JSON and a per-trial CSV.

Called by :mod:`training.runner` inside its Ray session, after the spec (``tuneConfig`` included,
:mod:`training.tune_spec`) has been validated and the trainer function and data checked. Before any trial starts it
checks that one trial fits the cluster, and how many fit at once. The experiment folder is
``<storage>/<name>/`` (Tune's ``experiment_state``, one ``trial-NNN`` folder per trial with its checkpoints,
``trials.csv`` and ``result.json``); ``--resume`` continues an interrupted experiment from there.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from training import storage
from training.errors import ResourceError, SpecError
from training.spec import hyperparameters, run_path

#: Written by Tune into the experiment folder; its presence means "there is an experiment to resume".
TUNER_STATE_FILE = "tuner.pkl"
TRIALS_CSV = "trials.csv"
#: Test hook: ``TRAINING_TUNE_INTERRUPT=after_trials=N`` interrupts the experiment (as Ctrl+C does) once N trials
#: have finished.
INTERRUPT_ENV = "TRAINING_TUNE_INTERRUPT"
FAULT_ENV = "TRAINING_FAULT_INJECTION"
#: A trial's own process needs some resource for Ray to place it; a train-runner trial only drives its Ray Train
#: run, so by default it asks for no CPU and this much memory.
DRIVER_MEMORY = 64 * 2**20

_ABORT: dict[str, str] = {}


def say(message: str) -> None:
    print(f"[tune] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- before Ray: resume or not

def experiment_exists(job: dict[str, Any]) -> bool:
    return storage.exists(storage.join(run_path(job), TUNER_STATE_FILE))


def check_resume(job: dict[str, Any], resume: bool) -> bool:
    """True when this run continues an existing experiment. Without ``--resume`` an existing experiment is an error
    (a new search would mix its trials into the old folder)."""
    exists = experiment_exists(job)
    if exists and not resume:
        raise SpecError(
            f"{run_path(job)} already holds a Tune experiment named {job['name']!r}: run again with --resume to "
            "continue it (finished trials are kept), or pick another name (--name) to start a new search",
            field="name")
    if resume and not exists:
        say(f"--resume: no experiment at {run_path(job)} yet; starting a new one")
    return exists and resume


# ---------------------------------------------------------------- search space, scheduler

def domain(entry: dict[str, Any]):
    from ray import tune

    t = entry["type"]
    if t == "loguniform":
        return tune.loguniform(entry["min"], entry["max"])
    if t == "uniform":
        return tune.uniform(entry["min"], entry["max"])
    if t == "quniform":
        return tune.quniform(entry["min"], entry["max"], entry["q"])
    if t == "randint":
        return tune.randint(int(entry["min"]), int(entry["max"]) + 1)  # Tune's upper bound is exclusive
    if t == "choice":
        return tune.choice(list(entry["values"]))
    if t == "grid":
        return tune.grid_search(list(entry["values"]))
    raise SpecError(f"unknown distribution {t!r}", field="tuneConfig.searchSpace")


def param_space(tcfg: dict[str, Any]) -> dict[str, Any]:
    return {key: domain(entry) for key, entry in tcfg["searchSpace"].items()}


def make_scheduler(tcfg: dict[str, Any]):
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule, PopulationBasedTraining

    name, o = tcfg["scheduler"], tcfg["schedulerConfig"]
    # Every scheduler counts in epochs: one report per epoch is one training_iteration.
    if name == "asha":
        return ASHAScheduler(time_attr="training_iteration", max_t=o["maxT"], grace_period=o["gracePeriod"],
                             reduction_factor=o["reductionFactor"], brackets=o["brackets"])
    if name == "median":
        return MedianStoppingRule(time_attr="training_iteration", grace_period=o["gracePeriod"],
                                  min_samples_required=o["minSamplesRequired"])
    if name == "pbt":
        mutations = {k: domain(e) for k, e in tcfg["searchSpace"].items() if e["type"] != "grid"}
        return PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=o["perturbationInterval"],
                                       hyperparam_mutations=mutations, quantile_fraction=o["quantileFraction"],
                                       resample_probability=o["resampleProbability"], synch=o["synch"])
    return FIFOScheduler()


# ---------------------------------------------------------------- resources

def trial_resources(job: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """(what the trial's own process holds, what the whole trial holds) in Ray resource names."""
    tcfg = job["tune"]
    own = {"CPU": tcfg["resourcesPerTrial"]["cpu"], "GPU": tcfg["resourcesPerTrial"]["gpu"]}
    total = dict(own)
    if tcfg["trialRunner"] == "train":
        total["CPU"] += job["numWorkers"] * job["cpuPerWorker"]
        total["GPU"] += job["numWorkers"] * job["gpuPerWorker"]
    return own, total


def check_trial_fits(job: dict[str, Any]) -> int:
    """Fail before any trial unless one trial fits the cluster; return how many fit at once."""
    from training.cluster import _describe, _fits, _per_node, check_resources

    tcfg = job["tune"]
    own, total = trial_resources(job)
    totals = _per_node("total")
    if tcfg["trialRunner"] == "train":
        # The Ray Train workers of one trial: the same check as mode: train (fails at once beyond the cluster, waits
        # config.resourceWaitSeconds for busy resources).
        check_resources(job)
    bundle = {k: v for k, v in own.items() if v}
    if bundle and _fits(totals, bundle, 1) < 1:
        raise ResourceError(
            f"each trial's own process asks for {', '.join(f'{v:g} {k}' for k, v in bundle.items())} "
            f"(tuneConfig.resourcesPerTrial) but no node has that ({_describe(totals)})",
            field="tuneConfig.resourcesPerTrial")
    sums = {k: sum(n.get(k, 0.0) for n in totals) for k in ("CPU", "GPU")}
    fit = math.inf
    for k in ("CPU", "GPU"):
        if total.get(k):
            fit = min(fit, math.floor(sums[k] / total[k] + 1e-9))
    fit = 1 if fit == math.inf else max(int(fit), 1)
    return fit


# ---------------------------------------------------------------- callbacks

def _first_error_line(trial) -> str:
    path = getattr(trial, "error_file", None)
    text = ""
    try:
        if path and os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
    except OSError:
        pass
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln.split(":")[0] or "Exception" in ln.split(":")[0]:
            return ln[:500]
    return (lines[-1] if lines else "trial failed")[:500]


def _make_callbacks(job: dict[str, Any], environ) -> list:
    from ray.tune import Callback
    from ray.tune.stopper import Stopper

    name = job["name"]
    metric, epochs = job["tune"]["metric"], job["epochs"]
    interrupt_after = None
    hook = environ.get(INTERRUPT_ENV, "")
    if hook.startswith("after_trials="):
        interrupt_after = int(hook.split("=", 1)[1])

    class Progress(Callback):
        """Trial start / end / failure on stderr (the trainers print each epoch themselves)."""

        def setup(self, **info):
            self.finished = 0

        def on_trial_start(self, iteration, trials, trial, **info):
            shown = ", ".join(f"{k}={_fmt(v)}" for k, v in trial.config.items())
            say(f"trial {trial.trial_id} started: {shown}")

        def on_trial_complete(self, iteration, trials, trial, **info):
            last = trial.last_result or {}
            done = last.get("epoch", last.get("training_iteration", 0))
            how = "finished" if done >= epochs else f"stopped early by {job['tune']['scheduler']}"
            value = last.get(metric)
            say(f"trial {trial.trial_id} {how} after epoch {done}: {metric}={_fmt(value)}")
            self.finished += 1
            if interrupt_after is not None and self.finished >= interrupt_after and name not in _ABORT:
                say(f"test hook {INTERRUPT_ENV}: interrupting the experiment after {self.finished} finished trial(s)")
                _ABORT[name] = "interrupt"
                os.kill(os.getpid(), signal.SIGUSR1)  # Tune's own "interrupted" path, as on Ctrl+C

        def on_trial_recover(self, iteration, trials, trial, **info):
            msg = _first_error_line(trial)
            say(f"trial {trial.trial_id} failed ({msg[:200]}); retrying from its latest checkpoint "
                f"(failure {trial.num_failures})")
            self._fatal(trial, msg)

        def on_trial_error(self, iteration, trials, trial, **info):
            msg = _first_error_line(trial)
            say(f"trial {trial.trial_id} failed for good after {trial.num_failures} failure(s): {msg}")
            self._fatal(trial, msg)

        def _fatal(self, trial, msg):
            if "MetricNotReported" in msg and name not in _ABORT:
                # Every trial of this trainer would fail the same way: stop the search rather than retry.
                _ABORT[name] = msg

    class Abort(Stopper):
        def __call__(self, trial_id, result):
            return False

        def stop_all(self):
            reason = _ABORT.get(name)
            return bool(reason) and reason != "interrupt"

    return [Progress()], Abort()


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


# ---------------------------------------------------------------- run

def run_experiment(job: dict[str, Any], user_fn: Callable | None, cluster: dict, *, resume: bool,
                   environ=None) -> tuple[dict, int, float]:
    """Run (or resume) the search; returns (result, exit code, seconds in Tuner.fit)."""
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from training.tune_trial import local_trial, train_trial, trial_index

    environ = os.environ if environ is None else environ
    tcfg = job["tune"]
    _ABORT.pop(job["name"], None)
    fault = environ.get(FAULT_ENV)
    if fault and job.get("_fault") is not None:
        parts = dict(p.split("=", 1) for p in fault.split(",") if "=" in p)
        if "trial" in parts:
            job["_fault"]["trial"] = int(parts["trial"])
    if job["checkpoint"]["everyEpochs"] != 1:
        say(f"checkpoint.everyEpochs {job['checkpoint']['everyEpochs']} -> 1: in mode tune every epoch is reported "
            "(and checkpointed) so that the scheduler sees each one")
        job["checkpoint"]["everyEpochs"] = 1

    fit_at_once = check_trial_fits(job)
    concurrent = tcfg["maxConcurrentTrials"] or fit_at_once
    own, total = trial_resources(job)
    restoring = resume and experiment_exists(job)
    runner_name = tcfg["trialRunner"]
    per_trial = (f"{job['numWorkers']} worker(s) x {job['cpuPerWorker']:g} CPU" if runner_name == "train"
                 else f"{own['CPU']:g} CPU")
    say(f"{'resuming' if restoring else 'starting'} experiment {run_path(job)}: {tcfg['numSamples']} sample(s), "
        f"scheduler {tcfg['scheduler']}, {tcfg['metric']} ({tcfg['mode']}), trial runner {runner_name} "
        f"({per_trial} per trial)")
    gpu = f", {total['GPU']:g} GPU" if total["GPU"] else ""
    say(f"{concurrent} trial(s) at once ({fit_at_once} fit the cluster: {total['CPU']:g} CPU{gpu} per trial)")

    fn = local_trial if runner_name == "local" else train_trial
    trainable = tune.with_parameters(fn, base_job=job, user_fn=user_fn)
    resources: dict[str, float] = {"cpu": own["CPU"], "gpu": own["GPU"]}
    if not own["CPU"] and not own["GPU"]:
        resources["memory"] = DRIVER_MEMORY
    trainable = tune.with_resources(trainable, resources)

    callbacks, stopper = _make_callbacks(job, environ)
    t0 = time.time()
    if restoring:
        tuner = tune.Tuner.restore(run_path(job), trainable=trainable, resume_unfinished=True, resume_errored=False,
                                   restart_errored=False)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space=param_space(tcfg),
            tune_config=tune.TuneConfig(
                metric=tcfg["metric"], mode=tcfg["mode"], scheduler=make_scheduler(tcfg),
                num_samples=tcfg["numSamples"], reuse_actors=False,
                # The same seed samples the same configs (ASHA and FIFO of bench-tune see the same trials).
                search_alg=BasicVariantGenerator(max_concurrent=concurrent, random_state=tcfg["seed"]),
                trial_dirname_creator=lambda t: f"trial-{trial_index(t.trial_id):03d}",
            ),
            run_config=tune.RunConfig(
                name=job["name"], storage_path=job["checkpoint"]["storagePath"], verbose=0,
                failure_config=tune.FailureConfig(max_failures=tcfg["maxFailures"]),
                # PBT clones checkpoints between trials: a clone's owner deleting it breaks the other trial.
                checkpoint_config=tune.CheckpointConfig(num_to_keep=None if tcfg["scheduler"] == "pbt"
                                                        else tcfg["keepCheckpointsPerTrial"],
                                                        checkpoint_score_attribute=tcfg["metric"],
                                                        checkpoint_score_order=tcfg["mode"]),
                callbacks=callbacks, stop=stopper,
            ),
        )
    if restoring:
        # The restored RunConfig carries the callbacks pickled with the first run; use this run's instead.
        rc = tuner._local_tuner.get_run_config()
        rc.callbacks = callbacks
        rc.stop = stopper
    # Tune prints its experiment banner on stdout, where this package prints only the result JSON.
    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
        # One trial per process is deliberate (the local runner patches Ray Train's API for the process's life).
        warnings.filterwarnings("ignore", message="Consider boosting PBT performance")
        tuner.fit()
    fit_s = time.time() - t0
    result, code = summarize(job, saved_results(job), cluster, fit_s)
    result["results"]["resumed"] = bool(restoring)
    result["results"]["maxConcurrentTrials"] = int(concurrent)
    return result, code, fit_s


# ---------------------------------------------------------------- summary

def saved_results(job: dict[str, Any]):
    """The experiment as its saved state has it. After an interruption (Ctrl+C) Tune stops the running trials in
    memory, but the state it saved -- what ``--resume`` continues -- still has them running; read that."""
    from ray.tune import ExperimentAnalysis, ResultGrid

    fs, path = storage.filesystem(run_path(job))
    analysis = ExperimentAnalysis(path, storage_filesystem=fs, default_metric=job["tune"]["metric"],
                                  default_mode=job["tune"]["mode"])
    return ResultGrid(analysis)


def expected_trials(tcfg: dict[str, Any]) -> int:
    n = tcfg["numSamples"]
    for entry in tcfg["searchSpace"].values():
        if entry["type"] == "grid":
            n *= len(entry["values"])
    return n


def _trial_rows(job: dict[str, Any], grid) -> list[dict[str, Any]]:
    from training.tune_trial import trial_index

    tcfg = job["tune"]
    metric, mode, epochs = tcfg["metric"], tcfg["mode"], job["epochs"]
    trials = list(grid._experiment_analysis.trials)
    rows = []
    for i, trial in enumerate(trials):
        res = grid[i]
        last = trial.last_result or {}
        status = trial.status
        epoch = int(last.get("epoch", last.get("training_iteration", 0)) or 0)
        if status == "ERROR":
            state = "errored"
        elif status == "TERMINATED":
            state = "completed" if epoch >= epochs else "early_stopped"
        else:
            state = status.lower()  # pending / running / paused: an interrupted experiment
        analysis = (trial.metric_analysis or {}).get(metric) or {}
        best_value = analysis.get(mode)
        best_ckpt, best_ckpt_value, best_epoch = None, None, None
        for ckpt, metrics in (res.best_checkpoints or []):
            v = (metrics or {}).get(metric)
            if isinstance(v, (int, float)) and (best_ckpt_value is None or (v > best_ckpt_value if mode == "max" else v < best_ckpt_value)):
                best_ckpt, best_ckpt_value, best_epoch = ckpt.path, v, (metrics or {}).get("epoch")
        rows.append({
            "trialId": trial.trial_id,
            "trial": trial_index(trial.trial_id),
            "status": state,
            "config": dict(trial.config),
            "epochs": epoch,
            "iterations": int(last.get("training_iteration", 0) or 0),
            "lastMetric": last.get(metric),
            "bestMetric": best_value,
            "bestEpoch": best_epoch,
            "bestCheckpointMetric": best_ckpt_value,
            "failures": int(trial.num_failures or 0),
            "timeTotalS": round(float(last.get("time_total_s", 0.0) or 0.0), 3),
            "checkpointPath": best_ckpt,
            "path": trial.path,
            "error": _first_error_line(trial) if status == "ERROR" else "",
        })
    return sorted(rows, key=lambda r: r["trial"])


def _pbt_exploits(exp_path: str) -> int:
    """PBT logs one line per exploit (a trial continuing from another's checkpoint) to pbt_global.txt."""
    path = storage.join(exp_path, "pbt_global.txt")
    try:
        return sum(1 for ln in storage.read_bytes(path).decode().splitlines() if ln.strip()) if storage.exists(path) else 0
    except OSError:
        return 0


def write_csv(rows: list[dict[str, Any]], path: str, keys: list[str]) -> str:
    buf = io.StringIO()
    fields = ["trial", "trialId", "status"] + [f"config.{k}" for k in keys] + [
        "epochs", "iterations", "lastMetric", "bestMetric", "bestEpoch", "failures", "timeTotalS", "checkpointPath",
        "error"]
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        flat = {**r, **{f"config.{k}": _csv_value(r["config"].get(k)) for k in keys}}
        w.writerow({k: ("" if flat.get(k) is None else flat.get(k)) for k in fields})
    storage.write_bytes(path, buf.getvalue().encode()) if storage.is_uri(path) else _write_local(path, buf.getvalue())
    return path


def _csv_value(v):
    if isinstance(v, float):
        return repr(v)
    return v


def _write_local(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


def summarize(job: dict[str, Any], grid, cluster: dict, fit_s: float) -> tuple[dict, int]:
    from training.tune_trial import trial_job

    tcfg = job["tune"]
    metric, mode = tcfg["metric"], tcfg["mode"]
    rows = _trial_rows(job, grid)
    keys = list(tcfg["searchSpace"])
    csv_path = write_csv(rows, storage.join(run_path(job), TRIALS_CSV), keys)
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("completed", "early_stopped", "errored")}
    unfinished = [r for r in rows if r["status"] not in ("completed", "early_stopped", "errored")]
    never_started = 0 if _ABORT.get(job["name"], "interrupt") != "interrupt" and job["name"] in _ABORT else \
        max(expected_trials(tcfg) - len(rows), 0)
    ranked = [r for r in rows if isinstance(r["bestMetric"], (int, float)) and math.isfinite(r["bestMetric"])]
    best = (max if mode == "max" else min)(ranked, key=lambda r: r["bestMetric"]) if ranked else None
    results: dict[str, Any] = {
        "numTrials": len(rows),
        "completedTrials": counts["completed"] + counts["early_stopped"],
        "trialsRanToEnd": counts["completed"],
        "earlyStoppedTrials": counts["early_stopped"],
        "erroredTrials": counts["errored"],
        "unfinishedTrials": len(unfinished) + never_started,
        "retriedTrials": sum(1 for r in rows if r["failures"] and r["status"] != "errored"),
        "trialFailures": sum(r["failures"] for r in rows),
        "totalTrialIterations": sum(r["iterations"] for r in rows),
        "metric": metric,
        "metricMode": mode,
        "scheduler": tcfg["scheduler"],
        "schedulerConfig": tcfg["schedulerConfig"],
        "trialRunner": tcfg["trialRunner"],
        "framework": job["framework"],
        "numWorkers": job["numWorkers"] if tcfg["trialRunner"] == "train" else 1,
        "trialsCsv": csv_path,
        **({"pbtExploits": _pbt_exploits(run_path(job))} if tcfg["scheduler"] == "pbt" else {}),
        "interrupted": bool(unfinished or never_started),
        "trials": [{k: r[k] for k in ("trial", "trialId", "status", "config", "epochs", "bestMetric", "failures")}
                   for r in rows],
    }
    out: dict[str, Any] = {"clusterStatus": cluster, "trainingTime": round(fit_s, 3), "runPath": run_path(job)}
    if best is not None:
        results["bestConfig"] = dict(best["config"])
        results["bestMetric"] = float(best["bestMetric"])
        results["bestTrialId"] = best["trialId"]
        results["bestEpoch"] = best["bestEpoch"]
        results["bestTrainConfig"] = hyperparameters(trial_job(job, best["config"], best["trialId"], best["path"] or ""))
        if best["checkpointPath"]:
            out["checkpointPath"] = best["checkpointPath"]
            results["bestCheckpointMetric"] = best["bestCheckpointMetric"]
    if job["name"] in _ABORT and _ABORT[job["name"]] != "interrupt":
        status, code = "error", 1
        out["error"] = {"type": "training", "message": f"the search was stopped: {_ABORT[job['name']]}"}
    elif not rows or (counts["errored"] == len(rows)):
        first = next((r["error"] for r in rows if r["error"]), "no trial ran")
        status, code = "error", 1
        out["error"] = {"type": "training", "message": f"all {len(rows)} trial(s) failed; first error: {first}"}
    elif best is None:
        status, code = "error", 1
        out["error"] = {"type": "training", "message": f"no trial reported {metric}"}
    elif results["interrupted"] or counts["errored"]:
        status, code = "partial", 0
        if results["interrupted"]:
            say(f"experiment interrupted with {results['unfinishedTrials']} trial(s) unfinished: run again with "
                "--resume to continue (finished trials are kept)")
    else:
        status, code = "success", 0
    out = {"status": status, "results": results, **out}
    say(f"{results['numTrials']} trial(s): {counts['completed']} ran to the end, {counts['early_stopped']} stopped "
        f"early, {counts['errored']} errored, {results['unfinishedTrials']} unfinished; {results['trialFailures']} failure(s) "
        f"retried or final; best {metric}={_fmt(results.get('bestMetric'))} "
        f"({results.get('bestConfig')}); per-trial table {csv_path}")
    return out, code
