"""Jobs finish and stay finished: end the pods of each RayJob's submitter and of each PyTorchJob as a kubelet would
report them (kwok stages); the operators move the jobs to their final state, Argo CD shows them Healthy (or
Degraded for a failure, with the operator's message), and nothing is recreated or re-run by self-heal afterwards.

The one job made to fail is eks's cifar10-torch (its submitter exits 1 on every attempt). A PyTorchJob rendered
with runPolicy.ttlSecondsAfterFinished is first given a TTL of 30 s through git (a change a user could make), so
that the watch below outlasts it: what the TTL does after it expires is what this guards."""
from __future__ import annotations

import time

import pytest

from e2e import nodes
from tests.e2e.harness import KUBEFLOW, RAY, wait_for

ENVS = nodes.environments()
FAILING = {("eks", "cifar10-torch")}
WATCH_SECONDS = 120
SHORT_TTL = 30


def _job_name(obj: dict) -> str:
    """The job's name in the environment file (RayJobs and PyTorchJobs are named <job>-<hash>)."""
    return obj["metadata"]["name"].rsplit("-", 1)[0]


def _submitter_pods(e2e, env, rayjob):
    return [p for p in e2e.pods(env, f"batch.kubernetes.io/job-name={rayjob['metadata']['name']}")
            if not p.metadata.deletion_timestamp]


def _rayjob(e2e, env, name):
    group, version = RAY
    return e2e.custom(env).get_namespaced_custom_object(group, version, e2e.namespace(env), "rayjobs", name)


def _status(obj):
    status = obj.get("status") or {}
    return f"{status.get('jobDeploymentStatus')}/{status.get('jobStatus')} {status.get('reason', '')} " \
           f"{status.get('message', '')[:200]}"


def _shorten_pytorchjob_ttl(e2e) -> None:
    """Give every PyTorchJob that the operator would delete after a TTL a 30 s TTL, through git."""
    changed = []
    for env in ENVS:
        for job in e2e.objects(env, KUBEFLOW, "pytorchjobs"):
            if (job["spec"].get("runPolicy") or {}).get("ttlSecondsAfterFinished") is not None:
                changed.append((env, _job_name(job)))
    if not changed:
        return
    for env, job in changed:
        e2e.edit_environment(f"{env}.yaml", lambda d, j=job: d["jobs"][j]["job"].__setitem__(
            "ttlSecondsAfterFinished", SHORT_TTL))
    e2e.generator("render")
    e2e.push(f"e2e: TTL {SHORT_TTL} s for {', '.join(j for _, j in changed)}")
    for env, job in changed:
        def check(env=env, job=job):
            jobs = [j for j in e2e.objects(env, KUBEFLOW, "pytorchjobs") if _job_name(j) == job]
            ttls = [(j["spec"].get("runPolicy") or {}).get("ttlSecondsAfterFinished") for j in jobs]
            return ttls == [SHORT_TTL], f"{job}: PyTorchJobs with TTLs {ttls}"
        wait_for(check, 240, 5, "the shorter TTL did not reach the cluster")


def _finish_rayjob(e2e, env, rayjob) -> dict:
    name = rayjob["metadata"]["name"]
    fail = (env, _job_name(rayjob)) in FAILING

    def check():
        current = _rayjob(e2e, env, name)
        state = (current.get("status") or {}).get("jobDeploymentStatus")
        if state in ("Complete", "Failed"):
            return True, current
        for pod in _submitter_pods(e2e, env, current):
            if pod.status.phase == "Running":
                e2e.finish_pod(env, pod, 1 if fail else 0, reason="Error" if fail else "",
                               message="training crashed (e2e)" if fail else "")
        return False, f"RayJob {name}: {_status(current)}; submitter pods " \
                      f"{[(p.metadata.name, p.status.phase) for p in _submitter_pods(e2e, env, current)]}"
    return wait_for(check, 360, 3, f"RayJob {env}/{name} did not finish")


def _finish_pytorchjob(e2e, env, job) -> dict:
    name = job["metadata"]["name"]
    group, version = KUBEFLOW

    def check():
        current = e2e.custom(env).get_namespaced_custom_object(group, version, e2e.namespace(env), "pytorchjobs",
                                                               name)
        conditions = {c["type"]: c for c in (current.get("status") or {}).get("conditions") or []}
        if conditions.get("Succeeded", {}).get("status") == "True":
            return True, current
        pods = e2e.pods(env, f"training.kubeflow.org/job-name={name}")
        for pod in pods:
            if pod.status.phase == "Running":
                e2e.finish_pod(env, pod, 0)
        return False, f"PyTorchJob {name} conditions {sorted(conditions)}; pods " \
                      f"{[(p.metadata.name, p.status.phase) for p in pods]}"
    return wait_for(check, 360, 3, f"PyTorchJob {env}/{name} did not succeed")


@pytest.fixture(scope="module")
def finished(e2e, bootstrapped):
    """Every job of every environment ended once; returns {(env, kind, name): object at the end}."""
    _shorten_pytorchjob_ttl(e2e)
    out, errors = {}, []
    for env in ENVS:
        for rayjob in e2e.objects(env, RAY, "rayjobs"):
            try:
                out[(env, "RayJob", rayjob["metadata"]["name"])] = _finish_rayjob(e2e, env, rayjob)
            except AssertionError as exc:
                errors.append(str(exc))
        for job in e2e.objects(env, KUBEFLOW, "pytorchjobs"):
            try:
                out[(env, "PyTorchJob", job["metadata"]["name"])] = _finish_pytorchjob(e2e, env, job)
            except AssertionError as exc:
                errors.append(str(exc))
    return out, errors, time.monotonic()


@pytest.mark.parametrize("env", ENVS)
def test_rayjobs_end_as_their_submitters_did(e2e, finished, env):
    jobs, errors, _ = finished
    assert not [e for e in errors if f" {env}/" in e], errors
    rayjobs = {name: obj for (e, kind, name), obj in jobs.items() if e == env and kind == "RayJob"}
    assert rayjobs, f"no RayJob finished in {env}"
    for name, obj in rayjobs.items():
        status = obj["status"]
        if (env, _job_name(obj)) in FAILING:
            assert status["jobDeploymentStatus"] == "Failed", _status(obj)
            assert status.get("reason") and status.get("message"), _status(obj)
        else:
            assert (status["jobDeploymentStatus"], status.get("jobStatus")) == ("Complete", "SUCCEEDED"), \
                _status(obj)


@pytest.mark.parametrize("env", ENVS)
def test_job_applications_show_the_outcome(e2e, finished, env):
    """Argo CD (our Lua, in its gopher-lua) shows a succeeded job Healthy and a failed one Degraded with the
    operator's reason."""
    jobs, _errors, _ = finished

    def check():
        problems = []
        apps = {a["metadata"]["name"]: a for a in e2e.env_apps(env)}
        for (e, kind, name), obj in jobs.items():
            if e != env:
                continue
            app = apps.get(f"{env}-job-{_job_name(obj)}")
            if app is None:
                problems.append(f"no Application for {name}")
                continue
            sync, health = e2e.app_state(app)
            want = "Degraded" if (env, _job_name(obj)) in FAILING else "Healthy"
            if (sync, health) != ("Synced", want):
                problems.append(f"{e2e.describe(app)} (want Synced/{want})")
            elif want == "Degraded":
                message = (app["status"]["health"].get("message") or "") + " ".join(
                    (r.get("health") or {}).get("message", "") for r in app["status"].get("resources") or [])
                if obj["status"].get("reason", "") not in message:
                    problems.append(f"{app['metadata']['name']}: health message {message!r} does not carry "
                                    f"KubeRay's reason {obj['status'].get('reason')}")
        return not problems, "; ".join(problems)
    wait_for(check, 180, 5, f"the {env} job applications did not show the jobs' outcome")


def _job_pod_uids(e2e, env, kind, name) -> set[str]:
    selector = (f"training.kubeflow.org/job-name={name}" if kind == "PyTorchJob"
                else f"batch.kubernetes.io/job-name={name}")
    return {p.metadata.uid for p in e2e.pods(env, selector)}


def test_finished_jobs_stay_finished(e2e, finished):
    """For a few minutes of controller time after they ended (several Argo CD reconciles, past a shortened TTL):
    the same objects, no new pods, no new sync operations."""
    jobs, _errors, ended_at = finished
    assert jobs, "no job finished"
    snapshot = {key: (obj["metadata"]["uid"], _job_pod_uids(e2e, key[0], key[1], key[2])) for key, obj in jobs.items()}
    history = {a["metadata"]["name"]: len((a.get("status") or {}).get("history") or []) for a in e2e.apps()}
    problems = []
    while time.monotonic() < ended_at + WATCH_SECONDS and not problems:
        time.sleep(10)
        for (env, kind, name), (uid, pod_uids) in snapshot.items():
            plural = "rayjobs" if kind == "RayJob" else "pytorchjobs"
            current = [o for o in e2e.objects(env, RAY if kind == "RayJob" else KUBEFLOW, plural)
                       if o["metadata"]["name"] == name]
            if not current:
                problems.append(f"{kind} {env}/{name} was deleted")
            elif current[0]["metadata"]["uid"] != uid:
                problems.append(f"{kind} {env}/{name} was recreated (a new run)")
            new_pods = _job_pod_uids(e2e, env, kind, name) - pod_uids
            if new_pods:
                problems.append(f"{kind} {env}/{name} started {len(new_pods)} new pod(s): it runs again")
    for app in e2e.apps():
        before = history.get(app["metadata"]["name"])
        after = len((app.get("status") or {}).get("history") or [])
        if before is not None and after != before:
            problems.append(f"{app['metadata']['name']} synced again ({before} -> {after} sync operations)")
    assert not problems, "\n".join(problems)
