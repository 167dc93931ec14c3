"""The generated Argo CD layer: projects allow exactly what is rendered, and the Applications the
ApplicationSets would generate (computed here from their generators, the cluster Secrets and the apps/ tree)."""
import itertools
import json
import re

import pytest
import yaml

from generator import argocd, environments
from tests.support import REPO, run_generator

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
    """Parameter sets of a matrix of a cluster generator and a git-directories or list generator. With goTemplate,
    the first generator's parameters win a key both produce (Argo CD v3.5.1 applicationset/generators/matrix.go:
    mergo.Merge(tmp, second); mergo.Merge(tmp, first, WithOverride)). The e2e cluster runs the real controller."""
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
    return [{**row, **c} for c, row in itertools.product(clusters, rows)]


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
        assert {"SkipDryRunOnMissingResource=true", "ServerSideApply=true"} <= set(policy["syncOptions"])
        # RespectIgnoreDifferences would merge the live workerGroupSpecs (an atomic list) into what is applied
        assert "RespectIgnoreDifferences=true" not in policy["syncOptions"]
        # server-side diff: structured-merge diff misses CRD defaults inside atomic lists (perpetual OutOfSync)
        assert app["metadata"]["annotations"]["argocd.argoproj.io/compare-options"] == "ServerSideDiff=true"
        assert policy["retry"]["limit"] > 0 and "backoff" in policy["retry"]
        assert policy.get("automated") == ({"prune": True, "selfHeal": True} if doc["sync"]["automated"] else None)


def test_autoscaled_environment_ignores_worker_replicas():
    eks = load(MANAGED / "applicationset-eks.yaml")["spec"]["template"]["spec"]
    assert eks["ignoreDifferences"] == [{"group": "ray.io", "kind": "RayCluster",
                                         "jqPathExpressions": [".spec.workerGroupSpecs[].replicas"]}]
    minikube = load(MANAGED / "applicationset-minikube.yaml")["spec"]["template"]["spec"]
    assert "ignoreDifferences" not in minikube


@pytest.mark.parametrize("env", ENVS)
def test_operators_are_pinned_applications_the_root_orders_before_the_apps(env):
    """CRDs -> operators -> workloads, as waves of the root Application (which holds the operator Applications
    and, through the Application health check in argocd-cm, waits for them to be Healthy)."""
    apps = {load(p)["metadata"]["name"]: load(p) for p in MANAGED.glob(f"application-{env}-*.yaml")}
    assert set(apps) == {f"{env}-kuberay-crds", f"{env}-kuberay-operator", f"{env}-training-operator"}
    src = {name[len(env) + 1:]: app["spec"]["source"] for name, app in apps.items()}
    assert src["kuberay-operator"]["targetRevision"] == "1.7.0" and src["kuberay-operator"]["chart"] == "kuberay-operator"
    assert src["kuberay-operator"]["helm"] == {"skipCrds": True}
    assert src["kuberay-crds"]["targetRevision"] == "v1.7.0"
    assert {k: v for k, v in src["training-operator"].items() if k != "kustomize"} == {
        "repoURL": "https://github.com/kubeflow/trainer.git", "targetRevision": "v1.9.4",
        "path": "manifests/overlays/standalone"}
    wave = lambda doc: int(doc["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
    doc = environments.load(REPO, env).doc
    for app in apps.values():
        assert app["spec"]["destination"]["server"] == doc["target"]["server"]
        assert "finalizers" not in app["metadata"], "removing an operator Application must not delete the operator"
        assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]
    assert (wave(load(MANAGED / f"appproject-{env}.yaml")) < wave(apps[f"{env}-kuberay-crds"])
            < wave(apps[f"{env}-kuberay-operator"]) <= wave(apps[f"{env}-training-operator"])
            < wave(load(MANAGED / f"applicationset-{env}.yaml")))
    cm = load(MANAGED / "configmap-argocd-cm.yaml")
    assert "resource.customizations.health.argoproj.io_Application" in cm["data"], "waves on Applications need it"


def test_cluster_secrets_carry_no_credentials():
    for secret in cluster_secrets():
        config = json.loads(secret["config"])
        assert not {"bearerToken", "password", "username"} & set(config)
        assert not {"keyData", "certData"} & set(config.get("tlsClientConfig", {}))


def test_health_checks_are_delivered_in_argocd_cm():
    cm = load(MANAGED / "configmap-argocd-cm.yaml")
    for kind in ("ray.io_RayCluster", "ray.io_RayJob", "ray.io_RayService", "kubeflow.org_PyTorchJob"):
        group, name = kind.split("_")
        lua = (REPO / "health-checks" / group / name / "health.lua").read_text()
        prelude = (REPO / "health-checks" / "prelude.lua").read_text()
        assert cm["data"][f"resource.customizations.health.{kind}"] == prelude + "\n" + lua


def test_root_application_syncs_the_managed_directory():
    root = load(REPO / "argocd" / "root.yaml")
    assert root["kind"] == "Application" and root["spec"]["source"]["path"] == "argocd/managed"


STAGING_CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="


def test_a_new_environment_file_yields_its_project_and_applications(repo_copy):
    (repo_copy / "environments" / "staging.yaml").write_text(
        "target:\n  namespace: ray-staging\n  server: https://staging.example.internal\n"
        f"  caData: {STAGING_CA}\n")
    proc = run_generator(repo_copy, "render")
    assert proc.returncode == 0, proc.stderr
    managed = repo_copy / "argocd" / "managed"
    for name in ("appproject-staging.yaml", "applicationset-staging.yaml", "application-staging-kuberay-crds.yaml",
                 "application-staging-kuberay-operator.yaml", "application-staging-training-operator.yaml",
                 "secret-cluster-staging.yaml"):
        assert (managed / name).exists(), name
    assert load(managed / "appproject-staging.yaml")["spec"]["destinations"][0]["server"] == "https://staging.example.internal"
    config = json.loads(load(managed / "secret-cluster-staging.yaml")["stringData"]["config"])
    assert config["tlsClientConfig"] == {"caData": STAGING_CA, "insecure": False}


def test_a_remote_cluster_without_its_ca_is_refused_at_the_line_that_names_it(repo_copy):
    env = repo_copy / "environments" / "staging.yaml"
    env.write_text("target:\n  namespace: ray-staging\n  server: https://staging.example.internal\n")
    before = {p: p.read_text() for p in (repo_copy / "argocd").rglob("*.yaml")}
    proc = run_generator(repo_copy, "render")
    assert proc.returncode != 0
    assert "environments/staging.yaml:3: target.server: a remote cluster needs target.caData" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert {p: p.read_text() for p in (repo_copy / "argocd").rglob("*.yaml")} == before


@pytest.mark.parametrize("env", ENVS)
def test_the_training_operator_gets_our_hardened_init_container_template(env):
    """The operator Application patches the upstream Deployment: our template (comments aside) rides in a pod-template
    annotation and is projected to /etc/config/initContainer.yaml, the file the operator reads at start
    (kubeflow/trainer v1.9.4 pkg/config/config.go:31). Filled in as the operator fills it, it is one init container
    that Pod Security "restricted" admits. (The e2e shows the real operator using it.)"""
    import re

    app = load(MANAGED / f"application-{env}-training-operator.yaml")
    [patch] = app["spec"]["source"]["kustomize"]["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": "training-operator"}
    deployment = yaml.safe_load(patch["patch"])
    pod = deployment["spec"]["template"]
    annotation = "ray-gitops/pytorch-init-container"
    template = pod["metadata"]["annotations"][annotation]
    source = (REPO / "generator" / "operator_config" / "pytorch-init-container.yaml").read_text()
    assert template == "".join(line for line in source.splitlines(keepends=True) if not line.startswith("#"))
    [container] = pod["spec"]["containers"]
    assert container["name"] == "training-operator"
    assert container["volumeMounts"] == [{"name": "pytorch-init-container", "mountPath": "/etc/config",
                                          "readOnly": True}]
    [volume] = pod["spec"]["volumes"]
    assert volume["downwardAPI"]["items"] == [{
        "path": "initContainer.yaml", "fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}}]
    assert set(re.findall(r"{{\s*\.(\w+)\s*}}", template)) == {"InitContainerImage", "MaxTries", "MasterAddr"}
    filled = (template.replace("{{.InitContainerImage}}", "alpine:3.10").replace("{{.MaxTries}}", "100")
              .replace("{{.MasterAddr}}", "job-master-0"))
    [init] = yaml.safe_load(filled)
    assert init["name"] == "init-pytorch" and "nslookup job-master-0" in init["command"][-1]
    context = init["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
    assert context["runAsNonRoot"] is True and context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context["readOnlyRootFilesystem"] is True
