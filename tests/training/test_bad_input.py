"""Bad input: each gives a clear error, the right exit code and an error result JSON (never a hang)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.training.support import copy_run, digits_spec
from training.runtime import checkpoints

pytestmark = pytest.mark.usefixtures("ray_session")


def check_error(code, result, kind, exit_code, field=None):
    assert result["status"] == "error"
    assert result["error"]["type"] == kind, result["error"]
    assert code == exit_code
    if field:
        assert result["error"]["field"] == field
    assert result["trainingTime"] == 0
    return result["error"]["message"]


def test_unknown_framework(runner):
    code, result = runner.run(digits_spec("bad-framework", "jax"))
    message = check_error(code, result, "spec", 2, "trainConfig.framework")
    assert "'jax' is not one of" in message


def test_more_workers_than_the_cluster_has(runner):
    spec = digits_spec("too-many-workers", "pytorch")
    spec["config"]["numWorkers"] = 3
    code, result = runner.run(spec)
    message = check_error(code, result, "resources", 3, "config.numWorkers")
    assert "3 worker(s)" in message and "at most 2" in message and "node 0: 2 CPU, 0 GPU" in message
    assert result["clusterStatus"]["totalCpu"] == 2


def test_resources_per_worker_beyond_any_node(runner):
    spec = digits_spec("too-big-worker", "pytorch")
    spec["config"]["resourcesPerWorker"] = {"cpu": 4}
    code, result = runner.run(spec)
    message = check_error(code, result, "resources", 3, "config.resourcesPerWorker")
    assert "4 CPU" in message


def test_gpu_on_a_cluster_without_gpus(runner):
    spec = digits_spec("gpu-please", "pytorch")
    spec["config"]["useGpu"] = True
    code, result = runner.run(spec)
    message = check_error(code, result, "resources", 3)
    assert "1 GPU" in message and "0 GPU" in message and "useGpu: false" in message


def test_busy_cluster_fails_after_the_wait_instead_of_hanging(runner):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    pg = placement_group([{"CPU": 2}])
    ray.get(pg.ready(), timeout=60)
    try:
        spec = digits_spec("busy", "pytorch")
        spec["config"]["resourceWaitSeconds"] = 1
        code, result = runner.run(spec)
    finally:
        remove_placement_group(pg)
    message = check_error(code, result, "resources", 3)
    assert "has room for it in total" in message and "free now: 0 CPU" in message


def test_unreadable_data_path_checked_on_the_driver(runner, tmp_path):
    spec = digits_spec("no-data", "pytorch")
    spec["data"] = {"source": "cifar10", "path": str(tmp_path / "missing-cifar")}
    code, result = runner.run(spec)
    message = check_error(code, result, "data", 4)
    assert "missing-cifar does not exist" in message


def test_unreadable_data_path_found_by_the_workers(runner, tmp_path):
    """With verifyOnDriver: false the workers hit it; the worker's DataError becomes the result's error."""
    spec = digits_spec("no-data-workers", "pytorch")
    spec["data"] = {"source": "cifar10", "path": str(tmp_path / "missing-cifar"), "verifyOnDriver": False}
    spec["checkpoint"]["maxFailures"] = 0
    code, result = runner.run(spec)
    assert result["error"]["type"] == "data" and code == 4
    assert "CIFAR-10 file not found" in result["error"]["message"]


def test_corrupt_checkpoint_of_the_run(torch_run, runner, tmp_path):
    src, spec, _, first = torch_run
    storage = copy_run(src, spec["name"], tmp_path)
    latest = checkpoints.latest_in_run(str(storage / spec["name"]))
    with open(f"{latest}/model.pt", "r+b") as fh:
        fh.seek(100)
        fh.write(b"\x00\xff" * 16)
    spec = json.loads(json.dumps(spec))
    spec["checkpoint"]["storagePath"] = str(storage)
    code, result = runner.run(spec)
    message = check_error(code, result, "checkpoint", 5)
    assert "corrupt" in message and "model.pt" in message and latest in message


def test_corrupt_ray_snapshot(torch_run, runner, tmp_path):
    src, spec, _, _ = torch_run
    storage = copy_run(src, spec["name"], tmp_path)
    (storage / spec["name"] / checkpoints.RAY_SNAPSHOT_FILE).write_text("{truncated")
    spec = json.loads(json.dumps(spec))
    spec["checkpoint"]["storagePath"] = str(storage)
    code, result = runner.run(spec)
    assert "unreadable" in check_error(code, result, "checkpoint", 5)


def test_resume_from_a_folder_that_is_not_a_checkpoint(torch_run, runner, tmp_path):
    _, spec, _, first = torch_run
    fake = tmp_path / "not-a-checkpoint"
    shutil.copytree(first["checkpointPath"], fake)
    (fake / checkpoints.META_FILE).unlink()
    spec = json.loads(json.dumps(spec))
    spec["name"] = "bad-resume"
    spec["checkpoint"] = {"resumeFrom": str(fake)}
    code, result = runner.run(spec)
    message = check_error(code, result, "checkpoint", 5, "checkpoint.resumeFrom")
    assert "training_checkpoint.json is missing" in message


def test_trainer_path_that_does_not_exist(runner):
    spec = digits_spec("bad-trainer", "pytorch", trainerPath="nowhere/trainer.py:train")
    code, result = runner.run(spec)
    assert "not found" in check_error(code, result, "trainer", 6, "trainConfig.trainerPath")
    spec = digits_spec("bad-trainer", "pytorch", trainerPath="os.path:no_such_function")
    code, result = runner.run(spec)
    assert "no attribute" in check_error(code, result, "trainer", 6, "trainConfig.trainerPath")
