"""make scan: an independent scanner (checkov 3.3.30, Bridgecrew/Prisma's open-source IaC scanner) on what runs,
not on our templates: every pod in an environment's namespace, as the API server stored it after the operators made
it (KubeRay's probes, init containers and sidecars included), with the namespace's NetworkPolicies beside them so
that checkov's graph checks can pair a pod with its policy. Each failure is either fixed or accepted in
security/checkov-allowlist.yaml with its reason (an empty reason is an error); what is neither fails the scan.

checkov runs from its own virtual environment (.tools/checkov, scripts/setup.sh scan): its pins (boto3, networkx,
...) are not this project's, and it is a tool we call, not a library we import.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from .targets import EXIT_BAD_INPUT, EXIT_NOT_HEALTHY, EXIT_OK, Clients, OpsError, Target

CHECKOV_VERSION = "3.3.30"
ROOT = Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "security" / "checkov-allowlist.yaml"


ROLES = ("ray-head", "ray-worker", "submitter", "torchrun-master", "torchrun-worker", "other")


def role_of(labels: dict) -> str:
    """What a pod is, from the labels its operator gives it (KubeRay, the Job controller, the training-operator)."""
    labels = labels or {}
    node_type = labels.get("ray.io/node-type")
    if node_type in ("head", "worker"):
        return f"ray-{node_type}"
    replica = labels.get("training.kubeflow.org/replica-type", "").lower()
    if replica in ("master", "worker"):
        return f"torchrun-{replica}"
    if labels.get("batch.kubernetes.io/job-name") or labels.get("job-name"):
        return "submitter"
    return "other"


@dataclass(frozen=True)
class Accepted:
    check: str
    reason: str
    roles: tuple[str, ...] = ROLES
    clusters: tuple[str, ...] = ()  # the Ray clusters (label ray.io/cluster) whose pods it covers; empty: any pod

    def covers(self, check: str, role: str, cluster: str = "") -> bool:
        return check == self.check and role in self.roles and (not self.clusters or cluster in self.clusters)


@dataclass(frozen=True)
class Finding:
    check: str
    name: str
    pod: str
    role: str
    accepted: Accepted | None = None


@dataclass
class Result:
    env: str
    pods: int
    passed: int
    findings: list[Finding]

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.accepted is None]

    @property
    def accepted(self) -> list[Finding]:
        return [f for f in self.findings if f.accepted is not None]

    def summary(self) -> str:
        return f"scan: {self.passed} passed, {len(self.failed)} failed, {len(self.accepted)} accepted"


def load_allowlist(path: Path = ALLOWLIST) -> list[Accepted]:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise OpsError(f"cannot read the scan allow-list {path}: {exc}") from None
    entries = data.get("accepted") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise OpsError(f"{path}: expected a mapping with a list `accepted:` of {{check, reason, roles, clusters}}")
    out = []
    for i, entry in enumerate(entries):
        where = f"{path}: accepted[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("check"), str) or not entry["check"].strip():
            raise OpsError(f"{where}: `check` (a checkov id such as CKV_K8S_15) is required")
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise OpsError(f"{where} ({entry['check']}): the reason is empty; every accepted finding says why")
        roles = entry.get("roles", list(ROLES))
        if isinstance(roles, str):
            roles = [roles]
        unknown = [r for r in roles if r not in ROLES] if isinstance(roles, list) else ["?"]
        if not roles or unknown:
            raise OpsError(f"{where} ({entry['check']}): `roles` is a list of {', '.join(ROLES)} (unknown: "
                           f"{', '.join(map(str, unknown))})")
        clusters = entry.get("clusters", [])
        if not isinstance(clusters, list) or not all(isinstance(c, str) and c for c in clusters):
            raise OpsError(f"{where} ({entry['check']}): `clusters` is a list of RayCluster names (the pods' "
                           f"ray.io/cluster label)")
        out.append(Accepted(entry["check"].strip(), " ".join(reason.split()), tuple(roles), tuple(clusters)))
    return out


def checkov_binary() -> str:
    explicit = os.environ.get("CHECKOV")
    local = ROOT / ".tools" / "checkov" / "bin" / "checkov"
    for candidate in (explicit, str(local)):
        if candidate and Path(candidate).is_file():
            return candidate
    raise OpsError(f"checkov {CHECKOV_VERSION} is not installed: run `scripts/setup.sh scan` (make scan does), or "
                   f"set CHECKOV to its path", EXIT_BAD_INPUT)


def _clean(obj: dict) -> dict:
    """A live object as a manifest: what the API server stored, minus status and server-side bookkeeping."""
    meta = obj.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k)}
    annotations = {k: v for k, v in (keep.get("annotations") or {}).items()
                   if not k.startswith("kubectl.kubernetes.io/")}
    if annotations:
        keep["annotations"] = annotations
    else:
        keep.pop("annotations", None)
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": keep, "spec": obj.get("spec") or {}}


def live_manifests(clients: Clients, target: Target) -> tuple[list[dict], list[dict]]:
    """(pods, network policies) of the environment's namespace, as manifests."""
    from kubernetes import client
    api = clients.api(target.context)
    core, net = client.CoreV1Api(api), client.NetworkingV1Api(api)
    pods = [dict(api.sanitize_for_serialization(p), apiVersion="v1", kind="Pod")
            for p in core.list_namespaced_pod(target.namespace).items if not p.metadata.deletion_timestamp]
    policies = [dict(api.sanitize_for_serialization(p), apiVersion="networking.k8s.io/v1", kind="NetworkPolicy")
                for p in net.list_namespaced_network_policy(target.namespace).items]
    return [_clean(p) for p in pods], [_clean(p) for p in policies]


def run_checkov(directory: Path, binary: str) -> dict:
    proc = subprocess.run([binary, "-d", str(directory), "--framework", "kubernetes", "-o", "json", "--compact",
                           "--skip-download"], capture_output=True, text=True)
    if proc.returncode not in (0, 1):  # 1: failed checks; anything else: checkov itself failed
        raise OpsError(f"checkov failed (exit {proc.returncode}):\n{(proc.stderr or proc.stdout).strip()[-2000:]}",
                       EXIT_NOT_HEALTHY)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise OpsError(f"checkov printed no JSON:\n{(proc.stdout + proc.stderr).strip()[-2000:]}",
                       EXIT_NOT_HEALTHY) from None
    if isinstance(data, list):
        data = next((d for d in data if d.get("check_type") == "kubernetes"), {})
    return data


def classify(report: dict, allowlist: list[Accepted], env: str, roles: dict[str, str],
             clusters: dict[str, str] | None = None) -> Result:
    """checkov's report of pods (and policies) -> passed count, findings on pods with their acceptance; `roles`:
    pod name -> role_of(its labels); `clusters`: pod name -> its Ray cluster (label ray.io/cluster)."""
    results = report.get("results") or {}
    passed = sum(1 for c in results.get("passed_checks") or [] if str(c.get("resource", "")).startswith("Pod."))
    findings = []
    for check in results.get("failed_checks") or []:
        resource = str(check.get("resource", ""))
        if not resource.startswith("Pod."):
            continue  # a finding on a NetworkPolicy itself: only the pods are under scan
        pod = resource.split(".", 2)[-1]
        role = roles.get(pod, "other")
        cluster = (clusters or {}).get(pod, "")
        accepted = next((a for a in allowlist if a.covers(check["check_id"], role, cluster)), None)
        findings.append(Finding(check["check_id"], check.get("check_name", ""), pod, role, accepted))
    return Result(env, len(roles), passed, sorted(findings, key=lambda f: (f.check, f.pod)))


def scan(clients: Clients, target: Target, allowlist: list[Accepted], keep: Path | None = None,
         out=sys.stdout) -> Result:
    binary = checkov_binary()
    pods, policies = live_manifests(clients, target)
    if not pods:
        raise OpsError(f"no pods in namespace {target.namespace} of context {target.context}: nothing to scan "
                       f"(has the environment been deployed? make status ENV={target.env})", EXIT_NOT_HEALTHY)
    with tempfile.TemporaryDirectory(prefix="scan-") as tmp:
        directory = keep or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        for doc in pods + policies:
            name = f"{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"
            (directory / name).write_text(yaml.safe_dump(doc, sort_keys=False))
        print(f"{target.env}: checkov {CHECKOV_VERSION} on {len(pods)} pods and {len(policies)} NetworkPolicies of "
              f"namespace {target.namespace}", file=out, flush=True)
        report = run_checkov(directory, binary)
    roles = {p["metadata"]["name"]: role_of(p["metadata"].get("labels") or {}) for p in pods}
    clusters = {p["metadata"]["name"]: (p["metadata"].get("labels") or {}).get("ray.io/cluster", "") for p in pods}
    return classify(report, allowlist, target.env, roles, clusters)


def render(result: Result) -> str:
    lines = []
    for finding in result.failed:
        lines.append(f"FAILED {finding.check} {finding.name} -- pod {finding.pod} ({finding.role})")
    by_check: dict[str, list[Finding]] = {}
    for finding in result.accepted:
        by_check.setdefault(finding.check, []).append(finding)
    for check, findings in sorted(by_check.items()):
        lines.append(f"accepted {check} ({len(findings)} pod(s)): {findings[0].accepted.reason}")
    lines.append(f"{result.env}: {result.summary()}")
    return "\n".join(lines)


def exit_code(results: list[Result]) -> int:
    return EXIT_NOT_HEALTHY if any(r.failed for r in results) else EXIT_OK
