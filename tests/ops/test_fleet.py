"""make fleet: every cluster of eks (three clusters: eks, west-b, and hub, MultiKueue's manager) side by side from the kubernetes client, and the drift between
them, each named with its cluster, object and fix: a Secret out of git missing on one cluster, an operator image or
CRD version that differs, an app behind on another revision, a cluster that cannot be reached. Agreeing clusters are
no drift, and the command's exit code says which case it is."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from types import SimpleNamespace as NS

from ops import cli, fleet
from ops.targets import EXIT_NOT_HEALTHY, EXIT_UNREACHABLE, OpsError
from ops.targets import fleet as fleet_targets
from tests.support import REPO

HOME, WEST, HUB = "eks-training", "eks-training-b", "eks-training-hub"
REVISION = "3f1c0a9e2b7d4c6a8e0f1a2b3c4d5e6f7a8b9c0d"


class _NotFound(Exception):
    status = 404


def application(app, cluster, revision=REVISION, sync="Synced", health="Healthy"):
    name = f"eks-{app}" if cluster == "eks" else f"eks-{cluster}-{app}"
    return {"metadata": {"name": name, "labels": {fleet.ENV_LABEL: "eks", fleet.CLUSTER_LABEL: cluster,
                                                  fleet.APP_LABEL: app}},
            "status": {"sync": {"status": sync, "revision": revision}, "health": {"status": health}}}


class Cluster:
    """One cluster's API as the kubernetes client returns it: nodes, Secrets, Deployments, CRDs."""

    def __init__(self, secrets=None, images=None, crds=None, gpus=0, reachable=True):
        self.secrets = {"ray-training/ray-auth-token": {"auth_token": "eA=="},
                        "ray-training/hf-token": {"token": "eA=="}} if secrets is None else secrets
        self.images = images or {("kuberay-system", "kuberay-operator", "kuberay-operator"):
                                 "quay.io/kuberay/operator:v1.6.2",
                                 ("kueue-system", "kueue-controller-manager", "manager"):
                                 "registry.k8s.io/kueue/kueue:v0.17.0"}
        self.crd_versions = crds or {"rayjobs.ray.io": ("ray.io", ["v1"]),
                                     "clusterqueues.kueue.x-k8s.io": ("kueue.x-k8s.io", ["v1beta1", "v1beta2"])}
        self.gpus, self.reachable = gpus, reachable

    # CoreV1Api
    def list_node(self):
        return NS(items=[NS(status=NS(allocatable={"cpu": "32", fleet.GPU: str(self.gpus)}))]
                  + [NS(status=NS(allocatable={"cpu": "8"}))])

    def read_namespaced_secret(self, name, namespace):
        if f"{namespace}/{name}" not in self.secrets:
            raise _NotFound()
        return NS(data=self.secrets[f"{namespace}/{name}"])

    # AppsV1Api
    def list_namespaced_deployment(self, namespace):
        return NS(items=[NS(metadata=NS(name=deploy), spec=NS(template=NS(spec=NS(containers=[
            NS(name=container, image=image)]))))
            for (ns, deploy, container), image in sorted(self.images.items()) if ns == namespace])

    # ApiextensionsV1Api
    def list_custom_resource_definition(self):
        return NS(items=[NS(metadata=NS(name=name), spec=NS(group=group, versions=[NS(name=v, served=True)
                                                                                   for v in versions]))
                         for name, (group, versions) in sorted(self.crd_versions.items())]
                  + [NS(metadata=NS(name="certificates.cert-manager.io"),
                        spec=NS(group="cert-manager.io", versions=[NS(name="v1", served=True)]))])


class ArgoCD:
    def __init__(self, apps):
        self.apps = apps

    def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector=""):
        wanted = dict(part.split("=", 1) for part in label_selector.split(","))
        return {"items": [a for a in self.apps if all(a["metadata"]["labels"].get(k) == v
                                                      for k, v in wanted.items())]}


class Clients:
    def __init__(self, clusters, apps):
        self.clusters, self.argocd = clusters, ArgoCD(apps)

    def _cluster(self, context):
        cluster = self.clusters[context]
        if not cluster.reachable:
            raise OpsError(f"cannot reach the cluster of context {context!r} (https://x): timed out", 3)
        return cluster

    def core(self, context):
        return self._cluster(context)

    apps = extensions = core

    def custom(self, context):
        assert context == "minikube", "the Applications are read from Argo CD's cluster"
        return self.argocd


def all_apps(revision_west=REVISION):
    return ([application(a, "eks") for a in ("platform", "ray-cluster", "kueue")]
            + [application(a, "west-b", revision_west) for a in ("platform", "ray-cluster", "kueue")]
            + [application(a, "hub") for a in ("platform", "kueue")])


def status(home=None, west=None, apps=None) -> dict:
    targets = fleet_targets(REPO, "eks")
    clients = Clients({HOME: home or Cluster(), WEST: west or Cluster(), HUB: Cluster()},
                      all_apps() if apps is None else apps)
    return fleet.fleet_status(clients, targets, REPO)


def test_clusters_that_agree_have_no_drift():
    result = status(home=Cluster(gpus=2))
    assert result["drift"] == []
    home, west, hub = result["clusters"]
    assert (home["cluster"], west["cluster"], hub["cluster"]) == ("eks", "west-b", "hub")
    assert home["gpus"] == 2 and home["nodes"] == 2 and west["gpus"] == 0
    # from argocd/managed, per cluster: the operators, not this repository's own platform app
    assert set(home["pinned"]) == {"kuberay-crds", "kuberay-operator", "training-operator", "kueue"}
    assert "certificates.cert-manager.io" not in home["crds"]  # only the operators' kinds
    text = fleet.render_table(result)
    assert "no drift" in text and "eks-training-b" in text


def test_a_secret_missing_on_one_cluster_is_named_with_that_cluster_and_the_command_that_creates_it():
    result = status(west=Cluster(secrets={"ray-training/hf-token": {"token": "eA=="}}))
    drift = result["drift"]
    assert len(drift) == 1 and drift[0]["cluster"] == "west-b"
    assert "Secret ray-training/ray-auth-token is missing (keys auth_token)" in drift[0]["what"]
    assert drift[0]["fix"].startswith(f"kubectl --context {WEST} -n ray-training create secret generic "
                                      "ray-auth-token --from-literal=auth_token=...")
    assert "never from git" in drift[0]["fix"]


def test_a_gated_secret_says_no_job_is_placed_there_and_another_keeps_its_own_advice():
    """eks's API server refuses RayJob Workloads without the Ray auth Secret (its rendered admission binding): the
    drift says no job is placed there; a Secret only one job reads (hf-token) keeps the plain advice."""
    result = status(home=Cluster(secrets={}))
    home = {d["what"].split(" is missing")[0]: d["what"] for d in result["drift"] if d["cluster"] == "eks"}
    assert "no RayJob is placed on this cluster until it is back" in home["Secret ray-training/ray-auth-token"]
    assert home["Secret ray-training/hf-token"].endswith("the jobs that read it cannot start on this cluster")
    facts = {c["cluster"]: c for c in result["clusters"]}
    assert facts["eks"]["secrets"]["ray-training/ray-auth-token"]["gated"] is True
    assert facts["eks"]["secrets"]["ray-training/hf-token"]["gated"] is False
    lacking = status(west=Cluster(secrets={"ray-training/ray-auth-token": {"other": "eA=="},
                                           "ray-training/hf-token": {"token": "eA=="}}))["drift"]
    assert [d["what"] for d in lacking] == [
        f"Secret ray-training/ray-auth-token lacks the keys auth_token: {fleet.GATED}"]


def test_a_missing_key_is_named_and_patched_in():
    result = status(home=Cluster(secrets={"ray-training/ray-auth-token": {"other": "eA=="},
                                          "ray-training/hf-token": {"token": "eA=="}}))
    (drift,) = result["drift"]
    assert drift["cluster"] == "eks" and "lacks the keys auth_token" in drift["what"]
    assert '"stringData": {"auth_token": "..."}' in drift["fix"]


def test_an_operator_image_and_a_crd_version_that_differ_are_drift_on_the_odd_cluster():
    west = Cluster(images={("kuberay-system", "kuberay-operator", "kuberay-operator"):
                           "quay.io/kuberay/operator:v1.5.0",
                           ("kueue-system", "kueue-controller-manager", "manager"):
                           "registry.k8s.io/kueue/kueue:v0.17.0"},
                   crds={"rayjobs.ray.io": ("ray.io", ["v1"])})
    drift = status(west=west)["drift"]
    whats = {d["what"] for d in drift if d["cluster"] == "west-b"}
    assert "operator image kuberay-system/kuberay-operator/kuberay-operator is quay.io/kuberay/operator:v1.5.0, " \
           "the other clusters' quay.io/kuberay/operator:v1.6.2" in whats, whats
    assert "CRD clusterqueues.kueue.x-k8s.io is missing (the other clusters have it)" in whats
    assert all(d["cluster"] == "west-b" for d in drift)


def test_an_app_on_another_revision_or_out_of_sync_is_drift():
    apps = all_apps(revision_west="0" * 40)
    apps[0]["status"]["sync"]["status"] = "OutOfSync"
    drift = status(apps=apps)["drift"]
    assert any(d["cluster"] == "eks" and "Application eks-platform is OutOfSync" in d["what"] for d in drift)
    # three apps, each on another revision on west-b than on eks: a tie, the first cluster's revision is the usual
    assert sum(d["cluster"] == "west-b" and "synced revision 0000000000" in d["what"] for d in drift) == 3


def test_an_unreachable_cluster_is_drift_and_exit_code_3(monkeypatch):
    result = status(west=Cluster(reachable=False))
    (drift,) = result["drift"]
    assert drift["cluster"] == "west-b" and drift["what"].startswith("unreachable: cannot reach")
    assert result["clusters"][1]["apps"], "its Applications are still read from Argo CD"
    assert "unreachable" in fleet.render_table(result)

    clients = Clients({HOME: Cluster(), WEST: Cluster(reachable=False), HUB: Cluster()}, all_apps())
    monkeypatch.setattr(cli, "Clients", lambda kubeconfig: clients)
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["fleet", "--env", "eks", "--json"]) == EXIT_UNREACHABLE
    assert json.loads(out.getvalue())["environments"][0]["drift"][0]["cluster"] == "west-b"


def test_drift_exits_1_and_an_unknown_environment_is_refused(monkeypatch, capsys):
    clients = Clients({HOME: Cluster(), WEST: Cluster(secrets={"ray-training/hf-token": {"token": "eA=="}}),
                       HUB: Cluster()}, all_apps())
    monkeypatch.setattr(cli, "Clients", lambda kubeconfig: clients)
    assert cli.main(["fleet", "--env", "eks"]) == EXIT_NOT_HEALTHY
    assert "drift (1):" in capsys.readouterr().out
    assert cli.main(["fleet", "--env", "nope"]) == 2
    assert "known environments: eks, minikube" in capsys.readouterr().err
