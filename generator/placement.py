"""Where an environment's jobs run across its clusters (docs/multikueue.md).

Without `queueing.multiKueue`, every job runs on every cluster of the environment, unless it is pinned to one
(`jobs.<name>.pinnedTo: <cluster>`). With it, the clusters take roles:

  manager   holds the jobs: each job's RayJob / PyTorchJob, rendered with `managedBy: kueue.x-k8s.io/multikueue`
            (Kueue defaults it only at create time, only if the queue chain already exists, and it is immutable:
            so git says it), a ClusterQueue whose quota is the sum of the workers' (computed here, reviewable in
            the pull request, instead of Kueue's alpha automation that would write the spec under self-heal) with
            a MultiKueue AdmissionCheck, a MultiKueueConfig listing the workers in order of preference, and one
            MultiKueueCluster per worker reading the kubeconfig Secret `make bootstrap` makes out of git. No standing
            RayCluster: the manager runs no training.
  worker    everything a job references but not the job itself (its spec ConfigMap, its NetworkPolicy; the
            Secrets and storage of the platform): MultiKueue copies only the job. A ServiceAccount with a
            ClusterRole on exactly what MultiKueue does there, whose token is in the manager's kubeconfig Secret.
            And a gate: a worker that lacks a Secret every RayJob reads (made out of git, so it can be lost on one
            cluster) refuses their Workloads, so MultiKueue places none there (gated_secrets).

A dispatched job can land on any worker, so its checkpoints must be where every worker reaches them (an S3 store
outside the clusters), or it is pinned to one cluster: a render error otherwise (checkpoint_problem, which
apps.compose asks of each dispatched job's composed values and locates where its checkpoints were set).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from .errors import RenderError, RenderErrors, ValueFault, dotted

if TYPE_CHECKING:
    from .environments import Environment

MANAGED_BY = "kueue.x-k8s.io/multikueue"
ADMISSION_CHECK = "multikueue"
DEFAULT_SECRET_PREFIX = "multikueue"
# The kinds whose object MultiKueue dispatches (the job) and that a worker therefore does not render itself.
JOB_KINDS = ("RayJob", "PyTorchJob")
MANAGER, WORKER = "manager", "worker"
# KubeRay reads this key of the Secret named by a Ray cluster's authOptions.secretName (Ray token auth)
RAY_AUTH_KEY = "auth_token"
# Kueue names a job's Workload `<kind, lowercase>-<job>-<hash>` (v0.17.0 pkg/controller/jobframework/
# workload_names.go 68-70), and MultiKueue's copy on a worker keeps the name and labels but not the owner
# (pkg/controller/admissionchecks/multikueue/workload.go cloneForCreate): the name is what tells a RayJob's Workload.
RAY_JOB_WORKLOAD_PREFIX = "rayjob-"


@dataclass(frozen=True)
class Placement:
    """A cluster's part in its environment's placement."""
    role: str | None = None                  # MANAGER, WORKER, or None (no MultiKueue)
    workers: tuple[str, ...] = ()
    secret_prefix: str = DEFAULT_SECRET_PREFIX
    quota: dict = field(default_factory=dict)  # the manager's: {flavor: {resource: summed quantity}}

    @property
    def dispatches(self) -> bool:
        return self.role is not None

    def kubeconfig_secret(self, worker: str) -> str:
        return f"{self.secret_prefix}-{worker}"


def settings(doc: dict) -> dict | None:
    """The environment's `queueing.multiKueue` when it is on, else None."""
    q = doc.get("queueing") or {}
    mk = q.get("multiKueue") or {}
    if not q.get("enabled", False) or not mk or not mk.get("enabled", True):
        return None
    return mk


def plan(env: Environment, members: list[Environment]) -> None:
    """Give each member of `env` its Placement (member.placement), after checking the choice: raises a located
    RenderError for a manager or worker that is not one of the clusters, a manager that is also a worker, and a pin
    to an unknown cluster (or to the manager)."""
    keys = [m.cluster for m in members if m.cluster is not None]
    mk = settings(env.raw.data) if env.raw is not None else None
    errors = _pin_errors(env, keys, mk)
    if mk is None:
        if errors:
            raise RenderErrors(errors)
        return
    where = ("queueing", "multiKueue")
    manager = mk["manager"]
    workers = list(mk.get("workers") or [k for k in keys if k != manager])
    if not keys:
        errors.append(_error(env, where, "multiKueue places jobs across the clusters of an environment, which has "
                             "none", "expected: `clusters:` with a manager and at least one worker"))
    else:
        if manager not in keys:
            errors.append(_error(env, (*where, "manager"), f"{manager!r} is not one of its clusters",
                                 f"expected one of: {', '.join(keys)}"))
        for i, w in enumerate(workers):
            if w not in keys:
                errors.append(_error(env, (*where, "workers", i), f"{w!r} is not one of its clusters",
                                     f"expected one of: {', '.join(keys)}"))
            elif w == manager:
                errors.append(_error(env, (*where, "workers", i), f"{w!r} is the manager; a manager cluster is not a "
                                     "worker (Kueue: the job would be copied onto itself)",
                                     "expected: the other clusters"))
        if not workers:
            errors.append(_error(env, (*where, "workers"), "no worker cluster", "expected: at least one"))
    if errors:
        raise RenderErrors(errors)
    by_key = {m.cluster: m for m in members}
    prefix = mk.get("kubeconfigSecretPrefix") or DEFAULT_SECRET_PREFIX
    quota = summed_quota([by_key[w] for w in workers])
    for m in members:
        role = MANAGER if m.cluster == manager else WORKER if m.cluster in workers else None
        m.placement = Placement(role, tuple(workers), prefix, quota if role == MANAGER else {})


def job_runs_on(env: Environment, entry: dict) -> bool:
    """Whether this member renders a job whose composed entry is `entry` (pinned jobs: on their cluster only)."""
    pinned = entry.get("pinnedTo")
    return pinned is None or env.cluster is None or pinned == env.cluster


def dispatched(env: Environment, entry: dict) -> bool:
    """Whether MultiKueue places this job (this member's environment dispatches, and the job is not pinned)."""
    return env.placement.dispatches and not entry.get("pinnedTo")


def gated_secrets(env: Environment) -> list[dict]:
    """The Secrets every RayJob of the environment reads, which a worker must have before MultiKueue may place one
    there: [{name, keys, workloadPrefix}]. Today the Ray auth token (`cluster.auth.secretName` with mode token, which
    each job's Ray cluster inherits), unless a dispatched Ray job composes another auth of its own: then not every
    job reads it, and gating on it would keep that job off a worker it could run on. A Secret only some jobs read
    (a job's secretEnv) is not gated for the same reason; `make fleet` names it when a cluster lacks it."""
    secret = _auth_secret(env.doc.get("cluster") or {})
    if secret is None:
        return []
    defaults = env.doc.get("jobDefaults") or {}
    for entry in (env.doc.get("jobs") or {}).values():
        entry = entry or {}
        if not entry.get("enabled", True) or entry.get("backend", defaults.get("backend", "ray")) != "ray":
            continue
        if not dispatched(env, entry):
            continue
        composed = {**(env.doc.get("cluster") or {}).get("auth", {}),
                    **((defaults.get("cluster") or {}).get("auth") or {}),
                    **((entry.get("cluster") or {}).get("auth") or {})}
        if _auth_secret({"auth": composed}) != secret:
            return []
    return [{"name": secret, "keys": [RAY_AUTH_KEY], "workloadPrefix": RAY_JOB_WORKLOAD_PREFIX}]


def _auth_secret(cluster: dict) -> str | None:
    auth = cluster.get("auth") or {}
    return auth.get("secretName") if auth.get("mode") == "token" and auth.get("secretName") else None


def summed_quota(workers: list[Environment]) -> dict:
    """{flavor: {resource: quantity}}: each flavor's quota summed over the workers' composed `queueing.flavors`."""
    sums: dict = {}
    for w in workers:
        for flavor in (w.doc.get("queueing") or {}).get("flavors") or []:
            for resource, value in (flavor.get("quota") or {}).items():
                sums.setdefault(flavor["name"], {}).setdefault(resource, []).append(str(value))
    return {f: {r: add_quantities(vs) for r, vs in res.items()} for f, res in sums.items()}


_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
             "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def _split(quantity: str) -> tuple[Decimal, str]:
    q = quantity.strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if q.endswith(suffix) and q[: -len(suffix)]:
            return Decimal(q[: -len(suffix)]), suffix
    return Decimal(q), ""


def add_quantities(values: list[str]) -> str:
    """The sum of Kubernetes quantities, in their common suffix ("1792Gi" + "1792Gi" = "3584Gi"); mixed suffixes
    sum in base units."""
    parts = [_split(v) for v in values]
    suffixes = {s for _, s in parts}
    if len(suffixes) == 1:
        total = sum((n for n, _ in parts), Decimal(0))
        return f"{_plain(total)}{suffixes.pop()}"
    total = sum((n * Decimal(_SUFFIXES[s]) if s else n for n, s in parts), Decimal(0))
    return _plain(total) if total == total.to_integral_value() else f"{_plain(total * 1000)}m"


def _plain(n: Decimal) -> str:
    return str(n.quantize(Decimal(1))) if n == n.to_integral_value() else format(n.normalize(), "f")


def _pin_errors(env: Environment, keys: list[str], mk: dict | None) -> list[RenderError]:
    errors = []
    layer = env.raw if env.raw is not None else env.layer
    for name, job in sorted((layer.get("jobs") or {}).items()):
        pinned = (job or {}).get("pinnedTo")
        if pinned is None:
            continue
        if not keys:
            errors.append(_error(env, ("jobs", name, "pinnedTo"), "pins the job to a cluster, and the environment "
                                 "has one", "expected: no pinnedTo, or `clusters:` listing several"))
        elif pinned not in keys:
            errors.append(_error(env, ("jobs", name, "pinnedTo"), f"{pinned!r} is not one of its clusters",
                                 f"expected one of: {', '.join(keys)}"))
        elif mk is not None and pinned == mk.get("manager"):
            errors.append(_error(env, ("jobs", name, "pinnedTo"), f"{pinned!r} is the MultiKueue manager, which "
                                 "runs no training", "expected: one of the workers"))
    return errors


def checkpoint_problem(job: str, checkpoints: dict) -> tuple[str, str] | None:
    """(problem, hint) when a dispatched job's checkpoints (its composed cluster.checkpoints) are on storage only
    one cluster reaches: a volume claim, or an object store Service inside the cluster; a retry placed on another
    worker would not find them. None when they are off or on an S3 store outside the clusters."""
    if not checkpoints.get("enabled"):
        return None
    store = checkpoints.get("store", "volume")
    endpoint = str((checkpoints.get("s3") or {}).get("endpoint") or "")
    if store == "volume":
        what = f"the volume claim {checkpoints.get('claimName')!r}"
    elif ".svc" in endpoint:
        what = f"the object store {endpoint} (a Service inside each cluster)"
    else:
        return None
    return (f"job {job!r} is placed by MultiKueue on any worker, and its checkpoints are on {what}, which only one "
            "cluster reaches",
            "expected: checkpoints on an S3 store outside the clusters (store: s3, an endpoint every worker "
            f"reaches), or jobs.{job}.pinnedTo: <a worker>")


def _error(env: Environment, path: tuple, problem: str, hint: str) -> RenderError:
    layer = env.raw if env.raw is not None else env.layer
    location = layer.locate(path)
    return RenderError(f"{problem} ({hint})" if location else f"{dotted(path)}: {problem} ({hint})", location,
                       ValueFault(dotted(path), problem, f" ({hint})"))

