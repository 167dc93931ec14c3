"""Checkpoints on s3:// to the object store the charts render (the Versity S3 Gateway, built from its Go module by
`python -m e2e build versitygw`), as a RayJob's pods reach it: the digits PyTorch example on 2 Ray Train workers on
a Ray cluster of two nodes (one worker on each), storage and credentials from the environment the charts set
(TRAINING_STORAGE_PATH, AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY). Checkpoints are
written to the store, the result names them by s3:// URI, and a second run resumes from the last one. Skipped only
when the server is not built."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from tests.support import load_yaml
from tests.training.support import REPO, run_driver
from training.errors import CheckpointError

EXAMPLE = REPO / "training" / "examples" / "digits-torch.yaml"


def _spec(tmp_path, epochs: int):
    spec = load_yaml(EXAMPLE.read_text())
    spec["trainConfig"]["epochs"] = epochs
    spec["checkpoint"].update(everyEpochs=1)
    spec["data"]["maxTrainSamples"] = 400
    path = tmp_path / f"spec-{epochs}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_digits_on_two_nodes_checkpoints_to_s3_and_resumes(s3_server, two_node_ray, tmp_path):
    prefix = f"runs-{uuid.uuid4().hex[:8]}"
    storage = f"s3://{s3_server.bucket}/{prefix}"
    env = {**s3_server.client_env, "TRAINING_STORAGE_PATH": storage}
    on_disk = s3_server.root / "buckets" / s3_server.bucket / prefix / "digits-torch"  # the gateway's posix backend

    first = run_driver(_spec(tmp_path, 2), two_node_ray.address, env)
    assert first.returncode == 0, first.stderr[-5000:]
    assert f"result (success) written to {storage}/digits-torch/result.json" in first.stderr
    result = json.loads((on_disk / "result.json").read_text())  # read from the store, as a user would
    assert result == json.loads(first.stdout), "the result in the store is the one printed"
    assert result["status"] == "success" and result["clusterStatus"]["numNodes"] == 2, result
    assert "seen by the driver's node and 1 other node(s)" in first.stderr
    assert result["runPath"] == f"{storage}/digits-torch"
    assert result["results"]["latestCheckpointPath"] == f"{storage}/digits-torch/epoch-000002"
    assert result["checkpointPath"].startswith(f"{storage}/digits-torch/epoch-"), result["checkpointPath"]
    for epoch in (1, 2):
        files = {p.name for p in (on_disk / f"epoch-{epoch:06d}").iterdir()}
        assert {"model.pt", "training_checkpoint.json"} <= files, files

    second = run_driver(_spec(tmp_path, 3), two_node_ray.address, env)
    assert second.returncode == 0, second.stderr[-5000:]
    resumed = json.loads((on_disk / "result.json").read_text())["results"]
    assert (resumed["resumedFromEpoch"], resumed["epochsTrainedThisRun"]) == (2, [3]), resumed
    assert f"continues from checkpoint {storage}/digits-torch/epoch-000002" in second.stderr
    assert (on_disk / "epoch-000003" / "model.pt").is_file()
    assert resumed["finalMetrics"]["val_accuracy"] > 0.3, resumed["finalMetrics"]


def test_a_bucket_that_does_not_exist_is_named_before_ray(s3_server, monkeypatch):
    from training.runtime.shared_storage import write_marker

    for key, value in s3_server.client_env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(CheckpointError) as info:
        write_marker("s3://no-such-bucket/runs")
    assert "cannot write to the checkpoint storage s3://no-such-bucket/runs" in info.value.message
    assert "the bucket must exist" in info.value.message and info.value.field == "checkpoint.storagePath"
    path, token = write_marker(f"s3://{s3_server.bucket}/probe")
    assert (s3_server.root / "buckets" / s3_server.bucket / "probe" / path.rsplit("/", 1)[-1]).read_text() == token
