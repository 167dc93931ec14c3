"""A spec without a name gets one from what it trains: the same spec resumes its own run, a different one never
shares a run folder. Knobs the EKS profile needs (elastic workers, collective timeout, health checks) reach Ray Train
as its own settings. No Ray here."""

from __future__ import annotations

import json
import os

import pytest

from tests.training.support import REPO, digits_spec, tune_spec
from training.errors import SpecError
from training.job import normalize, validate_spec
from training.job.identity import derived_name


def job_of(spec, environ=None):
    validate_spec(spec)
    return normalize(spec, environ or {})


def unnamed(spec):
    spec = json.loads(json.dumps(spec))
    spec.pop("name")
    return spec


def changed(spec, path, value):
    spec = json.loads(json.dumps(spec))
    node = spec
    *parents, leaf = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return spec

#: Every example's run name, and the name it gets without its ``name`` (computed before training/ was arranged by
#: stage): a rearrangement that changed one would send a resubmitted spec to a new, empty run folder.
EXAMPLE_RUN_NAMES = {
    "cifar10-torch.yaml": ("cifar10-torch", "train-pytorch-5425e27bbe"),
    "cluster.yaml": ("cluster-status", "cluster"),
    "digits-tensorflow.yaml": ("digits-tensorflow", "train-tensorflow-3153fcd4fb"),
    "digits-torch.yaml": ("digits-torch", "train-pytorch-2d9d0ee93c"),
    "digits-user-trainer.yaml": ("digits-user-trainer", "train-pytorch-beb705273b"),
    "digits-xgboost.yaml": ("digits-xgboost", "train-xgboost-cc314b3bac"),
    "synthetic-torch.yaml": ("synthetic-torch", "train-pytorch-89f0c74118"),
    "tune-digits-asha.yaml": ("tune-digits-asha", "tune-pytorch-48751784ac"),
    "tune-digits-pbt.yaml": ("tune-digits-pbt", "tune-pytorch-53745bc16b"),
    "tune-digits-train-2workers.yaml": ("tune-digits-train-2workers", "tune-pytorch-5be85db9ed"),
    "tune-seed-000.yaml": ("tune-seed-000", "tune-pytorch-4f250fcc96"),
}


@pytest.mark.parametrize("example", sorted(EXAMPLE_RUN_NAMES))
def test_every_example_keeps_its_run_name(example):
    from training.job import load_spec_file

    spec = load_spec_file(REPO / "training" / "examples" / example)
    named, derived = EXAMPLE_RUN_NAMES[example]
    assert (job_of(spec).name, job_of(unnamed(spec)).name) == (named, derived)


def test_the_pinned_run_names_cover_every_example():
    assert {p.name for p in (REPO / "training" / "examples").glob("*.yaml")} == set(EXAMPLE_RUN_NAMES)



BASE = unnamed(digits_spec("x", "pytorch", epochs=2))


def test_an_unnamed_spec_is_named_by_its_content():
    job = job_of(BASE)
    assert job.name_source == "derived" and job.name == derived_name(job)
    assert job.name.startswith("train-pytorch-") and len(job.name) == len("train-pytorch-") + 10
    assert job_of(json.loads(json.dumps(BASE))).name == job.name  # the same spec, the same run
    named = job_of(digits_spec("mine", "pytorch"))
    assert (named.name, named.name_source) == ("mine", "spec")


@pytest.mark.parametrize("path, value", [
    ("trainConfig.framework", "xgboost"),
    ("trainConfig.lr", 0.01),
    ("trainConfig.batchSize", 64),
    ("trainConfig.seed", 7),
    ("trainConfig.model", {"filters": [8, 16, 32], "dense": 32}),
    ("config.numWorkers", 1),
    ("data.maxTrainSamples", 256),
    ("data.source", "synthetic"),
])
def test_what_changes_the_model_changes_the_name(path, value):
    assert job_of(changed(BASE, path, value)).name != job_of(BASE).name


@pytest.mark.parametrize("path, value", [
    ("trainConfig.epochs", 5),  # more epochs continue the same run
    ("checkpoint.storagePath", "/elsewhere"),
    ("checkpoint.maxFailures", 0),
    ("checkpoint.everyEpochs", 2),
    ("config.resourceWaitSeconds", 5),
    ("config.resourcesPerWorker", {"cpu": 2}),
    ("config.healthCheck", {"workerTimeoutSeconds": 60}),
])
def test_operational_fields_keep_the_name(path, value):
    assert job_of(changed(BASE, path, value)).name == job_of(BASE).name


def test_a_search_is_named_by_the_search():
    base = unnamed(tune_spec("t"))
    job = job_of(base)
    assert job.name.startswith("tune-pytorch-")
    assert job_of(changed(base, "tuneConfig.numSamples", 3)).name != job.name
    assert job_of(changed(base, "tuneConfig.scheduler", "asha")).name != job.name
    assert job_of(changed(base, "trainConfig.epochs", 4)).name != job.name  # a search's budget is its identity
    assert job_of(changed(base, "tuneConfig.maxConcurrentTrials", 1)).name == job.name


def test_elastic_workers():
    job = job_of(changed(BASE, "config.numWorkers", {"min": 1, "max": 4}))
    assert (job.workers.min_count, job.workers.count) == (1, 4)
    assert job_of(BASE).workers.min_count is None
    with pytest.raises(SpecError) as info:
        job_of(changed(unnamed(tune_spec("t")), "config.numWorkers", {"min": 1, "max": 2}))
    assert info.value.field == "config.numWorkers" and "mode train" in info.value.message


def test_elastic_workers_become_rays_scaling_config():
    from training.frameworks.trainer import scaling_config

    assert scaling_config(job_of(changed(BASE, "config.numWorkers", {"min": 1, "max": 4})).workers).num_workers == (1, 4)
    assert scaling_config(job_of(BASE).workers).num_workers == 2


def test_collective_timeout_from_the_spec_then_the_chart():
    from training.frameworks.pytorch import collective_timeout

    chart = {"TRAINING_COLLECTIVE_TIMEOUT_SECONDS": "600"}
    assert collective_timeout(job_of(BASE).training, {}) is None
    assert collective_timeout(job_of(BASE).training, chart) == 600
    assert collective_timeout(job_of(changed(BASE, "trainConfig.collectiveTimeoutSeconds", 120)).training, chart) == 120
    with pytest.raises(SpecError, match="not a number"):
        collective_timeout(job_of(BASE).training, {"TRAINING_COLLECTIVE_TIMEOUT_SECONDS": "ten"})


def test_health_checks_are_rays_settings_while_the_trainer_starts(monkeypatch):
    from training.frameworks.trainer import health_check_settings

    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
    monkeypatch.delenv("RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S", raising=False)
    job = job_of(changed(BASE, "config.healthCheck", {"workerTimeoutSeconds": 90, "intervalSeconds": 1}))
    with health_check_settings(job.workers.health_check) as wanted:
        assert wanted == {"RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S": "90", "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "1"}
        assert os.environ["RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S"] == "90"
    assert os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] == "0.5"  # put back
    assert "RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S" not in os.environ


def test_the_settings_are_ones_ray_train_passes_to_its_controller():
    """The names are Ray's: Ray Train propagates exactly these from the driver (so a typo here would be inert)."""
    import ray.train.v2._internal.constants as ray_train_constants  # read, not used by the package

    from training.frameworks.trainer import HEALTH_CHECK_ENV

    assert set(HEALTH_CHECK_ENV.values()) <= ray_train_constants.ENV_VARS_TO_PROPAGATE


def test_a_named_run_refuses_to_continue_under_changed_settings(tmp_path):
    """Editing lr (or the batch, the model, the data) of a named job gave a new RayJob but the same run: it resumed
    the old weights under the new settings, or trained nothing more and reported the old metrics."""
    from training.job.identity import check_same_run, record
    spec = digits_spec("named-run", lr=0.001)
    spec["checkpoint"]["storagePath"] = str(tmp_path)
    record(job_of(spec))
    check_same_run(job_of(spec))                                   # make retry: the same spec continues
    check_same_run(job_of(changed(spec, "trainConfig.epochs", 9)))  # more epochs continue the same run
    with pytest.raises(SpecError) as info:
        check_same_run(job_of(changed(changed(spec, "trainConfig.lr", 0.01), "trainConfig.batchSize", 64)))
    assert info.value.field == "name"
    assert "batchSize: 32 -> 64; lr: 0.001 -> 0.01" in info.value.message, info.value.message
    assert "new name" in info.value.details and "checkpoint.resumeFrom" in info.value.details
    check_same_run(job_of(changed(changed(spec, "trainConfig.lr", 0.01), "name", "named-run-lr-0.01")))
