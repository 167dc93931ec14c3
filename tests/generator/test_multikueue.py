"""Jobs placed across an environment's clusters by MultiKueue (generator/placement.py, environments/eks.yaml
`queueing.multiKueue`: hub the manager, eks and west-b the workers): the manager's ClusterQueue holds the workers'
summed quota with a MultiKueue AdmissionCheck, a MultiKueueConfig lists the workers in order and a MultiKueueCluster
per worker names its kubeconfig Secret (never rendered); each worker gives the manager an identity allowed exactly
what MultiKueue does there; a dispatched job is the manager's (managedBy rendered) and every worker holds what it
references under the same run name; a pinned job runs on its cluster only; bad choices are refused where written."""
from __future__ import annotations

import re

import pytest

from generator import placement
from tests.generator.test_bad_input import render_fails
from tests.support import REPO, load_yaml, run_generator

EKS = REPO / "apps" / "eks"
HUB, WORKERS = "hub", ("eks", "west-b")


def docs(folder):
    return [load_yaml(p.read_text()) for p in sorted(folder.glob("*.yaml"))]


def by_kind(folder, kind):
    return [d for d in docs(folder) if d["kind"] == kind]


def test_the_manager_holds_the_workers_summed_quota_behind_a_multikueue_admission_check():
    platform = EKS / "clusters" / HUB / "platform"
    (cq,) = by_kind(platform, "ClusterQueue")
    quota = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in cq["spec"]["resourceGroups"][0]["flavors"]}
    workers = [{f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}
                for f in by_kind(EKS / "clusters" / w / "platform", "ClusterQueue")[0]["spec"]["resourceGroups"][0]["flavors"]}
               for w in WORKERS]
    for flavor, resources in quota.items():
        for resource, value in resources.items():
            assert value == placement.add_quantities([w[flavor][resource] for w in workers]), (flavor, resource)
    assert quota["g5-8xlarge"]["nvidia.com/gpu"] == "32" and quota["g5-8xlarge"]["memory"] == "3584Gi"
    assert cq["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "multikueue"}]}
    (check,) = by_kind(platform, "AdmissionCheck")
    assert check["spec"] == {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {
        "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "eks"}}
    (config,) = by_kind(platform, "MultiKueueConfig")
    assert config["spec"]["clusters"] == list(WORKERS), "the workers in the order environments/eks.yaml lists them"
    clusters = {c["metadata"]["name"]: c["spec"] for c in by_kind(platform, "MultiKueueCluster")}
    assert clusters == {w: {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": f"multikueue-{w}"}}}
                        for w in WORKERS}
    # waves: the clusters first (active once bootstrap made their Secrets), then the check, then the queue
    wave = {d["kind"]: int(d["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]) for d in docs(platform)}
    assert wave["MultiKueueCluster"] < wave["AdmissionCheck"] < wave["ClusterQueue"]
    # the manager runs no training: no Secret rendered, no checkpoint file system, no standing Ray cluster
    assert not {"Secret", "PersistentVolumeClaim", "StorageClass"} & {d["kind"] for d in docs(platform)}
    assert not (EKS / "clusters" / HUB / "ray-cluster").exists()
    assert all((EKS / "clusters" / w / "ray-cluster").is_dir() for w in WORKERS)


def test_each_worker_gives_the_manager_an_identity_for_what_multikueue_does_there_only():
    for w in WORKERS:
        platform = EKS / "clusters" / w / "platform"
        (account,) = by_kind(platform, "ServiceAccount") and [a for a in by_kind(platform, "ServiceAccount")
                                                             if a["metadata"]["name"] == "multikueue"]
        assert account["metadata"]["namespace"] == "ray-training" and account["automountServiceAccountToken"] is False
        (role,) = by_kind(platform, "ClusterRole")
        rules = {(g, r): tuple(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"]
                 for r in rule["resources"]}
        write = ("create", "delete", "get", "list", "watch")
        assert rules == {("ray.io", "rayjobs"): write, ("ray.io", "rayjobs/status"): ("get",),
                         ("kubeflow.org", "pytorchjobs"): write, ("kubeflow.org", "pytorchjobs/status"): ("get",),
                         ("batch", "jobs"): ("get", "list", "watch"),
                         ("kueue.x-k8s.io", "workloads"): write,
                         ("kueue.x-k8s.io", "workloads/status"): ("get", "patch", "update")}
        (binding,) = by_kind(platform, "ClusterRoleBinding")
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "multikueue", "namespace": "ray-training"}]
        assert not by_kind(platform, "MultiKueueCluster") and not by_kind(platform, "AdmissionCheck")
        (cq,) = by_kind(platform, "ClusterQueue")
        assert "admissionChecksStrategy" not in cq["spec"], "a worker admits with its own quota"


def test_pinned_jobs_run_on_their_cluster_only_and_are_not_dispatched():
    env = load_yaml((REPO / "environments" / "eks.yaml").read_text())
    pinned = {name for name, job in env["jobs"].items() if job.get("pinnedTo") == "eks"}
    assert pinned == {"digits-torch", "cifar10-torch", "fsdp-llama"}
    assert {p.name for p in (EKS / "clusters" / "eks").glob("job-*")} == {f"job-{j}" for j in pinned}
    assert not list(EKS.glob("job-*")) and not list(EKS.glob("clusters/west-b/job-*"))
    assert not list(EKS.glob("clusters/hub/job-*"))
    for folder in (EKS / "clusters" / "eks").glob("job-*"):
        for doc in docs(folder):
            if doc["kind"] == "RayJob":
                assert "managedBy" not in doc["spec"]
            if doc["kind"] == "PyTorchJob":
                assert "managedBy" not in doc["spec"]["runPolicy"]


DISPATCHED = """
  placed-anywhere:
    cluster:
      checkpoints:
        enabled: true
        store: s3
        s3: {bucket: example-ray-checkpoints, prefix: placed-anywhere, region: us-west-2}
    job:
      spec:
        config: {numWorkers: 2, useGpu: true, resourcesPerWorker: {cpu: 8, gpu: 1}}
  torch-anywhere:
    backend: torchrun
    cluster:
      checkpoints: {enabled: false}
    job:
      command: [torchrun]
      args: [/workspace/train.py]
      workers: 1
"""


def test_a_dispatched_job_is_the_managers_and_each_worker_holds_what_it_references(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    env.write_text(env.read_text() + DISPATCHED)
    proc = run_generator(repo_copy, "render")
    assert proc.returncode == 0, proc.stderr
    apps = repo_copy / "apps" / "eks" / "clusters"
    hub = docs(apps / HUB / "job-placed-anywhere")
    (rayjob,) = [d for d in hub if d["kind"] == "RayJob"]
    assert rayjob["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    assert rayjob["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training" and "suspend" not in rayjob["spec"]
    (pytorchjob,) = [d for d in docs(apps / HUB / "job-torch-anywhere") if d["kind"] == "PyTorchJob"]
    assert pytorchjob["spec"]["runPolicy"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    spec = next(d for d in hub if d["kind"] == "ConfigMap")
    for w in WORKERS:
        worker = docs(apps / w / "job-placed-anywhere")
        assert {d["kind"] for d in worker} == {"ConfigMap", "NetworkPolicy"}, "MultiKueue copies only the job"
        # the same run name everywhere: the job the manager dispatches finds its spec on whichever worker it lands
        assert next(d for d in worker if d["kind"] == "ConfigMap") == spec
        assert {d["kind"] for d in docs(apps / w / "job-torch-anywhere")} == {"NetworkPolicy"}
    # the manager's sync account may now create RayJobs and PyTorchJobs there; a worker's only what it renders
    role = next(d for d in docs(apps / HUB / "platform") if d["kind"] == "Role")
    assert {"rayjobs", "pytorchjobs", "configmaps"} <= {r for rule in role["rules"] for r in rule["resources"]}


def test_each_worker_refuses_a_rayjobs_workload_while_the_ray_auth_secret_is_missing():
    """The gate: one ValidatingAdmissionPolicy per Secret every RayJob reads (the Ray auth token), its binding taking
    that Secret as parameter with parameterNotFoundAction Deny, on Workload creation in the namespace, for the
    Workloads Kueue names after a RayJob; the manager holds no jobs' pods and renders none."""
    for w in WORKERS:
        platform = EKS / "clusters" / w / "platform"
        (policy,) = by_kind(platform, "ValidatingAdmissionPolicy")
        (binding,) = by_kind(platform, "ValidatingAdmissionPolicyBinding")
        spec = policy["spec"]
        assert spec["paramKind"] == {"apiVersion": "v1", "kind": "Secret"} and spec["failurePolicy"] == "Fail"
        assert spec["matchConstraints"]["resourceRules"] == [{"apiGroups": ["kueue.x-k8s.io"], "apiVersions": ["*"],
                                                              "resources": ["workloads"], "operations": ["CREATE"]}]
        assert [c["expression"] for c in spec["matchConditions"]] == ["object.metadata.name.startsWith('rayjob-')"]
        assert [v["expression"] for v in spec["validations"]] == [
            "has(params.data) && ['auth_token'].all(k, k in params.data)"]
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        assert binding["spec"]["paramRef"] == {"name": "ray-auth-token", "namespace": "ray-training",
                                               "parameterNotFoundAction": "Deny"}
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["matchResources"] == {"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "ray-training"}}}
    kinds = {d["kind"] for d in docs(EKS / "clusters" / HUB / "platform")}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    # the platform project may sync them (cluster-scoped: the workload project may not)
    project = load_yaml((REPO / "argocd" / "managed" / "appproject-eks-platform.yaml").read_text())
    allowed = {(k["group"], k["kind"]) for k in project["spec"]["clusterResourceWhitelist"]}
    assert {("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding")} <= allowed


def test_no_gate_on_a_secret_a_dispatched_ray_job_does_not_read(repo_copy):
    """A dispatched Ray job with its own auth Secret does not read the environment's: gating on it would keep that
    job off a worker it could run on, so no worker is gated on it."""
    env = repo_copy / "environments" / "eks.yaml"
    env.write_text(env.read_text() + DISPATCHED.replace(
        "    job:\n      spec:\n        config: {numWorkers: 2",
        "      auth: {mode: token, secretName: team-b-ray-token}\n    job:\n      spec:\n        config: {numWorkers: 2", 1))
    proc = run_generator(repo_copy, "render")
    assert proc.returncode == 0, proc.stderr
    for w in WORKERS:
        kinds = {d["kind"] for d in docs(repo_copy / "apps" / "eks" / "clusters" / w / "platform")}
        assert "ValidatingAdmissionPolicyBinding" not in kinds, w
    # without that override the same dispatched jobs leave the gate in place
    env.write_text((REPO / "environments" / "eks.yaml").read_text() + DISPATCHED)
    assert run_generator(repo_copy, "render").returncode == 0
    for w in WORKERS:
        assert by_kind(repo_copy / "apps" / "eks" / "clusters" / w / "platform", "ValidatingAdmissionPolicyBinding")


@pytest.mark.parametrize("edit,needle,expected", [
    (("    manager: hub\n", "    manager: central\n"), "    manager: central",
     r"queueing\.multiKueue\.manager: 'central' is not one of its clusters \(expected one of: eks, west-b, hub\)"),
    (("    workers: [eks, west-b]\n", "    workers: [eks, hub]\n"), "    workers: [eks, hub]",
     r"queueing\.multiKueue\.workers\[1\]: 'hub' is the manager"),
    (("  digits-torch:\n    pinnedTo: eks", "  digits-torch:\n    pinnedTo: east"), "    pinnedTo: east",
     r"jobs\.digits-torch\.pinnedTo: 'east' is not one of its clusters"),
    (("  digits-torch:\n    pinnedTo: eks", "  digits-torch:\n    pinnedTo: hub"), "    pinnedTo: hub",
     r"jobs\.digits-torch\.pinnedTo: 'hub' is the MultiKueue manager, which runs no training"),
    (("  digits-torch:\n    pinnedTo: eks  # its checkpoints are on eks's FSx file system\n", "  digits-torch:\n"),
     "  checkpoints:\n    enabled: true\n    mountPath: /checkpoints",
     r"cluster\.checkpoints: job 'digits-torch' is placed by MultiKueue on any worker, and its checkpoints are on "
     r"the volume claim 'fsx-claim', which only one cluster reaches \(expected: checkpoints on an S3 store outside "
     r"the clusters .*or jobs\.digits-torch\.pinnedTo: <a worker>\)"),
])
def test_a_bad_placement_is_refused_where_it_is_written(repo_copy, edit, needle, expected):
    env = repo_copy / "environments" / "eks.yaml"
    text = env.read_text()
    assert edit[0] in text, edit
    env.write_text(text.replace(*edit, 1))
    err = render_fails(repo_copy, "--env", "eks")
    text = env.read_text()
    line = text[:text.index(needle)].count("\n") + 1
    assert re.search(rf"environments/eks\.yaml:{line}: {expected}", err), err
    assert "Traceback" not in err


def test_a_pin_or_placement_needs_several_clusters(repo_copy):
    env = repo_copy / "environments" / "minikube.yaml"
    env.write_text(env.read_text() + "\njobs:\n  digits-torch:\n    pinnedTo: minikube\n")
    err = render_fails(repo_copy, "--env", "minikube")
    line = len(env.read_text().splitlines())
    assert f"environments/minikube.yaml:{line}: jobs.digits-torch.pinnedTo: pins the job to a cluster, and the " \
        "environment has one" in err, err
    env.write_text(env.read_text().rsplit("\njobs:", 1)[0] + "\nqueueing:\n  enabled: true\n  flavors:\n"
                   "    - {name: default, quota: {cpu: '4'}}\n  multiKueue:\n    manager: minikube\n")
    err = render_fails(repo_copy, "--env", "minikube")
    assert "queueing.multiKueue: multiKueue places jobs across the clusters of an environment, which has none" in err


@pytest.mark.parametrize("values,total", [(["448", "448"], "896"), (["1792Gi", "1792Gi"], "3584Gi"),
                                          (["1Gi", "512Mi"], "1610612736"), (["500m", "1"], "1500m"),
                                          (["16", "0"], "16"), (["1.5", "2.5"], "4")])
def test_quotas_sum_as_kubernetes_quantities(values, total):
    assert placement.add_quantities(values) == total
