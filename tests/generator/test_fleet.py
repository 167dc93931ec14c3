"""An environment on several clusters (`clusters:`): each cluster a layer of its own, rendered per cluster only where
it differs, one Argo CD cluster Secret and set of Applications per cluster with names that stay unique, projects on
exactly the environment's clusters, and the consistency contract refusing a per-cluster value that must be shared."""
import json
import re
import shutil

import yaml

from tests.support import REPO, load_yaml, run_generator, tree_digest

SECOND = "https://eks-training-b.example.internal"
HOME = "https://eks-training.example.internal"
HUB = "https://eks-training-hub.example.internal"


def make_two(root) -> None:
    """environments/eks.yaml as it was before MultiKueue placed its jobs: two clusters (eks, west-b), no manager, no
    pinned jobs: every job runs on both."""
    env = root / "environments" / "eks.yaml"
    text = env.read_text()
    start = text.index("  # The MultiKueue manager")
    text = text[:start] + text[text.index("\n# Change windows for the platform") + 1:]
    start = text.index("  # Jobs placed across the clusters")
    end = text.index("    workers: [eks, west-b]\n") + len("    workers: [eks, west-b]\n")
    text = text[:start] + text[end:]
    text = "".join(line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("pinnedTo:"))
    env.write_text(text)


def make_single(root) -> None:
    """environments/eks.yaml as it was before it had two clusters: its first cluster's target at the top."""
    make_two(root)
    env = root / "environments" / "eks.yaml"
    text = env.read_text()
    doc = load_yaml(text)
    home = doc["clusters"]["eks"]["target"]
    start = text.index("\n# Two EKS clusters, one environment")
    end = text.index("\n# Change windows for the platform")
    target = "".join(f"  {line}\n" for line in yaml.safe_dump(home, sort_keys=False, width=10000).splitlines())
    text = text[:start] + "\n" + text[end:]
    text = text.replace("target:\n  namespace: ray-training\n", "target:\n  namespace: ray-training\n" + target, 1)
    env.write_text(text)


def make_fleet(root, extra: str = "") -> None:
    """The committed eks (two clusters), with `extra` added to its second cluster's entry."""
    if extra:
        env = root / "environments" / "eks.yaml"
        env.write_text(env.read_text().replace("      fsxSecurityGroupId: sg-0fedcba9876543210\n",
                                               "      fsxSecurityGroupId: sg-0fedcba9876543210\n" + extra, 1))


def render(root, *args):
    proc = run_generator(root, "render", *args)
    assert proc.returncode == 0, proc.stderr
    return proc


def managed(root, name) -> dict:
    return load_yaml((root / "argocd" / "managed" / name).read_text())


def test_a_fleet_renders_shared_apps_once_and_per_cluster_values_per_cluster(repo_copy):
    before = tree_digest(repo_copy / "apps" / "minikube")
    make_single(repo_copy)
    render(repo_copy)
    jobs = sorted(p.name for p in (repo_copy / "apps" / "eks").iterdir() if p.name.startswith("job-"))
    assert (repo_copy / "apps" / "eks" / "platform").is_dir() and not (repo_copy / "apps" / "eks" / "clusters").exists()
    shutil.copy(REPO / "environments" / "eks.yaml", repo_copy / "environments" / "eks.yaml")
    make_two(repo_copy)
    render(repo_copy)
    eks = repo_copy / "apps" / "eks"
    # the jobs and the standing Ray cluster are the same on both clusters: rendered once, in the shared layer
    assert sorted(p.name for p in eks.iterdir() if p.name.startswith("job-")) == jobs
    assert (eks / "ray-cluster").is_dir()
    # the platform app holds each cluster's FSx subnet: rendered per cluster, each subnet on its own cluster only
    assert not (eks / "platform").exists()
    own = {c: "".join(p.read_text() for p in (eks / "clusters" / c / "platform").glob("*.yaml"))
           for c in ("eks", "west-b")}
    assert "subnet-0fedcba9876543210" in own["west-b"] and "subnet-0fedcba9876543210" not in own["eks"]
    assert "subnet-0123456789abcdef0" in own["eks"] and "subnet-0123456789abcdef0" not in own["west-b"]
    assert not list((eks / "clusters").glob("*/job-*")), "nothing shared is rendered per cluster"
    # another environment is untouched, and the render is deterministic
    assert tree_digest(repo_copy / "apps" / "minikube") == before
    first = tree_digest(repo_copy / "apps"), tree_digest(repo_copy / "argocd")
    render(repo_copy)
    assert (tree_digest(repo_copy / "apps"), tree_digest(repo_copy / "argocd")) == first


def test_each_cluster_gets_its_secret_operators_and_platform_with_unique_names(repo_copy):
    make_single(repo_copy)
    render(repo_copy)
    single = {p.name for p in (repo_copy / "argocd" / "managed").glob("*eks*")}
    shutil.copy(REPO / "environments" / "eks.yaml", repo_copy / "environments" / "eks.yaml")
    make_two(repo_copy)
    render(repo_copy)
    files = {p.name for p in (repo_copy / "argocd" / "managed").glob("*eks*")}
    # the cluster keyed like the environment keeps every name it had: making eks a fleet renames (deletes) nothing
    assert single <= files
    assert files - single == {"secret-cluster-eks-west-b.yaml", "application-eks-west-b-kuberay-crds.yaml",
                              "application-eks-west-b-kuberay-operator.yaml",
                              "application-eks-west-b-training-operator.yaml", "application-eks-west-b-platform.yaml",
                              "application-eks-west-b-kueue.yaml"}  # eks queues (Kueue on every cluster of it)
    secret = managed(repo_copy, "secret-cluster-eks-west-b.yaml")
    assert secret["stringData"]["server"] == SECOND and secret["stringData"]["name"] == "eks-training-b"
    assert secret["metadata"]["labels"]["ray-gitops/cluster"] == "west-b"
    assert secret["metadata"]["labels"]["ray-gitops/app-prefix"] == "eks-west-b"
    assert json.loads(secret["stringData"]["config"])["awsAuthConfig"]["clusterName"] == "eks-training-b"
    home = managed(repo_copy, "secret-cluster-eks.yaml")
    assert home["metadata"]["labels"]["ray-gitops/app-prefix"] == "eks" and home["stringData"]["server"] == HOME
    platform = managed(repo_copy, "application-eks-west-b-platform.yaml")
    assert platform["spec"]["source"]["path"] == "apps/eks/clusters/west-b/platform"
    assert platform["spec"]["destination"]["server"] == SECOND
    operator = managed(repo_copy, "application-eks-west-b-kuberay-operator.yaml")
    assert operator["spec"]["destination"]["server"] == SECOND and operator["spec"]["project"] == "eks-platform"


def test_a_clusters_name_and_context_default_to_its_key(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    env.write_text(env.read_text().replace("      clusterName: eks-training-b\n      context: eks-training-b\n", ""))
    render(repo_copy)
    assert managed(repo_copy, "secret-cluster-eks-west-b.yaml")["stringData"]["name"] == "west-b"
    from generator import environments
    [_, west, _] = environments.members(environments.load(repo_copy, "eks"))
    assert west.doc["target"]["context"] == "west-b" and west.app_prefix == "eks-west-b"


def test_projects_cover_exactly_the_environments_clusters():
    workload = managed(REPO, "appproject-eks.yaml")
    assert {d["server"] for d in workload["spec"]["destinations"]} == {HOME, SECOND, HUB}
    assert {d["namespace"] for d in workload["spec"]["destinations"]} == {"ray-training"}
    platform = managed(REPO, "appproject-eks-platform.yaml")
    assert {d["server"] for d in platform["spec"]["destinations"]} == {HOME, SECOND, HUB}
    # each server x (env, kuberay, kubeflow namespaces, and Kueue's kueue-system and kube-system: eks queues)
    assert len(platform["spec"]["destinations"]) == 3 * 5


def test_one_applicationset_generates_shared_and_per_cluster_apps_by_the_clusters_prefix():
    appset = managed(REPO, "applicationset-eks.yaml")
    matrix = appset["spec"]["generators"][0]["matrix"]["generators"]
    assert matrix[0] == {"clusters": {"selector": {"matchLabels": {"ray-gitops/environment": "eks"}}}}
    dirs = matrix[1]["git"]["directories"]
    cluster = '{{ index .metadata.labels "ray-gitops/cluster" }}'
    assert dirs == [{"path": "apps/eks/*"}, {"path": "apps/eks/platform", "exclude": True},
                    {"path": "apps/eks/clusters", "exclude": True}, {"path": f"apps/eks/clusters/{cluster}/*"},
                    {"path": f"apps/eks/clusters/{cluster}/platform", "exclude": True}]
    name = appset["spec"]["template"]["metadata"]["name"]
    assert name == '{{ index .metadata.labels "ray-gitops/app-prefix" }}-{{ .path.basename }}'


def test_a_single_cluster_environment_renders_as_before(repo_copy):
    before = tree_digest(repo_copy / "apps" / "minikube")
    appset = (repo_copy / "argocd" / "managed" / "applicationset-minikube.yaml").read_text()
    render(repo_copy)
    assert tree_digest(repo_copy / "apps" / "minikube") == before
    assert (repo_copy / "argocd" / "managed" / "applicationset-minikube.yaml").read_text() == appset
    assert "{{ .path.basename }}" in appset and "app-prefix" not in appset


def render_fails(root) -> str:
    apps = tree_digest(root / "apps")
    proc = run_generator(root, "render")
    assert proc.returncode != 0, proc.stdout
    assert tree_digest(root / "apps") == apps, "a failed render leaves apps/ as it was"
    return proc.stderr


def line_of(path, needle) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_a_value_every_cluster_must_share_is_refused_in_a_cluster_with_its_place(repo_copy):
    make_fleet(repo_copy, "    exposeDashboard: true\n")
    err = render_fails(repo_copy)
    env = repo_copy / "environments" / "eks.yaml"
    line = line_of(env, "    exposeDashboard: true")
    assert f"environments/eks.yaml:{line}: clusters.west-b.exposeDashboard: unknown key" in err, err
    assert "known keys here: description, target, vars" in err
    assert "Traceback" not in err


def test_the_shared_namespace_is_refused_in_a_cluster(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    env.write_text(env.read_text().replace("      context: eks-training-b\n",
                                           "      context: eks-training-b\n      namespace: other\n"))
    err = render_fails(repo_copy)
    assert re.search(r"environments/eks\.yaml:\d+: clusters\.west-b\.target", err), err
    assert "namespace" in err


def test_two_clusters_on_one_server_are_refused(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    env.write_text(env.read_text().replace(SECOND, HOME))
    err = render_fails(repo_copy)
    assert "cluster 'eks' and cluster 'west-b'" in err or "cluster 'west-b' and cluster 'eks'" in err, err
    assert "cluster server" in err


def test_a_cluster_var_that_changes_a_shared_value_is_refused_at_the_var(repo_copy):
    """The contract holds on values, not only keys: a cluster's own var that reaches the Ray image (through
    cluster.image.repository's template) is refused at that var's line, naming the value it changed, both sides and
    why; apps/ stays as it was."""
    before = tree_digest(repo_copy / "apps")
    make_fleet(repo_copy, "      registry: 999988887777.dkr.ecr.eu-west-1.amazonaws.com\n")
    err = render_fails(repo_copy)
    line = line_of(repo_copy / "environments" / "eks.yaml", "      registry: 999988887777")
    assert f"environments/eks.yaml:{line}: clusters.west-b.vars.registry: makes cluster.image.repository differ" \
        in err, err
    assert "eks: '111122223333.dkr.ecr.us-west-2.amazonaws.com/ray-training'" in err
    assert "west-b: '999988887777.dkr.ecr.eu-west-1.amazonaws.com/ray-training'" in err
    assert "the Ray image and its digest are one on every cluster" in err and "mayDiffer" in err
    assert "Traceback" not in err
    assert tree_digest(repo_copy / "apps") == before


def test_quotas_instance_types_and_subnets_may_differ(repo_copy):
    """What the contract lets differ (quotas, instance types, subnets) renders, each on its own cluster."""
    make_fleet(repo_copy, "      gpuQuota: 8\n      gpuInstanceType: g5.12xlarge\n")
    render(repo_copy)
    west = (repo_copy / "apps" / "eks" / "clusters" / "west-b" / "platform")
    text = "".join(p.read_text() for p in sorted(west.glob("*.yaml")))
    assert "g5.12xlarge" in text and "subnet-0fedcba9876543210" in text


def test_contract_paths_match_keys_indices_and_any_depth():
    from generator import fleet_contract as fc
    assert fc.matches(["**", "nodeSelector", "node.kubernetes.io/instance-type"],
                      ("jobs", "digits", "head", "nodeSelector", "node.kubernetes.io/instance-type"))
    assert fc.matches(["queueing", "flavors", "*", "quota", "**"], ("queueing", "flavors", 0, "quota", "cpu"))
    assert not fc.matches(["queueing", "flavors", "*", "quota", "**"], ("queueing", "flavors", 0, "name"))
    assert fc.rule(("cluster", "image", "digest"))[0] == "equal"
    assert fc.rule(("vars", "registry"))[0] == "mayDiffer"
    assert fc.rule(("cluster", "head", "nodeSelector", "node.kubernetes.io/instance-type"))[0] == "mayDiffer"
