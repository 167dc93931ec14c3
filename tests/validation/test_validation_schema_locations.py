"""Several schema locations: RAY_GITOPS_SCHEMA_LOCATION / --schema-location take a list separated by os.pathsep (like
PATH), each directory searched recursively, in order; the first that serves a kind wins, and within one location the
pinned releases come first. One directory behaves as before."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.validation.support import GOOD, KUBE_VERSION
from validation import MissingSchemasError, resolve_schema_locations, validate_manifests
from validation.cli import main
from validation.crd_schemas import CrdSchemaStore
from validation.report import INVALID, VALID
from validation.schema_location import DEFAULT_SCHEMA_LOCATION, SCHEMA_LOCATION_ENV

RAYCLUSTER = GOOD / "trainer" / "raycluster-trainer.yaml"
# A RayCluster CRD of our own that serves ray.io/v1 with a spec of nothing: a RayCluster with any spec field is
# invalid against it, so which location served the kind shows in the outcome.
NARROW_RAYCLUSTER_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: rayclusters.ray.io
spec:
  group: ray.io
  names:
    kind: RayCluster
    plural: rayclusters
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties: {}
"""


def _join(*paths) -> str:
    return os.pathsep.join(str(p) for p in paths)


@pytest.fixture
def narrow(tmp_path):
    location = tmp_path / "narrow" / "nested"
    location.mkdir(parents=True)
    (location / "rayclusters.yaml").write_text(NARROW_RAYCLUSTER_CRD)
    return tmp_path / "narrow"


def test_resolution_splits_on_the_path_separator(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert resolve_schema_locations(_join(a, b)) == [a, b]
    assert resolve_schema_locations(f"{a}{os.pathsep}{os.pathsep}{b}{os.pathsep}") == [a, b]  # empty entries
    assert resolve_schema_locations(a) == [a]  # a path is one directory
    assert resolve_schema_locations([a, _join(b, a)]) == [a, b, a]
    assert resolve_schema_locations(None, {SCHEMA_LOCATION_ENV: f" {_join(b, a)} "}) == [b, a]
    assert resolve_schema_locations(str(a), {SCHEMA_LOCATION_ENV: str(b)}) == [a]  # the flag wins
    assert resolve_schema_locations(os.pathsep, {SCHEMA_LOCATION_ENV: str(b)}) == [b]  # an empty list is no flag
    assert resolve_schema_locations(None, {}) == [DEFAULT_SCHEMA_LOCATION]
    assert resolve_schema_locations("~/crds") == [Path.home() / "crds"]


def test_the_first_location_that_serves_a_kind_wins(crds, narrow, make_env):
    apps = make_env(RAYCLUSTER)
    narrow_first = validate_manifests(apps, KUBE_VERSION, _join(narrow, crds), backend="in-process")
    assert [r.status for r in narrow_first.results] == [INVALID]
    assert any(i.path.startswith("spec.") and "unknown field" in i.message for i in narrow_first.results[0].issues)
    upstream_first = validate_manifests(apps, KUBE_VERSION, _join(crds, narrow), backend="in-process")
    assert [r.status for r in upstream_first.results] == [VALID], upstream_first.render()
    assert upstream_first.schema_location == _join(crds, narrow)


def test_a_later_location_serves_what_an_earlier_one_lacks(crds, narrow):
    """The narrow location serves only RayCluster: every other kind of the valid tree comes from the next one."""
    report = validate_manifests(GOOD, KUBE_VERSION, [narrow, crds], backend="in-process")
    statuses = {r.kind: r.status for r in report.results}
    assert statuses.pop("RayCluster") == INVALID
    assert set(statuses.values()) == {VALID} and {"RayJob", "PyTorchJob", "Application"} <= set(statuses)


def test_location_order_comes_before_the_pinned_release_within_one(crds, tmp_path):
    """../shared/crds holds training-operator v1.9.0 and the pinned v1.9.4: alone, the pinned one serves PyTorchJob;
    listed after a location holding only v1.9.0, the first location wins."""
    from generator import versions
    pinned = versions.pinned().training_operator
    old = tmp_path / "old"
    (old / "training-operator-v1.9.0").mkdir(parents=True)
    (old / "training-operator-v1.9.0" / "kubeflow.org_pytorchjobs.yaml").symlink_to(
        crds / "training-operator-v1.9.0" / "kubeflow.org_pytorchjobs.yaml")
    alone = CrdSchemaStore(crds).lookup("kubeflow.org/v1", "PyTorchJob")
    assert f"training-operator-{pinned}" in alone.source.parts
    both = CrdSchemaStore([old, crds]).lookup("kubeflow.org/v1", "PyTorchJob")
    assert both.source == old / "training-operator-v1.9.0" / "kubeflow.org_pytorchjobs.yaml"
    after = CrdSchemaStore([crds, old]).lookup("kubeflow.org/v1", "PyTorchJob")
    assert f"training-operator-{pinned}" in after.source.parts


def test_a_missing_location_in_the_list_is_passed_over(crds, tmp_path):
    report = validate_manifests(GOOD, KUBE_VERSION, _join(tmp_path / "none", crds), backend="in-process")
    assert report.ok, report.render()


def test_no_location_holding_crds_names_each(tmp_path, make_env):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MissingSchemasError) as caught:
        validate_manifests(make_env(RAYCLUSTER), KUBE_VERSION, _join(tmp_path / "none", empty), backend="in-process")
    first = str(caught.value).splitlines()[0]
    assert first == (f"No CRD schemas: none of the schema locations holds any: {tmp_path / 'none'} (does not exist), "
                     f"{empty} (contains no CRD YAML files).")
    assert f"DIR1{os.pathsep}DIR2" in str(caught.value)


def test_a_skipped_kind_names_every_location(crds, tmp_path, make_env):
    from tests.validation.support import INVALID_DIR
    report = validate_manifests(make_env(INVALID_DIR / "widget-unknown-kind.yaml"), KUBE_VERSION,
                                [tmp_path / "none", crds], backend="in-process")
    assert not report.ok
    assert f"no CRD under {tmp_path / 'none'} or {crds} serves it" in report.render()


def test_the_flag_and_the_environment_variable_take_a_list(crds, narrow, make_env, monkeypatch, no_kubeconform):
    apps = make_env(RAYCLUSTER)
    assert main(["manifests", "--apps-dir", str(apps), "--kube-version", KUBE_VERSION,
                 "--schema-location", _join(crds, narrow)]) == 0
    assert main(["manifests", "--apps-dir", str(apps), "--kube-version", KUBE_VERSION,
                 "--schema-location", _join(narrow, crds)]) == 1
    monkeypatch.setenv(SCHEMA_LOCATION_ENV, _join(narrow, crds))
    assert main(["manifests", "--apps-dir", str(apps), "--kube-version", KUBE_VERSION]) == 1
    monkeypatch.setenv(SCHEMA_LOCATION_ENV, _join(crds, narrow))
    assert main(["manifests", "--apps-dir", str(apps), "--kube-version", KUBE_VERSION]) == 0


def test_the_help_names_the_list_form(capsys):
    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    assert f"DIR[{os.pathsep}DIR...]" in capsys.readouterr().out


def test_kubeconform_gets_the_schemas_of_every_location(crds, narrow, tmp_path, fake_kubeconform):
    """kubeconform is given one directory of converted schemas: the kinds of every location reach it, each from the
    location that serves it first."""
    report = validate_manifests(GOOD, KUBE_VERSION, [narrow, crds], env_name="good")
    assert report.backend == "kubeconform"
    call = json.loads(fake_kubeconform.read_text())
    locations = [call["argv"][i + 1] for i, arg in enumerate(call["argv"]) if arg == "-schema-location"]
    assert len(locations) == 2 and locations[1] == "default"  # one local directory, then the registry
    assert {"raycluster-ray-v1.json", "rayjob-ray-v1.json", "pytorchjob-kubeflow-v1.json",
            "application-argoproj-v1alpha1.json"} <= set(call["schema_files"])
    statuses = {r.kind: r.status for r in report.results}
    assert statuses.pop("RayCluster") == INVALID and set(statuses.values()) == {VALID}
