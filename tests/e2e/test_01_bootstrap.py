"""Bootstrap: `kubectl apply -n argocd -f argocd/root.yaml` (its repoURL pointed at the local remote), then the real
applicationset-controller generates every Application the README promises, with distinct names, and every app
of each environment becomes Synced and Healthy as Argo CD itself computes it (its own Lua engine running our
health checks from the generated argocd-cm)."""
from __future__ import annotations

import pytest

from e2e import nodes
from tests.e2e import harness
from tests.e2e.conftest import MAKE_BOOTSTRAP_TIMEOUT
from tests.e2e.harness import operator_apps, wait_for

BOOTSTRAP_TIMEOUT = MAKE_BOOTSTRAP_TIMEOUT  # as make bootstrap is given (conftest.py): the root waits for every operator app to be Synced


def test_applicationsets_generate_every_promised_application(e2e, bootstrapped):
    expected = set().union(*(e2e.expected_apps(env) for env in e2e.envs))

    def check():
        names = [a["metadata"]["name"] for a in e2e.apps()]
        problems = []
        missing = expected - set(names)
        if missing:
            problems.append(f"not generated: {', '.join(sorted(missing))}")
        for appset in e2e.appsets():
            for cond in (appset.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "ErrorOccurred" and cond.get("status") == "True":
                    problems.append(f"ApplicationSet {appset['metadata']['name']}: {cond.get('message')}")
        unexpected = set(names) - expected - {"ray-gitops"}
        if unexpected:
            problems.append(f"not promised: {', '.join(sorted(unexpected))}")
        return not problems, "; ".join(problems) or names
    names = wait_for(check, BOOTSTRAP_TIMEOUT, 5, "the ApplicationSets did not generate the promised Applications")
    assert len(names) == len(set(names)), "two Applications share a name"


def test_root_application_synced_and_healthy(e2e, bootstrapped):
    try:
        wait_for(lambda: _root_ok(e2e), BOOTSTRAP_TIMEOUT, 5, "the root Application ray-gitops")
    except AssertionError as exc:
        harness.STALLED.append(str(exc))
        raise


def _root_ok(e2e):
    root = next((a for a in e2e.apps() if a["metadata"]["name"] == "ray-gitops"), None)
    if root is None:
        return False, "no Application ray-gitops"
    return e2e.synced_healthy(root), e2e.describe(root)


def _is_job_app(name: str) -> bool:
    return "-job-" in name


@pytest.mark.parametrize("env", nodes.environments())
def test_every_app_synced_and_healthy(e2e, bootstrapped, env):
    """Operators, platform and the standing cluster: Synced and Healthy. A job's app: Synced, its sync finished,
    its job running (Progressing until the job ends: test_03 ends them)."""
    expected = e2e.expected_apps(env)
    apps = e2e.wait_synced_healthy(env, BOOTSTRAP_TIMEOUT, names={n for n in expected if not _is_job_app(n)})
    # Argo CD computed the workloads' health with our Lua: a RayCluster's message is ours ("x/y worker
    # replicas ready"), not the empty one a kind without a health check gets
    cluster_app = next(a for a in apps if a["metadata"]["name"] == f"{env}-ray-cluster")
    rayclusters = [r for r in cluster_app["status"]["resources"] if r["kind"] == "RayCluster"]
    assert rayclusters and all(r["health"]["status"] == "Healthy" for r in rayclusters)
    assert all("worker replicas ready" in r["health"].get("message", "") for r in rayclusters), rayclusters

    def jobs_running():
        problems = []
        current = {a["metadata"]["name"]: a for a in e2e.env_apps(env)}
        for name in sorted(n for n in expected if _is_job_app(n)):
            app = current.get(name)
            if app is None:
                problems.append(f"no Application {name}")
                continue
            sync, health = e2e.app_state(app)
            op = (app.get("status") or {}).get("operationState") or {}
            if sync != "Synced" or health not in ("Progressing", "Healthy") or op.get("phase") != "Succeeded":
                problems.append(e2e.describe(app))
        return not problems, "; ".join(problems)
    wait_for(jobs_running, BOOTSTRAP_TIMEOUT, 5, f"the {env} job applications were not Synced with their job running")


@pytest.mark.parametrize("env", nodes.environments())
def test_workloads_come_after_their_operators_and_platform_are_healthy(e2e, bootstrapped, env):
    """The root's sync waves order CRDs -> operators -> platform -> workloads for real: the environment's
    ApplicationSet (the workloads) is created only once the CRD, operator and platform Applications are Healthy."""
    operators = [f"{env}-{app}" for app in (*operator_apps(env), "platform")]

    def check():
        missing = [n for n in operators if not bootstrapped.first_healthy.get(n)]
        created = bootstrapped.appsets_created.get(env)
        return (not missing and created is not None), f"not yet Healthy: {missing}; ApplicationSet {env}: {created}"
    wait_for(check, BOOTSTRAP_TIMEOUT, 3, f"the {env} operators and workloads")
    created = bootstrapped.appsets_created[env]
    late = {n: bootstrapped.first_healthy[n] for n in operators if bootstrapped.first_healthy[n] > created}
    assert not late, f"ApplicationSet {env} was created at {created}, before these were Healthy: {late}"


@pytest.mark.parametrize("env", nodes.environments())
def test_make_bootstrap_follows_the_environment_until_settled_and_names_the_dashboard(e2e, bootstrapped, env):
    """`make bootstrap ENV=<env>` (python -m ops bootstrap) was the bootstrap: it applied argocd/root.yaml, showed
    each Application of the environment as Argo CD moved it, ended 0 once all were Synced and Healthy (a job's app:
    Synced with its job running), and printed where the standing cluster's Ray dashboard is."""
    run = bootstrapped.bootstraps[env]
    rc = run.wait(MAKE_BOOTSTRAP_TIMEOUT + 120)
    out = run.output
    assert rc == 0, f"make bootstrap ENV={env} ended {rc}:\n{out[-3000:]}"
    assert "application.argoproj.io/ray-gitops serverside-applied" in out, out[:2000]
    progress = [line for line in out.splitlines() if line.startswith("[") and "ready)" in line]
    assert progress, f"no progress lines:\n{out[-2000:]}"
    for app in e2e.expected_apps(env):
        assert any(f" {app} " in line for line in progress), f"{app} never shown in the progress:\n{out[-3000:]}"
    total = len(e2e.expected_apps(env))
    assert f"({total}/{total} ready)" in out, out[-2000:]
    doc = e2e.env_doc(env)
    cluster = doc["rayCluster"]["name"]
    service = ((doc["rayCluster"].get("values") or {}).get("dashboardService") or {})
    dashboard = next((line for line in out.splitlines() if line.startswith(f"Ray dashboard of {cluster}:")), None)
    assert dashboard, f"no dashboard line for {cluster}:\n{out[-2000:]}"
    if service.get("enabled") and service.get("type") == "NodePort":
        assert dashboard.endswith(f":{service['nodePorts']['dashboard']}"), dashboard
    else:
        assert f"port-forward svc/{cluster}-head-svc 8265:8265" in dashboard, dashboard
    # and what it takes: a person's own Kubernetes token, or the token of the Secret the cluster names
    lines = out.splitlines()
    after = lines[lines.index(dashboard) + 1] if lines.index(dashboard) + 1 < len(lines) else ""
    if ((doc["rayCluster"].get("values") or {}).get("auth") or {}).get("kubernetesTokens"):
        assert f"ray:write on rayclusters/{cluster}" in after and f"create token {cluster}" in after, after
    elif ((doc.get("cluster") or {}).get("auth") or {}).get("mode") == "token":
        assert f"Secret {e2e.namespace(env)}/{doc['cluster']['auth']['secretName']}" in after, after


@pytest.mark.parametrize("env", nodes.environments())
def test_the_namespace_is_the_platform_apps_and_was_labelled_before_the_first_pod(e2e, bootstrapped, env):
    """No workload app may create the environment's namespace (no CreateNamespace): the platform app does, with its
    Pod Security labels in the same apply, and its quota, before any pod exists (a pod admitted into an unlabelled
    namespace is never checked again). Read from the API server: the namespace's tracking id names the platform
    app, and the enforce label's managedFields time and the quota's creation are before the first pod."""
    import json

    e2e.wait_synced_healthy(env, BOOTSTRAP_TIMEOUT, names={f"{env}-platform"})
    namespace = e2e.namespace(env)
    ns = e2e.core(env).read_namespace(namespace)
    tracking = (ns.metadata.annotations or {}).get("argocd.argoproj.io/tracking-id", "")
    assert tracking.startswith(f"{env}-platform:"), f"namespace {namespace} tracked as {tracking!r}"
    labels = ns.metadata.labels or {}
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted", labels
    label_set = min(entry.time for entry in ns.metadata.managed_fields or []
                    if "f:pod-security.kubernetes.io/enforce" in json.dumps(entry.fields_v1 or {}))
    pods = e2e.pods(env)
    assert pods, f"no pod in {namespace} yet"
    first_pod = min(p.metadata.creation_timestamp for p in pods)
    assert label_set <= first_pod, f"enforce label set at {label_set}, after the first pod ({first_pod})"
    quotas = e2e.core(env).list_namespaced_resource_quota(namespace).items
    assert quotas, f"no ResourceQuota in {namespace}"
    assert all(q.metadata.creation_timestamp <= first_pod for q in quotas), (
        [(q.metadata.name, q.metadata.creation_timestamp) for q in quotas], first_pod)
