"""make scan without a cluster: the reviewed allow-list (every entry has a reason; bad entries are refused with the
file and entry), pod roles from their operators' labels, and checkov's JSON classified into passed / failed /
accepted. checkov itself runs on live pods in tests/e2e/test_08_scan.py."""
from __future__ import annotations

import pytest

from ops import scan
from ops.targets import OpsError


def test_the_committed_allowlist_loads_and_every_entry_says_why():
    entries = scan.load_allowlist()
    assert entries and all(len(e.reason) > 40 for e in entries)
    assert {e.check for e in entries} >= {"CKV_K8S_15", "CKV_K8S_43"}
    # fixed in every pod, the training-operator's init container included (our template): seccomp, NetworkPolicies,
    # capabilities, privilege escalation, the read-only root filesystem
    fixed = {"CKV_K8S_31", "CKV2_K8S_6", "CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_30", "CKV_K8S_37", "CKV_K8S_22"}
    assert not fixed & {e.check for e in entries}, "a fixed finding must not be accepted"


@pytest.mark.parametrize("text,expected", [
    ("accepted:\n  - check: CKV_K8S_15\n    reason: ''\n", "accepted[0] (CKV_K8S_15): the reason is empty"),
    ("accepted:\n  - check: CKV_K8S_15\n", "accepted[0] (CKV_K8S_15): the reason is empty"),
    ("accepted:\n  - reason: because\n", "accepted[0]: `check`"),
    ("accepted:\n  - check: CKV_K8S_8\n    reason: r\n    roles: [driver]\n", "unknown: driver"),
    ("accepted: {}\n", "a list `accepted:`"),
    ("accepted:\n  - check: CKV_K8S_38\n    reason: r\n    clusters: minikube-ray\n", "`clusters` is a list"),
])
def test_a_bad_allowlist_is_refused_naming_the_entry(tmp_path, text, expected):
    path = tmp_path / "allow.yaml"
    path.write_text(text)
    with pytest.raises(OpsError) as exc:
        scan.load_allowlist(path)
    assert str(path) in str(exc.value) and expected in str(exc.value), str(exc.value)


@pytest.mark.parametrize("labels,role", [
    ({"ray.io/node-type": "head", "ray.io/cluster": "c"}, "ray-head"),
    ({"ray.io/node-type": "worker"}, "ray-worker"),
    ({"batch.kubernetes.io/job-name": "digits-torch-0a8402cb"}, "submitter"),
    ({"training.kubeflow.org/replica-type": "master"}, "torchrun-master"),
    ({"training.kubeflow.org/replica-type": "Worker"}, "torchrun-worker"),
    ({}, "other"),
])
def test_roles_come_from_the_operators_labels(labels, role):
    assert scan.role_of(labels) == role


def test_findings_are_failed_unless_an_entry_covers_their_check_and_role():
    report = {"results": {
        "passed_checks": [{"check_id": "CKV_K8S_31", "resource": "Pod.ns.h"},
                          {"check_id": "CKV_K8S_1", "resource": "NetworkPolicy.ns.p"}],
        "failed_checks": [{"check_id": "CKV_K8S_8", "check_name": "Liveness", "resource": "Pod.ns.sub-x"},
                          {"check_id": "CKV_K8S_8", "check_name": "Liveness", "resource": "Pod.ns.h"},
                          {"check_id": "CKV_K8S_99", "check_name": "Other", "resource": "NetworkPolicy.ns.p"}]}}
    allow = [scan.Accepted("CKV_K8S_8", "a Job pod", ("submitter",))]
    result = scan.classify(report, allow, "eks", {"sub-x": "submitter", "h": "ray-head"})
    assert result.passed == 1  # pods only
    assert [(f.pod, f.accepted is not None) for f in result.findings] == [("h", False), ("sub-x", True)]
    assert result.summary() == "scan: 1 passed, 1 failed, 1 accepted"
    assert "FAILED CKV_K8S_8 Liveness -- pod h (ray-head)" in scan.render(result)
    assert scan.exit_code([result]) == 1
    clean = scan.classify({"results": {"passed_checks": [], "failed_checks": report["results"]["failed_checks"][:1]}},
                          allow, "eks", {"sub-x": "submitter"})
    assert scan.exit_code([clean]) == 0 and clean.summary() == "scan: 0 passed, 0 failed, 1 accepted"


def test_checkov_missing_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CHECKOV", str(tmp_path / "nope"))
    monkeypatch.setattr(scan, "ROOT", tmp_path)
    with pytest.raises(OpsError) as exc:
        scan.checkov_binary()
    assert "scripts/setup.sh scan" in str(exc.value)


def test_an_entry_narrowed_to_a_cluster_covers_only_that_clusters_pods():
    """The service-account token of minikube's standing cluster (Kubernetes token auth) is accepted; the same
    finding on a job's cluster fails the scan."""
    report = {"results": {"passed_checks": [], "failed_checks": [
        {"check_id": "CKV_K8S_38", "check_name": "SA token", "resource": f"Pod.ns.{pod}"}
        for pod in ("standing-head", "job-head")]}}
    allow = [scan.Accepted("CKV_K8S_38", "Ray's validator", ("ray-head", "ray-worker"), ("minikube-ray",))]
    result = scan.classify(report, allow, "minikube", {"standing-head": "ray-head", "job-head": "ray-head"},
                           {"standing-head": "minikube-ray", "job-head": "digits-torch-0a8402cb-x7k2p"})
    assert [(f.pod, f.accepted is not None) for f in result.findings] == [("job-head", False), ("standing-head", True)]
    committed = [a for a in scan.load_allowlist() if a.check == "CKV_K8S_38"]
    assert committed and all(a.clusters for a in committed), "a token mount is accepted only for named clusters"
