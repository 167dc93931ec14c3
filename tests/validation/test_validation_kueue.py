"""Kueue's kinds (kueue.x-k8s.io/v1beta2 ResourceFlavor, ClusterQueue, LocalQueue) against the pinned Kueue CRDs.

../shared/crds holds none: when no schema location serves a kueue.x-k8s.io kind, validation reads the CRDs of the
pinned module sigs.k8s.io/kueue (versions.yaml kueue) in place from Go's module cache. Without Go, or when the
download fails, the kinds are skipped, which counts as a failure, and the message says how to get them.
"""
from __future__ import annotations

import os

import pytest

from tests.validation.support import GOOD, KUBE_VERSION, KUEUE, KUEUE_FIXTURES, KUEUE_INVALID_CASES, REPO_ROOT
from validation import MissingSchemasError, module_crds, validate_manifests
from validation.crd_schemas import CrdSchemaStore
from validation.report import INVALID, SKIPPED, VALID

KUEUE_GOOD = KUEUE_FIXTURES / "good"
KUEUE_INVALID = KUEUE_FIXTURES / "invalid"


def _validate(apps_dir, location, **kwargs):
    return validate_manifests(apps_dir, KUBE_VERSION, location, backend="in-process", **kwargs)


def test_the_pinned_version_is_versions_yaml():
    from generator import versions
    assert (KUEUE.module, KUEUE.version) == ("sigs.k8s.io/kueue", versions.pinned().kueue)
    assert module_crds.source_for("kueue.x-k8s.io/v1beta2") is KUEUE
    assert module_crds.source_for("ray.io/v1") is None and module_crds.source_for("v1") is None


def test_kueue_kinds_validate_against_the_module_crds(crds, kueue_crd_dir, fresh_module_crds):
    report = _validate(KUEUE_GOOD, crds, env_name="kueue")
    assert report.summary_line() == "kueue: 3 resources checked, 3 valid, 0 invalid, 0 skipped", report.render()
    assert {r.kind for r in report.results} == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    assert [n for n in report.notes if "Go's module cache" in n] == [
        f"Kueue's CRDs (kueue.x-k8s.io) from the Go module sigs.k8s.io/kueue@{KUEUE.version}, read from Go's "
        f"module cache (no schema location serves them): {kueue_crd_dir}"]
    assert report.schema_location.split(os.pathsep) == [str(crds), str(kueue_crd_dir)]


def test_the_schema_is_the_upstream_v1beta2_clusterqueue(kueue_crd_dir):
    crd = CrdSchemaStore(kueue_crd_dir).lookup("kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert crd is not None and crd.source == kueue_crd_dir / "kueue.x-k8s.io_clusterqueues.yaml"
    assert crd.schema["properties"]["spec"]["additionalProperties"] is False


def test_every_rendered_kueue_object_validates(crds, make_env, fresh_module_crds):
    """What the generator renders today (apps/*/**): every kueue.x-k8s.io file, ClusterQueues among them."""
    rendered = [p for p in sorted(REPO_ROOT.glob("apps/**/*.yaml"))
                if "apiVersion: kueue.x-k8s.io/" in p.read_text()]
    assert any(p.name.startswith("clusterqueue-") for p in rendered), "no rendered ClusterQueue under apps/"
    apps = make_env()
    for index, path in enumerate(rendered):  # one folder each: two clusters render files of the same name
        folder = apps / f"{index:03d}"
        folder.mkdir()
        (folder / path.name).write_text(path.read_text())
    report = _validate(apps, crds)
    assert report.ok, report.render()
    assert report.valid == len(rendered) and report.skipped == 0


@pytest.mark.parametrize("fixture, path, message", KUEUE_INVALID_CASES)
def test_an_invalid_kueue_object_is_refused_at_its_path(crds, make_env, fixture, path, message):
    report = _validate(make_env(KUEUE_INVALID / fixture), crds)
    assert not report.ok
    [result] = report.results
    assert result.status == INVALID
    assert any(issue.path == path and message in issue.message for issue in result.issues), result.issues
    assert f"invalid: {result.file}: {path}: " in report.render()


def test_every_invalid_kueue_fixture_is_covered():
    assert {p.name for p in KUEUE_INVALID.glob("*.yaml")} == {case[0] for case in KUEUE_INVALID_CASES}


def test_a_location_serving_kueue_comes_before_the_module(crds, kueue_crd_dir, tmp_path, no_go):
    """No Go at all, and Kueue's CRDs under a schema location (as `make schemas` puts them): they are used, and Go is
    never asked."""
    mine = tmp_path / "kueue-crds"
    mine.mkdir()
    for path in kueue_crd_dir.glob("*.yaml"):
        (mine / path.name).symlink_to(path)
    report = _validate(KUEUE_GOOD, [crds, mine])
    assert report.ok, report.render()
    assert not [n for n in report.notes if "module cache" in n]


def test_go_is_asked_only_for_kinds_no_location_serves_and_once(crds, monkeypatch, fresh_module_crds):
    calls = []
    real = module_crds._download

    def spy(source, timeout):
        calls.append(source.module)
        return real(source, timeout)

    monkeypatch.setattr(module_crds, "_download", spy)
    assert _validate(GOOD, crds).ok and calls == []  # no Kueue kind: no Go
    assert _validate(KUEUE_GOOD, crds).ok and _validate(KUEUE_GOOD, crds).ok
    assert calls == ["sigs.k8s.io/kueue"]  # one answer per process


def test_a_version_the_module_does_not_serve_is_skipped_naming_where_it_looked(crds, kueue_crd_dir, make_env,
                                                                             fresh_module_crds):
    apps = make_env(KUEUE_GOOD / "platform" / "localqueue-training.yaml")
    path = apps / "app" / "localqueue-training.yaml"
    path.write_text(path.read_text().replace("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v9"))
    report = _validate(apps, crds)
    assert not report.ok and [r.status for r in report.results] == [SKIPPED]
    assert f"no CRD under {crds} or {kueue_crd_dir} serves it" in report.render()


def test_without_go_the_kueue_kinds_are_skipped_and_fail_with_how_to_get_them(crds, no_go):
    report = _validate(KUEUE_GOOD, crds)
    assert not report.ok
    assert report.summary_line() == "good: 3 resources checked, 0 valid, 0 invalid, 3 skipped"
    assert {r.status for r in report.results} == {SKIPPED} and all(r.allowed_skip_reason is None
                                                                    for r in report.results)
    text = report.render()
    assert text.count("skipped (counts as a failure)") == 3
    assert f"no CRD under {crds} serves it" in text
    assert "Go is not installed (no `go` on PATH)" in text
    assert f"go mod download {KUEUE.module}@{KUEUE.version}" in text and "make schemas" in text


def test_a_failed_download_is_skipped_with_gos_message(crds, make_env, go_offline_empty_cache):
    report = _validate(make_env(KUEUE_GOOD / "platform" / "clusterqueue-eks.yaml"), crds)
    assert not report.ok
    [result] = report.results
    assert result.status == SKIPPED and result.allowed_skip_reason is None
    [issue] = result.issues
    assert f"`go mod download -json {KUEUE.module}@{KUEUE.version}` failed:" in issue.message
    assert "module lookup disabled by GOPROXY=off" in issue.message
    assert "make schemas" in issue.message


def test_no_location_and_no_go_says_how_to_get_the_schemas(tmp_path, make_env, no_go):
    with pytest.raises(MissingSchemasError) as caught:
        _validate(make_env(KUEUE_GOOD / "platform" / "clusterqueue-eks.yaml"), tmp_path / "none")
    message = str(caught.value)
    assert f"schema location {tmp_path / 'none'} does not exist" in message
    assert "kueue.x-k8s.io/v1beta2 ClusterQueue" in message
    assert "Go is not installed" in message and "make schemas" in message
    assert f"Kueue {KUEUE.version}" in message


def test_the_module_alone_serves_kueue_kinds_when_no_location_holds_crds(tmp_path, fresh_module_crds):
    report = _validate(KUEUE_GOOD, tmp_path / "none")
    assert report.ok and report.valid == 3, report.render()


def test_the_module_does_not_stand_in_for_other_crds(tmp_path, make_env, fresh_module_crds):
    """A RayCluster with no location holding CRDs still stops with how to get them, Kueue served or not."""
    apps = make_env(GOOD / "trainer" / "raycluster-trainer.yaml", KUEUE_GOOD / "platform" / "clusterqueue-eks.yaml")
    with pytest.raises(MissingSchemasError, match="ray.io/v1 RayCluster") as caught:
        _validate(apps, tmp_path / "none")
    assert "ClusterQueue" not in str(caught.value).split("\n")[1]


def test_kueue_kinds_reach_kubeconform(crds, fake_kubeconform, fresh_module_crds):
    import json
    report = validate_manifests(KUEUE_GOOD, KUBE_VERSION, crds, env_name="kueue")
    assert report.backend == "kubeconform" and report.ok, report.render()
    assert {r.status for r in report.results} == {VALID}
    assert {"resourceflavor-kueue-v1beta2.json", "clusterqueue-kueue-v1beta2.json",
            "localqueue-kueue-v1beta2.json"} <= set(json.loads(fake_kubeconform.read_text())["schema_files"])


def test_a_crd_pattern_with_go_inline_flags_is_read_as_the_api_server_reads_it():
    """RE2 takes `(?i)` after the start (Kueue's AdmissionCheck parameters.kind: `^(?i)[a-z]...`); Python's re
    refuses it there, so the in-process validator scopes it: case-insensitive, still anchored, still refusing."""
    import re

    from validation.schema_validation import python_pattern
    pattern = python_pattern("^(?i)[a-z]([-a-z0-9]*[a-z0-9])?$")
    assert pattern == "^(?i:[a-z]([-a-z0-9]*[a-z0-9])?$)"
    assert re.search(pattern, "MultiKueueConfig") and not re.search(pattern, "9-config")
    assert python_pattern("^[a-z]+$") == "^[a-z]+$" and python_pattern("(?i)^a$") == "(?i)^a$"
