"""A job of an environment on its cluster: the run that exists now (a RayJob or a PyTorchJob named
<job>-<hash of what was rendered>), its pods, and its state as the operator reports it."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .targets import EXIT_BAD_INPUT, OpsError, Target

KINDS = (("RayJob", "ray.io", "v1", "rayjobs"), ("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs"))
RUN_SUFFIX = re.compile(r"^(?P<job>.+)-[0-9a-f]{8}$")


@dataclass
class Run:
    env: str
    job: str
    kind: str
    name: str
    obj: dict
    pods: dict = field(default_factory=dict)  # role -> [pod]: submitter | head | worker | master

    @property
    def status(self) -> dict:
        return self.obj.get("status") or {}

    @property
    def state(self) -> str:
        """RayJob: jobDeploymentStatus (and the Ray job's status); PyTorchJob: its latest true condition."""
        if self.kind == "RayJob":
            deployment, ray = self.status.get("jobDeploymentStatus", "New"), self.status.get("jobStatus")
            return f"{deployment}/{ray}" if ray else deployment
        conditions = [c for c in self.status.get("conditions") or [] if c.get("status") == "True"]
        return conditions[-1]["type"] if conditions else "Created"

    @property
    def finished(self) -> bool:
        if self.kind == "RayJob":
            return self.status.get("jobDeploymentStatus") in ("Complete", "Failed")
        return any(c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
                   for c in self.status.get("conditions") or [])

    @property
    def succeeded(self) -> bool:
        if self.kind == "RayJob":
            return (self.status.get("jobDeploymentStatus"), self.status.get("jobStatus")) == ("Complete", "SUCCEEDED")
        return any(c.get("type") == "Succeeded" and c.get("status") == "True"
                   for c in self.status.get("conditions") or [])

    @property
    def started(self) -> datetime | None:
        return parse_time(self.status.get("startTime") or self.obj["metadata"].get("creationTimestamp"))

    @property
    def ended(self) -> datetime | None:
        if self.kind == "RayJob":
            return parse_time(self.status.get("endTime"))
        return parse_time(self.status.get("completionTime"))

    @property
    def duration_seconds(self) -> float | None:
        start = self.started
        if start is None:
            return None
        return ((self.ended or datetime.now(UTC)) - start).total_seconds()

    @property
    def attempts(self) -> int:
        """How many times it ran: RayJob retries (status.failed + succeeded, at least 1 once started); PyTorchJob:
        restarts of its pods' containers + 1."""
        if self.kind == "RayJob":
            return max(1, int(self.status.get("failed") or 0) + int(self.status.get("succeeded") or 0)) \
                if self.status.get("jobDeploymentStatus") not in (None, "New") else 0
        restarts = [sum(cs.restart_count for cs in (p.status.container_statuses or []))
                    for pods in self.pods.values() for p in pods]
        return 1 + (max(restarts) if restarts else 0)

    @property
    def dashboard_url(self) -> str | None:
        url = self.status.get("dashboardURL")
        return f"http://{url}" if url else None


def parse_time(value) -> datetime | None:
    if not value:
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def runs(custom, namespace: str) -> list[tuple[str, dict]]:
    """(kind, object) of every RayJob and PyTorchJob in the namespace."""
    out = []
    for kind, group, version, plural in KINDS:
        try:
            items = custom.list_namespaced_custom_object(group, version, namespace, plural)["items"]
        except Exception as exc:  # noqa: BLE001 - a kind whose CRD is not installed has no runs
            if getattr(exc, "status", None) == 404:
                continue
            raise
        out += [(kind, obj) for obj in items]
    return out


def job_of(name: str) -> str | None:
    match = RUN_SUFFIX.match(name)
    return match.group("job") if match else None


def find_current(clients, target: Target, job: str) -> Run | None:
    """Like find, but None while the job has no run (between Argo CD pruning one run and creating the next)."""
    try:
        return find(clients, target, job)
    except NoRun:
        return None


class NoRun(OpsError):
    """The environment has no run of the job (now)."""


def find(clients, target: Target, job: str) -> Run:
    """The current run of `job` in the environment (the newest, if an old one is still being pruned)."""
    custom = clients.custom(target.context)
    matches = [(kind, obj) for kind, obj in runs(custom, target.namespace) if job_of(obj["metadata"]["name"]) == job]
    kinds = sorted({kind for kind, _ in matches})
    if len(kinds) > 1:
        raise OpsError(f"job {job!r} of {target.env} matches two kinds ({', '.join(kinds)}): "
                       f"{', '.join(o['metadata']['name'] for _, o in matches)}; remove one of them from the "
                       f"environment", EXIT_BAD_INPUT)
    if not matches:
        known = sorted(set(target.doc.get("jobs") or {}) | {job_of(o["metadata"]["name"]) or "?"
                                                             for _, o in runs(custom, target.namespace)})
        raise NoRun(f"no job {job!r} in environment {target.env} (namespace {target.namespace} on context "
                       f"{target.context}); known jobs: {', '.join(j for j in known if j != '?') or 'none'}",
                       EXIT_BAD_INPUT)
    kind, obj = max(matches, key=lambda m: m[1]["metadata"]["creationTimestamp"])
    run = Run(target.env, job, kind, obj["metadata"]["name"], obj)
    run.pods = pods_of(clients.core(target.context), target.namespace, run)
    return run


def pods_of(core, namespace: str, run: Run) -> dict:
    def listed(selector):
        items = core.list_namespaced_pod(namespace, label_selector=selector).items
        return sorted(items, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))
    if run.kind == "RayJob":
        pods = {"submitter": listed(f"batch.kubernetes.io/job-name={run.name}")}
        cluster = run.status.get("rayClusterName")
        if cluster:
            ray = listed(f"ray.io/cluster={cluster}")
            pods["head"] = [p for p in ray if (p.metadata.labels or {}).get("ray.io/node-type") == "head"]
            pods["worker"] = [p for p in ray if (p.metadata.labels or {}).get("ray.io/node-type") == "worker"]
        return pods
    job_pods = listed(f"training.kubeflow.org/job-name={run.name}")
    return {"master": [p for p in job_pods if (p.metadata.labels or {}).get(
                "training.kubeflow.org/replica-type", "").lower() == "master"],
            "worker": [p for p in job_pods if (p.metadata.labels or {}).get(
                "training.kubeflow.org/replica-type", "").lower() == "worker"]}
