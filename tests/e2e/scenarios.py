"""Steps more than one scenario stands on: ending every job once (test_03), and one quiet window after that in
which every Application, every finished job and the autoscaler's replicas are watched together (test_03's "stay
finished", test_04's "stays converged"): one window of several reconciles serves both."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from e2e import gitops, nodes
from tests.e2e.harness import KUBEFLOW, RAY, envs_where, wait_for

ENVS = nodes.environments()
# The one job made to fail: its submitter exits 1 on every attempt.
FAILING = {("eks", "cifar10-torch")}
SHORT_TTL = 30
RECONCILES = 3
# Well past the shortened TTL (what a TTL does after it expires is what the window guards), with a reconcile of
# every Application asked for RECONCILES + 1 times in it (not waited for: the resync period is e2e/argo.py's).
WINDOW_SECONDS = 120.0
AUTOSCALED = envs_where(lambda doc: doc["rayCluster"].get("enabled", True)
                        and ((doc.get("cluster") or {}).get("autoscaler") or {}).get("enabled"))


def job_name(obj: dict) -> str:
    """The job's name in the environment file (RayJobs and PyTorchJobs are named <job>-<hash>)."""
    return obj["metadata"]["name"].rsplit("-", 1)[0]


def status_text(obj: dict) -> str:
    status = obj.get("status") or {}
    return f"{status.get('jobDeploymentStatus')}/{status.get('jobStatus')} {status.get('reason', '')} " \
           f"{status.get('message', '')[:200]}"


def job_pod_selector(kind: str, name: str) -> str:
    return (f"training.kubeflow.org/job-name={name}" if kind == "PyTorchJob"
            else f"batch.kubernetes.io/job-name={name}")


def shorten_pytorchjob_ttl(e2e) -> None:
    """Give every PyTorchJob that the operator would delete after a TTL a 30 s TTL, through git."""
    changed = [(env, job_name(job)) for env in ENVS for job in e2e.objects(env, KUBEFLOW, "pytorchjobs")
               if (job["spec"].get("runPolicy") or {}).get("ttlSecondsAfterFinished") is not None]
    if not changed:
        return
    for env, job in changed:
        e2e.edit_environment(f"{env}.yaml", lambda d, j=job: d["jobs"][j]["job"].__setitem__(
            "ttlSecondsAfterFinished", SHORT_TTL))
    e2e.generator("render")
    e2e.push(f"e2e: TTL {SHORT_TTL} s for {', '.join(j for _, j in changed)}")
    for env, job in changed:
        def check(env=env, job=job):
            jobs = [j for j in e2e.objects(env, KUBEFLOW, "pytorchjobs") if job_name(j) == job]
            ttls = [(j["spec"].get("runPolicy") or {}).get("ttlSecondsAfterFinished") for j in jobs]
            return ttls == [SHORT_TTL], f"{job}: PyTorchJobs with TTLs {ttls}"
        wait_for(check, 240, 5, "the shorter TTL did not reach the cluster")


def run_ended(kind: str, obj: dict) -> bool:
    status = obj.get("status") or {}
    if kind == "RayJob":
        return status.get("jobDeploymentStatus") in ("Complete", "Failed")
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in status.get("conditions") or [])


def finish_all(e2e, timeout: float = 360) -> tuple[dict, list[str]]:
    """End every job of every environment at once, as its pods would: a RayJob's submitter pod exits (1 for the
    FAILING one, on each attempt the submitter Job makes), every PyTorchJob pod exits 0. Returns
    ({(env, kind, name): the object once ended}, [what did not end])."""
    shorten_pytorchjob_ttl(e2e)
    pending = {(env, kind, obj["metadata"]["name"]) for env in ENVS
               for kind, gv, plural in (("RayJob", RAY, "rayjobs"), ("PyTorchJob", KUBEFLOW, "pytorchjobs"))
               for obj in e2e.objects(env, gv, plural)}
    ended: dict = {}
    deadline = time.monotonic() + timeout
    last = {}
    while pending and time.monotonic() < deadline:
        for env, kind, name in sorted(pending):
            plural, gv = ("rayjobs", RAY) if kind == "RayJob" else ("pytorchjobs", KUBEFLOW)
            obj = e2e.custom(env).get_namespaced_custom_object(*gv, e2e.namespace(env), plural, name)
            if run_ended(kind, obj):
                ended[(env, kind, name)] = obj
                pending.discard((env, kind, name))
                continue
            fail = kind == "RayJob" and (env, job_name(obj)) in FAILING
            pods = e2e.pods(env, job_pod_selector(kind, name))
            for pod in pods:
                if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp:
                    e2e.finish_pod(env, pod, 1 if fail else 0, reason="Error" if fail else "",
                                   message="training crashed (e2e)" if fail else "")
            last[(env, kind, name)] = (f"{kind} {env}/{name}: {status_text(obj)}; pods "
                                       f"{[(p.metadata.name, p.status.phase) for p in pods]}")
        time.sleep(3)
    return ended, [last.get(key, f"{key[1]} {key[0]}/{key[2]}") + " (did not end)" for key in sorted(pending)]


def standing_cluster(e2e, env) -> dict:
    name = e2e.env_doc(env)["rayCluster"]["name"]
    return next(c for c in e2e.objects(env, RAY, "rayclusters") if c["metadata"]["name"] == name)


@dataclass
class Window:
    apps: dict = field(default_factory=dict)        # env -> problems of its Applications
    autoscaler: dict = field(default_factory=dict)  # env -> the autoscaler's replicas reverted
    jobs: list = field(default_factory=list)        # ended jobs deleted, recreated or run again


def _sync_count(app: dict) -> int:
    return len((app.get("status") or {}).get("history") or [])


def quiet_window(e2e, ended: dict) -> Window:
    """What the Ray autoscaler does (PATCH a standing cluster's workerGroupSpecs[0].replicas up by one), then
    WINDOW_SECONDS of watching: every Application stays Synced with no new sync operation and is reconciled at
    least RECONCILES times; the autoscaler's replicas stay; no ended job is deleted, recreated or gets new pods."""
    for env in ENVS:
        e2e.wait_synced_healthy(env, 420, names={f"{env}-{app}" for app in ("platform", "ray-cluster")})
    window = Window(apps={env: [] for env in ENVS}, autoscaler={})
    targets = {}
    for env in AUTOSCALED:
        cluster = standing_cluster(e2e, env)
        group = cluster["spec"]["workerGroupSpecs"][0]
        target = min(group.get("replicas", 0) + 1, group.get("maxReplicas", 1))
        assert target != group.get("replicas"), f"{env}: maxReplicas leaves no room to scale"
        e2e.kubectl(env, "-n", e2e.namespace(env), "patch", "raycluster", cluster["metadata"]["name"], "--type",
                    "json", "-p", json.dumps([{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas",
                                               "value": target}]))
        targets[env] = target
        window.autoscaler[env] = []
    jobs = {key: (obj["metadata"]["uid"], {p.metadata.uid for p in e2e.pods(key[0], job_pod_selector(key[1], key[2]))})
            for key, obj in ended.items()}
    apps = {a["metadata"]["name"]: a for a in e2e.apps()}
    env_of = {n: (a["metadata"].get("labels") or {}).get("ray-gitops/environment") for n, a in apps.items()}
    counts = {n: _sync_count(a) for n, a in apps.items()}
    reconciled = {n: {(a.get("status") or {}).get("reconciledAt")} for n, a in apps.items()}
    started = time.monotonic()
    deadline = started + WINDOW_SECONDS
    asks = [started + WINDOW_SECONDS * (i + 0.5) / (RECONCILES + 1) for i in range(RECONCILES + 1)]
    while time.monotonic() < deadline:
        time.sleep(5)
        if asks and time.monotonic() >= asks[0]:
            asks.pop(0)
            gitops.request_reconcile(e2e.current)
        for app in e2e.apps():
            name = app["metadata"]["name"]
            env = env_of.get(name)
            if env not in window.apps:
                continue
            reconciled.setdefault(name, set()).add((app.get("status") or {}).get("reconciledAt"))
            if e2e.app_state(app)[0] != "Synced":
                window.apps[env].append(e2e.describe(app))
            if _sync_count(app) != counts.get(name, _sync_count(app)):
                window.apps[env].append(f"{name}: a new sync operation ({counts.get(name)} -> {_sync_count(app)})")
                counts[name] = _sync_count(app)
        for env, target in targets.items():
            live = standing_cluster(e2e, env)["spec"]["workerGroupSpecs"][0].get("replicas")
            if live != target:
                window.autoscaler[env].append(f"the autoscaler's replicas {target} were reverted to {live}")
        for (env, kind, name), (uid, pod_uids) in jobs.items():
            plural, gv = ("rayjobs", RAY) if kind == "RayJob" else ("pytorchjobs", KUBEFLOW)
            current = [o for o in e2e.objects(env, gv, plural) if o["metadata"]["name"] == name]
            if not current:
                window.jobs.append(f"{kind} {env}/{name} was deleted")
            elif current[0]["metadata"]["uid"] != uid:
                window.jobs.append(f"{kind} {env}/{name} was recreated (a new run)")
            new_pods = {p.metadata.uid for p in e2e.pods(env, job_pod_selector(kind, name))} - pod_uids
            if new_pods:
                window.jobs.append(f"{kind} {env}/{name} started {len(new_pods)} new pod(s): it runs again")
    for name, seen in reconciled.items():
        if env_of.get(name) in window.apps and len(seen - {None}) < RECONCILES:
            window.apps[env_of[name]].append(f"{name}: fewer than {RECONCILES} reconciles seen (the watch proves "
                                             f"nothing for it)")
    window.apps = {env: list(dict.fromkeys(p)) for env, p in window.apps.items()}
    window.autoscaler = {env: list(dict.fromkeys(p)) for env, p in window.autoscaler.items()}
    window.jobs = list(dict.fromkeys(window.jobs))
    return window
