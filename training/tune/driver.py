"""``mode: tune``: a Ray Tune search over the framework trainers; one result JSON and a per-trial CSV.

Called by :mod:`training.runner` inside its Ray session, after the spec (``tuneConfig`` included,
:mod:`training.job.search`) has been validated and the trainer function and data checked. Before any trial starts it
checks that one trial fits the cluster, and how many fit at once. The experiment folder is
``<storage>/<name>/`` (Tune's ``experiment_state``, one ``trial-NNN`` folder per trial with its checkpoints,
``trials.csv`` and ``result.json``); ``--resume`` continues an interrupted experiment from there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from training.errors import ResourceError, SpecError
from training.job.parts import Job, SearchParam, Tune, Workers, thaw
from training.runtime import storage
from training.runtime.faults import NO_HOOKS, TestHooks
from training.tune import events
from training.tune.events import say

#: A trial's own process needs some resource for Ray to place it; a train-runner trial only drives its Ray Train
#: run, so by default it asks for no CPU and this much memory.
DRIVER_MEMORY = 64 * 2**20


# ---------------------------------------------------------------- before Ray: resume or not

def experiment_exists(run_path: str) -> bool:
    """Whether ``run_path`` holds a Tune experiment that ``Tuner.restore`` can continue."""
    from ray import tune

    fs, path = storage.filesystem(run_path)
    return bool(tune.Tuner.can_restore(path, storage_filesystem=fs))


def check_resume(job: Job, resume: bool) -> bool:
    """True when this run continues an existing experiment. An unnamed spec's experiment is its own (the name comes
    from the spec's content), so it is resumed; for a named one, an existing experiment without ``--resume`` is an
    error (a new search would mix its trials into the old folder)."""
    exists = experiment_exists(job.run_path)
    if exists and not resume and job.name_source == "derived":
        say(f"this spec's experiment {job.name} exists at {job.run_path}: resuming it (finished trials are kept; a "
            "changed spec gets a new name, --name starts another search)")
        return True
    if exists and not resume:
        raise SpecError(
            f"{job.run_path} already holds a Tune experiment named {job.name!r}: run again with --resume to "
            "continue it (finished trials are kept), or pick another name (--name) to start a new search",
            field="name")
    if resume and not exists:
        say(f"--resume: no experiment at {job.run_path} yet; starting a new one")
    return exists and resume


# ---------------------------------------------------------------- search space, scheduler

def domain(param: SearchParam):
    from ray import tune

    t = param.type
    if t == "loguniform":
        return tune.loguniform(param.min, param.max)
    if t == "uniform":
        return tune.uniform(param.min, param.max)
    if t == "quniform":
        return tune.quniform(param.min, param.max, param.q)
    if t == "randint":
        return tune.randint(int(param.min), int(param.max) + 1)  # Tune's upper bound is exclusive
    if t == "choice":
        return tune.choice(thaw(param.values))
    if t == "grid":
        return tune.grid_search(thaw(param.values))
    raise SpecError(f"unknown distribution {t!r}", field="tuneConfig.searchSpace")


def param_space(tcfg: Tune) -> dict[str, Any]:
    return {p.key: domain(p) for p in tcfg.search_space}


def make_scheduler(tcfg: Tune):
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule, PopulationBasedTraining

    name, o = tcfg.scheduler, tcfg.scheduler_config
    # Every scheduler counts in epochs: one report per epoch is one training_iteration.
    if name == "asha":
        return ASHAScheduler(time_attr="training_iteration", max_t=o["maxT"], grace_period=o["gracePeriod"],
                             reduction_factor=o["reductionFactor"], brackets=o["brackets"])
    if name == "median":
        return MedianStoppingRule(time_attr="training_iteration", grace_period=o["gracePeriod"],
                                  min_samples_required=o["minSamplesRequired"])
    if name == "pbt":
        mutations = {p.key: domain(p) for p in tcfg.search_space if p.type != "grid"}
        return PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=o["perturbationInterval"],
                                       hyperparam_mutations=mutations, quantile_fraction=o["quantileFraction"],
                                       resample_probability=o["resampleProbability"], synch=o["synch"])
    return FIFOScheduler()


# ---------------------------------------------------------------- resources

def trial_resources(tcfg: Tune, workers: Workers) -> tuple[dict[str, float], dict[str, float]]:
    """(what the trial's own process holds, what the whole trial holds) in Ray resource names."""
    own = {"CPU": tcfg.trial_cpu, "GPU": tcfg.trial_gpu}
    total = dict(own)
    if tcfg.trial_runner == "train":
        total["CPU"] += workers.count * workers.cpu
        total["GPU"] += workers.count * workers.gpu
    return own, total


def check_trial_fits(tcfg: Tune, workers: Workers) -> int:
    """Fail before any trial unless one trial fits the cluster; return how many fit at once."""
    from training.runtime.cluster import check_resources, describe, fits, node_totals

    own, total = trial_resources(tcfg, workers)
    totals = node_totals()
    if tcfg.trial_runner == "train":
        # The Ray Train workers of one trial: the same check as mode: train (fails at once beyond the cluster, waits
        # config.resourceWaitSeconds for busy resources).
        check_resources(workers)
    bundle = {k: v for k, v in own.items() if v}
    if bundle and fits(totals, bundle, 1) < 1:
        raise ResourceError(
            f"each trial's own process asks for {', '.join(f'{v:g} {k}' for k, v in bundle.items())} "
            f"(tuneConfig.resourcesPerTrial) but no node has that ({describe(totals)})",
            field="tuneConfig.resourcesPerTrial")
    sums = {k: sum(n.get(k, 0.0) for n in totals) for k in ("CPU", "GPU")}
    fit = math.inf
    for k in ("CPU", "GPU"):
        if total.get(k):
            fit = min(fit, math.floor(sums[k] / total[k] + 1e-9))
    fit = 1 if fit == math.inf else max(int(fit), 1)
    return fit


# ---------------------------------------------------------------- run

def _announce(job: Job, restoring: bool, concurrent: int, fit_at_once: int) -> None:
    tcfg, w = job.tune, job.workers
    own, total = trial_resources(tcfg, w)
    runner_name = tcfg.trial_runner
    per_trial = f"{w.count} worker(s) x {w.cpu:g} CPU" if runner_name == "train" else f"{own['CPU']:g} CPU"
    say(f"{'resuming' if restoring else 'starting'} experiment {job.run_path}: {tcfg.num_samples} sample(s), "
        f"scheduler {tcfg.scheduler}, {tcfg.metric} ({tcfg.mode}), trial runner {runner_name} "
        f"({per_trial} per trial)")
    gpu = f", {total['GPU']:g} GPU" if total["GPU"] else ""
    say(f"{concurrent} trial(s) at once ({fit_at_once} fit the cluster: {total['CPU']:g} CPU{gpu} per trial)")


def _trainable(job: Job, user_fn: Callable | None, hooks: TestHooks):
    from ray import tune

    from training.tune.trial import local_trial, train_trial

    own, _ = trial_resources(job.tune, job.workers)
    fn = local_trial if job.tune.trial_runner == "local" else train_trial
    trainable = tune.with_parameters(fn, base_job=job, user_fn=user_fn, hooks=hooks)
    resources: dict[str, float] = {"cpu": own["CPU"], "gpu": own["GPU"]}
    if not own["CPU"] and not own["GPU"]:
        resources["memory"] = DRIVER_MEMORY
    return tune.with_resources(trainable, resources)


def _new_tuner(job: Job, trainable, concurrent: int):
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    tcfg = job.tune
    return tune.Tuner(
        trainable,
        param_space=param_space(tcfg),
        tune_config=tune.TuneConfig(
            metric=tcfg.metric, mode=tcfg.mode, scheduler=make_scheduler(tcfg),
            num_samples=tcfg.num_samples, reuse_actors=False,
            # The same seed samples the same configs (ASHA and FIFO of bench-tune see the same trials).
            search_alg=BasicVariantGenerator(max_concurrent=concurrent, random_state=tcfg.seed),
            trial_dirname_creator=lambda t: f"trial-{events.trial_index(t.trial_id):03d}",
        ),
        run_config=tune.RunConfig(
            name=job.name, storage_path=job.checkpoint.storage_path, verbose=0,
            failure_config=tune.FailureConfig(max_failures=tcfg.max_failures),
            # PBT clones checkpoints between trials: a clone's owner deleting it breaks the other trial.
            checkpoint_config=tune.CheckpointConfig(num_to_keep=None if tcfg.scheduler == "pbt"
                                                    else tcfg.keep_checkpoints_per_trial,
                                                    checkpoint_score_attribute=tcfg.metric,
                                                    checkpoint_score_order=tcfg.mode),
            # Tune pickles these with the experiment; restored, they read this run's settings (tune_events).
            callbacks=[events.Progress(job.name)], stop=events.Abort(job.name),
        ),
    )


def run_experiment(job: Job, user_fn: Callable | None, cluster: dict, *, resume: bool,
                   hooks: TestHooks = NO_HOOKS) -> tuple[dict, int, float]:
    """Run the search, or continue it when ``resume`` (what :func:`check_resume` returned); returns (result, exit
    code, seconds in Tuner.fit)."""
    from ray import tune

    from training.tune.summary import summarize

    tcfg = job.tune
    if job.checkpoint.every_epochs != 1:
        say(f"checkpoint.everyEpochs {job.checkpoint.every_epochs} -> 1: in mode tune every epoch is reported "
            "(and checkpointed) so that the scheduler sees each one")
        job = dataclasses.replace(job, checkpoint=dataclasses.replace(job.checkpoint, every_epochs=1))
    fit_at_once = check_trial_fits(tcfg, job.workers)
    concurrent = tcfg.max_concurrent_trials or fit_at_once
    restoring = resume  # check_resume found the experiment before Ray's session began
    _announce(job, restoring, concurrent, fit_at_once)
    trainable = _trainable(job, user_fn, hooks)
    search = events.begin(events.SearchState(
        name=job.name, metric=tcfg.metric, epochs=job.training.epochs, scheduler=tcfg.scheduler,
        journal=events.Journal(job.run_path), interrupt_after=hooks.interrupt_after_trials))
    try:
        if restoring:
            fs, path = storage.filesystem(job.run_path)
            tuner = tune.Tuner.restore(path, trainable=trainable, resume_unfinished=True, resume_errored=False,
                                       restart_errored=False, storage_filesystem=fs)
        else:
            tuner = _new_tuner(job, trainable, concurrent)
        t0 = time.time()
        # Tune prints its experiment banner on stdout, where this package prints only the result JSON.
        with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
            # One trial per process is deliberate (reuse_actors=False: each trial starts clean).
            warnings.filterwarnings("ignore", message="Consider boosting PBT performance")
            grid = tuner.fit()
        fit_s = time.time() - t0
    finally:
        events.end(job.name)
    result, code = summarize(job, grid, search, cluster, fit_s)
    result["results"]["resumed"] = bool(restoring)
    result["results"]["maxConcurrentTrials"] = int(concurrent)
    return result, code, fit_s
