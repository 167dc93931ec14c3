"""The e2e harness's own logic, without a cluster (make test): the world map, the offline sources, the component
pins, the egress routes, the Ray job API stand-in, kwok's stages, the fake nodes, process supervision."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import types
from datetime import UTC, datetime

import pytest
import yaml

from e2e import components, egress, kwok_stages, nodes, procs, ray_jobs, world
from tests.support import REPO, load_yaml, load_yaml_all

EKS_SERVER = "https://eks-training.example.internal"


def _repo_copy(tmp_path):
    import shutil
    root = tmp_path / "repo"
    for name in ("argocd", "apps"):
        shutil.copytree(REPO / name, root / name)
    return root


def _world(tmp_path) -> world.World:
    w = world.World()
    w.urls["https://github.com/example-org/ray-gitops.git"] = "file:///e2e/ray-gitops.git"
    w.urls["https://github.com/ray-project/kuberay.git"] = "file:///e2e/kuberay.git"
    w.endpoints[EKS_SERVER] = world.Endpoint("https://127.0.0.1:6443", b"-----BEGIN CERTIFICATE-----\nE2E\n",
                                             tmp_path / "credential.json")
    return w


def test_world_map_touches_only_argocd_and_only_the_endpoints(tmp_path):
    root = _repo_copy(tmp_path)
    before_apps = {p: p.read_bytes() for p in (root / "apps").rglob("*.yaml")}
    changed = _world(tmp_path).rewrite_argocd(root)
    assert "argocd/root.yaml" in changed and "argocd/managed/secret-cluster-eks.yaml" in changed
    assert {p: p.read_bytes() for p in (root / "apps").rglob("*.yaml")} == before_apps
    secret = load_yaml((root / "argocd/managed/secret-cluster-eks.yaml").read_text())
    config = json.loads(secret["stringData"]["config"])
    assert secret["stringData"]["server"] == "https://127.0.0.1:6443"
    assert "awsAuthConfig" not in config
    assert config["execProviderConfig"] == {"command": "cat", "args": [str(tmp_path / "credential.json")],
                                            "apiVersion": "client.authentication.k8s.io/v1beta1"}
    assert base64.b64decode(config["tlsClientConfig"]["caData"]).startswith(b"-----BEGIN CERTIFICATE-----\nE2E")
    project = load_yaml((root / "argocd/managed/appproject-eks.yaml").read_text())
    # the map names eks's first cluster only here: its second keeps its committed server
    assert {d["server"] for d in project["spec"]["destinations"]} == {"https://127.0.0.1:6443",
                                                                      "https://eks-training-b.example.internal",
                                                                      "https://eks-training-hub.example.internal"}
    # what the map does not name stays as committed (the upstream Helm repository here)
    app = load_yaml((root / "argocd/managed/application-eks-kuberay-operator.yaml").read_text())
    assert app["spec"]["source"]["repoURL"] == "https://ray-project.github.io/kuberay-helm/"


def test_a_cluster_secret_without_ca_stays_without(tmp_path):
    """The e2e cluster must show what a missing CA does (Argo CD cannot connect), not paper over it."""
    root = _repo_copy(tmp_path)
    path = root / "argocd/managed/secret-cluster-eks.yaml"
    doc = load_yaml(path.read_text())
    config = json.loads(doc["stringData"]["config"])
    config["tlsClientConfig"].pop("caData")
    doc["stringData"]["config"] = json.dumps(config)
    path.write_text(yaml.safe_dump(doc))
    _world(tmp_path).rewrite_argocd(root)
    rewritten = json.loads(load_yaml(path.read_text())["stringData"]["config"])
    assert "caData" not in rewritten["tlsClientConfig"]


def test_world_map_round_trips_through_its_file(tmp_path):
    w = _world(tmp_path)
    w.save(tmp_path / "world.json")
    assert world.World.load(tmp_path / "world.json") == world.World(urls=w.urls, endpoints=w.endpoints)


def test_referenced_sources_are_the_operators_not_this_repository():
    sources = world.referenced_sources(REPO)
    assert {(s["repoURL"], s["targetRevision"]) for s in sources} == {
        ("https://github.com/ray-project/kuberay.git", "v1.7.0"),
        ("https://ray-project.github.io/kuberay-helm/", "1.7.0"),
        ("https://github.com/kubeflow/trainer.git", "v1.9.4"),
        ("https://github.com/kubernetes-sigs/kueue.git", "v0.17.0")}


def test_the_training_operator_built_is_the_one_argo_cd_installs():
    """One version: the component's go.mod pins what the Argo CD layer deploys."""
    deployed = {s["targetRevision"] for s in world.referenced_sources(REPO) if "trainer" in s["repoURL"]}
    assert deployed == {components.BY_NAME["training-operator"].version}


def test_the_kueue_built_is_the_one_argo_cd_installs():
    deployed = {s["targetRevision"] for s in world.referenced_sources(REPO) if "kueue" in s["repoURL"]}
    assert deployed == {components.BY_NAME["kueue"].version}


def test_kueue_reads_its_config_file_with_its_listen_addresses_moved(tmp_path):
    """Kueue's listen addresses are in its config file, a configMap volume mounted with subPath (one file, which a
    bind mount of the volume's directory cannot give): the operator pods' kubelet hands Kueue the projected file,
    with each address moved to the port chosen for it, and binds no directory over /controller_manager_config.yaml."""
    from e2e import operator_pods
    op = operator_pods.operator_for("registry.k8s.io/kueue/kueue:v0.17.0")
    assert op is not None and op.binary == "kueue" and op.container_ports == {9443: "webhook", 8082: "visibility"}
    app = load_yaml((REPO / "argocd/managed/application-eks-kueue.yaml").read_text())
    config = load_yaml(app["spec"]["source"]["kustomize"]["patches"][0]["patch"])["data"][
        "controller_manager_config.yaml"]
    volume = tmp_path / "volumes" / "manager-config"
    volume.mkdir(parents=True)
    (volume / "controller_manager_config.yaml").write_text(config)
    mounts = [{"path": "/controller_manager_config.yaml", "host": str(volume), "kind": "configmap",
               "sub_path": "controller_manager_config.yaml"}]
    ports = {"webhook": 40001, "probe": 40002, "metrics": 40003, "visibility": 40004}
    arg = operator_pods.OperatorPods._file_argument("--config=/controller_manager_config.yaml", mounts, tmp_path,
                                                    op, ports)
    flag, _, path = arg.partition("=")
    assert flag == "--config" and path.startswith(str(tmp_path))
    moved = load_yaml(open(path).read())
    assert moved["webhook"]["port"] == 40001
    assert moved["health"]["healthProbeBindAddress"] == "127.0.0.1:40002"
    assert moved["metrics"]["bindAddress"] == "127.0.0.1:40003"
    assert moved["integrations"] == load_yaml(config)["integrations"], "nothing else changes"
    assert operator_pods.OperatorPods._file_argument("--zap-log-level=2", mounts, tmp_path, op, ports) == \
        "--zap-log-level=2"


def test_kuberay_substitution_is_declared():
    kuberay = components.BY_NAME["kuberay"]
    app = load_yaml((REPO / "argocd/managed/application-eks-kuberay-operator.yaml").read_text())
    assert kuberay.pinned == "v" + app["spec"]["source"]["targetRevision"]
    assert kuberay.version != kuberay.pinned  # the proxy does not serve v1.7.0: README and docs say so


def test_component_versions_come_from_go_mod(tmp_path):
    go_mod = tmp_path / "go.mod"
    go_mod.write_text("module x\n\nrequire (\n\tk8s.io/kubernetes v1.34.4\n)\n\nreplace a/b => a/b v0.0.1\n")
    assert components.module_version(go_mod, "k8s.io/kubernetes") == "v1.34.4"
    assert components.module_version(go_mod, "a/b") == "v0.0.1"
    with pytest.raises(ValueError, match="no requirement of other/module"):
        components.module_version(go_mod, "other/module")


def test_the_kubernetes_build_carries_its_version():
    flags = components.BY_NAME["kubernetes"].linker_flags()
    assert "-X k8s.io/component-base/version.gitVersion=v1.34.4" in flags
    assert "-X k8s.io/component-base/version.gitMinor=34" in flags


def test_one_go_build_names_each_binary_as_go_does():
    """A component's binaries come from one ``go build -o dir/``: the names Go gives them are found again."""
    assert components.default_exec_name("sigs.k8s.io/kustomize/kustomize/v5") == "kustomize"
    assert components.default_exec_name("github.com/kubeflow/training-operator/cmd/training-operator.v1") == \
        "training-operator.v1"
    assert components.default_exec_name("github.com/argoproj/argo-cd/v3/cmd") == "cmd"
    assert components.default_exec_name("k8s.io/kubernetes/cmd/kube-apiserver") == "kube-apiserver"
    for component in components.COMPONENTS:  # go build refuses two main packages with one name in one -o dir
        names = [components.default_exec_name(p) for p in component.binaries.values()]
        assert len(set(names)) == len(names), component.name


def test_every_component_pins_its_checksums():
    for component in components.COMPONENTS:
        assert (component.directory / "go.sum").stat().st_size > 0, component.name


def test_egress_routes_services_by_ip_and_dns_name():
    svc = types.SimpleNamespace(spec=types.SimpleNamespace(cluster_ip="10.97.0.9"),
                                metadata=types.SimpleNamespace(namespace="kubeflow", name="training-operator"))
    routes = egress.ServiceRoutes(lambda: [svc], fallback=lambda ns, name, port: 9999 if port == 8265 else None)
    routes.add("kubeflow", "training-operator", 443, 41234)
    assert routes.resolve("10.97.0.9", 443) == ("127.0.0.1", 41234)
    assert routes.resolve("training-operator.kubeflow.svc", 443) == ("127.0.0.1", 41234)
    assert routes.resolve("x-head-svc.ray-training.svc.cluster.local", 8265) == ("127.0.0.1", 9999)
    assert routes.resolve("127.0.0.1", 10250) == ("127.0.0.1", 10250)  # kwok's kubelet endpoint
    assert routes.resolve("10.97.0.10", 443) is None
    assert routes.resolve("example.com", 443) is None
    routes.remove("kubeflow", "training-operator", 443)
    assert routes.resolve("10.97.0.9", 443) is None


def _pod(phase, exit_code=None, message=None, created=0):
    terminated = None
    if exit_code is not None:
        terminated = types.SimpleNamespace(exit_code=exit_code, message=message,
                                           finished_at=datetime(2026, 1, 1, 0, 5, tzinfo=UTC))
    return types.SimpleNamespace(
        metadata=types.SimpleNamespace(creation_timestamp=datetime(2026, 1, 1, 0, created, tzinfo=UTC)),
        status=types.SimpleNamespace(phase=phase, start_time=datetime(2026, 1, 1, tzinfo=UTC),
                                     container_statuses=[types.SimpleNamespace(
                                         state=types.SimpleNamespace(terminated=terminated))]))


RAYJOB = {"status": {"jobId": "digits-abc"}, "spec": {"entrypoint": "python -m training run spec.yaml"}}


@pytest.mark.parametrize("pods, status", [
    ([], "PENDING"),
    ([_pod("Pending")], "PENDING"),
    ([_pod("Running")], "RUNNING"),
    ([_pod("Succeeded", 0)], "SUCCEEDED"),
    ([_pod("Failed", 1, "boom", 0), _pod("Running", created=1)], "RUNNING"),  # the Job's retry runs
    ([_pod("Failed", 1, "boom")], "FAILED"),
])
def test_ray_job_api_answers_as_the_submitter_pod_ended(pods, status):
    info = ray_jobs.job_info(RAYJOB, pods)
    assert info["status"] == status and info["submission_id"] == "digits-abc"
    if status == "FAILED":
        assert info["message"] == "boom" and info["end_time"] > 0


POD_READY = """apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
  next:
    statusTemplate: |
      phase: Running
"""


def test_kwok_stages_end_pods_on_demand_and_hold_them_waiting(tmp_path):
    module_dir = tmp_path / "kwok"
    for rel in kwok_stages.UPSTREAM:
        (module_dir / "kustomize/stage" / rel).parent.mkdir(parents=True, exist_ok=True)
        text = POD_READY if rel.endswith("pod-ready.yaml") else f"kind: Stage\nmetadata: {{name: {rel}}}\n"
        (module_dir / "kustomize/stage" / rel).write_text(text)
    path = kwok_stages.write(tmp_path / "stages.yaml", module_dir)
    docs = list(load_yaml_all(path.read_text()))
    ours = {d["metadata"]["name"]: d for d in docs if d["metadata"]["name"].startswith("e2e-")}
    assert set(ours) == {"e2e-pod-succeed", "e2e-pod-fail", "e2e-pod-waiting"}
    assert "phase: Succeeded" in ours["e2e-pod-succeed"]["spec"]["next"]["statusTemplate"]
    assert "phase: Failed" in ours["e2e-pod-fail"]["spec"]["next"]["statusTemplate"]
    held = ours["e2e-pod-waiting"]["spec"]
    assert "phase: Pending" in held["next"]["statusTemplate"] and "waiting:" in held["next"]["statusTemplate"]
    assert {"key": f'.metadata.annotations["{kwok_stages.WAITING}"]', "operator": "Exists"} in \
        held["selector"]["matchExpressions"]
    ready = next(d for d in docs if d["metadata"]["name"] == "pod-ready")
    assert ready["spec"]["selector"]["matchExpressions"][-1] == {
        "key": f'.metadata.annotations["{kwok_stages.WAITING}"]', "operator": "DoesNotExist"}
    assert ready["spec"]["next"]["statusTemplate"] == "phase: Running\n"
    assert not any("pod-complete" in d["metadata"]["name"] for d in docs)  # it would complete every Job's pod
    # the second cluster of an environment of several: its job pods also succeed by themselves, after a delay,
    # unless a scenario ends them on demand; no other pod does
    auto = {d["metadata"]["name"]: d["spec"] for d in load_yaml_all(
        kwok_stages.write(tmp_path / "auto.yaml", module_dir, auto_finish_jobs=True).read_text())
        if d["metadata"]["name"].startswith("e2e-job-pod-auto-succeed")}
    assert len(auto) == len(kwok_stages.JOB_POD_LABELS)
    for spec, label in zip(auto.values(), kwok_stages.JOB_POD_LABELS, strict=True):
        assert {"key": f'.metadata.labels["{label}"]', "operator": "Exists"} in spec["selector"]["matchExpressions"]
        assert {"key": f'.metadata.annotations["{kwok_stages.EXIT_CODE}"]', "operator": "DoesNotExist"} in \
            spec["selector"]["matchExpressions"]
        assert spec["delay"] == {"durationMilliseconds": kwok_stages.AUTO_FINISH_SECONDS * 1000}
        assert "phase: Succeeded" in spec["next"]["statusTemplate"] and "exitCode: 0" in spec["next"]["statusTemplate"]


def test_pod_logs_are_cri_lines_in_files_a_logs_object_names(tmp_path):
    from datetime import datetime

    from e2e import pod_logs
    when = datetime(2026, 11, 24, 1, 2, 3, 456789, tzinfo=UTC)
    assert pod_logs.cri_line("epoch 1 loss 2.1", when=when) == "2026-11-24T01:02:03.456789000Z stdout F epoch 1 loss 2.1\n"
    created = []

    class Custom:
        def create_namespaced_custom_object(self, group, version, namespace, plural, body):
            created.append((group, version, namespace, plural, body))

    pod_logs.write(Custom(), tmp_path, "ray-training", "job-abc", ["main", "sidecar"], {"main": ["a", "b"]})
    pod_logs.write(Custom(), tmp_path, "ray-training", "job-abc", ["main", "sidecar"], {"main": ["c"]})
    current = pod_logs.log_file(tmp_path, "ray-training", "job-abc", "main")
    assert [line.split(" ", 3)[3] for line in current.read_text().splitlines()] == ["a", "b", "c"]
    (group, version, namespace, plural, body) = created[0]
    assert (group, version, namespace, plural) == ("kwok.x-k8s.io", "v1alpha1", "ray-training", "logs")
    assert body["metadata"] == {"name": "job-abc", "namespace": "ray-training"}
    assert [entry["containers"] for entry in body["spec"]["logs"]] == [["main"], ["sidecar"]]
    with pytest.raises(ValueError, match="has no container 'other'"):
        pod_logs.write(Custom(), tmp_path, "ray-training", "job-abc", ["main"], {"other": ["x"]})


def test_fake_nodes_look_like_the_environments():
    eks = {n["metadata"]["name"]: n for n in nodes.manifests("eks")}
    g5 = [n for n in eks.values() if n["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "g5.8xlarge"]
    assert g5 and all(n["status"]["capacity"]["nvidia.com/gpu"] == "1" for n in g5)
    assert all(n["status"]["capacity"]["vpc.amazonaws.com/efa"] == "1" for n in g5)
    assert all({"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in n["spec"]["taints"] for n in g5)
    # minikube's node is this machine (e2e/real_node.py): no kwok node, a real one named as minikube names its first
    assert nodes.manifests("minikube") == []
    assert nodes.real("minikube") == {"name": "minikube", "labels": {"minikube.k8s.io/name": "minikube",
                                                                     "minikube.k8s.io/primary": "true"}}
    with pytest.raises(KeyError, match="no nodes for environment 'staging'"):
        nodes.manifests("staging")


def test_bootstrap_knows_the_secrets_the_workloads_reference_out_of_git():
    """What `make bootstrap` names when missing and the e2e creates (e2e/gitops.py create_prerequisite_secrets):
    minikube's object store credentials, read by the store and by every Ray pod, are one of them."""
    from ops.bootstrap import referenced_secrets
    assert referenced_secrets(REPO / "apps" / "eks") == {
        ("ray-training", "ray-auth-token"): {"auth_token"}, ("ray-training", "hf-token"): {"token"}}
    assert referenced_secrets(REPO / "apps" / "minikube") == {
        ("ray-training", "checkpoint-store-credentials"): {"accessKeyId", "secretAccessKey"}}


def test_supervisor_restarts_what_exits_and_down_stops_what_is_left(tmp_path):
    sup = procs.Supervisor(tmp_path)
    proc = sup.start("short", [sys.executable, "-c", "import time; time.sleep(0.2)"])
    first = proc.popen.pid
    procs.wait_until(lambda: not proc.alive(), 10, 0.1, "the first run to end")
    deadline = time.monotonic() + 10
    while proc.popen.pid == first and time.monotonic() < deadline:
        sup.check()
        time.sleep(0.2)
    assert proc.popen.pid != first and proc.restarts == 1
    sup.stop_all()
    # a process a dead supervisor left behind is found by its pid file
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (tmp_path / "pids" / "orphan.pid").write_text(str(orphan.pid))
    assert procs.kill_recorded(tmp_path / "pids") == ["orphan"]
    assert orphan.wait(5) is not None and not (tmp_path / "pids" / "orphan.pid").exists()


def test_a_held_process_stays_down_until_released(tmp_path):
    """e2e.procs hold / release: a scenario stops a component (a worker cluster's API server) and keeps it down;
    the supervisor restarts it once released, not before."""
    sup = procs.Supervisor(tmp_path)
    proc = sup.start("server", [sys.executable, "-c", "import time; time.sleep(60)"])
    first = proc.popen.pid
    procs.hold(tmp_path, "server")
    assert not proc.alive()
    for _ in range(10):
        sup.check()
        time.sleep(0.1)
    assert not proc.alive() and proc.popen.pid == first, "a held process is not restarted"
    procs.release(tmp_path, "server")
    procs.wait_until(lambda: (sup.check(), proc.alive())[1], 10, 0.1, "the released process to start")
    assert proc.popen.pid != first
    procs.hold(tmp_path, "not-running")  # nothing to stop: held all the same
    assert (procs.held_dir(tmp_path) / "not-running").exists()
    sup.stop_all()


def test_free_ports_are_free():
    port = procs.free_port()
    assert 1024 < port < 65536 and not procs.port_open(port)


def test_mount_namespace_wrapper_binds_each_volume():
    argv = procs.in_mount_namespace(["/bin/op", "--flag"], [("/run/x", "/var/run/secrets/sa")])
    assert argv[0] == "unshare" and argv[-2:] == ["/bin/op", "--flag"]
    assert 'mount --bind "/run/x" "/var/run/secrets/sa"' in argv[argv.index("-c") + 1]
    if os.geteuid() != 0:
        assert "--map-root-user" in argv
