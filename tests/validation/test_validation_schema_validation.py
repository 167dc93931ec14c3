"""Schema validation: wrong types, unknown fields and missing required fields fail; valid resources pass."""

from __future__ import annotations

import pytest

from tests.validation.support import GOOD, INVALID_CASES, INVALID_DIR, KUBE_VERSION
from validation import MissingSchemasError, validate_manifests
from validation.report import INVALID, SKIPPED, VALID


def _validate(apps_dir, crds, **kwargs):
    return validate_manifests(apps_dir, KUBE_VERSION, crds, backend="in-process", **kwargs)


def test_valid_environment_passes(crds):
    report = _validate(GOOD, crds, env_name="good")
    assert report.ok, report.render()
    assert report.summary_line() == "good: 17 resources checked, 17 valid, 0 invalid, 0 skipped"
    assert report.backend == "in-process"
    kinds = {r.kind for r in report.results}
    assert {"RayCluster", "RayJob", "PyTorchJob", "Application", "ApplicationSet", "AppProject", "Namespace",
            "Service", "ConfigMap", "PersistentVolumeClaim", "StorageClass", "ResourceQuota", "Deployment",
            "Ingress"} <= kinds




@pytest.mark.parametrize("fixture, path, message", INVALID_CASES)
def test_invalid_manifest_fails_for_the_right_reason(crds, make_env, fixture, path, message):
    report = _validate(make_env(INVALID_DIR / fixture), crds)
    assert not report.ok
    assert report.summary_line() == "test: 1 resources checked, 0 valid, 1 invalid, 0 skipped"
    [result] = report.results
    assert result.status == INVALID
    assert any(issue.path == path and message in issue.message for issue in result.issues), result.issues
    assert f"invalid: {result.file}: {path}: " in report.render()


def test_every_invalid_fixture_is_covered():
    covered = {p.name for p in INVALID_DIR.glob("*.yaml")}
    tested = {case[0] for case in INVALID_CASES}
    assert covered - tested == {"widget-unknown-kind.yaml"}


def test_unknown_kind_is_skipped_and_fails(crds, make_env):
    report = _validate(make_env(INVALID_DIR / "widget-unknown-kind.yaml", GOOD / "platform" /
                                "namespace-ray-training.yaml"), crds)
    assert report.summary_line() == "test: 2 resources checked, 1 valid, 0 invalid, 1 skipped"
    assert not report.ok
    skipped = [r for r in report.results if r.status == SKIPPED]
    assert skipped[0].allowed_skip_reason is None
    assert "skipped (counts as a failure)" in report.render()
    assert "widgets.example.com/v1/Widget" in report.render()


def test_allow_listed_kind_is_skipped_without_failing(crds, make_env):
    allowed = {"widgets.example.com/v1/Widget": "test: widgets are validated by their own webhook"}
    report = _validate(make_env(INVALID_DIR / "widget-unknown-kind.yaml"), crds, allowed_skips=allowed)
    assert report.summary_line() == "test: 1 resources checked, 0 valid, 0 invalid, 1 skipped"
    assert report.ok
    assert "skipped (allow-listed: test: widgets are validated by their own webhook)" in report.render()


def test_allow_list_is_empty_and_documented():
    from validation import skip_allowlist

    assert skip_allowlist.ALLOWED_TO_SKIP == {}
    assert "Empty on purpose" in open(skip_allowlist.__file__).read()


def test_removed_builtin_api_version_is_skipped_not_missing_crds(tmp_path, make_env):
    apps = make_env(INVALID_DIR / "raycluster-wrong-type.yaml")
    (apps / "app" / "deployment-old.yaml").write_text(
        "apiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: old}\n")
    (apps / "app" / "raycluster-wrong-type.yaml").unlink()
    report = validate_manifests(apps, KUBE_VERSION, tmp_path / "nowhere", backend="in-process")
    assert report.skipped == 1 and not report.ok
    assert "not a built-in kind of Kubernetes 1.34" in report.render()


@pytest.mark.parametrize("location_kind", ["missing", "empty"])
def test_missing_schema_location_says_how_to_get_schemas(tmp_path, make_env, location_kind):
    location = tmp_path / "schemas"
    if location_kind == "empty":
        location.mkdir()
    apps = make_env(GOOD / "trainer" / "raycluster-trainer.yaml")
    with pytest.raises(MissingSchemasError) as caught:
        validate_manifests(apps, KUBE_VERSION, location, backend="in-process")
    message = str(caught.value)
    assert str(location) in message
    assert "ray.io/v1 RayCluster" in message
    assert "make schemas" in message
    assert "RAY_GITOPS_SCHEMA_LOCATION" in message and "--schema-location" in message
    assert "../shared/crds" in message


def test_missing_schema_location_is_fine_without_custom_resources(tmp_path, make_env):
    apps = make_env(GOOD / "platform" / "namespace-ray-training.yaml")
    report = validate_manifests(apps, KUBE_VERSION, tmp_path / "nowhere", backend="in-process")
    assert report.ok and report.valid == 1


def test_schema_location_from_env_var_and_flag_precedence(crds, tmp_path, make_env, monkeypatch):
    apps = make_env(GOOD / "trainer" / "raycluster-trainer.yaml")
    monkeypatch.setenv("RAY_GITOPS_SCHEMA_LOCATION", str(crds))
    assert validate_manifests(apps, KUBE_VERSION, backend="in-process").ok  # env var used
    with pytest.raises(MissingSchemasError):  # the flag wins over the env var
        validate_manifests(apps, KUBE_VERSION, tmp_path / "nowhere", backend="in-process")
    monkeypatch.setenv("RAY_GITOPS_SCHEMA_LOCATION", str(tmp_path / "nowhere"))
    assert validate_manifests(apps, KUBE_VERSION, crds, backend="in-process").ok


def test_crds_are_found_recursively(crds, tmp_path, make_env):
    nested = tmp_path / "a" / "b" / "c"
    nested.mkdir(parents=True)
    (nested / "rayclusters.yaml").symlink_to(next(crds.rglob("ray.io_rayclusters.yaml")))
    report = validate_manifests(make_env(GOOD / "trainer" / "raycluster-trainer.yaml"), KUBE_VERSION,
                                tmp_path / "a", backend="in-process")
    assert report.ok


def test_version_note_when_declared_version_is_not_shipped(crds, make_env):
    report = validate_manifests(make_env(GOOD / "platform" / "namespace-ray-training.yaml"), "1.40.2", crds,
                                backend="in-process")
    assert report.builtin_schema_version == "1.37"
    assert any("nearest, 1.37" in note for note in report.notes)


def test_valid_statuses_are_counted(crds):
    report = _validate(INVALID_DIR, crds, env_name="invalid")
    assert report.summary_line() == "invalid: 17 resources checked, 0 valid, 16 invalid, 1 skipped"
    assert {r.status for r in report.results} == {INVALID, SKIPPED}
    assert VALID not in {r.status for r in report.results}
