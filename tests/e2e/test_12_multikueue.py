"""Jobs placed across clusters by MultiKueue (environments/eks.yaml `queueing.multiKueue`: hub holds the jobs, eks
and west-b run them; docs/multikueue.md), on the e2e's three eks control planes with Kueue built from its module:

1. `make bootstrap` made hub's kubeconfig Secrets out of git (a token of each worker's own ServiceAccount, the CA
   inline) and hub reaches both workers (MultiKueueClusters Active); hub's ClusterQueue holds the workers' summed
   quota, as rendered.
2. eks's GPUs filled by a long job pinned there; a second job, pushed without a pin, lands on west-b: its Workload on
   hub names west-b, the RayJob copy runs there (and not on eks), hub's RayJob shows the worker's status, its app
   ends Synced and Healthy, and the worker's copy is cleaned up once it finished.
3. west-b loses the Ray auth Secret every RayJob reads: its API server refuses a RayJob's Workload (the
   ValidatingAdmissionPolicy the platform renders on each worker, one binding per such Secret), so a job pushed while
   eks is full waits with hub's quota reserved and no copy anywhere, and `make fleet` says no job is placed there;
   the Secret back, MultiKueue's retry places it on west-b, where it completes.
4. west-b stopped (its API server, then its controllers, kwok and operators): a third job waits (eks is full, west-b
   gone), and is placed on eks when the long job ends. Pruned from git while it runs there, its remote copy goes.
   west-b back (its API server first, then the rest): hub reaches it again and every app is Synced and Healthy.

Prints the time from the push of a job to its RayJob running on a worker.
"""
from __future__ import annotations

import base64
import json
import time

import pytest

from e2e.kube import KubectlError
from tests.e2e.harness import BUDGETS, RAY, wait_for
from tests.e2e.scenarios import job_name, job_pod_selector
from tests.e2e.test_11_queueing import _end_every_other_run
from tests.support import load_yaml

ENV, WEST, HUB = "eks", "eks-west-b", "eks-hub"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
FILL, PLACED, GATED, WAITING = "mk-fill", "mk-placed", "mk-gated", "mk-waiting"
CLUSTER_NAME = {ENV: "eks", WEST: "west-b"}


def _runs(e2e, key: str, job: str) -> list[dict]:
    return [o for o in e2e.objects(key, RAY, "rayjobs", namespace=e2e.namespace(ENV)) if job_name(o) == job]


def _run(e2e, key: str, job: str) -> dict | None:
    runs = _runs(e2e, key, job)
    return runs[0] if runs else None


def _workload(e2e, key: str, run: dict | None) -> dict | None:
    if run is None:
        return None
    uid = run["metadata"]["uid"]
    return next((w for w in e2e.objects(key, KUEUE, "workloads", namespace=e2e.namespace(ENV))
                 if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences") or [])), None)


def _condition(obj: dict | None, kind: str) -> dict:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def _job(template: dict, name: str, workers: int, pinned: str | None) -> dict:
    spec = json.loads(json.dumps(template))
    spec["name"] = name
    spec["config"]["numWorkers"] = workers
    job = {"cluster": {"workerGroups": {"gpu-g5": {"replicas": workers, "minReplicas": workers,
                                                    "maxReplicas": workers}}},
           "job": {"spec": spec}}
    if pinned:
        job["pinnedTo"] = pinned
    else:  # placed on any worker: its checkpoints may not be one cluster's FSx (none for this one)
        job["cluster"]["checkpoints"] = {"enabled": False}
    return job


def _push_jobs(e2e, jobs: dict, message: str) -> float:
    def edit(doc):
        for name, job in jobs.items():
            if job is None:
                doc["jobs"].pop(name, None)
            else:
                doc["jobs"][name] = job
    e2e.edit_environment(f"{ENV}.yaml", edit)
    e2e.generator("render", "--env", ENV)
    e2e.push(message)
    return time.monotonic()


def _end_run(e2e, key: str, job: str, timeout: float) -> None:
    """End the job's run on `key` as its submitter would (exit 0), and wait until KubeRay says Complete."""
    def check():
        run = _run(e2e, key, job)
        if run is None:
            return False, "no RayJob"
        if (run.get("status") or {}).get("jobDeploymentStatus") == "Complete":
            return True, None
        for pod in e2e.pods(key, job_pod_selector("RayJob", run["metadata"]["name"])):
            if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp:
                e2e.finish_pod(key, pod, 0)
        return False, (run.get("status") or {}).get("jobDeploymentStatus")
    wait_for(check, timeout, 3, f"{job} to run and end on {key}")


def _clusters_active(e2e) -> tuple[bool, dict]:
    found = {c["metadata"]["name"]: _condition(c, "Active") for c in
             e2e.custom(HUB).list_cluster_custom_object(*KUEUE, "multikueueclusters")["items"]}
    return (set(found) == set(CLUSTER_NAME.values()) and all(c.get("status") == "True" for c in found.values()),
            {k: (c.get("status"), c.get("reason"), c.get("message")) for k, c in found.items()})


@pytest.fixture(scope="module")
def hub(e2e, bootstrapped):
    e2e.wait_synced_healthy(ENV, 600, names={f"{HUB}-kueue", f"{HUB}-platform"})
    wait_for(lambda: _clusters_active(e2e), 300, 5, "hub's MultiKueueClusters to be Active")
    return e2e.env_doc(ENV)


def test_bootstrap_made_the_kubeconfig_secrets_out_of_git_and_hub_reaches_the_workers(e2e, hub):
    for cluster in CLUSTER_NAME.values():
        secret = e2e.core(HUB).read_namespaced_secret(f"multikueue-{cluster}", "kueue-system")
        config = load_yaml(base64.b64decode(secret.data["kubeconfig"]))
        server = config["clusters"][0]["cluster"]
        key = next(k for k, v in CLUSTER_NAME.items() if v == cluster)
        assert server["server"] == e2e.clusters[key]["server"], (cluster, server["server"])
        assert server.get("certificate-authority-data") and "certificate-authority" not in server
        user = config["users"][0]["user"]
        assert set(user) == {"token"}, "a token inline, no file, no exec plugin (Kueue refuses those)"
        # the token is the worker's own ServiceAccount's, allowed exactly what MultiKueue does there
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": user["token"]}}
        out = json.loads(e2e.kubectl(key, "create", "-o", "json", "-f", "-", stdin=json.dumps(review)))
        assert out["status"]["user"]["username"] == f"system:serviceaccount:{e2e.namespace(ENV)}:multikueue", out
        assert "ray-gitops/environment" in (secret.metadata.labels or {}), "named as bootstrap's, for a person"
    # nothing in git holds them: the rendered hub platform names the Secrets only
    assert not [d for d in e2e.rendered(HUB, "platform") if d["kind"] == "Secret"]


def test_hubs_cluster_queue_holds_the_workers_summed_quota_as_rendered(e2e, hub):
    rendered = next(d for d in e2e.rendered(HUB, "platform") if d["kind"] == "ClusterQueue")
    live = e2e.custom(HUB).get_cluster_custom_object(*KUEUE, "clusterqueues", rendered["metadata"]["name"])
    gpus = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}
            for f in live["spec"]["resourceGroups"][0]["flavors"]}
    assert gpus["g5-8xlarge"]["nvidia.com/gpu"] == str(2 * int(hub["vars"]["gpuQuota"])), gpus
    assert live["spec"]["admissionChecksStrategy"]["admissionChecks"] == [{"name": "multikueue"}]
    assert _condition(live, "Active").get("status") == "True", live.get("status")


@pytest.fixture(scope="module")
def placed(e2e, hub):
    """eks's GPUs filled by FILL (pinned to eks, more than half its quota), then PLACED pushed without a pin."""
    _end_every_other_run(e2e)
    quota = int(hub["vars"]["gpuQuota"])
    workers = quota // 2  # 1 + quota/2 GPUs: one such job fits a worker, two do not
    template = hub["jobs"]["digits-torch"]["job"]["spec"]
    _push_jobs(e2e, {FILL: _job(template, FILL, workers, ENV)}, f"e2e: {FILL}, pinned to eks, fills its GPUs")

    def filling():
        run = _run(e2e, ENV, FILL)
        ok = _condition(_workload(e2e, ENV, run), "Admitted").get("status") == "True"
        return ok, (run or {}).get("status")
    wait_for(filling, 300, 5, f"{FILL} admitted on eks")
    pushed = _push_jobs(e2e, {PLACED: _job(template, PLACED, workers, None)}, f"e2e: {PLACED}, placed by MultiKueue")

    def landed():
        copy = _run(e2e, WEST, PLACED)
        wl = _workload(e2e, HUB, _run(e2e, HUB, PLACED))
        where = ((wl or {}).get("status") or {}).get("clusterName")
        ok = copy is not None and where == "west-b"
        return ok, {"hub workload cluster": where, "west-b copy": bool(copy),
                    "checks": ((wl or {}).get("status") or {}).get("admissionChecks")}
    wait_for(landed, 300, 3, f"{PLACED} placed on west-b")
    BUDGETS["multikueue: push to the RayJob on a worker (s)"] = round(time.monotonic() - pushed, 1)
    return {"workers": workers, "template": template}


def test_a_job_lands_on_the_worker_with_room_and_not_on_the_full_one(e2e, placed):
    hub_run = _run(e2e, HUB, PLACED)
    assert hub_run["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue", "rendered in git, not defaulted"
    wl = _workload(e2e, HUB, hub_run)
    check = next(c for c in wl["status"]["admissionChecks"] if c["name"] == "multikueue")
    assert check["state"] == "Ready" and "west-b" in check["message"], check
    # eks is full (FILL): its copy, if MultiKueue made one while it looked, is gone once west-b reserved
    wait_for(lambda: (_run(e2e, ENV, PLACED) is None, "eks still has a copy"), 120, 3, "eks's copy of the job to go")
    # hub runs no Ray: its KubeRay leaves a dispatched RayJob alone (no RayCluster for it there)
    assert not [c for c in e2e.objects(HUB, RAY, "rayclusters", namespace=e2e.namespace(ENV))
                if (c["metadata"].get("labels") or {}).get("ray.io/originated-from-cr-name")
                == hub_run["metadata"]["name"]]


def test_hub_shows_the_workers_status_its_app_ends_healthy_and_the_copy_is_cleaned_up(e2e, placed):
    # west-b's job pods end by themselves (e2e/kwok_stages.py: a second cluster's jobs)
    def finished():
        run = _run(e2e, HUB, PLACED)
        status = (run or {}).get("status") or {}
        return (status.get("jobDeploymentStatus"), status.get("jobStatus")) == ("Complete", "SUCCEEDED"), status
    wait_for(finished, 300, 3, f"hub's {PLACED} to show the worker's Complete/SUCCEEDED")
    e2e.wait_synced_healthy(ENV, 240, names={f"{HUB}-job-{PLACED}"})
    wait_for(lambda: (_run(e2e, WEST, PLACED) is None, "west-b still has the copy"), 240, 5,
             "the worker's copy to be cleaned up after it finished")
    # the worker's app of the job holds what the job references (its spec), not the job
    kinds = {d["kind"] for d in e2e.rendered(WEST, f"job-{PLACED}")}
    assert "ConfigMap" in kinds and "RayJob" not in kinds, kinds


def _probe_workload(namespace: str) -> dict:
    """A RayJob's Workload as MultiKueue creates it on a worker (Kueue names it `rayjob-<job>-<hash>`: Kueue v0.17.0
    pkg/controller/jobframework/workload_names.go 68-70; the remote copy keeps the name and labels, not the owner:
    pkg/controller/admissionchecks/multikueue/workload.go cloneForCreate)."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "rayjob-e2e-probe-00000", "namespace": namespace},
            "spec": {"queueName": "training", "podSets": [{"name": "head", "count": 1, "template": {"spec": {
                "containers": [{"name": "ray-head", "image": "busybox",
                                "resources": {"requests": {"cpu": "1"}}}]}}}]}}


def test_a_worker_that_lost_a_secret_every_job_reads_gets_no_job_until_it_is_back(e2e, placed):
    """eks is full (FILL); west-b's Ray auth Secret deleted. A job pushed now reserves hub's quota and is placed
    nowhere: west-b's API server refuses its Workload. `make fleet` names west-b, the Secret and that no job is placed
    there. The Secret back, the job is placed on west-b and completes."""
    namespace = e2e.namespace(ENV)
    secret = e2e.env_doc(ENV)["cluster"]["auth"]["secretName"]
    saved = json.loads(e2e.kubectl(WEST, "-n", namespace, "get", "secret", secret, "-o", "json"))
    e2e.kubectl(WEST, "-n", namespace, "delete", "secret", secret)
    try:
        _push_jobs(e2e, {GATED: _job(placed["template"], GATED, placed["workers"], None)},
                   f"e2e: {GATED}, while eks is full and west-b lacks {secret}")

        def reserved():
            wl = _workload(e2e, HUB, _run(e2e, HUB, GATED))
            return _condition(wl, "QuotaReserved").get("status") == "True", (wl or {}).get("status")
        wait_for(reserved, 240, 3, f"hub to reserve quota for {GATED}")
        deadline = time.monotonic() + 30  # on main it was placed 1 s after
        while time.monotonic() < deadline:  # MultiKueue tries the workers at once and again after each failure
            wl = _workload(e2e, HUB, _run(e2e, HUB, GATED))
            where = ((wl or {}).get("status") or {}).get("clusterName")
            assert where is None, f"{GATED} placed on {where} while west-b lacks {secret} and eks is full"
            assert _run(e2e, WEST, GATED) is None, f"west-b holds a copy of {GATED} while it lacks {secret}"
            time.sleep(3)
        # why: west-b's API server refuses a RayJob's Workload while the Secret is gone
        probe = json.dumps(_probe_workload(namespace))
        with pytest.raises(KubectlError) as refused:
            e2e.kubectl(WEST, "create", "--dry-run=server", "-f", "-", stdin=probe)
        assert "parameterNotFoundAction" in str(refused.value), refused.value
        e2e.kubectl(ENV, "create", "--dry-run=server", "-f", "-", stdin=probe)  # eks, which has it, admits one
        proc = e2e.ops("fleet", "--env", ENV, timeout=120)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"west-b: Secret {namespace}/{secret} is missing" in proc.stdout, proc.stdout
        assert "no RayJob is placed on this cluster until it is back" in proc.stdout, proc.stdout
    finally:
        saved["metadata"] = {"name": secret, "namespace": namespace}
        e2e.kubectl(WEST, "apply", "-f", "-", stdin=json.dumps(saved))
    back = time.monotonic()

    def on_west_b():
        wl = _workload(e2e, HUB, _run(e2e, HUB, GATED))
        where = ((wl or {}).get("status") or {}).get("clusterName")
        return where == "west-b" and _run(e2e, WEST, GATED) is not None, where
    wait_for(on_west_b, 300, 2, f"{GATED} placed on west-b once {secret} is back")
    BUDGETS["multikueue: a job placed after the worker's Secret came back (s)"] = round(time.monotonic() - back, 1)

    def finished():
        status = (_run(e2e, HUB, GATED) or {}).get("status") or {}
        return (status.get("jobDeploymentStatus"), status.get("jobStatus")) == ("Complete", "SUCCEEDED"), status
    wait_for(finished, 300, 3, f"hub's {GATED} to show west-b's Complete/SUCCEEDED")
    _push_jobs(e2e, {GATED: None}, f"e2e: remove {GATED}")
    wait_for(lambda: (not any(_runs(e2e, k, GATED) for k in (ENV, WEST, HUB)), "left over"), 240, 5,
             f"{GATED} pruned")


def test_a_waiting_job_goes_to_the_worker_that_is_up_and_a_pruned_job_leaves_it(e2e, placed):
    e2e.hold_cluster(WEST)  # its API server, and what of it talks to it (controllers, kwok, operators)
    try:
        wait_for(lambda: (not _clusters_active(e2e)[0], _clusters_active(e2e)[1]), 180, 5,
                 "hub to see west-b unreachable")
        pushed = _push_jobs(e2e, {WAITING: _job(placed["template"], WAITING, placed["workers"], None)},
                            f"e2e: {WAITING}, while eks is full and west-b is down")

        def waiting():
            wl = _workload(e2e, HUB, _run(e2e, HUB, WAITING))
            return wl is not None and not (wl.get("status") or {}).get("clusterName"), (wl or {}).get("status")
        wait_for(waiting, 240, 5, f"{WAITING} to wait on hub")
        time.sleep(20)
        wl = _workload(e2e, HUB, _run(e2e, HUB, WAITING))
        assert not (wl.get("status") or {}).get("clusterName"), "placed while eks is full and west-b is down"
        _end_run(e2e, ENV, FILL, 300)

        def on_eks():
            copy = _run(e2e, ENV, WAITING)
            ok = copy is not None and (copy.get("status") or {}).get("jobDeploymentStatus") in ("Running", "Initializing")
            return ok, (copy or {}).get("status")
        wait_for(on_eks, 300, 3, f"{WAITING} placed on eks once {FILL} ended")
        BUDGETS["multikueue: push to the RayJob on a worker, one worker down (s)"] = round(time.monotonic() - pushed, 1)
        wait_for(lambda: (((_run(e2e, HUB, WAITING) or {}).get("status") or {}).get("jobDeploymentStatus")
                          in ("Running", "Initializing"), _run(e2e, HUB, WAITING).get("status")), 120, 3,
                 "hub's RayJob to show the worker's status")
        _push_jobs(e2e, {WAITING: None}, f"e2e: remove {WAITING} while it runs on eks")
        wait_for(lambda: (_run(e2e, HUB, WAITING) is None, "hub still has it"), 240, 5, f"{WAITING} pruned on hub")
        wait_for(lambda: (_run(e2e, ENV, WAITING) is None, "eks still has the copy"), 240, 5,
                 "the pruned job's copy to leave eks")
    finally:
        e2e.release_cluster(WEST)
    # Kueue reconnects with a backoff doubling from 5 s (at most 320 s: multikueuecluster.go retryAfter)
    wait_for(lambda: _clusters_active(e2e), 480, 5, "hub to reach west-b again")
    _push_jobs(e2e, {FILL: None, PLACED: None}, "e2e: remove the MultiKueue scenario's jobs")
    wait_for(lambda: (not any(_runs(e2e, k, j) for k in (ENV, WEST, HUB) for j in (FILL, PLACED)), "left over"),
             300, 5, "the scenario's jobs pruned")
    e2e.wait_synced_healthy(ENV, 300)
