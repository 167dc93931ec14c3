"""What the committed render of each environment must say (the snapshot's meaning, not only its bytes)."""
import pytest

from tests.support import REPO, load_yaml

APPS = REPO / "apps"


def load(rel):
    """A rendered file; `*` stands for a job's run hash. <env>/<app>/...: the app as the environment's first cluster
    has it (its own apps/<env>/clusters/<env>/<app>/ on an environment of several, else the shared folder)."""
    env, _, rest = rel.partition("/")
    matches = sorted(APPS.glob(f"{env}/clusters/{env}/{rest}")) or sorted(APPS.glob(rel))
    assert len(matches) == 1, (rel, matches)
    return load_yaml(matches[0].read_text())


def pods(spec):
    """(role, podSpec, group) of a rayClusterSpec."""
    yield "head", spec["headGroupSpec"]["template"]["spec"], spec["headGroupSpec"]
    for group in spec.get("workerGroupSpecs", []):
        yield group["groupName"], group["template"]["spec"], group


def test_minikube_standing_cluster_is_one_head_and_one_cpu_worker():
    """Sized so the standing cluster and one job's cluster fit the namespace quota on a laptop's two 4-CPU nodes and
    on one 2-core machine (the e2e's real node runs them: tests/e2e/test_02_pods.py, test_09_real_node.py): each Ray
    pod requests a quarter of a core and may use one; the head gives Ray no CPUs (no training on it)."""
    cluster = load("minikube/ray-cluster/raycluster-minikube-ray.yaml")
    spec = cluster["spec"]
    workers = spec["workerGroupSpecs"]
    assert [g["replicas"] for g in workers] == [1]
    for role, pod, _ in pods(spec):
        res = pod["containers"][0]["resources"]
        assert res["requests"] == {"cpu": "250m", "memory": "1Gi"}, role
        assert res["limits"] == {"cpu": "1", "memory": "2Gi"}, role
        assert "nvidia.com/gpu" not in res["limits"]
    assert spec["headGroupSpec"]["rayStartParams"] == {"num-cpus": "0"}
    ports = {p["name"]: p["containerPort"] for p in spec["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001}


def test_minikube_dashboard_and_client_on_node_ports():
    svc = load("minikube/ray-cluster/service-minikube-ray-dashboard.yaml")
    assert svc["spec"]["type"] == "NodePort"
    ports = {p["name"]: (p["port"], p["nodePort"]) for p in svc["spec"]["ports"]}
    assert ports == {"dashboard": (8265, 30265), "client": (10001, 30001)}
    assert svc["spec"]["selector"] == {"ray.io/cluster": "minikube-ray", "ray.io/node-type": "head"}


def test_eks_gpu_workers_carry_gpu_and_efa():
    job = load("eks/job-digits-torch/rayjob-digits-torch-*.yaml")
    spec = job["spec"]["rayClusterSpec"]
    groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
    assert list(groups) == ["gpu-g5"]
    assert groups["gpu-g5"]["replicas"] == 3
    for role, pod, _ in pods(spec):
        limits = pod["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "1" and limits["vpc.amazonaws.com/efa"] == "1", role
        assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "g5.8xlarge"}
    assert spec["authOptions"] == {"mode": "token", "secretName": "ray-auth-token"}


def test_eks_standing_cluster_autoscales_and_job_clusters_do_not():
    cluster = load("eks/ray-cluster/raycluster-eks-ray.yaml")["spec"]
    assert cluster["enableInTreeAutoscaling"] is True
    job = load("eks/job-digits-torch/rayjob-digits-torch-*.yaml")["spec"]["rayClusterSpec"]
    assert "enableInTreeAutoscaling" not in job


@pytest.mark.parametrize("env", ["minikube", "eks"])
def test_every_ray_pod_has_shared_memory(env):
    for path in (APPS / env).rglob("ray[cj]*.yaml"):
        doc = load_yaml(path.read_text())
        spec = doc["spec"].get("rayClusterSpec", doc["spec"])
        for role, pod, _ in pods(spec):
            shm = [v for v in pod["volumes"] if v["name"] == "shm"]
            assert shm and shm[0]["emptyDir"]["medium"] == "Memory" and shm[0]["emptyDir"]["sizeLimit"], (path, role)
            assert {"name": "shm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]


def test_jobs_run_the_training_entrypoint_with_their_spec():
    for env in ("minikube", "eks"):
        job = load(f"{env}/job-digits-torch/rayjob-digits-torch-*.yaml")
        assert job["spec"]["entrypoint"] == "python -m training run /etc/training/spec.yaml"
        head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
        name = job["metadata"]["name"]
        assert {"configMap": {"name": f"{name}-spec"}, "name": "training-spec"} in head["volumes"]


def test_eks_checkpoints_on_fsx_on_every_ray_pod():
    pvc = load("eks/clusters/eks/platform/persistentvolumeclaim-fsx-claim.yaml")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"] and pvc["spec"]["storageClassName"] == "fsx-sc"
    sc = load("eks/clusters/eks/platform/storageclass-fsx-sc.yaml")
    assert sc["provisioner"] == "fsx.csi.aws.com" and sc["reclaimPolicy"] == "Retain"
    for rel in ("eks/ray-cluster/raycluster-eks-ray.yaml", "eks/job-digits-torch/rayjob-digits-torch-*.yaml"):
        doc = load(rel)
        spec = doc["spec"].get("rayClusterSpec", doc["spec"])
        for role, pod, _ in pods(spec):
            assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in pod["volumes"], role
            container = pod["containers"][0]
            assert {"name": "checkpoints", "mountPath": "/checkpoints"} in container["volumeMounts"]
            assert {"name": "TRAINING_STORAGE_PATH", "value": "/checkpoints"} in container["env"]


def test_finished_rayjobs_are_kept_so_argo_cd_does_not_recreate_them():
    """KubeRay deletes the job's cluster after the TTL but keeps the RayJob and its submitter Job (the driver's
    logs; ray-operator v1.6.2 controllers/ray/rayjob_controller.go handleShutdownAfterJobFinishes): Argo CD never
    sees it missing. A queued job's TTL is 0 (Kueue frees its quota when it ends: docs/queueing.md)."""
    for env, ttl in (("minikube", 600), ("eks", 0)):
        spec = load(f"{env}/job-digits-torch/rayjob-digits-torch-*.yaml")["spec"]
        assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] == ttl
        assert "deletionStrategy" not in spec


def test_every_rendered_job_spec_is_a_valid_training_spec():
    """The RayJobs point at the training package with specs it accepts (training/schema/job-spec.schema.json)."""
    import json

    import jsonschema

    schema = json.loads((REPO / "training" / "schema" / "job-spec.schema.json").read_text())
    specs = list(APPS.rglob("configmap-*-spec.yaml"))
    assert len(specs) >= 3
    for path in specs:
        spec = load_yaml(load_yaml(path.read_text())["data"]["spec.yaml"])
        jsonschema.validate(spec, schema)
