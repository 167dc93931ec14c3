"""make diagnose's classes against the messages the systems print (tests/ops/fixtures/failures.yaml: the text of
each at the pinned versions, with the file and line that prints it). Every class has a fixture; a healthy run's
lines and near misses (exit 137 without OOMKilled, EFA in use) match nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from ops import diagnose
from tests.support import load_yaml

FIXTURES = load_yaml((Path(__file__).parent / "fixtures" / "failures.yaml").read_text())


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


def _evidence_with_claim(phase: str) -> list[tuple[str, str]]:
    """evidence_of on a failed RayJob whose namespace holds a ProvisioningFailed event on the checkpoint claim (the
    PV controller's write conflict, which it retries) and whose claim is now `phase`."""
    from types import SimpleNamespace as NS

    from ops.jobs import Run
    from ops.targets import Target

    def event(kind, name, reason, message):
        return NS(involved_object=NS(kind=kind, name=name), reason=reason, message=message)

    events = [event("PersistentVolumeClaim", "fsx-claim", "ProvisioningFailed",
                    'Error saving claim: Operation cannot be fulfilled on persistentvolumeclaims "fsx-claim": the '
                    "object has been modified; please apply your changes to the latest version and try again")]
    core = NS(read_namespaced_persistent_volume_claim=lambda name, ns: NS(status=NS(phase=phase)),
              list_namespaced_event=lambda ns: NS(items=events))
    clients = NS(core=lambda ctx: core, custom=lambda ctx: NS(get_namespaced_custom_object=lambda *a: {}))
    target = Target("eks", "eks", "ray-training", "eks", "argocd", None,
                    {"cluster": {"checkpoints": {"enabled": True, "claimName": "fsx-claim"}}})
    run = Run("eks", "cifar10-torch", "RayJob", "cifar10-torch-1",
              {"status": {"jobDeploymentStatus": "Failed", "reason": "AppFailed", "message": "exit code 1"}})
    return diagnose.evidence_of(clients, target, run)


def test_a_bound_claims_old_provisioning_event_is_not_evidence():
    """Seen in the e2e: the claim bound after a retried conflict, and `make watch` refused to retry an NCCL timeout
    because the stale event matched claim-not-bound."""
    bound = _evidence_with_claim("Bound")
    assert not any("fsx-claim" in source or "fsx-claim" in line for source, line in bound), bound
    assert "claim-not-bound" not in {f.failure.name for f in diagnose.classify(bound)}
    pending = _evidence_with_claim("Pending")
    assert ("PersistentVolumeClaim fsx-claim", "claim fsx-claim is Pending") in pending
    assert any(line.startswith("ProvisioningFailed: Error saving claim") for _, line in pending), pending
    assert "claim-not-bound" in {f.failure.name for f in diagnose.classify(pending)}


def test_an_unknown_failure_shows_the_drivers_last_lines_not_the_ray_workers():
    """Seen on the e2e's real node: a job that failed on a bad data path, whose Ray worker pods printed only their
    raylet's start after the driver's error; the lines shown are the driver's (its submitter's) output."""
    from types import SimpleNamespace

    from ops.jobs import Run

    def pod(name):
        return SimpleNamespace(metadata=SimpleNamespace(name=name))
    run = Run("minikube", "digits-fault", "RayJob", "digits-fault-1", {"status": {}},
              pods={"submitter": [pod("digits-fault-1-abc")], "worker": [pod("digits-fault-1-w-1")]})
    evidence = [("status", "jobStatus FAILED"),
                ("log digits-fault-1-abc/ray-job-submitter",
                 "training: error: data.path /data/cifar-10-batches-py: no such directory"),
                ("log digits-fault-1-abc/ray-job-submitter", "Job 'digits-fault-1-xyz' failed"),
                *(("log digits-fault-1-w-1/ray-worker", f"INFO scripts.py:{i} -- Ray runtime started.")
                  for i in range(30))]
    shown = diagnose.last_lines(evidence, run)
    assert ("status", "jobStatus FAILED") in shown
    assert any("/data/cifar-10-batches-py" in text for _, text in shown)
    assert not any(source.startswith("log digits-fault-1-w-1") for source, _ in shown)
    no_driver_log = [e for e in evidence if "abc" not in e[0]]
    assert diagnose.last_lines(no_driver_log, run)[-1][0] == "log digits-fault-1-w-1/ray-worker"
