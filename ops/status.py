"""make status: one table per environment, from its cluster and Argo CD; `--json` gives the same as data, in the
shape the training-job-deployer returned (status, head pod, worker pods, fixes applied, monitoring, dashboard URL),
and for a run queued with Kueue its `queue` (LocalQueue, ClusterQueue, admitted, place in line, Kueue's reason)."""
from __future__ import annotations

from . import jobs as jobs_mod
from . import kueue
from .targets import Clients, Target

DASHBOARD_PORT = 8265


def applications(clients: Clients, target: Target) -> list[dict]:
    custom = clients.custom(target.argocd_context)
    items = custom.list_namespaced_custom_object(
        "argoproj.io", "v1alpha1", target.argocd_namespace, "applications",
        label_selector=f"ray-gitops/environment={target.env}")["items"]
    out = []
    for app in sorted(items, key=lambda a: a["metadata"]["name"]):
        status = app.get("status") or {}
        op = status.get("operationState") or {}
        out.append({"name": app["metadata"]["name"], "sync": (status.get("sync") or {}).get("status", "Unknown"),
                    "health": (status.get("health") or {}).get("status", "Unknown"),
                    "operation": op.get("phase", ""), "message": _app_problem(status)})
    return out


def _app_problem(status: dict) -> str:
    for cond in status.get("conditions") or []:
        return f"{cond.get('type')}: {cond.get('message', '')}"
    op = status.get("operationState") or {}
    if op.get("phase") in ("Failed", "Error"):
        return op.get("message", "")
    for res in status.get("resources") or []:
        health = res.get("health") or {}
        if health.get("status") in ("Degraded", "Missing") or res.get("status") == "OutOfSync":
            return f"{res.get('kind')}/{res.get('name')} {res.get('status')}/{health.get('status')}: " \
                   f"{health.get('message', '')}".strip(": ")
    return ""


def dashboard(clients: Clients, target: Target, cluster_name: str) -> str:
    """Where the Ray dashboard of a cluster is: a NodePort Service's node address, or the port-forward to run."""
    core = clients.core(target.context)
    for svc in core.list_namespaced_service(target.namespace).items:
        selector = svc.spec.selector or {}
        if selector.get("ray.io/cluster") != cluster_name or svc.spec.type != "NodePort":
            continue
        for port in svc.spec.ports or []:
            if port.port == DASHBOARD_PORT and port.node_port:
                nodes = core.list_node().items
                addresses = [a.address for n in nodes for a in (n.status.addresses or []) if a.type == "InternalIP"]
                if addresses:
                    return f"http://{addresses[0]}:{port.node_port}"
    return (f"kubectl --context {target.context} -n {target.namespace} port-forward svc/{cluster_name}-head-svc "
            f"{DASHBOARD_PORT}:{DASHBOARD_PORT}  # then http://localhost:{DASHBOARD_PORT}")


def dashboard_auth(cluster: dict, namespace: str) -> str:
    """What the dashboard of a RayCluster takes (its spec.authOptions), for a person about to open it."""
    options = cluster["spec"].get("authOptions") or {}
    if options.get("mode") != "token":
        return ""
    name = cluster["metadata"]["name"]
    if options.get("enableK8sTokenAuth"):
        pod = cluster["spec"]["headGroupSpec"]["template"]["spec"]
        account = pod.get("serviceAccountName") or name
        return (f"a Kubernetes token with ray:write on rayclusters/{name} (Authorization: Bearer <your single "
                f"sign-on's ID token>; or, with admin rights, kubectl -n {namespace} create token {account})")
    secret = options.get("secretName") or name
    return f"the token in Secret {namespace}/{secret} (key auth_token)"


def ray_clusters(clients: Clients, target: Target) -> list[dict]:
    custom, core = clients.custom(target.context), clients.core(target.context)
    out = []
    for cluster in custom.list_namespaced_custom_object("ray.io", "v1", target.namespace, "rayclusters")["items"]:
        name = cluster["metadata"]["name"]
        status = cluster.get("status") or {}
        pods = core.list_namespaced_pod(target.namespace, label_selector=f"ray.io/cluster={name}").items
        head = [p for p in pods if (p.metadata.labels or {}).get("ray.io/node-type") == "head"]
        out.append({"name": name, "state": status.get("state", ""),
                    "headPod": head[0].metadata.name if head else None,
                    "workers": {"ready": int(status.get("readyWorkerReplicas") or 0),
                                "desired": int(status.get("desiredWorkerReplicas") or 0)},
                    "image": cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"],
                    "owner": next((o["kind"] for o in cluster["metadata"].get("ownerReferences") or []), None),
                    "dashboardUrl": dashboard(clients, target, name),
                    "dashboardAuth": dashboard_auth(cluster, target.namespace)})
    return out


def fixes_applied(run: jobs_mod.Run) -> list[str]:
    """The production profile the run's pods carry (what the deployer reported as fixes it applied)."""
    container = _main_container(run)
    if container is None:
        return []
    env = {e.get("name"): e.get("value") for e in container.get("env") or []}
    limits = (container.get("resources") or {}).get("limits") or {}
    fixes = []
    if env.get("FI_PROVIDER") == "efa":
        fixes.append(f"EFA: FI_PROVIDER=efa, {limits.get('vpc.amazonaws.com/efa', 0)} device(s) per pod")
    if "NCCL_DEBUG" in env:
        timeout = env.get("TRAINING_COLLECTIVE_TIMEOUT_SECONDS")
        fixes.append(f"NCCL: NCCL_DEBUG={env['NCCL_DEBUG']}" + (f", collective timeout {timeout} s" if timeout else "")
                     + (", flight recorder on" if env.get("TORCH_NCCL_DUMP_ON_TIMEOUT") == "1" else ""))
    if limits.get("nvidia.com/gpu"):
        fixes.append(f"GPUs: {limits['nvidia.com/gpu']} per pod")
    spec = _pod_spec(run) or {}
    for volume in spec.get("volumes") or []:
        if (volume.get("emptyDir") or {}).get("medium") == "Memory":
            fixes.append(f"/dev/shm: {volume['emptyDir'].get('sizeLimit', 'unbounded')} in memory")
        if volume.get("persistentVolumeClaim"):
            fixes.append(f"checkpoints: claim {volume['persistentVolumeClaim']['claimName']} "
                         f"at {env.get('TRAINING_STORAGE_PATH', '?')}")
    return fixes


def _pod_spec(run: jobs_mod.Run) -> dict | None:
    spec = run.obj.get("spec") or {}
    if run.kind == "RayJob":
        groups = (spec.get("rayClusterSpec") or {}).get("workerGroupSpecs") or []
        return groups[0]["template"]["spec"] if groups else None
    replicas = spec.get("pytorchReplicaSpecs") or {}
    first = replicas.get("Worker") or replicas.get("Master")
    return first["template"]["spec"] if first else None


def _main_container(run: jobs_mod.Run) -> dict | None:
    spec = _pod_spec(run)
    return (spec.get("containers") or [None])[0] if spec else None


def queue_of(clients: Clients, target: Target, run: jobs_mod.Run, queues: kueue.Queues | None = None) -> dict | None:
    """The run's place in Kueue (ops/kueue.py Queues.info): None when it is not queued. `queues`: Kueue's objects
    of the namespace, when already read."""
    if kueue.queue_name(run.obj) is None:
        return None
    if queues is None:
        queues = kueue.Queues.read(clients.custom(target.context), target.namespace)
    return queues.info(run.obj)


def run_status(run: jobs_mod.Run, queue: dict | None) -> str:
    """succeeded | failed | queued (Kueue holds it, suspended, until its ClusterQueue has quota) | running."""
    if run.succeeded:
        return "succeeded"
    if run.finished:
        return "failed"
    return "queued" if kueue.waiting(run.kind, run.obj, run.finished, queue) else "running"


def job_record(clients: Clients, target: Target, run: jobs_mod.Run, queues: kueue.Queues | None = None) -> dict:
    head = run.pods.get("head") or run.pods.get("master") or []
    workers = run.pods.get("worker") or []
    cluster = run.status.get("rayClusterName")
    queue = queue_of(clients, target, run, queues)
    status = run_status(run, queue)
    return {
        "job": run.job, "run": run.name, "kind": run.kind,
        "status": status,
        "queue": queue,
        "state": run.state, "reason": run.status.get("reason", ""), "message": run.status.get("message", ""),
        "start": run.started.isoformat() if run.started else None,
        "durationSeconds": round(run.duration_seconds) if run.duration_seconds is not None else None,
        "attempts": run.attempts,
        "headPod": head[-1].metadata.name if head else None,
        "workerPods": [p.metadata.name for p in workers],
        "submitterPods": [p.metadata.name for p in run.pods.get("submitter") or []],
        "fixesApplied": fixes_applied(run),
        "monitoring": {"logs": f"make logs ENV={target.env} JOB={run.job} FOLLOW=1",
                       "diagnose": f"make diagnose ENV={target.env} JOB={run.job}"},
        # a run Kueue holds has no Ray cluster yet
        "dashboardUrl": dashboard(clients, target, cluster) if cluster and status == "running" else None,
    }


def environment_status(clients: Clients, target: Target, job: str | None = None) -> dict:
    custom = clients.custom(target.context)
    names = sorted({jobs_mod.job_of(o["metadata"]["name"]) for _, o in jobs_mod.runs(custom, target.namespace)}
                   - {None})
    if job:
        names = [job]
    found = [jobs_mod.find(clients, target, name) for name in names]
    # Kueue's Workloads and LocalQueues, read once for every queued run (not at all when no run is queued)
    queues = kueue.Queues.read(custom, target.namespace) if any(kueue.queue_name(r.obj) for r in found) else None
    records = [job_record(clients, target, run, queues) for run in found]
    claim_name = ((target.doc.get("cluster") or {}).get("checkpoints") or {}).get("claimName")
    claim = None
    checkpoints = (target.doc.get("cluster") or {}).get("checkpoints") or {}
    if checkpoints.get("enabled") and checkpoints.get("store", "volume") == "volume" and claim_name:
        try:
            pvc = clients.core(target.context).read_namespaced_persistent_volume_claim(claim_name, target.namespace)
            claim = {"name": claim_name, "phase": pvc.status.phase}
        except Exception as exc:  # noqa: BLE001 - a missing claim is a status, not an error
            claim = {"name": claim_name, "phase": "Missing" if getattr(exc, "status", 0) == 404 else "Unknown"}
    return {"environment": target.env, "context": target.context, "namespace": target.namespace,
            "applications": applications(clients, target), "rayClusters": ray_clusters(clients, target),
            "jobs": records, "checkpointClaim": claim}


def healthy(status: dict) -> bool:
    apps_ok = all(a["sync"] == "Synced" and a["health"] in ("Healthy", "Progressing") for a in status["applications"])
    jobs_ok = all(j["status"] != "failed" for j in status["jobs"])  # running, queued (waiting for quota), succeeded
    return apps_ok and jobs_ok


def _minutes(seconds) -> str:
    if seconds is None:
        return "-"
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def _queue_line(job: dict) -> str:
    """Under a run Kueue holds: where it waits and why; under a queued run that runs without a Workload: that."""
    queue = job.get("queue")
    if not queue or queue["admitted"] or job["status"] in ("succeeded", "failed"):
        return ""
    if job["status"] == "queued":
        place = f" (position {queue['position']})" if queue["position"] is not None else ""
        why = queue["message"] or "no Workload yet (Kueue makes one for each queued job)"
        return f"waiting for quota in LocalQueue {queue['localQueue']}{place}: {why[:160]}"
    return f"not admitted by Kueue (LocalQueue {queue['localQueue']}): {(queue['message'] or 'no Workload')[:160]}"


def render_table(status: dict) -> str:
    lines = [f"== {status['environment']} (context {status['context']}, namespace {status['namespace']})"]
    lines.append(f"{'APPLICATION':<34} {'SYNC':<10} {'HEALTH':<12} PROBLEM")
    for app in status["applications"]:
        lines.append(f"{app['name']:<34} {app['sync']:<10} {app['health']:<12} {app['message'][:80]}")
    if status["rayClusters"]:
        lines.append(f"{'RAYCLUSTER':<34} {'STATE':<10} {'WORKERS':<8} {'HEAD POD':<44} IMAGE")
        for c in status["rayClusters"]:
            lines.append(f"{c['name']:<34} {c['state'] or '-':<10} {c['workers']['ready']}/{c['workers']['desired']:<6} "
                         f"{c['headPod'] or '-':<44} {c['image']}")
    if status["jobs"]:
        lines.append(f"{'JOB':<16} {'RUN':<24} {'KIND':<10} {'STATE':<22} {'START':<20} {'TIME':<8} TRIES  PODS")
        for j in status["jobs"]:
            pods = ", ".join(filter(None, [j["headPod"], *j["workerPods"]]))
            state = f"queued ({j['state']})" if j["status"] == "queued" else j["state"]
            lines.append(f"{j['job']:<16} {j['run']:<24} {j['kind']:<10} {state:<22} "
                         f"{(j['start'] or '-')[:19]:<20} {_minutes(j['durationSeconds']):<8} {j['attempts']:<6} {pods}")
            if j["dashboardUrl"]:
                lines.append(f"{'':<16} dashboard: {j['dashboardUrl']}")
            if j["status"] == "failed":
                lines.append(f"{'':<16} {j['reason']}: {j['message'][:120]}  ->  {j['monitoring']['diagnose']}")
            queue_line = _queue_line(j)
            if queue_line:
                lines.append(f"{'':<16} {queue_line}")
    if status["checkpointClaim"]:
        lines.append(f"checkpoint claim {status['checkpointClaim']['name']}: {status['checkpointClaim']['phase']}")
    return "\n".join(lines)
