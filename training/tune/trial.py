"""What runs inside each Ray Tune trial: the framework's trainer, driven by Tune.

Two trial runners (``tuneConfig.trialRunner``; see docs/training.md, "Hyperparameter search", for the choice):

* ``local`` -- the trial's own process runs the trainer function (``training/train_*.py`` or the user's) as a
  one-worker job, through a :class:`training.runtime.worker.WorkerContext` whose session is the Tune trial
  (:class:`training.runtime.sessions.TuneTrialSession`): each epoch's report is ``tune.report`` with the checkpoint, and a
  retried, resumed or PBT-exploited trial starts from the checkpoint ``tune.get_checkpoint()`` hands back.
* ``train`` -- the trial builds the framework's Ray Train trainer (the same as ``mode: train``) for
  ``config.numWorkers`` workers and runs ``fit()`` in a thread; a Ray Train ``UserCallback`` in the Train
  controller forwards every report (metrics + the persisted checkpoint path) through a Ray queue to the trial, which
  reports them to Tune with the checkpoint. The trial's Ray Train run has one stable name (``run``) under the
  trial's folder, so a retried or resumed trial is restored by Ray Train from that run's own latest checkpoint, as
  any re-run of a Ray Train run is. Only PBT hands a checkpoint over: an exploited trial continues from another
  trial's checkpoint, so each of its attempts is a new run (``run-N``) starting from the checkpoint Tune gave it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from training.job.parts import Job, Training
from training.runtime import storage
from training.runtime.faults import NO_HOOKS, TestHooks
from training.tune.events import MetricNotReported, trial_index

# ---------------------------------------------------------------- the trial's job

def trial_job(base: Job, config: dict[str, Any], trial_id: str) -> Job:
    """The job of one trial: the base job with the sampled values in their trainConfig fields."""
    training = base.training
    for key, value in config.items():
        param = base.tune.param(key)
        if param is not None:
            training = training.with_value(param.target, param.coerce(value))
    return dataclasses.replace(
        base, name=f"{base.name}-{trial_id}", training=training,
        checkpoint=dataclasses.replace(base.checkpoint, keep_best=None, resume_from=None))


def restore_copy(checkpoint, training: Training) -> str:
    """A local, writable copy of the trial's Tune checkpoint, with the trial's config applied where a built-in
    checkpoint would override it (the framework's ``adjust_restored``: PyTorch's optimizer state carries the old
    learning rate, so after a PBT exploit the copy trains with the trial's ``lr``)."""
    from training.frameworks import registry

    local = checkpoint.to_directory(tempfile.mkdtemp(prefix="training-tune-restore-"))
    adjust = registry.get(training.framework).adjust_restored
    if adjust is not None and not training.trainer_path:
        adjust(local, training)
    return local


def _check_metric(metrics: dict[str, Any], metric: str) -> None:
    if metric not in metrics:
        raise MetricNotReported(
            f"tuneConfig.metric {metric!r} is not among the metrics the trainer reports "
            f"({', '.join(sorted(k for k in metrics if k != 'epoch'))}); report it or change tuneConfig.metric")


# ---------------------------------------------------------------- local: the loop runs in the trial process

def local_trial(config: dict[str, Any], base_job: Job = None, user_fn: Callable | None = None,
                hooks: TestHooks = NO_HOOKS):
    """Tune function trainable, ``trialRunner: local``: the trainer as a one-worker job in this process."""
    from ray import tune

    from training.frameworks import registry
    from training.runtime.sessions import TuneTrialSession
    from training.runtime.worker import WorkerContext, run_with

    ctx = tune.get_context()
    trial_dir = ctx.get_trial_dir()
    job = trial_job(base_job, config, ctx.get_trial_id())
    job = dataclasses.replace(job, workers=dataclasses.replace(job.workers, count=1, min_count=None,
                                                               cpu=max(base_job.tune.trial_cpu, 1.0)))
    restored = tune.get_checkpoint()
    restored_dir = restore_copy(restored, job.training) if restored is not None else None
    metric = base_job.tune.metric
    session = TuneTrialSession(restored_dir, job.workers.use_gpu, check_metrics=lambda m: _check_metric(m, metric))
    try:
        framework = registry.get(job.training.framework)
        worker = WorkerContext(job, session, hooks.for_trial(trial_index(ctx.get_trial_id()), trial_dir),
                               worker_env=framework.worker_env)
        run_with(worker, user_fn or framework.loop, user=user_fn is not None)
    finally:
        if restored_dir:
            shutil.rmtree(restored_dir, ignore_errors=True)


# ---------------------------------------------------------------- train: each trial is a Ray Train run

try:
    from ray.train import UserCallback as _UserCallback
except Exception:  # only a base class; the module still imports without Ray Train
    _UserCallback = object


class ForwardToTune(_UserCallback):
    """Ray Train callback (runs in the Train controller): every report -> the trial's queue -> ``tune.report``.

    Like ``ray.tune.integration.ray_train.TuneReportCallback``, plus the path of the persisted checkpoint so that
    the trial can hand it to Tune."""

    def __init__(self, queue):
        self.queue = queue

    def after_report(self, run_context, metrics, checkpoint):
        item = {"metrics": dict(metrics[0]) if metrics else {}, "checkpoint": checkpoint.path if checkpoint else None}
        self.queue.put(item, block=True)


def _trial_run(base_job: Job, job: Job, trial_dir: str, restored_dir: str | None) -> Job:
    """The trial's job as its own Ray Train run: name, storage and starting checkpoint (see the module's docstring)."""
    runs = storage.join(base_job.run_path, os.path.basename(trial_dir), "train")
    handoff = base_job.tune.scheduler == "pbt"
    if not handoff:
        name, resume_from = "run", None
    elif storage.is_uri(runs):
        name, resume_from = f"run-{int(time.time())}", restored_dir
    else:
        taken = len([d for d in os.listdir(runs) if d.startswith("run-")]) if os.path.isdir(runs) else 0
        name, resume_from = f"run-{taken}", restored_dir
    checkpoint = dataclasses.replace(job.checkpoint, storage_path=runs, resume_from=resume_from, max_failures=0,
                                     keep_best=2, metric=base_job.tune.metric, metric_mode=base_job.tune.mode)
    return dataclasses.replace(job, name=name, checkpoint=checkpoint)


def train_trial(config: dict[str, Any], base_job: Job = None, user_fn: Callable | None = None,
                hooks: TestHooks = NO_HOOKS):
    """Tune function trainable, ``trialRunner: train``: one Ray Train run of ``config.numWorkers`` workers."""
    from ray import tune
    from ray.util.queue import Queue

    from training.frameworks.trainer import build_trainer, health_check_settings

    ctx = tune.get_context()
    trial_dir = ctx.get_trial_dir()
    job = trial_job(base_job, config, ctx.get_trial_id())
    metric = base_job.tune.metric
    restored = tune.get_checkpoint()
    handoff = base_job.tune.scheduler == "pbt" and restored is not None
    restored_dir = restore_copy(restored, job.training) if handoff else None
    job = _trial_run(base_job, job, trial_dir, restored_dir)
    queue = Queue(maxsize=1, actor_options={"num_cpus": 0})
    trainer = build_trainer(job, user_fn, hooks.for_trial(trial_index(ctx.get_trial_id()), trial_dir),
                            callbacks=[ForwardToTune(queue)])
    try:
        with health_check_settings(job.workers.health_check):
            _fit_forwarding(trainer, queue, metric, job.checkpoint.max_failures)
    finally:
        if restored_dir:
            shutil.rmtree(restored_dir, ignore_errors=True)


def _fit_forwarding(trainer, queue, metric: str, max_failures: int) -> None:
    """Run ``fit()`` in a thread; hand every report the callback queues to Tune, with its checkpoint."""
    from ray import tune
    from ray.util.queue import Empty

    from training.runtime import failures

    outcome: dict[str, Any] = {}

    def fit():
        try:
            failures.fit(trainer, max_failures)
        except BaseException as exc:  # handed to the trial thread below
            outcome["error"] = exc

    def forward(item):
        _check_metric(item["metrics"], metric)
        ckpt = None
        if item["checkpoint"]:
            fs, path = storage.filesystem(item["checkpoint"])
            ckpt = tune.Checkpoint(path=path, filesystem=fs)
        tune.report(item["metrics"], checkpoint=ckpt)

    thread = threading.Thread(target=fit, name="ray-train-fit", daemon=True)
    thread.start()
    while True:
        try:
            item = queue.get(block=True, timeout=0.5)
        except Empty:
            if thread.is_alive():
                continue
            while True:  # drain what came in just before the run ended
                try:
                    forward(queue.get_nowait())
                except Empty:
                    break
            break
        forward(item)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
