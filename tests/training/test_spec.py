"""Job spec validation: every bad input is rejected before Ray starts, naming the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.training.support import REPO, assert_valid_result
from training.errors import SpecError
from training.job import load_job, normalize, validate_spec

EXAMPLES = sorted((REPO / "training" / "examples").glob("*.yaml"))

GOOD = {
    "name": "ok",
    "mode": "train",
    "config": {"numWorkers": 2, "useGpu": False, "resourcesPerWorker": {"cpu": 1}},
    "trainConfig": {"framework": "pytorch", "epochs": 2},
}


def bad(**changes):
    spec = json.loads(json.dumps(GOOD))
    for dotted, value in changes.items():
        node = spec
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        if value is DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return spec


DELETE = object()


def test_examples_are_valid():
    assert len(EXAMPLES) >= 5
    frameworks = set()
    modes = set()
    for path in EXAMPLES:
        job = load_job(path)
        modes.add(job.mode)
        if job.mode == "train":
            frameworks.add(job.training.framework)
    assert frameworks == {"pytorch", "tensorflow", "xgboost"}
    assert "cluster" in modes


def test_seed_usage_example_shape_is_accepted():
    """Seed 000's own usage example (mode tune) passes validation: its fields keep their meaning."""
    spec = {
        "mode": "tune",
        "config": {"numWorkers": 4, "useGpu": True, "resourcesPerWorker": {"cpu": 2, "gpu": 1}},
        "trainConfig": {"framework": "pytorch"},
        "tuneConfig": {
            "searchSpace": {"lr": {"type": "loguniform", "min": 1e-5, "max": 1e-1},
                            "batchSize": {"type": "choice", "values": [16, 32, 64]}},
            "scheduler": "asha", "numSamples": 100, "metric": "val_loss", "mode": "min",
        },
    }
    validate_spec(spec)


@pytest.mark.parametrize(
    "spec, field, words",
    [
        (bad(trainConfig__framework="jax"), "trainConfig.framework", "jax"),
        (bad(mode="predict"), "mode", "predict"),
        (bad(config__numWorkers=0), "config.numWorkers", "minimum"),
        (bad(config__numWorkers="two"), "config.numWorkers", "integer"),
        (bad(config__resourcesPerWorker={"cpu": -1}), "config.resourcesPerWorker.cpu", "minimum"),
        (bad(config__resourcesPerWorker={"tpu": 1}), "config.resourcesPerWorker.tpu", "unknown field (known here: cpu, gpu)"),
        (bad(config=DELETE), "config", "required"),
        (bad(trainConfig=DELETE), "trainConfig", "required"),
        (bad(trainConfig__framework=DELETE), "trainConfig.framework", "required"),
        (bad(trainConfig__epochs=0), "trainConfig.epochs", "minimum"),
        (bad(trainConfig__lr=0), "trainConfig.lr", "less than or equal"),
        (bad(trainConfig__trainerPath="no_colon_here"), "trainConfig.trainerPath", "match"),
        (bad(trainConfig__scalingConfig={"numWorkers": -3}), "trainConfig.scalingConfig.numWorkers", "minimum"),
        (bad(data={"source": "mnist"}), "data.source", "mnist"),
        (bad(data={"source": "cifar10"}), "data.path", "required"),
        (bad(checkpoint={"everyEpochs": 0}), "checkpoint.everyEpochs", "minimum"),
        (bad(checkpoint={"maxFailures": -2}), "checkpoint.maxFailures", "minimum"),
        (bad(checkpoint={"metricMode": "up"}), "checkpoint.metricMode", "up"),
        (bad(tuneConfig={"mode": "sideways"}), "tuneConfig.mode", "sideways"),
        (bad(name="has spaces/and slash"), "name", "match"),
        (bad(extraKey=1), "extraKey", "unknown field"),
        (bad(config__useGpu=True, config__resourcesPerWorker={"cpu": 1, "gpu": 0}), "config.resourcesPerWorker.gpu", "gpu"),
        (bad(data={"source": "digits", "path": "/data"}), "data.path", "cifar10"),
        (bad(config__numWorkers={"min": 3, "max": 2}), "config.numWorkers", "above max"),
        (bad(config__numWorkers={"min": 1}), "config.numWorkers.max", "required"),
        (bad(trainConfig__scalingConfig={"numWorkers": {"min": 0, "max": 2}}), "trainConfig.scalingConfig.numWorkers.min",
         "minimum"),
        (bad(config__healthCheck={"intervalSeconds": 0}), "config.healthCheck.intervalSeconds", "minimum"),
        (bad(config__healthCheck={"everySeconds": 1}), "config.healthCheck.everySeconds", "unknown field"),
        (bad(trainConfig__collectiveTimeoutSeconds=0), "trainConfig.collectiveTimeoutSeconds", "minimum"),
        (bad(trainConfig__framework="xgboost", trainConfig__collectiveTimeoutSeconds=60),
         "trainConfig.collectiveTimeoutSeconds", "PyTorch"),
    ],
)
def test_bad_spec_names_the_field(spec, field, words):
    with pytest.raises(SpecError) as info:
        validate_spec(spec)
    assert info.value.field == field, info.value.details
    assert words in (info.value.message + (info.value.details or ""))
    assert field in info.value.message


def test_all_problems_are_listed():
    spec = bad(trainConfig__framework="jax", config__numWorkers=0)
    with pytest.raises(SpecError) as info:
        validate_spec(spec)
    assert "config.numWorkers" in info.value.details and "trainConfig.framework" in info.value.details


def test_defaults_and_storage_env(tmp_path):
    job = normalize(GOOD, environ={"TRAINING_STORAGE_PATH": "/checkpoints"})
    assert job.checkpoint.storage_path == "/checkpoints"
    assert job.checkpoint.storage_source == "TRAINING_STORAGE_PATH"
    w = job.workers
    assert (w.count, w.cpu, w.gpu, w.use_gpu) == (2, 1.0, 0.0, False)
    assert job.training.model.filters == (64, 128, 256) and job.training.model.dense == 512
    # The spec wins over the environment; URIs pass through untouched.
    spec = bad(checkpoint={"storagePath": "s3://bucket/runs"})
    assert normalize(spec, environ={"TRAINING_STORAGE_PATH": "/checkpoints"}).checkpoint.storage_path == "s3://bucket/runs"
    # Neither: a local default, made absolute.
    default = normalize(GOOD, environ={}).checkpoint.storage_path
    assert os.path.isabs(default) and default.endswith("results/training")
    # trainConfig.scalingConfig overrides config; useGpu implies one GPU per worker.
    job = normalize(bad(trainConfig__scalingConfig={"numWorkers": 3, "useGpu": True}), environ={})
    assert (job.workers.count, job.workers.use_gpu, job.workers.gpu) == (3, True, 1.0)


def test_spec_file_formats(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps(GOOD))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(GOOD))
    assert load_job(tmp_path / "s.json").name == load_job(tmp_path / "s.yaml").name == "ok"
    (tmp_path / "broken.yaml").write_text("mode: [train\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_job(tmp_path / "broken.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(SpecError, match="mapping"):
        load_job(tmp_path / "list.yaml")
    with pytest.raises(SpecError, match="not found"):
        load_job(tmp_path / "missing.yaml")


def _run_cli(args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "training", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=120)


def test_cli_rejects_bad_spec_before_ray_starts(tmp_path):
    """The CLI exits 2, prints and writes an error result naming the field, and never imports Ray."""
    spec = bad(trainConfig__framework="jax", checkpoint={"storagePath": str(tmp_path / "store")})
    spec_path = tmp_path / "bad.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    probe = (
        "import sys; from training.runner import run; code, result, path = run(sys.argv[1]); "
        "print('RAY_IMPORTED' if 'ray' in sys.modules else 'RAY_NOT_IMPORTED'); sys.exit(code)"
    )
    proc = subprocess.run([sys.executable, "-c", probe, str(spec_path)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "RAY_NOT_IMPORTED" in proc.stdout
    assert "trainConfig.framework" in proc.stderr
    written = json.loads((tmp_path / "store" / "ok" / "result.json").read_text())
    assert written["status"] == "error"
    assert written["error"]["type"] == "spec" and written["error"]["field"] == "trainConfig.framework"
    assert_valid_result(written)

    proc = _run_cli(["run", str(spec_path), "--output", str(tmp_path / "out.json")], cwd=tmp_path)
    assert proc.returncode == 2
    assert json.loads((tmp_path / "out.json").read_text())["error"]["field"] == "trainConfig.framework"
    printed = json.loads(proc.stdout)
    assert printed["status"] == "error"


def test_cli_validate(tmp_path):
    proc = _run_cli(["validate", *map(str, EXAMPLES)], cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad(config__numWorkers=0)))
    proc = _run_cli(["validate", str(tmp_path / "bad.yaml")], cwd=REPO)
    assert proc.returncode == 2 and "config.numWorkers" in proc.stderr


def test_error_result_for_unparseable_spec_goes_to_default_place(tmp_path):
    (tmp_path / "broken.yaml").write_text("mode: [train\n")
    proc = _run_cli(["run", "broken.yaml"], cwd=tmp_path, env={"TRAINING_STORAGE_PATH": str(tmp_path / "pvc")})
    assert proc.returncode == 2
    result = json.loads((tmp_path / "pvc" / "invalid-spec" / "result.json").read_text())
    assert result["status"] == "error" and "not valid YAML" in result["error"]["message"]
    assert_valid_result(result)


def test_cli_name_override_is_validated(tmp_path):
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(bad(checkpoint={"storagePath": str(tmp_path / "s")})))
    proc = _run_cli(["run", str(tmp_path / "ok.yaml"), "--name", "no spaces allowed", "--output", str(tmp_path / "r.json")],
                    cwd=tmp_path)
    assert proc.returncode == 2
    assert json.loads((tmp_path / "r.json").read_text())["error"]["field"] == "name"
