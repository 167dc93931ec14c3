"""One environment on three clusters (environments/eks.yaml `clusters:` eks, west-b and hub, MultiKueue's manager):
the e2e runs a control plane for each (four in all, with minikube's), Argo CD syncs every Application of each from
the one ApplicationSet and the root, each cluster's own values (its FSx subnet) are on that cluster only, the
standing Ray cluster runs on both workers (not on hub, which runs no training) and the pinned jobs on eks only;
`make fleet` reads every cluster and names the one that lost a Secret. Prints the budgets: time for each cluster to
converge, memory per control plane."""
from __future__ import annotations

import json
import subprocess
from datetime import datetime

import pytest

from tests.e2e.harness import BUDGETS, wait_for

ENV, SECOND, HUB = "eks", "eks-west-b", "eks-hub"
KEYS = (ENV, SECOND, HUB)
SUBNETS = {"eks": "subnet-0123456789abcdef0", SECOND: "subnet-0fedcba9876543210"}


def _apps_of(e2e, key: str) -> list[dict]:
    cluster = key.removeprefix(f"{ENV}-") if key != ENV else ENV
    return [a for a in e2e.apps() if ((a["metadata"].get("labels") or {}).get("ray-gitops/cluster")) == cluster]


def test_each_cluster_of_the_environment_is_a_cluster_of_its_own(e2e):
    assert e2e.clusters[SECOND]["environment"] == ENV and e2e.clusters[ENV]["environment"] == ENV
    assert e2e.clusters[SECOND]["server"] != e2e.clusters[ENV]["server"]
    assert e2e.envs == sorted({c["environment"] for c in e2e.clusters.values()}), "a cluster is not an environment"


@pytest.fixture(scope="module")
def converged(e2e, bootstrapped):
    """Every promised Application of both clusters exists, Synced and Healthy (a first-cluster job may still run)."""
    return test_every_application_of_both_clusters_is_synced_and_healthy_on_its_own_cluster(e2e, bootstrapped)


def test_every_application_of_both_clusters_is_synced_and_healthy_on_its_own_cluster(e2e, bootstrapped):
    promised = e2e.expected_apps(ENV)
    want = {key: {n for n in promised if n.startswith(f"{key}-")} for key in (SECOND, HUB)}
    want[ENV] = promised - want[SECOND] - want[HUB]
    assert all(want.values()), want

    def check():
        apps = {key: {a["metadata"]["name"]: a for a in _apps_of(e2e, key)} for key in KEYS}
        problems = [f"{key}: not generated yet: {', '.join(sorted(want[key] - set(found)))}"
                    for key, found in apps.items() if want[key] - set(found)]
        problems += [e2e.describe(a) for key, found in apps.items() for a in found.values() if not settled(key, a)]
        return not problems, "; ".join(problems)

    def settled(key, app):
        """Synced and Healthy; on the first cluster a job may still train (its scenarios end it, not this one):
        Synced and Progressing."""
        sync, health = e2e.app_state(app)
        running = key == ENV and "-job-" in app["metadata"]["name"] and health == "Progressing"
        return sync == "Synced" and (health == "Healthy" or running)
    wait_for(check, 420, 5, "the Applications of eks's three clusters")
    for key in KEYS:
        apps = _apps_of(e2e, key)
        # each Application aimed at its own cluster (the world map's server)
        assert {a["spec"]["destination"]["server"] for a in apps} == {e2e.clusters[key]["server"]}, key
    names = {key: {a["metadata"]["labels"]["ray-gitops/app"] for a in _apps_of(e2e, key)} for key in KEYS}
    pinned = {f"job-{name}" for name, job in e2e.env_doc(ENV)["jobs"].items() if job.get("pinnedTo") == ENV}
    assert pinned and pinned <= names[ENV] and not pinned & (names[SECOND] | names[HUB]), names
    assert names[SECOND] == names[ENV] - pinned and {"platform", "ray-cluster", "kuberay-operator"} <= names[SECOND]
    # the manager: the operators and the platform (its queue and MultiKueue objects), no standing Ray cluster
    assert {"platform", "kueue"} <= names[HUB] and "ray-cluster" not in names[HUB], names[HUB]


def test_each_clusters_own_values_are_on_that_cluster_only(e2e, converged):
    from kubernetes import client

    def subnet(key):
        try:
            sc = client.StorageV1Api(e2e.api(key)).read_storage_class("fsx-sc")
        except client.ApiException:
            return None
        return (sc.parameters or {}).get("subnetId")
    wait_for(lambda: ({k: subnet(k) for k in SUBNETS} == SUBNETS, {k: subnet(k) for k in SUBNETS}), 240, 5,
             "each cluster's StorageClass with its own subnet")


def test_the_shared_apps_run_on_both_clusters(e2e, converged):
    def rayclusters(key):
        return sorted(c["metadata"]["name"] for c in e2e.objects(key, ("ray.io", "v1"), "rayclusters",
                                                                  namespace=e2e.namespace(ENV))
                      if not (c["metadata"].get("ownerReferences")))
    wait_for(lambda: (rayclusters(ENV) and rayclusters(ENV) == rayclusters(SECOND),
                      {k: rayclusters(k) for k in (ENV, SECOND)}), 240, 5, "the standing RayCluster on both clusters")


def test_make_fleet_names_the_cluster_that_lost_a_secret_and_the_fix(e2e, converged):
    """make fleet (python -m ops fleet) reads both clusters: the same operator images and CRD versions, every
    out-of-git Secret present. The Ray auth Secret deleted on west-b: the command exits 1 and names that cluster,
    that Secret and the kubectl that recreates it on that cluster's context; restored, that drift is gone."""
    namespace = e2e.namespace(ENV)
    secret = e2e.env_doc(ENV)["cluster"]["auth"]["secretName"]
    context = e2e.context(SECOND)

    def fleet():
        proc = e2e.ops("fleet", "--env", ENV, "--json", timeout=120)
        assert proc.returncode in (0, 1), proc.stderr or proc.stdout
        return proc.returncode, json.loads(proc.stdout)["environments"][0]

    code, before = fleet()
    clusters = {c["cluster"]: c for c in before["clusters"]}
    assert set(clusters) == {"eks", "west-b", "hub"} and not any(c["unreachable"] for c in clusters.values())
    assert clusters["eks"]["operators"] and clusters["eks"]["operators"] == clusters["west-b"]["operators"] \
        == clusters["hub"]["operators"]
    assert clusters["eks"]["crds"] and clusters["eks"]["crds"] == clusters["west-b"]["crds"] == clusters["hub"]["crds"]
    assert clusters["west-b"]["secrets"][f"{namespace}/{secret}"]["missing"] is False
    assert not [d for d in before["drift"] if "Secret" in d["what"] or "operator" in d["what"] or "CRD" in d["what"]
                ], before["drift"]
    print(e2e.ops("fleet", "--env", ENV, timeout=120).stdout)  # the table, for the run's log

    saved = e2e.kubectl(SECOND, "-n", namespace, "get", "secret", secret, "-o", "json")
    e2e.kubectl(SECOND, "-n", namespace, "delete", "secret", secret)
    try:
        code, after = fleet()
        assert code == 1
        lost = [d for d in after["drift"] if f"Secret {namespace}/{secret} is missing" in d["what"]]
        assert [d["cluster"] for d in lost] == ["west-b"], after["drift"]
        assert lost[0]["fix"].startswith(f"kubectl --context {context} -n {namespace} create secret generic {secret} "
                                         "--from-literal=auth_token=..."), lost[0]
        proc = e2e.ops("fleet", "--env", ENV, timeout=120)
        assert proc.returncode == 1 and f"west-b: Secret {namespace}/{secret} is missing" in proc.stdout, proc.stdout
    finally:
        restored = json.loads(saved)
        restored["metadata"] = {"name": secret, "namespace": namespace}
        e2e.kubectl(SECOND, "apply", "-f", "-", stdin=json.dumps(restored))
    _, healed = fleet()
    assert not [d for d in healed["drift"] if "Secret" in d["what"]], healed["drift"]


def test_budgets_time_to_converge_and_memory_per_control_plane(e2e, bootstrapped, converged):
    """From the root Application's creation to the moment every Application of a cluster was first Healthy (the
    bootstrap watch's record), and the resident memory of each cluster's control plane now."""
    root = next(a for a in e2e.apps() if a["metadata"]["name"] == "ray-gitops")
    start = _time(root["metadata"]["creationTimestamp"])
    for key in sorted(e2e.clusters):
        cluster = key.removeprefix(f"{ENV}-") if key.startswith(f"{ENV}-") else key
        names = [a["metadata"]["name"] for a in e2e.apps()
                 if (a["metadata"].get("labels") or {}).get("ray-gitops/cluster", key) == cluster
                 and (a["metadata"].get("labels") or {}).get("ray-gitops/environment") == e2e.clusters[key]["environment"]
                 and "-job-" not in a["metadata"]["name"]]  # the platform: operators, namespace, standing cluster
        first = [bootstrapped.first_healthy.get(name) for name in names]
        if names and all(first):
            BUDGETS[f"cluster {key}: its operators, platform and standing cluster first Healthy after the root's creation"] = round(
                max(_time(t) for t in first) - start)
        BUDGETS[f"cluster {key}: control plane memory, apiserver + controller-manager + scheduler + kwok (MiB)"] = \
            round(_control_plane_rss(e2e, key) / 2**20)
    print({k: v for k, v in BUDGETS.items() if k.startswith("cluster ")})
    assert all(BUDGETS[f"cluster {k}: control plane memory, apiserver + controller-manager + scheduler + kwok (MiB)"]
               > 0 for k in e2e.clusters), "no control plane process found by its cluster's directory"


def _time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _control_plane_rss(e2e, key: str) -> int:
    """The resident memory of the processes whose command line names this cluster's own directory."""
    from pathlib import Path
    directory = str(Path(e2e.clusters[key]["kubeconfig"]).parent)
    out = subprocess.run(["ps", "-ww", "-eo", "rss=,args="], capture_output=True, text=True).stdout
    names = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
    return sum(int(line.split(None, 1)[0]) * 1024 for line in out.splitlines()
               if directory + "/" in line and any(n in line.split(None, 2)[1] for n in names))
