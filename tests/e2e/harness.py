"""What the scenarios do on the e2e cluster: read what the real controllers report, change git as a user would,
and wait (with a message that says what was still wrong when time ran out)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from e2e import gitops, kube, kwok_stages, pod_logs, procs, world
from tests.support import load_yaml

# the checkout the e2e cluster publishes (python -m e2e run --source; default: this one)
ROOT = Path(os.environ.get("E2E_SOURCE", Path(__file__).resolve().parents[2]))
ARGOCD_NS = "argocd"
RAY = ("ray.io", "v1")
KUBEFLOW = ("kubeflow.org", "v1")
ARGO = ("argoproj.io", "v1alpha1")


def environment(env: str) -> dict:
    """The environment as the generator composes it (this checkout): for choosing which scenarios apply."""
    from generator import environments
    return environments.load(ROOT, env).doc


def operator_apps(env: str) -> list[str]:
    """The operator Applications each cluster of the environment gets (Kueue where it queues)."""
    queues = (environment(env).get("queueing") or {}).get("enabled", False)
    return ["kuberay-crds", "kuberay-operator", "training-operator", *(["kueue"] if queues else [])]


def envs_where(predicate) -> list[str]:
    from e2e import nodes
    return [env for env in nodes.environments() if predicate(environment(env))]


# label -> seconds: what a scenario measured that `make e2e` prints as a budget line (conftest records them)
BUDGETS: dict[str, float] = {}


class Timeout(AssertionError):
    pass


# Set when the bootstrap itself stalled: every later wait is then cut to STALLED_TIMEOUT (the cluster will not
# converge by waiting longer) and its failure names the stall, so a broken run reports every scenario in minutes.
STALLED: list[str] = []
STALLED_TIMEOUT = 30


def wait_for(check, timeout: float, interval: float = 3.0, what: str = ""):
    """Poll `check()` -> (ok, detail) until ok; on timeout fail with the last detail."""
    if STALLED:
        timeout = min(timeout, STALLED_TIMEOUT)
        what = f"{what} [the bootstrap had stalled: {STALLED[0][:300]}]"
    deadline = time.monotonic() + timeout
    detail = "not checked yet"
    while True:
        try:
            ok, detail = check()
        except Exception as exc:  # noqa: BLE001 - reported if it is still failing at the deadline
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        if ok:
            return detail
        if time.monotonic() > deadline:
            raise Timeout(f"after {timeout:.0f} s, {what}: {detail}")
        time.sleep(interval)


class Harness:
    def __init__(self, current: dict):
        self.current = current
        self.kubeconfig = Path(current["kubeconfig"])
        self.work = Path(current["git"]["work"])
        self.world = world.World.load(Path(current["world_file"]))
        self._clients = {}

    # --- clusters ---------------------------------------------------------------------------------------------
    @property
    def envs(self) -> list[str]:
        """The environments with an e2e cluster (the clusters whose key is an environment's name: an environment
        of several clusters is its cluster keyed like it here; the others are `clusters`, by key)."""
        return sorted(key for key, c in self.current["clusters"].items() if c.get("environment", key) == key)

    @property
    def clusters(self) -> dict:
        """{cluster key: {environment, context, server, ...}} of every e2e cluster."""
        return self.current["clusters"]

    def context(self, env: str) -> str:
        return self.current["clusters"][env]["context"]

    def api(self, env: str):
        if env not in self._clients:
            self._clients[env] = kube.api_client(self.kubeconfig, self.context(env))
        return self._clients[env]

    def core(self, env: str):
        from kubernetes import client
        return client.CoreV1Api(self.api(env))

    def custom(self, env: str):
        from kubernetes import client
        return client.CustomObjectsApi(self.api(env))

    def kubectl(self, env: str, *args: str, stdin: str | None = None) -> str:
        return kube.kubectl(self.kubeconfig, self.context(env), *args, stdin=stdin)

    def namespace(self, env: str) -> str:
        return self.env_doc(env)["target"]["namespace"]

    def env_doc(self, env: str) -> dict:
        from generator import environments
        return environments.load(self.work, env).doc

    def objects(self, env: str, group_version: tuple[str, str], plural: str, namespace: str | None = None) -> list:
        group, version = group_version
        ns = namespace or self.namespace(env)
        return self.custom(env).list_namespaced_custom_object(group, version, ns, plural)["items"]

    def pods(self, env: str, selector: str = "", namespace: str | None = None) -> list:
        return self.core(env).list_namespaced_pod(namespace or self.namespace(env), label_selector=selector).items

    def events(self, env: str, namespace: str | None = None) -> list:
        return self.core(env).list_namespaced_event(namespace or self.namespace(env)).items

    def real(self, env: str) -> bool:
        """Is the environment's node this machine (real containers), not kwok's?"""
        return bool(self.current["clusters"][env].get("real_node"))

    @property
    def real_envs(self) -> list[str]:
        return [env for env in self.envs if self.real(env)]

    def load_image(self, env: str, source: str, target: str) -> None:
        """`minikube image load` of a rebuilt image: the node's containerd knows `source` as `target` too."""
        from e2e.real_node import tag_image
        tag_image(Path(self.current["clusters"][env]["real_node"]["containerd"]), source, target)

    def exec(self, env: str, pod: str, *command: str, namespace: str | None = None, container: str = "") -> str:
        """Run a command in a container of a real pod (kubectl exec, through the real kubelet)."""
        args = ["exec", "-n", namespace or self.namespace(env), pod, *(["-c", container] if container else []), "--",
                *command]
        return self.kubectl(env, *args)

    def finish_pod(self, env: str, pod, exit_code: int, reason: str = "", message: str = "") -> None:
        """Make kwok end a running pod with this exit code (e2e.kwok_stages). A real pod ends by itself: nothing
        is done to it."""
        if self.real(env):
            return
        annotations = {kwok_stages.EXIT_CODE: str(exit_code)}
        if reason:
            annotations[kwok_stages.REASON] = reason
        if message:
            annotations[kwok_stages.MESSAGE] = message
        from kubernetes.client.exceptions import ApiException
        try:
            self.core(env).patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                                {"metadata": {"annotations": annotations}})
        except ApiException as exc:
            # deleted since it was listed (a PyTorchJob's cleanPodPolicy removes a worker still running when the
            # master succeeded): it has ended; the callers wait for the run's end, not for this pod
            if exc.status != 404:
                raise

    def print_to_log(self, env: str, pod, lines: list[str], container: str | None = None) -> None:
        """The pod prints these lines (kwok serves them as its log: e2e.pod_logs)."""
        assert not self.real(env), f"{env}'s pods are real: what they print is theirs, not a scenario's"
        containers = [c.name for c in pod.spec.containers]
        pod_logs.write(self.custom(env), Path(self.current["clusters"][env]["kubeconfig"]).parent,
                       pod.metadata.namespace, pod.metadata.name, containers, {container or containers[0]: lines})

    def hold_pod(self, env: str, pod, reason: str, message: str = "") -> None:
        """Make kwok hold the pod's containers waiting with this reason (e.g. ErrImagePull), as a kubelet would."""
        assert not self.real(env), f"{env}'s pods are real: the kubelet says why they wait"
        annotations = {kwok_stages.WAITING: reason}
        if message:
            annotations[kwok_stages.MESSAGE] = message
        from kubernetes.client.exceptions import ApiException
        try:
            self.core(env).patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                                {"metadata": {"annotations": annotations}})
        except ApiException as exc:
            # deleted since it was listed (a PyTorchJob's cleanPodPolicy removes a worker still running when the
            # master succeeded): it has ended; the callers wait for the run's end, not for this pod
            if exc.status != 404:
                raise

    # --- Argo CD ----------------------------------------------------------------------------------------------
    def bootstrap(self) -> str:
        return gitops.bootstrap(self.current)

    def apps(self) -> list[dict]:
        return gitops.applications(self.current)

    def appsets(self) -> list[dict]:
        return gitops.applicationsets(self.current)

    @staticmethod
    def app_state(app: dict) -> tuple[str, str]:
        return gitops.app_state(app)

    def synced_healthy(self, app: dict) -> bool:
        return self.app_state(app) == ("Synced", "Healthy")

    def env_apps(self, env: str) -> list[dict]:
        return [a for a in self.apps()
                if (a["metadata"].get("labels") or {}).get("ray-gitops/environment") == env]

    @staticmethod
    def describe(app: dict) -> str:
        status = app.get("status") or {}
        sync, health = gitops.app_state(app)
        parts = [f"{app['metadata']['name']} {sync}/{health}"]
        if (status.get("health") or {}).get("message"):
            parts.append(f"health: {status['health']['message']}")
        op = status.get("operationState") or {}
        if op and op.get("phase") != "Succeeded":
            parts.append(f"operation {op.get('phase')}: {op.get('message', '')[:300]}")
        for cond in status.get("conditions") or []:
            parts.append(f"{cond.get('type')}: {cond.get('message', '')[:300]}")
        for res in status.get("resources") or []:
            rh = (res.get("health") or {}).get("status")
            if res.get("status") not in (None, "Synced") or rh not in (None, "Healthy"):
                parts.append(f"{res.get('kind')}/{res.get('name')} {res.get('status')}/{rh}"
                             f"{': ' + res['health']['message'][:200] if (res.get('health') or {}).get('message') else ''}")
        return "; ".join(parts)

    def app(self, name: str) -> dict:
        return next(a for a in self.apps() if a["metadata"]["name"] == name)

    def reconcile(self, name: str, timeout: float = 120) -> dict:
        """One reconcile of Application `name`, asked for now rather than waited for (the resync period is Argo
        CD's business, e2e/argo.py): returns the Application once Argo CD reports a newer `reconciledAt`."""
        before = (self.app(name).get("status") or {}).get("reconciledAt")
        time.sleep(1.1)  # reconciledAt has whole seconds: the next one must be able to differ
        gitops.request_reconcile(self.current, [name])

        def check():
            app = self.app(name)
            at = (app.get("status") or {}).get("reconciledAt")
            return at is not None and at != before, app if at != before else f"{name}: reconciledAt still {at}"
        return wait_for(check, timeout, 1, f"Argo CD did not reconcile {name}")

    def expected_apps(self, env: str) -> set[str]:
        """The Applications the README promises for an environment: per cluster of it, the three operator apps and
        one per directory of apps/<env>/ (less `clusters`) and of its own apps/<env>/clusters/<cluster>/, named by
        the cluster's prefix (docs/argocd.md)."""
        apps: set[str] = set()
        for key, cluster in self.current["clusters"].items():
            if cluster.get("environment", key) != env:
                continue
            own = self.own_dir(key)
            folders = [d for d in (self.work / "apps" / env).iterdir() if d.is_dir() and d.name != "clusters"]
            folders += [d for d in own.iterdir() if d.is_dir()] if own.is_dir() else []
            apps |= {f"{key}-{name}" for name in operator_apps(env)}
            apps |= {f"{key}-{d.name}" for d in folders}
        return apps

    def wait_synced_healthy(self, env: str, timeout: float, names: set[str] | None = None) -> list[dict]:
        expected = names or self.expected_apps(env)

        def check():
            apps = {a["metadata"]["name"]: a for a in self.apps()}
            missing = sorted(expected - set(apps))
            bad = [self.describe(apps[n]) for n in sorted(expected & set(apps)) if not self.synced_healthy(apps[n])]
            if missing or bad:
                return False, "; ".join(([f"missing Applications: {', '.join(missing)}"] if missing else []) + bad)
            return True, [apps[n] for n in sorted(expected)]
        return wait_for(check, timeout, 5, f"the {env} applications were not all Synced and Healthy")

    # --- git, as a user changes it ----------------------------------------------------------------------------
    def edit_environment(self, env_file: str, edit) -> None:
        """Round-trip edit of environments/<file> in the published checkout (comments kept), as a user would."""
        from ruamel.yaml import YAML
        yaml_rt = YAML()
        yaml_rt.preserve_quotes = True
        path = self.work / "environments" / env_file
        data = yaml_rt.load(path.read_text())
        edit(data)
        with open(path, "w") as f:
            yaml_rt.dump(data, f)

    def generator(self, *args: str) -> str:
        """The published checkout's own generator, with this checkout's helm (a user's clone has one too)."""
        from generator import helm
        env = {**os.environ, "HELM": helm.binary(Path(__file__).resolve().parents[2])}
        proc = subprocess.run([sys.executable, "-m", "generator", *args], cwd=self.work, capture_output=True,
                              text=True, env=env)
        assert proc.returncode == 0, f"python -m generator {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def push(self, message: str) -> str:
        return gitops.push(self.current, message, self.world)

    def rendered_platform(self, key: str) -> list[dict]:
        """The platform app as rendered for one cluster (its own folder on an environment of several clusters)."""
        return self.rendered(key, "platform")

    def own_dir(self, key: str) -> Path:
        """A cluster's own folder, apps/<env>/clusters/<cluster> (an environment's key is its first cluster, keyed
        like the environment; another cluster's key is <env>-<cluster>)."""
        env = self.current["clusters"][key].get("environment", key)
        return self.work / "apps" / env / "clusters" / key.removeprefix(f"{env}-")

    def app_dir(self, key: str, app: str) -> Path:
        """Where an app is rendered for one cluster: the cluster's own folder (apps/<env>/clusters/<cluster>/<app>)
        where there is one, else the shared apps/<env>/<app>."""
        own = self.own_dir(key) / app
        return own if own.is_dir() else self.work / "apps" / self.current["clusters"][key].get("environment", key) / app

    def rendered(self, key: str, app: str) -> list[dict]:
        """An app as rendered for one cluster (app_dir)."""
        return [load_yaml(p.read_text()) for p in sorted(self.app_dir(key, app).glob("*.yaml"))]

    def app_names(self, key: str) -> list[str]:
        """The apps rendered for one cluster (an environment's key is its first cluster): the shared folders of
        apps/<env>/ and the cluster's own under apps/<env>/clusters/<cluster>/."""
        env, own = self.current["clusters"][key].get("environment", key), self.own_dir(key)
        names = {d.name for d in (self.work / "apps" / env).iterdir() if d.is_dir() and d.name != "clusters"}
        names |= {d.name for d in own.iterdir() if d.is_dir()} if own.is_dir() else set()
        return sorted(names)

    def argocd_cm(self) -> dict:
        from kubernetes import client
        argocd = self.current["argocd"]
        cm = client.CoreV1Api(self.api(self.current["management"])).read_namespaced_config_map(
            "argocd-cm", argocd["namespace"])
        return {"data": cm.data or {}}

    def restart_process(self, name: str, ready_url: str, timeout: float = 120) -> None:
        """Stop a supervised process and let the supervisor start it again (a pod's rollout restart); back when
        `ready_url` answers."""
        import urllib.request
        run_dir = Path(self.current["logs"]).parent
        procs.hold(run_dir, name)
        procs.release(run_dir, name)

        def answers():
            with urllib.request.urlopen(ready_url, timeout=3) as response:
                return response.status == 200, response.status
        wait_for(answers, timeout, 1, f"{name} restarted ({ready_url})")

    # --- a cluster stopped and brought back (e2e.procs hold / release) -----------------------------------------
    def cluster_processes(self, key: str) -> list[str]:
        """The supervised processes of one cluster: its control plane, kwok, and its operators' processes (named
        <cluster>-...; another cluster's key that extends this one is not this one's)."""
        run_dir = Path(self.current["logs"]).parent
        others = [k for k in self.current["clusters"] if k != key and k.startswith(f"{key}-")]
        return sorted(p.stem for p in (run_dir / "pids").glob(f"{key}-*.pid")
                      if not any(p.stem.startswith(f"{o}-") for o in others))

    def hold_cluster(self, key: str) -> None:
        """Stop a cluster and keep it down: its API server first, then everything of it that talks to it (its
        controllers, kwok, its operators), as a cluster that went away."""
        run_dir, apiserver = Path(self.current["logs"]).parent, f"{key}-kube-apiserver"
        for name in [apiserver] + [n for n in self.cluster_processes(key) if n != apiserver]:
            procs.hold(run_dir, name)

    def release_cluster(self, key: str) -> None:
        """Bring a held cluster back: its API server first, and once it answers the rest, which then start against
        a serving API server (as a kubelet would restart them: the e2e has no liveness probes to do it)."""
        run_dir, apiserver = Path(self.current["logs"]).parent, f"{key}-kube-apiserver"
        procs.release(run_dir, apiserver)
        from kubernetes import client
        wait_for(lambda: (bool(client.VersionApi(self.api(key)).get_code(_request_timeout=3)), "not yet"), 120, 2,
                 f"{key}'s API server back")
        for name in self.cluster_processes(key):
            procs.release(run_dir, name)

    # --- day two, as `make bootstrap / status / logs / diagnose / retry / watch` run it ------------------------
    def ops_command(self, *args: str) -> tuple[list[str], dict]:
        """python -m ops against the published checkout (--repo) and the e2e clusters (--kubeconfig)."""
        from generator import helm
        env = {**os.environ, "HELM": helm.binary(Path(__file__).resolve().parents[2]), "PYTHONUNBUFFERED": "1"}
        return [sys.executable, "-m", "ops", "--repo", str(self.work), "--kubeconfig", str(self.kubeconfig),
                *args], env

    def ops(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        cmd, env = self.ops_command(*args)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=Path(__file__).resolve().parents[2])

    def ops_background(self, name: str, *args: str) -> Background:
        cmd, env = self.ops_command(*args)
        return Background(name, cmd, env, Path(self.current["logs"]))


class Background:
    """A command running while a scenario goes on; its output goes to a file under the run's logs."""

    def __init__(self, name: str, cmd: list[str], env: dict, logs: Path):
        logs.mkdir(parents=True, exist_ok=True)
        self.name, self.cmd = name, cmd
        self.path = logs / f"ops-{name}.log"
        self._out = open(self.path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, env=env, text=True,
                                     cwd=Path(__file__).resolve().parents[2])

    @property
    def output(self) -> str:
        return self.path.read_text()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise Timeout(f"after {timeout:.0f} s, `{' '.join(self.cmd[2:])}` had not ended; its output:\n"
                          f"{self.output[-3000:]}") from None
        finally:
            self._out.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._out.close()


class BootstrapWatch:
    """Polls Argo CD every 2 s from the bootstrap on: when each Application was first seen Healthy, and when each
    ApplicationSet first appeared (their creationTimestamp), on the API server's clock."""

    def __init__(self, harness: Harness):
        self.harness = harness
        self.first_healthy: dict[str, str] = {}
        self.appsets_created: dict[str, str] = {}
        self.bootstraps: dict = {}  # env -> the `make bootstrap` command (Background) when the fixture ran one
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bootstrap-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(2):
            try:
                for app in self.harness.apps():
                    health = (app.get("status") or {}).get("health") or {}
                    name = app["metadata"]["name"]
                    if health.get("status") == "Healthy" and name not in self.first_healthy:
                        self.first_healthy[name] = health.get("lastTransitionTime") or ""
                for appset in self.harness.appsets():
                    self.appsets_created.setdefault(appset["metadata"]["name"],
                                                    appset["metadata"]["creationTimestamp"])
            except Exception:  # noqa: BLE001 - a failed poll is retried; the assertions say what is missing
                continue

