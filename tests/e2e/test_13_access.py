"""People's access, with real logins: the people of the environments' `access` groups log in to the e2e's single
sign-on (Dex v2.41 over an LDAP directory, e2e.identity) with the password grant, and their ID tokens are what
the real argocd-server (v3.5.1) and the real API servers (v1.34, AuthenticationConfiguration) decide on, with the
committed argocd-rbac-cm and the platform chart's RoleBindings.

- An ML engineer of eks syncs its job app and deletes the job's RayJob through Argo CD (self-heal makes it again),
  and is refused: the platform project's sync, a sync to another revision (`override`), deleting an Application,
  anything of another environment.
- A viewer reads everything and is refused every write; a platform admin syncs the platform.
- On the cluster, the ML engineer's own token reads pods and logs (`make logs` with their credentials) and is
  refused a ClusterRoleBinding and exec; a token Dex issued to Argo CD is not one for the cluster.
- `make audit` names the ML engineer as the initiator of the sync and of the RayJob's delete (argocd-server's
  events), and (AUDIT_LOG) what the API server recorded: the delete and the RayJob made again, both by Argo CD's
  account as the workload project's ServiceAccount, and the ML engineer's refused ClusterRoleBinding.
- On minikube's real node, the standing RayCluster's dashboard (Ray 2.60 under KubeRay v1.6.2, Kubernetes token
  auth) takes the same people's tokens: none is refused (401), the environment's ML engineers and the platform team
  may use it, the viewer and another environment's ML engineer may not (403).
"""
from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from e2e import identity
from tests.e2e import day_two
from tests.e2e.harness import wait_for
from tests.support import load_yaml

ENV = "eks"
JOB = "digits-torch"
JOB_APP = f"{ENV}-job-{JOB}"
PLATFORM_APP = f"{ENV}-platform"
OTHER_ENV_APP = "minikube-job-digits-torch"
RAY_ENV = "minikube"  # its standing RayCluster runs on the real node


class Refused(Exception):
    def __init__(self, code: int, body: str):
        super().__init__(f"HTTP {code}: {body[:300]}")
        self.code, self.body = code, body


class ArgoCDAPI:
    """argocd-server's REST API as a person calls it: their ID token as the bearer."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url, token

    def call(self, method: str, path: str, body: dict | None = None, query: dict | None = None):
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None,
                                         headers={"Authorization": f"Bearer {self.token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read().decode()
                return json.loads(text) if text else {}
        except urllib.error.HTTPError as exc:
            raise Refused(exc.code, exc.read().decode(errors="replace")) from None

    def app_names(self) -> set[str]:
        return {a["metadata"]["name"] for a in self.call("GET", "/api/v1/applications").get("items") or []}

    def sync(self, app: str, revision: str = "") -> dict:
        return self.call("POST", f"/api/v1/applications/{app}/sync", {"revision": revision} if revision else {})

    def delete_app(self, app: str):
        return self.call("DELETE", f"/api/v1/applications/{app}", query={"cascade": "false"})

    def delete_resource(self, app: str, namespace: str, name: str, kind: str, group: str, version: str):
        return self.call("DELETE", f"/api/v1/applications/{app}/resource",
                         query={"namespace": namespace, "resourceName": name, "kind": kind, "group": group,
                                "version": version})


def refused(call, *args, **kwargs) -> Refused:
    with pytest.raises(Refused) as info:
        call(*args, **kwargs)
    return info.value


@pytest.fixture(scope="module")
def sso(e2e, finished):
    """The people, once argocd-server reads the single sign-on the root synced into argocd-cm. Argo CD v3.5.1 builds
    the OIDC client's TLS settings (oidc.config's rootCA) once, when argocd-server starts (server/server.go:351
    NewSessionManager; util/session/sessionmanager.go:144-164); its restart on an OIDC change
    (cmd/argocd-server/commands/argocd_server.go:274-276) reuses that session manager, so a private issuer's CA
    synced after the start is not trusted until the process restarts: the e2e restarts it, as an operator would
    (`kubectl -n argocd rollout restart deployment argocd-server`, docs/access.md)."""
    path = e2e.current.get("identity")
    assert path, "the e2e cluster runs no single sign-on (state has no identity): see the supervisor log"
    record = identity.read_record(path)
    wait_for(lambda: (identity.oidc_config(e2e.argocd_cm()).get("issuer") == record["issuer"],
                      identity.oidc_config(e2e.argocd_cm()).get("issuer")),
             300, 3, "argocd-cm's oidc.config synced with the e2e issuer")
    e2e.restart_process("argocd-server", e2e.current["argocd"]["server"] + "/api/version")
    by_role = {p["role"]: p for p in record["people"]}
    return record, by_role


def _person(by_role: dict, role: str) -> dict:
    assert role in by_role, f"no person holds {role}: {sorted(by_role)}"
    return by_role[role]


def _argocd(e2e, record: dict, person: dict) -> ArgoCDAPI:
    return ArgoCDAPI(e2e.current["argocd"]["server"],
                     identity.id_token(record, person["username"], record["argocd_client"]))


def _rayjob(e2e) -> dict:
    jobs = [j for j in e2e.objects(ENV, ("ray.io", "v1"), "rayjobs")
            if j["metadata"]["name"].startswith(f"{JOB}-")]
    assert len(jobs) == 1, f"expected one RayJob of {JOB} on {ENV}: {[j['metadata']['name'] for j in jobs]}"
    return jobs[0]


def _kubeconfig(e2e, path: Path, token: str) -> Path:
    """The e2e kubeconfig's contexts with a person's token instead of the admin's certificate."""
    config = load_yaml(e2e.kubeconfig.read_text())
    config["users"] = [{"name": u["name"], "user": {"token": token}} for u in config["users"]]
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _kubectl(kubeconfig: Path, context: str, *args: str) -> subprocess.CompletedProcess:
    from e2e import kube
    return subprocess.run([kube.kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--context={context}", *args],
                          capture_output=True, text=True, timeout=60)


def test_people_log_in_with_their_groups(sso):
    """Dex's password grant gives each person an ID token whose groups claim is the directory's (their environment's
    group), for the client that asked; a wrong password is refused."""
    record, by_role = sso
    assert {"role:admin", "role:readonly", "role:ml-eks", "role:ml-minikube"} <= set(by_role)
    for person in record["people"]:
        claims = identity.claims(identity.id_token(record, person["username"], record["argocd_client"]))
        assert claims["groups"] == [person["group"]], claims
        assert claims["aud"] == record["argocd_client"] and claims["email"] == f"{person['username']}@e2e.example"
        assert claims["iss"] == record["issuer"]
    with pytest.raises(identity.LoginError, match="401"):
        identity.id_token(record, by_role["role:ml-eks"]["username"], record["argocd_client"], password="not-it")


def test_ml_engineer_through_argocd(e2e, sso):
    """The eks ML engineer, through the real argocd-server: sees only eks's apps, syncs a job app (the operation
    names them), deletes the job's RayJob (self-heal makes it again), and is refused what the issue lists."""
    record, by_role = sso
    person = _person(by_role, "role:ml-eks")
    api = _argocd(e2e, record, person)
    visible = api.app_names()
    assert JOB_APP in visible and PLATFORM_APP in visible, visible
    assert not [n for n in visible if n.startswith("minikube-")], f"another environment's apps: {sorted(visible)}"

    synced = api.sync(JOB_APP)
    assert synced["operation"]["initiatedBy"]["username"] == f"{person['username']}@e2e.example", synced["operation"]
    wait_for(lambda: ((e2e.app(JOB_APP).get("status", {}).get("operationState") or {}).get("phase") == "Succeeded",
                      (e2e.app(JOB_APP).get("status", {}).get("operationState") or {}).get("phase")),
             180, 3, f"{JOB_APP}'s sync by {person['username']} to finish")

    # refused: the platform project, another revision than git's (override), deleting an Application, another env
    assert refused(api.sync, PLATFORM_APP).code == 403
    assert refused(api.sync, JOB_APP, _pinned_revision(e2e)).code == 403
    assert refused(api.delete_app, JOB_APP).code == 403
    assert refused(api.sync, OTHER_ENV_APP).code in (403, 404)
    assert JOB_APP in e2e_app_names(e2e)

    # a run's RayJob deleted through Argo CD: self-heal makes it again (a retry of the run)
    before = _rayjob(e2e)
    namespace = before["metadata"]["namespace"]
    api.delete_resource(JOB_APP, namespace, before["metadata"]["name"], "RayJob", "ray.io", "v1")

    def again():
        try:
            now = _rayjob(e2e)
        except AssertionError as exc:
            return False, str(exc)
        return now["metadata"]["uid"] != before["metadata"]["uid"], now["metadata"]["uid"]
    wait_for(again, 240, 3, f"{before['metadata']['name']} made again by self-heal after the ML engineer's delete")
    # a platform pod is not theirs to delete
    assert refused(api.delete_resource, PLATFORM_APP, namespace, "anything", "Pod", "", "v1").code == 403


def _pinned_revision(e2e) -> str:
    """A revision other than the one the apps follow (`main`): the commit itself, named by its hash. Argo CD
    compares the requested revision with targetRevision as written (server/application/application.go 2243-2252),
    so this is a sync to another revision: it needs `override`."""
    return subprocess.run(["git", "-C", str(e2e.work), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def e2e_app_names(e2e) -> set[str]:
    return {a["metadata"]["name"] for a in e2e.apps()}


def test_viewer_and_platform_admin(e2e, sso):
    """The viewer reads every app and is refused every write; the platform admin syncs the platform project (and is
    stopped at another revision only by the automated sync policy, not by RBAC)."""
    record, by_role = sso
    viewer = _argocd(e2e, record, _person(by_role, "role:readonly"))
    assert {JOB_APP, PLATFORM_APP, OTHER_ENV_APP} <= viewer.app_names()
    assert refused(viewer.sync, JOB_APP).code == 403
    assert refused(viewer.delete_app, JOB_APP).code == 403
    job = _rayjob(e2e)
    assert refused(viewer.delete_resource, JOB_APP, job["metadata"]["namespace"], job["metadata"]["name"],
                   "RayJob", "ray.io", "v1").code == 403

    admin_person = _person(by_role, "role:admin")
    admin = _argocd(e2e, record, admin_person)
    synced = admin.sync(PLATFORM_APP)
    assert synced["operation"]["initiatedBy"]["username"] == f"{admin_person['username']}@e2e.example"
    stopped = refused(admin.sync, JOB_APP, _pinned_revision(e2e))
    assert stopped.code == 400 and "auto-sync" in stopped.body, stopped


def test_ml_engineer_on_the_cluster(e2e, sso, tmp_path):
    """The ML engineer's own token on eks's API server: reads pods and logs (`make logs` works with it), is
    refused a ClusterRoleBinding and exec; a token Dex issued to Argo CD is refused by the cluster."""
    record, by_role = sso
    person = _person(by_role, "role:ml-eks")
    token = identity.id_token(record, person["username"], record["kubernetes_client"])
    kubeconfig = _kubeconfig(e2e, tmp_path / "ml-eks.kubeconfig", token)
    context = e2e.context(ENV)
    namespace = e2e.namespace(ENV)

    who = _kubectl(kubeconfig, context, "auth", "whoami", "-o", "json")
    assert who.returncode == 0, who.stderr
    user = json.loads(who.stdout)["status"]["userInfo"]
    assert user["username"] == f"{person['username']}@e2e.example" and person["group"] in user["groups"], user

    pods = _kubectl(kubeconfig, context, "-n", namespace, "get", "pods", "-o", "name")
    assert pods.returncode == 0 and pods.stdout.strip(), pods.stderr
    # the run self-heal made again prints a line (its submitter; kwok serves it as the pod's log); they read it
    run = _rayjob(e2e)["metadata"]["name"]
    submitter = day_two.running_submitter(e2e, ENV, run)
    line = f"e2e: a line {person['username']} reads with their own token"
    e2e.print_to_log(ENV, submitter, [line])
    logs = _kubectl(kubeconfig, context, "-n", namespace, "logs", submitter.metadata.name)
    assert logs.returncode == 0 and line in logs.stdout, logs.stdout + logs.stderr

    denied = _kubectl(kubeconfig, context, "create", "clusterrolebinding", "e2e-ml-takes-over",
                      "--clusterrole=cluster-admin", f"--user={person['username']}@e2e.example")
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr
    can_exec = _kubectl(kubeconfig, context, "-n", namespace, "auth", "can-i", "create", "pods/exec")
    assert can_exec.stdout.strip() == "no", can_exec.stdout + can_exec.stderr

    argocd_token = identity.id_token(record, person["username"], record["argocd_client"])
    wrong = _kubectl(_kubeconfig(e2e, tmp_path / "argocd-token.kubeconfig", argocd_token), context,
                     "-n", namespace, "get", "pods")
    assert wrong.returncode != 0 and "unauthorized" in wrong.stderr.lower(), wrong.stderr

    cmd, env = e2e.ops_command("logs", "--env", ENV, "--job", JOB, "--tail", "5")
    cmd[cmd.index("--kubeconfig") + 1] = str(kubeconfig)
    made = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert made.returncode == 0 and line in made.stdout, made.stdout + made.stderr
    # the run ends (its app Healthy again, as the scenarios before this one left it)
    day_two.succeed(e2e, ENV, run, [line])


def test_audit_names_the_people(e2e, sso):
    """`make audit` joins Argo CD's record (the ML engineer initiated the sync) with the API server's audit log
    (the RayJob made again by the workload project's ServiceAccount; the refused ClusterRoleBinding)."""
    record, by_role = sso
    person = _person(by_role, "role:ml-eks")
    email = f"{person['username']}@e2e.example"
    audit_log = Path(e2e.current["clusters"][ENV]["audit_log"])
    assert audit_log.is_file(), audit_log
    run = e2e.ops("audit", "--env", ENV, "--job", JOB, "--audit-log", str(audit_log))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"synced by {email}" in run.stdout, run.stdout
    rayjob = _rayjob(e2e)["metadata"]["name"]
    made = (f"patch rayjobs {rayjob} in {e2e.namespace(ENV)} by argocd-manager as "
            f"system:serviceaccount:{e2e.namespace(ENV)}:argocd-workload-sync (201)")
    assert made in run.stdout, run.stdout
    # the person's delete, as the cluster saw it: Argo CD's account, as the workload project's
    deleted = made.replace("patch rayjobs", "delete rayjobs").replace("(201)", "(200)")
    assert deleted in run.stdout, run.stdout
    assert f"{email} deleted resource ray.io/RayJob '{rayjob}'" in run.stdout, run.stdout
    # a create names no object at the Metadata level: the name is in the body
    assert f"refused: create clusterrolebindings by {email} (403)" in run.stdout, run.stdout


def _dashboard_status(url: str, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}/api/jobs/", headers=headers), timeout=60) as r:
            json.loads(r.read().decode())  # the job list: the dashboard answered, not a proxy
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_ray_dashboard_takes_peoples_tokens(e2e, sso):
    """The standing RayCluster of minikube (the real node: Ray 2.60 under KubeRay v1.6.2) runs Ray's Kubernetes
    token auth: its dashboard asks the API server who the bearer is (TokenReview) and whether they may `ray:write`
    this RayCluster (SubjectAccessReview), and the platform chart grants that to the environment's ML engineers and
    the platform team. Called from this machine (the node) at the head pod's address, as `kubectl port-forward`
    would: no token 401; minikube's ML engineer and the platform admin 200; the viewer, eks's ML engineer and a
    token for another audience (Argo CD's) 403."""
    record, by_role = sso
    assert e2e.real(RAY_ENV), f"{RAY_ENV} has no real node: the dashboard cannot be called"
    cluster = next(d for d in e2e.rendered(RAY_ENV, "ray-cluster") if d["kind"] == "RayCluster")
    name = cluster["metadata"]["name"]

    def head():
        pods = [p for p in e2e.pods(RAY_ENV, f"ray.io/cluster={name},ray.io/node-type=head")
                if p.status.phase == "Running" and p.status.pod_ip
                and all(c.ready for c in p.status.container_statuses or [])]
        if pods:
            return True, pods[0]
        return False, [(p.metadata.name, p.status.phase) for p in e2e.pods(RAY_ENV, f"ray.io/cluster={name}")]
    pod = wait_for(head, 300, 3, f"{name}'s head pod running and ready")
    url = f"http://{pod.status.pod_ip}:8265"

    def token(role: str, client: str = "") -> str:
        return identity.id_token(record, _person(by_role, role)["username"], client or record["kubernetes_client"])
    seen = {"no token": _dashboard_status(url, None)}
    for role in ("role:ml-minikube", "role:admin", "role:readonly", "role:ml-eks"):
        seen[role] = _dashboard_status(url, token(role))
    seen["Argo CD's token"] = _dashboard_status(url, token("role:ml-minikube", record["argocd_client"]))
    assert seen == {"no token": 401, "role:ml-minikube": 200, "role:admin": 200, "role:readonly": 403,
                    "role:ml-eks": 403, "Argo CD's token": 403}, seen
