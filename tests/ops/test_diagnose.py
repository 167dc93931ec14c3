"""make diagnose's classes against the messages the systems print (tests/ops/fixtures/failures.yaml: the text of
each at the pinned versions, with the file and line that prints it). Every class has a fixture; a healthy run's
lines and near misses (exit 137 without OOMKilled, EFA in use) match nothing."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ops import diagnose

FIXTURES = yaml.safe_load((Path(__file__).parent / "fixtures" / "failures.yaml").read_text())


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_each_failure_is_named_by_its_classes_and_no_other(name):
    case = FIXTURES[name]
    evidence = [(source, text) for source, text in case["evidence"]]
    findings = diagnose.classify(evidence)
    assert [f.failure.name for f in findings] == case["expect"], [(f.failure.name, f.evidence) for f in findings]
    for finding in findings:
        assert (finding.source, finding.evidence) in [(s, t.strip()[:400]) for s, t in evidence]


def test_every_class_has_a_fixture():
    covered = {c for case in FIXTURES.values() for c in case["expect"]}
    assert covered == set(diagnose.BY_NAME), set(diagnose.BY_NAME) ^ covered


def test_only_a_hung_collective_an_abort_or_a_deadline_is_retried():
    assert {c.name for c in diagnose.CLASSES if c.retryable} == {"nccl-timeout", "worker-aborted", "deadline-exceeded"}


def _diagnosis(name):
    case = FIXTURES[name]
    evidence = [(s, t) for s, t in case["evidence"]]
    result = diagnose.Diagnosis("job", "job-0a1b2c3d", "Failed/FAILED", diagnose.classify(evidence))
    result.last_lines = [f"{s}: {t}" for s, t in evidence[-10:]]
    return result


def test_a_retryable_diagnosis_needs_every_finding_retryable():
    assert _diagnosis("nccl-timeout-torch-2.5").retryable
    assert not _diagnosis("efa-rdma-on-g5").retryable  # an abort, caused by a setting: a retry would abort again
    assert not _diagnosis("unknown").retryable


def test_the_report_shows_evidence_source_and_fix():
    text = diagnose.render(_diagnosis("quota-kuberay-worker"))
    assert text.splitlines()[0] == "job: run job-0a1b2c3d is Failed/FAILED"
    assert "- the namespace quota refuses the pods [quota-exceeded; needs a change]" in text
    assert "evidence (event on RayCluster/digits-torch-0a8402cb-7xk2p): FailedToCreateWorkerPod: " in text
    assert "fix: platform.values.resourceQuota.hard" in text


def test_an_unknown_failure_says_so_and_shows_the_last_lines():
    text = diagnose.render(_diagnosis("unknown"))
    assert "- not a known failure; the last lines seen:" in text
    assert "KeyError: 'val_accuracy'" in text


def test_a_succeeded_run_has_nothing_to_diagnose():
    text = diagnose.render(diagnose.Diagnosis("job", "job-0a1b2c3d", "Complete/SUCCEEDED", succeeded=True))
    assert text == "job: run job-0a1b2c3d is Complete/SUCCEEDED; it succeeded, nothing to diagnose"
