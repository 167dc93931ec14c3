"""mode: tune on this machine, small: the seed's usage example end to end, each scheduler, a crashing trial retried
and counted, an interrupted experiment resumed with its finished trials kept. All share the session's Ray."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from tests.support import load_yaml
from tests.training.support import REPO, assert_valid_result, tune_spec
from training.runtime import checkpoints

pytestmark = pytest.mark.usefixtures("ray_session")

GOOD_LR, BAD_LR = 3e-3, 0.5  # on the tiny CNN: learns vs diverges (val_loss in the tens after one epoch)


def check_tune_result(result, trials, epochs):
    assert result["status"] == "success", result.get("error")
    r = result["results"]
    assert r["numTrials"] == trials
    assert r["completedTrials"] == r["trialsRanToEnd"] + r["earlyStoppedTrials"] == trials
    assert r["erroredTrials"] == 0 and r["unfinishedTrials"] == 0 and r["interrupted"] is False
    assert r["totalTrialIterations"] <= trials * epochs
    assert isinstance(r["bestMetric"], float) and r["bestConfig"]
    rows = list(csv.DictReader(open(r["trialsCsv"], newline="")))
    assert len(rows) == trials
    assert sum(int(row["iterations"]) for row in rows) == r["totalTrialIterations"]
    meta = checkpoints.verify(result["checkpointPath"])  # the best trial's best checkpoint, with its manifest
    assert meta["metrics"][r["metric"]] == pytest.approx(r["bestMetric"])
    return r, rows


def test_seed_usage_example_end_to_end(tmp_path):
    """training/examples/tune-seed-000.yaml as written, through the CLI, with this machine's overrides: 2 samples,
    1 worker x 1 CPU, no GPU. Each trial a Ray Train run (trialRunner train) of the built-in PyTorch CNN, ASHA on
    val_loss."""
    from training.cli import main

    out = tmp_path / "result.json"
    code = main(["run", str(REPO / "training" / "examples" / "tune-seed-000.yaml"), "--output", str(out),
                 "--num-samples", "2",
                 "--set", "config.numWorkers=1", "--set", "config.useGpu=false",
                 "--set", "config.resourcesPerWorker={cpu: 1, gpu: 0}",
                 "--set", "tuneConfig.trialRunner=train",
                 "--set", "trainConfig.epochs=2", "--set", "data.maxTrainSamples=384",
                 "--set", f"checkpoint.storagePath={tmp_path / 'storage'}"])
    result = json.loads(out.read_text())
    assert code == 0, result.get("error")
    assert_valid_result(result)
    r, rows = check_tune_result(result, trials=2, epochs=2)
    assert (r["scheduler"], r["metric"], r["metricMode"], r["trialRunner"]) == ("asha", "val_loss", "min", "train")
    assert set(r["bestConfig"]) == {"lr", "batchSize"}
    for row in rows:
        assert 1e-5 <= float(row["config.lr"]) <= 1e-1 and int(row["config.batchSize"]) in (16, 32, 64)
    assert r["bestTrainConfig"]["framework"] == "pytorch" and r["bestTrainConfig"]["model"]["filters"] == [64, 128, 256]
    assert result["runPath"] == str(tmp_path / "storage" / "tune-seed-000")
    # Each trial ran its own Ray Train run under its folder; Tune kept the checkpoints it reported.
    best_trial = Path(result["checkpointPath"]).parent
    assert (best_trial / "train" / "run").is_dir()  # one stable Ray Train run per trial


@pytest.mark.parametrize("scheduler", ["asha", "median"])
def test_stopping_schedulers(runner, scheduler):
    """One good and two diverging learning rates, one trial at a time (a fixed order): ASHA and the median rule
    stop a diverging trial early. (FIFO runs every trial to the end: the crash and resume tests below use it.)"""
    opts = {"asha": {"gracePeriod": 1, "reductionFactor": 2},
            "median": {"gracePeriod": 1, "minSamplesRequired": 1}}[scheduler]
    spec = tune_spec(f"sched-{scheduler}", scheduler, samples=1, epochs=3,
                     space={"lr": {"type": "grid", "values": [GOOD_LR, BAD_LR, BAD_LR * 0.9]}},
                     maxConcurrentTrials=1, schedulerConfig=opts)
    code, result = runner.run(spec)
    assert code == 0, result.get("error")
    r, rows = check_tune_result(result, trials=3, epochs=3)
    assert r["scheduler"] == scheduler and r["trialRunner"] == "local" and r["maxConcurrentTrials"] == 1
    assert r["bestConfig"] == {"lr": GOOD_LR}
    by_lr = {float(row["config.lr"]): row for row in rows}
    assert by_lr[GOOD_LR]["status"] == "completed" and int(by_lr[GOOD_LR]["epochs"]) == 3
    assert r["earlyStoppedTrials"] >= 1, rows
    assert r["totalTrialIterations"] < 9


def test_pbt_exploits(runner):
    """PBT (synchronous: every trial waits at each perturbation point, so the outcome does not depend on timing),
    two trials: after epoch 1 the worse one continues from the better one's checkpoint with its config (lr copied;
    batchSize, the mutable entry, perturbed)."""
    spec = tune_spec("sched-pbt", "pbt", samples=1, epochs=2,
                     space={"lr": {"type": "grid", "values": [GOOD_LR, BAD_LR]},
                            "batchSize": {"type": "choice", "values": [48, 64]}},
                     schedulerConfig={"perturbationInterval": 1, "quantileFraction": 0.5, "resampleProbability": 0.0,
                                      "synch": True})
    code, result = runner.run(spec)
    assert code == 0, result.get("error")
    r, rows = check_tune_result(result, trials=2, epochs=2)
    assert r["scheduler"] == "pbt" and r["earlyStoppedTrials"] == 0
    assert r["pbtExploits"] >= 1
    # The diverging trial no longer runs with its lr: it took the good trial's checkpoint and config.
    assert all(abs(float(row["config.lr"]) - BAD_LR) > 1e-9 for row in rows), rows


def test_restored_pytorch_checkpoint_takes_the_trials_lr(tmp_path):
    """PBT hands a trial another trial's checkpoint with a new lr; PyTorch's saved optimizer state would put the old
    lr back, so the trial's restore copy gets the new lr (and a manifest that still verifies)."""
    import torch

    from training.job.parts import Training
    from training.tune.trial import restore_copy

    src = tmp_path / "ckpt"
    src.mkdir()
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, src / "model.pt")
    checkpoints.write_manifest(str(src), epoch=2, framework="pytorch", history=[], metrics={"val_loss": 1.0})

    class FakeCheckpoint:
        def to_directory(self, path):
            import shutil

            shutil.copytree(src, path, dirs_exist_ok=True)
            return path

    local = restore_copy(FakeCheckpoint(), Training(framework="pytorch", epochs=4, batch_size=32, lr=0.005))
    state = torch.load(Path(local) / "model.pt", weights_only=True)
    assert [g["lr"] for g in state["optimizer"]["param_groups"]] == [0.005]
    assert checkpoints.verify(local)["extra"]["lrSetOnRestore"] == 0.005
    assert torch.load(src / "model.pt", weights_only=True)["optimizer"]["param_groups"][0]["lr"] == 0.1  # source intact


def test_crashing_trial_is_retried_and_counted(runner, tmp_path):
    """Trial 1's process dies (os._exit) in the middle of epoch 2; Tune retries it from its epoch-1 checkpoint."""
    ledger = tmp_path / "ledger.jsonl"
    spec = tune_spec("crash", "fifo", samples=1, epochs=3, maxFailures=1)
    code, result = runner.run(spec, env={"TRAINING_FAULT_INJECTION": "rank=0,epoch=2,phase=mid,delay=0.5,trial=1",
                                         "TRAINING_EPOCH_LEDGER": str(ledger)})
    assert code == 0, result.get("error")
    r, rows = check_tune_result(result, trials=2, epochs=3)
    assert r["scheduler"] == "fifo" and r["earlyStoppedTrials"] == 0 and r["totalTrialIterations"] == 6
    assert r["trialFailures"] == 1 and r["retriedTrials"] == 1 and r["erroredTrials"] == 0
    assert [int(row["failures"]) for row in rows] == [0, 1]
    assert all(row["status"] == "completed" and int(row["epochs"]) == 3 for row in rows)
    events = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(e["epoch"]) for e in events if e["event"] == "killed"] == [2]
    ended = Counter(e["epoch"] for e in events if e["event"] == "end")
    assert ended == {1: 2, 2: 2, 3: 2}, ended  # the retry resumed after epoch 1: nothing trained twice
    assert any(e["startEpoch"] == 1 and e["event"] == "start" and e["epoch"] == 2 for e in events)


def test_interrupted_experiment_resumes_with_finished_trials_kept(runner, tmp_path):
    """Interrupted (as by Ctrl+C) once the first of three trials finished: the result is partial; running again
    without --resume is refused; with --resume the other trials run and the finished one is not trained again."""
    from training.runner import run

    ledger = tmp_path / "ledger.jsonl"
    spec = tune_spec("resume-me", "fifo", samples=1, epochs=2, maxConcurrentTrials=1,
                     space={"lr": {"type": "grid", "values": [GOOD_LR, 1e-2, 2e-3]}})
    code, first = runner.run(spec, env={"TRAINING_TUNE_INTERRUPT": "after_trials=1",
                                        "TRAINING_EPOCH_LEDGER": str(ledger)})
    assert code == 0 and first["status"] == "partial", first.get("error")
    r1 = first["results"]
    assert r1["interrupted"] is True and r1["unfinishedTrials"] >= 1 and r1["trialsRanToEnd"] == 1
    done_first = next(t for t in r1["trials"] if t["status"] == "completed")

    code, refused = runner.run(spec)
    assert code == 2 and refused["error"]["type"] == "spec" and refused["error"]["field"] == "name"
    assert "--resume" in refused["error"]["message"]

    path = runner.write(json.loads(json.dumps({**spec, "checkpoint": {"storagePath": str(runner.storage)}})))
    code, resumed, _ = run(str(path), output=str(tmp_path / "resumed.json"), resume=True,
                           environ={"TRAINING_EPOCH_LEDGER": str(ledger)})
    assert code == 0, resumed.get("error")
    assert_valid_result(resumed)
    r2, _ = check_tune_result(resumed, trials=3, epochs=2)
    assert r2["resumed"] is True and r2["trialsRanToEnd"] == 3
    kept = next(t for t in r2["trials"] if t["trialId"] == done_first["trialId"])
    assert kept["bestMetric"] == pytest.approx(done_first["bestMetric"])
    events = [json.loads(line) for line in ledger.read_text().splitlines()]
    ended = Counter(e["epoch"] for e in events if e["event"] == "end")
    assert ended == {1: 3, 2: 3}, ended  # every trial's every epoch exactly once over both runs


#: The last commit of the flat layout (training/job.py, tune_events.py, tune_trial.py ...), before training/ was
#: arranged by stage: what an experiment started before the move was started with.
FLAT_LAYOUT = "a4816924119c1ec61046c6e1e5665ad9d4cbd948"


def test_a_search_started_under_the_old_module_paths_resumes_under_the_new_ones(runner, tmp_path):
    """The first of three trials finished by the flat layout's code (in its own process and its own local Ray, so
    every trial imports that code): its experiment state names the old modules. Resumed with today's code, the finished
    trial is kept and the other two run; every (trial, epoch) ends exactly once over both runs."""
    import io
    import subprocess
    import sys
    import tarfile

    from tests.training.support import node_environ
    from training.runner import run

    old = tmp_path / "flat"
    archive = subprocess.run(["git", "-C", str(REPO), "archive", FLAT_LAYOUT, "training"], capture_output=True,
                             check=True).stdout
    old.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        # extraction filters came with Python 3.11.4 (Debian 12's is 3.11.2); git archive of this repository is trusted
        tar.extractall(old, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    assert (old / "training" / "tune_events.py").is_file() and not (old / "training" / "tune").exists()

    ledger = tmp_path / "ledger.jsonl"
    spec = tune_spec("resume-across-the-move", "fifo", samples=1, epochs=2, maxConcurrentTrials=1,
                     space={"lr": {"type": "grid", "values": [GOOD_LR, 1e-2, 2e-3]}})
    spec["checkpoint"] = {"storagePath": str(runner.storage)}
    path = runner.write(spec)
    env = {**node_environ(), "PYTHONPATH": f"{old}:{REPO}", "TRAINING_TUNE_INTERRUPT": "after_trials=1",
           "TRAINING_EPOCH_LEDGER": str(ledger)}
    out = subprocess.run([sys.executable, "-m", "training", "run", str(path), "--output", str(tmp_path / "r1.json")],
                         env=env, cwd=old, capture_output=True, text=True, timeout=600)
    r1 = json.loads((tmp_path / "r1.json").read_text())
    assert r1["status"] == "partial", (r1.get("error"), out.stderr[-3000:])
    assert r1["results"]["trialsRanToEnd"] == 1
    tuner = (runner.storage / spec["name"] / "tuner.pkl").read_bytes()  # what Tuner.restore unpickles
    assert b"training.tune_events" in tuner and b"training.tune.events" not in tuner  # stored under the old paths

    code, resumed, _ = run(str(path), output=str(tmp_path / "resumed.json"), resume=True,
                           environ={"TRAINING_EPOCH_LEDGER": str(ledger)})
    assert code == 0, resumed.get("error")
    r2, _ = check_tune_result(resumed, trials=3, epochs=2)
    assert r2["resumed"] is True and r2["trialsRanToEnd"] == 3
    events = [json.loads(line) for line in ledger.read_text().splitlines()]
    ended = Counter(e["epoch"] for e in events if e["event"] == "end")
    assert ended == {1: 3, 2: 3}, ended


def test_the_seed_example_without_a_name_twice(tmp_path, capfd):
    """The seed's tuning example as its users write it (no name), submitted twice into one storage: the first run
    searches; the second finds this spec's experiment and resumes it, returning the same complete result with no
    trial trained again."""
    import yaml

    from training.cli import main

    spec = load_yaml((REPO / "training" / "examples" / "tune-seed-000.yaml").read_text())
    spec.pop("name")
    (tmp_path / "seed.yaml").write_text(yaml.safe_dump(spec))
    args = ["run", str(tmp_path / "seed.yaml"), "--num-samples", "1",
            "--set", "config.numWorkers=1", "--set", "config.useGpu=false",
            "--set", "config.resourcesPerWorker={cpu: 1, gpu: 0}", "--set", "tuneConfig.trialRunner=train",
            "--set", "trainConfig.epochs=1", "--set", "data.maxTrainSamples=256",
            "--set", f"checkpoint.storagePath={tmp_path / 'storage'}"]
    results = []
    for i in range(2):
        out = tmp_path / f"result-{i}.json"
        code = main([*args, "--output", str(out)])
        results.append(json.loads(out.read_text()))
        assert code == 0, results[-1].get("error")
    first, second = results
    assert first["name"] == second["name"] and first["name"].startswith("tune-pytorch-")
    check_tune_result(first, trials=1, epochs=1)
    check_tune_result(second, trials=1, epochs=1)
    assert (first["results"]["resumed"], second["results"]["resumed"]) == (False, True)
    assert second["results"]["bestMetric"] == first["results"]["bestMetric"]
    assert second["results"]["totalTrialIterations"] == first["results"]["totalTrialIterations"] == 1
    assert f"this spec's experiment {first['name']} exists" in capfd.readouterr().err
