"""Jobs finish and stay finished: end the pods of each RayJob's submitter and of each PyTorchJob as a kubelet would
report them (kwok stages); the operators move the jobs to their final state, Argo CD shows them Healthy (or
Degraded for a failure, with the operator's message), and nothing is recreated or re-run by self-heal afterwards.

The one job made to fail is eks's cifar10-torch (its submitter exits 1 on every attempt). A PyTorchJob rendered
with runPolicy.ttlSecondsAfterFinished is first given a TTL of 30 s through git (a change a user could make), so
that the quiet window after (tests/e2e/scenarios.py) outlasts it: what the TTL does after it expires is what this
guards."""
from __future__ import annotations

import pytest

from tests.e2e.harness import wait_for
from tests.e2e.scenarios import ENVS, FAILING, job_name, status_text


@pytest.mark.parametrize("env", ENVS)
def test_rayjobs_end_as_their_submitters_did(e2e, finished, env):
    jobs, errors = finished
    assert not [e for e in errors if f" {env}/" in e], errors
    rayjobs = {name: obj for (e, kind, name), obj in jobs.items() if e == env and kind == "RayJob"}
    assert rayjobs, f"no RayJob finished in {env}"
    for obj in rayjobs.values():
        status = obj["status"]
        if (env, job_name(obj)) in FAILING:
            assert status["jobDeploymentStatus"] == "Failed", status_text(obj)
            assert status.get("reason") and status.get("message"), status_text(obj)
        else:
            assert (status["jobDeploymentStatus"], status.get("jobStatus")) == ("Complete", "SUCCEEDED"), \
                status_text(obj)


@pytest.mark.parametrize("env", ENVS)
def test_job_applications_show_the_outcome(e2e, finished, env):
    """Argo CD (our Lua, in its gopher-lua) shows a succeeded job Healthy and a failed one Degraded with the
    operator's reason."""
    jobs, _errors = finished

    def check():
        problems = []
        apps = {a["metadata"]["name"]: a for a in e2e.env_apps(env)}
        for (e, _kind, name), obj in jobs.items():
            if e != env:
                continue
            app = apps.get(f"{env}-job-{job_name(obj)}")
            if app is None:
                problems.append(f"no Application for {name}")
                continue
            sync, health = e2e.app_state(app)
            want = "Degraded" if (env, job_name(obj)) in FAILING else "Healthy"
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


def test_finished_jobs_stay_finished(e2e, finished, quiet):
    """For the quiet window after they ended (several Argo CD reconciles, past a shortened TTL): the same objects,
    no new pods; no Application syncs again (test_04 reads the same window)."""
    jobs, _errors = finished
    assert jobs, "no job finished"
    problems = quiet.jobs + [p for env_problems in quiet.apps.values() for p in env_problems
                             if "new sync operation" in p]
    assert not problems, "\n".join(problems)
