"""What the rendered workloads promise the operators that act on them (KubeRay v1.7.0, the training-operator
v1.9.4): fast static guards for the review findings. The e2e scenarios (tests/e2e) run the operators themselves;
each test here names the scenario that shows the same behaviour on the real controllers."""
from __future__ import annotations

import glob

import pytest

from generator import environments
from tests.support import REPO, load_yaml, run_generator

ENVS = environments.names(REPO)
KUBERAY_OWNED_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/created-by")


def rendered(env: str, pattern: str = "*/*.yaml") -> list[tuple[str, dict]]:
    return [(p, load_yaml(open(p))) for p in sorted(glob.glob(str(REPO / "apps" / env / pattern)))]


def ray_cluster_specs(env):
    for path, doc in rendered(env):
        if doc["kind"] == "RayCluster":
            yield path, doc, doc["spec"]
        elif doc["kind"] == "RayJob":
            yield path, doc, doc["spec"]["rayClusterSpec"]


def pod_templates(doc):
    spec = doc.get("spec") or {}
    if doc["kind"] in ("RayCluster", "RayJob"):
        cluster = spec.get("rayClusterSpec", spec)
        yield cluster["headGroupSpec"]["template"]
        for group in cluster["workerGroupSpecs"]:
            yield group["template"]
        if "submitterPodTemplate" in spec:
            yield spec["submitterPodTemplate"]
    elif doc["kind"] == "PyTorchJob":
        for replica in spec["pytorchReplicaSpecs"].values():
            yield replica["template"]


@pytest.mark.parametrize("env", ENVS)
def test_pod_templates_leave_kuberays_own_labels_alone(env):
    """Finding 16: a template label app.kubernetes.io/name overrides KubeRay's (labelPod), and the RayJob's
    <job>-head-svc then selects no pod (e2e: test_02_pods, the head services' endpoints)."""
    for path, doc in rendered(env):
        for template in pod_templates(doc):
            labels = (template.get("metadata") or {}).get("labels") or {}
            assert not set(KUBERAY_OWNED_LABELS) & set(labels), (path, labels)
            assert not [k for k in labels if k.startswith("ray.io/")], (path, labels)
        if doc["kind"] in ("RayJob", "PyTorchJob"):
            assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == doc["metadata"]["name"]
            assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ray-gitops"


@pytest.mark.parametrize("env", ENVS)
def test_no_ray_start_param_that_kuberay_forces_or_derives(env):
    """Finding 15: block is forced, dashboard-host defaulted, num-gpus derived from the GPU limit."""
    for path, _doc, spec in ray_cluster_specs(env):
        for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
            assert not {"block", "dashboard-host", "num-gpus"} & set(group.get("rayStartParams") or {}), path


@pytest.mark.parametrize("env", ENVS)
def test_standing_clusters_recreate_pods_on_a_spec_change_and_job_clusters_do_not_ask(env):
    """Finding 7: upgradeStrategy Recreate on the standing RayCluster (e2e: test_05_change, bump-image rolls its
    pods); never in a RayJob's rayClusterSpec, where KubeRay refuses it and the job never gets pods."""
    for path, doc, spec in ray_cluster_specs(env):
        if doc["kind"] == "RayCluster":
            assert spec["upgradeStrategy"] == {"type": "Recreate"}, path
        else:
            assert "upgradeStrategy" not in spec, path


@pytest.mark.parametrize("env", ENVS)
def test_autoscaled_groups_render_their_minimum(env):
    """Finding 4: workerGroupSpecs is applied whole, so what git says of replicas replaces the autoscaler's; an
    autoscaled group renders replicas = minReplicas (e2e: test_04_converged)."""
    for path, _doc, spec in ray_cluster_specs(env):
        if spec.get("enableInTreeAutoscaling"):
            for group in spec["workerGroupSpecs"]:
                assert group["replicas"] == group["minReplicas"], (path, group["groupName"])


def test_an_autoscaled_group_with_its_own_replicas_is_refused(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    text = env.read_text()
    env.write_text(text.replace("    gpu-g5:\n      minReplicas: 0\n", "    gpu-g5:\n      replicas: 2\n"
                                "      minReplicas: 0\n", 1))
    proc = run_generator(repo_copy, "render", "--env", "eks")
    assert proc.returncode != 0
    assert "workerGroups.gpu-g5.replicas: with the autoscaler on, the autoscaler sets replicas" in proc.stderr


@pytest.mark.parametrize("env", ENVS)
def test_finished_pytorchjobs_are_kept(env):
    """Finding 3: with runPolicy.ttlSecondsAfterFinished the training-operator deletes the finished PyTorchJob
    and Argo CD's self-heal creates it again: it trains again (e2e: test_03_jobs, stays finished)."""
    for path, doc in rendered(env):
        if doc["kind"] == "PyTorchJob":
            assert "ttlSecondsAfterFinished" not in doc["spec"]["runPolicy"], path
            assert doc["spec"]["runPolicy"]["cleanPodPolicy"] == "Running", path


def test_a_torchrun_job_with_a_ttl_is_refused(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    env.write_text(env.read_text().replace("      backoffLimit: 3\n", "      backoffLimit: 3\n"
                                           "      ttlSecondsAfterFinished: 600\n", 1))
    proc = run_generator(repo_copy, "render", "--env", "eks")
    assert proc.returncode != 0 and "ttlSecondsAfterFinished" in proc.stderr


@pytest.mark.parametrize("env", ENVS)
def test_the_submitter_is_a_small_pod(env):
    """Finding 18: the submitter runs `ray job submit`: a CPU image with the cluster's Ray, small resources."""
    for path, doc in rendered(env):
        if doc["kind"] != "RayJob":
            continue
        (container,) = doc["spec"]["submitterPodTemplate"]["spec"]["containers"]
        assert container["name"] == "ray-job-submitter"
        assert "-gpu" not in container["image"] and "-efa" not in container["image"], (path, container["image"])
        assert container["resources"]["requests"] == {"cpu": "200m", "memory": "512Mi"}
        assert doc["spec"]["submitterPodTemplate"]["spec"]["restartPolicy"] == "Never"


def _quantity(value) -> float:
    from kubernetes.utils import parse_quantity
    return float(parse_quantity(str(value)))


def _peak(env: str, resource: str) -> float:
    """Requests of `resource` when every workload runs at once at its largest (worker groups at maxReplicas)."""
    total = 0.0
    for _path, doc in rendered(env):
        for template, count in _templates_with_counts(doc):
            for container in template["spec"]["containers"]:
                total += count * _quantity(((container.get("resources") or {}).get("requests") or {}).get(resource, 0))
    return total


def _templates_with_counts(doc):
    spec = doc.get("spec") or {}
    if doc["kind"] in ("RayCluster", "RayJob"):
        cluster = spec.get("rayClusterSpec", spec)
        yield cluster["headGroupSpec"]["template"], 1
        for group in cluster["workerGroupSpecs"]:
            yield group["template"], group.get("maxReplicas", group.get("replicas", 0)) * group.get("numOfHosts", 1)
        if "submitterPodTemplate" in spec:
            yield spec["submitterPodTemplate"], 1
    elif doc["kind"] == "PyTorchJob":
        for replica in spec["pytorchReplicaSpecs"].values():
            yield replica["template"], replica.get("replicas", 1)


@pytest.mark.parametrize("env", ENVS)
def test_the_quota_admits_the_peak(env):
    """Finding 18 (eks: GPU quota 16 below the peak of 17) and 9 (minikube): what may run at once fits the
    namespace quota (e2e: test_02_pods schedules it under the quota on the environment's nodes)."""
    quotas = [doc for _p, doc in rendered(env, "platform/resourcequota-*.yaml")]
    for quota in quotas:
        for key, hard in quota["spec"]["hard"].items():
            if key.startswith("requests."):
                resource = key[len("requests."):]
                assert _peak(env, resource) <= _quantity(hard), (env, key, _peak(env, resource), hard)
