"""Helpers of the training package tests (the fixtures are in conftest.py): specs, a runner that writes a spec
and runs it in-process, result checks, and data in the exact on-disk format of what the loaders read."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tests.support import REPO  # noqa: F401 - the training tests import it from here

SEED_000_OUTPUT_SCHEMA = {
    # Verbatim from ../shared/seeds/000-ray-distributed-trainer.md ("Output Schema").
    "type": "object",
    "required": ["status", "results"],
    "properties": {
        "status": {"type": "string", "enum": ["success", "error", "partial"]},
        "results": {
            "type": "object",
            "properties": {
                "bestConfig": {"type": "object"},
                "bestMetric": {"type": "number"},
                "numTrials": {"type": "integer"},
                "completedTrials": {"type": "integer"},
            },
        },
        "checkpointPath": {"type": "string"},
        "clusterStatus": {
            "type": "object",
            "properties": {
                "numNodes": {"type": "integer"},
                "totalCpu": {"type": "number"},
                "totalGpu": {"type": "number"},
            },
        },
        "trainingTime": {"type": "number"},
    },
}


def assert_valid_result(result: dict[str, Any]) -> None:
    """A result validates against the shipped result schema and seed 000's output schema."""
    import jsonschema

    from training.result import validate_result

    validate_result(result)
    jsonschema.Draft202012Validator(SEED_000_OUTPUT_SCHEMA).validate(result)


class SpecRunner:
    """Write a spec into a temp folder and run it in-process with ``training.runner.run``."""

    def __init__(self, root: Path):
        self.root = root
        self.storage = root / "storage"

    def write(self, spec: dict[str, Any], name: str = "spec.yaml") -> Path:
        path = self.root / name
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    def run(self, spec: dict[str, Any], env: dict[str, str] | None = None, name: str = "spec.yaml"):
        from training.runner import run

        spec = json.loads(json.dumps(spec))
        spec.setdefault("checkpoint", {}).setdefault("storagePath", str(self.storage))
        path = self.write(spec, name)
        environ = {k: v for k, v in os.environ.items() if k not in ("TRAINING_FAULT_INJECTION", "TRAINING_EPOCH_LEDGER")}
        environ.update(env or {})
        code, result, written = run(str(path), output=str(self.root / f"{Path(name).stem}-result.json"), environ=environ)
        assert written, "a result JSON is always written"
        on_disk = json.loads(Path(written).read_text())
        assert on_disk == result
        assert_valid_result(result)
        return code, result


def copy_run(src_runner: SpecRunner, name: str, dest_root: Path) -> Path:
    """Copy a finished run's folder to a fresh storage path (Ray's snapshot names checkpoints relative to it)."""
    import shutil

    dest = dest_root / "storage"
    shutil.copytree(src_runner.storage / name, dest / name)
    (dest / name / "result.json").unlink(missing_ok=True)
    return dest


def digits_spec(name: str, framework: str = "pytorch", **train) -> dict[str, Any]:
    """A small 2-worker spec on the digits."""
    trainconfig = {"framework": framework, "epochs": 2, "batchSize": 32, **train}
    return {
        "name": name,
        "mode": "train",
        "config": {"numWorkers": 2, "resourcesPerWorker": {"cpu": 1}, "resourceWaitSeconds": 60},
        "trainConfig": trainconfig,
        "data": {"source": "digits"},
        "checkpoint": {"everyEpochs": 1, "maxFailures": 1},
    }


def tune_spec(name: str, scheduler: str = "fifo", samples: int = 1, epochs: int = 2,
              space: dict[str, Any] | None = None, **tune) -> dict[str, Any]:
    """A small mode: tune spec: one-worker trials (trialRunner auto -> local) of a tiny CNN on 256 digits."""
    return {
        "name": name,
        "mode": "tune",
        "config": {"numWorkers": 1, "resourcesPerWorker": {"cpu": 1}, "resourceWaitSeconds": 60},
        "trainConfig": {"framework": "pytorch", "epochs": epochs, "batchSize": 64,
                        "model": {"filters": [8, 16, 32], "dense": 32}},
        "data": {"source": "digits", "maxTrainSamples": 256, "maxValSamples": 128},
        "tuneConfig": {
            "searchSpace": space or {"lr": {"type": "grid", "values": [3e-3, 1e-2]}},
            "scheduler": scheduler, "numSamples": samples, "metric": "val_loss", "mode": "min", **tune,
        },
    }


# ------------------------------------------------------------------ CIFAR-10 in its exact on-disk format

def write_cifar10_batches(root: Path, per_batch: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    """Write a tiny ``cifar-10-batches-py`` folder exactly as the real one is laid out.

    Each batch is a pickled dict with bytes keys: ``b'batch_label'``, ``b'labels'`` (list of int),
    ``b'data'`` (uint8 array of shape (n, 3072): 1024 red, 1024 green, 1024 blue values, row-major 32x32 planes)
    and ``b'filenames'``; ``batches.meta`` holds ``b'label_names'``, ``b'num_cases_per_batch'``, ``b'num_vis'``.
    Returns the arrays written, by file name.
    """
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    written = {}
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, name in enumerate(names):
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = [int(x) for x in rng.integers(0, 10, size=per_batch)]
        batch = {
            b"batch_label": f"{'testing' if name == 'test_batch' else 'training'} batch {i + 1} of 5".encode(),
            b"labels": labels,
            b"data": data,
            b"filenames": [f"img_{i}_{j}.png".encode() for j in range(per_batch)],
        }
        with open(root / name, "wb") as fh:
            pickle.dump(batch, fh, protocol=2)
        written[name] = (data, np.array(labels))
    meta = {
        b"num_cases_per_batch": per_batch,
        b"label_names": [n.encode() for n in ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                               "horse", "ship", "truck"]],
        b"num_vis": 3072,
    }
    with open(root / "batches.meta", "wb") as fh:
        pickle.dump(meta, fh, protocol=2)
    return written
