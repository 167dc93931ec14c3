"""A queued job as Kueue sees it (environments with `queueing`, generator/queueing.py): every RayJob / PyTorchJob
they render carries the label kueue.x-k8s.io/queue-name: <LocalQueue>; Kueue (v0.17, kueue.x-k8s.io/v1beta2) makes
a Workload for it in the namespace (owned by the job: ownerReferences[].uid), keeps the job suspended (RayJob
spec.suspend, PyTorchJob spec.runPolicy.suspend) until the LocalQueue's ClusterQueue has quota for all its pods,
then marks the Workload Admitted and resumes the job. While it waits, the Workload's QuotaReserved condition is
False and its message says which resource of which flavor is short, in the words of Kueue's flavor assigner
(pkg/scheduler/flavorassigner/flavorassigner.go at v0.17.0):
  couldn't assign flavors to pod set <set>: insufficient quota for <resource> in flavor <flavor>, previously
      considered podsets requests (0) + current podset request (24) > maximum capacity (16)
  couldn't assign flavors to pod set <set>: insufficient unused quota for <resource> in flavor <flavor>, 8 more needed
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from generator.queueing import QUEUE_LABEL  # what the job charts render

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
NO_WORKLOAD = "no Workload (is Kueue installed?)"
# the (resource, flavor) pairs a Workload's pending message names
SHORT_QUOTA = re.compile(r"insufficient (?:unused )?quota(?: in cohort)? for (\S+) in flavor "
                         r"([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)")


def queue_name(obj: dict) -> str | None:
    """The LocalQueue a job object is queued in (its kueue.x-k8s.io/queue-name label), None when it is not."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or None


def suspended(kind: str, obj: dict) -> bool:
    """Whether the job is held: a RayJob's spec.suspend, a PyTorchJob's spec.runPolicy.suspend."""
    spec = obj.get("spec") or {}
    if kind == "RayJob":
        return spec.get("suspend") is True
    return (spec.get("runPolicy") or {}).get("suspend") is True


def condition(obj: dict | None, kind: str) -> dict:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def is_true(obj: dict | None, kind: str) -> bool:
    return condition(obj, kind).get("status") == "True"


def short_quota(message: str) -> list[tuple[str, str]]:
    """The (resource, flavor) pairs whose quota a Workload's message says is short, each once, in its order."""
    return list(dict.fromkeys(SHORT_QUOTA.findall(message or "")))


@dataclass
class Queues:
    """Kueue's objects in a namespace, read once: its Workloads (None: Kueue's CRDs are not installed) and its
    LocalQueues (name -> the ClusterQueue it feeds)."""

    workloads: list[dict] | None
    local_queues: dict[str, str | None]

    @classmethod
    def read(cls, custom, namespace: str) -> Queues:
        workloads = _listed(custom, namespace, "workloads")
        local = _listed(custom, namespace, "localqueues") if workloads is not None else None
        return cls(workloads, {q["metadata"]["name"]: (q.get("spec") or {}).get("clusterQueue") or None
                               for q in local or []})

    def workload_of(self, obj: dict) -> dict | None:
        uid = (obj.get("metadata") or {}).get("uid")
        if not uid:
            return None
        return next((w for w in self.workloads or []
                     if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences") or [])), None)

    def cluster_queue(self, local_queue: str | None) -> str | None:
        return self.local_queues.get(local_queue) if local_queue else None

    def position(self, workload: dict) -> int | None:
        """The 1-based place of a waiting Workload among the namespace's waiting (not admitted, not finished)
        Workloads of the same ClusterQueue, oldest first; None once it is admitted or finished. (Kueue's own order
        also weighs priority, and BestEffortFIFO lets a smaller later job through when it fits: a place, not a
        promise.)"""
        if is_true(workload, "Admitted") or is_true(workload, "Finished"):
            return None
        mine = (workload.get("spec") or {}).get("queueName")
        line = self.cluster_queue(mine)

        def same_line(w):
            queue = (w.get("spec") or {}).get("queueName")
            return queue == mine or (line is not None and self.cluster_queue(queue) == line)
        waiting = sorted((w for w in self.workloads or [] if same_line(w)
                          and not is_true(w, "Admitted") and not is_true(w, "Finished")),
                         key=lambda w: (str(w["metadata"].get("creationTimestamp") or ""), w["metadata"]["name"]))
        names = [w["metadata"]["name"] for w in waiting]
        return names.index(workload["metadata"]["name"]) + 1 if workload["metadata"]["name"] in names else None

    def info(self, obj: dict) -> dict | None:
        """make status's `queue` of a job object: None when it is not queued."""
        local = queue_name(obj)
        if local is None:
            return None
        if self.workloads is None:
            return {"localQueue": local, "clusterQueue": None, "admitted": False, "position": None,
                    "message": NO_WORKLOAD}
        workload = self.workload_of(obj)
        if workload is None:
            return {"localQueue": local, "clusterQueue": self.cluster_queue(local), "admitted": False,
                    "position": None, "message": ""}
        admitted = is_true(workload, "Admitted")
        admission = (workload.get("status") or {}).get("admission") or {}
        return {"localQueue": local,
                "clusterQueue": admission.get("clusterQueue") or self.cluster_queue(local),
                "admitted": admitted,
                "position": None if admitted else self.position(workload),
                "message": "" if admitted else condition(workload, "QuotaReserved").get("message", "")}


def _listed(custom, namespace: str, plural: str) -> list[dict] | None:
    try:
        return custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]
    except Exception as exc:  # noqa: BLE001 - a cluster without Kueue's CRDs has no Workloads
        if getattr(exc, "status", None) == 404:
            return None
        raise


def waiting(kind: str, obj: dict, finished: bool, queue: dict | None) -> bool:
    """A queued job Kueue holds: not admitted, not finished, suspended (a queued job that runs unsuspended without
    a Workload ran without Kueue: it is not waiting for it)."""
    return queue is not None and not queue["admitted"] and not finished and suspended(kind, obj)
