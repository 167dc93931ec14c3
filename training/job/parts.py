"""The job: a spec parsed, validated and given its defaults once (:func:`training.job.load_job`), as typed,
immutable parts.

Each stage receives the part it needs: the data loaders a :class:`Data`, the resource checks :class:`Workers`, the
training loops a :class:`Training` (through :class:`training.runtime.worker.WorkerContext`), the Tune driver a
:class:`Tune`. A change (a trial's sampled values, the folder of a trial's Ray Train run) makes a new job with
:func:`dataclasses.replace`; nothing edits a job in place. Jobs cross process boundaries (Ray pickles them for its
workers and Tune keeps them with its experiment), so every part pickles as plain data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


class FrozenMap(dict):
    """A read-only dict (free-form spec mappings: ``xgboost``, ``params``, ``config.healthCheck``...)."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("a job's mappings are read-only: build a new job with dataclasses.replace")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self):
        return FrozenMap, (dict(self),)


def freeze(value: Any) -> Any:
    """Mappings -> :class:`FrozenMap`, lists -> tuples, all the way down."""
    if isinstance(value, Mapping):
        return FrozenMap({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The plain JSON-like copy of a frozen value: dicts and lists again (for results and user code)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class Workers:
    """How many Ray Train workers, what each holds, and how long to wait for them (``config`` /
    ``trainConfig.scalingConfig``)."""

    count: int = 1
    min_count: int | None = None  # elastic: numWorkers {min, max}; count is the max
    use_gpu: bool = False
    cpu: float = 1.0
    gpu: float = 0.0
    placement_strategy: str = "PACK"
    resource_wait_s: float = 30.0
    health_check: FrozenMap = dataclasses.field(default_factory=FrozenMap)
    #: spec key -> the block it was written in (``config`` or ``trainConfig.scalingConfig``): what a message names
    written_in: FrozenMap = dataclasses.field(default_factory=FrozenMap)

    @property
    def needed(self) -> int:
        """The workers a run cannot start without."""
        return self.min_count or self.count

    def describe(self) -> str:
        return f"{self.min_count}-{self.count}" if self.min_count else str(self.count)


@dataclasses.dataclass(frozen=True)
class Model:
    """The built-in CNN (``trainConfig.model``)."""

    filters: tuple[int, ...] = (64, 128, 256)
    dense: int = 512
    conv_dropout: float = 0.25
    dense_dropout: float = 0.5

    def as_spec(self) -> dict[str, Any]:
        """The model as a spec writes it (``trainConfig.model``)."""
        return {key: thaw(getattr(self, name)) for key, name in MODEL_FIELDS.items()}


#: Search-space targets (``model.dense``) -> Model's field names.
MODEL_FIELDS = {"filters": "filters", "dense": "dense", "convDropout": "conv_dropout",
                "denseDropout": "dense_dropout"}
#: Top-level search-space targets -> Training's field names.
TRAINING_FIELDS = {"lr": "lr", "batchSize": "batch_size", "seed": "seed"}


@dataclasses.dataclass(frozen=True)
class Training:
    """What is trained and how (``trainConfig``, the framework's defaults filled in)."""

    framework: str
    epochs: int
    batch_size: int  # the global batch of one step (each worker trains its share)
    lr: float
    seed: int = 42
    trainer_path: str | None = None
    model: Model = Model()
    xgboost: FrozenMap = dataclasses.field(default_factory=FrozenMap)
    params: FrozenMap = dataclasses.field(default_factory=FrozenMap)
    collective_timeout_s: int | None = None
    #: from the framework's registry entry (normalize sets them): whether the built-in CNN is trained (not a
    #: user trainer, not a framework without one), and the spec block of the framework's own parameters
    builtin_model: bool = True
    params_block: str | None = None

    def with_value(self, target: str, value: Any) -> Training:
        """This training with one search-space target set: ``lr``, ``model.dense``, ``xgboost.eta``, ``params.h``."""
        head, _, rest = target.partition(".")
        if not rest and head in TRAINING_FIELDS:
            return dataclasses.replace(self, **{TRAINING_FIELDS[head]: value})
        if head == "model" and rest in MODEL_FIELDS:
            return dataclasses.replace(self, model=dataclasses.replace(self.model, **{MODEL_FIELDS[rest]: freeze(value)}))
        if rest and head in ("params", self.params_block):
            merged = FrozenMap({**getattr(self, head), rest: freeze(value)})
            return dataclasses.replace(self, **{head: merged})
        raise KeyError(f"no trainConfig field {target!r}")


@dataclasses.dataclass(frozen=True)
class Data:
    """The data block: where samples come from and how many (``data``)."""

    source: str = "digits"
    path: str | None = None
    validation_fraction: float = 0.2
    max_train_samples: int | None = None
    max_val_samples: int | None = None
    num_samples: int = 2048
    verify_on_driver: bool = True


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Where the run keeps its checkpoints, how often and how many, and what it may start from (``checkpoint``)."""

    storage_path: str
    storage_source: str = "spec"  # spec | TRAINING_STORAGE_PATH | default
    every_epochs: int = 1
    keep_best: int | None = None
    metric: str = "val_accuracy"
    metric_mode: str = "max"
    max_failures: int = 2
    resume_from: str | None = None


@dataclasses.dataclass(frozen=True)
class SearchParam:
    """One ``tuneConfig.searchSpace`` entry: the key, the trainConfig field it sets, and its distribution."""

    key: str
    target: str  # lr, model.dense, xgboost.eta, params.hidden
    kind: str  # float | int | intlist | any: how a sampled value is coerced
    type: str  # loguniform | uniform | quniform | randint | choice | grid
    min: float | None = None
    max: float | None = None
    q: float | None = None
    values: tuple | None = None

    def as_spec(self) -> dict[str, Any]:
        """The entry as the spec gave it, with its target and kind (what the run's identity hashes)."""
        out: dict[str, Any] = {"target": self.target, "kind": self.kind, "type": self.type}
        for name in ("min", "max", "q", "values"):
            value = getattr(self, name)
            if value is not None:
                out[name] = thaw(value)
        return out

    def coerce(self, value: Any) -> Any:
        """A sampled value as the trainer expects it (Tune's quniform gives floats for integer fields)."""
        if self.kind == "int":
            return int(value) if isinstance(value, float) and value.is_integer() else int(round(value))
        if self.kind == "float":
            return float(value)
        return value.item() if hasattr(value, "item") else value  # a numpy scalar from a sampler


@dataclasses.dataclass(frozen=True)
class Tune:
    """The search (``tuneConfig``, defaults filled in)."""

    search_space: tuple[SearchParam, ...]
    metric: str
    mode: str
    scheduler: str = "fifo"
    scheduler_config: FrozenMap = dataclasses.field(default_factory=FrozenMap)
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    trial_cpu: float = 0.0  # what each trial's own process holds
    trial_gpu: float = 0.0
    max_failures: int = 2
    trial_runner: str = "local"  # local | train
    seed: int = 42
    keep_checkpoints_per_trial: int = 2

    def param(self, key: str) -> SearchParam | None:
        return next((p for p in self.search_space if p.key == key), None)

    def identity(self) -> dict[str, Any]:
        """What names a search (see :mod:`training.job.identity`)."""
        return {"searchSpace": {p.key: p.as_spec() for p in self.search_space}, "scheduler": self.scheduler,
                "schedulerConfig": thaw(self.scheduler_config), "numSamples": self.num_samples,
                "metric": self.metric, "mode": self.mode, "trialRunner": self.trial_runner, "seed": self.seed}


@dataclasses.dataclass(frozen=True)
class Job:
    """A validated spec with every default filled in."""

    name: str
    name_source: str  # spec | derived | --name
    mode: str  # cluster | train | tune
    workers: Workers
    training: Training
    data: Data
    checkpoint: Checkpoint
    tune: Tune | None = None

    @property
    def run_path(self) -> str:
        """``<storage>/<name>``: Ray Train's run folder (Tune's experiment folder), where result.json goes."""
        return self.checkpoint.storage_path.rstrip("/") + "/" + self.name

    def renamed(self, name: str, source: str) -> Job:
        return dataclasses.replace(self, name=name, name_source=source)

    def hyperparameters(self) -> dict[str, Any]:
        """What ``results.bestConfig`` reports: the knobs that shaped this run."""
        t = self.training
        out: dict[str, Any] = {"framework": t.framework, "numWorkers": self.workers.count, "epochs": t.epochs,
                               "batchSize": t.batch_size, "lr": t.lr, "seed": t.seed, "dataSource": self.data.source}
        if t.params_block:
            out[t.params_block] = thaw(getattr(t, t.params_block))
        elif not t.trainer_path:
            out["model"] = t.model.as_spec()
        if t.trainer_path:
            out["trainerPath"] = t.trainer_path
            out["params"] = thaw(t.params)
        return out
