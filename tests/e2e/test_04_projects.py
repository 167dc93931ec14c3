"""Git write on apps/<env>/ is not cluster-admin: a pull request that slips a ClusterRoleBinding to cluster-admin and a
RoleBinding into a workload app's folder (hand-written, past the render and `make validate`, which refuse them too)
is refused by the real application-controller, because the ApplicationSet's Applications belong to the workload
project (<env>: the environment's namespace, namespaced kinds only, no RBAC). Neither binding reaches the cluster,
and the app's other resources stay as they were. Removing the files (a second push) brings the app back to Synced:
the retry syncs the newest revision (retry.refresh)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e import nodes
from tests.e2e.harness import wait_for
from tests.e2e.scenarios import RECONCILES

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
    """The RBAC slipped into the standing Ray cluster's folder as the environment's first cluster has it (its own,
    apps/<env>/clusters/<env>/ray-cluster, where the environment's clusters differ in it)."""
    own = e2e.work / "apps" / env / "clusters" / env / APP
    folder = own if own.is_dir() else e2e.work / "apps" / env / APP
    return {folder / f"clusterrolebinding-{TAKE_OVER}.yaml": CLUSTER_ROLE_BINDING,
            folder / f"rolebinding-{TAKE_OVER}.yaml": ROLE_BINDING}


def _app(e2e, env, name=None):
    name = name or f"{env}-{APP}"
    return next(a for a in e2e.env_apps(env) if a["metadata"]["name"] == name)


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


SYNC_ACCOUNT = "argocd-workload-sync"


@pytest.mark.parametrize("env", ENVS)
def test_workload_apps_sync_as_their_service_account_with_exactly_their_kinds(e2e, bootstrapped, env):
    """Impersonation (generator/sync_identity.py): the workload project names the namespace's ServiceAccount, its
    Role on the cluster allows exactly the kinds the workload apps render (as the platform app rendered it), the
    API server's own authorizer refuses it anything cluster-scoped, RBAC, Secrets and other namespaces, and Argo
    CD's application-controller synced the workload apps as it (its log names the ServiceAccount per sync)."""
    from kubernetes import client
    namespace = e2e.namespace(env)
    user = f"system:serviceaccount:{namespace}:{SYNC_ACCOUNT}"
    e2e.wait_synced_healthy(env, 420, names={f"{env}-{APP}", f"{env}-platform"})
    role = client.RbacAuthorizationV1Api(e2e.api(env)).read_namespaced_role(SYNC_ACCOUNT, namespace)
    live = {(g, r) for rule in role.rules for g in rule.api_groups for r in rule.resources}
    rendered = next(d for d in e2e.rendered_platform(env) if d["kind"] == "Role" and
                    d["metadata"]["name"] == SYNC_ACCOUNT)
    assert live == {(g, r) for rule in rendered["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert ("ray.io", "rayclusters") in live and ("ray.io", "rayjobs") in live, live

    def allowed(verb, resource, group="", ns=namespace):
        review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=user, groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                               "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource, group=group,
                                                            namespace=ns)))
        return client.AuthorizationV1Api(e2e.api(env)).create_subject_access_review(review).status.allowed
    for group, resource in sorted(live):
        assert allowed("patch", resource, group) and allowed("delete", resource, group), (group, resource)
    refused = [("create", "clusterrolebindings", "rbac.authorization.k8s.io", None),
               ("create", "rolebindings", "rbac.authorization.k8s.io", namespace),
               ("get", "secrets", "", namespace), ("create", "namespaces", "", None),
               ("create", "rayjobs", "ray.io", "default"), ("create", "customresourcedefinitions",
                                                          "apiextensions.k8s.io", None)]
    assert [r for r in refused if allowed(r[0], r[1], r[2], r[3])] == []
    log = Path(e2e.current["logs"]) / "argocd-application-controller.log"

    def impersonated():
        # logrus's text format quotes a value with ':' in it
        lines = [line for line in log.read_text(errors="replace").splitlines()
                 if f'serviceAccount="{user}"' in line and f"application={env}-{APP} " in line]
        return bool(lines), f"no sync of {env}-{APP} as {user} in {log}"
    wait_for(impersonated, 60, 5, f"the controller's log of a sync of {env}-{APP} as {user}")


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


# --- change windows: the platform project holds its syncs while a deny window is open; the workloads do not -------
WINDOW_ENV = "eks"
QUOTA_KEY = "count/configmaps"


def _project(e2e, name) -> dict:
    from e2e import gitops, kube
    kubeconfig, context = gitops.management(e2e.current)
    return json.loads(kube.kubectl(kubeconfig, context, "-n", gitops.ARGOCD_NS, "get", "appproject", name,
                                   "-o", "json"))


def _live_quota(e2e, env) -> dict:
    quotas = e2e.core(env).list_namespaced_resource_quota(e2e.namespace(env)).items
    return {q.metadata.name: (q.spec.hard or {}) for q in quotas}


def _edit_and_push(e2e, edit, message):
    e2e.edit_environment(f"{WINDOW_ENV}.yaml", edit)
    e2e.generator("render")
    return e2e.push(message)


def _set_window(data):
    from ruamel.yaml.comments import CommentedMap
    sync = data.setdefault("sync", CommentedMap())
    sync["platformWindows"] = [CommentedMap(kind="deny", schedule="* * * * *", duration="3h", timeZone="UTC")]


def _drop_window(data):
    del data["sync"]["platformWindows"]
    if not data["sync"]:
        del data["sync"]


def _quota(value):
    def edit(data):
        hard = data["platform"]["values"]["resourceQuota"]["hard"]
        if value is None:
            hard.pop(QUOTA_KEY, None)
        else:
            hard[QUOTA_KEY] = value
    return edit


@pytest.mark.skipif(WINDOW_ENV not in ENVS, reason=f"no {WINDOW_ENV} environment in this e2e")
def test_a_platform_change_waits_for_its_window_and_lands_when_it_closes(e2e, bootstrapped):
    """A deny window (sync.platformWindows) is pushed to the platform project; a quota change pushed while it is
    open is not synced through three reconciles (the live ResourceQuota keeps its old hard limits, the
    platform app is OutOfSync, no new sync operation); the window's removal lets it land."""
    e2e.wait_synced_healthy(WINDOW_ENV, 420, names={f"{WINDOW_ENV}-platform"})
    _edit_and_push(e2e, _set_window, "e2e: a change window for the platform")
    wait_for(lambda: (bool(_project(e2e, f"{WINDOW_ENV}-platform")["spec"].get("syncWindows")), "no window yet"),
             180, 3, "the window did not reach the platform project")
    platform = f"{WINDOW_ENV}-platform"
    started = ((_app(e2e, WINDOW_ENV, platform).get("status") or {}).get("operationState") or {}).get("startedAt")
    _edit_and_push(e2e, _quota("500"), "e2e: a platform change while the window is open")
    wait_for(lambda: (e2e.app_state(_app(e2e, WINDOW_ENV, platform))[0] == "OutOfSync",
                      e2e.describe(_app(e2e, WINDOW_ENV, platform))), 120, 3,
             "Argo CD did not see the platform change")
    for _ in range(RECONCILES):  # three reconciles, each one where auto-sync would have synced
        app = e2e.reconcile(platform)
        assert e2e.app_state(app)[0] == "OutOfSync", e2e.describe(app)
        assert ((app.get("status") or {}).get("operationState") or {}).get("startedAt") == started, \
            "a sync ran inside the deny window"
        assert all(QUOTA_KEY not in hard for hard in _live_quota(e2e, WINDOW_ENV).values())
    _edit_and_push(e2e, _drop_window, "e2e: the window closes")
    wait_for(lambda: (any(hard.get(QUOTA_KEY) == "500" for hard in _live_quota(e2e, WINDOW_ENV).values()),
                      _live_quota(e2e, WINDOW_ENV)), 300, 5, "the platform change did not land after the window")
    _edit_and_push(e2e, _quota(None), "e2e: the platform change taken back")
    wait_for(lambda: (all(QUOTA_KEY not in hard for hard in _live_quota(e2e, WINDOW_ENV).values()),
                      _live_quota(e2e, WINDOW_ENV)), 300, 5, "the platform change was not taken back")
    e2e.wait_synced_healthy(WINDOW_ENV, 300, names={platform})
