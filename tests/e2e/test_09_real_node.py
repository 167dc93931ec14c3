"""Real pods (issue 22): an environment whose node is this machine (e2e/nodes.yaml `real`: minikube) runs what Argo
CD syncs from the committed apps/ as real containers of the image `make image` built: the real kubelet runs the
probes, Ray starts in the pods under the rendered security context, the training trains, kube-router's firewall
enforces the NetworkPolicies, and the failures a user meets are the kubelet's and Ray's own words.

- the node and the standing cluster: a containerd node, Ray's own count of nodes and CPUs;
- the first run of digits-torch (synced at bootstrap) trained on its two worker pods (the head has no CPUs for
  Ray) with checkpoints in the checkpoint store, and its result is read back from the store;
- the NetworkPolicies drop what they must: a pod outside a Ray cluster reaches neither its GCS nor (for a job's
  cluster) its dashboard, while the cluster's own pods, the operator's namespace and the pod network's DNS do;
- a job added through git (digits-fault): the time from `git push` to its first training step; one of its worker
  pods is deleted mid-training, Ray Train restores the last checkpoint and the run succeeds;
- the same job with an image that does not exist, then with another learning rate under the same name (the run
  refuses to continue: it would resume the old weights), then with a data path that does not exist: `make diagnose`
  and `make logs` show what the kubelet and the training said;
- then the job leaves through git and every Application ends Synced and Healthy.
"""
from __future__ import annotations

import json
import time
import warnings

import pytest

from e2e import nodes
from tests.e2e import day_two
from tests.e2e.harness import BUDGETS, wait_for

REAL = [env for env in nodes.environments() if nodes.real(env)]
FAULT_JOB = "digits-fault"
FAULT_EPOCHS = 12
# connect to host:port from inside a pod: prints open, or blocked (refused or dropped within 3 s)
CONNECT = ("import socket, sys\n"
           "s = socket.socket(); s.settimeout(3)\n"
           "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); print('open')\n"
           "except OSError as exc:\n    print('blocked', type(exc).__name__)\n")
ACCURACY_FLOOR = 0.9


def _image(e2e, env) -> str:
    image = e2e.env_doc(env)["cluster"]["image"]
    return f"{image['repository']}:{image['tag']}"


def _probe_pod(name: str, namespace: str, image: str) -> dict:
    """A pod that only waits, hardened as Pod Security `restricted` asks, labelled as nothing the policies name."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                                                           "labels": {"app": "e2e-network-probe"}},
            "spec": {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 100,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "probe", "image": image, "imagePullPolicy": "IfNotPresent",
                                     "command": ["python", "-c", "import time; time.sleep(3600)"],
                                     "resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                                                   "limits": {"cpu": "200m", "memory": "256Mi"}},
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "readOnlyRootFilesystem": True,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}


def connect(e2e, env, pod: str, namespace: str, host: str, port: int) -> str:
    return e2e.exec(env, pod, "python", "-c", CONNECT, host, str(port), namespace=namespace).strip()


def _operator_namespace(e2e, env) -> str:
    docs = e2e.rendered(env, "ray-cluster")
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    for rule in policy["spec"]["ingress"]:
        for source in rule.get("from", []):
            name = ((source.get("namespaceSelector") or {}).get("matchLabels") or {}).get("kubernetes.io/metadata.name")
            if name:
                return name
    raise AssertionError(f"{env}'s Ray cluster policy admits no operator namespace: {policy}")


@pytest.fixture(scope="module")
def probes(e2e, bootstrapped):
    """Two probe pods per real environment: a stranger in the training namespace, one in the operator's."""
    made = {}
    for env in REAL:
        ns, operator_ns = e2e.namespace(env), _operator_namespace(e2e, env)
        pods = {"stranger": ("e2e-stranger", ns), "operator-ns": ("e2e-operator-ns-probe", operator_ns)}
        for name, namespace in pods.values():
            e2e.core(env).create_namespaced_pod(namespace, _probe_pod(name, namespace, _image(e2e, env)))
        for name, namespace in pods.values():
            wait_for(lambda n=name, s=namespace, e=env: _running(e2e, e, n, s), 180, 2,
                     f"probe pod {namespace}/{name}")
        made[env] = pods
    yield made
    for env, pods in made.items():
        for name, namespace in pods.values():
            e2e.core(env).delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def _running(e2e, env, name, namespace):
    pod = e2e.core(env).read_namespaced_pod(name, namespace)
    return pod.status.phase == "Running", pod.status.phase


def _logs(e2e, env, pod: str) -> str:
    try:
        return e2e.core(env).read_namespaced_pod_log(pod, e2e.namespace(env))
    except Exception:  # noqa: BLE001 - not started yet
        return ""


def _expected_ray(raycluster: dict) -> tuple[int, float]:
    """(nodes, CPUs) Ray should report for a RayCluster: KubeRay passes num-cpus from rayStartParams, else the
    container's CPU limit."""
    def cpus(group: dict) -> float:
        param = (group.get("rayStartParams") or {}).get("num-cpus")
        if param is not None:
            return float(param)
        limit = str(group["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"])
        return float(limit[:-1]) / 1000 if limit.endswith("m") else float(limit)
    spec = raycluster["spec"]
    workers = [(g["replicas"], cpus(g)) for g in spec.get("workerGroupSpecs", [])]
    return 1 + sum(n for n, _ in workers), cpus(spec["headGroupSpec"]) + sum(n * c for n, c in workers)


@pytest.mark.parametrize("env", REAL)
def test_the_node_is_this_machine_and_the_standing_clusters_pods_are_real_containers(e2e, bootstrapped, env):
    e2e.wait_synced_healthy(env, 420, names={f"{env}-ray-cluster"})
    node_name = e2e.current["clusters"][env]["real_node"]["name"]
    node = e2e.core(env).read_node(node_name)
    assert node.status.node_info.container_runtime_version.startswith("containerd://"), node.status.node_info
    assert node.status.node_info.kubelet_version.startswith("v1.34."), node.status.node_info
    name = e2e.env_doc(env)["rayCluster"]["name"]
    pods = [p for p in e2e.pods(env, f"ray.io/cluster={name}") if not p.metadata.deletion_timestamp]
    assert pods, f"no pods of {name}"
    for pod in pods:
        assert pod.spec.node_name == node_name
        probe = pod.spec.containers[0].readiness_probe
        assert probe is not None, f"{pod.metadata.name} has no readiness probe to pass"
        assert any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions), pod.status.conditions
        for status in pod.status.container_statuses:
            assert status.container_id.startswith("containerd://") and status.state.running, status


@pytest.mark.parametrize("env", REAL)
def test_ray_reports_the_standing_clusters_nodes_and_cpus(e2e, bootstrapped, env):
    name = e2e.env_doc(env)["rayCluster"]["name"]
    cluster = next(d for d in e2e.rendered(env, "ray-cluster") if d["kind"] == "RayCluster")
    want_nodes, want_cpus = _expected_ray(cluster)
    head = e2e.pods(env, f"ray.io/cluster={name},ray.io/node-type=head")[0].metadata.name
    script = ("import json, ray; ray.init(address='auto', logging_level='ERROR'); "
              "print(json.dumps({'nodes': sum(n['Alive'] for n in ray.nodes()), "
              "'cpus': ray.cluster_resources().get('CPU', 0.0)}))")

    def check():
        seen = json.loads(e2e.exec(env, head, "python", "-c", script).strip().splitlines()[-1])
        return (seen["nodes"], seen["cpus"]) == (want_nodes, want_cpus), seen
    wait_for(check, 120, 5, f"Ray in {head} did not report {want_nodes} nodes and {want_cpus} CPUs")


@pytest.mark.parametrize("env", REAL)
def test_the_first_run_trained_on_real_pods_and_its_result_is_in_the_store(e2e, finished, env):
    ended, _ = finished
    runs = [obj for (e, kind, _n), obj in ended.items() if e == env and kind == "RayJob"
            and day_two_job(obj) == "digits-torch"]
    assert runs, f"no digits-torch run of {env} ended: {list(ended)}"
    status = runs[0]["status"]
    assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Complete", "SUCCEEDED"), status
    # the job's Ray cluster gives the head no CPUs for Ray: the two Ray Train workers were its two worker pods
    spec = runs[0]["spec"]["rayClusterSpec"]
    assert spec["headGroupSpec"]["rayStartParams"].get("num-cpus") == "0"
    assert sum(g["replicas"] for g in spec["workerGroupSpecs"]) == 2
    result = _stored_result(e2e, env, "digits-torch")
    assert result["name"] == "digits-torch" and result["runPath"].startswith("s3://"), result
    assert result["clusterStatus"]["numNodes"] == 3, result["clusterStatus"]
    assert result["status"] == "success", result
    assert result["results"]["bestMetric"] >= ACCURACY_FLOOR, result["results"]
    app = next(a for a in e2e.env_apps(env) if a["metadata"]["name"] == f"{env}-job-digits-torch")
    assert e2e.app_state(app)[1] == "Healthy", e2e.describe(app)


def _stored_result(e2e, env: str, job: str) -> dict:
    """The result a run wrote into the checkpoint store (TRAINING_STORAGE_PATH/<job>/result.json), read by a pod of
    the standing cluster: what the training itself recorded, whatever its log stream showed."""
    name = e2e.env_doc(env)["rayCluster"]["name"]
    head = e2e.pods(env, f"ray.io/cluster={name},ray.io/node-type=head")[0].metadata.name
    read = ("import os, sys; from training.runtime import storage; "
            f"sys.stdout.write(storage.read_bytes(os.environ['TRAINING_STORAGE_PATH'] + '/{job}/result.json')"
            ".decode())")
    return json.loads(e2e.exec(env, head, "python", "-c", read))


def day_two_job(obj: dict) -> str:
    return obj["metadata"]["name"].rsplit("-", 1)[0]


@pytest.mark.parametrize("env", REAL)
def test_network_policy_drops_what_it_must_around_the_standing_cluster(e2e, probes, env):
    name = e2e.env_doc(env)["rayCluster"]["name"]
    ns = e2e.namespace(env)
    stranger, _ = probes[env]["stranger"]
    head_svc = f"{name}-head-svc.{ns}.svc"
    worker = e2e.pods(env, f"ray.io/cluster={name},ray.io/node-type=worker")[0].metadata.name
    seen = {
        "stranger -> kube-dns:53 (the pod network works)": connect(e2e, env, stranger, ns, "kube-dns.kube-system.svc", 53),
        "stranger -> GCS 6379": connect(e2e, env, stranger, ns, head_svc, 6379),
        "the cluster's worker -> GCS 6379": connect(e2e, env, worker, ns, head_svc, 6379),
    }
    assert seen["stranger -> kube-dns:53 (the pod network works)"] == "open", seen
    assert seen["stranger -> GCS 6379"].startswith("blocked"), seen
    assert seen["the cluster's worker -> GCS 6379"] == "open", seen


def _env_file(env: str) -> str:
    return f"{env}.yaml"


def _set_fault_job(e2e, env, **changes) -> None:
    """jobs.digits-fault in the environment file: the digits job, longer, with `changes` on top (a dotted path
    each); None removes the job."""
    def edit(doc):
        jobs = doc.setdefault("jobs", {})
        if changes.get("remove"):
            jobs.pop(FAULT_JOB, None)
            return
        job = {"job": {"spec": {
            "name": FAULT_JOB, "mode": "train",
            "config": {"numWorkers": 2, "useGpu": False, "resourcesPerWorker": {"cpu": 1}},
            "trainConfig": {"framework": "pytorch", "epochs": FAULT_EPOCHS, "batchSize": 32,
                            "lr": changes.get("lr", 0.001)},
            "data": changes.get("data") or {"source": "digits"},
            "checkpoint": {"everyEpochs": 2, "keepBest": 2, "maxFailures": 2}}}}
        if changes.get("image_tag"):
            job["cluster"] = {"image": {"tag": changes["image_tag"]}}
        jobs[FAULT_JOB] = job
    e2e.edit_environment(_env_file(env), edit)
    e2e.generator("render", "--env", env)


def _one_run(e2e, env, old: set[str], timeout: float = 300) -> str:
    return day_two.new_run(e2e, env, FAULT_JOB, old, timeout)


def _submitter_logs(e2e, env, run) -> str:
    return "\n".join(_logs(e2e, env, p.metadata.name) for p in day_two.submitters(e2e, env, run))


@pytest.fixture(scope="module")
def faulted(e2e, finished, probes):
    """digits-fault through git; network checks against its running cluster; a worker deleted mid-training."""
    env = REAL[0]
    ns = e2e.namespace(env)
    record: dict = {"env": env}
    _set_fault_job(e2e, env)
    pushed = time.monotonic()
    e2e.push(f"e2e: add {FAULT_JOB} to {env}")
    run = _one_run(e2e, env, set())
    record["run"] = run
    first = wait_for(lambda: ("epoch 1/" in _submitter_logs(e2e, env, run), _submitter_logs(e2e, env, run)[-800:]),
                     600, 2, f"{run} printed no first epoch")
    assert first is not None
    record["push_to_first_step"] = time.monotonic() - pushed
    BUDGETS["git push to the first training step of a new job (real pods, 2 cores)"] = record["push_to_first_step"]
    # the job's own cluster while it trains: a stranger reaches neither its GCS nor its dashboard; the operator's
    # namespace reaches the dashboard
    cluster = day_two.run_named(e2e, env, run)["status"]["rayClusterName"]
    head_svc = f"{cluster}-head-svc.{ns}.svc"
    stranger, _ = probes[env]["stranger"]
    operator_probe, operator_ns = probes[env]["operator-ns"]
    record["network"] = {
        "stranger -> job GCS 6379": connect(e2e, env, stranger, ns, head_svc, 6379),
        "stranger -> job dashboard 8265": connect(e2e, env, stranger, ns, head_svc, 8265),
        "operator namespace -> job dashboard 8265": connect(e2e, env, operator_probe, operator_ns, head_svc, 8265),
    }
    # a worker pod deleted once the run has written a checkpoint (epoch 2 of every 2)
    wait_for(lambda: ("epoch 3/" in _submitter_logs(e2e, env, run), _submitter_logs(e2e, env, run)[-500:]), 600, 1,
             f"{run} did not reach epoch 3")
    victim = day_two.cluster_pods(e2e, env, run, "worker")[0].metadata.name
    record["log at the deletion"] = _submitter_logs(e2e, env, run)
    e2e.core(env).delete_namespaced_pod(victim, ns, grace_period_seconds=0)
    record["victim"] = victim
    record["final"] = day_two.succeeded(e2e, env, run, 900)
    record["log"] = _submitter_logs(e2e, env, run)
    record["result"] = _stored_result(e2e, env, FAULT_JOB)
    return record


def test_a_new_job_reaches_its_first_training_step_within_a_budget(faulted):
    # printed by make e2e as a budget line; asserted only to have happened (no timed assertion)
    assert faulted["push_to_first_step"] > 0


def test_network_policy_drops_what_it_must_around_a_jobs_cluster(faulted):
    seen = faulted["network"]
    assert seen["stranger -> job GCS 6379"].startswith("blocked"), seen
    assert seen["stranger -> job dashboard 8265"].startswith("blocked"), seen
    assert seen["operator namespace -> job dashboard 8265"] == "open", seen


def test_a_worker_deleted_mid_training_resumes_from_the_last_checkpoint(faulted):
    """The run's own record (its result in the checkpoint store) says it resumed from a checkpoint of this run and
    trained the epochs after it to the end; the driver's log, as the submitter streamed it, says so too."""
    log, result = faulted["log"], faulted["result"]
    status = faulted["final"]["status"]
    assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Complete", "SUCCEEDED"), status
    seen = (f"{faulted['victim']} was deleted once the log showed epoch 3; the log then ended with:\n"
            f"{faulted['log at the deletion'][-1200:]}\n--- the whole run's log, last lines:\n{log[-2500:]}")
    results = result["results"]
    resumed = results["resumedFromEpoch"]
    assert result["status"] == "success" and results["epochsCompleted"] == FAULT_EPOCHS, (results, seen)
    run_path = result["runPath"].split("://", 1)[-1]  # restoredFrom is Ray's path, without the scheme
    restored = results.get("restoredFrom") or ""
    assert resumed >= 2 and restored.split("://", 1)[-1].startswith(run_path + "/"), (
        f"the run did not resume from its own checkpoint: resumedFromEpoch={resumed}, restoredFrom={restored!r}, "
        f"runPath={result['runPath']}\n{seen}")
    assert results["epochsTrainedThisRun"] == list(range(resumed + 1, FAULT_EPOCHS + 1)), (results, seen)
    if "restored checkpoint" not in log or f"epoch {FAULT_EPOCHS}/{FAULT_EPOCHS}" not in log:
        # the proof is the run's own record above; the log is what the submitter streamed from the head (CI
        # saw this scenario fail once on the log, without the record to say whether the run had resumed), so
        # a gap in it is shown, not failed on
        warnings.warn(f"{faulted['run']}: the result shows the restore from epoch {resumed}, the submitter's "
                      f"streamed log does not:\n{seen}", stacklevel=1)


@pytest.fixture(scope="module")
def failures(e2e, faulted):
    """The same job with an image no node has, then with a data path that does not exist; the job leaves last."""
    env = faulted["env"]
    record: dict = {}
    old = {faulted["run"]}
    _set_fault_job(e2e, env, image_tag="0.0.0-not-built")
    e2e.push(f"e2e: {FAULT_JOB} on an image that was never built")
    run = _one_run(e2e, env, old)
    old.add(run)

    def pulling():
        pods = day_two.cluster_pods(e2e, env, run, "head") + day_two.cluster_pods(e2e, env, run, "worker")
        reasons = {cs.state.waiting.reason for p in pods for cs in p.status.container_statuses or []
                   if cs.state and cs.state.waiting}
        return bool(reasons & {"ErrImagePull", "ImagePullBackOff"}), reasons
    wait_for(pulling, 180, 3, f"{run}'s pods did not fail to pull")
    proc = e2e.ops("diagnose", "--env", env, "--job", FAULT_JOB)
    record["diagnose image"] = (proc.returncode, proc.stdout + proc.stderr)

    # the same job with another learning rate: a new RayJob, the same run name; the run refuses to continue
    _set_fault_job(e2e, env, lr=0.01)
    e2e.push(f"e2e: {FAULT_JOB} with another learning rate under the same name")
    run = _one_run(e2e, env, old)
    old.add(run)
    wait_for(lambda: ((day_two.run_named(e2e, env, run) or {}).get("status", {}).get("jobDeploymentStatus")
                      == "Failed", (day_two.run_named(e2e, env, run) or {}).get("status")), 600, 3,
             f"{run} did not fail")
    proc = e2e.ops("logs", "--env", env, "--job", FAULT_JOB)
    record["logs identity"] = (proc.returncode, proc.stdout + proc.stderr)

    _set_fault_job(e2e, env, data={"source": "cifar10", "path": "/data/cifar-10-batches-py"})
    e2e.push(f"e2e: {FAULT_JOB} reads a data path that does not exist")
    run = _one_run(e2e, env, old)
    wait_for(lambda: ((day_two.run_named(e2e, env, run) or {}).get("status", {}).get("jobDeploymentStatus")
                      == "Failed", (day_two.run_named(e2e, env, run) or {}).get("status")), 600, 3,
             f"{run} did not fail")
    for command in ("logs", "diagnose"):
        proc = e2e.ops(command, "--env", env, "--job", FAULT_JOB)
        record[f"{command} spec"] = (proc.returncode, proc.stdout + proc.stderr)
    _set_fault_job(e2e, env, remove=True)
    e2e.push(f"e2e: {FAULT_JOB} removed")
    wait_for(lambda: (not day_two.current_runs(e2e, env, FAULT_JOB),
                      [o["metadata"]["name"] for o in day_two.current_runs(e2e, env, FAULT_JOB)]),
             300, 3, f"{FAULT_JOB} was not pruned")
    record["apps"] = e2e.wait_synced_healthy(env, 420)
    return record


def test_an_image_that_does_not_exist_is_diagnosed_from_the_kubelets_message(failures):
    code, out = failures["diagnose image"]
    assert "image-pull" in out, out
    assert "0.0.0-not-built" in out and ("Failed to pull image" in out or "ErrImagePull" in out
                                         or "ImagePullBackOff" in out), out


def test_a_spec_error_shows_the_trainings_own_message_in_logs_and_diagnose(failures):
    code, out = failures["logs spec"]
    assert code == 0, out
    assert "/data/cifar-10-batches-py" in out, out
    code, out = failures["diagnose spec"]
    assert "job-spec-or-data" in out and "/data/cifar-10-batches-py" in out, out


def test_a_changed_learning_rate_under_the_same_name_is_refused_not_resumed(failures):
    code, out = failures["logs identity"]
    assert "was trained with other settings" in out and "lr: 0.001 -> 0.01" in out, out[-3000:]


def test_the_job_left_through_git_and_every_app_is_synced_and_healthy(failures):
    assert not any(a["metadata"]["name"].endswith(f"-job-{FAULT_JOB}") for a in failures["apps"])
