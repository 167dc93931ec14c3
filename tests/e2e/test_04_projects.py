"""Git write on apps/<env>/ is not cluster-admin: a pull request that slips a ClusterRoleBinding to cluster-admin and a
RoleBinding into a workload app's folder (hand-written, past the render and `make validate`, which refuse them too)
is refused by the real application-controller, because the ApplicationSet's Applications belong to the workload
project (<env>: the environment's namespace, namespaced kinds only, no RBAC). Neither binding reaches the cluster,
and the app's other resources stay as they were. Removing the files (a second push) brings the app back to Synced:
the retry syncs the newest revision (retry.refresh)."""
from __future__ import annotations

import json

import pytest

from e2e import nodes
from tests.e2e.harness import wait_for

ENVS = nodes.environments()
APP = "ray-cluster"
TAKE_OVER = "e2e-take-over"

CLUSTER_ROLE_BINDING = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {name}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cluster-admin
subjects:
- kind: ServiceAccount
  name: default
  namespace: {namespace}
"""

ROLE_BINDING = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {name}
  namespace: {namespace}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: edit
subjects:
- kind: ServiceAccount
  name: default
  namespace: {namespace}
"""


def _files(e2e, env):
    folder = e2e.work / "apps" / env / APP
    return {folder / f"clusterrolebinding-{TAKE_OVER}.yaml": CLUSTER_ROLE_BINDING,
            folder / f"rolebinding-{TAKE_OVER}.yaml": ROLE_BINDING}


def _app(e2e, env):
    return next(a for a in e2e.env_apps(env) if a["metadata"]["name"] == f"{env}-{APP}")


def _bindings(e2e, env) -> list[str]:
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    rbac = client.RbacAuthorizationV1Api(e2e.api(env))
    found = []
    for read, args in ((rbac.read_cluster_role_binding, (TAKE_OVER,)),
                       (rbac.read_namespaced_role_binding, (TAKE_OVER, e2e.namespace(env)))):
        try:
            read(*args)
            found.append(read.__name__)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return found


def _remove(e2e) -> bool:
    removed = False
    for env in ENVS:
        for path in _files(e2e, env):
            if path.exists():
                path.unlink()
                removed = True
    if removed:
        e2e.push("e2e: the RBAC is taken out again")
    return removed


@pytest.fixture(scope="module")
def pushed(e2e, bootstrapped):
    for env in ENVS:
        e2e.wait_synced_healthy(env, 420, names={f"{env}-{APP}"})
    for env in ENVS:
        for path, text in _files(e2e, env).items():
            path.write_text(text.format(name=TAKE_OVER, namespace=e2e.namespace(env)))
    yield e2e.push("e2e: a pull request slips RBAC into a workload app")
    if _remove(e2e):  # the last test did not run: leave the next scenarios a clean repository
        for env in ENVS:
            e2e.wait_synced_healthy(env, 600, names={f"{env}-{APP}"})


@pytest.mark.parametrize("env", ENVS)
def test_the_workload_project_refuses_rbac_in_a_workload_app(e2e, pushed, env):
    kinds = ("ClusterRoleBinding", "RoleBinding")

    def refused():
        app = _app(e2e, env)
        text = json.dumps(app.get("status") or {})
        missing = [k for k in kinds if f"rbac.authorization.k8s.io:{k} is not permitted in project {env}" not in text]
        return not missing, f"no refusal for {missing} yet: {e2e.describe(app)}"
    wait_for(refused, 300, 5, f"Argo CD did not refuse the bindings in {env}-{APP}")
    assert _bindings(e2e, env) == [], "a binding the project refuses reached the cluster"
    app = _app(e2e, env)
    assert app["spec"]["project"] == env
    rayclusters = [r for r in app["status"].get("resources", []) if r["kind"] == "RayCluster"]
    assert rayclusters and all((r.get("health") or {}).get("status") == "Healthy" for r in rayclusters), rayclusters


def test_removing_the_bindings_brings_the_apps_back(e2e, pushed):
    """The fix is a second push; the sync that was retrying the bad commit syncs the newest revision at its next
    retry (retry.refresh), so every app is Synced and Healthy again within the retry backoff, with no binding."""
    assert _remove(e2e)
    for env in ENVS:
        e2e.wait_synced_healthy(env, 600, names={f"{env}-{APP}"})
        assert _bindings(e2e, env) == []
