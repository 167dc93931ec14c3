"""make audit JOB=... [ENV=...]: who changed what, and what it did, joined by the revision.

1. git: the commits that changed the job's rendered folder (apps/<env>/job-<job>/): author, time, subject.
2. Argo CD: the Application's sync history (status.history: revision, when, initiated by a person or by the
   automated sync) and the operation in progress or last finished (status.operationState).
3. Argo CD's record of people's actions on the Application through its API (argocd-server's Events: who synced,
   who deleted which of its resources).
4. The cluster: the job's runs (RayJob / PyTorchJob <job>-<hash>) that exist now, when each was created, its state,
   and its pods.
5. With --audit-log (AUDIT_LOG=, the target cluster's API server audit log, JSON lines): what the API server
   recorded of the job's objects (each write, by whom and as whom, allowed or refused) and every write the people
   who synced it asked of that cluster themselves.

Each Argo CD sync is printed under the commit of its revision, and each run under the sync that created it (the
newest sync deployed before the run's creation). A sync whose revision did not touch the job's folder (another
job's commit) is listed with the commit it synced.
"""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from . import jobs as jobs_mod
from .targets import EXIT_BAD_INPUT, Clients, OpsError, Target

SEP = "\x1f"
AUTOMATED = "automated sync"
UNKNOWN = "unknown"


@dataclass
class Commit:
    sha: str
    author: str
    email: str
    time: str
    subject: str


@dataclass
class Sync:
    revision: str
    deployed_at: str
    initiator: str          # a person's username, or "automated sync"
    phase: str = "Succeeded"
    commit: Commit | None = None
    runs: list = field(default_factory=list)


def commits(root: Path, paths: list[str], limit: int = 50) -> list[Commit]:
    proc = subprocess.run(["git", "-C", str(root), "log", f"-{limit}",
                           f"--format=%H{SEP}%an{SEP}%ae{SEP}%aI{SEP}%s", "--", *paths],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise OpsError(f"git log failed in {root}: {proc.stderr.strip()}", EXIT_BAD_INPUT)
    return [Commit(*line.split(SEP, 4)) for line in proc.stdout.splitlines() if line.count(SEP) == 4]


def commit_of(root: Path, revision: str) -> Commit | None:
    proc = subprocess.run(["git", "-C", str(root), "show", "-s", f"--format=%H{SEP}%an{SEP}%ae{SEP}%aI{SEP}%s",
                           revision], capture_output=True, text=True)
    line = proc.stdout.strip()
    return Commit(*line.split(SEP, 4)) if proc.returncode == 0 and line.count(SEP) == 4 else None


def initiator(by: dict | None) -> str:
    by = by or {}
    if by.get("username"):
        return by["username"]
    return AUTOMATED if by.get("automated") else UNKNOWN


def syncs(app: dict) -> list[Sync]:
    """The Application's deployments, oldest first: its history, and the current operation if it is not in the
    history yet (running, failed)."""
    status = app.get("status") or {}
    out = [Sync(h.get("revision", ""), h.get("deployedAt", ""), initiator(h.get("initiatedBy")))
           for h in status.get("history") or []]
    op = status.get("operationState") or {}
    revision = (op.get("syncResult") or {}).get("revision") or ((op.get("operation") or {}).get("sync") or {}).get(
        "revision", "")
    started = op.get("startedAt", "")
    if op and not any(s.revision == revision and s.deployed_at >= started for s in out):
        out.append(Sync(revision, op.get("finishedAt") or started,
                        initiator((op.get("operation") or {}).get("initiatedBy")), op.get("phase", "")))
    return sorted(out, key=lambda s: s.deployed_at)


def join(found: list[Sync], runs: list[jobs_mod.Run]) -> list:
    """Each run under the sync that created it: a sync applies the run, then finishes (its deployedAt), so the owner
    is the first sync deployed at or after the run's creation (the last one, for a run made later: a self-heal
    after a person deleted it). Returns the runs no sync accounts for (no history)."""
    timed = [s for s in found if jobs_mod.parse_time(s.deployed_at)]
    if not timed:
        return list(runs)
    for run in sorted(runs, key=lambda r: r.obj["metadata"]["creationTimestamp"]):
        created = jobs_mod.parse_time(run.obj["metadata"]["creationTimestamp"])
        owner = next((s for s in timed if jobs_mod.parse_time(s.deployed_at) >= created), timed[-1])
        owner.runs.append(run)
    return []


@dataclass
class ApiEvent:
    """One audit event of the API server (level Metadata): a write, allowed or refused."""
    time: str
    user: str
    impersonated: str
    verb: str
    resource: str
    namespace: str
    name: str
    code: int

    @property
    def refused(self) -> bool:
        """Not allowed (unauthenticated, forbidden); a conflict or an invalid object is a failure, not a refusal."""
        return self.code in (401, 403)

    @property
    def created(self) -> bool:
        return self.code == 201  # create, or a server-side apply (patch) that made the object

    def line(self) -> str:
        """A create names no object at Metadata level (the name is in the body, which the log leaves out)."""
        who = self.user + (f" as {self.impersonated}" if self.impersonated else "")
        outcome = "refused: " if self.refused else ("failed: " if self.code >= 400 else "")
        what = " ".join(part for part in (self.verb, self.resource, self.name) if part)
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.time}  {outcome}{what}{where} by {who} ({self.code})"


def api_events(paths: list[Path]) -> list[ApiEvent]:
    """The writes in API server audit logs (audit.k8s.io/v1 Event, JSON lines; the ResponseComplete stage)."""
    out = []
    for path in paths:
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError as exc:
            raise OpsError(f"cannot read the audit log {path}: {exc.strerror}", EXIT_BAD_INPUT) from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                raise OpsError(f"{path}:{number}: not an audit event (expected one JSON object per line, as "
                               "kube-apiserver --audit-log-format=json writes)", EXIT_BAD_INPUT) from None
            if event.get("kind") != "Event" or event.get("stage") != "ResponseComplete":
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            out.append(ApiEvent(event.get("requestReceivedTimestamp", ""), (event.get("user") or {}).get("username", ""),
                                (event.get("impersonatedUser") or {}).get("username", ""), event.get("verb", ""),
                                resource, ref.get("namespace", ""), ref.get("name", ""),
                                int((event.get("responseStatus") or {}).get("code") or 0)))
    return sorted(out, key=lambda e: e.time)


# the controllers' bookkeeping of an object (its status, a pod's binding to a node): not a change of what it is
BOOKKEEPING = ("status", "binding")
# "creates" that are questions (may I? who am I?), not writes
QUESTIONS = {"selfsubjectreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews", "subjectaccessreviews",
             "localsubjectaccessreviews", "tokenreviews"}


def job_events(events: list[ApiEvent], namespace: str, run_names: list[str], people: set[str]) -> dict:
    """{"objects": the writes to the job's runs and what they own (names the run's name starts), less the
    controllers' status and binding writes; "people": every write the given people asked for themselves}."""
    def of_runs(e: ApiEvent) -> bool:
        return e.namespace == namespace and any(e.name == r or e.name.startswith(f"{r}-") for r in run_names)
    return {"objects": [e for e in events if of_runs(e) and e.resource.partition("/")[2] not in BOOKKEEPING],
            "people": [e for e in events if e.user in people and not of_runs(e) and e.resource not in QUESTIONS]}


def people_actions(clients: Clients, target: Target, app_name: str) -> tuple[list[tuple[str, str]], str]:
    """What people did to the Application through Argo CD's API: argocd-server's Kubernetes Events on it ("<who>
    initiated sync to ...", "<who> deleted resource ray.io/RayJob '...'"), oldest first, and a note when they
    cannot be read. A delete through Argo CD reaches the cluster as Argo CD's own account: this is where the
    person is named. Kubernetes keeps Events about an hour."""
    try:
        listed = clients.core(target.argocd_context).list_namespaced_event(
            target.argocd_namespace, field_selector=f"involvedObject.name={app_name}").items
    except Exception as exc:  # noqa: BLE001 - the rest of the audit stands without them
        return [], f"Argo CD's events on {app_name} could not be read ({getattr(exc, 'reason', None) or exc})"
    out = []
    for event in listed:
        if (getattr(event, "source", None) and event.source.component) != "argocd-server":
            continue
        when = event.last_timestamp or event.event_time or event.first_timestamp
        out.append((when.strftime("%Y-%m-%dT%H:%M:%SZ") if hasattr(when, "strftime") else str(when or ""),
                    event.message or ""))
    return sorted(out), ""


def audit(clients: Clients, target: Target, root: Path, job: str, audit_logs: list[Path] | None = None) -> dict:
    app_name = f"{target.env}-job-{job}"
    # its folder now, and the shared one it had before its environment spanned several clusters (history spans it)
    folders = sorted({target.app_folder(root, f"job-{job}"), f"apps/{target.env}/job-{job}/"})
    custom = clients.custom(target.argocd_context)
    try:
        app = custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", target.argocd_namespace,
                                                  "applications", app_name)
    except Exception as exc:  # noqa: BLE001 - a 404 is a user's mistake: say which jobs there are
        if getattr(exc, "status", None) != 404:
            raise
        known = sorted(target.doc.get("jobs") or {})
        raise OpsError(f"no Application {app_name} in Argo CD (namespace {target.argocd_namespace} on context "
                       f"{target.argocd_context}); jobs of {target.env}: {', '.join(known) or 'none'}",
                       EXIT_BAD_INPUT) from None
    history = commits(root, folders)
    by_sha = {c.sha: c for c in history}
    found = syncs(app)
    for sync in found:
        sync.commit = by_sha.get(sync.revision) or (commit_of(root, sync.revision) if sync.revision else None)
    runs = [jobs_mod.Run(target.env, job, kind, obj["metadata"]["name"], obj)
            for kind, obj in jobs_mod.runs(clients.custom(target.context), target.namespace)
            if jobs_mod.job_of(obj["metadata"]["name"]) == job]
    core = clients.core(target.context)
    for run in runs:
        run.pods = jobs_mod.pods_of(core, target.namespace, run)
    unattributed = join(found, runs)
    actions, actions_note = people_actions(clients, target, app_name)
    result = {"env": target.env, "job": job, "application": app_name, "commits": history, "syncs": found,
              "unattributed": unattributed, "actions": actions, "actions_note": actions_note}
    if audit_logs:
        people = {s.initiator for s in found if s.initiator not in (AUTOMATED, UNKNOWN)}
        events = api_events(audit_logs)
        names = sorted({r.name for r in runs} | set(created_runs(events, job)))
        result["api"] = job_events(events, target.namespace, names, people)
        result["api_people"] = sorted(people)
    return result


def created_runs(events: list[ApiEvent], job: str) -> list[str]:
    """The names of the job's runs the log saw created (deleted ones too)."""
    plurals = {plural for *_, plural in jobs_mod.KINDS}
    return [e.name for e in events if e.created and e.resource in plurals and jobs_mod.job_of(e.name) == job]


def render(result: dict) -> str:
    lines = [f"{result['application']}: who changed job {result['job']} of {result['env']}, and what it did"]
    synced = {s.revision for s in result["syncs"]}
    for commit in reversed(result["commits"]):
        mark = "" if commit.sha in synced else "   (not synced by Argo CD: not on the branch it follows, or superseded)"
        lines.append(f"{commit.time}  commit {commit.sha[:10]} by {commit.author} <{commit.email}>: "
                     f"{commit.subject}{mark}")
        for sync in [s for s in result["syncs"] if s.revision == commit.sha]:
            lines += _sync_lines(sync)
    for sync in [s for s in result["syncs"] if not (s.commit and s.commit.sha in {c.sha for c in result["commits"]})]:
        what = (f"commit {sync.commit.sha[:10]} by {sync.commit.author}: {sync.commit.subject} (another change)"
                if sync.commit else f"revision {sync.revision[:10] or '?'} (not in this clone: git fetch)")
        lines.append(f"{sync.deployed_at}  {what}")
        lines += _sync_lines(sync)
    for run in result["unattributed"]:
        lines.append(f"  run {run.name} ({run.kind}) created {run.obj['metadata']['creationTimestamp']} before "
                     f"every recorded sync: {run.state}")
    if result.get("actions"):
        lines.append("people's actions through Argo CD (argocd-server's events on the Application; Kubernetes keeps "
                     "them about an hour):")
        lines += [f"  {when}  {message}" for when, message in result["actions"]]
    if result.get("actions_note"):
        lines.append(result["actions_note"])
    if "api" in result:
        api = result["api"]
        lines.append(f"the API server's audit log: {len(api['objects'])} write(s) to the job's runs and what they own")
        lines += [f"  {e.line()}" for e in api["objects"]]
        people = ", ".join(result["api_people"]) or "nobody (only automated syncs)"
        lines.append(f"the API server's audit log: {len(api['people'])} other write(s) by who synced it ({people})")
        lines += [f"  {e.line()}" for e in api["people"]]
    return "\n".join(lines)


def _sync_lines(sync: Sync) -> list[str]:
    out = [f"    synced by {sync.initiator} at {sync.deployed_at} (revision {sync.revision[:10]}, {sync.phase})"]
    for run in sync.runs:
        pods = ", ".join(f"{role} {p.metadata.name}" for role, group in run.pods.items() for p in group)
        out.append(f"      run {run.name} ({run.kind}) created {run.obj['metadata']['creationTimestamp']}: "
                   f"{run.state}{'; pods: ' + pods if pods else ''}")
    return out
