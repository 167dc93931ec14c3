"""Kueue from the environments' `queueing` (generator/queueing.py): the quota as ResourceFlavors and a ClusterQueue in
the platform app, every job labelled with the LocalQueue and rendering no `suspend` (Kueue owns it), Kueue installed
by the Argo CD layer on every cluster of a queueing environment and nowhere else, and bad values refused where they
were written."""
import re

from tests.generator.test_bad_input import edit, line_of, render_fails
from tests.support import REPO, load_yaml, run_generator

APPS = REPO / "apps"


def docs(folder):
    return [load_yaml(p.read_text()) for p in sorted(folder.glob("*.yaml"))]


def by_kind(folder, kind):
    return [d for d in docs(folder) if d["kind"] == kind]


def platform_dirs():
    """The workers' platform apps (eks, west-b): the MultiKueue manager's (hub) is test_multikueue's."""
    return sorted(p for p in (APPS / "eks" / "clusters").glob("*/platform") if p.parent.name != "hub")


def job_dirs(env_dir):
    """An environment's job folders: shared, and each cluster's own."""
    return sorted(env_dir.glob("job-*")) + sorted(env_dir.glob("clusters/*/job-*"))


def test_the_quota_is_a_clusterqueue_over_the_environments_namespace_with_every_resource_in_every_flavor():
    env = load_yaml((REPO / "environments" / "eks.yaml").read_text())
    gpus = int(env["vars"]["gpuQuota"])
    assert platform_dirs(), "eks's platform app is per cluster (its FSx subnet)"
    for platform in platform_dirs():
        (cq,) = by_kind(platform, "ClusterQueue")
        assert cq["metadata"]["name"] == "eks"
        assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "ray-training"}}
        (group,) = cq["spec"]["resourceGroups"]
        covered = group["coveredResources"]
        assert covered == sorted(covered) and {"nvidia.com/gpu", "vpc.amazonaws.com/efa", "cpu", "memory"} == set(covered)
        flavors = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}
        assert [f["name"] for f in group["flavors"]] == ["g5-8xlarge", "m5-2xlarge"], "Kueue tries them in order"
        for quota in flavors.values():  # Kueue requires every flavor to list the group's resources, in order
            assert list(quota) == covered
        assert flavors["g5-8xlarge"] == {"cpu": str(gpus * 28), "memory": f"{gpus * 112}Gi",
                                         "nvidia.com/gpu": str(gpus), "vpc.amazonaws.com/efa": str(gpus)}
        assert flavors["m5-2xlarge"]["nvidia.com/gpu"] == "0", "a resource a flavor does not give has quota 0 there"
        (g5,) = [f for f in by_kind(platform, "ResourceFlavor") if f["metadata"]["name"] == "g5-8xlarge"]
        assert g5["spec"]["nodeLabels"] == {"node.kubernetes.io/instance-type": "g5.8xlarge"}
        assert g5["spec"]["nodeTaints"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "value": "true"}]
        (lq,) = by_kind(platform, "LocalQueue")
        assert (lq["metadata"]["namespace"], lq["metadata"]["name"], lq["spec"]["clusterQueue"]) == (
            "ray-training", "training", "eks")


def test_queued_jobs_carry_the_local_queue_and_render_no_suspend_and_the_others_are_unchanged():
    queued = [d for job in job_dirs(APPS / "eks") for d in docs(job) if d["kind"] in ("RayJob", "PyTorchJob")]
    assert {d["kind"] for d in queued} == {"RayJob", "PyTorchJob"}
    for job in queued:
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training", job["metadata"]["name"]
        spec = job["spec"]
        assert "suspend" not in spec and "suspend" not in (spec.get("runPolicy") or {}), \
            f"{job['metadata']['name']}: a rendered suspend under self-heal would start a job Kueue holds"
        if job["kind"] == "RayJob":  # Kueue refuses a queued RayJob that keeps its cluster (rayjob_webhook.go)
            assert spec["shutdownAfterJobFinishes"] is True
            # Kueue frees the quota when the job ends: its Ray cluster must free the nodes then too
            assert spec["ttlSecondsAfterFinished"] == 0
    plain = [d for job in (APPS / "minikube").glob("job-*") for d in docs(job) if d["kind"] == "RayJob"]
    assert plain and all(d["spec"]["suspend"] is False and "kueue.x-k8s.io/queue-name" not in d["metadata"]["labels"]
                         and d["spec"]["ttlSecondsAfterFinished"] == 600 for d in plain)
    assert not list((APPS / "minikube").rglob("clusterqueue-*.yaml"))


def test_kueue_is_an_operator_of_each_cluster_of_a_queueing_environment_only():
    managed = REPO / "argocd" / "managed"
    apps = {p.name: load_yaml(p.read_text()) for p in managed.glob("application-*-kueue.yaml")}
    assert sorted(apps) == ["application-eks-hub-kueue.yaml", "application-eks-kueue.yaml",
                            "application-eks-west-b-kueue.yaml"]
    versions = load_yaml((REPO / "versions.yaml").read_text())
    for app in apps.values():
        source = app["spec"]["source"]
        assert (source["repoURL"], source["targetRevision"], source["path"]) == (
            "https://github.com/kubernetes-sigs/kueue.git", versions["kueue"], "config/default")
        assert source["kustomize"]["images"] == [
            f"us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue=registry.k8s.io/kueue/kueue:{versions['kueue']}"]
        (patch,) = source["kustomize"]["patches"]
        assert patch["target"] == {"kind": "ConfigMap", "name": "manager-config"}
        config = load_yaml(load_yaml(patch["patch"])["data"]["controller_manager_config.yaml"])
        # batch/job too: Kueue v0.17.0's Job webhook panics without it (operator_config/kueue-manager-config.yaml)
        assert config["integrations"]["frameworks"] == ["batch/job", "ray.io/rayjob", "kubeflow.org/pytorchjob"]
        assert config.get("manageJobsWithoutQueueName", False) is False, "the standing RayCluster is not Kueue's"
        assert app["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == "-11", "before the platform app"
    project = load_yaml((managed / "appproject-eks-platform.yaml").read_text())["spec"]
    assert "https://github.com/kubernetes-sigs/kueue.git" in project["sourceRepos"]
    assert {"kueue-system", "kube-system"} <= {d["namespace"] for d in project["destinations"]}
    cluster_kinds = {(k["group"], k["kind"]) for k in project["clusterResourceWhitelist"]}
    assert {("kueue.x-k8s.io", "ClusterQueue"), ("kueue.x-k8s.io", "ResourceFlavor"),
            ("admissionregistration.k8s.io", "MutatingWebhookConfiguration")} <= cluster_kinds
    assert ("kueue.x-k8s.io", "LocalQueue") in {(k["group"], k["kind"]) for k in project["namespaceResourceWhitelist"]}
    other = load_yaml((managed / "appproject-minikube-platform.yaml").read_text())["spec"]
    assert "https://github.com/kubernetes-sigs/kueue.git" not in other["sourceRepos"]
    assert "kueue-system" not in {d["namespace"] for d in other["destinations"]}
    ignored = load_yaml((managed / "applicationset-eks.yaml").read_text())["spec"]["template"]["spec"][
        "ignoreDifferences"]
    assert {"group": "ray.io", "kind": "RayJob", "jsonPointers": ["/spec/suspend"]} in ignored
    assert {"group": "kubeflow.org", "kind": "PyTorchJob", "jsonPointers": ["/spec/runPolicy/suspend"]} in ignored
    plain = load_yaml((managed / "applicationset-minikube.yaml").read_text())["spec"]["template"]["spec"]
    assert "RayJob" not in str(plain.get("ignoreDifferences")), "minikube does not queue: its suspend is git's"
    workload = load_yaml((managed / "appproject-eks.yaml").read_text())["spec"]
    assert workload["clusterResourceWhitelist"] == [], "a job's folder never gets a ClusterQueue"


def test_turning_queueing_on_is_one_edit(repo_copy):
    env = repo_copy / "environments" / "minikube.yaml"
    env.write_text(env.read_text() + "\nqueueing:\n  enabled: true\n  flavors:\n"
                   "    - name: default\n      quota: {cpu: \"4\", memory: 8Gi}\n")
    proc = run_generator(repo_copy, "render")
    assert proc.returncode == 0, proc.stderr
    (cq,) = by_kind(repo_copy / "apps" / "minikube" / "platform", "ClusterQueue")
    assert cq["metadata"]["name"] == "minikube"
    jobs = [d for job in (repo_copy / "apps" / "minikube").glob("job-*") for d in docs(job) if d["kind"] == "RayJob"]
    assert jobs and all(d["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training" for d in jobs)
    assert (repo_copy / "argocd" / "managed" / "application-minikube-kueue.yaml").is_file()


def test_a_queued_jobs_own_time_to_live_still_wins(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    pin = "    pinnedTo: eks  # its checkpoints are on eks's FSx file system\n"
    edit(env, f"  cifar10-torch:\n{pin}    job:\n", f"  cifar10-torch:\n{pin}    job:\n      ttlSecondsAfterFinished: 120\n")
    proc = run_generator(repo_copy, "render", "--env", "eks")
    assert proc.returncode == 0, proc.stderr
    ttl = {job.name: d["spec"]["ttlSecondsAfterFinished"] for job in job_dirs(repo_copy / "apps" / "eks")
           for d in docs(job) if d["kind"] == "RayJob"}
    assert ttl == {"job-cifar10-torch": 120, "job-digits-torch": 0}


def test_a_flavor_without_quota_is_refused_where_it_is_written(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    edit(env, "      # the submitters (and nothing else of a job) run on the system nodes\n      quota:\n"
              "        cpu: \"8\"\n        memory: 16Gi\n", "")
    err = render_fails(repo_copy, "--env", "eks")
    line = line_of(env, "    - name: m5-2xlarge")
    assert re.search(rf"environments/eks\.yaml:{line}\b.*queueing\.flavors.*quota", err), err


def test_suspending_a_queued_job_in_git_is_refused_with_the_reason(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    edit(env, "jobDefaults:\n  cluster:\n", "jobDefaults:\n  job:\n    suspend: true\n  cluster:\n")
    err = render_fails(repo_copy, "--env", "eks")
    assert "a queued job (job.queueName) is suspended and resumed by Kueue; do not set suspend" in err, err
