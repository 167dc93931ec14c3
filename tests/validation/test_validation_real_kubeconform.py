"""The real kubeconform (v0.8.0, built from its Go module by e2e.components) with the schemas we give it: the
valid tree passes, and each invalid custom resource and built-in kind fails at the path the in-process validator
names. The fake binary (fixtures/fake_kubeconform.py) tests our handling of its output shapes; this is the tool."""
from __future__ import annotations

import pytest

from tests.support import built_binary
from tests.validation.support import GOOD, INVALID_CASES, INVALID_DIR, KUBE_VERSION, KUEUE_FIXTURES, KUEUE_INVALID_CASES
from validation import kubeconform as kc
from validation import validate_manifests
from validation.report import INVALID

# kubeconform reports the schema error as it sees it: the path is the check here, not the wording
SCHEMA_CASES = [case for case in INVALID_CASES if not case[0].startswith("configmap-")]


@pytest.fixture(scope="session")
def kubeconform():
    return str(built_binary("tools", "kubeconform", "kubeconform"))


def test_the_valid_tree_passes_kubeconform(crds, kubeconform):
    report = validate_manifests(GOOD, KUBE_VERSION, crds, backend="kubeconform", kubeconform_binary=kubeconform,
                                env_name="good")
    assert report.backend == "kubeconform"
    assert report.ok, report.render()
    assert report.summary_line() == "good: 17 resources checked, 17 valid, 0 invalid, 0 skipped"


@pytest.mark.parametrize("fixture, path, _message", SCHEMA_CASES)
def test_kubeconform_rejects_the_invalid_fixture_at_its_path(crds, make_env, kubeconform, fixture, path, _message):
    report = validate_manifests(make_env(INVALID_DIR / fixture), KUBE_VERSION, crds, backend="kubeconform",
                                kubeconform_binary=kubeconform)
    assert not report.ok
    [result] = report.results
    assert result.status == INVALID
    leaf = path.rsplit(".", 1)[-1].split("[")[0]
    # kubeconform names an unknown field in its parent's message ("(root): additional properties 'specs' not
    # allowed"); every other error at the field's own path
    assert any((issue.path and (path in issue.path or issue.path in path)) or f"'{leaf}'" in issue.message
               for issue in result.issues), result.issues


def test_validate_finds_the_built_kubeconform(kubeconform, tmp_path):
    """make validate uses the built kubeconform when none is on PATH (the validation issue always intended it)."""
    assert kc.find_kubeconform(root=kc.Path(__file__).resolve().parents[2]) is not None
    assert kc.find_kubeconform(path=str(tmp_path)) is None  # an explicit PATH is searched alone


def test_the_kueue_objects_pass_kubeconform_against_the_module_crds(crds, kubeconform, fresh_module_crds):
    """The eks render's ResourceFlavor, ClusterQueue and LocalQueue, with Kueue's CRDs from its pinned Go module."""
    report = validate_manifests(KUEUE_FIXTURES / "good", KUBE_VERSION, crds, backend="kubeconform",
                                kubeconform_binary=kubeconform, env_name="kueue")
    assert report.ok, report.render()
    assert report.summary_line() == "kueue: 3 resources checked, 3 valid, 0 invalid, 0 skipped"


@pytest.mark.parametrize("fixture, path, _message", KUEUE_INVALID_CASES)
def test_kubeconform_rejects_the_invalid_kueue_object_at_its_path(crds, make_env, kubeconform, fresh_module_crds,
                                                                  fixture, path, _message):
    report = validate_manifests(make_env(KUEUE_FIXTURES / "invalid" / fixture), KUBE_VERSION, crds,
                                backend="kubeconform", kubeconform_binary=kubeconform)
    [result] = report.results
    assert result.status == INVALID, report.render()
    leaf = path.rsplit(".", 1)[-1].split("[")[0]
    assert any((issue.path and (path in issue.path or issue.path in path)) or f"'{leaf}'" in issue.message
               for issue in result.issues), result.issues
