"""The one door the training loops use: config, data shard, checkpoint restore, device, progress and reporting.

Built-in trainers (``training/train_*.py``) and user trainers (``trainConfig.trainerPath``) are the same thing: a
function ``train(ctx: WorkerContext)`` run on every worker::

    def train(ctx):
        shard = ctx.data()                      # this worker's shard (numpy arrays)
        model = ...
        ctx.restore(lambda d: model.load(os.path.join(d, "model.bin")))   # a restored checkpoint, if any
        for epoch in ctx.epochs():              # epochs still to train, 1-based, resume-aware
            ...
            ctx.report(epoch, {"loss": ..., "val_accuracy": ...},
                       save=lambda d: model.save(os.path.join(d, "model.bin")))

``report`` prints rank 0's progress every epoch, and every ``checkpoint.everyEpochs`` epochs (and at the last one)
writes a checkpoint with a manifest and reports it. All workers must call ``report`` for the same epochs (it is a
barrier at checkpoint epochs). Where reports go (Ray Train, or a Tune trial running the loop itself) is the
context's session (:mod:`training.runtime.sessions`); the loops never call Ray.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from training.errors import CheckpointError
from training.job.parts import Job, Model, thaw
from training.runtime import checkpoints, faults, preflight, storage
from training.runtime.data import batch_share
from training.runtime.faults import NO_HOOKS, TestHooks
from training.runtime.sessions import Session


def _quiet_worker_warnings() -> None:
    """DDP warns about grad strides for 1-channel inputs on every step: keep the console to the progress lines.
    (Ray Train's own per-report INFO lines are held back by the run's ``LoggingConfig``.)"""
    import warnings

    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")


class WorkerContext:
    """Config, data shard, checkpoint restore, device, progress and reporting for one worker of a run."""

    def __init__(self, job: Job, session: Session | None = None, hooks: TestHooks = NO_HOOKS,
                 worker_env: Mapping[str, str] | None = None):
        training = job.training
        for key, value in (worker_env or {}).items():  # the framework's, before it is imported
            os.environ.setdefault(key, value)
        if session is None:
            from training.runtime.sessions import RayTrainSession

            session = RayTrainSession()
        _quiet_worker_warnings()
        problem = preflight.efa_memlock_problem()
        if problem:
            print(problem, file=sys.stderr, flush=True)
        self.job = job
        self.session = session
        self.hooks = hooks
        self.rank: int = session.rank
        self.world_size: int = session.world_size
        self.local_rank: int = session.local_rank
        self.name: str = job.name
        self.framework: str = training.framework
        self.total_epochs: int = training.epochs
        # batchSize is the global batch of one step: each worker trains its share, so steps per epoch, the gradient
        # (DDP / MWMS average over all workers) and the result do not depend on how many workers there are.
        self.global_batch_size: int = training.batch_size
        self.batch_size: int = batch_share(training.batch_size, self.world_size)
        self.lr: float = training.lr
        self.seed: int = training.seed
        self.params: dict[str, Any] = thaw(training.params)  # a user trainer's own copy
        self.model: Model = training.model  # the built-in CNN
        self.xgboost: dict[str, Any] = thaw(training.xgboost)
        self.threads: int = max(1, int(job.workers.cpu))  # intra-op threads: the worker's CPUs
        self.every: int = job.checkpoint.every_epochs
        self.history: list[dict] = []
        self.start_epoch: int = 0
        self.trained_epochs: list[int] = []
        self.checkpoint_dir: str | None = None
        self.checkpoint_source: str | None = None
        self.evaluation: dict[str, Any] | None = None
        self._shard = None
        self._t_epoch = time.time()
        self._open_checkpoint()

    # ------------------------------------------------------------------ device (PyTorch)

    def device(self):
        """The torch device this worker trains on."""
        return self.session.device()

    def prepare_model(self, model):
        """The model on this worker's device, wrapped in DistributedDataParallel when there are several workers."""
        return self.session.prepare_model(model)

    # ------------------------------------------------------------------ restore

    def _open_checkpoint(self) -> None:
        """The run's own latest checkpoint (after a restart or on a re-run), else ``checkpoint.resumeFrom``: verified
        and made local; its epoch and history become this worker's starting point."""
        ckpt = self.session.get_checkpoint()
        source = "run"
        if ckpt is None and self.job.checkpoint.resume_from:
            import ray.train

            ckpt = ray.train.Checkpoint(self.job.checkpoint.resume_from)
            source = "resumeFrom"
        if ckpt is None:
            return
        if type(ckpt.filesystem).__name__ == "LocalFileSystem":
            local = ckpt.path
        else:
            local = ckpt.to_directory(tempfile.mkdtemp(prefix="training-restore-"))
        meta = checkpoints.verify(local, self.framework)
        self.checkpoint_dir = local
        self.checkpoint_source = f"{source}:{ckpt.path}"
        self.start_epoch = int(meta["epoch"])
        self.history = list(meta.get("history") or [])
        if self.rank == 0:
            self.log(f"restored checkpoint {ckpt.path} (epoch {self.start_epoch}); "
                     f"{max(self.total_epochs - self.start_epoch, 0)} epoch(s) left")

    def restore(self, load: Callable[[str], None]) -> bool:
        """Load the restored checkpoint with ``load(directory)``; False when there is none. Anything ``load`` raises
        becomes a ``CheckpointError`` naming the checkpoint (a damaged or foreign checkpoint is a clear error)."""
        if not self.checkpoint_dir:
            return False
        try:
            load(self.checkpoint_dir)
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(f"checkpoint {self.checkpoint_dir} cannot be loaded into this model: "
                                  f"{type(exc).__name__}: {exc}") from None
        return True

    def checkpoint_file(self, name: str) -> str:
        """Path of ``name`` inside the restored checkpoint; ``CheckpointError`` if it is not there."""
        if not self.checkpoint_dir:
            raise CheckpointError("no checkpoint was restored")
        path = os.path.join(self.checkpoint_dir, name)
        if not os.path.exists(path):
            raise CheckpointError(f"checkpoint {self.checkpoint_dir} lacks {name}")
        return path

    # ------------------------------------------------------------------ data

    def data(self):
        """This worker's shard of ``data`` (see :mod:`training.runtime.data`), loaded once."""
        if self._shard is None:
            from training.runtime.data import load_shard

            self._shard = load_shard(self.job.data, self.rank, self.world_size, self.seed)
        return self._shard

    # ------------------------------------------------------------------ epochs

    def remaining(self) -> list[int]:
        return list(range(self.start_epoch + 1, self.total_epochs + 1))

    def epochs(self) -> Iterator[int]:
        """Epochs still to train (1-based): after the restored checkpoint's epoch, up to ``trainConfig.epochs``."""
        for epoch in self.remaining():
            self._t_epoch = time.time()
            faults.record(self.hooks, self.rank, "start", epoch, self.start_epoch)
            faults.maybe_fail(self.hooks, self.rank, epoch, "start", self.start_epoch, self.name)
            yield epoch

    def batch_hook(self, epoch: int, batch: int, num_batches: int) -> None:
        """Called by the built-in loops after each step: the place where a test fault fires mid-epoch."""
        if num_batches and batch + 1 >= max(num_batches // 2, 1):
            faults.maybe_fail(self.hooks, self.rank, epoch, "mid", self.start_epoch, self.name)

    def is_checkpoint_epoch(self, epoch: int) -> bool:
        return epoch % self.every == 0 or epoch == self.total_epochs

    # ------------------------------------------------------------------ report

    def report(self, epoch: int, metrics: dict[str, Any], save: Callable[[str], None] | None = None,
               save_on_all_ranks: bool = False) -> None:
        """Record an epoch's metrics; at checkpoint epochs, save a checkpoint and report it with them.

        ``save(directory)`` writes the model into ``directory``; it runs on rank 0 only unless
        ``save_on_all_ranks`` (TensorFlow under MultiWorkerMirroredStrategy: saving is collective).
        """
        metrics = {k: storage.json_safe(v) for k, v in metrics.items()}
        metrics["epoch"] = int(epoch)
        metrics.setdefault("epoch_time_s", round(time.time() - self._t_epoch, 3))
        self.history.append(metrics)
        self.trained_epochs.append(int(epoch))
        faults.record(self.hooks, self.rank, "end", epoch, self.start_epoch)
        if self.rank == 0:
            shown = ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in metrics.items() if k != "epoch")
            self.log(f"epoch {epoch}/{self.total_epochs}: {shown}")
        if not self.is_checkpoint_epoch(epoch):
            return
        ck = self.job.checkpoint
        if ck.keep_best and ck.metric not in metrics:
            raise ValueError(
                f"checkpoint.keepBest ranks checkpoints by {ck.metric!r} but the trainer reported only "
                f"{sorted(metrics)}; report that metric or set checkpoint.metric"
            )
        with tempfile.TemporaryDirectory(prefix="training-ckpt-") as tmp:
            if save is not None and (self.rank == 0 or save_on_all_ranks):
                save(tmp)
            if self.rank == 0:
                checkpoints.write_manifest(tmp, epoch=epoch, framework=self.framework,
                                             history=self.history, metrics=metrics,
                                             extra={"name": self.name, "worldSize": self.world_size})
            self.session.report(metrics, tmp if self.rank == 0 else None, checkpoints.checkpoint_dir_name(epoch))

    def record_evaluation(self, metrics: dict[str, Any]) -> None:
        """For a run with no epochs left (a finished checkpoint resumed): keep the restored model's evaluation."""
        self.evaluation = {k: storage.json_safe(v) for k, v in metrics.items()}
        if self.rank == 0:
            self.log("no epochs left to train; evaluated the restored model: "
                     + ", ".join(f"{k}={v:.4f}" for k, v in self.evaluation.items() if isinstance(v, float)))

    def summary(self) -> dict[str, Any]:
        """Returned by rank 0's training function: becomes ``Result.return_value`` on the driver."""
        out = {
            "history": self.history,
            "trainedEpochs": self.trained_epochs,
            "startEpoch": self.start_epoch,
            "checkpointSource": self.checkpoint_source,
            "worldSize": self.world_size,
        }
        if self.evaluation:
            out["evaluation"] = self.evaluation
        return out

    # ------------------------------------------------------------------ logging

    def log(self, message: str) -> None:
        print(f"[train {self.name}] {message}", file=sys.stderr, flush=True)


def run_worker(config: dict[str, Any]) -> dict[str, Any]:
    """The per-worker function every Ray Train trainer of this package runs: ``config["fn"]`` (a built-in trainer's
    ``train`` or the user's) with this worker's context; rank 0's summary becomes the run's return value."""
    ctx = WorkerContext(config["job"], hooks=config.get("hooks") or NO_HOOKS, worker_env=config.get("worker_env"))
    return run_with(ctx, config["fn"], user=bool(config.get("user")))


def run_with(ctx: WorkerContext, fn: Callable[[WorkerContext], Any], *, user: bool) -> dict[str, Any]:
    value = fn(ctx)
    out = ctx.summary()
    if user and value is not None and ctx.rank == 0:
        out["returnValue"] = value
    return out
