"""Change flows through: `make bump-image TAG=...` in a checkout, commit, push. The standing RayCluster's pods are
recreated with the new image and it returns to Healthy; every changed job becomes a new RayJob / PyTorchJob (a new
run), the old one is pruned, and the job's Application finishes its sync without waiting for the training to
end."""
from __future__ import annotations

import pytest

from e2e import nodes
from tests.e2e.harness import KUBEFLOW, RAY, wait_for

ENVS = nodes.environments()
NEW_TAG = "0.1.1"
JOB_KINDS = (("RayJob", RAY, "rayjobs"), ("PyTorchJob", KUBEFLOW, "pytorchjobs"))


def _jobs(e2e, env) -> dict[str, dict]:
    out = {}
    for kind, gv, plural in JOB_KINDS:
        for obj in e2e.objects(env, gv, plural):
            out[obj["metadata"]["name"]] = {"kind": kind, "obj": obj}
    return out


def _cluster_pods(e2e, env, cluster_name):
    return [p for p in e2e.pods(env, f"ray.io/cluster={cluster_name}") if not p.metadata.deletion_timestamp]


def _images(pod) -> set[str]:
    return {c.image for c in pod.spec.containers}


def _rendered_runs(e2e, env) -> set[str]:
    """The job resources (RayJob / PyTorchJob names: <job>-<hash>) the checkout renders for an environment."""
    return {doc["metadata"]["name"] for app in e2e.app_names(env) if app.startswith("job-")
            for doc in e2e.rendered(env, app) if doc["kind"] in ("RayJob", "PyTorchJob")}


@pytest.fixture(scope="module")
def bumped(e2e, bootstrapped):
    """Before: the standing clusters' pods, the jobs, the rendered runs; then bump-image, commit, push. A job whose
    rendered output changed (it runs the training image) must become a new run; one that did not (the torchrun
    job has its own image) must stay as it is."""
    before = {}
    for env in ENVS:
        e2e.wait_synced_healthy(env, 420, names={f"{env}-ray-cluster"})
        name = e2e.env_doc(env)["rayCluster"]["name"]
        before[env] = {"cluster": name,
                       "pods": {p.metadata.uid for p in _cluster_pods(e2e, env, name)},
                       "jobs": _jobs(e2e, env), "rendered": _rendered_runs(e2e, env)}
    old_images = {env: _expected_image(e2e, env) for env in ENVS}
    out = e2e.generator("bump-image", "--tag", NEW_TAG)
    for env in ENVS:
        before[env]["changed"] = before[env]["rendered"] - _rendered_runs(e2e, env)
        if e2e.real(env):  # the image rebuilt under the new tag and loaded into the node, as a user would
            e2e.load_image(env, old_images[env], _expected_image(e2e, env))
    e2e.push(f"e2e: make bump-image TAG={NEW_TAG}")
    return before, out


def _expected_image(e2e, env) -> str:
    image = e2e.env_doc(env)["cluster"]["image"]
    return f"{image['repository']}:{image['tag']}"


@pytest.mark.parametrize("env", ENVS)
def test_standing_cluster_pods_are_recreated_with_the_new_image(e2e, bumped, env):
    before, _ = bumped
    name = before[env]["cluster"]
    image = _expected_image(e2e, env)
    assert image.endswith(NEW_TAG) or NEW_TAG in image, f"bump-image did not set {NEW_TAG}: {image}"

    def check():
        pods = _cluster_pods(e2e, env, name)
        stale = [p.metadata.name for p in pods if image not in _images(p) or p.metadata.uid in before[env]["pods"]]
        app = next(a for a in e2e.env_apps(env) if a["metadata"]["name"] == f"{env}-ray-cluster")
        ok = pods and not stale and e2e.synced_healthy(app)
        return ok, f"pods still on the old image or not recreated: {stale}; {e2e.describe(app)}"
    wait_for(check, 300, 5, f"{env}'s standing RayCluster did not roll to {image}")


@pytest.mark.parametrize("env", ENVS)
def test_a_changed_job_is_a_new_run_and_the_old_one_is_pruned(e2e, bumped, env):
    before, _ = bumped
    old, changed = before[env]["jobs"], before[env]["changed"]
    assert changed, f"bump-image changed no job of {env}"

    def check():
        now = _jobs(e2e, env)
        problems = []
        still = sorted(set(changed) & set(now))
        if still:
            problems.append(f"old runs not pruned: {still}")
        for name in changed:
            stem = name.rsplit("-", 1)[0]
            new = [n for n in now if n.rsplit("-", 1)[0] == stem and n not in old]
            if len(new) != 1:
                problems.append(f"{stem}: new runs {new}")
        for name in set(old) - changed:  # unchanged: the same object, no new run
            if name not in now or now[name]["obj"]["metadata"]["uid"] != old[name]["obj"]["metadata"]["uid"]:
                problems.append(f"{name} did not change but was replaced")
        return not problems, "; ".join(problems)
    wait_for(check, 300, 5, f"{env}'s changed jobs did not become new runs")


@pytest.mark.parametrize("env", ENVS)
def test_job_applications_finish_syncing_while_the_new_run_trains(e2e, bumped, env):
    """The sync operation of a job's Application ends (Succeeded) while its job is still running: the app does
    not stay 'Syncing' for the length of a training run, and a failing job cannot burn the sync retries."""
    before, _ = bumped

    def check():
        problems = []
        jobs = _jobs(e2e, env)
        changed_stems = {n.rsplit("-", 1)[0] for n in before[env]["changed"]}
        for app in e2e.env_apps(env):
            if "-job-" not in app["metadata"]["name"]:
                continue
            stem = app["metadata"]["name"].split("-job-", 1)[1]
            if stem not in changed_stems:
                continue
            running = [j for n, j in jobs.items() if n.rsplit("-", 1)[0] == stem and n not in before[env]["jobs"]
                       and not _finished(j)]
            op = (app.get("status") or {}).get("operationState") or {}
            synced_to_new = app["status"].get("sync", {}).get("status") == "Synced"
            if not running:
                problems.append(f"{app['metadata']['name']}: no new run is running (yet)")
            elif op.get("phase") != "Succeeded" or not synced_to_new:
                problems.append(f"{app['metadata']['name']}: operation {op.get('phase')} "
                                f"({op.get('message', '')[:160]}), sync {app['status'].get('sync', {}).get('status')}")
        return not problems, "; ".join(problems)
    wait_for(check, 300, 5, f"{env}'s job Applications kept syncing while their job ran")


def _finished(job: dict) -> bool:
    status = job["obj"].get("status") or {}
    if job["kind"] == "RayJob":
        return status.get("jobDeploymentStatus") in ("Complete", "Failed")
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in status.get("conditions") or [])


@pytest.mark.parametrize("env", ENVS)
def test_the_new_runs_finish_and_every_app_ends_synced_and_healthy(e2e, bumped, env):
    """The new runs end as their pods do (a submitter or every PyTorchJob pod exits 0); then every Application
    of the environment is Synced and Healthy."""
    before, _ = bumped

    def check():
        waiting = []
        for name, job in _jobs(e2e, env).items():
            if name in before[env]["jobs"] or _finished(job):
                continue
            waiting.append(name)
            selector = (f"training.kubeflow.org/job-name={name}" if job["kind"] == "PyTorchJob"
                        else f"batch.kubernetes.io/job-name={name}")
            for pod in e2e.pods(env, selector):
                if pod.status.phase == "Running":
                    e2e.finish_pod(env, pod, 0)
        return not waiting, f"runs not finished yet: {waiting}"
    wait_for(check, 360, 5, f"{env}'s new runs did not finish")
    e2e.wait_synced_healthy(env, 300)
