"""make diagnose: a failed or stuck job, classified into the failures this platform knows, each with the line that
shows it and the environment value that fixes it.

The evidence is what the cluster says about the run: the operator's status (reason and message), why Kueue holds
it (a queued run, suspended: its Workload's QuotaReserved message, ops/kueue.py), events of the run, its cluster,
pods and checkpoint claim, the pods' container states, and the last lines of their logs. Each class is a set of
patterns of the messages the systems themselves print (NCCL, libfabric, the kubelet, the scheduler, the API server,
KubeRay, the training-operator, Kueue); the first evidence line a class matches is shown.
Unknown failures say so and show the last lines. `retryable` tells `make watch --auto-retry` whether a new run can
succeed without a change (a hung collective, a deadline) or needs one (a bad spec, a missing image).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from . import jobs as jobs_mod
from . import kueue
from .targets import Clients, Target


@dataclass(frozen=True)
class FailureClass:
    name: str
    title: str
    patterns: tuple[str, ...]
    fix: str
    retryable: bool
    # the fix in this environment's words (the value and the file:line that sets it), from the target and the whole
    # evidence line the class matched; None (or its returning None): `fix` as written
    where: Callable[[Target, str], str | None] | None = None

    def match(self, text: str) -> bool:
        return any(re.search(p, text) for p in self.patterns)


CLASSES = (
    FailureClass("nccl-timeout", "NCCL collective timeout",
                 (r"Watchdog caught collective operation timeout",
                  r"WorkNCCL\(SeqNum=\d+.*\) ran for \d+ milliseconds before timing out",
                  r"Timeout at NCCL work: \d+"),
                 "cluster.nccl.collectiveTimeoutSeconds (the process group's timeout); the flight recorder dumps "
                 "(/checkpoints/nccl-flight-recorder-<run>-rank_<n>: each run its own) show the hung collective and rank", True),
    FailureClass("efa-rdma-on-g5", "FI_EFA_USE_DEVICE_RDMA=1 on an instance without RDMA read (g5/g6)",
                 (r"FI_EFA_USE_DEVICE_RDMA=1 was set by users?, but EFA device has no rdma-read capability",),
                 "cluster.efa.instanceFamily: g5 (renders FI_EFA_USE_DEVICE_RDMA=0)", False),
    FailureClass("no-efa-provider", "libfabric found no EFA provider",
                 (r"NET/OFI No eligible providers were found", r"OFI fi_getinfo\(\) call failed: No data available",
                  r"Couldn't find any optimal provider", r"Unable to find a protocol that worked",
                  r"fi_getinfo: provider efa output empty list"),
                 "cluster.efa.enabled: true and efa.devicesPerPod within the instance's devices (the pod must request "
                 "vpc.amazonaws.com/efa); the node group must be EFA-enabled with the EFA device plugin running", False),
    FailureClass("nccl-on-sockets", "NCCL runs on TCP sockets instead of EFA",
                 (r"NCCL INFO Using network Socket\b", r"via NET/Socket/\d", r"NCCL INFO NET/Socket : Using"),
                 "cluster.efa.enabled: true and the image's EFA build (cluster.image.tag <version>-efa: libfabric "
                 "and aws-ofi-nccl)", False),
    FailureClass("oom-killed", "a container or Ray worker was killed for memory",
                 (r"\bOOMKilled\b", r"running low on memory", r"killed due to memory pressure \(OOM\)",
                  r"failed due to oom\b"),
                 "the killed container's resources.limits.memory: a Ray group's cluster.workerGroups.<group>.resources "
                 "(or cluster.head), a submitter's jobs.<job>.job.submitter.resources; or a smaller "
                 "trainConfig.batchSize", False),
    FailureClass("worker-aborted", "a worker aborted or died (SIGABRT)",
                 (r"\bSIGABRT\b", r"exitcode\s*: -6\b", r"exit code 134\b", r"Fatal Python error: Aborted",
                  r"Worker unexpectedly exits with a connection error code"),
                 "usually an abort after a failed collective (see the NCCL lines): cluster.nccl.collectiveTimeoutSeconds; "
                 "a new run resumes from the job's checkpoints", True),
    FailureClass("image-pull", "the image cannot be pulled",
                 (r"\bErrImagePull\b", r"\bImagePullBackOff\b", r"\bInvalidImageName\b",
                  r"Failed to pull image", r"Back-off pulling image"),
                 "cluster.image.repository / cluster.image.tag (make image, then make bump-image TAG=...); "
                 "imagePullSecrets for a private registry", False),
    FailureClass("unschedulable", "pods cannot be scheduled",
                 (r"Insufficient nvidia\.com/gpu", r"Insufficient vpc\.amazonaws\.com/efa",
                  r"\d+/\d+ nodes are available: .*(Insufficient|didn't match|untolerated taint)"),
                 "cluster.workerGroups.<group>.nodeSelector / tolerations, the GPU node group's size, or the "
                 "group's replicas and gpus", False),
    FailureClass("quota-exceeded", "the namespace quota refuses the pods",
                 (r"exceeded quota: ",),
                 "platform.values.resourceQuota.hard (or smaller worker groups)", False),
    FailureClass("not-admitted-quota", "not admitted: no quota in the ClusterQueue",
                 # Kueue v0.17 flavorassigner.go:1038 / :1050, in a Workload's QuotaReserved message
                 (r"insufficient (unused )?quota( in cohort)? for \S+ in flavor ",),
                 "queueing.flavors[].quota of the flavor and resource the Workload's message names (or a smaller "
                 "job); or wait for running jobs to end: Kueue admits it then", False,
                 where=lambda target, message: quota_fix(target, message)),
    FailureClass("claim-not-bound", "the checkpoint claim is not Bound",
                 (r"pod has unbound immediate PersistentVolumeClaims", r"persistentvolumeclaim \"[^\"]+\" not found",
                  r"claim \S+ is (Pending|Missing|Lost)", r"^ProvisioningFailed: "),
                 "platform.values.checkpoints (storage class, size, access modes) and cluster.checkpoints.claimName; "
                 "the CSI driver (fsx.csi.aws.com) must run", False),
    FailureClass("checkpoint-permission-denied", "the checkpoint volume is not writable by the Ray user",
                 (r"cannot write to the checkpoint storage /\S*: PermissionError",
                  r"PermissionError: \[Errno 13\] Permission denied: '/checkpoints"),
                 "the volume's root must be writable by uid 1000 / gid 100 (podSecurityContext): FSx for Lustre's CSI "
                 "driver applies fsGroup to a ReadWriteMany claim only with fsGroupPolicy: File (its Helm chart's "
                 "value; the default ReadWriteOnceWithFSType never does), or prepare the root once (chown 1000:100, "
                 "docs/eks.md)", False),
    FailureClass("storage-not-shared", "the checkpoint storage is not one every Ray pod reaches",
                 (r"the checkpoint storage \S+ is not shared by every Ray node",
                  r"cannot write to the checkpoint storage \S+: (?!PermissionError)",
                  r"Unable to set up cluster storage with the following settings"),
                 "cluster.checkpoints: store s3 (the platform chart's objectStore, or AWS S3) with its endpoint and "
                 "credentials on every Ray pod (cluster.checkpoints.s3), or store volume with a ReadWriteMany claim; "
                 "or the job spec's checkpoint.storagePath", False),
    FailureClass("deadline-exceeded", "the job ran past its deadline",
                 (r"\bDeadlineExceeded\b", r"passed the activeDeadlineSeconds",
                  r"active longer than specified deadline"),
                 "jobs.<job>.job.activeDeadlineSeconds; a new run resumes from the job's checkpoints", True),
    FailureClass("job-status-unreachable", "KubeRay could not ask the head for the job's status for too long",
                 (r"JobStatusCheckTimeoutExceeded", r"Job status checks have been failing since .*; exceeded timeout"),
                 "the head's dashboard (8265) must answer the KubeRay operator: cluster.networkPolicy."
                 "operatorNamespace is the namespace Argo CD installs KubeRay into (a render check holds them "
                 "equal), and the head must be up (its events, memory). KubeRay 1.7.0 fails the RayJob after 300 s "
                 "and backoffLimit does not retry it; once the cause is fixed, make retry starts a new run", False),
    FailureClass("ray-token-auth", "Ray token authentication refused",
                 (r"failed to get auth secret", r"auth token key .* not found in secret",
                  r"Unauthorized: Missing authentication token", r"Forbidden: Invalid authentication token",
                  r"Invalid or missing authentication token", r"couldn't find key auth_token in Secret"),
                 "the Secret named by cluster.auth.secretName (key auth_token) must exist in the namespace, the same "
                 "for every pod of the cluster (created out of git: make bootstrap names the command); a standing "
                 "cluster with auth.kubernetesTokens takes a caller's Kubernetes token instead: one the API server "
                 "accepts, of someone with ray:write on that RayCluster (docs/access.md)", False),
    FailureClass("job-spec-or-data", "the training refused its job spec, data or resources",
                 (r"\[training\] error \((spec|data|resources|cluster|trainer)\): ",),
                 "the job's training spec (jobs.<job>.job.spec: the field the message names) or its data; the "
                 "message is the training's own (training/errors.py); `python -m training validate` checks a spec "
                 "before it is pushed", False),
    FailureClass("secret-missing", "a Secret the pods read does not exist",
                 (r"Error: secret \"[^\"]+\" not found", r"Error: couldn't find key \S+ in Secret"),
                 "create it out of git (make bootstrap prints the kubectl create secret command); its name is the "
                 "environment's (e.g. jobs.<job>.env secretKeyRef, cluster.auth.secretName)", False),
)
BY_NAME = {c.name: c for c in CLASSES}


@dataclass
class Finding:
    failure: FailureClass
    evidence: str
    source: str
    fix: str = ""  # the class's fix, or its words for this environment (FailureClass.where)

    def __post_init__(self):
        self.fix = self.fix or self.failure.fix


@dataclass
class Diagnosis:
    job: str
    run: str
    state: str
    findings: list[Finding] = field(default_factory=list)
    last_lines: list[str] = field(default_factory=list)
    succeeded: bool = False

    @property
    def known(self) -> bool:
        return bool(self.findings)

    @property
    def retryable(self) -> bool:
        return self.known and all(f.failure.retryable for f in self.findings)


_MISSING = object()
_VAR = re.compile(r"\bvars\.([A-Za-z_][A-Za-z0-9_]*)")


def _at(data, path):
    for part in path:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return _MISSING
    return data


def _written(target: Target, path: tuple):
    """The value at `path` as the files hold it (templates unresolved). A cluster's entry holds only its target and
    vars (the schema's consistency contract), so `queueing` is the environment's, whichever cluster this is."""
    return _MISSING if target.written is None else _at(target.written.data, path)


def _where(target: Target, path: tuple) -> tuple[str, tuple]:
    """file:line and key path of where the target's value at `path` was written (the key path alone when unknown),
    and that key path in its file (clusters.<name>... when a cluster's own entry set it)."""
    from generator.errors import dotted
    loc = target.layer.locate(path) if target.layer is not None else None
    if loc is None or loc.line is None:
        return dotted(path), tuple(path)
    return f"{loc.file}:{loc.line} {dotted(loc.path)}", loc.path


def quota_fix(target: Target, message: str) -> str | None:
    """The fix of a Workload Kueue does not admit for quota, in the environment's values: for each resource and
    flavor the message names, the quota value (queueing.flavors[i].quota.<resource>) and where it is written; when
    that value is a template over vars, each var and where it is set for this cluster (its own vars win)."""
    from generator.templating import is_template
    pairs = kueue.short_quota(message)
    if not pairs:
        return None
    flavors = (target.doc.get("queueing") or {}).get("flavors") or []
    here = f"cluster {target.cluster}" if target.cluster else target.env
    values, notes, variables = [], [], {}
    for resource, flavor in pairs:
        index = next((i for i, f in enumerate(flavors) if f.get("name") == flavor), None)
        if index is None:
            notes.append(f"flavor {flavor} is not in {target.env}'s queueing.flavors (the cluster's ClusterQueue is "
                         f"not this checkout's: is the platform app synced?)")
            continue
        quota = flavors[index].get("quota") or {}
        path = ("queueing", "flavors", index, "quota", resource)
        if resource not in quota:
            notes.append(f"{_where(target, path[:3])[0]} ({flavor}) gives no {resource} (quota 0): "
                         f"queueing.flavors[{index}].quota.{resource} would add it")
            continue
        raw = _written(target, path)
        if is_template(raw):
            values.append(f'{_where(target, path)[0]} = "{raw}" ({quota[resource]} on {here})')
            variables.update(dict.fromkeys(_VAR.findall(raw)))
        else:
            values.append(f"{_where(target, path)[0]} = {quota[resource]}")
    for var in variables:
        set_at, key = _where(target, ("vars", var))
        line = f"vars.{var} is set at {set_at.removesuffix(' vars.' + var)}"
        if target.cluster and key[:1] != ("clusters",):
            line += f" (clusters.{target.cluster}.vars.{var} would set it for {here} alone)"
        values.append(line)
    resources = ", ".join(dict.fromkeys(r for r, _ in pairs))
    fix = f"more quota: {'; '.join(values + notes)}; then make render and push" if values else "; ".join(notes)
    return f"{fix}. Or a smaller job (fewer {resources}), or wait for running jobs to end: Kueue admits it then"


def classify(evidence: list[tuple[str, str]]) -> list[Finding]:
    """Each class once, with the first (source, line) it matches, in the order CLASSES lists them."""
    findings = []
    for failure in CLASSES:
        for source, text in evidence:
            if failure.match(text):
                findings.append(Finding(failure, text.strip()[:400], source))
                break
    return findings


Evidence = list[tuple[str, str]]  # (where it was seen, the line)


def _run_status_evidence(run: jobs_mod.Run) -> Evidence:
    status, evidence = run.status, []
    if status.get("reason") or status.get("message"):
        evidence.append((f"{run.kind} {run.name}", f"{status.get('reason', '')}: {status.get('message', '')}"))
    for cond in status.get("conditions") or []:
        if cond.get("message") and cond.get("status") == "True":
            evidence.append((f"{run.kind} {run.name}", f"{cond.get('type')} ({cond.get('reason', '')}): "
                                                      f"{cond['message']}"))
    return evidence


def _workload_evidence(clients: Clients, target: Target, run: jobs_mod.Run) -> Evidence:
    """A queued run that is suspended and not finished: why Kueue holds it (its Workload's QuotaReserved message),
    or that it has no Workload."""
    local = kueue.queue_name(run.obj)
    if local is None or run.finished or not kueue.suspended(run.kind, run.obj):
        return []
    queues = kueue.Queues.read(clients.custom(target.context), target.namespace)
    if queues.workloads is None:
        return [(f"LocalQueue {local}", f"{run.kind} {run.name} is suspended in LocalQueue {local} with "
                                        f"{kueue.NO_WORKLOAD}")]
    workload = queues.workload_of(run.obj)
    if workload is None:
        return [(f"LocalQueue {local}", f"{run.kind} {run.name} is suspended in LocalQueue {local} with no "
                                        f"Workload yet")]
    reserved = kueue.condition(workload, "QuotaReserved")
    if kueue.is_true(workload, "Admitted") or reserved.get("status") != "False":
        return []
    name = workload["metadata"]["name"]
    evidence = [(f"Workload {name}", reserved.get("message") or reserved.get("reason") or "")]
    # Kueue's condition says why the last attempt failed, and an attempt starts from the flavor after the one it
    # tried last (flavorassigner.go: TriedFlavorIdx), so it may name only "flavor <system> doesn't match node
    # affinity" while the flavor the job needs is out of quota: its Pending events keep each attempt's reasons
    try:
        events = clients.core(target.context).list_namespaced_event(
            target.namespace, field_selector=f"involvedObject.kind=Workload,involvedObject.name={name}").items
    except Exception:  # noqa: BLE001 - the condition alone is evidence enough
        events = []
    for event in sorted(events, key=lambda e: str(e.last_timestamp or e.event_time or ""), reverse=True):
        if event.reason == "Pending" and event.message and (f"Workload {name}", event.message) not in evidence:
            evidence.append((f"Workload {name}", event.message))
    return evidence


def _claim_evidence(core, target: Target) -> tuple[str | None, Evidence]:
    """The checkpoint claim's name while it is not Bound (its events are evidence then) and a line saying so.
    A Bound claim's events are history: the PV controller's "Error saving claim: Operation cannot be fulfilled"
    (a write conflict it retries) stays as a ProvisioningFailed event after the claim bound, and is not why a job
    failed."""
    checkpoints = (target.doc.get("cluster") or {}).get("checkpoints") or {}
    claim = checkpoints.get("claimName")
    if not (checkpoints.get("enabled") and checkpoints.get("store", "volume") == "volume" and claim):
        return None, []
    try:
        phase = core.read_namespaced_persistent_volume_claim(claim, target.namespace).status.phase
    except Exception:  # noqa: BLE001 - a missing claim is evidence too
        phase = "Missing"
    if phase == "Bound":
        return None, []
    return claim, [(f"PersistentVolumeClaim {claim}", f"claim {claim} is {phase}")]


def _ray_cluster_evidence(clients: Clients, target: Target, cluster: str) -> Evidence:
    try:
        obj = clients.custom(target.context).get_namespaced_custom_object("ray.io", "v1", target.namespace,
                                                                          "rayclusters", cluster)
    except Exception:  # noqa: BLE001 - a cluster already deleted (the job ended) has nothing to add
        obj = {}
    return [(f"RayCluster {cluster} condition {cond.get('type')}", f"{cond.get('reason', '')}: {cond['message']}")
            for cond in (obj.get("status") or {}).get("conditions") or []
            if cond.get("message") and cond.get("reason") not in ("HeadPodRunningAndReady",
                                                                  "AllPodRunningAndReadyFirstTime")]


def _pod_state_evidence(pod) -> Evidence:
    evidence = []
    for cond in pod.status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False" and cond.message:
            evidence.append((f"pod {pod.metadata.name} not scheduled", f"{cond.reason}: {cond.message}"))
    for cs in (pod.status.container_statuses or []) + (pod.status.init_container_statuses or []):
        for label, state in (("state", cs.state), ("last state", cs.last_state)):
            if state is None:
                continue
            if state.waiting and state.waiting.reason:
                evidence.append((f"pod {pod.metadata.name} {label}",
                                 f"{cs.name} waiting: {state.waiting.reason}: {state.waiting.message or ''}"))
            if state.terminated and (state.terminated.exit_code or state.terminated.reason not in (None, "Completed")):
                t = state.terminated
                evidence.append((f"pod {pod.metadata.name} {label}",
                                 f"{cs.name} terminated: {t.reason} exit code {t.exit_code}"
                                 + (f": {t.message}" if t.message else "")))
    return evidence


def _pod_log_evidence(core, target: Target, pod, log_lines: int) -> Evidence:
    if (pod.status.phase or "Pending") == "Pending":
        return []
    evidence = []
    for container in pod.spec.containers:
        try:
            text = core.read_namespaced_pod_log(pod.metadata.name, target.namespace, container=container.name,
                                                tail_lines=log_lines, _request_timeout=20)
        except Exception:  # noqa: BLE001 - logs may be gone with the pod; the rest is still evidence
            continue
        evidence += [(f"log {pod.metadata.name}/{container.name}", line) for line in text.splitlines()
                     if line.strip()]
    return evidence


def evidence_of(clients: Clients, target: Target, run: jobs_mod.Run, log_lines: int = 200) -> Evidence:
    """Everything that may say why a run failed or waits: its status, its Kueue Workload's reason while Kueue holds
    it, the claim, the events of its objects, its Ray cluster's conditions, its pods' states, then their logs (in this
    order: the classes match the first line)."""
    core = clients.core(target.context)
    evidence = _run_status_evidence(run) + _workload_evidence(clients, target, run)
    pods = [p for pods in run.pods.values() for p in pods]
    # a run Kueue holds (suspended) has no cluster and no pods yet: its own events and its Workload's message
    names = {run.name} | {n for n in [run.status.get("rayClusterName")] if n} | {p.metadata.name for p in pods}
    claim, claim_evidence = _claim_evidence(core, target)
    if claim:
        names.add(claim)
    evidence += claim_evidence
    for event in core.list_namespaced_event(target.namespace).items:
        obj = event.involved_object.name or ""
        if obj in names or obj.startswith(run.name):
            evidence.append((f"event on {event.involved_object.kind}/{obj}", f"{event.reason}: {event.message or ''}"))
    if run.status.get("rayClusterName"):
        evidence += _ray_cluster_evidence(clients, target, run.status["rayClusterName"])
    for pod in pods:
        evidence += _pod_state_evidence(pod)
    for pod in pods:
        evidence += _pod_log_evidence(core, target, pod, log_lines)
    return evidence


def diagnose(clients: Clients, target: Target, job: str) -> Diagnosis:
    run = jobs_mod.find(clients, target, job)
    if run.succeeded:
        return Diagnosis(job, run.name, run.state, succeeded=True)
    evidence = evidence_of(clients, target, run)
    result = Diagnosis(job, run.name, run.state, classify(evidence))
    for finding in result.findings:
        if finding.failure.where is not None:
            line = next(t for s, t in evidence if s == finding.source and finding.failure.match(t))
            finding.fix = finding.failure.where(target, line) or finding.fix
    result.last_lines = [f"{source}: {text}" for source, text in last_lines(evidence, run)]
    return result


# the pods whose output is the run's own account of a failure: a RayJob's driver (its submitter streams it), a
# PyTorchJob's master; Ray's worker pods print only their raylet's start (seen on the e2e's real node)
DRIVER_ROLES = ("submitter", "master")


def last_lines(evidence: Evidence, run: jobs_mod.Run, count: int = 10) -> Evidence:
    """What to show for a failure no class knows: the status, events and pod states, then the last lines the
    driver printed (where the training's own error is), else the last lines of any log."""
    drivers = {f"log {p.metadata.name}/" for role in DRIVER_ROLES for p in run.pods.get(role, [])}
    facts = [e for e in evidence if not e[0].startswith("log ")]
    driver_log = [e for e in evidence if any(e[0].startswith(d) for d in drivers)]
    logs = driver_log or [e for e in evidence if e[0].startswith("log ")]
    return facts[-max(count - len(logs[-count:]), 3):] + logs[-count:]


def render(diagnosis: Diagnosis) -> str:
    lines = [f"{diagnosis.job}: run {diagnosis.run} is {diagnosis.state}"]
    if diagnosis.succeeded:
        return lines[0] + "; it succeeded, nothing to diagnose"
    for finding in diagnosis.findings:
        lines += [f"- {finding.failure.title} [{finding.failure.name}; "
                  f"{'retryable' if finding.failure.retryable else 'needs a change'}]",
                  f"    evidence ({finding.source}): {finding.evidence}",
                  f"    fix: {finding.fix}"]
    if not diagnosis.findings:
        lines.append("- not a known failure; the last lines seen:")
        lines += [f"    {line}" for line in diagnosis.last_lines] or ["    (nothing: no status message, event or log)"]
    return "\n".join(lines)
