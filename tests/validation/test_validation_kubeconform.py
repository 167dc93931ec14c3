"""The kubeconform path, with a fake kubeconform on PATH (the real binary is not installable here)."""

from __future__ import annotations

import json

import pytest

from tests.validation.support import FIXTURES, KUBE_VERSION
from validation import validate_manifests
from validation.kubeconform import build_command, normalize_kube_version, parse_output

GOOD = FIXTURES / "apps" / "good"
INVALID_DIR = FIXTURES / "schema" / "invalid"
TEMPLATE = "{{ .ResourceKind }}{{ .KindSuffix }}.json"


def test_command_construction(tmp_path):
    command = build_command("kubeconform", "v1.34", tmp_path, ["a.yaml", "b.yaml"])
    assert command == [
        "kubeconform", "-strict", "-summary", "-output", "json", "-kubernetes-version", "1.34.0",
        "-schema-location", f"{tmp_path}/{TEMPLATE}", "-schema-location", "default", "a.yaml", "b.yaml",
    ]
    assert normalize_kube_version("1.34.0") == "1.34.0"


def test_kubeconform_is_used_when_on_path(crds, fake_kubeconform):
    report = validate_manifests(GOOD, KUBE_VERSION, crds, env_name="good")
    assert report.backend == "kubeconform"
    assert report.summary_line() == "good: 17 resources checked, 17 valid, 0 invalid, 0 skipped"
    assert report.ok, report.render()

    call = json.loads(fake_kubeconform.read_text())
    argv = call["argv"]
    assert argv[:6] == ["-strict", "-summary", "-output", "json", "-kubernetes-version", "1.34.0"]
    locations = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-schema-location"]
    assert locations[0].endswith("/" + TEMPLATE) and locations[1] == "default"
    assert len([a for a in argv if a.endswith(".yaml")]) == 17
    # The same schemas as in-process, in kubeconform's file layout.
    assert {"raycluster-ray-v1.json", "rayjob-ray-v1.json", "pytorchjob-kubeflow-v1.json",
            "application-argoproj-v1alpha1.json", "applicationset-argoproj-v1alpha1.json",
            "appproject-argoproj-v1alpha1.json", "namespace-v1.json", "service-v1.json", "configmap-v1.json",
            "persistentvolumeclaim-v1.json", "storageclass-storage-v1.json", "resourcequota-v1.json",
            "deployment-apps-v1.json", "ingress-networking-v1.json", "secret-v1.json",
            "networkpolicy-networking-v1.json"} == set(call["schema_files"])


def test_kubeconform_and_in_process_agree(crds, fake_kubeconform):
    via_kubeconform = validate_manifests(INVALID_DIR, KUBE_VERSION, crds, env_name="invalid")
    in_process = validate_manifests(INVALID_DIR, KUBE_VERSION, crds, env_name="invalid", backend="in-process")
    assert via_kubeconform.backend == "kubeconform"
    assert via_kubeconform.summary_line() == in_process.summary_line()
    assert [(r.file, r.status) for r in via_kubeconform.results] == [(r.file, r.status) for r in in_process.results]
    wrong_type = next(r for r in via_kubeconform.results if r.file.endswith("raycluster-wrong-type.yaml"))
    assert [str(i) for i in wrong_type.issues] == ["spec.workerGroupSpecs[0].replicas: 'two' is not of type 'integer'"]


def test_in_process_is_used_when_kubeconform_is_absent(crds, no_kubeconform):
    report = validate_manifests(GOOD, KUBE_VERSION, crds)
    assert report.backend == "in-process"
    assert report.ok


def test_backend_kubeconform_requested_but_absent(crds, no_kubeconform):
    from validation import KubeconformError

    with pytest.raises(KubeconformError, match="not on PATH"):
        validate_manifests(GOOD, KUBE_VERSION, crds, backend="kubeconform")


def test_canned_output_is_parsed(crds, make_env, fake_kubeconform, tmp_path, monkeypatch):
    apps = make_env(GOOD / "trainer" / "raycluster-trainer.yaml", GOOD / "platform" / "service-ray-dashboard.yaml")
    raycluster = str((apps / "app" / "raycluster-trainer.yaml").resolve())
    canned = tmp_path / "out.json"
    canned.write_text(json.dumps({
        "resources": [{
            "filename": raycluster, "kind": "RayCluster", "name": "trainer", "version": "ray.io/v1",
            "status": "statusInvalid", "msg": "problem",
            "validationErrors": [{"path": "/spec/workerGroupSpecs/0/replicas",
                                  "msg": "expected integer, but got string"}],
        }],
        "summary": {"valid": 1, "invalid": 1, "errors": 0, "skipped": 0},
    }))
    monkeypatch.setenv("FAKE_KUBECONFORM_OUTPUT", str(canned))
    monkeypatch.setenv("FAKE_KUBECONFORM_EXIT", "1")
    report = validate_manifests(apps, KUBE_VERSION, crds)
    assert report.summary_line() == "test: 2 resources checked, 1 valid, 1 invalid, 0 skipped"
    assert "spec.workerGroupSpecs[0].replicas: expected integer, but got string" in report.render()


def test_unparseable_output_is_an_error(crds, make_env, fake_kubeconform, tmp_path, monkeypatch):
    from validation import KubeconformError

    canned = tmp_path / "out.txt"
    canned.write_text("panic: something broke\n")
    monkeypatch.setenv("FAKE_KUBECONFORM_OUTPUT", str(canned))
    with pytest.raises(KubeconformError, match="not JSON"):
        validate_manifests(make_env(GOOD / "platform" / "namespace-ray-training.yaml"), KUBE_VERSION, crds)


def test_parse_output_old_and_new_formats():
    old = parse_output(json.dumps({"resources": [
        {"filename": "a.yaml", "kind": "Service", "version": "v1", "status": "INVALID",
         "msg": "spec.ports.0.port: Invalid type. Expected: integer, given: string"}],
        "summary": {"valid": 0, "invalid": 1, "errors": 0, "skipped": 0}}))
    assert old.results[0].outcome == "invalid"
    assert str(old.results[0].issues[0]).startswith("(document): spec.ports.0.port")
    new = parse_output(json.dumps({"resources": [
        {"filename": "b.yaml", "kind": "X", "version": "v1", "status": "statusError",
         "msg": "could not find schema for X"}], "summary": {"errors": 1}}))
    assert new.results[0].outcome == "error" and new.summary == {"errors": 1}
