"""Failures are told apart by their exception types, never by words in their messages: a worker whose process died,
a search every trial of which would fail the same way, a cluster that wants a token. No Ray cluster here."""

from __future__ import annotations

import pytest
from ray import exceptions

from training.errors import ClusterConnectError, DataError
from training.runtime.cluster import join_error
from training.runtime.failures import process_died, training_failure
from training.tune.events import MetricNotReported, _raised


class FailedRun(Exception):
    """What Ray Train raises when a worker group fails: the failures by rank."""

    def __init__(self, failures):
        super().__init__("worker group failed")
        self.worker_failures = failures


@pytest.mark.parametrize("exc, died", [
    (exceptions.ActorDiedError(), True), (exceptions.RayActorError(), True), (exceptions.LocalRayletDiedError(), True),
    (exceptions.WorkerCrashedError(), True), (RuntimeError("Died: connection closed by peer"), False),
    (type("CrashedError", (Exception,), {})(), False),
])
def test_a_dead_process_is_told_by_its_type(exc, died):
    assert process_died(exc) is died


def test_the_worker_whose_process_died_is_named_first():
    err = training_failure(FailedRun({0: RuntimeError("gloo: Connection closed by peer"),
                                      1: exceptions.RayActorError()}), max_failures=0)
    assert "worker rank 1 died: RayActorError" in str(err) and "(then rank 0: RuntimeError" in str(err)
    err = training_failure(FailedRun({0: RuntimeError("the worker Died"), 1: ValueError("bad")}), max_failures=2)
    assert "worker rank 0 failed: RuntimeError" in str(err)  # a message saying "Died" is not a dead process


def test_a_workers_own_error_wins():
    own = DataError("data.path: not found")
    assert training_failure(FailedRun({0: exceptions.ActorDiedError(), 1: own}), max_failures=1) is own


class Trial:
    def __init__(self, error):
        self.error = error

    def get_pickled_error(self):
        return self.error


def test_a_trial_error_is_told_by_its_type():
    raised = exceptions.RayTaskError("train_trial", "traceback", MetricNotReported("val_loss")).as_instanceof_cause()
    assert _raised(Trial(raised), MetricNotReported)
    wrapped = RuntimeError("trial failed")
    wrapped.__cause__ = MetricNotReported("val_loss")
    assert _raised(Trial(wrapped), MetricNotReported)
    assert not _raised(Trial(ValueError("MetricNotReported: val_loss")), MetricNotReported)
    assert not _raised(Trial(None), MetricNotReported)


def test_joining_a_token_cluster_says_how_by_the_exception_type():
    try:
        raise ConnectionError("could not connect") from exceptions.AuthenticationError("Invalid or missing token")
    except ConnectionError as exc:
        err = join_error("10.0.0.1:6379", exc)
    assert isinstance(err, ClusterConnectError) and "RAY_AUTH_MODE=token" in str(err)
    assert "AuthenticationError" in str(err)
    plain = join_error("10.0.0.1:6379", ConnectionError("AuthToken? no: the GCS at 10.0.0.1:6379 did not answer"))
    assert "RAY_AUTH_MODE" not in str(plain) and "10.0.0.1:6379" in str(plain)
