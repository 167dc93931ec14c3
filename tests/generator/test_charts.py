"""Each chart on its own: renders on its defaults, its schema rejects unknown keys and wrong types, lint passes."""
import json
import subprocess
import sys

import pytest
import yaml

from generator import charts
from tests.support import REPO, load_yaml, load_yaml_all, run_generator

CHARTS = sorted(charts.available(REPO))
RAY_CHARTS = sorted(p.name for p in charts.schema_charts(REPO))  # the charts built on training-lib
EXPECTED_KIND = {"ray-cluster": "RayCluster", "ray-job": "RayJob", "platform": "Namespace", "pytorch-job": "PyTorchJob"}


def helm(helm_bin, *args):
    return subprocess.run([helm_bin, *args], capture_output=True, text=True, cwd=REPO)


def test_there_are_charts():
    assert {"ray-cluster", "ray-job", "platform"} <= set(CHARTS)
    assert {"ray-cluster", "ray-job"} <= set(RAY_CHARTS)


def test_platform_schema_rejects_a_wrong_type(helm_bin):
    proc = helm(helm_bin, "template", "charts/platform", "--set", "checkpoints.mode=sometimes")
    assert proc.returncode != 0 and "checkpoints/mode" in proc.stderr


@pytest.mark.parametrize("chart", CHARTS)
def test_chart_renders_on_its_defaults_alone(helm_bin, chart):
    proc = helm(helm_bin, "template", f"charts/{chart}")
    assert proc.returncode == 0, proc.stderr
    kinds = {d["kind"] for d in load_yaml_all(proc.stdout) if d}
    assert EXPECTED_KIND[chart] in kinds


@pytest.mark.parametrize("chart", CHARTS)
def test_chart_lints_strict_on_its_defaults(helm_bin, chart):
    proc = helm(helm_bin, "lint", "--strict", f"charts/{chart}")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("chart", CHARTS)
def test_schema_rejects_unknown_keys(helm_bin, chart):
    for bad in ("bogus=1", "head.bogus=1", "image.registry=x") if chart in RAY_CHARTS else ("bogus=1",):
        proc = helm(helm_bin, "template", f"charts/{chart}", "--set", bad)
        assert proc.returncode != 0, bad
        assert "additional properties" in proc.stderr or "not allowed" in proc.stderr, proc.stderr


@pytest.mark.parametrize("chart", RAY_CHARTS)
def test_schema_rejects_wrong_types(helm_bin, chart):
    for bad in ("head.gpus=two", "workerGroups.workers.replicas=many", "shm.enabled=maybe"):
        proc = helm(helm_bin, "template", f"charts/{chart}", "--set-string" if "=" in bad else "--set", bad)
        assert proc.returncode != 0, bad
        assert "want" in proc.stderr or "expected" in proc.stderr, proc.stderr


def test_ray_job_on_an_existing_cluster_has_no_embedded_cluster(helm_bin):
    proc = helm(helm_bin, "template", "charts/ray-job", "--set", "job.clusterSelector.ray\\.io/cluster=shared")
    assert proc.returncode == 0, proc.stderr
    job = next(d for d in load_yaml_all(proc.stdout) if d and d["kind"] == "RayJob")
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": "shared"}
    assert "rayClusterSpec" not in job["spec"]


def test_efa_family_is_checked(helm_bin):
    proc = helm(helm_bin, "template", "charts/ray-cluster", "--set", "efa.enabled=true",
                "--set", "head.gpus=1", "--set", "efa.instanceFamily=p4d")
    assert proc.returncode == 0, proc.stderr
    head = load_yaml(proc.stdout.split("---")[-1])["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in head["env"]}
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1" and head["resources"]["limits"]["vpc.amazonaws.com/efa"] == "4"


def test_chart_schemas_are_up_to_date():
    assert charts.write_schemas(REPO, check_only=True) == [], "run `python -m generator chart-schemas`"


def test_lint_strict_with_every_environments_values():
    proc = subprocess.run([sys.executable, "-m", "validation", "lint"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "lint minikube/ray-cluster" in proc.stdout and "lint eks/job-digits-torch" in proc.stdout


def test_chart_readmes_are_up_to_date_and_every_value_key_is_described():
    from generator import chart_docs
    assert chart_docs.write_readmes(REPO, check_only=True) == [], "run `python -m generator chart-schemas`"
    for chart in ("platform", "ray-cluster", "ray-job", "pytorch-job"):
        schema = json.loads((REPO / "charts" / chart / "values.schema.json").read_text())
        rows = chart_docs.rows(schema, chart_docs.effective_defaults(REPO, REPO / "charts" / chart))
        assert rows and [key for key, _, _, description in rows if not description] == [], chart
    helpers = chart_docs.helpers(REPO / "charts" / "training-lib")
    assert helpers and [name for name, _, doc in helpers if not doc] == []


def test_helm_show_readme_documents_the_chart(helm_bin):
    proc = helm(helm_bin, "show", "readme", "charts/ray-job")
    assert proc.returncode == 0, proc.stderr
    assert "| `job.entrypoint` | string | `\"python -m training run /etc/training/spec.yaml\"` |" in proc.stdout
    assert "| `workerGroups.<name>.replicas` | integer |" in proc.stdout
    assert "`tlib.networkPolicy`" in helm(helm_bin, "show", "readme", "charts/training-lib").stdout


def test_a_schema_change_makes_the_readmes_stale(repo_copy):
    schema = repo_copy / "charts/training-lib/cluster.schema.yaml"
    schema.write_text(schema.read_text().replace("render the NetworkPolicy", "render the NetworkPolicy (changed)"))
    proc = run_generator(repo_copy, "check-rendered")
    assert proc.returncode == 1
    assert "charts/ray-job/README.md is stale: run `python -m generator chart-schemas`" in proc.stdout, proc.stdout
    assert run_generator(repo_copy, "chart-schemas").returncode == 0
    assert "render the NetworkPolicy (changed)" in (repo_copy / "charts/ray-job/README.md").read_text()


def _docs(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in load_yaml_all(proc.stdout) if d}


def test_platform_object_store(helm_bin):
    """The checkpoints' object store: a claim by default (kept by Argo CD), an emptyDir by a value, sidecar metadata
    by a value; credentials only by reference; a NetworkPolicy admitting the Ray pods alone; refused without a
    credentials Secret."""
    base = ["template", "charts/platform", "--namespace", "ray-training", "--set", "objectStore.enabled=true"]
    docs = _docs(helm(helm_bin, *base))
    assert {"PersistentVolumeClaim/checkpoint-store-data", "Deployment/checkpoint-store", "Service/checkpoint-store",
            "NetworkPolicy/checkpoint-store-ingress"} <= set(docs)
    assert docs["PersistentVolumeClaim/checkpoint-store-data"]["metadata"]["annotations"][
        "argocd.argoproj.io/sync-options"] == "Prune=false,Delete=false"
    pod = docs["Deployment/checkpoint-store"]["spec"]["template"]["spec"]
    [server], [init] = pod["containers"], pod["initContainers"]
    assert server["command"] == ["/usr/local/bin/versitygw"]
    assert server["args"] == ["--port", ":7070", "--health", "/_/health", "posix", "/data/buckets"]
    assert init["command"] == ["mkdir", "-p", "/data/buckets/checkpoints"]
    assert {e["name"]: e["valueFrom"]["secretKeyRef"] for e in server["env"] if "valueFrom" in e} == {
        "ROOT_ACCESS_KEY_ID": {"name": "checkpoint-store-credentials", "key": "accessKeyId"},
        "ROOT_SECRET_ACCESS_KEY": {"name": "checkpoint-store-credentials", "key": "secretAccessKey"}}
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in (server, init):
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                 "capabilities": {"drop": ["ALL"]}}
    assert {v["name"]: next(k for k in v if k != "name") for v in pod["volumes"]} == {
        "data": "persistentVolumeClaim", "scratch": "emptyDir"}
    [rule] = docs["NetworkPolicy/checkpoint-store-ingress"]["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {
        "matchLabels": {"app.kubernetes.io/part-of": "ray-gitops"},
        "matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In",
                              "values": ["ray-cluster", "ray-job"]}]}}]
    assert rule["ports"] == [{"port": 7070, "protocol": "TCP"}]

    docs = _docs(helm(helm_bin, *base, "--set", "objectStore.storage.type=emptyDir",
                      "--set", "objectStore.metadata=sidecar"))
    assert "PersistentVolumeClaim/checkpoint-store-data" not in docs
    pod = docs["Deployment/checkpoint-store"]["spec"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "data", "emptyDir": {}}
    assert pod["containers"][0]["args"][-4:] == ["posix", "--sidecar", "/data/meta", "/data/buckets"]
    assert pod["initContainers"][0]["command"] == ["mkdir", "-p", "/data/buckets/checkpoints", "/data/meta"]

    proc = helm(helm_bin, *base, "--set", "objectStore.credentialsSecret=")
    assert proc.returncode != 0 and "at '/objectStore/credentialsSecret': '' does not match" in proc.stderr


def _ray_env(docs: dict) -> dict:
    [cluster] = [d for d in docs.values() if d["kind"] == "RayCluster"]
    container = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}, container


def test_cluster_checkpoints_on_s3(helm_bin):
    """store: s3 gives every Ray container the storage URI, the endpoint, the region and the credentials by
    reference, and mounts no claim; store: volume keeps the claim; each refuses what it cannot work without."""
    s3 = ["template", "charts/ray-cluster", "--set", "checkpoints.enabled=true", "--set", "checkpoints.store=s3",
          "--set", "checkpoints.s3.bucket=checkpoints", "--set", "checkpoints.s3.prefix=runs",
          "--set", "checkpoints.s3.endpoint=http://checkpoint-store.ray-training.svc:7070/",
          "--set", "checkpoints.s3.credentialsSecret=checkpoint-store-credentials"]
    env, container = _ray_env(_docs(helm(helm_bin, *s3)))
    assert env["TRAINING_STORAGE_PATH"] == "s3://checkpoints/runs"
    assert env["AWS_ENDPOINT_URL_S3"] == "http://checkpoint-store.ray-training.svc:7070"
    assert env["AWS_REGION"] == "us-east-1"
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "checkpoint-store-credentials", "key": "accessKeyId"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "checkpoint-store-credentials",
                                                             "key": "secretAccessKey"}}
    assert "checkpoints" not in {m["name"] for m in container["volumeMounts"]}
    env, _ = _ray_env(_docs(helm(helm_bin, *s3[:-2], "--set", "checkpoints.s3.prefix=")))
    assert env["TRAINING_STORAGE_PATH"] == "s3://checkpoints" and "AWS_ACCESS_KEY_ID" not in env  # IRSA: the pod's own
    proc = helm(helm_bin, *s3[:6])
    assert proc.returncode != 0 and "checkpoints.store s3 needs checkpoints.s3.bucket" in proc.stderr
    env, container = _ray_env(_docs(helm(helm_bin, "template", "charts/ray-cluster", "--set",
                                         "checkpoints.enabled=true", "--set", "checkpoints.claimName=fsx-claim")))
    assert env["TRAINING_STORAGE_PATH"] == "/checkpoints" and "AWS_ENDPOINT_URL_S3" not in env
    assert {"name": "checkpoints", "mountPath": "/checkpoints"} in container["volumeMounts"]
    proc = helm(helm_bin, "template", "charts/ray-cluster", "--set", "checkpoints.enabled=true")
    assert proc.returncode != 0 and "needs checkpoints.claimName" in proc.stderr


@pytest.mark.parametrize("chart", ["ray-cluster", "ray-job"])
def test_metrics_are_closed_unless_metrics_from_names_who_scrapes(helm_bin, chart, tmp_path):
    """Ray's metrics (8080 on every Ray pod) were closed by the policy with no way to open them: metricsFrom."""
    def policy(*args):
        proc = helm(helm_bin, "template", f"charts/{chart}", *args)
        assert proc.returncode == 0, proc.stderr
        return next(d for d in load_yaml_all(proc.stdout) if d and d["kind"] == "NetworkPolicy")
    closed = policy()
    assert not any({"port": 8080, "protocol": "TCP"} in (r.get("ports") or []) for r in closed["spec"]["ingress"])
    values = tmp_path / "values.yaml"
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    values.write_text(yaml.safe_dump({"networkPolicy": {"metricsFrom": [peer]}}))
    opened = policy("-f", str(values))
    rules = [r for r in opened["spec"]["ingress"] if {"port": 8080, "protocol": "TCP"} in (r.get("ports") or [])]
    assert rules == [{"from": [peer], "ports": [{"port": 8080, "protocol": "TCP"}]}], opened["spec"]["ingress"]


def test_only_the_autoscaler_container_gets_a_service_account_token(helm_bin, tmp_path):
    """An autoscaling head mounted its token in every container (automountServiceAccountToken at pod level), so any
    job submitted to the cluster could patch its pods; now the pod mounts none and KubeRay's autoscaler sidecar
    alone mounts a projected token (autoscalerOptions.volumeMounts)."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"autoscaler": {"enabled": True}}))
    proc = helm(helm_bin, "template", "charts/ray-cluster", "-f", str(values))
    assert proc.returncode == 0, proc.stderr
    spec = next(d for d in load_yaml_all(proc.stdout) if d and d["kind"] == "RayCluster")["spec"]
    sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    head = spec["headGroupSpec"]["template"]["spec"]
    assert head["automountServiceAccountToken"] is False
    assert not any(m["mountPath"] == sa_dir for c in head["containers"] for m in c.get("volumeMounts") or [])
    mounts = {m["mountPath"]: m for m in spec["autoscalerOptions"]["volumeMounts"]}
    assert mounts[sa_dir]["readOnly"] is True and "/tmp" in mounts
    volume = next(v for v in head["volumes"] if v["name"] == mounts[sa_dir]["name"])
    sources = {next(iter(s)) for s in volume["projected"]["sources"]}
    assert sources == {"serviceAccountToken", "configMap", "downwardAPI"}


@pytest.mark.parametrize("chart, values, refusal", [
    ("ray-cluster", {"auth": {"mode": "disabled", "kubernetesTokens": True}}, "needs auth.mode token"),
    ("ray-cluster", {"auth": {"mode": "token", "secretName": "s", "kubernetesTokens": True}}, "exclude each other"),
    ("ray-cluster", {"auth": {"mode": "token", "kubernetesTokens": True}, "autoscaler": {"enabled": True}},
     "autoscaler's service-account token"),
    ("ray-job", {"auth": {"mode": "token", "kubernetesTokens": True}}, "for the standing RayCluster"),
    ("ray-cluster", {"auth": {"mode": "token"}}, "needs auth.secretName"),
])
def test_kubernetes_token_auth_is_refused_where_it_cannot_work(helm_bin, tmp_path, chart, values, refusal):
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    proc = helm(helm_bin, "template", f"charts/{chart}", "-f", str(path))
    assert proc.returncode != 0 and refusal in proc.stderr, proc.stderr


def test_kubernetes_token_auth_runs_the_ray_pods_as_the_clusters_account(helm_bin, tmp_path):
    """Ray's validator calls the API server with the pod's service-account token, so every Ray pod mounts it, as the
    account named like the cluster (or serviceAccountName); KubeRay gets no Secret name."""
    for extra, account in (({}, "release-name"), ({"serviceAccountName": "ray-tokens"}, "ray-tokens")):
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump({"auth": {"mode": "token", "kubernetesTokens": True}, **extra}))
        proc = helm(helm_bin, "template", "charts/ray-cluster", "-f", str(path))
        assert proc.returncode == 0, proc.stderr
        spec = next(d for d in load_yaml_all(proc.stdout) if d and d["kind"] == "RayCluster")["spec"]
        assert spec["authOptions"] == {"mode": "token", "enableK8sTokenAuth": True}
        for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
            pod = group["template"]["spec"]
            assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == (account, True)
