"""The job is parsed once into typed, immutable parts: nothing downstream can change it, a trial's job is a new one,
and it crosses process boundaries (Ray and Tune pickle it) intact."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from ray import cloudpickle  # what Ray serializes a trainer's config and Tune's trainable with

from tests.training.support import digits_spec, tune_spec
from training.job import normalize, validate_spec
from training.job.parts import FrozenMap, Job, freeze, thaw
from training.tune.trial import trial_job


def job_of(spec: dict) -> Job:
    validate_spec(spec)
    return normalize(spec, {})


def test_a_job_cannot_be_changed_in_place():
    spec = digits_spec("frozen", "xgboost")
    spec["trainConfig"]["xgboost"] = {"max_depth": 3}
    job = job_of(spec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.checkpoint.storage_path = "/elsewhere"  # type: ignore[misc]
    with pytest.raises(TypeError, match="read-only"):
        job.training.xgboost["max_depth"] = 9
    with pytest.raises(TypeError, match="read-only"):
        job.training.xgboost.update(eta=1)
    assert job.training.xgboost == {"max_depth": 3}


def test_the_spec_dict_is_not_shared_with_the_job():
    spec = digits_spec("copy", "pytorch")
    spec["trainConfig"]["params"] = {"layers": [1, 2]}
    job = job_of(spec)
    spec["trainConfig"]["params"]["layers"].append(3)
    assert job.training.params == {"layers": (1, 2)}
    assert thaw(job.training.params) == {"layers": [1, 2]}


@pytest.mark.parametrize("dumps, loads", [(pickle.dumps, pickle.loads), (cloudpickle.dumps, pickle.loads)])
def test_a_job_pickles_intact(dumps, loads):
    spec = tune_spec("pickled")
    spec["config"]["healthCheck"] = {"workerTimeoutSeconds": 60}
    job = job_of(spec)
    again = loads(dumps(job))
    assert again == job and isinstance(again.workers.health_check, FrozenMap)
    with pytest.raises(TypeError):
        again.workers.health_check["x"] = 1


def test_a_trials_job_is_a_new_job_with_the_sampled_values():
    spec = tune_spec("trial")
    spec["tuneConfig"]["searchSpace"] = {
        "lr": {"type": "loguniform", "min": 1e-4, "max": 1e-1},
        "batchSize": {"type": "quniform", "min": 16, "max": 64, "q": 16},
        "model.filters": {"type": "choice", "values": [[8, 16], [16, 32]]},
    }
    base = job_of(spec)
    trial = trial_job(base, {"lr": 0.02, "batchSize": 32.0, "model.filters": [16, 32], "unrelated": 1}, "abc_00001")
    assert (trial.training.lr, trial.training.batch_size, trial.training.model.filters) == (0.02, 32, (16, 32))
    assert isinstance(trial.training.batch_size, int)  # quniform samples floats; the field is an integer
    assert trial.name == f"{base.name}-abc_00001" and trial.checkpoint.keep_best is None
    assert base.training.lr != 0.02 and base.training.model.filters != (16, 32)  # the base job is untouched


def test_setting_a_field_the_training_does_not_have_is_refused():
    base = job_of(digits_spec("x", "pytorch"))
    with pytest.raises(KeyError):
        base.training.with_value("model.depth", 3)
    assert base.training.with_value("params.hidden", 64).params == {"hidden": 64}


def test_freeze_and_thaw_round_trip():
    value = {"a": [1, {"b": [2, 3]}], "c": None}
    frozen = freeze(value)
    assert isinstance(frozen, FrozenMap) and frozen["a"][1]["b"] == (2, 3)
    assert thaw(frozen) == value


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "xgboost"])
def test_what_a_spec_leaves_out_takes_the_one_default_written_on_the_job(framework):
    """The parser writes no default of its own: a spec that says only what it must gets the dataclasses' defaults,
    and its framework's (from the registry)."""
    from training.frameworks import registry
    from training.job.parts import Checkpoint, Data, Model, Training, Workers

    job = job_of({"mode": "train", "config": {}, "trainConfig": {"framework": framework}})
    fw = registry.get(framework)
    assert (job.training.epochs, job.training.batch_size, job.training.lr) == (fw.epochs, fw.batch_size, fw.lr)
    assert job.training.seed == Training.seed and job.training.model == Model() and job.data == Data()
    default_workers = Workers()
    assert (job.workers.count, job.workers.cpu, job.workers.gpu, job.workers.placement_strategy,
            job.workers.resource_wait_s) == (default_workers.count, default_workers.cpu, default_workers.gpu,
                                             default_workers.placement_strategy, default_workers.resource_wait_s)
    default_ck = Checkpoint(storage_path="")
    assert (job.checkpoint.every_epochs, job.checkpoint.keep_best, job.checkpoint.metric, job.checkpoint.metric_mode,
            job.checkpoint.max_failures) == (default_ck.every_epochs, default_ck.keep_best, default_ck.metric,
                                             default_ck.metric_mode, default_ck.max_failures)


@pytest.mark.parametrize("block", ["config", "trainConfig.scalingConfig"])
def test_a_check_on_the_typed_job_names_the_block_the_user_wrote(block):
    from training.errors import SpecError

    spec = digits_spec("elastic", "pytorch")
    workers = {"numWorkers": {"min": 3, "max": 2}}
    if block == "config":
        spec["config"].update(workers)
    else:
        spec["trainConfig"]["scalingConfig"] = workers
    with pytest.raises(SpecError) as err:
        validate_spec(spec)
    assert err.value.field == f"{block}.numWorkers" and "min 3 is above max 2" in str(err.value)
