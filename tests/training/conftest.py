"""Shared fixtures for the training package tests.

One local Ray (2 CPUs, with the dashboard that Ray Train's placement-group cleaner needs) serves the whole session;
``training.runner.run`` sees it initialized and reuses it. Specs are written to ``tmp_path`` with their storage
there too, so nothing lands in the repository.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# This one test process hosts the drivers of every framework. The CUDA build of torch loads Triton (LLVM) the first
# time an optimizer is built (torch._compile -> torch._dynamo -> triton); loading it after TensorFlow is in the
# process segfaults (measured: `import ray.train.tensorflow; torch.optim.Adam(...)` -> SIGSEGV in triton._C.libtriton,
# the reverse order works). A job's own process imports one framework, so only the test process needs this order.
import torch._dynamo  # noqa: E402,F401

from training.env import apply_quiet_defaults  # noqa: E402

apply_quiet_defaults()


def pytest_configure(config):
    # Ray Data's context warns about its own deprecated defaults when Ray Train imports it: not ours to fix.
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:ray.data.context")

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


def assert_valid_result(result: Dict[str, Any]) -> None:
    """A result validates against the shipped result schema and seed 000's output schema."""
    import jsonschema

    from training.result import validate_result

    validate_result(result)
    jsonschema.Draft202012Validator(SEED_000_OUTPUT_SCHEMA).validate(result)


@pytest.fixture(scope="session")
def ray_session():
    """The one Ray of the test session."""
    import ray

    from training.cluster import RaySession

    with RaySession(address="") as session:  # "" -> a local Ray even if RAY_ADDRESS is set in the shell
        assert ray.is_initialized()
        yield session


class SpecRunner:
    """Write a spec into a temp folder and run it in-process with ``training.runner.run``."""

    def __init__(self, root: Path):
        self.root = root
        self.storage = root / "storage"

    def write(self, spec: Dict[str, Any], name: str = "spec.yaml") -> Path:
        path = self.root / name
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    def run(self, spec: Dict[str, Any], env: Optional[Dict[str, str]] = None, name: str = "spec.yaml"):
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


@pytest.fixture
def runner(tmp_path) -> SpecRunner:
    return SpecRunner(tmp_path)


@pytest.fixture(scope="session")
def torch_run(ray_session, tmp_path_factory):
    """One finished 2-worker PyTorch run on the digits (2 epochs), shared by the tests that inspect or resume it.
    Tests that resume or damage it work on a copy (``copy_run``)."""
    r = SpecRunner(tmp_path_factory.mktemp("torch-run"))
    spec = digits_spec("digits-torch", "pytorch", epochs=2)
    code, result = r.run(spec, name="torch.yaml")
    return r, spec, code, result


def copy_run(src_runner: "SpecRunner", name: str, dest_root: Path) -> Path:
    """Copy a finished run's folder to a fresh storage path (Ray's snapshot names checkpoints relative to it)."""
    import shutil

    dest = dest_root / "storage"
    shutil.copytree(src_runner.storage / name, dest / name)
    (dest / name / "result.json").unlink(missing_ok=True)
    return dest


def digits_spec(name: str, framework: str = "pytorch", **train) -> Dict[str, Any]:
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
              space: Optional[Dict[str, Any]] = None, **tune) -> Dict[str, Any]:
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


@pytest.fixture(scope="session")
def ray_address(ray_session) -> str:
    """The session Ray's address, for subprocesses that must join it instead of starting a second Ray."""
    import ray

    return ray.get_runtime_context().gcs_address


# ------------------------------------------------------------------ CIFAR-10 in its exact on-disk format

def write_cifar10_batches(root: Path, per_batch: int = 8, seed: int = 0) -> Dict[str, np.ndarray]:
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
