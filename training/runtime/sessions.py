"""Where a worker's reports, checkpoints, rank and device come from: a Ray Train worker, or a Tune trial's own process.

The training loops never call Ray themselves: :class:`training.runtime.worker.WorkerContext` asks one of these two sessions,
both written against Ray's public API only.

* :class:`RayTrainSession` -- a Ray Train worker (``mode: train``, and each worker of a ``trialRunner: train``
  trial): ``ray.train.get_context`` / ``get_checkpoint`` / ``report`` and, for PyTorch, ``ray.train.torch``'s device
  and model preparation (DDP across the workers).
* :class:`TuneTrialSession` -- a ``trialRunner: local`` trial, whose loop runs in the Tune trial's process as a
  one-worker job: ``ray.tune.report`` with the checkpoint, the checkpoint Tune hands back (``ray.tune.get_checkpoint``,
  copied and adjusted by the trial), the trial's device.
"""

from __future__ import annotations

from typing import Any, Protocol


class Session(Protocol):
    rank: int
    world_size: int
    local_rank: int

    def get_checkpoint(self):
        """The checkpoint to start from (an object with ``path``, ``filesystem``, ``to_directory``), or None."""

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None, dir_name: str) -> None:
        """Report one epoch's metrics, with the checkpoint written into ``checkpoint_dir`` (rank 0) or None."""

    def device(self):
        """The torch device this worker trains on."""

    def prepare_model(self, model):
        """The model on this worker's device, wrapped for data-parallel training when there are several workers."""


class RayTrainSession:
    """A Ray Train worker's view of its run (Ray Train V2's per-worker API)."""

    def __init__(self):
        import ray.train

        context = ray.train.get_context()
        self.rank = context.get_world_rank()
        self.world_size = context.get_world_size()
        self.local_rank = context.get_local_rank()

    def get_checkpoint(self):
        import ray.train

        return ray.train.get_checkpoint()

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None, dir_name: str) -> None:
        import ray.train

        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report(metrics, checkpoint=checkpoint, checkpoint_dir_name=dir_name)

    def device(self):
        from ray.train.torch import get_device

        return get_device()

    def prepare_model(self, model):
        from ray.train.torch import prepare_model

        return prepare_model(model)


class TuneTrialSession:
    """A Tune trial's process running the loop itself, as one worker: every report goes to Tune with its checkpoint.

    ``restored_dir`` is the local copy of the checkpoint Tune handed back (a retry, ``--resume`` or a PBT exploit)."""

    rank = 0
    world_size = 1
    local_rank = 0

    def __init__(self, restored_dir: str | None, use_gpu: bool, check_metrics=None):
        self.restored_dir = restored_dir
        self.use_gpu = use_gpu
        self.check_metrics = check_metrics

    def get_checkpoint(self):
        from ray import tune

        return tune.Checkpoint.from_directory(self.restored_dir) if self.restored_dir else None

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None, dir_name: str) -> None:
        from ray import tune

        if self.check_metrics is not None:
            self.check_metrics(metrics)
        checkpoint = tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        tune.report(dict(metrics), checkpoint=checkpoint)

    def device(self):
        import torch

        return torch.device("cuda" if self.use_gpu and torch.cuda.is_available() else "cpu")

    def prepare_model(self, model):
        return model.to(self.device())
