"""Checkpoints and fault tolerance: a worker killed mid-run, a finished run resumed, a run started from another
run's checkpoint."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.training.support import SpecRunner, copy_run, digits_spec

pytestmark = pytest.mark.usefixtures("ray_session")


def test_killed_worker_resumes_from_last_checkpoint(runner, tmp_path):
    """Rank 1 dies (os._exit) in the middle of epoch 4; checkpoints are every 2 epochs. Ray Train restarts the
    worker group, which resumes from the epoch-2 checkpoint: epochs 1-2 are trained once, 3-5 by the new group."""
    ledger = tmp_path / "ledger.jsonl"
    spec = digits_spec("killed-worker", "pytorch", epochs=5)
    spec["data"]["maxTrainSamples"] = 512
    spec["checkpoint"] = {"everyEpochs": 2, "maxFailures": 2}
    code, result = runner.run(spec, env={"TRAINING_FAULT_INJECTION": "rank=1,epoch=4,phase=mid",
                                         "TRAINING_EPOCH_LEDGER": str(ledger)})
    assert code == 0, result.get("error")
    events = [json.loads(line) for line in ledger.read_text().splitlines()]

    killed = [e for e in events if e["event"] == "killed"]
    assert [(e["rank"], e["epoch"]) for e in killed] == [(1, 4)]

    rank0 = [e for e in events if e["rank"] == 0]
    pids = list(dict.fromkeys(e["pid"] for e in rank0))
    assert len(pids) == 2, "one restart: two worker groups"
    first = [e["epoch"] for e in rank0 if e["pid"] == pids[0] and e["event"] == "start"]
    second = [e["epoch"] for e in rank0 if e["pid"] == pids[1] and e["event"] == "start"]
    last_checkpoint_before_kill = max(e for e in range(1, 4) if e % 2 == 0)  # epoch 2
    assert first == [1, 2, 3, 4]
    assert second == list(range(last_checkpoint_before_kill + 1, 6))  # 3, 4, 5: resumed right after it
    assert {e["startEpoch"] for e in rank0 if e["pid"] == pids[1]} == {last_checkpoint_before_kill}

    finished = Counter(e["epoch"] for e in rank0 if e["event"] == "end")
    assert all(finished[e] == 1 for e in range(1, last_checkpoint_before_kill + 1)), finished
    assert finished[5] == 1

    r = result["results"]
    assert r["resumedFromEpoch"] == 2
    assert r["epochsTrainedThisRun"] == [3, 4, 5]
    assert [h["epoch"] for h in r["history"]] == [1, 2, 3, 4, 5]  # the final model's lineage: each epoch once
    assert r["epochsCompleted"] == 5


def test_killed_worker_without_retries_is_a_clear_error(runner):
    spec = digits_spec("killed-no-retry", "pytorch", epochs=2)
    spec["data"]["maxTrainSamples"] = 256
    spec["checkpoint"] = {"maxFailures": 0}
    code, result = runner.run(spec, env={"TRAINING_FAULT_INJECTION": "rank=1,epoch=1,phase=mid,delay=0"})
    assert code == 1
    assert result["status"] == "error" and result["error"]["type"] == "training"
    message = result["error"]["message"]
    assert "0 allowed restart(s)" in message and "worker rank 1 died" in message, message


def test_resume_a_finished_run(torch_run, tmp_path):
    """Run the finished 2-epoch run again under the same name with epochs: 3 -> only epoch 3 is trained."""
    src, spec, _, first = torch_run
    runner = SpecRunner(tmp_path)
    storage = copy_run(src, spec["name"], tmp_path)
    spec = json.loads(json.dumps(spec))
    spec["trainConfig"]["epochs"] = 3
    spec["checkpoint"]["storagePath"] = str(storage)
    code, result = runner.run(spec)
    assert code == 0, result.get("error")
    r = result["results"]
    assert r["resumedFromEpoch"] == 2 and r["epochsTrainedThisRun"] == [3]
    assert [h["epoch"] for h in r["history"]] == [1, 2, 3]
    assert r["history"][:2] == first["results"]["history"]
    assert r["restoredFrom"].endswith("epoch-000002")


def test_start_from_another_runs_checkpoint(torch_run, runner):
    """checkpoint.resumeFrom: a new run starts from a finished run's checkpointPath; nothing is left to train at the
    same epochs, so the restored model is evaluated and reported."""
    _, spec, _, first = torch_run
    spec = json.loads(json.dumps(spec))
    spec["name"] = "from-other-run"
    spec["checkpoint"] = {"resumeFrom": first["checkpointPath"]}
    code, result = runner.run(spec)
    assert code == 0, result.get("error")
    r = result["results"]
    assert r["epochsTrainedThisRun"] == [] and r["resumedFromEpoch"] == 2
    assert r["evaluation"]["val_accuracy"] > 0.5
    assert r["finalMetrics"] == r["evaluation"]
    assert result["checkpointPath"] == first["checkpointPath"]
