"""The identity Argo CD syncs an environment's workloads as (impersonation; Argo CD v3.5.1
`util/settings/impersonation.go`, `controller/sync.go` 260-300).

The workload project (`<env>`: the standing Ray cluster and the jobs, which ML engineers may sync) names a
ServiceAccount in the environment's namespace on each of its clusters (`destinationServiceAccounts`). Its Role there
allows exactly the kinds the workload apps render, with the verbs a sync uses, and nothing cluster-scoped: a
workload sync cannot touch anything else even if git says so, whoever presses sync. The ServiceAccount, Role and
RoleBinding are rendered into the platform app (`apps/<env>/platform`, the platform team's), from the kinds the
render found in the workload apps, so they change with them in the same commit.

The platform project (operators, CRDs, the platform app) and the root keep Argo CD's own identity: they install
cluster-scoped objects and RBAC, which is cluster-admin in effect, and the identity they would impersonate would have
to exist before their first sync. `application.sync.impersonation.enforced: "false"` lets a project without a
`destinationServiceAccounts` entry fall back to the controller's identity.
"""
from __future__ import annotations

from . import scopes

SERVICE_ACCOUNT = "argocd-workload-sync"
ROLE = "argocd-workload-sync"
# what a sync does to a resource: read it (diff, apply), create, update or patch it (client- and server-side
# apply), delete it (prune, replace)
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]
ARGOCD_CM = {"application.sync.impersonation.enabled": "true",
             "application.sync.impersonation.enforced": "false"}


def resource_of(kind: str) -> str:
    """A kind's resource name, as Kubernetes guesses it (k8s.io/apimachinery `meta.UnsafeGuessKindToResource`): the
    lowercase kind, +es after an s, y -> ies, else +s. True of every kind our charts render (RayJob -> rayjobs,
    NetworkPolicy -> networkpolicies); the e2e syncs every workload app as this Role's subject."""
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


def objects(namespace: str, kinds: set) -> list[dict]:
    """The ServiceAccount, its Role (the workload kinds, namespaced only) and the RoleBinding, in the platform app's
    wave -1: after the namespace (-2), with its other RBAC."""
    by_group: dict[str, list[str]] = {}
    for group, kind in scopes.workload_kinds(kinds):
        by_group.setdefault(group, []).append(resource_of(kind))
    meta = {"namespace": namespace, "annotations": {"argocd.argoproj.io/sync-wave": "-1"}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, **meta},
         "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": ROLE, **meta},
         "rules": [{"apiGroups": [group], "resources": sorted(set(resources)), "verbs": list(VERBS)}
                   for group, resources in sorted(by_group.items())]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": ROLE, **meta},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}]},
    ]


def destination_service_accounts(servers: list[str], namespace: str) -> list[dict]:
    return [{"server": server, "namespace": namespace, "defaultServiceAccount": SERVICE_ACCOUNT}
            for server in servers]
