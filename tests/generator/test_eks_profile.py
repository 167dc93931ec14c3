"""The EKS production profile (seed 001) on every pod it applies to, on none it does not, and from one switch."""
import os

import yaml

from tests.support import REPO, app_dir, load_yaml, run_generator

# NCCL uses the aws-ofi-nccl plugin or fails (never TCP sockets in silence); NCCL_PROTO is the plugin's to set
EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "0", "FI_EFA_FORK_SAFE": "1", "NCCL_NET_PLUGIN": "ofi",
           "NCCL_NET": "Libfabric"}
NCCL_ENV = {"NCCL_DEBUG": "INFO", "TORCH_NCCL_TRACE_BUFFER_SIZE": "4096", "PYTHONUNBUFFERED": "1"}
# read by nothing (neither NCCL nor PyTorch): the collective timeout is cluster.nccl.collectiveTimeoutSeconds
UNREAD = {"NCCL_TIMEOUT"}


def pod_specs(doc):
    """Every pod spec a rendered workload carries, with a label."""
    spec = doc.get("spec", {})
    if doc["kind"] == "PyTorchJob":
        for role, replica in spec["pytorchReplicaSpecs"].items():
            yield role, replica["template"]["spec"]
        return
    cluster = spec.get("rayClusterSpec", spec) if doc["kind"] in ("RayJob", "RayCluster") else None
    if cluster:
        yield "head", cluster["headGroupSpec"]["template"]["spec"]
        for group in cluster.get("workerGroupSpecs", []):
            yield group["groupName"], group["template"]["spec"]


def workloads(apps_env):
    for path in sorted(apps_env.rglob("*.yaml")):
        doc = load_yaml(path.read_text())
        if doc["kind"] in ("RayCluster", "RayJob", "PyTorchJob"):
            yield path, doc


def env_of(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_every_eks_gpu_pod_carries_the_production_profile():
    seen = 0
    for path, doc in workloads(REPO / "apps" / "eks"):
        for role, pod in pod_specs(doc):
            c = pod["containers"][0]
            limits, requests = c["resources"]["limits"], c["resources"]["requests"]
            assert limits["nvidia.com/gpu"] == requests["nvidia.com/gpu"] == "1", (path, role)
            assert limits["vpc.amazonaws.com/efa"] == requests["vpc.amazonaws.com/efa"] == "1", (path, role)
            # no capability: IPC_LOCK / SYS_RESOURCE are never effective for the non-root Ray process
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}, (path, role)  # none added
            assert c["image"].endswith("-efa"), (path, role, c["image"])  # libfabric + aws-ofi-nccl
            env = env_of(c)
            assert EFA_ENV.items() <= env.items() and NCCL_ENV.items() <= env.items(), (path, role)
            assert not UNREAD & set(env) and "NCCL_PROTO" not in env, (path, role)
            if doc["kind"] == "PyTorchJob":  # the Llama job reads the Hub; nothing else gets the token
                assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
            else:
                assert "HF_TOKEN" not in env, (path, role)
            assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
            shm = next(v for v in pod["volumes"] if v["name"] == "shm")
            assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
            assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in pod["volumes"]
            assert {"name": "checkpoints", "mountPath": "/checkpoints"} in c["volumeMounts"]
            assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "g5.8xlarge"}
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
            assert requests["cpu"] == "28" and requests["memory"] == "112Gi"
            seen += 1
    assert seen >= 1 + 1 + 2 + 2  # standing cluster (head + group), a RayJob (head + group), the PyTorchJob (2)


def test_minikube_has_no_efa_gpu_or_nccl():
    for path, doc in workloads(REPO / "apps" / "minikube"):
        for role, pod in pod_specs(doc):
            c = pod["containers"][0]
            text = yaml.safe_dump(c)
            assert "vpc.amazonaws.com/efa" not in text and "nvidia.com/gpu" not in text, (path, role)
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert not set(env_of(c)) & (set(EFA_ENV) | set(NCCL_ENV)), (path, role)


def test_ray_token_auth_everywhere_eks_with_its_secret_and_minikube_with_kubernetes_tokens_on_its_standing_cluster():
    """eks: every Ray cluster takes the shared token of a Secret; minikube: the standing RayCluster takes people's
    Kubernetes tokens (docs/access.md), its job clusters run without auth (KubeRay drives a RayJob with a Secret's
    token, which minikube does not have)."""
    shared = {"mode": "token", "secretName": "ray-auth-token"}
    for env, standing, jobs in (("eks", shared, shared),
                                ("minikube", {"mode": "token", "enableK8sTokenAuth": True}, {"mode": "disabled"})):
        seen = 0
        for path, doc in workloads(REPO / "apps" / env):
            if doc["kind"] == "PyTorchJob":
                continue
            spec = doc["spec"].get("rayClusterSpec", doc["spec"])
            assert spec["authOptions"] == (standing if doc["kind"] == "RayCluster" else jobs), path
            seen += doc["kind"] == "RayCluster"
        assert seen, f"no standing RayCluster in apps/{env}"


def test_no_secret_value_anywhere_in_the_rendered_output():
    for path in (REPO / "apps").rglob("*.yaml"):
        doc = load_yaml(path.read_text())
        assert doc["kind"] != "Secret", path
    assert "hf_" not in (REPO / "environments" / "eks.yaml").read_text()


def _render_with(repo_copy, tmp_path, extra, replace=None):
    env = repo_copy / "environments" / "eks.yaml"
    text = env.read_text() + extra
    if replace:
        assert replace[0] in text
        text = text.replace(*replace)
    env.write_text(text)
    proc = run_generator(repo_copy, "render", "--env", "eks", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "out" / "apps" / "eks"


def test_switching_efa_off_removes_all_of_it(repo_copy, tmp_path):
    out = _render_with(repo_copy, tmp_path, "", ("  efa:\n    enabled: true\n", "  efa:\n    enabled: false\n"))
    pods = 0
    for path, doc in workloads(out):
        for role, pod in pod_specs(doc):
            c = pod["containers"][0]
            assert "vpc.amazonaws.com/efa" not in c["resources"]["limits"], (path, role)
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}, (path, role)
            assert not set(env_of(c)) & {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE", "NCCL_PROTO",
                                         "NCCL_NET", "NCCL_NET_PLUGIN"}
            assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"  # GPUs stay
            pods += 1
    assert pods >= 6


def test_instance_family_is_one_value(repo_copy, tmp_path):
    out = _render_with(repo_copy, tmp_path, "", ("    instanceFamily: g5\n", "    instanceFamily: p4d\n"))
    for _path, doc in workloads(out):
        for _role, pod in pod_specs(doc):
            c = pod["containers"][0]
            assert env_of(c)["FI_EFA_USE_DEVICE_RDMA"] == "1" and c["resources"]["limits"]["vpc.amazonaws.com/efa"] == "4"


def test_torchrun_job_renders_a_valid_pytorchjob(tmp_path):
    from validation.schema_validation import validate_manifests

    (path,) = app_dir(REPO, "eks", "job-fsdp-llama").glob("pytorchjob-fsdp-llama-*.yaml")
    doc = load_yaml(path.read_text())
    replicas = doc["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3
    assert doc["spec"]["nprocPerNode"] == "1"
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / path.name).write_text(path.read_text())
    location = os.environ.get("RAY_GITOPS_SCHEMA_LOCATION", str(REPO.parent / "shared" / "crds"))
    report = validate_manifests(tmp_path / "one", "1.34.0", location, env_name="torchrun", backend="in-process")
    assert report.ok and report.valid == 1, report.render()


def test_elastic_torchrun_has_no_master_and_a_c10d_rendezvous(repo_copy, tmp_path):
    out = _render_with(repo_copy, tmp_path, "", ("      workers: 3\n",
                       "      workers: 3\n      elastic: {enabled: true, minReplicas: 2, maxReplicas: 4}\n"))
    (path,) = app_dir(out.parent.parent, "eks", "job-fsdp-llama").glob("pytorchjob-*.yaml")
    spec = load_yaml(path.read_text())["spec"]
    assert "Master" not in spec["pytorchReplicaSpecs"]
    assert spec["elasticPolicy"]["rdzvBackend"] == "c10d" and spec["elasticPolicy"]["maxReplicas"] == 4


def test_each_run_dumps_its_nccl_flight_recorder_to_a_file_of_its_own():
    """Every job and every run wrote /checkpoints/nccl-flight-recorder-rank_<n>: a second job's or run's dump
    overwrote the first's. The run's own name is in the path now (a new run, a new name)."""
    seen = {}
    for path in sorted((REPO / "apps" / "eks").rglob("*.yaml")):
        doc = load_yaml(path.read_text())
        text = yaml.safe_dump(doc)
        if "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in text:
            continue
        values = {e["value"] for e in _env_entries(doc) if e.get("name") == "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}
        assert values == {f"/checkpoints/nccl-flight-recorder-{doc['metadata']['name']}-rank_"}, (path.name, values)
        seen[doc["metadata"]["name"]] = values
    assert len(seen) >= 3, seen  # the standing cluster and the eks jobs


def _env_entries(node):
    if isinstance(node, dict):
        if isinstance(node.get("env"), list):
            yield from node["env"]
        for value in node.values():
            yield from _env_entries(value)
    elif isinstance(node, list):
        for value in node:
            yield from _env_entries(value)
