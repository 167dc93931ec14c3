"""Who may render what: the platform layer and the workloads.

Each environment's Argo CD layer has two projects (generator/argocd.py):
  <env>-platform   the operators and apps/<env>/platform: cluster-scoped kinds (the Namespace, StorageClasses,
                   CRDs, ClusterRoles...) and RBAC; changed by the platform team.
  <env>            every other folder of apps/<env>/ (the ray cluster, the jobs), which the ApplicationSet turns into
                   Applications: the environment's namespace only, namespaced kinds only, no RBAC.

A write to apps/<env>/<job>/ must not be a way to cluster-admin. The same rule is kept three times: the render
refuses such a kind in any app but the platform one (generator/render.py), `make validate` refuses it in the
rendered tree (validation/policy.py `workload-namespaced-only`), and Argo CD refuses it at sync (the workload
project's whitelists).
"""
from __future__ import annotations

PLATFORM_APP = "platform"
RBAC_GROUP = "rbac.authorization.k8s.io"

# Kinds with no namespace that our charts or the operators' manifests create (core and well-known groups).
CLUSTER_SCOPED = frozenset({
    "Namespace", "StorageClass", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "CSIDriver",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "CustomResourceDefinition", "PriorityClass", "RuntimeClass",
    "IngressClass", "APIService", "Node",
    # Kueue's (kueue.x-k8s.io): the node types and the quota
    "ResourceFlavor", "ClusterQueue", "Cohort", "AdmissionCheck", "MultiKueueConfig", "MultiKueueCluster",
    "WorkloadPriorityClass", "Topology",
})


def group_of(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""


def is_cluster_scoped(kind: str) -> bool:
    return kind in CLUSTER_SCOPED


def workload_refusal(api_version: str, kind: str) -> str | None:
    """Why a workload app (any folder of apps/<env>/ but platform) may not hold this kind, or None."""
    return group_kind_refusal(group_of(api_version), kind)


def group_kind_refusal(group: str, kind: str) -> str | None:
    """workload_refusal by API group (the AppProjects list kinds by group, not apiVersion)."""
    if group == RBAC_GROUP:
        return (f"{group}:{kind} is RBAC: a workload app may not grant permissions (a RoleBinding in a job's folder "
                f"would give its pods, or anyone, rights the platform team never reviewed)")
    if is_cluster_scoped(kind):
        return (f"{group or 'core'}:{kind} is cluster-scoped: a workload app may only create objects in its "
                f"environment's namespace")
    return None


def workload_kinds(kinds) -> list[tuple[str, str]]:
    """The (group, kind) pairs of `kinds` a workload app may hold, sorted: what the workload project allows and the
    account it syncs as may touch (generator/argocd.py, generator/sync_identity.py)."""
    return sorted((g, k) for g, k in kinds if group_kind_refusal(g, k) is None)


WHERE_INSTEAD = ("put it in the platform chart (charts/platform, rendered into apps/<env>/platform, synced by the "
                 "<env>-platform project, which the platform team owns)")
