"""make bootstrap waits for every Application the rendered Argo CD layer promises an environment, including the ones
Argo CD creates only after earlier sync waves are healthy (the e2e caught it stopping at '1/1 ready' when only the
CRD app existed yet)."""
from __future__ import annotations

import io
import shutil

import pytest

from ops import bootstrap
from ops.targets import OpsError, target
from tests.support import REPO, load_yaml


@pytest.mark.parametrize("env", ["minikube", "eks"])
def test_expected_are_the_operator_apps_and_one_per_app_directory(env):
    """Per cluster of the environment, under its prefix (docs/argocd.md): the operator apps, and one per shared app
    directory and per directory of its own (eks's clusters differ: the manager hub runs no standing Ray cluster, the
    pinned jobs are eks's only)."""
    from generator import environments, queueing
    expected = bootstrap.expected_applications(REPO, env)
    loaded = environments.load(REPO, env)
    operators = {"kuberay-crds", "kuberay-operator", "training-operator"}
    if queueing.enabled(loaded):  # Kueue, where the environment queues (generator/queueing.py)
        operators.add("kueue")
    shared = {d.name for d in (REPO / "apps" / env).iterdir() if d.is_dir() and d.name != "clusters"}
    want = set()
    for member in environments.members(loaded):
        own = {d.name for d in (REPO / "apps" / env).glob(f"clusters/{member.cluster}/*")} if member.cluster else set()
        want |= {f"{member.app_prefix}-{name}" for name in operators | shared | own}
    assert expected == want
    if env == "eks":
        assert "eks-ray-cluster" in expected and "eks-west-b-ray-cluster" in expected
        assert "eks-hub-platform" in expected and "eks-hub-ray-cluster" not in expected


def test_a_removed_app_directory_is_no_longer_expected(tmp_path):
    for name in ("argocd", "apps"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.rmtree(tmp_path / "apps" / "minikube" / "ray-cluster")
    expected = bootstrap.expected_applications(tmp_path, "minikube")
    assert "minikube-ray-cluster" not in expected and "minikube-platform" in expected
    assert bootstrap.expected_applications(tmp_path, "no-such-env") == set()


class FakeStatus:
    """status.applications answers, one list per poll."""

    def __init__(self, polls):
        self.polls = list(polls)

    def __call__(self, clients, target):
        return self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]


def app(name, sync="Synced", health="Healthy"):
    return {"name": name, "sync": sync, "health": health, "operation": "Succeeded", "message": ""}


class Target:
    env = "minikube"


def test_waits_for_applications_not_created_yet(monkeypatch):
    polls = [[app("m-crds")], [app("m-crds"), app("m-cluster", "OutOfSync", "Missing")],
             [app("m-crds"), app("m-cluster")]]
    monkeypatch.setattr(bootstrap.status_mod, "applications", FakeStatus(polls))
    shown = io.StringIO()
    apps = bootstrap.wait_settled(None, Target(), timeout=30, out=shown, poll=0, expected={"m-crds", "m-cluster"})
    assert [a["name"] for a in apps] == ["m-crds", "m-cluster"]
    out = shown.getvalue()
    assert "m-crds" in out and "(1/2 ready)" in out and "(2/2 ready)" in out and "(1/1 ready)" not in out


def test_times_out_naming_what_argo_cd_never_created(monkeypatch):
    monkeypatch.setattr(bootstrap.status_mod, "applications", FakeStatus([[app("m-crds")]]))
    with pytest.raises(OpsError) as err:
        bootstrap.wait_settled(None, Target(), timeout=0, poll=0, expected={"m-crds", "m-cluster"})
    assert "has not created m-cluster" in str(err.value)


class StorageApi:
    """kubernetes.client.StorageV1Api answering read_csi_driver with one CSIDriver (or 404)."""

    def __init__(self, policy):
        self.policy = policy

    def __call__(self, api_client):
        return self

    def read_csi_driver(self, name):
        from kubernetes import client
        if self.policy is None:
            raise client.ApiException(status=404, reason="Not Found")
        return client.V1CSIDriver(metadata=client.V1ObjectMeta(name=name),
                                  spec=client.V1CSIDriverSpec(fs_group_policy=self.policy or None))


class Clients:
    def api(self, context):
        return None


def storage_problems(monkeypatch, policy, env="eks"):
    from kubernetes import client
    monkeypatch.setattr(client, "StorageV1Api", StorageApi(policy))
    return bootstrap.checkpoint_storage_problems(Clients(), target(REPO, env), REPO)


def test_fsx_checkpoints_need_the_driver_with_fs_group_policy_file(monkeypatch):
    assert bootstrap.fsx_provisioned(target(REPO, "eks").rendered(REPO, "storageclass-*.yaml")) == ["fsx-sc"]
    assert storage_problems(monkeypatch, "File") == []
    [missing] = storage_problems(monkeypatch, None)
    assert "no CSIDriver fsx.csi.aws.com on context eks-training" in missing and "fsx-sc" in missing
    assert "csidriver.fsGroupPolicy=File" in missing
    for policy in ("ReadWriteOnceWithFSType", ""):  # "" = unset: the API server's default
        [wrong] = storage_problems(monkeypatch, policy)
        assert "has fsGroupPolicy ReadWriteOnceWithFSType" in wrong and "uid 1000 cannot write" in wrong
        assert "csidriver.fsGroupPolicy=File" in wrong


def test_an_environment_without_fsx_checks_no_driver(monkeypatch):
    assert bootstrap.fsx_provisioned(target(REPO, "minikube").rendered(REPO, "storageclass-*.yaml")) == []
    assert storage_problems(monkeypatch, None, env="minikube") == []


class RefreshClients:
    """Clients whose CustomObjectsApi records the patches bootstrap sends (or refuses them)."""

    def __init__(self, refuse: bool = False):
        self.patches, self.refuse = [], refuse

    def custom(self, context):
        return self

    def patch_namespaced_custom_object(self, group, version, namespace, plural, name, body):
        if self.refuse:
            raise RuntimeError("Forbidden")
        self.patches.append(((group, version, namespace, plural, name), body))
        return body


class ArgoTarget(Target):
    argocd_context, argocd_namespace = "minikube", "argocd"


def _refresher_run(monkeypatch, polls, clients):
    import time
    monkeypatch.setattr(bootstrap.status_mod, "applications", FakeStatus(polls))
    out = io.StringIO()
    with bootstrap.RootRefresher(clients, ArgoTarget(), "ray-gitops", out, poll=0.01) as refresher:
        time.sleep(0.5)
    return refresher, out.getvalue()


def test_the_root_is_refreshed_each_time_more_applications_are_settled(monkeypatch):
    """The app of apps advances a sync wave only when Argo CD reconciles it: bootstrap asks for that reconcile when
    more of the environment's Applications are settled, and not while nothing changes."""
    polls = [[], [app("m-crds", "OutOfSync", "Missing")], [app("m-crds")], [app("m-crds")],
             [app("m-crds"), app("m-cluster", "OutOfSync", "Missing")], [app("m-crds"), app("m-cluster")]]
    clients = RefreshClients()
    refresher, out = _refresher_run(monkeypatch, polls, clients)
    assert refresher.refreshes == 2 and len(clients.patches) == 2, clients.patches
    target, body = clients.patches[0]
    assert target == ("argoproj.io", "v1alpha1", "argocd", "applications", "ray-gitops")
    assert body == {"metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}}
    assert out == ""


def test_a_refused_refresh_is_said_once_and_bootstrap_goes_on(monkeypatch):
    clients = RefreshClients(refuse=True)
    refresher, out = _refresher_run(monkeypatch, [[], [app("m-crds")], [app("m-crds"), app("m-cluster")]], clients)
    assert refresher.refreshes == 0
    assert out.count("could not ask Argo CD to refresh ray-gitops") == 1 and "resync" in out, out


def test_once_wait_settled_lists_the_applications_the_refresher_lists_none_itself(monkeypatch):
    """While bootstrap waits, the refresher follows wait_settled's lists: one list call per poll, not two."""
    import threading
    import time
    before = [app("m-crds", "OutOfSync", "Missing")]  # what the thread sees while MultiKueue's links are made
    waits = FakeStatus([[app("m-crds")], [app("m-crds"), app("m-cluster", "OutOfSync", "Missing")],
                        [app("m-crds"), app("m-cluster")]])
    calls = []  # (who listed, handed over yet)
    handed = threading.Event()

    def applications(clients, target):
        thread = threading.current_thread().name
        calls.append((thread, handed.is_set()))
        return before if thread == "root-refresher" else waits(clients, target)

    monkeypatch.setattr(bootstrap.status_mod, "applications", applications)
    clients = RefreshClients()

    with bootstrap.RootRefresher(clients, ArgoTarget(), "ray-gitops", io.StringIO(), poll=0.01) as refresher:
        def on_list(apps):
            handed.set()
            refresher.observe(apps)

        time.sleep(0.2)
        apps = bootstrap.wait_settled(None, ArgoTarget(), timeout=30, out=io.StringIO(), poll=0.05,
                                      expected={"m-crds", "m-cluster"}, on_list=on_list)
        time.sleep(0.2)
    assert [a["name"] for a in apps] == ["m-crds", "m-cluster"]
    thread_before = sum(1 for who, after in calls if who == "root-refresher" and not after)
    thread_after = sum(1 for who, after in calls if who == "root-refresher" and after)
    assert thread_before >= 5 and refresher.lists == thread_before + thread_after
    assert thread_after <= 1  # at most the one in flight as the first list was handed over
    assert sum(1 for who, _ in calls if who != "root-refresher") == 3  # wait_settled's own, one per poll
    assert refresher.refreshes == 2 and len(clients.patches) == 2  # m-crds settled, then m-cluster


def test_the_root_application_is_the_one_root_yaml_makes():
    assert bootstrap.root_application(REPO) == "ray-gitops"


def test_a_private_single_sign_on_ca_is_named_for_the_restart_argocd_server_needs(tmp_path):
    """argocd-server v3.5.1 reads oidc.config's rootCA only at its start: bootstrap says so when the rendered
    argocd-cm has one (the committed environments have none)."""
    import yaml
    assert not bootstrap.private_sso_ca(REPO)
    managed = tmp_path / "argocd" / "managed"
    managed.mkdir(parents=True)
    cm = load_yaml((REPO / "argocd" / "managed" / "configmap-argocd-cm.yaml").read_text())
    oidc = load_yaml(cm["data"]["oidc.config"])
    (managed / "configmap-argocd-cm.yaml").write_text(yaml.safe_dump(cm))
    assert not bootstrap.private_sso_ca(tmp_path)
    cm["data"]["oidc.config"] = yaml.safe_dump({**oidc, "rootCA": "-----BEGIN CERTIFICATE-----\n"})
    (managed / "configmap-argocd-cm.yaml").write_text(yaml.safe_dump(cm))
    assert bootstrap.private_sso_ca(tmp_path)
    assert "rollout restart deployment argocd-server" in bootstrap.SSO_RESTART
