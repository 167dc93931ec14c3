"""What a framework is to the rest of the package: :class:`Framework` (the entries live in the framework modules,
the registry in :mod:`training.frameworks.registry`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

NO_ENV: Mapping[str, str] = MappingProxyType({})
#: What every report has, whatever the loop (WorkerContext.report adds them).
EVERY_REPORT = ("epoch", "epoch_time_s")


@dataclasses.dataclass(frozen=True)
class Framework:
    """What differs per framework."""

    name: str
    #: trainConfig defaults when the spec leaves them out
    epochs: int
    batch_size: int
    lr: float
    #: what the built-in loop reports every epoch (besides ``epoch`` and ``epoch_time_s``, which every report has)
    metrics: tuple[str, ...]
    #: the built-in ``train(ctx)``
    loop: Callable[[Any], None]
    #: ``(run_worker, job, **common) -> the Ray Train trainer`` (``common``: config, scaling and run config)
    ray_trainer: Callable[..., Any]
    #: whether the built-in loop trains the built-in CNN (``trainConfig.model``, search targets ``model.*``)
    builtin_model: bool = True
    #: the spec block of the framework's own free-form parameters (``trainConfig.xgboost``), if it has one
    params_block: str | None = None
    #: whether ``trainConfig.collectiveTimeoutSeconds`` means something (the process group's timeout)
    collective_timeout: bool = False
    #: set in a worker's environment before the framework is imported (and sent as the workers' runtime env)
    worker_env: Mapping[str, str] = dataclasses.field(default_factory=lambda: NO_ENV)
    #: ``(checkpoint folder, training) -> None``: a restored built-in checkpoint made to follow the trial's config
    #: where the checkpoint would override it (PBT's exploit: PyTorch's optimizer state carries the old lr)
    adjust_restored: Callable[[str, Any], None] | None = None

    @property
    def reported(self) -> tuple[str, ...]:
        """Every metric a report of the built-in loop carries."""
        return self.metrics + EVERY_REPORT
