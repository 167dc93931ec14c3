"""What runs inside each Ray Tune trial: the #5 trainers, driven by Tune.

Two trial runners (``tuneConfig.trialRunner``; see docs/training.md, "Hyperparameter search", for the choice):

* ``local`` -- the trial's own Tune process runs the framework's per-worker loop (``training/train_*.py`` or the
  user trainer) as a one-worker job. Tune forbids ``ray.train.report`` & co. inside a Tune function, so for the
  life of the trial process (one trial per process: ``reuse_actors=False``) the handful of Ray Train per-worker
  calls the loops make (``get_context``, ``get_checkpoint``, ``report``, ``torch.get_device``,
  ``torch.prepare_model``) are answered by Tune: each epoch's report becomes ``tune.report`` with the checkpoint.
* ``train`` -- the trial builds the framework's Ray Train trainer (``training.trainers.build_trainer``, the same
  as ``mode: train``) for ``config.numWorkers`` workers and runs ``fit()`` in a thread; a Ray Train
  ``UserCallback`` in the Train controller forwards every report (metrics + the persisted checkpoint path) through
  a Ray queue to the trial, which reports them to Tune with the checkpoint. It is ``TuneReportCallback`` plus the
  checkpoint, which Tune needs for trial retries, ``--resume`` and PBT.

Either way Tune owns the checkpoints: a retried, resumed or PBT-exploited trial gets its checkpoint back from
``tune.get_checkpoint()`` and the loop resumes from the checkpoint's epoch with the trial's (possibly new) config.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from training import checkpointing
from training.tune_spec import set_path

#: ``TRAINING_FAULT_INJECTION`` test hook in tune mode: ``trial=<index>`` picks the trial (default: every trial).
FAULT_MARKER = ".fault-injected"


class MetricNotReported(ValueError):
    """The trainer's report lacks ``tuneConfig.metric`` (a user trainer: checked at its first report)."""


# ---------------------------------------------------------------- the trial's job

def trial_index(trial_id: str) -> int:
    try:
        return int(str(trial_id).rsplit("_", 1)[-1])
    except ValueError:
        return 0


def trial_job(base: dict[str, Any], config: dict[str, Any], trial_id: str, trial_dir: str) -> dict[str, Any]:
    """The normalized job of one trial: the base job with the sampled values written into their fields."""
    job = copy.deepcopy({k: v for k, v in base.items() if k != "spec"})
    space = base["tune"]["searchSpace"]
    for key, value in config.items():
        entry = space.get(key)
        if entry is not None:
            set_path(job, entry["target"], value, entry["kind"])
    job["name"] = f"{base['name']}-{trial_id}"
    job["checkpoint"]["keepBest"] = None
    job["checkpoint"]["resumeFrom"] = None
    fault = base.get("_fault")
    if fault:
        wanted = fault.get("trial")
        if wanted is None or int(wanted) == trial_index(trial_id):
            job["_fault"] = {**fault, "marker": os.path.join(trial_dir, FAULT_MARKER)}
        else:
            job.pop("_fault", None)
    return job


def restore_copy(checkpoint, job: dict[str, Any]) -> str:
    """A local, writable copy of the trial's Tune checkpoint, with the trial's config applied where a checkpoint
    would override it: PyTorch's saved optimizer state carries the old learning rate, so after a PBT exploit the
    copy's ``param_groups[*].lr`` is set to the trial's ``lr`` (and the manifest's SHA-256 rewritten)."""
    local = checkpoint.to_directory(tempfile.mkdtemp(prefix="training-tune-restore-"))
    if job["framework"] == "pytorch" and not job.get("trainerPath"):
        from training.train_torch import MODEL_FILE

        path = os.path.join(local, MODEL_FILE)
        if os.path.exists(path):
            import torch

            meta = checkpointing.verify_local(local, "pytorch")
            state = torch.load(path, map_location="cpu", weights_only=True)
            groups = state.get("optimizer", {}).get("param_groups", [])
            if any(abs(g.get("lr", job["lr"]) - job["lr"]) > 1e-15 for g in groups):
                for g in groups:
                    g["lr"] = job["lr"]
                torch.save(state, path)
                checkpointing.write_manifest(local, epoch=meta["epoch"], framework=meta["framework"],
                                             history=meta.get("history") or [], metrics=meta.get("metrics") or {},
                                             extra={**(meta.get("extra") or {}), "lrSetOnRestore": job["lr"]})
    return local


def _check_metric(metrics: dict[str, Any], metric: str) -> None:
    if metric not in metrics:
        raise MetricNotReported(
            f"tuneConfig.metric {metric!r} is not among the metrics the trainer reports "
            f"({', '.join(sorted(k for k in metrics if k != 'epoch'))}); report it or change tuneConfig.metric")


def _tune_checkpoint(ckpt):
    from ray import tune

    if ckpt is None:
        return None
    return tune.Checkpoint(path=ckpt.path, filesystem=ckpt.filesystem)


# ---------------------------------------------------------------- local: the loop runs in the trial process

class _LocalContext:
    """What ``ray.train.get_context()`` answers in a local trial: one worker."""

    def __init__(self, name: str):
        self._name = name

    def get_world_rank(self) -> int:
        return 0

    def get_world_size(self) -> int:
        return 1

    def get_local_rank(self) -> int:
        return 0

    def get_local_world_size(self) -> int:
        return 1

    def get_node_rank(self) -> int:
        return 0

    def get_experiment_name(self) -> str:
        return self._name


class _TuneBackedTrainAPI:
    """Ray Train's per-worker calls, answered by Tune, for the life of one local trial process."""

    def __init__(self, job: dict[str, Any], restored_dir: str | None, metric: str):
        self.job = job
        self.restored_dir = restored_dir
        self.metric = metric
        self._saved: dict[Any, dict[str, Any]] = {}

    def get_context(self):
        return _LocalContext(self.job["name"])

    def get_checkpoint(self):
        import ray.train

        return ray.train.Checkpoint(self.restored_dir) if self.restored_dir else None

    def report(self, metrics, checkpoint=None, checkpoint_dir_name=None, **_ignored):
        from ray import tune

        _check_metric(metrics, self.metric)
        tune.report(dict(metrics), checkpoint=_tune_checkpoint(checkpoint))

    def install(self) -> None:
        import ray.train

        self._patch(ray.train, get_context=self.get_context, get_checkpoint=self.get_checkpoint, report=self.report)
        if self.job["framework"] == "pytorch":
            import ray.train.torch
            import torch

            device = torch.device("cuda" if self.job["useGpu"] and torch.cuda.is_available() else "cpu")

            def prepare_model(model, move_to_device=True, **_ignored):
                return model.to(device) if move_to_device else model

            self._patch(ray.train.torch, get_device=lambda: device, prepare_model=prepare_model)

    def _patch(self, module, **attrs) -> None:
        saved = self._saved.setdefault(module, {})
        for name, value in attrs.items():
            saved.setdefault(name, getattr(module, name))
            setattr(module, name, value)

    def uninstall(self) -> None:
        for module, attrs in self._saved.items():
            for name, value in attrs.items():
                setattr(module, name, value)
        self._saved.clear()


def local_trial(config: dict[str, Any], base_job: dict[str, Any] = None, user_fn: Callable | None = None):
    """Tune function trainable, ``trialRunner: local``: the framework's loop as a one-worker job in this process."""
    from ray import tune

    from training.env import TF_WORKER_ENV

    ctx = tune.get_context()
    trial_dir = ctx.get_trial_dir()
    job = trial_job(base_job, config, ctx.get_trial_id(), trial_dir)
    job["numWorkers"] = 1
    job["cpuPerWorker"] = max(base_job["tune"]["resourcesPerTrial"]["cpu"], 1.0)
    if job["framework"] == "tensorflow":
        for key, value in TF_WORKER_ENV.items():
            os.environ.setdefault(key, value)
    restored = tune.get_checkpoint()
    restored_dir = restore_copy(restored, job) if restored is not None else None
    api = _TuneBackedTrainAPI(job, restored_dir, base_job["tune"]["metric"])
    api.install()
    try:
        if user_fn is not None:
            from training.user_trainer import user_loop

            user_loop({"job": job, "fn": user_fn})
        else:
            from training.trainers import builtin_loop

            builtin_loop(job["framework"])({"job": job})
    finally:
        api.uninstall()
        if restored_dir:
            shutil.rmtree(restored_dir, ignore_errors=True)


# ---------------------------------------------------------------- train: each trial is a Ray Train run

try:
    from ray.train.v2.api.callback import UserCallback as _UserCallback
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


def train_trial(config: dict[str, Any], base_job: dict[str, Any] = None, user_fn: Callable | None = None):
    """Tune function trainable, ``trialRunner: train``: one Ray Train run of ``config.numWorkers`` workers."""
    import ray.train
    from ray import tune
    from ray.util.queue import Empty, Queue

    from training import storage
    from training.runner import _training_failure
    from training.trainers import build_trainer

    ctx = tune.get_context()
    trial_dir = ctx.get_trial_dir()
    job = trial_job(base_job, config, ctx.get_trial_id(), trial_dir)
    metric = base_job["tune"]["metric"]
    restored = tune.get_checkpoint()
    restored_dir = restore_copy(restored, job) if restored is not None else None
    # A fresh Ray Train run per attempt (retry, resume, PBT exploit) under the trial's folder; it starts from the
    # checkpoint Tune handed back, not from an earlier attempt's own latest one.
    runs = storage.join(base_job["checkpoint"]["storagePath"], base_job["name"], os.path.basename(trial_dir), "train")
    if storage.is_uri(runs):
        job["name"] = f"run-{int(time.time())}"
    else:
        job["name"] = f"run-{len([d for d in os.listdir(runs) if d.startswith('run-')]) if os.path.isdir(runs) else 0}"
    job["checkpoint"].update({"storagePath": runs, "resumeFrom": restored_dir, "maxFailures": 0, "keepBest": 2,
                              "metric": metric, "metricMode": base_job["tune"]["mode"]})
    queue = Queue(maxsize=1, actor_options={"num_cpus": 0})
    trainer = build_trainer(job, user_fn)
    trainer.run_config.callbacks = [ForwardToTune(queue)]

    outcome: dict[str, Any] = {}

    def fit():
        try:
            outcome["result"] = trainer.fit()
        except BaseException as exc:  # handed to the trial thread below
            outcome["error"] = exc

    thread = threading.Thread(target=fit, name="ray-train-fit", daemon=True)
    thread.start()

    def forward(item):
        _check_metric(item["metrics"], metric)
        ckpt = None
        if item["checkpoint"]:
            fs, path = storage.filesystem(item["checkpoint"])
            ckpt = tune.Checkpoint(path=path, filesystem=fs)
        tune.report(item["metrics"], checkpoint=ckpt)

    try:
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
    finally:
        if restored_dir:
            shutil.rmtree(restored_dir, ignore_errors=True)
    if "error" in outcome:
        exc = outcome["error"]
        if isinstance(exc, ray.train.TrainingFailedError):
            raise _training_failure(exc, job) from None
        raise exc
    result = outcome.get("result")
    if result is not None and getattr(result, "error", None):
        raise _training_failure(result.error, job)
