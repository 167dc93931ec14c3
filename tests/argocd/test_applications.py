"""The generated Argo CD layer: projects allow exactly what is rendered, and the Applications the
ApplicationSets would generate (computed here from their generators, the cluster Secrets and the apps/ tree)."""
import itertools
import json
import re

import pytest
import yaml

from generator import argocd, environments
from tests.conftest import REPO, run_generator

MANAGED = REPO / "argocd" / "managed"
ENVS = environments.names(REPO)


def load(path):
    return yaml.safe_load(path.read_text())


def kinds_in(env):
    return argocd.rendered_kinds(REPO / "apps" / env)


@pytest.mark.parametrize("env", ENVS)
def test_project_allows_every_rendered_kind(env):
    project = load(MANAGED / f"appproject-{env}.yaml")["spec"]
    allowed = {(k["group"], k["kind"]) for k in project["clusterResourceWhitelist"] + project["namespaceResourceWhitelist"]}
    missing = kinds_in(env) - allowed
    assert not missing, f"apps/{env} renders kinds its project does not allow: {missing}"


@pytest.mark.parametrize("env", ENVS)
def test_project_allows_nothing_unrendered_but_the_operators_needs(env):
    project = load(MANAGED / f"appproject-{env}.yaml")["spec"]
    allowed = {(k["group"], k["kind"]) for k in project["clusterResourceWhitelist"] + project["namespaceResourceWhitelist"]}
    operators = set(argocd.OPERATOR_CLUSTER_KINDS) | set(argocd.OPERATOR_NAMESPACED_KINDS)
    assert allowed - kinds_in(env) - operators == set()
    cluster_scoped = {(k["group"], k["kind"]) for k in project["clusterResourceWhitelist"]}
    assert all(kind in argocd.CLUSTER_SCOPED for _, kind in cluster_scoped)


@pytest.mark.parametrize("env", ENVS)
def test_project_destinations_are_the_environments_cluster_only(env):
    doc = environments.load(REPO, env).doc
    project = load(MANAGED / f"appproject-{env}.yaml")["spec"]
    assert {d["server"] for d in project["destinations"]} == {doc["target"]["server"]}
    assert {d["namespace"] for d in project["destinations"]} == {doc["target"]["namespace"], "kuberay-system", "kubeflow"}
    assert "*" not in json.dumps(project)


def cluster_secrets():
    out = []
    for path in MANAGED.glob("secret-cluster-*.yaml"):
        secret = load(path)
        assert secret["metadata"]["labels"]["argocd.argoproj.io/secret-type"] == "cluster"
        out.append({"name": secret["stringData"]["name"], "server": secret["stringData"]["server"],
                    "metadata": {"labels": secret["metadata"]["labels"]}, "config": secret["stringData"]["config"]})
    return out


def gotemplate(value, params):
    """The {{ .a.b }} substitutions these templates use (Argo CD's goTemplate, missingkey=error)."""
    if isinstance(value, dict):
        return {gotemplate(k, params): gotemplate(v, params) for k, v in value.items()}
    if isinstance(value, list):
        return [gotemplate(v, params) for v in value]
    if not isinstance(value, str):
        return value

    def lookup(match):
        node = params
        for part in match.group(1).split("."):
            node = node[part]  # KeyError = missingkey=error
        return str(node)

    return re.sub(r"\{\{\s*\.([\w.]+)\s*\}\}", lookup, value)


def generate(appset):
    """Parameter sets of a matrix of a cluster generator and a git-directories or list generator."""
    (matrix,) = appset["spec"]["generators"]
    cluster_gen, other = matrix["matrix"]["generators"]
    selector = cluster_gen["clusters"]["selector"]["matchLabels"]
    clusters = [c for c in cluster_secrets() if all(c["metadata"]["labels"].get(k) == v for k, v in selector.items())]
    if "git" in other:
        (pattern,) = [d["path"] for d in other["git"]["directories"]]
        dirs = sorted(p for p in REPO.glob(pattern) if p.is_dir())
        rows = [{"path": {"path": str(d.relative_to(REPO)), "basename": d.name}} for d in dirs]
    else:
        rows = other["list"]["elements"]
    return [{**c, **row} for c, row in itertools.product(clusters, rows)]


@pytest.mark.parametrize("env", ENVS)
def test_one_application_per_app_directory(env):
    doc = environments.load(REPO, env).doc
    appset = load(MANAGED / f"applicationset-{env}.yaml")
    apps = [gotemplate(appset["spec"]["template"], p) for p in generate(appset)]
    names = sorted(a["metadata"]["name"] for a in apps)
    expected = sorted(f"{env}-{d.name}" for d in (REPO / "apps" / env).iterdir() if d.is_dir())
    assert names == expected and len(names) >= 3
    for app in apps:
        spec = app["spec"]
        assert spec["project"] == env
        assert spec["source"]["path"] == f"apps/{env}/{app['metadata']['name'][len(env) + 1:]}"
        assert spec["source"]["repoURL"] == doc["gitops"]["repoURL"]
        assert spec["destination"] == {"server": doc["target"]["server"], "namespace": doc["target"]["namespace"]}
        policy = spec["syncPolicy"]
        assert {"SkipDryRunOnMissingResource=true", "RespectIgnoreDifferences=true"} <= set(policy["syncOptions"])
        assert policy["retry"]["limit"] > 0 and "backoff" in policy["retry"]
        assert policy.get("automated") == ({"prune": True, "selfHeal": True} if doc["sync"]["automated"] else None)


def test_autoscaled_environment_ignores_worker_replicas():
    eks = load(MANAGED / "applicationset-eks.yaml")["spec"]["template"]["spec"]
    assert eks["ignoreDifferences"] == [{"group": "ray.io", "kind": "RayCluster",
                                         "jqPathExpressions": [".spec.workerGroupSpecs[].replicas"]}]
    minikube = load(MANAGED / "applicationset-minikube.yaml")["spec"]["template"]["spec"]
    assert "ignoreDifferences" not in minikube


@pytest.mark.parametrize("env", ENVS)
def test_operators_are_pinned_and_sync_before_the_apps(env):
    appset = load(MANAGED / f"applicationset-{env}-operators.yaml")
    apps = {p["name"]: p for p in generate(appset)}
    assert set(apps) == {"kuberay-crds", "kuberay-operator", "training-operator"}
    assert apps["kuberay-operator"]["targetRevision"] == "1.7.0" and apps["kuberay-operator"]["chart"] == "kuberay-operator"
    assert apps["kuberay-crds"]["targetRevision"] == "v1.7.0"
    assert apps["training-operator"]["targetRevision"] == "v1.9.0"
    assert int(apps["kuberay-crds"]["wave"]) < int(apps["kuberay-operator"]["wave"])
    assert "ServerSideApply=true" in appset["spec"]["template"]["spec"]["syncPolicy"]["syncOptions"]
    wave = lambda name: int(load(MANAGED / name)["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
    assert wave(f"appproject-{env}.yaml") < wave(f"applicationset-{env}-operators.yaml") < wave(f"applicationset-{env}.yaml")


def test_cluster_secrets_carry_no_credentials():
    for secret in cluster_secrets():
        config = json.loads(secret["config"])
        assert not {"bearerToken", "password", "username"} & set(config)
        assert not {"keyData", "certData"} & set(config.get("tlsClientConfig", {}))


def test_health_checks_are_delivered_in_argocd_cm():
    cm = load(MANAGED / "configmap-argocd-cm.yaml")
    for kind in ("ray.io_RayCluster", "ray.io_RayJob", "ray.io_RayService", "kubeflow.org_PyTorchJob"):
        group, name = kind.split("_")
        lua = (REPO / "argocd" / "resource_customizations" / group / name / "health.lua").read_text()
        assert cm["data"][f"resource.customizations.health.{kind}"] == lua


def test_root_application_syncs_the_managed_directory():
    root = load(REPO / "argocd" / "root.yaml")
    assert root["kind"] == "Application" and root["spec"]["source"]["path"] == "argocd/managed"


def test_a_new_environment_file_yields_its_project_and_applications(repo_copy):
    (repo_copy / "environments" / "staging.yaml").write_text(
        "target:\n  namespace: ray-staging\n  server: https://staging.example.internal\n")
    proc = run_generator(repo_copy, "render")
    assert proc.returncode == 0, proc.stderr
    managed = repo_copy / "argocd" / "managed"
    for name in ("appproject-staging.yaml", "applicationset-staging.yaml", "applicationset-staging-operators.yaml",
                 "secret-cluster-staging.yaml"):
        assert (managed / name).exists(), name
    assert load(managed / "appproject-staging.yaml")["spec"]["destinations"][0]["server"] == "https://staging.example.internal"
