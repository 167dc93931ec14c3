"""make bootstrap: an environment's first deploy, and a check on it later (idempotent).

1. Argo CD must be installed where the environment says it runs (gitops.argocd.context): its Application CRD and
   namespace; otherwise the pinned install command is printed.
2. The Secrets the workloads reference (made out of git), and the notifications credentials (keys of Argo CD's
   argocd-notifications-secret), are checked; missing ones are named with the command that creates them (the run
   would fail without them: e.g. KubeRay cannot reach a token-auth dashboard).
   Where the environment's checkpoints live on FSx for Lustre, the cluster's FSx CSI driver must exist and apply
   the pods' fsGroup (`fsGroupPolicy: File`), or uid 1000 cannot write the checkpoint root: named with the fix.
3. `argocd/root.yaml` is applied (server-side, as kubectl does), then a live display follows every Application
   of the environment until each is Synced and Healthy (a job's, until its job runs), or names the first that is
   not and why when time runs out.
   Where MultiKueue places the jobs (queueing.multiKueue), the manager's kubeconfig Secrets for its workers are made
   (ops/multikueue.py) as soon as Argo CD has synced the workers' ServiceAccounts and Kueue's namespace.
4. The Ray dashboard of the standing cluster: its NodePort address, or the port-forward to run.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from generator import versions

from . import manifests, multikueue, targets
from . import status as status_mod
from .targets import EXIT_NOT_HEALTHY, EXIT_TIMEOUT, EXIT_UNREACHABLE, Clients, OpsError, Target

ARGOCD_VERSION = versions.pinned().argocd
INSTALL = (f"kubectl create namespace argocd && kubectl apply -n argocd --server-side -f "
           f"https://raw.githubusercontent.com/argoproj/argo-cd/{ARGOCD_VERSION}/manifests/install.yaml")


def check_argocd(clients: Clients, target: Target) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    api = clients.api(target.argocd_context)
    try:
        client.ApiextensionsV1Api(api).read_custom_resource_definition("applications.argoproj.io")
        client.CoreV1Api(api).read_namespace(target.argocd_namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        raise OpsError(f"Argo CD is not installed on context {target.argocd_context} (namespace "
                       f"{target.argocd_namespace}); install {ARGOCD_VERSION}, pinned:\n  {INSTALL}",
                       EXIT_UNREACHABLE) from None


def referenced_secrets(apps_env_dir: Path, default_namespace: str = "default") -> dict[tuple[str, str], set[str]]:
    """{(namespace, Secret name): keys} the rendered workloads of an environment read from Secrets made out of git:
    env secretKeyRefs, and Ray token auth (authOptions.secretName, key auth_token, which KubeRay reads to call the
    dashboard). Every app folder counts, a cluster's own (apps/<env>/clusters/<cluster>/<app>) too."""
    return referenced_secrets_in(sorted(apps_env_dir.rglob("*.yaml")), default_namespace)


def referenced_secrets_in(files: list[Path], default_namespace: str = "default") -> dict[tuple[str, str], set[str]]:
    """As referenced_secrets, of these rendered files (one cluster's: Target.rendered)."""
    return referenced_secrets_of([manifests.read(path) for path in files], default_namespace)


def referenced_secrets_of(docs: list[dict], default_namespace: str = "default") -> dict[tuple[str, str], set[str]]:
    """As referenced_secrets, of these parsed rendered documents."""
    found: dict[tuple[str, str], set[str]] = {}
    for doc in docs:
        _secret_refs(doc, (doc.get("metadata") or {}).get("namespace", default_namespace), found)
    return found


def gated_secrets(docs: list[dict]) -> set[tuple[str, str]]:
    """{(namespace, Secret name)} a cluster's API server needs before it admits a job's Workload: the parameters of
    its rendered ValidatingAdmissionPolicyBindings with parameterNotFoundAction Deny (the MultiKueue worker's gate,
    charts/platform templates/multikueue.yaml)."""
    found = set()
    for doc in docs:
        if doc.get("kind") != "ValidatingAdmissionPolicyBinding":
            continue
        ref = (doc.get("spec") or {}).get("paramRef") or {}
        if ref.get("name") and ref.get("namespace") and ref.get("parameterNotFoundAction") == "Deny":
            found.add((ref["namespace"], ref["name"]))
    return found


NOTIFICATIONS_CM = "argocd-notifications-cm"
NOTIFICATIONS_SECRET = "argocd-notifications-secret"


def notifications_keys(argocd_dir: Path, env: str) -> list[str]:
    """The keys of argocd-notifications-secret the environment's notifications service reads (`$key` in its
    configuration, as the rendered argocd-notifications-cm has it)."""
    import re
    path = argocd_dir / "managed" / f"configmap-{NOTIFICATIONS_CM}.yaml"
    if not path.is_file():
        return []
    data = (yaml.safe_load(path.read_text()) or {}).get("data") or {}
    keys = set()
    for key, text in data.items():
        if key.startswith("service.") and key.endswith(f".ray-gitops-{env}"):
            keys |= set(re.findall(r"\$([\w-]+)", text))
    return sorted(keys)


def missing_secrets(clients: Clients, target: Target, root: Path) -> list[str]:
    """Commands that create the Secrets (and Secret keys) the environment reads and that do not exist: its
    workloads' Secrets, and the notifications credentials in Argo CD's argocd-notifications-secret. Their values
    never come from git."""
    from kubernetes.client.rest import ApiException
    core = clients.core(target.context)
    commands = []
    keys = notifications_keys(root / "argocd", target.env)
    if keys:
        try:
            have = clients.core(target.argocd_context).read_namespaced_secret(
                NOTIFICATIONS_SECRET, target.argocd_namespace).data or {}
        except ApiException as exc:
            if exc.status != 404:
                raise
            have = {}
        absent = [k for k in keys if k not in have]
        if absent:
            commands.append(patch_secret_command(target.argocd_context, target.argocd_namespace,
                                                 NOTIFICATIONS_SECRET, absent))
    for (namespace, name), keys in sorted(referenced_secrets(root / "apps" / target.env, target.namespace).items()):
        try:
            core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            commands.append(create_secret_command(target.context, namespace, name, keys))
    return commands


def create_secret_command(context: str, namespace: str, name: str, keys) -> str:
    """The kubectl that creates a Secret made out of git, its values left for a person to fill in."""
    literals = " ".join(f"--from-literal={k}=..." for k in sorted(keys))
    return f"kubectl --context {context} -n {namespace} create secret generic {name} {literals}"


def patch_secret_command(context: str, namespace: str, name: str, keys) -> str:
    """The kubectl that adds keys to an existing Secret, their values left for a person to fill in."""
    data = json.dumps({"stringData": {k: "..." for k in keys}})
    return f"kubectl --context {context} -n {namespace} patch secret {name} --type merge -p '{data}'"


def _secret_refs(node, namespace: str, found: dict) -> None:
    if isinstance(node, dict):
        ref = node.get("secretKeyRef")
        if isinstance(ref, dict) and ref.get("name") and ref.get("key"):
            found.setdefault((namespace, ref["name"]), set()).add(ref["key"])
        auth = node.get("authOptions")
        if isinstance(auth, dict) and auth.get("mode") == "token" and auth.get("secretName"):
            found.setdefault((namespace, auth["secretName"]), set()).add("auth_token")
        for value in node.values():
            _secret_refs(value, namespace, found)
    elif isinstance(node, list):
        for value in node:
            _secret_refs(value, namespace, found)


FSX_DRIVER = "fsx.csi.aws.com"
FSX_FIX = ("install (or upgrade) the aws-fsx-csi-driver Helm chart with --set csidriver.fsGroupPolicy=File, or make "
           "the checkpoint root writable once (docs/eks.md)")


def fsx_provisioned(files: list[Path]) -> list[str]:
    """The StorageClasses among rendered files that FSx for Lustre's CSI driver provisions."""
    names = []
    for path in files:
        doc = manifests.read(path)
        if doc.get("kind") == "StorageClass" and doc.get("provisioner") == FSX_DRIVER:
            names.append(doc["metadata"]["name"])
    return names


def checkpoint_storage_problems(clients: Clients, target: Target, root: Path) -> list[str]:
    """What keeps the pods (uid 1000, fsGroup 100) from writing FSx checkpoints, read off the cluster: no FSx CSI
    driver (the claim stays Pending), or one with the default fsGroupPolicy (ReadWriteOnceWithFSType), which never
    applies fsGroup to a ReadWriteMany claim, so the root stays root's (k8s.io/kubernetes v1.34.4
    pkg/volume/csi/csi_mounter.go supportsFSGroup, lines 453-484: File always; otherwise ReadWriteOnce only)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    classes = fsx_provisioned(target.rendered(root, "storageclass-*.yaml"))
    if not classes:
        return []
    try:
        driver = client.StorageV1Api(clients.api(target.context)).read_csi_driver(FSX_DRIVER)
    except ApiException as exc:
        if exc.status != 404:
            raise
        return [f"no CSIDriver {FSX_DRIVER} on context {target.context}: the FSx for Lustre CSI driver is not "
                f"installed, so claims of StorageClass {', '.join(classes)} stay Pending and no job can checkpoint; "
                f"{FSX_FIX}"]
    policy = driver.spec.fs_group_policy or "ReadWriteOnceWithFSType"
    if policy != "File":
        return [f"CSIDriver {FSX_DRIVER} on context {target.context} has fsGroupPolicy {policy}: Kubernetes never "
                f"applies the pods' fsGroup to the ReadWriteMany checkpoint claim, so uid 1000 cannot write the FSx "
                f"root (PermissionError at the first checkpoint); {FSX_FIX}"]
    return []


def apply_root(target: Target, root: Path) -> str:
    kubectl = _kubectl(root)
    cmd = [kubectl, "--context", target.argocd_context, "-n", target.argocd_namespace, "apply", "--server-side",
           "--field-manager=kubectl", "-f", str(root / "argocd" / "root.yaml")]
    if target.kubeconfig:
        cmd[1:1] = ["--kubeconfig", target.kubeconfig]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise OpsError(f"kubectl apply -f argocd/root.yaml failed: {proc.stderr.strip()}", EXIT_NOT_HEALTHY)
    return proc.stdout.strip()


def root_application(root: Path) -> str:
    """The name of the Application argocd/root.yaml makes (the app of apps)."""
    doc = yaml.safe_load((root / "argocd" / "root.yaml").read_text())
    return doc["metadata"]["name"]


SSO_RESTART = ("kubectl -n argocd rollout restart deployment argocd-server: Argo CD v3.5.1 reads oidc.config's "
               "rootCA only when argocd-server starts (docs/access.md)")


def private_sso_ca(root: Path) -> bool:
    """Does the rendered argocd-cm trust the single sign-on through a CA of its own (oidc.config rootCA)?"""
    path = root / "argocd" / "managed" / "configmap-argocd-cm.yaml"
    if not path.is_file():
        return False
    data = (yaml.safe_load(path.read_text()) or {}).get("data") or {}
    return bool((yaml.safe_load(data.get("oidc.config") or "") or {}).get("rootCA"))


def request_refresh(clients: Clients, target: Target, name: str) -> None:
    """Ask Argo CD to reconcile Application `name` now: the refresh its UI's button asks for (the annotation
    `argocd.argoproj.io/refresh: normal`, which the application-controller takes off). It syncs nothing itself."""
    clients.custom(target.argocd_context).patch_namespaced_custom_object(
        "argoproj.io", "v1alpha1", target.argocd_namespace, "applications", name,
        {"metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}})


def _kubectl(root: Path) -> str:
    import shutil
    local = root / ".tools" / "bin" / "kubectl"
    for candidate in (local, Path(__file__).resolve().parent.parent / ".tools" / "bin" / "kubectl"):
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("kubectl")
    if not found:
        raise OpsError("kubectl not found: make setup installs one into .tools/bin")
    return found


def settled(app: dict) -> bool:
    """Synced and Healthy; a job's app: Synced with its sync finished and its job running (Progressing)."""
    if app["sync"] != "Synced":
        return False
    if app["health"] == "Healthy":
        return True
    return "-job-" in app["name"] and app["health"] == "Progressing" and app["operation"] in ("Succeeded", "")


def expected_applications(root: Path, env: str) -> set[str]:
    """The Applications the rendered Argo CD layer makes for an environment: the ones in argocd/managed/ labelled
    with it (the operators), and one per cluster and directory its ApplicationSet's git generator matches
    (apps/<env>/*, and apps/<env>/clusters/<cluster>/* on an environment of several clusters, less the excluded
    ones), named by the set's template for each of the environment's cluster Secrets. Argo CD creates them one sync
    wave after another, so bootstrap waits for all of them, not only for the ones that exist so far."""
    names: set[str] = set()
    docs = [doc for path in sorted((root / "argocd" / "managed").glob("*.yaml"))
            for doc in manifests.read_all(path)
            if isinstance(doc, dict) and ((doc.get("metadata") or {}).get("labels") or {}).get(
                "ray-gitops/environment") == env]
    clusters = [(doc["metadata"].get("labels") or {}) for doc in docs
                if doc.get("kind") == "Secret" and (doc["metadata"].get("labels") or {}).get(
                    "argocd.argoproj.io/secret-type") == "cluster"]
    for doc in docs:
        if doc.get("kind") == "Application":
            names.add(doc["metadata"]["name"])
        elif doc.get("kind") == "ApplicationSet":
            template = doc["spec"]["template"]["metadata"]["name"]
            for labels in clusters or [{}]:
                def fill(text: str, labels=labels) -> str:
                    for key, value in labels.items():
                        text = text.replace(f'{{{{ index .metadata.labels "{key}" }}}}', value)
                    return text
                included, excluded = _git_directories(doc["spec"]["generators"])
                skip = {m for pattern in excluded for m in root.glob(fill(pattern))}
                for pattern in included:
                    for match in sorted(root.glob(fill(pattern))):
                        if match.is_dir() and match not in skip:
                            names.add(fill(template).replace("{{ .path.basename }}", match.name))
    return names


def _git_directories(generators: list) -> tuple[list[str], list[str]]:
    """(included, excluded) directory patterns of the git generators, matrices included."""
    included, excluded = [], []
    for gen in generators or []:
        for d in (gen.get("git") or {}).get("directories") or []:
            (excluded if d.get("exclude") else included).append(d["path"])
        more = _git_directories((gen.get("matrix") or {}).get("generators"))
        included += more[0]
        excluded += more[1]
    return included, excluded


def wait_settled(clients: Clients, target: Target, timeout: float, out=sys.stdout, poll: float = 3.0,
                 expected: set[str] | None = None, on_list=None) -> list[dict]:
    """Follow the environment's Applications until every one (those that exist and the ``expected`` ones Argo CD
    has yet to create) is settled; print each change of one. ``on_list`` is given each list it reads (bootstrap's
    RootRefresher follows them instead of listing them itself)."""
    expected = expected or set()
    start = time.monotonic()
    shown: dict[str, str] = {}
    apps: list[dict] = []
    while True:
        apps = status_mod.applications(clients, target)
        if on_list is not None:
            on_list(apps)
        waiting = sorted(expected - {a["name"] for a in apps})
        total = len(apps) + len(waiting)
        for app in apps:
            line = f"{app['sync']}/{app['health']}" + (f" ({app['message'][:100]})" if app["message"] else "")
            if shown.get(app["name"]) != line:
                shown[app["name"]] = line
                ready = sum(1 for a in apps if settled(a))
                print(f"[{time.monotonic() - start:4.0f} s] {app['name']:<34} {line}  ({ready}/{total} ready)",
                      file=out, flush=True)
        if apps and not waiting and all(settled(a) for a in apps):
            return apps
        if time.monotonic() - start > timeout:
            if not apps:
                raise OpsError(f"after {timeout:.0f} s Argo CD has no Application of environment {target.env} "
                               f"(label ray-gitops/environment={target.env}): is argocd/root.yaml's repository "
                               f"reachable, and the environment rendered (make render) and pushed?", EXIT_TIMEOUT)
            first = next((a for a in apps if not settled(a)), None)
            if first is None:
                raise OpsError(f"after {timeout:.0f} s Argo CD has not created {', '.join(waiting)} (rendered in "
                               f"argocd/ and apps/{target.env}/): is everything pushed, and are the earlier sync "
                               f"waves healthy?", EXIT_TIMEOUT)
            raise OpsError(f"after {timeout:.0f} s {first['name']} is {first['sync']}/{first['health']}"
                           f"{': ' + first['message'] if first['message'] else ''}", EXIT_TIMEOUT)
        time.sleep(poll)


class RootRefresher:
    """The app of apps moves on to its next sync wave only when Argo CD reconciles it, and that happens when its
    resync period comes round (120-180 s by default), not when the Applications of its wave turn Healthy: the e2e
    with --app-resync 60 saw the root's sync resume once a minute, a period per wave. So while bootstrap runs, each
    time more of the environment's Applications are settled, this asks Argo CD to reconcile the root, as the UI's
    refresh would. It follows the lists wait_settled reads (``observe``); before that wait starts (while
    bootstrap links MultiKueue's clusters) a thread lists them itself every `poll` s, and stops at the first list
    wait_settled hands over, so the Applications are never listed twice. A refusal (RBAC) is said once, then
    left."""

    def __init__(self, clients: Clients, target: Target, name: str, out=sys.stdout, poll: float = 3.0):
        import threading
        self.clients, self.target, self.name, self.out, self.poll = clients, target, name, out, poll
        self.refreshes = 0
        self.lists = 0  # the lists of Applications this made itself (not the ones it was handed)
        self._settled = 0
        self._given_up = False
        self._lock = threading.Lock()
        self._handed = threading.Event()  # wait_settled's lists drive it from now on
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="root-refresher", daemon=True)

    def __enter__(self) -> RootRefresher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def observe(self, apps: list[dict]) -> None:
        """A list of the environment's Applications someone else read (wait_settled's on_list)."""
        self._handed.set()
        self._consider(apps)

    def _run(self) -> None:
        while not self._stop.wait(self.poll) and not self._handed.is_set() and not self._given_up:
            try:
                apps = status_mod.applications(self.clients, self.target)
            except Exception as exc:  # noqa: BLE001 - a refresh only saves time; bootstrap goes on without it
                self._give_up(exc)
                return
            self.lists += 1
            if not self._handed.is_set():
                self._consider(apps)

    def _consider(self, apps: list[dict]) -> None:
        with self._lock:
            if self._given_up:
                return
            now = sum(1 for a in apps if settled(a))
            try:
                if now > self._settled:
                    request_refresh(self.clients, self.target, self.name)
                    self.refreshes += 1
            except Exception as exc:  # noqa: BLE001 - as above
                self._give_up(exc)
                return
            self._settled = now

    def _give_up(self, exc: Exception) -> None:
        self._given_up = True
        reason = getattr(exc, "reason", None) or type(exc).__name__
        print(f"could not ask Argo CD to refresh {self.name} ({reason}): its sync waves advance at its resync",
              file=self.out, flush=True)


def bootstrap(clients: Clients, target: Target, root: Path, timeout: float = 900, out=sys.stdout) -> int:
    check_argocd(clients, target)
    missing = missing_secrets(clients, target, root)
    if missing:
        print("these Secrets the workloads read do not exist yet (their values never come from git):", file=out)
        for command in missing:
            print(f"  {command}", file=out)
    storage = checkpoint_storage_problems(clients, target, root)
    for problem in storage:
        print(f"checkpoint storage: {problem}", file=out)
    print(apply_root(target, root), file=out)
    started = time.monotonic()
    with RootRefresher(clients, target, root_application(root), out) as refresher:
        if target.placement is not None and target.placement.dispatches:
            # the manager's Secrets to reach its workers: the workers' accounts exist once Argo CD synced them
            multikueue.ensure_all(clients, multikueue.links(targets.fleet(root, target.env, target.kubeconfig)),
                                  timeout, out)
        wait_settled(clients, target, max(60.0, timeout - (time.monotonic() - started)), out,
                     expected=expected_applications(root, target.env), on_list=refresher.observe)
    if private_sso_ca(root):
        print(f"single sign-on through a private CA: once, after this first sync, {SSO_RESTART}", file=out)
    standing = [c for c in status_mod.ray_clusters(clients, target) if c["owner"] is None]
    for cluster in standing:
        print(f"Ray dashboard of {cluster['name']}: {cluster['dashboardUrl']}", file=out)
        if cluster["dashboardAuth"]:
            print(f"  it takes {cluster['dashboardAuth']}", file=out)
    return 0 if not missing and not storage else EXIT_NOT_HEALTHY
