"""`make scan` (issue 15) on the e2e cluster: checkov 3.3.30 on the pods the operators actually created (KubeRay's
heads, workers and init containers, the submitters, the training-operator's masters and workers with its init
container), with the namespaces' NetworkPolicies beside them. Every finding is fixed or accepted with a reason in
security/checkov-allowlist.yaml; a pod that breaks a check nobody accepted fails the scan, named."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from e2e import nodes

ENVS = nodes.environments()
SUMMARY = re.compile(r"^(\S+): scan: (\d+) passed, (\d+) failed, (\d+) accepted$", re.M)


@pytest.fixture(scope="module")
def scanned(e2e, bootstrapped, tmp_path_factory):
    keep = tmp_path_factory.mktemp("scan")
    proc = e2e.ops("scan", "--keep", str(keep), timeout=900)
    return proc, keep


def test_the_operators_pods_pass_checkov_or_are_accepted_with_a_reason(e2e, scanned):
    proc, keep = scanned
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = {m.group(1): tuple(map(int, m.group(2, 3, 4))) for m in SUMMARY.finditer(proc.stdout)}
    assert set(figures) == set(ENVS), proc.stdout
    for env, (passed, failed, _accepted) in figures.items():
        assert passed > 0 and failed == 0, (env, proc.stdout)
        scanned_pods = list((keep / env).glob("pod-*.yaml"))
        policies = list((keep / env).glob("networkpolicy-*.yaml"))
        assert scanned_pods and policies, (env, sorted(p.name for p in (keep / env).iterdir()))
    assert re.search(r"^scan: \d+ passed, 0 failed, \d+ accepted$", proc.stdout, re.M), proc.stdout
    (Path(e2e.current["logs"]) / "scan.txt").write_text(proc.stdout)  # the figures, kept with the run's logs


def test_a_pod_that_breaks_a_check_nobody_accepted_fails_the_scan(e2e, scanned):
    """A pod that Pod Security "restricted" admits (non-root, seccomp, no escalation, every capability dropped) but
    whose root filesystem is writable fails checkov's CKV_K8S_22, which nobody accepts any more, by name."""
    env = ENVS[0]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "e2e-writable-root", "labels": {"app": "debug"}},
            "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "shell", "image": "localhost/ray-training:0.1.0-cpu",
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}},
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                                   "limits": {"cpu": "10m", "memory": "16Mi"}}}]}}
    e2e.core(env).create_namespaced_pod(e2e.namespace(env), body)
    try:
        proc = e2e.ops("scan", "--env", env, timeout=600)
    finally:
        e2e.core(env).delete_namespaced_pod("e2e-writable-root", e2e.namespace(env), grace_period_seconds=0)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = re.findall(r"^FAILED (CKV\S+) .* -- pod e2e-writable-root \(other\)$", proc.stdout, re.M)
    assert "CKV_K8S_22" in failed, proc.stdout
    assert not {"CKV_K8S_31", "CKV_K8S_28", "CKV_K8S_20"} & set(failed), proc.stdout  # its hardening counts
    assert not re.search(r"^FAILED .* -- pod (?!e2e-writable-root)", proc.stdout, re.M), proc.stdout
