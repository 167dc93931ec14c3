"""One source of truth for the pinned versions (versions.yaml): the code reads it; every file that cannot read it
agrees with it, or this fails naming the file, what it says and what versions.yaml says."""
from __future__ import annotations

import importlib
import re

import pytest

from generator import versions
from tests.support import REPO, load_yaml, load_yaml_all

V = versions.pinned()


def _chart(name: str) -> dict:
    return load_yaml((REPO / "charts" / name / "Chart.yaml").read_text())


def _go_mod_version(component: str, module: str) -> str:
    from e2e.components import module_version
    return module_version(REPO / "e2e" / "components" / component / "go.mod", module)


def _pin(text: str, package: str) -> str | None:
    match = re.search(rf"^\s*\"?{re.escape(package)}(?:\[[^\]]*\])?==([^\"\s;]+)", text, re.M)
    return match.group(1) if match else None


AGREEMENTS = {
    "charts/ray-cluster/Chart.yaml appVersion (Ray)": (lambda: _chart("ray-cluster")["appVersion"], V.ray),
    "charts/ray-job/Chart.yaml appVersion (Ray)": (lambda: _chart("ray-job")["appVersion"], V.ray),
    "charts/pytorch-job/Chart.yaml appVersion (training-operator)":
        (lambda: _chart("pytorch-job")["appVersion"], V.training_operator),
    "charts/training-lib/values.yaml rayVersion": (lambda: load_yaml(
        (REPO / "charts/training-lib/values.yaml").read_text())["exports"]["cluster"]["rayVersion"], V.ray),
    "charts/training-lib/values.yaml image tag (Ray's image)": (lambda: load_yaml(
        (REPO / "charts/training-lib/values.yaml").read_text())["exports"]["cluster"]["image"]["tag"].split("-")[0],
        V.ray),
    "training/Dockerfile ARG RAY_VERSION": (lambda: re.search(r"^ARG RAY_VERSION=(\S+)", (
        REPO / "training/Dockerfile").read_text(), re.M).group(1), V.ray),
    "training/Dockerfile ARG PYTHON_TAG (Ray's image tag for the Python)": (lambda: re.search(
        r"^ARG PYTHON_TAG=(\S+)", (REPO / "training/Dockerfile").read_text(), re.M).group(1), V.python_tag),
    "pyproject.toml requires-python": (lambda: re.search(r'requires-python = ">=(\d+\.\d+)', (
        REPO / "pyproject.toml").read_text()).group(1), V.python),
    "training/requirements.txt ray": (lambda: _pin((REPO / "training/requirements.txt").read_text(), "ray"), V.ray),
    "pyproject.toml ray": (lambda: _pin((REPO / "pyproject.toml").read_text(), "ray"), V.ray),
    "environments/base.yaml kubernetesVersion": (lambda: load_yaml(
        (REPO / "environments/base.yaml").read_text())["kubernetesVersion"], V.kubernetes),
    "e2e/components/kubernetes/go.mod k8s.io/kubernetes (minor)": (lambda: ".".join(
        _go_mod_version("kubernetes", "k8s.io/kubernetes").lstrip("v").split(".")[:2]), V.kubernetes_minor),
    "e2e/components/argocd/go.mod argo-cd": (lambda: _go_mod_version("argocd", "github.com/argoproj/argo-cd/v3"),
                                             V.argocd),
    "e2e/components/training-operator/go.mod training-operator": (lambda: _go_mod_version(
        "training-operator", "github.com/kubeflow/training-operator"), V.training_operator),
    "e2e/components/kueue/go.mod kueue": (lambda: _go_mod_version("kueue", "sigs.k8s.io/kueue"), V.kueue),
}


@pytest.mark.parametrize("where", sorted(AGREEMENTS))
def test_every_file_that_cannot_read_versions_yaml_agrees_with_it(where):
    read, expected = AGREEMENTS[where]
    assert read() == expected, f"{where} says {read()!r}; versions.yaml says {expected!r}"


def test_the_code_reads_versions_yaml():
    from e2e import components
    from generator import argocd
    from ops import bootstrap
    fetch_schemas = importlib.import_module("validation.fetch_schemas")  # the package exports a function of that name
    assert argocd.KUBERAY_VERSION == V.kuberay and argocd.TRAINING_OPERATOR_VERSION == V.training_operator
    assert bootstrap.ARGOCD_VERSION == V.argocd and f"/{V.argocd}/manifests/install.yaml" in bootstrap.INSTALL
    # the KubeRay operator the e2e builds is the newest the module proxy serves (v1.6.2: docs/e2e.md); what the
    # project pins is recorded next to it
    assert components.BY_NAME["kuberay"].pinned == f"v{V.kuberay}"
    assert set(fetch_schemas.PINNED_FOLDERS) == {f"kuberay-v{V.kuberay}", f"argo-cd-{V.argocd}",
                                                 f"training-operator-{V.training_operator}", f"kueue-{V.kueue}"}
    assert {p.tag for p in fetch_schemas.PINNED_FILES} == {f"v{V.kuberay}", V.argocd, V.training_operator, V.kueue}
    assert all(p.sha256 for p in fetch_schemas.PINNED_FILES), "a pinned CRD without its checksum"


def test_the_rendered_operator_applications_install_the_pinned_versions():
    sources = []
    for path in sorted((REPO / "argocd").rglob("*.yaml")):
        for doc in load_yaml_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in ("Application", "ApplicationSet"):
                spec = doc["spec"].get("template", {}).get("spec", doc["spec"])
                for source in spec.get("sources") or [spec.get("source") or {}]:
                    sources.append((source.get("repoURL", ""), str(source.get("targetRevision", ""))))
    kuberay = {rev for url, rev in sources if "kuberay" in url}
    training = {rev for url, rev in sources if "kubeflow" in url}
    assert kuberay and kuberay <= {V.kuberay, f"v{V.kuberay}"}, kuberay
    assert training == {V.training_operator}, training


def test_validation_reads_the_pinned_crds_first():
    """../shared/crds holds two training-operator releases (v1.9.0 sorts first): the PyTorchJob schema comes from the
    pinned one."""
    from tests.validation.support import crd_location
    from validation.crd_schemas import CrdSchemaStore
    location = crd_location()
    crd = CrdSchemaStore(location).lookup("kubeflow.org/v1", "PyTorchJob")
    assert crd is not None and f"training-operator-{V.training_operator}" in crd.source.parts, crd and crd.source


def test_the_message_naming_the_crds_to_fetch_gives_the_pinned_versions(tmp_path):
    from validation.schema_location import how_to_get_schemas
    message = how_to_get_schemas(tmp_path / "none")
    assert f"KubeRay v{V.kuberay}" in message and f"Argo CD {V.argocd}" in message
    assert f"training-operator {V.training_operator}" in message


def test_the_pull_request_workflow_installs_the_go_the_components_need():
    """make test builds Argo CD and kubeconform from their Go modules: the workflow that runs it must have Go, at the
    version the components' go.mod files state."""
    workflow = load_yaml((REPO / ".github/workflows/pull-request.yaml").read_text())
    steps = workflow["jobs"]["tests"]["steps"]
    go = [s for s in steps if str(s.get("uses", "")).startswith("actions/setup-go")]
    assert go, "the tests job installs no Go"
    # setup-go's "1.26" is the newest 1.26 patch: it satisfies every go.mod's `go 1.26[.x]`
    wanted = {".".join(re.search(r"^go (\S+)", p.read_text(), re.M).group(1).split(".")[:2])
              for p in (REPO / "e2e/components").glob("*/go.mod")}
    assert {str(go[0]["with"]["go-version"])} == wanted, (go[0], wanted)
    runs = [s.get("run", "") for s in steps]
    assert runs.index(next(r for r in runs if "e2e build" in r)) < runs.index("make test")
