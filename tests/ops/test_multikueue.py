"""make bootstrap makes a MultiKueue manager's kubeconfig Secrets out of git (ops/multikueue.py): one per worker of
environments/eks.yaml (hub -> eks, west-b), each holding a token of the worker's own ServiceAccount and the worker's
API server and CA inline (what Kueue accepts); it waits for what Argo CD has yet to sync, keeps a Secret whose token
is still good, renews one about to expire, and names what it still waits for when time runs out."""
from __future__ import annotations

import base64
import io
import json
import time
from types import SimpleNamespace as NS

import pytest

from ops import multikueue
from ops.targets import EXIT_TIMEOUT, OpsError
from ops.targets import fleet as fleet_targets
from tests.support import REPO, load_yaml

HUB, EKS, WEST = "eks-training-hub", "eks-training", "eks-training-b"


def _NotFound():
    from kubernetes.client.rest import ApiException
    return ApiException(status=404, reason="Not Found")


def jwt(expires_in: float) -> str:
    claims = base64.urlsafe_b64encode(json.dumps({"exp": time.time() + expires_in}).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{claims}.c2ln"


class Cluster:
    def __init__(self, namespaces=(), accounts=(), secrets=None, host="https://x", ca=b"PEM"):
        self.namespaces, self.accounts, self.secrets = set(namespaces), set(accounts), dict(secrets or {})
        self.host, self.ca, self.requests, self.replaced = host, ca, [], []

    def read_namespace(self, name):
        if name not in self.namespaces:
            raise _NotFound()

    def read_namespaced_secret(self, name, namespace):
        if (namespace, name) not in self.secrets:
            raise _NotFound()
        return NS(data=self.secrets[namespace, name])

    def create_namespaced_service_account_token(self, name, namespace, request):
        if (namespace, name) not in self.accounts:
            raise _NotFound()
        self.requests.append((namespace, name, request.spec.expiration_seconds))
        return NS(status=NS(token=jwt(request.spec.expiration_seconds)))

    def create_namespaced_secret(self, namespace, body):
        assert (namespace, body.metadata.name) not in self.secrets
        self.secrets[namespace, body.metadata.name] = {k: base64.b64encode(v.encode()).decode()
                                                      for k, v in body.string_data.items()}
        self.labels = body.metadata.labels

    def replace_namespaced_secret(self, name, namespace, body):
        self.replaced.append(name)
        self.secrets[namespace, name] = {k: base64.b64encode(v.encode()).decode() for k, v in body.string_data.items()}


class Clients:
    def __init__(self, clusters, tmp_path):
        self.clusters, self.tmp = clusters, tmp_path

    def core(self, context):
        return self.clusters[context]

    def api(self, context):
        ca = self.tmp / f"{context}.crt"
        ca.write_bytes(self.clusters[context].ca)
        return NS(configuration=NS(host=self.clusters[context].host, ssl_ca_cert=str(ca)))


def links():
    return multikueue.links(fleet_targets(REPO, "eks"))


def synced():
    """What Argo CD has synced: Kueue's namespace on hub, the multikueue ServiceAccount on each worker."""
    return {HUB: Cluster(namespaces={"kueue-system"}),
            EKS: Cluster(accounts={("ray-training", "multikueue")}, host="https://eks.example:443", ca=b"EKS-CA"),
            WEST: Cluster(accounts={("ray-training", "multikueue")}, host="https://west.example:443", ca=b"WEST-CA")}


def kubeconfig_of(cluster, name):
    return load_yaml(base64.b64decode(cluster.secrets["kueue-system", name]["kubeconfig"]))


def test_the_manager_gets_one_secret_per_worker_in_kueues_namespace():
    found = [(link.manager.cluster, link.worker.cluster, link.secret, link.namespace, link.service_account)
             for link in links()]
    assert found == [("hub", "eks", "multikueue-eks", "kueue-system", "multikueue"),
                     ("hub", "west-b", "multikueue-west-b", "kueue-system", "multikueue")]
    assert multikueue.links(fleet_targets(REPO, "minikube")) == [], "an environment that places nothing"


def test_each_secret_is_a_self_contained_kubeconfig_with_the_workers_own_token(tmp_path):
    clusters = synced()
    out = io.StringIO()
    multikueue.ensure_all(Clients(clusters, tmp_path), links(), timeout=5, out=out, poll=0)
    for name, context, host, ca in (("eks", EKS, "https://eks.example:443", b"EKS-CA"),
                                    ("west-b", WEST, "https://west.example:443", b"WEST-CA")):
        config = kubeconfig_of(clusters[HUB], f"multikueue-{name}")
        (cluster,) = config["clusters"]
        assert cluster["cluster"] == {"server": host, "certificate-authority-data": base64.b64encode(ca).decode()}
        (user,) = config["users"]
        assert set(user["user"]) == {"token"}, "inline token: Kueue refuses token files and exec plugins"
        assert clusters[context].requests == [("ray-training", "multikueue", multikueue.TOKEN_SECONDS)]
        left = multikueue.token_seconds_left(base64.b64decode(
            clusters[HUB].secrets["kueue-system", f"multikueue-{name}"]["kubeconfig"]).decode())
        assert multikueue.TOKEN_SECONDS - 60 < left <= multikueue.TOKEN_SECONDS
    assert clusters[HUB].labels["ray-gitops/environment"] == "eks"
    assert "created Secret kueue-system/multikueue-west-b on hub: west-b at https://west.example:443" in out.getvalue()


def test_a_current_secret_is_kept_and_one_about_to_expire_is_renewed(tmp_path):
    clusters = synced()
    good = multikueue.kubeconfig("https://eks.example:443", b"EKS-CA", jwt(60 * 86400), "eks")
    old = multikueue.kubeconfig("https://west.example:443", b"WEST-CA", jwt(2 * 86400), "west-b")
    clusters[HUB].secrets = {("kueue-system", "multikueue-eks"): {"kubeconfig": base64.b64encode(good.encode()).decode()},
                             ("kueue-system", "multikueue-west-b"): {"kubeconfig": base64.b64encode(old.encode()).decode()}}
    out = io.StringIO()
    multikueue.ensure_all(Clients(clusters, tmp_path), links(), timeout=5, out=out, poll=0)
    assert clusters[EKS].requests == [] and clusters[HUB].replaced == ["multikueue-west-b"]
    assert "Secret kueue-system/multikueue-eks on hub is current" in out.getvalue()
    assert "renewed Secret kueue-system/multikueue-west-b" in out.getvalue()


def test_it_waits_for_argo_cd_and_names_what_never_came(tmp_path):
    clusters = synced()
    clusters[WEST].accounts = set()  # west-b's platform app has not synced its ServiceAccount
    out = io.StringIO()
    with pytest.raises(OpsError) as exc:
        multikueue.ensure_all(Clients(clusters, tmp_path), links(), timeout=0.2, out=out, poll=0.05)
    assert exc.value.exit_code == EXIT_TIMEOUT
    assert "ServiceAccount ray-training/multikueue on west-b (its platform app, synced by Argo CD)" in str(exc.value)
    assert ("kueue-system", "multikueue-eks") in clusters[HUB].secrets, "the worker that is there is done"
    assert out.getvalue().count("waiting for ServiceAccount ray-training/multikueue on west-b") == 1, "said once"
    hub_only = {**synced(), HUB: Cluster()}
    with pytest.raises(OpsError) as exc:
        multikueue.ensure_all(Clients(hub_only, tmp_path), links(), timeout=0.1, out=io.StringIO(), poll=0.05)
    assert "namespace kueue-system on hub (Kueue, synced by Argo CD)" in str(exc.value)


def test_an_unreadable_token_counts_as_expired():
    assert multikueue.token_seconds_left("not: [a kubeconfig") is None
    assert multikueue.token_seconds_left(multikueue.kubeconfig("https://x", b"", "opaque-token", "c")) is None
