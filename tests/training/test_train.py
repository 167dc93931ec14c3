"""Real training on this machine, small: each framework for a couple of epochs on the digits with 2 workers,
the example user trainer, a tiny CIFAR-10 folder, and mode: cluster. All share the session's Ray."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.training.support import REPO, digits_spec, write_cifar10_batches
from training.runtime import checkpoints

pytestmark = pytest.mark.usefixtures("ray_session")


def check_train_result(result, epochs, workers=2):
    assert result["status"] == "success", result.get("error")
    r = result["results"]
    assert r["numTrials"] == r["completedTrials"] == 1
    assert r["numWorkers"] == workers
    assert r["epochsCompleted"] == epochs
    assert [h["epoch"] for h in r["history"]] == list(range(1, epochs + 1))
    assert result["clusterStatus"]["numNodes"] == 1 and result["clusterStatus"]["totalCpu"] == 2
    assert result["trainingTime"] > 0
    ck = result["checkpointPath"]
    meta = checkpoints.verify(ck)
    assert meta["epoch"] == max(h["epoch"] for h in r["history"] if h["epoch"] == meta["epoch"])
    assert r["bestMetric"] == pytest.approx(meta["metrics"][r["metric"]])
    assert r["latestCheckpointPath"].endswith(checkpoints.checkpoint_dir_name(epochs))
    return r


def test_pytorch_cnn_two_workers(torch_run):
    runner, spec, code, result = torch_run
    assert code == 0
    r = check_train_result(result, epochs=2)
    assert r["bestConfig"]["model"] == {"filters": [64, 128, 256], "dense": 512, "convDropout": 0.25, "denseDropout": 0.5}
    assert r["finalMetrics"]["val_accuracy"] > 0.5  # 10 classes: chance is 0.1
    assert r["history"][-1]["loss"] < r["history"][0]["loss"]
    assert os.path.exists(os.path.join(result["checkpointPath"], "model.pt"))
    # The default result location is <storage>/<name>/result.json; --output was used here, and the run folder
    # holds Ray's snapshot next to the checkpoints.
    assert Path(result["runPath"], checkpoints.RAY_SNAPSHOT_FILE).exists()


def test_tensorflow_cnn_two_workers(runner):
    spec = digits_spec("digits-tf", "tensorflow", epochs=2, lr=0.002)
    spec["data"]["maxTrainSamples"] = 768
    code, result = runner.run(spec)
    assert code == 0, result.get("error")
    r = check_train_result(result, epochs=2)
    assert r["history"][-1]["loss"] < r["history"][0]["loss"]
    assert r["finalMetrics"]["val_accuracy"] > 0.3
    assert os.path.exists(os.path.join(result["checkpointPath"], "tf", "ckpt.index"))


def test_xgboost_two_workers(runner):
    spec = digits_spec("digits-xgb", "xgboost", epochs=10, lr=0.3, xgboost={"max_depth": 4})
    spec["checkpoint"]["everyEpochs"] = 5
    spec["checkpoint"]["keepBest"] = 1
    code, result = runner.run(spec)
    assert code == 0, result.get("error")
    r = check_train_result(result, epochs=10)
    assert r["finalMetrics"]["val_accuracy"] > 0.8
    assert r["finalMetrics"]["trees"] == 10
    assert os.path.exists(os.path.join(result["checkpointPath"], "model.ubj"))


def test_example_user_trainer(runner):
    spec = digits_spec("user-trainer", "pytorch", epochs=3, lr=0.003,
                       trainerPath=str(REPO / "training" / "examples" / "user_trainer.py") + ":train",
                       params={"hidden": 64})
    spec["checkpoint"]["keepBest"] = 1
    code, result = runner.run(spec)
    assert code == 0, result.get("error")
    r = check_train_result(result, epochs=3)
    assert r["trainerReturnValue"] == {"hidden": 64, "parameters": 64 * 64 + 64 + 64 * 10 + 10}
    assert r["finalMetrics"]["val_accuracy"] > 0.5
    assert os.path.exists(os.path.join(result["checkpointPath"], "mlp.pt"))


def test_tiny_cifar10_folder_through_a_uri(runner, tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    write_cifar10_batches(root, per_batch=16)
    spec = digits_spec("tiny-cifar", "pytorch", epochs=1, batchSize=8,
                       model={"filters": [8, 16, 32], "dense": 32})
    spec["data"] = {"source": "cifar10", "path": f"file://{root}"}
    code, result = runner.run(spec)
    assert code == 0, result.get("error")
    r = check_train_result(result, epochs=1)
    # batchSize is the global batch: 2 workers x 4 rows a step, 10 steps for the 80 rows -- what 1 worker runs.
    assert r["history"][0]["samples"] == 80 and r["history"][0]["steps"] == 10


def test_cluster_mode(runner):
    code, result = runner.run({"name": "cluster", "mode": "cluster", "config": {}})
    assert code == 0
    assert result["clusterStatus"] == {"numNodes": 1, "totalCpu": 2.0, "totalGpu": 0.0}
    nodes = result["results"]["nodes"]
    assert len(nodes) == 1 and nodes[0]["cpu"] == 2.0 and nodes[0]["head"] is True
    assert result["trainingTime"] == 0


def unnamed_small(framework):
    spec = digits_spec("x", framework, epochs=1)
    spec.pop("name")
    spec["data"]["maxTrainSamples"] = 256
    return spec


def test_unnamed_specs_share_a_storage_without_colliding(runner, capfd):
    """Two different specs without a name in one storage both train, each in its own run folder; the first one
    submitted again continues its own run (and says so) instead of another's."""
    code, torch_result = runner.run(unnamed_small("pytorch"), name="a.yaml")
    assert code == 0, torch_result.get("error")
    code, xgb_result = runner.run(unnamed_small("xgboost"), name="b.yaml")
    assert code == 0, xgb_result.get("error")
    names = {torch_result["name"], xgb_result["name"]}
    assert len(names) == 2 and all(n.startswith(("train-pytorch-", "train-xgboost-")) for n in names)
    assert {p.name for p in runner.storage.iterdir()} == names
    capfd.readouterr()
    code, again = runner.run(unnamed_small("pytorch"), name="a.yaml")
    assert code == 0, again.get("error")
    assert again["name"] == torch_result["name"]
    assert again["results"]["resumedFromEpoch"] == 1 and again["results"]["epochsTrainedThisRun"] == []
    assert f"this spec's run {torch_result['name']} continues from checkpoint" in capfd.readouterr().err


def test_elastic_workers_take_what_fits(runner):
    """numWorkers {min: 1, max: 3} on a 2-CPU cluster: Ray Train's elastic run starts with the workers that fit."""
    spec = digits_spec("elastic", "pytorch", epochs=1)
    spec["config"]["numWorkers"] = {"min": 1, "max": 3}
    spec["config"]["healthCheck"] = {"workerTimeoutSeconds": 120}
    spec["data"]["maxTrainSamples"] = 256
    code, result = runner.run(spec)
    assert code == 0, result.get("error")
    r = result["results"]
    assert r["numWorkers"] == 3 and 1 <= r["worldSize"] <= 2
    assert checkpoints.verify(result["checkpointPath"])["extra"]["worldSize"] == r["worldSize"]
