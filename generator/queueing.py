"""Kueue, from the environment's `queueing` (docs/queueing.md).

  platform chart   ResourceFlavors (the node types), a ClusterQueue with the quota that admits only the
                   environment's namespace, and the LocalQueue there (charts/platform templates/queueing.yaml)
  every job        the label kueue.x-k8s.io/queue-name: <localQueue> (ray-job / pytorch-job `job.queueName`), and
                   no rendered `suspend`: Kueue suspends a queued job when it is created and resumes it when the
                   quota has room, so a `suspend: false` in git under self-heal would start jobs that have none
  MultiKueue       on an environment that places its jobs across its clusters (generator/placement.py): the
                   manager's ClusterQueue with the workers' summed quota, its AdmissionCheck, MultiKueueConfig and
                   MultiKueueClusters; each worker's access for the manager, and its gate on the Secrets every
                   RayJob reads; `managedBy` on dispatched jobs
  Argo CD layer    Kueue itself, an operator like KubeRay (generator/argocd.py), on every cluster of the environment
"""
from __future__ import annotations

from . import placement
from .environments import Environment
from .layers import Layer, merge

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_NAMESPACE = "kueue-system"  # where Kueue runs and reads MultiKueue's kubeconfig Secrets
DEFAULT_LOCAL_QUEUE = "training"


def settings(env: Environment) -> dict | None:
    """The environment's queueing with its defaults filled in, or None when it has none."""
    q = env.doc.get("queueing") or {}
    if not q.get("enabled", False):
        return None
    return {"enabled": True, "clusterQueue": q.get("clusterQueue") or env.name,
            "localQueue": q.get("localQueue") or DEFAULT_LOCAL_QUEUE,
            "queueingStrategy": q.get("queueingStrategy") or "BestEffortFIFO",
            "flavors": list(q.get("flavors") or [])}


def enabled(env: Environment) -> bool:
    return settings(env) is not None


def platform_values(env: Environment) -> Layer | None:
    """The platform chart's `queueing` values (with where each was written), or None when the environment queues
    nothing."""
    q = settings(env)
    if q is None:
        return None
    values = merge(Layer({"queueing": q}, {}), env.layer.sub("queueing").under("queueing"))
    values.data["queueing"].pop("multiKueue", None)
    where = env.placement
    if where.role == placement.MANAGER:
        for flavor in values.data["queueing"]["flavors"]:
            flavor["quota"] = dict(where.quota.get(flavor["name"]) or flavor["quota"])
        values.data["queueing"]["multiKueue"] = {
            "role": placement.MANAGER, "admissionCheck": placement.ADMISSION_CHECK, "config": env.name,
            "kueueNamespace": KUEUE_NAMESPACE,
            "workers": [{"name": w, "kubeconfigSecret": where.kubeconfig_secret(w)} for w in where.workers]}
    elif where.role == placement.WORKER:
        values.data["queueing"]["multiKueue"] = {"role": placement.WORKER, "serviceAccount": where.secret_prefix,
                                                 "gatedSecrets": placement.gated_secrets(env)}
    return values


def job_values(env: Environment, chart: str, dispatched: bool = False) -> dict:
    """What every job's chart values start from: the LocalQueue ({} when the environment queues nothing), and for a
    RayJob no time-to-live after it ends (a job's own value still wins): Kueue releases a job's quota the moment it
    finishes, while KubeRay keeps its Ray cluster, pods and nodes, for ttlSecondsAfterFinished (600 s by default),
    so the next job Kueue admits would find the nodes still taken (found by the e2e: the admitted job stayed
    Initializing with pods Pending until the TTL). Its logs stay: the submitter Job is kept."""
    q = settings(env)
    if not q:
        return {}
    job = {"queueName": q["localQueue"]}
    if dispatched:  # placed on a worker by MultiKueue (generator/placement.py); every cluster renders it alike
        job["managedBy"] = placement.MANAGED_BY
    if chart == "ray-job":
        job["ttlSecondsAfterFinished"] = 0
    return {"job": job}
