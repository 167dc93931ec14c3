"""make fleet: the live facts of every cluster of an environment side by side, and the drift between them.

The consistency contract (generator/fleet_contract.yaml) holds what git says; this holds what the clusters do. Per
cluster (each of the environment's `clusters:`, through its kubectl context), read with the kubernetes client:

- apps: its Argo CD Applications (on the management cluster, by their cluster label): sync, health and the git
  revision each synced;
- operators: the images of the Deployments in the namespaces of the operator Applications rendered for it
  (argocd/managed), beside the version each Application pins;
- CRDs: the served versions of the operators' kinds (ray.io, kubeflow.org, kueue.x-k8s.io);
- GPUs: nvidia.com/gpu allocatable, summed over its nodes;
- Secrets: the Secrets made out of git (and their keys) that its rendered workloads read, and whether its API server
  refuses jobs without them (a MultiKueue worker's gate: then no job is placed there until the Secret is back).

Drift is what the contract keeps equal but the clusters do not have alike, or what one cluster lacks: an app out of
sync or on another revision than the same app elsewhere, an operator image or CRD version that differs, a CRD or
Secret (or key) that is missing. Each is named with the cluster, the object and the fix; a cluster that cannot be
reached is drift too.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from generator.argocd import APP_LABEL, CLUSTER_LABEL, ENV_LABEL  # what the Argo CD layer labels

from . import manifests
from .bootstrap import create_secret_command, gated_secrets, patch_secret_command, referenced_secrets_of
from .targets import Clients, OpsError, Target

CRD_GROUPS = ("ray.io", "kubeflow.org", "kueue.x-k8s.io")
# what a gated Secret's absence means (the MultiKueue worker's admission gate): its API server refuses RayJob
# Workloads, so MultiKueue places the jobs on the other workers, or holds them until the Secret is back
GATED = ("no RayJob is placed on this cluster until it is back (its API server refuses their Workloads; MultiKueue "
         "places them on the other workers meanwhile)")
GPU = "nvidia.com/gpu"


@dataclass
class ClusterFacts:
    cluster: str
    context: str
    unreachable: str = ""
    apps: dict = field(default_factory=dict)        # app -> {"sync", "health", "revision"}
    operators: dict = field(default_factory=dict)   # "namespace/deployment/container" -> image
    pinned: dict = field(default_factory=dict)      # operator app -> the version its Application pins
    crds: dict = field(default_factory=dict)        # CRD name -> "v1,v1beta1" (served versions)
    gpus: int = 0
    nodes: int = 0
    secrets: dict = field(default_factory=dict)     # "namespace/name" -> {"missing": bool, "missingKeys": [...]}


@dataclass(frozen=True)
class Drift:
    cluster: str
    what: str
    fix: str

    def line(self) -> str:
        return f"{self.cluster}: {self.what}\n    fix: {self.fix}"


def operator_apps(root: Path, tgt: Target) -> list[dict]:
    """The operator Applications rendered for this cluster (argocd/managed; not this repository's own apps/): their
    app name, namespace and the version they pin."""
    out = []
    for path in sorted((root / "argocd" / "managed").glob("application-*.yaml")):
        doc = manifests.read(path)
        labels = (doc.get("metadata") or {}).get("labels") or {}
        if doc.get("kind") != "Application" or labels.get(ENV_LABEL) != tgt.env:
            continue
        if tgt.cluster is not None and labels.get(CLUSTER_LABEL, tgt.cluster) != tgt.cluster:
            continue
        spec = doc.get("spec") or {}
        if str((spec.get("source") or {}).get("path", "")).startswith("apps/"):
            continue  # this repository's own rendered apps (the platform), not an operator
        out.append({"app": labels.get(APP_LABEL, doc["metadata"]["name"]),
                    "namespace": (spec.get("destination") or {}).get("namespace", ""),
                    "version": (spec.get("source") or {}).get("targetRevision", "")})
    return out


def facts(clients: Clients, tgt: Target, root: Path) -> ClusterFacts:
    name = tgt.cluster or tgt.env
    out = ClusterFacts(cluster=name, context=tgt.context)
    # the Applications live on the management cluster (Argo CD's): read even when this cluster is unreachable; on
    # an environment of several clusters, each cluster's carry its name
    selector = f"{ENV_LABEL}={tgt.env}" + (f",{CLUSTER_LABEL}={name}" if tgt.cluster is not None else "")
    items = clients.custom(tgt.argocd_context).list_namespaced_custom_object(
        "argoproj.io", "v1alpha1", tgt.argocd_namespace, "applications", label_selector=selector)["items"]
    for app in items:
        labels = app["metadata"].get("labels") or {}
        status = app.get("status") or {}
        sync = status.get("sync") or {}
        out.apps[labels.get(APP_LABEL, app["metadata"]["name"])] = {
            "name": app["metadata"]["name"], "sync": sync.get("status", "Unknown"),
            "health": (status.get("health") or {}).get("status", "Unknown"), "revision": sync.get("revision", "")}
    try:
        core = clients.core(tgt.context)
    except OpsError as exc:
        out.unreachable = str(exc)
        return out
    ops = operator_apps(root, tgt)
    out.pinned = {op["app"]: op["version"] for op in ops}
    apps_api = clients.apps(tgt.context)
    for namespace in sorted({op["namespace"] for op in ops if op["namespace"]}):
        for deploy in apps_api.list_namespaced_deployment(namespace).items:
            for container in deploy.spec.template.spec.containers:
                out.operators[f"{namespace}/{deploy.metadata.name}/{container.name}"] = container.image
    for crd in clients.extensions(tgt.context).list_custom_resource_definition().items:
        if crd.spec.group.endswith(CRD_GROUPS):
            out.crds[crd.metadata.name] = ",".join(sorted(v.name for v in crd.spec.versions if v.served))
    for node in core.list_node().items:
        out.nodes += 1
        out.gpus += int((node.status.allocatable or {}).get(GPU, 0) or 0)
    docs = [manifests.read(path) for path in tgt.rendered(root)]
    gated = gated_secrets(docs)
    for (namespace, secret), keys in sorted(referenced_secrets_of(docs, tgt.namespace).items()):
        fact = {"keys": sorted(keys), "gated": (namespace, secret) in gated}
        try:
            have = core.read_namespaced_secret(secret, namespace).data or {}
        except Exception as exc:  # noqa: BLE001 - a 404 is the fact; anything else is raised again
            if getattr(exc, "status", None) != 404:
                raise
            out.secrets[f"{namespace}/{secret}"] = {**fact, "missing": True, "missingKeys": sorted(keys)}
            continue
        out.secrets[f"{namespace}/{secret}"] = {**fact, "missing": False,
                                               "missingKeys": sorted(k for k in keys if k not in have)}
    return out


def drift(all_facts: list[ClusterFacts], targets: list[Target]) -> list[Drift]:
    by_cluster = {t.cluster or t.env: t for t in targets}
    found: list[Drift] = []
    reachable = [f for f in all_facts if not f.unreachable]
    for f in all_facts:
        tgt = by_cluster[f.cluster]
        if f.unreachable:
            found.append(Drift(f.cluster, f"unreachable: {f.unreachable}",
                               f"check its API server and the kubectl context {f.context!r}"))
        for _app, a in sorted(f.apps.items()):
            if a["sync"] != "Synced":
                found.append(Drift(f.cluster, f"Application {a['name']} is {a['sync']} ({a['health']})",
                                   f"make status ENV={tgt.env}; make diagnose for its jobs, or sync it in Argo CD"))
    # the same app on every cluster synced the same revision (the shared layer is one commit everywhere)
    for app in sorted({a for f in all_facts for a in f.apps}):
        revisions = {f.cluster: f.apps[app]["revision"] for f in all_facts if app in f.apps}
        _odd_ones(found, revisions, lambda cluster, rev, usual, app=app: Drift(
            cluster, f"Application of {app} synced revision {rev[:10] or '(none)'}, the other clusters {usual[:10]}",
            "refresh it in Argo CD (or wait for its next poll), then read its sync errors: make status"))
    for kind, facts_of in (("operator image", lambda f: f.operators), ("CRD", lambda f: f.crds)):
        for key in sorted({k for f in reachable for k in facts_of(f)}):
            values = {f.cluster: facts_of(f).get(key) for f in reachable}
            for cluster, value in values.items():
                if value is None:
                    found.append(Drift(cluster, f"{kind} {key} is missing (the other clusters have it)",
                                       "check its operator Application in Argo CD (make status) and sync it"))
            present = {c: v for c, v in values.items() if v is not None}
            _odd_ones(found, present, lambda cluster, value, usual, key=key, kind=kind: Drift(
                cluster, f"{kind} {key} is {value}, the other clusters' {usual}",
                "the versions come from versions.yaml through argocd/managed: sync the cluster's operator "
                "Applications"))
    for f in reachable:
        for ref, s in sorted(f.secrets.items()):
            namespace, name = ref.split("/", 1)
            if s["missing"]:
                what = f"Secret {ref} is missing (keys {', '.join(s['keys'])}): " + (
                    GATED if s.get("gated") else "the jobs that read it cannot start on this cluster")
                fix = create_secret_command(f.context, namespace, name, s["missingKeys"])
            elif s["missingKeys"]:
                what = f"Secret {ref} lacks the keys {', '.join(s['missingKeys'])}" + (
                    f": {GATED}" if s.get("gated") else "")
                fix = patch_secret_command(f.context, namespace, name, s["missingKeys"])
            else:
                continue
            found.append(Drift(f.cluster, what, fix + " (the value from where your team keeps it, as on the other "
                               "clusters; never from git)"))
    return found


def _odd_ones(found: list, values: dict, make) -> None:
    """Where the clusters disagree: each cluster whose value is not the most common one (ties: not the first
    cluster's) is drift."""
    if len(set(values.values())) < 2:
        return
    counts = Counter(values.values())
    first = next(iter(values.values()))
    usual = max(counts, key=lambda v: (counts[v], v == first))
    for cluster, value in values.items():
        if value != usual:
            found.append(make(cluster, value, usual))


def fleet_status(clients: Clients, targets: list[Target], root: Path) -> dict:
    all_facts = [facts(clients, t, root) for t in targets]
    found = drift(all_facts, targets)
    return {"environment": targets[0].env, "clusters": [f.__dict__ for f in all_facts],
            "drift": [d.__dict__ for d in found]}


def render_table(status: dict) -> str:
    clusters = status["clusters"]
    names = [c["cluster"] for c in clusters]
    rows = [("", names)]

    def row(label, cell):
        rows.append((label, [cell(c) if not c["unreachable"] or label == "apps synced" else "unreachable"
                             for c in clusters]))

    row("context", lambda c: c["context"])
    row("apps synced", lambda c: f"{sum(a['sync'] == 'Synced' for a in c['apps'].values())}/{len(c['apps'])}"
        + (f" at {_revisions(c)}" if c["apps"] else ""))
    row("apps healthy", lambda c: f"{sum(a['health'] == 'Healthy' for a in c['apps'].values())}/{len(c['apps'])}")
    for app in sorted({a for c in clusters for a in c["pinned"]}):
        row(f"{app} (pinned)", lambda c, app=app: c["pinned"].get(app, "-"))
    for key in sorted({k for c in clusters for k in c["operators"]}):
        row(key.split("/", 1)[1], lambda c, key=key: (c["operators"].get(key) or "missing").rsplit("/", 1)[-1])
    row("CRDs", lambda c: f"{len(c['crds'])} ({len({v for v in c['crds'].values()})} version sets)")
    row("GPUs allocatable", lambda c: f"{c['gpus']} on {c['nodes']} nodes")
    row("Secrets out of git", lambda c: f"{sum(not s['missing'] and not s['missingKeys'] for s in c['secrets'].values())}"
        f"/{len(c['secrets'])} present")
    width = max(len(label) for label, _ in rows) + 2
    cols = [max(len(str(cells[i])) for _, cells in rows) + 2 for i in range(len(names))]
    lines = [f"{status['environment']}: {len(names)} cluster{'s' if len(names) > 1 else ''}"]
    for label, cells in rows:
        lines.append(label.ljust(width) + "".join(str(cell).ljust(cols[i]) for i, cell in enumerate(cells)).rstrip())
    if status["drift"]:
        lines.append(f"drift ({len(status['drift'])}):")
        lines += ["  " + Drift(**d).line() for d in status["drift"]]
    else:
        lines.append("no drift: every cluster has what the others have")
    return "\n".join(lines)


def _revisions(c: dict) -> str:
    revs = sorted({a["revision"][:7] for a in c["apps"].values() if a["revision"]})
    return ",".join(revs) if len(revs) <= 2 else f"{len(revs)} revisions"
