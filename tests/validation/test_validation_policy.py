"""Policy rules: each has fixtures that break it (fixtures/policy/<rule>/) and passes on fixtures/apps/good."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import load_yaml
from tests.validation.support import FIXTURES, KUBE_VERSION
from validation import RULES, EnvFacts, check_documents, check_policies, validate_manifests
from validation.manifests import Manifest
from validation.policy import image_problem

GOOD = FIXTURES / "apps" / "good"
POLICY = FIXTURES / "policy"
ENVIRONMENTS = FIXTURES / "environments"

GPU_ENV = EnvFacts("gpu", KUBE_VERSION, gpu_nodes=True, dashboard_exposure_allowed=False, efa_nodes=True)
CPU_ENV = EnvFacts("cpu", KUBE_VERSION, gpu_nodes=False, dashboard_exposure_allowed=False, efa_nodes=False)


def _found(violations):
    return sorted((v.rule, v.file.rsplit("/", 1)[-1], v.where) for v in violations)


def test_good_environment_passes_every_rule():
    assert check_policies(GOOD, GPU_ENV, [ENVIRONMENTS / "good.yaml"]) == []


def test_every_rule_has_a_breaking_fixture():
    assert {p.name for p in POLICY.iterdir() if p.is_dir()} == set(RULES)


def test_policy_fixtures_are_schema_valid(crds):
    """Each negative policy fixture fails for the policy reason only: it is a valid resource."""
    for rule_dir in POLICY.iterdir():
        report = validate_manifests(rule_dir, KUBE_VERSION, crds, backend="in-process")
        assert report.ok, report.render()


def test_resources_required():
    found = _found(check_policies(POLICY / "resources-required", GPU_ENV))
    assert found == [
        ("resources-required", "raycluster-no-limits.yaml", "spec.headGroupSpec.template.spec.containers[0].resources"),
        ("resources-required", "raycluster-no-limits.yaml",
         "spec.headGroupSpec.template.spec.initContainers[0].resources"),
        ("resources-required", "raycluster-no-limits.yaml",
         "spec.workerGroupSpecs[0].template.spec.containers[0].resources"),
    ]
    messages = [v.message for v in check_policies(POLICY / "resources-required", GPU_ENV)]
    assert any("init container 'init' has no requests.cpu, requests.memory, limits.cpu, limits.memory" in m
               for m in messages)
    assert any("container 'ray-worker' has no requests.memory, limits.memory" in m for m in messages)


def test_image_pinned():
    found = _found(check_policies(POLICY / "image-pinned", GPU_ENV))
    assert found == [
        ("image-pinned", "deployment-untagged.yaml", "spec.template.spec.containers[0].image"),
        ("image-pinned", "rayjob-latest.yaml", "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].image"),
        ("image-pinned", "rayjob-latest.yaml", "spec.rayClusterSpec.headGroupSpec.template.spec.containers[1].image"),
        ("image-pinned", "rayjob-latest.yaml", "spec.submitterPodTemplate.spec.containers[0].image"),
    ]


@pytest.mark.parametrize("image, ok", [
    ("rayproject/ray:2.60.0-py311-gpu", True),
    ("rayproject/ray@sha256:" + "a" * 64, True),
    ("registry.example.com:5000/ray:2.60.0", True),
    ("rayproject/ray:2.60.0@sha256:" + "b" * 64, True),
    ("rayproject/ray", False),
    ("rayproject/ray:latest", False),
    ("rayproject/ray:LATEST", False),
    ("rayproject/ray:latest-gpu", False),
    ("rayproject/ray:nightly", False),
    ("registry.example.com:5000/ray", False),
    ("rayproject/ray@sha256:abc", False),
    ("", False),
    (None, False),
])
def test_image_problem(image, ok):
    assert (image_problem(image) is None) == ok


def test_no_plaintext_secrets_in_rendered_output():
    found = _found(check_policies(POLICY / "no-plaintext-secrets", GPU_ENV))
    assert found == [
        ("no-plaintext-secrets", "application-helm-password.yaml", "spec.source.helm.parameters[0].value"),
        ("no-plaintext-secrets", "application-helm-password.yaml", "spec.source.helm.values"),
        ("no-plaintext-secrets", "application-helm-password.yaml", "spec.source.repoURL"),
        ("no-plaintext-secrets", "configmap-api-key.yaml", "data.WANDB_API_KEY"),
        ("no-plaintext-secrets", "raycluster-literal-token.yaml", "spec.headGroupSpec.template.spec.containers[0].args"),
        ("no-plaintext-secrets", "raycluster-literal-token.yaml",
         "spec.headGroupSpec.template.spec.containers[0].env[0].value"),
        ("no-plaintext-secrets", "secret-cluster-bearer-token.yaml", "stringData.config"),
        ("no-plaintext-secrets", "secret-hf-token.yaml", "stringData.token"),
    ]


def test_secrets_committed_as_secret_kind():
    """Typed and base64 data are checked; an Argo CD cluster Secret without credentials passes (good tree)."""
    import base64

    def b64(text):
        return base64.b64encode(text.encode()).decode()

    docs = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
         "data": {"tls.crt": b64("-----BEGIN CERTIFICATE-----"), "tls.key": b64("k")}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "repo"},
         "data": {"url": b64("https://github.com/example/x.git"), "sshPrivateKey": b64("k"),
                  "config": b64('{"password": "p"}')}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "empty"}, "stringData": {"token": ""}},
    ]
    found = sorted(v.where for v in check_documents([_manifest(d, f"{i}.yaml") for i, d in enumerate(docs)],
                                                     GPU_ENV, ["no-plaintext-secrets"]))
    assert found == ["data.config", "data.sshPrivateKey", 'data["tls.key"]']


def test_no_plaintext_secrets_in_environment_files():
    violations = check_policies(GOOD, GPU_ENV, [ENVIRONMENTS / "leaky.yaml", ENVIRONMENTS / "good.yaml"])
    assert _found(violations) == [
        ("no-plaintext-secrets", "leaky.yaml", "huggingFace.token"),
        ("no-plaintext-secrets", "leaky.yaml", "mlflow.postgresql.auth.password"),
        ("no-plaintext-secrets", "leaky.yaml", "trainer.extraEnv[0].value"),
    ]
    assert str(violations[0]).startswith("no-plaintext-secrets: ")


def test_gpu_only_on_gpu_env():
    assert check_policies(POLICY / "gpu-only-on-gpu-env", GPU_ENV) == []
    found = _found(check_policies(POLICY / "gpu-only-on-gpu-env", CPU_ENV))
    assert found == [
        ("gpu-only-on-gpu-env", "job-gpu.yaml", "spec.template.spec.containers[0].resources"),
        ("gpu-only-on-gpu-env", "rayjob-num-gpus.yaml", "spec.entrypointNumGpus"),
        ("gpu-only-on-gpu-env", "rayjob-num-gpus.yaml", "spec.rayClusterSpec.workerGroupSpecs[0].rayStartParams.num-gpus"),
    ]


def test_gpu_requests_in_the_good_tree_break_a_cpu_environment():
    rules = {v.rule for v in check_policies(GOOD, CPU_ENV)}
    assert rules == {"gpu-only-on-gpu-env", "efa-only-on-efa-env"}


def test_efa_complete():
    violations = check_policies(POLICY / "efa-complete", GPU_ENV)
    assert _found(violations) == [
        ("efa-complete", "pytorchjob-efa-incomplete.yaml", "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]"),
        ("efa-complete", "pytorchjob-efa-incomplete.yaml", "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]"),
    ]
    worker = next(v for v in violations if "Worker" in v.where)
    assert "FI_PROVIDER is 'tcp', expected 'efa'" in worker.message
    master = next(v for v in violations if "Master" in v.where)
    assert "FI_PROVIDER is not set" in master.message
    # legacy for current aws-ofi-nccl, and capabilities do nothing for a non-root process: not demanded
    for legacy in ("FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE", "NCCL_PROTO", "IPC_LOCK", "SYS_RESOURCE"):
        assert legacy not in worker.message and legacy not in master.message


def test_efa_image():
    violations = check_policies(POLICY / "efa-image", GPU_ENV)
    assert _found(violations) == [
        ("efa-image", "raycluster-efa-on-gpu-image.yaml",
         "spec.workerGroupSpecs[0].template.spec.containers[0].image")]
    assert "ray-training:0.1.0-gpu" in violations[0].message and "VARIANT=efa" in violations[0].message


def test_efa_only_on_efa_env():
    assert check_policies(POLICY / "efa-only-on-efa-env", GPU_ENV) == []
    no_efa = EnvFacts("no-efa", KUBE_VERSION, gpu_nodes=True, efa_nodes=False)
    assert _found(check_policies(POLICY / "efa-only-on-efa-env", no_efa)) == [
        ("efa-only-on-efa-env", "rayjob-efa.yaml",
         "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].resources")]


def test_efa_only_on_efa_env_is_skipped_when_unknown():
    unknown = EnvFacts("x", KUBE_VERSION, gpu_nodes=True)
    assert check_policies(GOOD, unknown) == []


def test_dashboard_not_exposed():
    found = _found(check_policies(POLICY / "dashboard-not-exposed", GPU_ENV))
    assert found == [
        ("dashboard-not-exposed", "ingress-dashboard.yaml", "spec.rules[0].http.paths[0].backend"),
        ("dashboard-not-exposed", "networkpolicy-dashboard-open.yaml", "spec.ingress[0].from[0].ipBlock"),
        ("dashboard-not-exposed", "raycluster-nodeport.yaml", "spec.headGroupSpec.enableIngress"),
        ("dashboard-not-exposed", "raycluster-nodeport.yaml", "spec.headGroupSpec.serviceType"),
        ("dashboard-not-exposed", "service-dashboard-lb.yaml", "spec.type"),
    ]
    opted_in = EnvFacts("demo", KUBE_VERSION, gpu_nodes=True, dashboard_exposure_allowed=True)
    assert check_policies(POLICY / "dashboard-not-exposed", opted_in) == []


def _manifest(doc, name="x.yaml"):
    from pathlib import Path

    return Manifest(Path(name), doc=doc)


def test_dashboard_exposure_variants():
    head_cluster = {"headGroupSpec": {"headService": {"spec": {"type": "LoadBalancer"}},
                                      "template": {"spec": {"containers": []}}}}
    docs = [
        {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "s"},
         "spec": {"rayClusterConfig": head_cluster}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ext"},
         "spec": {"externalIPs": ["1.2.3.4"], "ports": [{"port": 8265}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "internal"},
         "spec": {"selector": {"ray.io/node-type": "head"}, "ports": [{"port": 8265}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "i"},
         "spec": {"defaultBackend": {"service": {"name": "internal", "port": {"number": 80}}}}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "r"},
         "spec": {"rules": [{"backendRefs": [{"name": "trainer-head-svc", "port": 8265}]}]}},
    ]
    found = sorted((v.file, v.where) for v in check_documents([_manifest(d, f"{i}.yaml") for i, d in enumerate(docs)],
                                                               GPU_ENV, ["dashboard-not-exposed"]))
    assert found == [
        ("0.yaml", "spec.rayClusterConfig.headGroupSpec.headService.spec.type"),
        ("1.yaml", "spec.externalIPs"),
        ("3.yaml", "spec.defaultBackend"),
        ("4.yaml", "spec.rules[0].backendRefs[0]"),
    ]


def test_network_policy():
    found = _found(check_policies(POLICY / "network-policy", GPU_ENV))
    assert found == [
        ("network-policy", "pytorchjob-unselected.yaml", "spec.pytorchReplicaSpecs.Master.template.metadata.labels"),
        ("network-policy", "pytorchjob-unselected.yaml", "spec.pytorchReplicaSpecs.Worker.template.metadata.labels"),
        ("network-policy", "raycluster-unselected.yaml", "spec.headGroupSpec.template.metadata.labels"),
        ("network-policy", "raycluster-unselected.yaml", "spec.workerGroupSpecs[0].template.metadata.labels"),
    ]
    # a policy selecting the cluster's labels (or the whole namespace) covers it; one in another namespace does not
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "c", "namespace": "a"},
               "spec": {"headGroupSpec": {"template": {"metadata": {"labels": {"app.kubernetes.io/instance": "c",
                                                                              "x": "y"}}}}}}

    def policy(namespace, selector):
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "p", "namespace": namespace}, "spec": {"podSelector": selector}}
    for doc, covered in ((policy("a", {"matchLabels": {"app.kubernetes.io/instance": "c"}}), True),
                         (policy("a", {}), True), (policy("b", {}), False),
                         (policy("a", {"matchLabels": {"app.kubernetes.io/instance": "d"}}), False)):
        found = check_documents([_manifest(cluster), _manifest(doc, "p.yaml")], GPU_ENV, ["network-policy"])
        assert (found == []) == covered, (doc, found)
    rayjob_on_existing = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "j"},
                          "spec": {"clusterSelector": {"ray.io/cluster": "c"}}}
    assert check_documents([_manifest(rayjob_on_existing)], GPU_ENV, ["network-policy"]) == []


def test_pod_templates_everywhere_are_walked():
    """Plain Pod, CronJob and RayService pod templates are found as well as the fixture kinds."""
    container = {"name": "c", "image": "busybox"}
    docs = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [container]}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
         "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [container]}}}}}},
        {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "s"},
         "spec": {"rayClusterConfig": {"headGroupSpec": {"template": {"spec": {"containers": [container]}}}}}},
    ]
    found = sorted((v.rule, v.where) for v in check_documents([_manifest(d) for d in docs], GPU_ENV,
                                                                ["image-pinned", "resources-required"]))
    assert found == [
        ("image-pinned", "spec.containers[0].image"),
        ("image-pinned", "spec.jobTemplate.spec.template.spec.containers[0].image"),
        ("image-pinned", "spec.rayClusterConfig.headGroupSpec.template.spec.containers[0].image"),
        ("resources-required", "spec.containers[0].resources"),
        ("resources-required", "spec.jobTemplate.spec.template.spec.containers[0].resources"),
        ("resources-required", "spec.rayClusterConfig.headGroupSpec.template.spec.containers[0].resources"),
    ]


def test_violation_format():
    [violation] = check_policies(POLICY / "image-pinned", GPU_ENV, rules=["image-pinned"])[:1]
    rule, file, where, message = str(violation).split(": ", 3)
    assert rule == "image-pinned" and file.endswith("deployment-untagged.yaml")
    assert where == "spec.template.spec.containers[0].image" and "pin a release tag" in message


def test_unreadable_manifest_is_reported(tmp_path):
    apps = tmp_path / "apps" / "x"
    apps.mkdir(parents=True)
    (apps / "bad.yaml").write_text("a: [\n")
    [violation] = check_policies(apps, GPU_ENV)
    assert violation.rule == "manifest-readable"


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="unknown rule"):
        check_policies(GOOD, GPU_ENV, rules=["no-such-rule"])


def test_env_facts_from_environment_file(tmp_path):
    facts = EnvFacts.from_environment_file(ENVIRONMENTS / "good.yaml")
    assert facts == EnvFacts("good", "1.34.0", gpu_nodes=True, dashboard_exposure_allowed=False, efa_nodes=True)
    bare = tmp_path / "bare.yaml"
    bare.write_text("kubernetesVersion: 1.33.0\n")
    assert EnvFacts.from_environment_file(bare) == EnvFacts("bare", "1.33.0", False, False, False)
    composed = {"kubernetesVersion": "1.34.0", "capabilities": {"gpu": False, "efa": False}, "exposeDashboard": True}
    assert EnvFacts.from_mapping(composed, "minikube") == EnvFacts("minikube", "1.34.0", False, True, False)


def test_readonly_root_scratch():
    violations = check_policies(POLICY / "readonly-root-scratch", CPU_ENV)
    where = "template.spec.containers[0].securityContext.readOnlyRootFilesystem"
    assert _found(violations) == [
        ("readonly-root-scratch", "raycluster-readonly-no-scratch.yaml", f"spec.headGroupSpec.{where}"),
        ("readonly-root-scratch", "raycluster-readonly-no-scratch.yaml",
         "spec.headGroupSpec.template.spec.initContainers[2].securityContext.readOnlyRootFilesystem"),
        ("readonly-root-scratch", "raycluster-readonly-no-scratch.yaml", f"spec.workerGroupSpecs[0].{where}"),
        ("readonly-root-scratch", "raycluster-readonly-no-scratch.yaml", f"spec.workerGroupSpecs[1].{where}"),
        ("readonly-root-scratch", "raycluster-readonly-no-scratch.yaml", f"spec.workerGroupSpecs[2].{where}"),
    ]
    messages = sorted(v.message for v in violations)
    assert any("'ray-head' has a read-only root filesystem but nothing writable is mounted at /tmp or /tmp/ray"
               in m for m in messages), messages
    assert any("its mount at /tmp is readOnly" in m for m in messages), messages
    assert any("its mount at /tmp/ is volume 'settings', which is not a writable kind" in m for m in messages)
    assert any("nothing writable is mounted at /scratch" in m for m in messages), messages


def test_checkpoint_storage_shared():
    violations = check_policies(POLICY / "checkpoint-storage-shared", CPU_ENV)
    assert _found(violations) == [
        ("checkpoint-storage-shared", "raycluster-rwo-claim.yaml", "spec.headGroupSpec.template.spec.containers[0].env[0]"),
        ("checkpoint-storage-shared", "rayjob-default-storage.yaml", "spec.entrypoint"),
        ("checkpoint-storage-shared", "rayjob-spec-on-emptydir.yaml", "spec.entrypoint"),
    ]
    by_file = {v.file.rsplit("/", 1)[-1]: v.message for v in violations}
    assert "up to 3 pods checkpoints to /checkpoints/runs (TRAINING_STORAGE_PATH)" in by_file["raycluster-rwo-claim.yaml"]
    assert "claim 'rwo' at /checkpoints, which is ReadWriteOnce" in by_file["raycluster-rwo-claim.yaml"]
    assert ("3 pods checkpoints to ./results/training (the default: neither checkpoint.storagePath nor "
            "TRAINING_STORAGE_PATH)") in by_file["rayjob-default-storage.yaml"]
    assert "a path relative to the container's working directory" in by_file["rayjob-default-storage.yaml"]
    # the spec's storage wins over TRAINING_STORAGE_PATH, as in the training package
    assert ("/scratch/checkpoints (the job spec's checkpoint.storagePath)" in by_file["rayjob-spec-on-emptydir.yaml"]
            and "volume 'scratch' at /scratch is emptyDir" in by_file["rayjob-spec-on-emptydir.yaml"])
    assert all("store: s3" in m and "ReadWriteMany" in m for m in by_file.values())


def test_checkpoint_storage_shared_names_the_input_line():
    """Run on a rendered job's file (apps/<env>/job-<name>/), a violation names the environment line to change: the
    most specific key that sets the storage, else where cluster.checkpoints would go."""
    doc = load_yaml((POLICY / "checkpoint-storage-shared" / "app" / "rayjob-default-storage.yaml").read_text())
    spec = load_yaml((POLICY / "checkpoint-storage-shared" / "app" / "configmap-digits-spec.yaml").read_text())
    manifests = [Manifest(Path("apps/minikube/job-digits-torch/rayjob-digits-torch-0123abcd.yaml"), doc=doc),
                 Manifest(Path("apps/minikube/job-digits-torch/configmap-digits-spec.yaml"), doc=spec)]
    origins = {("cluster",): "environments/minikube.yaml:34", ("jobDefaults", "cluster"): "environments/minikube.yaml:60"}
    facts = EnvFacts("minikube", KUBE_VERSION, gpu_nodes=False, origins=origins)
    [violation] = check_documents(manifests, facts, ["checkpoint-storage-shared"])
    assert violation.message.endswith("(input: environments/minikube.yaml:34: cluster.checkpoints)")
    origins[("jobs", "digits-torch", "cluster", "checkpoints")] = "environments/minikube.yaml:80"
    [violation] = check_documents(manifests, facts, ["checkpoint-storage-shared"])
    assert violation.message.endswith("(input: environments/minikube.yaml:80: jobs.digits-torch.cluster.checkpoints)")


def test_checkpoint_storage_shared_on_the_environments(repo_copy):
    """The shipped environments pass; minikube without its object store (as it was: no checkpoints) is refused at the
    line of its file where cluster.checkpoints goes."""
    import re

    from generator import environments
    from tests.support import run_generator
    from validation.repository import facts

    for env in ("minikube", "eks"):
        env_facts, _ = facts(repo_copy, environments.load(repo_copy, env))
        assert check_policies(repo_copy / "apps" / env, env_facts, rules=["checkpoint-storage-shared"]) == []
    path = repo_copy / "environments" / "minikube.yaml"
    text = path.read_text()
    block = re.search(r"\n  checkpoints:\n(    .*\n|      .*\n)+", text)
    assert block, "environments/minikube.yaml no longer sets cluster.checkpoints"
    path.write_text(text.replace(block.group(0), "\n"))
    rendered = run_generator(repo_copy, "render", "--env", "minikube")
    assert rendered.returncode == 0, rendered.stderr
    env = environments.load(repo_copy, "minikube")
    env_facts, _ = facts(repo_copy, env)
    violations = check_policies(repo_copy / "apps" / "minikube", env_facts, rules=["checkpoint-storage-shared"])
    cluster_line = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith("cluster:"))
    assert [(v.file.rsplit("/", 2)[-2], v.where) for v in violations] == [("job-digits-torch", "spec.entrypoint")]
    assert violations[0].message.endswith(f"(input: environments/minikube.yaml:{cluster_line}: cluster.checkpoints)")


def test_workload_namespaced_only():
    """RBAC and cluster-scoped kinds in a workload app's folder are refused; the platform folder may hold them."""
    violations = check_policies(POLICY / "workload-namespaced-only", CPU_ENV)
    assert _found(violations) == [
        ("workload-namespaced-only", "clusterrolebinding-take-over.yaml", "kind"),
        ("workload-namespaced-only", "namespace-other.yaml", "kind"),
        ("workload-namespaced-only", "rolebinding-edit.yaml", "kind"),
    ]
    by_file = {v.file.rsplit("/", 1)[-1]: v.message for v in violations}
    assert "rbac.authorization.k8s.io:ClusterRoleBinding is RBAC" in by_file["clusterrolebinding-take-over.yaml"]
    assert "core:Namespace is cluster-scoped" in by_file["namespace-other.yaml"]
    assert all("charts/platform" in message for message in by_file.values())
