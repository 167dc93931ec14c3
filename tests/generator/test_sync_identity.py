"""Argo CD syncs each environment's workloads as a ServiceAccount of the namespace (impersonation,
generator/sync_identity.py): the committed render gives every cluster's platform app that ServiceAccount, a Role on
exactly the kinds its workload project allows (no cluster-scoped kind, no RBAC, no Secrets) and the binding; the
workload project names it for every one of its clusters; argocd-cm turns impersonation on, not enforced (the
platform project and the root keep the controller's identity)."""
from __future__ import annotations

import pytest

from generator import sync_identity
from tests.support import REPO, load_yaml

PLATFORMS = {("minikube", None): REPO / "apps/minikube/platform",
             ("eks", "https://eks-training.example.internal"): REPO / "apps/eks/clusters/eks/platform",
             ("eks", "https://eks-training-b.example.internal"): REPO / "apps/eks/clusters/west-b/platform",
             ("eks", "https://eks-training-hub.example.internal"): REPO / "apps/eks/clusters/hub/platform"}


def workload_kinds(platform_folder) -> set:
    """(group, resource) of what the cluster's workload apps render: its own folders and the shared ones."""
    own, env_dir = platform_folder.parent, REPO / "apps" / platform_folder.relative_to(REPO / "apps").parts[0]
    folders = [d for d in own.iterdir() if d.name != "platform"]
    if own != env_dir:
        folders += [d for d in env_dir.iterdir() if d.name not in ("platform", "clusters")]
    docs = [load(f) for d in folders for f in d.glob("*.yaml")]
    return {(d["apiVersion"].rpartition("/")[0], sync_identity.resource_of(d["kind"])) for d in docs}


def load(path):
    return load_yaml(path.read_text())


@pytest.mark.parametrize("kind,resource", [("RayJob", "rayjobs"), ("NetworkPolicy", "networkpolicies"),
                                           ("ConfigMap", "configmaps"), ("Ingress", "ingresses"),
                                           ("PyTorchJob", "pytorchjobs"), ("Service", "services")])
def test_resource_names_are_kubernetes_own_guess(kind, resource):
    assert sync_identity.resource_of(kind) == resource


@pytest.mark.parametrize("env,server", sorted(PLATFORMS, key=str))
def test_each_clusters_role_allows_exactly_the_workload_projects_kinds(env, server):
    folder = PLATFORMS[env, server]
    role = load(folder / "role-argocd-workload-sync.yaml")
    binding = load(folder / "rolebinding-argocd-workload-sync.yaml")
    account = load(folder / "serviceaccount-argocd-workload-sync.yaml")
    project = load(REPO / "argocd/managed" / f"appproject-{env}.yaml")["spec"]
    allowed = {(k["group"], sync_identity.resource_of(k["kind"])) for k in project["namespaceResourceWhitelist"]}
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    # exactly what this cluster's workload apps render (a MultiKueue worker renders no dispatched job; the manager
    # no standing RayCluster), all of it allowed by the project
    assert granted == workload_kinds(folder) and granted <= allowed and ("ray.io", "rayclusters") in allowed
    assert not {g for g, _ in granted} & {"rbac.authorization.k8s.io"} and ("", "secrets") not in granted
    assert all(rule["verbs"] == sync_identity.VERBS for rule in role["rules"])
    namespace = role["metadata"]["namespace"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": namespace}]
    assert account["automountServiceAccountToken"] is False
    entries = project["destinationServiceAccounts"]
    assert {e["server"] for e in entries} == {d["server"] for d in project["destinations"]}
    assert all(e["namespace"] == namespace and e["defaultServiceAccount"] == account["metadata"]["name"]
               for e in entries)


def test_impersonation_is_on_and_the_platform_keeps_the_controllers_identity():
    data = load(REPO / "argocd/managed/configmap-argocd-cm.yaml")["data"]
    assert data["application.sync.impersonation.enabled"] == "true"
    assert data["application.sync.impersonation.enforced"] == "false"
    for env in ("minikube", "eks"):
        assert "destinationServiceAccounts" not in load(REPO / f"argocd/managed/appproject-{env}-platform.yaml")["spec"]
