"""The generated Argo CD layer: projects allow exactly what is rendered, and the Applications the
ApplicationSets would generate (computed here from their generators, the cluster Secrets and the apps/ tree)."""
import itertools
import json
import re

import pytest

from generator import argocd, environments, scopes
from tests.support import REPO, load_yaml, run_generator

MANAGED = REPO / "argocd" / "managed"
ENVS = environments.names(REPO)
# every cluster of every environment (an environment of several clusters: each, by its Applications' prefix)
MEMBERS = {m.app_prefix: m for env in ENVS for m in environments.members(environments.load(REPO, env))}


def servers(env):
    return [m.doc["target"]["server"] for m in MEMBERS.values() if m.name == env]


def held_apps(member):
    """The root's Applications of one cluster of an environment: application-<prefix>-*.yaml of that cluster."""
    apps = [load(p) for p in MANAGED.glob(f"application-{member.app_prefix}-*.yaml")]
    return {a["metadata"]["name"]: a for a in apps
            if (a["metadata"]["labels"].get("ray-gitops/cluster")) == member.cluster}


def load(path):
    return load_yaml(path.read_text())


def kinds_in(env, **which):
    return argocd.rendered_kinds(REPO / "apps" / env, **which)


def allowed(project):
    return {(k["group"], k["kind"]) for k in project["clusterResourceWhitelist"] + project["namespaceResourceWhitelist"]}


PLATFORM = {"platform"}


@pytest.mark.parametrize("env", ENVS)
def test_each_project_allows_exactly_what_its_apps_render(env):
    """The platform project: what apps/<env>/platform renders plus what the operators' manifests need; the workload
    project: what the other folders render, nothing more."""
    platform = load(MANAGED / f"appproject-{env}-platform.yaml")["spec"]
    operators = argocd.operator_cluster_kinds(environments.load(REPO, env)) | set(argocd.OPERATOR_NAMESPACED_KINDS)
    assert allowed(platform) == kinds_in(env, apps=PLATFORM) | operators
    workload = load(MANAGED / f"appproject-{env}.yaml")["spec"]
    assert allowed(workload) == kinds_in(env, skip=PLATFORM)
    assert {(k["group"], k["kind"]) for k in platform["clusterResourceWhitelist"]} == {
        (g, k) for g, k in allowed(platform) if scopes.is_cluster_scoped(k)}


@pytest.mark.parametrize("env", ENVS)
def test_the_workload_project_is_one_namespace_of_this_repository_with_no_rbac_or_cluster_kinds(env):
    """Git write on apps/<env>/<job>/ must not be cluster-admin: the project the ApplicationSet's Applications belong
    to allows no cluster-scoped kind (an empty whitelist), blacklists Role and RoleBinding, has this repository as
    its only source and the environment's namespace as its only destination."""
    doc = environments.load(REPO, env).doc
    project = load(MANAGED / f"appproject-{env}.yaml")["spec"]
    assert project["clusterResourceWhitelist"] == []
    assert project["namespaceResourceBlacklist"] == [
        {"group": "rbac.authorization.k8s.io", "kind": "Role"},
        {"group": "rbac.authorization.k8s.io", "kind": "RoleBinding"}]
    assert not [k for k in project["namespaceResourceWhitelist"]
                if k["group"] == "rbac.authorization.k8s.io" or scopes.is_cluster_scoped(k["kind"])]
    assert project["sourceRepos"] == [doc["gitops"]["repoURL"]]
    assert project["destinations"] == [{"server": server, "namespace": doc["target"]["namespace"]}
                                       for server in servers(env)]
    assert "*" not in json.dumps(project)


@pytest.mark.parametrize("env", ENVS)
def test_the_platform_project_serves_the_operators_and_the_platform_app(env):
    doc = environments.load(REPO, env).doc
    project = load(MANAGED / f"appproject-{env}-platform.yaml")["spec"]
    assert {d["server"] for d in project["destinations"]} == set(servers(env))
    queues = (doc.get("queueing") or {}).get("enabled", False)  # Kueue's namespace and its visibility RoleBinding's
    assert {d["namespace"] for d in project["destinations"]} == {doc["target"]["namespace"], "kuberay-system", "kubeflow",
                                                                 *(("kueue-system", "kube-system") if queues else ())}
    assert doc["gitops"]["repoURL"] in project["sourceRepos"]
    assert "*" not in json.dumps(project)
    held = [load(p) for p in MANAGED.glob(f"application-{env}-*.yaml")]
    assert {a["spec"]["project"] for a in held} == {f"{env}-platform"}
    appset = load(MANAGED / f"applicationset-{env}.yaml")
    assert appset["spec"]["template"]["spec"]["project"] == env


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

    def label(match):
        return str(params["metadata"]["labels"][match.group(1)])  # KeyError = missingkey=error

    value = re.sub(r'\{\{\s*index \.metadata\.labels "([^"]+)"\s*\}\}', label, value)
    return re.sub(r"\{\{\s*\.([\w.]+)\s*\}\}", lookup, value)


def generate(appset):
    """Parameter sets of a matrix of a cluster generator and a git-directories or list generator. With goTemplate,
    the first generator's parameters win a key both produce (Argo CD v3.5.1 applicationset/generators/matrix.go:
    mergo.Merge(tmp, second); mergo.Merge(tmp, first, WithOverride)). The e2e cluster runs the real controller."""
    (matrix,) = appset["spec"]["generators"]
    cluster_gen, other = matrix["matrix"]["generators"]
    selector = cluster_gen["clusters"]["selector"]["matchLabels"]
    clusters = [c for c in cluster_secrets() if all(c["metadata"]["labels"].get(k) == v for k, v in selector.items())]
    if "list" in other:
        return [{**row, **c} for c, row in itertools.product(clusters, other["list"]["elements"])]
    out = []
    for cluster in clusters:
        # the second generator may use the first's parameters (its paths name the cluster's own folder)
        directories = gotemplate(other["git"]["directories"], cluster)
        excluded = {p for d in directories if d.get("exclude") for p in REPO.glob(d["path"])}
        dirs = sorted(p for d in directories if not d.get("exclude") for p in REPO.glob(d["path"])
                      if p.is_dir() and p not in excluded)
        out += [{"path": {"path": str(d.relative_to(REPO)), "basename": d.name}, **cluster} for d in dirs]
    return out


@pytest.mark.parametrize("env", ENVS)
def test_one_application_per_app_directory(env):
    doc = environments.load(REPO, env).doc
    appset = load(MANAGED / f"applicationset-{env}.yaml")
    apps = [gotemplate(appset["spec"]["template"], p) for p in generate(appset)]
    names = sorted(a["metadata"]["name"] for a in apps)
    shared = [d for d in (REPO / "apps" / env).iterdir() if d.is_dir() and d.name not in ("platform", "clusters")]
    where = {}  # Application name -> (source path, destination server)
    for member in (m for m in MEMBERS.values() if m.name == env):
        own = [d for d in (REPO / "apps" / env / "clusters" / str(member.cluster)).glob("*") if d.name != "platform"]
        for d in shared + own:
            where[f"{member.app_prefix}-{d.name}"] = (str(d.relative_to(REPO)), member.doc["target"]["server"])
    assert names == sorted(where) and len(names) >= len(servers(env))
    for app in apps:
        spec = app["spec"]
        assert spec["project"] == env
        path, server = where[app["metadata"]["name"]]
        assert spec["source"]["path"] == path
        assert spec["source"]["repoURL"] == doc["gitops"]["repoURL"]
        assert spec["destination"] == {"server": server, "namespace": doc["target"]["namespace"]}
        policy = spec["syncPolicy"]
        assert {"SkipDryRunOnMissingResource=true", "ServerSideApply=true"} <= set(policy["syncOptions"])
        # the namespace is the platform app's (labels, quota): a workload app must not create it first
        assert "CreateNamespace=true" not in policy["syncOptions"]
        # a retry syncs the newest revision: a fix pushed while a bad commit's sync retries lands at the next retry
        assert policy["retry"]["refresh"] is True
        # RespectIgnoreDifferences would merge the live workerGroupSpecs (an atomic list) into what is applied
        assert "RespectIgnoreDifferences=true" not in policy["syncOptions"]
        # server-side diff: structured-merge diff misses CRD defaults inside atomic lists (perpetual OutOfSync)
        assert app["metadata"]["annotations"]["argocd.argoproj.io/compare-options"] == "ServerSideDiff=true"
        assert policy["retry"]["limit"] > 0 and "backoff" in policy["retry"]
        assert policy.get("automated") == ({"prune": True, "selfHeal": True} if doc["sync"]["automated"] else None)


def test_autoscaled_environment_ignores_worker_replicas():
    eks = load(MANAGED / "applicationset-eks.yaml")["spec"]["template"]["spec"]
    assert eks["ignoreDifferences"][0] == {"group": "ray.io", "kind": "RayCluster",
                                           "jqPathExpressions": [".spec.workerGroupSpecs[].replicas"]}
    # and, because eks queues, the suspend Kueue owns (tests/generator/test_queueing.py)
    assert {d["kind"] for d in eks["ignoreDifferences"][1:]} == {"RayJob", "PyTorchJob"}
    minikube = load(MANAGED / "applicationset-minikube.yaml")["spec"]["template"]["spec"]
    assert "ignoreDifferences" not in minikube


@pytest.mark.parametrize("prefix", sorted(MEMBERS))
def test_operators_are_pinned_applications_the_root_orders_before_the_apps(prefix):
    """CRDs -> operators -> workloads, as waves of the root Application (which holds the operator Applications
    and, through the Application health check in argocd-cm, waits for them to be Healthy); on every cluster."""
    member = MEMBERS[prefix]
    env = member.name
    apps = held_apps(member)
    queues = (member.doc.get("queueing") or {}).get("enabled", False)
    assert set(apps) == {f"{prefix}-kuberay-crds", f"{prefix}-kuberay-operator", f"{prefix}-training-operator",
                         f"{prefix}-platform", *([f"{prefix}-kueue"] if queues else [])}
    src = {name[len(prefix) + 1:]: app["spec"]["source"] for name, app in apps.items()}
    assert src["kuberay-operator"]["targetRevision"] == "1.7.0" and src["kuberay-operator"]["chart"] == "kuberay-operator"
    assert src["kuberay-operator"]["helm"] == {"skipCrds": True}
    assert src["kuberay-crds"]["targetRevision"] == "v1.7.0"
    assert {k: v for k, v in src["training-operator"].items() if k != "kustomize"} == {
        "repoURL": "https://github.com/kubeflow/trainer.git", "targetRevision": "v1.9.4",
        "path": "manifests/overlays/standalone"}
    wave = lambda doc: int(doc["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
    for app in apps.values():
        assert app["spec"]["destination"]["server"] == member.doc["target"]["server"]
        assert "finalizers" not in app["metadata"], "removing an operator Application must not delete the operator"
        assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]
        operator = app["metadata"]["name"] != f"{prefix}-platform"
        assert ("CreateNamespace=true" in app["spec"]["syncPolicy"]["syncOptions"]) == operator
    assert (wave(load(MANAGED / f"appproject-{env}-platform.yaml")) == wave(load(MANAGED / f"appproject-{env}.yaml"))
            < wave(apps[f"{prefix}-kuberay-crds"]) < wave(apps[f"{prefix}-kuberay-operator"])
            <= wave(apps[f"{prefix}-training-operator"]) < wave(apps[f"{prefix}-platform"])
            < wave(load(MANAGED / f"applicationset-{env}.yaml")))
    if queues:  # Kueue's CRDs and webhooks before the platform app's ClusterQueue and LocalQueue
        assert wave(apps[f"{prefix}-kueue"]) < wave(apps[f"{prefix}-platform"])


@pytest.mark.parametrize("prefix", sorted(MEMBERS))
def test_the_platform_app_is_held_by_the_root_and_not_generated(prefix):
    """apps/<env>/platform (or a cluster's own apps/<env>/clusters/<cluster>/platform) lands before any workload
    (its namespace's Pod Security labels and quota exist before a pod): the root holds it at a wave before the
    ApplicationSet, which leaves the folder out."""
    member = MEMBERS[prefix]
    env = member.name
    app = load(MANAGED / f"application-{prefix}-platform.yaml")
    doc = member.doc
    own = REPO / "apps" / env / "clusters" / str(member.cluster) / "platform"
    path = str(own.relative_to(REPO)) if own.is_dir() else f"apps/{env}/platform"
    assert app["spec"]["source"] == {"repoURL": doc["gitops"]["repoURL"], "targetRevision":
                                     doc["gitops"]["targetRevision"], "path": path}
    assert app["spec"]["destination"] == {"server": doc["target"]["server"], "namespace": doc["target"]["namespace"]}
    appset = load(MANAGED / f"applicationset-{env}.yaml")
    (matrix,) = appset["spec"]["generators"]
    git = matrix["matrix"]["generators"][1]["git"]
    assert {"path": f"apps/{env}/platform", "exclude": True} in git["directories"]
    if member.cluster is not None:
        cluster = '{{ index .metadata.labels "ray-gitops/cluster" }}'
        assert {"path": f"apps/{env}/clusters/{cluster}/platform", "exclude": True} in git["directories"]
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
    for name in ("appproject-staging.yaml", "appproject-staging-platform.yaml", "applicationset-staging.yaml",
                 "application-staging-platform.yaml", "application-staging-kuberay-crds.yaml",
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
    deployment = load_yaml(patch["patch"])
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
    [init] = load_yaml(filled)
    assert init["name"] == "init-pytorch" and "nslookup job-master-0" in init["command"][-1]
    context = init["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
    assert context["runAsNonRoot"] is True and context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context["readOnlyRootFilesystem"] is True


def test_platform_change_windows_hold_the_platform_project_only(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    env.write_text(env.read_text() + "\nsync:\n  platformWindows:\n"
                   "  - {kind: deny, schedule: \"0 18 * * 1-5\", duration: 15h, timeZone: Europe/Berlin}\n")
    proc = run_generator(repo_copy, "render")
    assert proc.returncode == 0, proc.stderr
    managed = repo_copy / "argocd" / "managed"
    assert load(managed / "appproject-eks-platform.yaml")["spec"]["syncWindows"] == [
        {"kind": "deny", "schedule": "0 18 * * 1-5", "duration": "15h", "timeZone": "Europe/Berlin",
         "applications": ["*"], "manualSync": True}]
    assert "syncWindows" not in load(managed / "appproject-eks.yaml")["spec"]  # jobs are never held
    assert "syncWindows" not in load(managed / "appproject-minikube-platform.yaml")["spec"]


def test_a_change_window_of_an_unknown_kind_is_refused_where_it_is_written(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    env.write_text(env.read_text() + "\nsync:\n  platformWindows:\n  - {kind: hold, schedule: \"0 18 * * *\", "
                   "duration: 15h}\n")
    proc = run_generator(repo_copy, "render")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "environments/eks.yaml" in proc.stderr and "platformWindows" in proc.stderr, proc.stderr
