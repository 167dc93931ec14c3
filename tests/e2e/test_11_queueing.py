"""Quota and queueing with Kueue (environments/eks.yaml `queueing`), on eks's first cluster: Kueue (built from its
Go module, installed by the Argo CD layer) holds the environment's GPU quota; two jobs are pushed where the quota
fits one. The second waits suspended, its app stays Synced with no new sync operation through three reconciles
(git renders no `suspend`, so self-heal has nothing to undo), Argo CD shows it Progressing "Waiting for quota in
LocalQueue training", `make status` shows its place in the queue and `make diagnose` names the quota and the value
that changes it; it runs when the first ends. Prints the time from the first job's end to the second's admission."""
from __future__ import annotations

import json
import time

import pytest

from tests.e2e.harness import BUDGETS, KUBEFLOW, RAY, wait_for
from tests.e2e.scenarios import RECONCILES, job_name, job_pod_selector, run_ended

ENV = "eks"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
JOBS = ("queue-first", "queue-second")


def _gpu_quota(e2e) -> int:
    return int(e2e.env_doc(ENV)["vars"]["gpuQuota"])


def _runs(e2e) -> dict[str, dict]:
    return {job_name(o): o for o in e2e.objects(ENV, RAY, "rayjobs") if job_name(o) in JOBS}


def _workload_of(e2e, run: dict) -> dict | None:
    uid = run["metadata"]["uid"]
    return next((w for w in e2e.objects(ENV, KUEUE, "workloads")
                 if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences") or [])), None)


def _condition(obj: dict | None, kind: str) -> dict:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def _end_every_other_run(e2e) -> None:
    """The quota is the environment's: runs of the other jobs would share it. End what still runs on this cluster,
    as its pods would (a RayJob's submitter, a PyTorchJob's pods exit 0), and wait until Kueue holds nothing. First
    every job app of this cluster is Synced, so its runs exist: run alone, on a fresh cluster, the scenario would
    otherwise find Kueue holding nothing before the environment's own jobs arrive and take the quota."""
    second = tuple(f"{key}-" for key, c in e2e.clusters.items() if c.get("environment") == ENV and key != ENV)
    jobs = {n for n in e2e.expected_apps(ENV) if n.startswith(f"{ENV}-job-") and not n.startswith(second)}

    def synced():
        apps = {a["metadata"]["name"]: a for a in e2e.apps()}
        missing = [n for n in sorted(jobs) if n not in apps or e2e.app_state(apps[n])[0] != "Synced"]
        return not missing, f"not Synced yet: {missing}"
    wait_for(synced, 600, 5, "eks's job apps to sync their runs")

    def check():
        busy = []
        for kind, gv, plural in (("RayJob", RAY, "rayjobs"), ("PyTorchJob", KUBEFLOW, "pytorchjobs")):
            for obj in e2e.objects(ENV, gv, plural):
                name = obj["metadata"]["name"]
                if not run_ended(kind, obj):
                    busy.append(f"{kind} {name} has not ended")
                for pod in e2e.pods(ENV, job_pod_selector(kind, name)):
                    if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp:
                        e2e.finish_pod(ENV, pod, 0)
        for cq in e2e.custom(ENV).list_cluster_custom_object(*KUEUE, "clusterqueues")["items"]:
            held = (cq.get("status") or {}).get("reservingWorkloads", 0)
            if held:
                busy.append(f"ClusterQueue {cq['metadata']['name']} holds {held} workloads")
        return not busy, "; ".join(busy)
    wait_for(check, 420, 5, "every other run on eks to end (the quota is the environment's)")


@pytest.fixture(scope="module")
def queued(e2e, bootstrapped):
    """Two jobs, each asking for more than half of the GPU quota (1 head + workers, one GPU each), pushed at once."""
    e2e.wait_synced_healthy(ENV, 600, names={f"{ENV}-kueue", f"{ENV}-platform"})
    _end_every_other_run(e2e)
    quota = _gpu_quota(e2e)
    workers = quota // 2  # 1 + quota/2 GPUs each: one fits, two do not
    template = e2e.env_doc(ENV)["jobs"]["digits-torch"]["job"]["spec"]

    def add(doc):
        for job in JOBS:
            spec = json.loads(json.dumps(template))
            spec["name"] = job
            spec["config"]["numWorkers"] = workers
            # on eks's first cluster (pinned: their checkpoints are on its FSx file system; MultiKueue's placement
            # across the clusters is test_12's)
            doc["jobs"][job] = {"pinnedTo": ENV, "cluster": {"workerGroups": {"gpu-g5": {
                "replicas": workers, "minReplicas": workers, "maxReplicas": workers}}},
                "job": {"spec": spec}}
    e2e.edit_environment(f"{ENV}.yaml", add)
    e2e.generator("render", "--env", ENV)
    e2e.push(f"e2e: {', '.join(JOBS)}, {1 + workers} GPUs each, quota {quota}")

    def check():
        runs = _runs(e2e)
        if set(runs) != set(JOBS):
            return False, f"RayJobs so far: {sorted(runs)}"
        workloads = {job: _workload_of(e2e, run) for job, run in runs.items()}
        admitted = [j for j, w in workloads.items() if _condition(w, "Admitted").get("status") == "True"]
        waiting = [j for j, w in workloads.items() if w and _condition(w, "QuotaReserved").get("status") == "False"]
        if len(admitted) == 1 and len(waiting) == 1:
            return True, (admitted[0], waiting[0])
        return False, {j: (runs[j]["spec"].get("suspend"), _condition(w, "QuotaReserved").get("message"),
                           _condition(w, "Admitted").get("status")) for j, w in workloads.items()}
    first, second = wait_for(check, 300, 5, "Kueue to admit one job and hold the other")
    yield {"first": first, "second": second, "workers": workers, "quota": quota}
    e2e.edit_environment(f"{ENV}.yaml", lambda doc: [doc["jobs"].pop(job, None) for job in JOBS])
    e2e.generator("render", "--env", ENV)
    e2e.push(f"e2e: remove {', '.join(JOBS)}")
    wait_for(lambda: (not _runs(e2e), sorted(_runs(e2e))), 300, 5, "the queued jobs to be pruned")


def test_the_second_job_waits_suspended_with_no_pods_while_the_first_runs(e2e, queued):
    runs = _runs(e2e)
    first, second = runs[queued["first"]], runs[queued["second"]]
    assert first["spec"].get("suspend") is not True, first["spec"].get("suspend")
    assert second["spec"].get("suspend") is True, "Kueue holds a job it has not admitted suspended"
    rendered = [d for d in e2e.rendered(ENV, f"job-{queued['second']}") if d["kind"] == "RayJob"][0]
    assert "suspend" not in rendered["spec"], "git renders no suspend for a queued job: Kueue owns it"
    assert rendered["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    workload = _workload_of(e2e, second)
    assert _condition(workload, "QuotaReserved").get("status") == "False", workload.get("status")
    # Kueue's condition holds the last attempt's reason, which may be only the system flavor's "doesn't match node
    # affinity" (an attempt starts after the flavor tried last); its Pending events keep every attempt's reasons
    reasons = [_condition(workload, "QuotaReserved").get("message", "")] + [
        e.message or "" for e in e2e.core(ENV).list_namespaced_event(
            e2e.namespace(ENV), field_selector=f"involvedObject.kind=Workload,"
                                               f"involvedObject.name={workload['metadata']['name']}").items]
    assert any("insufficient unused quota" in r and "in flavor g5-8xlarge" in r for r in reasons), reasons
    assert not [c for c in e2e.objects(ENV, RAY, "rayclusters")
                if (c["metadata"].get("labels") or {}).get("ray.io/originated-from-cr-name")
                == second["metadata"]["name"]], "a job Kueue has not admitted has no Ray cluster"


def test_argocd_shows_the_waiting_job_progressing_for_quota_and_keeps_it_synced(e2e, queued):
    """Three reconciles: the waiting job's app stays Synced, with no new sync operation, and the job stays
    suspended (self-heal does not un-suspend it)."""
    name = f"{ENV}-job-{queued['second']}"

    def app():
        return e2e.app(name)
    wait_for(lambda: (e2e.app_state(app()) == ("Synced", "Progressing"), e2e.describe(app())), 120, 5,
             f"{name} Synced and Progressing")
    health = (app()["status"].get("health") or {}).get("message") or ""
    resources = [r for r in app()["status"].get("resources") or [] if r.get("kind") == "RayJob"]
    message = (resources[0].get("health") or {}).get("message", "") if resources else health
    assert "Waiting for quota in LocalQueue training" in message, (message, health)
    start = app()
    history, op = len(start["status"].get("history") or []), (start["status"].get("operationState") or {})
    reconciled = {start["status"].get("reconciledAt")}
    for _ in range(RECONCILES):  # each reconcile is where self-heal would put back a `suspend` git lacks
        e2e.reconcile(name)
        time.sleep(3)  # what a sync it started would have done by now
        now = app()
        assert e2e.app_state(now)[0] == "Synced", e2e.describe(now)
        assert len(now["status"].get("history") or []) == history, "a new sync of the waiting job's app"
        assert (now["status"].get("operationState") or {}).get("startedAt") == op.get("startedAt"), \
            "a new sync operation on the waiting job's app"
        assert _runs(e2e)[queued["second"]]["spec"].get("suspend") is True, "the waiting job was un-suspended"
        reconciled.add(now["status"].get("reconciledAt"))
    assert len(reconciled) >= RECONCILES, f"only {len(reconciled)} reconciles seen: {sorted(reconciled)}"


def test_status_shows_the_queue_and_diagnose_names_the_quota(e2e, queued):
    status = e2e.ops("status", "--env", ENV, "--json")  # exit 1 while another job of eks has failed: not this
    assert status.stdout.strip(), status.stderr
    jobs = {j["job"]: j for j in json.loads(status.stdout)["environments"][0]["jobs"]}
    waiting = jobs[queued["second"]]
    assert waiting["queue"]["admitted"] is False and waiting["queue"]["position"] >= 1, waiting
    assert jobs[queued["first"]]["queue"]["admitted"] is True, jobs[queued["first"]]
    text = e2e.ops("status", "--env", ENV)
    assert "waiting for quota" in text.stdout, text.stdout
    diagnosis = e2e.ops("diagnose", "--env", ENV, "--job", queued["second"])
    out = diagnosis.stdout + diagnosis.stderr
    # the g5 resource Kueue found short (cpu, memory or nvidia.com/gpu: each is vars.gpuQuota times a pod's share)
    assert "not-admitted-quota" in out and "flavor g5-8xlarge" in out, out
    assert "environments/eks.yaml" in out and "vars.gpuQuota" in out, out


def _run_to_its_end(e2e, job: str, timeout: float) -> float:
    """End the job's run as its submitter would (exit 0) once it runs, and wait until KubeRay says Complete.
    Returns when that was first seen (time.monotonic())."""
    def check():
        run = _runs(e2e)[job]
        if (run.get("status") or {}).get("jobDeploymentStatus") == "Complete":
            return True, time.monotonic()
        for pod in e2e.pods(ENV, job_pod_selector("RayJob", run["metadata"]["name"])):
            if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp:
                e2e.finish_pod(ENV, pod, 0)
        return False, (run.get("status") or {}).get("jobDeploymentStatus")
    return wait_for(check, timeout, 3, f"{job} to run and end")


def test_the_second_job_runs_when_the_first_ends(e2e, queued):
    ended_at = _run_to_its_end(e2e, queued["first"], 300)

    def admitted():
        run = _runs(e2e)[queued["second"]]
        ok = _condition(_workload_of(e2e, run), "Admitted").get("status") == "True" and run["spec"].get("suspend") \
            is not True
        return ok, (run["spec"].get("suspend"), (run.get("status") or {}).get("jobDeploymentStatus"))
    wait_for(admitted, 240, 2, f"{queued['second']} to be admitted once {queued['first']} ended")
    BUDGETS["queued job admitted after the first ended (s)"] = round(time.monotonic() - ended_at, 1)
    _run_to_its_end(e2e, queued["second"], 300)
    e2e.wait_synced_healthy(ENV, 240, names={f"{ENV}-job-{job}" for job in JOBS})
