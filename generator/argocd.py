"""argocd/: the Argo CD layer, rendered from environments/ (and the rendered apps/ tree).

  argocd/root.yaml                         the one manifest a user applies after installing Argo CD (app of apps)
  argocd/managed/                          what the root Application syncs, in sync waves:
    configmap-argocd-cm.yaml               (-30) health checks for ray.io and kubeflow.org kinds (Lua, from
                                                 argocd/resource_customizations/<group>/<Kind>/health.lua)
    appproject-<env>.yaml                  (-20) least privilege: this repo and the pinned upstream repos, the
                                                 environment's cluster and namespaces, the kinds apps/<env> renders
    secret-cluster-<env>.yaml              (-20) the environment's cluster, labelled for the ApplicationSets;
                                                 no credentials (see README)
    applicationset-<env>-operators.yaml    (-10) KubeRay operator (CRDs server-side, then the chart) and the
                                                 Kubeflow training-operator, on the environment's clusters
    applicationset-<env>.yaml              (  0) one Application per directory of apps/<env>/ (<env>-<app>)
"""
from __future__ import annotations

import json
from pathlib import Path

from . import manifests
from .environments import Environment

ARGOCD_NAMESPACE = "argocd"
ENV_LABEL = "ray-gitops/environment"
KUBERAY_VERSION = "1.7.0"
KUBERAY_HELM_REPO = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_GIT_REPO = "https://github.com/ray-project/kuberay.git"
TRAINING_OPERATOR_GIT_REPO = "https://github.com/kubeflow/training-operator.git"
TRAINING_OPERATOR_VERSION = "v1.9.0"
KUBERAY_NAMESPACE = "kuberay-system"
TRAINING_OPERATOR_NAMESPACE = "kubeflow"

# What the operators' upstream manifests create, allowed in each environment's project on their behalf
# (apps/ renders none of these). Reviewed here, in one place.
OPERATOR_CLUSTER_KINDS = [
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("", "Namespace"),
]
OPERATOR_NAMESPACED_KINDS = [
    ("", "ServiceAccount"),
    ("", "Service"),
    ("", "ConfigMap"),
    ("", "Secret"),
    ("apps", "Deployment"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
]
CLUSTER_SCOPED = {"Namespace", "StorageClass", "PersistentVolume", "ClusterRole", "ClusterRoleBinding",
                  "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
                  "CustomResourceDefinition", "PriorityClass"}

SYNC_OPTIONS = ["CreateNamespace=true", "SkipDryRunOnMissingResource=true", "RespectIgnoreDifferences=true",
                "ServerSideApply=true"]
RETRY = {"limit": 10, "backoff": {"duration": "10s", "factor": 2, "maxDuration": "5m"}}


def _meta(name, namespace=ARGOCD_NAMESPACE, wave=None, labels=None):
    meta = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if wave is not None:
        meta["annotations"] = {"argocd.argoproj.io/sync-wave": str(wave)}
    return meta


def gitops(envs: list[Environment]) -> dict:
    """repoURL / targetRevision of this repository (base.yaml `gitops`, the same in every environment)."""
    return envs[0].doc.get("gitops", {}) if envs else {}


def sync_policy(env: Environment, automated_default=True) -> dict:
    sync = env.doc.get("sync", {})
    policy = {"syncOptions": list(SYNC_OPTIONS), "retry": RETRY}
    if sync.get("automated", automated_default):
        policy["automated"] = {"prune": sync.get("prune", True), "selfHeal": sync.get("selfHeal", True)}
    return policy


def health_configmap(root: Path) -> dict:
    data = {}
    for lua in sorted((root / "argocd" / "resource_customizations").glob("*/*/health.lua")):
        group, kind = lua.parent.parent.name, lua.parent.name
        data[f"resource.customizations.health.{group}_{kind}"] = lua.read_text()
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {**_meta("argocd-cm", wave=-30),
                         "labels": {"app.kubernetes.io/name": "argocd-cm", "app.kubernetes.io/part-of": "argocd"}},
            "data": data}


def rendered_kinds(apps_env_dir: Path) -> set:
    """(group, kind) of every resource under apps/<env>/."""
    kinds = set()
    for path in apps_env_dir.glob("*/*.yaml"):
        doc = manifests.load(path.read_text())
        api = doc["apiVersion"]
        kinds.add((api.split("/")[0] if "/" in api else "", doc["kind"]))
    return kinds


def project(env: Environment, kinds: set, repo_url: str) -> dict:
    own_cluster = {(g, k) for g, k in kinds if k in CLUSTER_SCOPED}
    own_namespaced = {(g, k) for g, k in kinds if k not in CLUSTER_SCOPED}
    server = env.doc["target"]["server"]
    return {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": _meta(env.name, wave=-20, labels={ENV_LABEL: env.name}),
        "spec": {
            "description": f"{env.name}: {env.doc.get('description', '')}".strip(": "),
            "sourceRepos": sorted([repo_url, KUBERAY_HELM_REPO, KUBERAY_GIT_REPO, TRAINING_OPERATOR_GIT_REPO]),
            "destinations": [{"server": server, "namespace": ns} for ns in
                             sorted({env.namespace, KUBERAY_NAMESPACE, TRAINING_OPERATOR_NAMESPACE})],
            "clusterResourceWhitelist": [{"group": g, "kind": k} for g, k in
                                         sorted(own_cluster | set(OPERATOR_CLUSTER_KINDS))],
            "namespaceResourceWhitelist": [{"group": g, "kind": k} for g, k in
                                           sorted(own_namespaced | set(OPERATOR_NAMESPACED_KINDS))],
        },
    }


def cluster_secret(env: Environment) -> dict:
    target = env.doc["target"]
    config = target.get("argocdClusterConfig") or {"tlsClientConfig": {"insecure": False}}

    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {**_meta(f"cluster-{env.name}", wave=-20),
                     "labels": {"argocd.argoproj.io/secret-type": "cluster", ENV_LABEL: env.name,
                                **target.get("clusterLabels", {})}},
        "stringData": {"name": target.get("clusterName", env.name), "server": target["server"],
                       "config": json.dumps(config, sort_keys=True)},
    }


def _cluster_generator(env: Environment) -> dict:
    return {"clusters": {"selector": {"matchLabels": {ENV_LABEL: env.name}}}}


def apps_applicationset(env: Environment, repo_url: str, revision: str, autoscaled: bool) -> dict:
    spec_template = {
        "metadata": {"name": f"{env.name}-{{{{ .path.basename }}}}",
                     "labels": {ENV_LABEL: env.name, "ray-gitops/app": "{{ .path.basename }}"}},
        "spec": {
            "project": env.name,
            "source": {"repoURL": repo_url, "targetRevision": revision, "path": "{{ .path.path }}"},
            "destination": {"server": "{{ .server }}", "namespace": env.namespace},
            "syncPolicy": sync_policy(env),
        },
    }
    if autoscaled:
        # the Ray autoscaler owns worker replicas: neither a diff nor something to sync back
        spec_template["spec"]["ignoreDifferences"] = [
            {"group": "ray.io", "kind": "RayCluster", "jqPathExpressions": [".spec.workerGroupSpecs[].replicas"]}]
    return {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
        "metadata": _meta(env.name, wave=0, labels={ENV_LABEL: env.name}),
        "spec": {
            "goTemplate": True,
            "goTemplateOptions": ["missingkey=error"],
            "generators": [{"matrix": {"generators": [
                _cluster_generator(env),
                {"git": {"repoURL": repo_url, "revision": revision,
                         "directories": [{"path": f"apps/{env.name}/*"}]}},
            ]}}],
            "template": spec_template,
        },
    }


def operators_applicationset(env: Environment) -> dict:
    operators = [
        # CRDs first and server-side: they are too large for client-side apply's last-applied annotation
        {"name": "kuberay-crds", "wave": "-2", "repoURL": KUBERAY_GIT_REPO, "targetRevision": f"v{KUBERAY_VERSION}",
         "path": "helm-chart/kuberay-operator/crds", "chart": "", "namespace": KUBERAY_NAMESPACE},
        {"name": "kuberay-operator", "wave": "-1", "repoURL": KUBERAY_HELM_REPO, "targetRevision": KUBERAY_VERSION,
         "path": "", "chart": "kuberay-operator", "namespace": KUBERAY_NAMESPACE},
        {"name": "training-operator", "wave": "-1", "repoURL": TRAINING_OPERATOR_GIT_REPO,
         "targetRevision": TRAINING_OPERATOR_VERSION, "path": "manifests/overlays/standalone", "chart": "",
         "namespace": TRAINING_OPERATOR_NAMESPACE},
    ]
    policy = sync_policy(env)  # ServerSideApply=true: the KubeRay CRDs are too large for client-side apply
    return {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
        "metadata": _meta(f"{env.name}-operators", wave=-10, labels={ENV_LABEL: env.name}),
        "spec": {
            "goTemplate": True,
            "goTemplateOptions": ["missingkey=error"],
            "generators": [{"matrix": {"generators": [_cluster_generator(env), {"list": {"elements": operators}}]}}],
            "template": {
                "metadata": {"name": f"{env.name}-{{{{ .name }}}}",
                             "labels": {ENV_LABEL: env.name, "ray-gitops/app": "{{ .name }}"},
                             "annotations": {"argocd.argoproj.io/sync-wave": "{{ .wave }}"}},
                "spec": {
                    "project": env.name,
                    "source": {"repoURL": "{{ .repoURL }}", "targetRevision": "{{ .targetRevision }}"},
                    "destination": {"server": "{{ .server }}", "namespace": "{{ .namespace }}"},
                    "syncPolicy": policy,
                },
            },
            # a Helm chart source names `chart` (CRDs skipped: kuberay-crds installs them); git sources a `path`
            "templatePatch": ('{{- if .chart }}\nspec:\n  source:\n    chart: "{{ .chart }}"\n    helm:\n'
                              '      skipCrds: true\n{{- else }}\nspec:\n  source:\n    path: "{{ .path }}"\n'
                              '{{- end }}\n'),
        },
    }


def root_application(repo_url: str, revision: str) -> dict:
    return {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "ray-gitops", "namespace": ARGOCD_NAMESPACE},
        "spec": {
            "project": "default",
            "source": {"repoURL": repo_url, "targetRevision": revision, "path": "argocd/managed"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": ARGOCD_NAMESPACE},
            "syncPolicy": {"automated": {"prune": True, "selfHeal": True}, "retry": RETRY,
                           "syncOptions": ["ServerSideApply=true"]},
        },
    }


def autoscaled(env: Environment) -> bool:
    """Does any RayCluster of this environment run the autoscaler? (the standing cluster or a job's)"""
    cluster = env.doc.get("cluster", {})
    if (cluster.get("autoscaler") or {}).get("enabled"):
        return True
    jobs = env.doc.get("jobs") or {}
    defaults = (env.doc.get("jobDefaults") or {}).get("cluster", {})
    return any(((job or {}).get("cluster", {}).get("autoscaler") or defaults.get("autoscaler") or {}).get("enabled")
               for job in jobs.values())


HEADER = ("# Generated by the generator (make render) from environments/ and argocd/resource_customizations/; "
          "do not edit.\n")


GENERATED = ("root.yaml", "managed")  # what under argocd/ the generator owns (resource_customizations/ is hand-written)


def generated_files(argocd_dir: Path) -> dict:
    """{relative path: text} of the generated files under an argocd/ directory."""
    out = {}
    if (argocd_dir / "root.yaml").is_file():
        out["root.yaml"] = (argocd_dir / "root.yaml").read_text()
    for path in sorted((argocd_dir / "managed").rglob("*")) if (argocd_dir / "managed").is_dir() else []:
        if path.is_file():
            out[str(path.relative_to(argocd_dir))] = path.read_text()
    return out


def render(root: Path, envs: list[Environment], apps_dir: Path) -> dict:
    """{relative path under argocd/: text}. `apps_dir` holds the rendered apps/ the projects are derived from."""
    ops = gitops(envs)
    repo_url, revision = ops.get("repoURL", ""), ops.get("targetRevision", "main")
    files = {"root.yaml": manifests.dump(root_application(repo_url, revision), HEADER),
             "managed/configmap-argocd-cm.yaml": manifests.dump(health_configmap(root), HEADER)}
    for env in envs:
        docs = [project(env, rendered_kinds(apps_dir / env.name), repo_url), cluster_secret(env),
                operators_applicationset(env),
                apps_applicationset(env, repo_url, revision, autoscaled(env))]
        for doc in docs:
            files[f"managed/{manifests.filename(doc)}"] = manifests.dump(doc, HEADER)
    return files
