"""mode: tune, bad input: a clear error (naming the field), exit code and error result JSON before any trial."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.training.support import REPO, assert_valid_result, tune_spec
from training.errors import SpecError
from training.job import validate_spec

LR = {"type": "loguniform", "min": 1e-4, "max": 1e-1}


def spec_with(**tune):
    space = tune.pop("space", {"lr": LR})
    spec = tune_spec("bad-tune", "asha", samples=2)
    spec["tuneConfig"]["searchSpace"] = space
    spec["tuneConfig"].update(tune)
    return spec


CASES = [
    ("unknown distribution", spec_with(space={"lr": {"type": "normal", "min": 0.0, "max": 1.0}}),
     "tuneConfig.searchSpace.lr.type", "'normal' is not one of"),
    ("unknown scheduler", spec_with(scheduler="hyperband"), "tuneConfig.scheduler", "'hyperband' is not one of"),
    ("min > max", spec_with(space={"lr": {"type": "loguniform", "min": 0.1, "max": 0.001}}),
     "tuneConfig.searchSpace.lr.min", "min (0.1) must be below max (0.001)"),
    ("randint min > max", spec_with(space={"batchSize": {"type": "randint", "min": 64, "max": 16}}),
     "tuneConfig.searchSpace.batchSize.min", "min (64) > max (16)"),
    ("metric never reported", spec_with(metric="val_f1"), "tuneConfig.metric",
     "never reports 'val_f1'; it reports loss, accuracy, val_loss, val_accuracy"),
    ("mode other than min/max", spec_with(mode="maximize"), "tuneConfig.mode", "'maximize' is not one of ['min', 'max']"),
    ("loguniform from zero", spec_with(space={"lr": {"type": "loguniform", "min": 0, "max": 0.1}}),
     "tuneConfig.searchSpace.lr.min", "loguniform needs min > 0"),
    ("quniform without q", spec_with(space={"lr": {"type": "quniform", "min": 0.001, "max": 0.1}}),
     "tuneConfig.searchSpace.lr.q", "required"),
    ("choice with min", spec_with(space={"batchSize": {"type": "choice", "values": [16], "min": 1}}),
     "tuneConfig.searchSpace.batchSize.min", "choice takes values, not min"),
    ("integer knob, float distribution", spec_with(space={"batchSize": {"type": "uniform", "min": 16, "max": 64}}),
     "tuneConfig.searchSpace.batchSize.type", "batchSize takes integers"),
    ("unknown hyperparameter", spec_with(space={"momentum": {"type": "uniform", "min": 0.8, "max": 0.99}}),
     "tuneConfig.searchSpace.momentum", "not a hyperparameter of the built-in pytorch trainer"),
    ("empty search space", spec_with(space={}), "tuneConfig.searchSpace", "is empty"),
    ("option of another scheduler", spec_with(schedulerConfig={"perturbationInterval": 2}),
     "tuneConfig.schedulerConfig.perturbationInterval", "not an option of scheduler asha"),
    ("grace period beyond the epochs", spec_with(schedulerConfig={"gracePeriod": 5}),
     "tuneConfig.schedulerConfig.gracePeriod", "gracePeriod (5) exceeds maxT (2"),
    ("pbt with nothing to perturb", spec_with(scheduler="pbt", space={"lr": {"type": "grid", "values": [0.01]}}),
     "tuneConfig.searchSpace", "at least one non-grid"),
    ("local runner with 2 workers", {**spec_with(trialRunner="local"), "config": {"numWorkers": 2}},
     "tuneConfig.trialRunner", "one worker"),
]


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_every_metric_the_built_in_loops_report_can_be_tuned(framework):
    """The loops report `steps` (training/frameworks/pytorch.py, tensorflow.py): tuneConfig.metric accepts it."""
    spec = spec_with(metric="steps", mode="max")
    spec["trainConfig"]["framework"] = framework
    validate_spec(spec)


@pytest.mark.parametrize("spec, field, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_tune_spec_names_the_field(spec, field, words):
    with pytest.raises(SpecError) as info:
        validate_spec(spec)
    assert info.value.field == field, (info.value.field, info.value.details)
    assert words in info.value.message + (info.value.details or "")


@pytest.mark.parametrize("case", ["min > max", "metric never reported", "unknown scheduler"])
def test_bad_tune_spec_through_the_runner(runner, case):
    spec, field, words = next(c[1:] for c in CASES if c[0] == case)
    code, result = runner.run(spec)
    assert code == 2 and result["status"] == "error"
    assert result["error"]["type"] == "spec" and result["error"]["field"] == field
    assert result["trainingTime"] == 0
    assert not (runner.storage / "bad-tune" / "tuner.pkl").exists()  # no experiment was started


def test_bad_tune_spec_never_starts_ray(tmp_path):
    """The CLI exits 2 on a min > max search space without importing Ray; the error result names the field."""
    spec, field, _ = next(c[1:] for c in CASES if c[0] == "min > max")
    spec = {**spec, "checkpoint": {"storagePath": str(tmp_path / "store")}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    probe = ("import sys; from training.runner import run; code, result, _ = run(sys.argv[1], num_samples=3); "
             "print('RAY_IMPORTED' if 'ray' in sys.modules else 'RAY_NOT_IMPORTED'); sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", probe, str(path)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "RAY_NOT_IMPORTED" in proc.stdout and field in proc.stderr
    written = json.loads((tmp_path / "store" / "bad-tune" / "result.json").read_text())
    assert written["error"]["field"] == field
    assert_valid_result(written)


def test_cli_overrides_are_checked(tmp_path):
    from training.runner import run

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**spec_with(), "checkpoint": {"storagePath": str(tmp_path / "s")}}))
    code, result, _ = run(str(path), output=str(tmp_path / "r.json"), sets=["tuneConfig.numSamples"])
    assert code == 2 and result["error"]["field"] == "--set"
    code, result, _ = run(str(path), output=str(tmp_path / "r.json"), num_samples=0)
    assert code == 2 and result["error"]["field"] == "tuneConfig.numSamples"
    code, result, _ = run(str(path), output=str(tmp_path / "r.json"), sets=["tuneConfig.mode=up"])
    assert code == 2 and result["error"]["field"] == "tuneConfig.mode"


def test_trial_bigger_than_the_cluster(runner, ray_session):
    """Each trial a Ray Train run of 3 workers on a 2-CPU cluster: a resources error before any trial."""
    spec = tune_spec("too-big", "fifo", samples=2, trialRunner="train")
    spec["config"]["numWorkers"] = 3
    code, result = runner.run(spec)
    assert code == 3 and result["error"]["type"] == "resources" and result["error"]["field"] == "config.numWorkers"
    assert not (runner.storage / "too-big" / "tuner.pkl").exists()


def test_user_trainer_metric_missing_stops_the_search(runner, ray_session):
    """A user trainer's metrics are only known when it reports: the first report without tuneConfig.metric stops
    the whole search (no retries, no other trials) with a clear error."""
    spec = tune_spec("user-metric", "fifo", samples=1, epochs=2, maxConcurrentTrials=1,
                     space={"hidden": {"type": "grid", "values": [16, 32, 64]}})
    spec["trainConfig"]["trainerPath"] = str(REPO / "training" / "examples" / "user_trainer.py") + ":train"
    spec["tuneConfig"]["metric"] = "val_f1"
    code, result = runner.run(spec)
    assert code == 1 and result["status"] == "error"
    message = result["error"]["message"]
    assert "'val_f1' is not among the metrics the trainer reports" in message and "val_accuracy" in message
    assert result["results"]["numTrials"] < 3  # stopped before the rest of the grid
