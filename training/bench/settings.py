"""What a benchmark is asked to do, read from its command line once: typed, frozen, and travelling as JSON (to each
run's process, in each run's raw result, in the report) in the shape the reports have always had."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from training.job.parts import Data, FrozenMap, Model, freeze, thaw

#: A run prints its raw figures on the line that starts with this (ops reads it from a cluster job's log).
RESULT_PREFIX = "BENCH_RESULT "
#: The frameworks with a plain (no Ray) loop to compare Ray Train with.
FRAMEWORKS = ("pytorch", "tensorflow")

TINY_DATA = {"maxTrainSamples": 256, "maxValSamples": 128, "numSamples": 256, "validationFraction": 0.2}
TINY_MODEL = Model(filters=(8, 16, 32), dense=32)


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """bench-train's settings: the data and model every configuration trains, for how long, and which
    configurations (frameworks x plain threads / Ray workers, cold and warm)."""

    data: FrozenMap  # the spec's data block (the loaders of ``python -m training run`` read it)
    model: Model
    epochs: int
    repeats: int
    batch_size: int  # the global batch of one step, as the spec's batchSize
    lr: float
    seed: int = 42
    frameworks: tuple[str, ...] = FRAMEWORKS
    workers: tuple[int, ...] = (1, 2)
    threads: tuple[int, ...] = (1, 2)
    warm: bool = True  # also the warm runs (Ray Train joining one Ray started once)
    tiny: bool = False

    @classmethod
    def from_args(cls, args) -> TrainSettings:
        """From ``python -m training.bench.train``'s parsed arguments."""
        if args.tiny:
            data, model = {"source": args.data, **TINY_DATA}, TINY_MODEL
            epochs, repeats = args.epochs or 1, args.repeats or 1
        else:
            data = {"source": args.data, "numSamples": args.num_samples, "validationFraction": 0.2}
            model, epochs, repeats = Model(), args.epochs or 5, args.repeats or 3
        return cls(data=freeze(data), model=model, epochs=int(epochs), repeats=int(repeats),
                   batch_size=int(args.batch_size), lr=float(args.lr), frameworks=tuple(args.frameworks),
                   workers=tuple(args.workers), threads=tuple(args.threads), tiny=bool(args.tiny),
                   # Warm runs join one Ray: the one at --warm-address, else one started here -- not when
                   # --ray-address already makes every Ray run join a cluster.
                   warm=args.warm and (not args.ray_address or bool(args.warm_address)))

    @property
    def data_part(self) -> Data:
        """The data block as the loaders take it."""
        from training.job.defaults import data_block

        return data_block(self.data)

    def to_json(self) -> dict[str, Any]:
        return {"tiny": self.tiny, "data": thaw(self.data), "model": self.model.as_spec(), "epochs": self.epochs,
                "repeats": self.repeats, "batchSize": self.batch_size, "lr": self.lr, "seed": self.seed,
                "frameworks": list(self.frameworks), "workers": list(self.workers), "threads": list(self.threads),
                "warm": self.warm}

    @classmethod
    def of(cls, value: TrainSettings | Mapping[str, Any]) -> TrainSettings:
        """``value`` itself, or the settings its JSON form (a run's raw result, a report) describes."""
        if isinstance(value, TrainSettings):
            return value
        m = value["model"]  # as Model.as_spec() wrote it
        model = Model(filters=tuple(m["filters"]), dense=int(m["dense"]), conv_dropout=float(m["convDropout"]),
                      dense_dropout=float(m["denseDropout"]))
        return cls(data=freeze(value["data"]), model=model, epochs=int(value["epochs"]),
                   repeats=int(value["repeats"]), batch_size=int(value["batchSize"]), lr=float(value["lr"]),
                   seed=int(value.get("seed", cls.seed)), frameworks=tuple(value["frameworks"]),
                   workers=tuple(value["workers"]), threads=tuple(value["threads"]), warm=bool(value.get("warm")),
                   tiny=bool(value.get("tiny")))

    def one_run(self) -> TrainSettings:
        """These settings for one configuration run on its own (no warm runs)."""
        return dataclasses.replace(self, warm=False)


@dataclasses.dataclass(frozen=True)
class Config:
    """One configuration of the plan: ``pytorch/plain-1t``, ``pytorch/ddp-2p``, ``tensorflow/ray-2w``,
    ``pytorch/ray-2w-warm``."""

    key: str
    framework: str
    kind: str  # plain | ddp (PyTorch DDP in N processes, no Ray) | ray
    threads: int
    workers: int
    warm: bool = False

    @property
    def label(self) -> str:
        if self.kind == "plain":
            return f"plain, {self.threads} thread{'s' if self.threads > 1 else ''}"
        if self.kind == "ddp":
            return f"plain DDP, {self.workers} processes (no Ray)"
        return (f"Ray Train, {self.workers} worker{'s' if self.workers > 1 else ''}"
                + (", warm Ray" if self.warm else ""))

    @property
    def comparison_key(self) -> str:
        """The key of a Ray configuration's block in the comparison: ray_1_worker, ray_2_workers, ray_2_workers_warm."""
        return f"ray_{self.workers}_worker{'s' if self.workers > 1 else ''}" + ("_warm" if self.warm else "")

    def to_json(self) -> dict[str, Any]:
        out = {"key": self.key, "framework": self.framework, "kind": self.kind, "threads": self.threads,
               "workers": self.workers}
        return out | {"warm": True} if self.warm else out

    @classmethod
    def of(cls, value: Config | Mapping[str, Any]) -> Config:
        if isinstance(value, Config):
            return value
        return cls(key=value["key"], framework=value["framework"], kind=value["kind"], threads=int(value["threads"]),
                   workers=int(value["workers"]), warm=bool(value.get("warm")))


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    """bench-tune's settings: one search (space, seed, trials, epochs) run under FIFO and under ASHA."""

    num_samples: int
    epochs: int
    model: FrozenMap  # trainConfig.model of the trials
    data: FrozenMap  # the spec's data block
    search_seed: int
    concurrent: int | None = None  # trials at once (None: as many as the CPUs hold; the run reports what it used)
    tiny: bool = False
    framework: str = "pytorch"
    metric: str = "val_loss"
    mode: str = "min"
    search_space: FrozenMap = dataclasses.field(default_factory=lambda: freeze({
        "lr": {"type": "loguniform", "min": 1.0e-4, "max": 1.0e-1},
        "batchSize": {"type": "choice", "values": [16, 32, 64, 128]},
    }))
    asha: FrozenMap = dataclasses.field(default_factory=lambda: freeze({"gracePeriod": 1, "reductionFactor": 3}))

    @classmethod
    def from_args(cls, args) -> TuneSettings:
        """From ``python -m training.bench.tune``'s parsed arguments."""
        if args.tiny:
            sized = {"num_samples": args.num_samples or 4, "epochs": args.epochs or 3,
                     "model": {"filters": [8, 16, 32], "dense": 32}, "data": {"source": "digits", "maxTrainSamples": 256}}
        else:
            sized = {"num_samples": args.num_samples or 16, "epochs": args.epochs or 9,
                     "model": {"filters": [32, 64, 128], "dense": 256}, "data": {"source": "digits"}}
        return cls(num_samples=int(sized["num_samples"]), epochs=int(sized["epochs"]), model=freeze(sized["model"]),
                   data=freeze(sized["data"]), search_seed=int(args.seed), concurrent=args.concurrent,
                   tiny=bool(args.tiny))

    def to_json(self) -> dict[str, Any]:
        return {"numSamples": self.num_samples, "epochs": self.epochs, "model": thaw(self.model),
                "data": thaw(self.data), "tiny": self.tiny, "framework": self.framework, "metric": self.metric,
                "mode": self.mode, "searchSpace": thaw(self.search_space), "asha": thaw(self.asha),
                "searchSeed": self.search_seed, "concurrent": self.concurrent}
