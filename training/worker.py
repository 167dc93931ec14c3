"""Per-worker plumbing shared by the built-in trainers and user trainers (``trainConfig.trainerPath``).

A user trainer is a function ``train(ctx: WorkerContext)`` run on every Ray Train worker::

    def train(ctx):
        shard = ctx.data()                      # this worker's shard (numpy arrays)
        model = ...
        if ctx.checkpoint_dir:                  # restored checkpoint (local folder) or None
            model.load(os.path.join(ctx.checkpoint_dir, "model.bin"))
        for epoch in ctx.epochs():              # epochs still to train, 1-based, resume-aware
            ...
            ctx.report(epoch, {"loss": ..., "val_accuracy": ...},
                       save=lambda d: model.save(os.path.join(d, "model.bin")))

``report`` prints rank 0's progress every epoch, and every ``checkpoint.everyEpochs`` epochs (and at the last one)
writes a checkpoint with a manifest and hands it to ``ray.train.report``. All workers must call ``report`` for the
same epochs (it is a barrier at checkpoint epochs).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from training import checkpointing, preflight
from training.env import TF_WORKER_ENV
from training.errors import CheckpointError


def _scalar(v):
    if isinstance(v, bool) or isinstance(v, int):
        return v
    if type(v).__name__.startswith(("int", "uint")):
        return int(v)
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return f if math.isfinite(f) else str(f)


def _quiet_worker_logs() -> None:
    """Ray Train logs every ``report()`` of every worker at INFO (logger named after its source file), and DDP
    warns about grad strides for 1-channel inputs: keep the console to the progress lines."""
    import warnings

    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    logging.getLogger("ray.train").setLevel(logging.WARNING)
    try:
        from ray.train.v2._internal.execution import context as ray_context

        logging.getLogger(ray_context.__file__).setLevel(logging.WARNING)
    except Exception:  # the module moved in another Ray version: only noise is at stake
        pass


class WorkerContext:
    """Config, data shard, checkpoint restore, progress and reporting for one Ray Train worker."""

    def __init__(self, job: dict[str, Any]):
        if job.get("framework") == "tensorflow":
            for key, value in TF_WORKER_ENV.items():
                os.environ.setdefault(key, value)
        import ray.train

        _quiet_worker_logs()
        problem = preflight.efa_memlock_problem()
        if problem:
            print(problem, file=sys.stderr, flush=True)
        self.job = job
        tctx = ray.train.get_context()
        self.rank: int = tctx.get_world_rank()
        self.world_size: int = tctx.get_world_size()
        self.local_rank: int = tctx.get_local_rank()
        self.framework: str = job["framework"]
        self.total_epochs: int = job["epochs"]
        self.batch_size: int = job["batchSize"]
        self.lr: float = job["lr"]
        self.seed: int = job["seed"]
        self.params: dict[str, Any] = job.get("params") or {}
        self.model_config: dict[str, Any] = job.get("model") or {}
        self.every: int = job["checkpoint"]["everyEpochs"]
        self.history: list[dict] = []
        self.start_epoch: int = 0
        self.trained_epochs: list[int] = []
        self.checkpoint_dir: str | None = None
        self.checkpoint_source: str | None = None
        self._shard = None
        self._t_epoch = time.time()
        self._restore()

    # ------------------------------------------------------------------ restore

    def _restore(self) -> None:
        import ray.train

        ckpt = ray.train.get_checkpoint()
        source = "run"
        if ckpt is None and self.job["checkpoint"].get("resumeFrom"):
            ckpt = ray.train.Checkpoint(self.job["checkpoint"]["resumeFrom"])
            source = "resumeFrom"
        if ckpt is None:
            return
        if type(ckpt.filesystem).__name__ == "LocalFileSystem":
            local = ckpt.path
        else:
            local = ckpt.to_directory(tempfile.mkdtemp(prefix="training-restore-"))
        meta = checkpointing.verify_local(local, self.framework)
        self.checkpoint_dir = local
        self.checkpoint_source = f"{source}:{ckpt.path}"
        self.start_epoch = int(meta["epoch"])
        self.history = list(meta.get("history") or [])
        if self.rank == 0:
            self.log(f"restored checkpoint {ckpt.path} (epoch {self.start_epoch}); "
                     f"{max(self.total_epochs - self.start_epoch, 0)} epoch(s) left")

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
        """This worker's shard of ``data`` (see :mod:`training.data`), loaded once."""
        if self._shard is None:
            from training.data import load_shard

            self._shard = load_shard(self.job["data"], self.rank, self.world_size, self.seed)
        return self._shard

    # ------------------------------------------------------------------ epochs

    def remaining(self) -> list[int]:
        return list(range(self.start_epoch + 1, self.total_epochs + 1))

    def epochs(self) -> Iterator[int]:
        """Epochs still to train (1-based): after the restored checkpoint's epoch, up to ``trainConfig.epochs``."""
        for epoch in self.remaining():
            self._t_epoch = time.time()
            self._ledger("start", epoch)
            self.fault_point(epoch, phase="start")
            yield epoch

    def batch_hook(self, epoch: int, batch: int, num_batches: int) -> None:
        """Called by the built-in loops after each step: the place where a test fault fires mid-epoch."""
        if num_batches and batch + 1 >= max(num_batches // 2, 1):
            self.fault_point(epoch, phase="mid")

    def is_checkpoint_epoch(self, epoch: int) -> bool:
        return epoch % self.every == 0 or epoch == self.total_epochs

    # ------------------------------------------------------------------ report

    def report(self, epoch: int, metrics: dict[str, Any], save: Callable[[str], None] | None = None,
               save_on_all_ranks: bool = False) -> None:
        """Record an epoch's metrics; at checkpoint epochs, save a checkpoint and report it to Ray Train.

        ``save(directory)`` writes the model into ``directory``; it runs on rank 0 only unless
        ``save_on_all_ranks`` (TensorFlow under MultiWorkerMirroredStrategy: saving is collective).
        """
        import ray.train

        metrics = {k: _scalar(v) for k, v in metrics.items()}
        metrics["epoch"] = int(epoch)
        metrics.setdefault("epoch_time_s", round(time.time() - self._t_epoch, 3))
        self.history.append(metrics)
        self.trained_epochs.append(int(epoch))
        self._ledger("end", epoch)
        if self.rank == 0:
            shown = ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in metrics.items() if k != "epoch")
            self.log(f"epoch {epoch}/{self.total_epochs}: {shown}")
        if not self.is_checkpoint_epoch(epoch):
            return
        ck = self.job["checkpoint"]
        if ck.get("keepBest") and ck["metric"] not in metrics:
            raise ValueError(
                f"checkpoint.keepBest ranks checkpoints by {ck['metric']!r} but the trainer reported only "
                f"{sorted(metrics)}; report that metric or set checkpoint.metric"
            )
        with tempfile.TemporaryDirectory(prefix="training-ckpt-") as tmp:
            if save is not None and (self.rank == 0 or save_on_all_ranks):
                save(tmp)
            checkpoint = None
            if self.rank == 0:
                checkpointing.write_manifest(tmp, epoch=epoch, framework=self.framework,
                                             history=self.history, metrics=metrics,
                                             extra={"name": self.job["name"], "worldSize": self.world_size})
                checkpoint = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=checkpoint,
                             checkpoint_dir_name=checkpointing.checkpoint_dir_name(epoch))

    def record_evaluation(self, metrics: dict[str, Any]) -> None:
        """For a run with no epochs left (a finished checkpoint resumed): keep the restored model's evaluation."""
        self.evaluation = {k: _scalar(v) for k, v in metrics.items()}
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
        if getattr(self, "evaluation", None):
            out["evaluation"] = self.evaluation
        return out

    # ------------------------------------------------------------------ logging, test hooks

    def log(self, message: str) -> None:
        print(f"[train {self.job['name']}] {message}", file=sys.stderr, flush=True)

    def _ledger(self, event: str, epoch: int) -> None:
        """Test hook: with ``TRAINING_EPOCH_LEDGER`` set on the driver, every rank appends its epoch events."""
        path = self.job.get("_ledger")
        if not path:
            return
        line = json.dumps({"rank": self.rank, "pid": os.getpid(), "epoch": epoch, "event": event,
                           "startEpoch": self.start_epoch, "t": time.time()})
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def fault_point(self, epoch: int, phase: str) -> None:
        """Test hook: ``TRAINING_FAULT_INJECTION=rank=1,epoch=3[,phase=mid]`` makes that rank's process die
        (``os._exit``) at that epoch, once per run (a marker file in the run folder records that it fired)."""
        fault = self.job.get("_fault")
        if not fault or fault["rank"] != self.rank or fault["epoch"] != epoch or fault.get("phase", "mid") != phase:
            return
        marker = fault["marker"]
        if os.path.exists(marker):
            return
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "epoch": epoch, "rank": self.rank, "t": time.time()}))
        # Give the controller time to register the previous checkpoint (its poll interval is well under this),
        # so the test measures resume-from-latest rather than the race the Ray note describes.
        time.sleep(float(fault.get("delay", 3.0)))
        self._ledger("killed", epoch)
        print(f"[train {self.job['name']}] fault injection: rank {self.rank} exits at epoch {epoch}", file=sys.stderr, flush=True)
        os._exit(17)
