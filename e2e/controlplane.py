"""A Kubernetes control plane per environment, as plain processes on loopback: kube-apiserver,
kube-controller-manager, kube-scheduler and kwok (nodes and pods), all clusters sharing one etcd (a key prefix
each). Certificates come from e2e.pki; every port is chosen free."""
from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import kube, kwok_stages, pki, pod_logs
from .procs import Supervisor, free_port, wait_until

ARGOCD_MANAGER = "argocd-manager"  # the identity Argo CD uses on a remote cluster, as `argocd cluster add` names it


# What the e2e API servers write to their audit log: every change a person or a controller asks for, allowed or
# refused (Metadata: who, as whom, verb, object, response code; no bodies), not the reads, not the nodes' and the
# control plane's own bookkeeping (leases, events, pod and node status). `make audit AUDIT_LOG=...` reads it.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "verbs": ["get", "list", "watch"]},
        {"level": "None", "users": ["system:kube-controller-manager", "system:kube-scheduler", "system:apiserver",
                                    "system:kube-proxy"]},
        {"level": "None", "userGroups": ["system:nodes"]},
        {"level": "None", "resources": [{"group": "coordination.k8s.io"}, {"group": "events.k8s.io"},
                                        {"group": "", "resources": ["events", "nodes/status", "pods/status"]}]},
        {"level": "Metadata"},
    ],
}


@dataclass
class Cluster:
    """One environment's cluster: its API server, controllers, scheduler, kwok, and the files to reach it."""
    env: str                      # environment name (minikube, eks)
    context: str                  # the environment's target.context: the kubeconfig context of this cluster
    directory: Path
    index: int                    # distinct pod / service ranges per cluster
    apiserver_port: int = field(default_factory=free_port)
    kwok_port: int = field(default_factory=free_port)
    egress_port: int = field(default_factory=free_port)  # the HTTP CONNECT proxy the API server dials the cluster network through
    ca: pki.CertificateAuthority | None = None
    argocd_token: str = ""
    routes: object = None         # e2e.egress.ServiceRoutes of this cluster
    real_node: object = None      # e2e.real_node.RealNode when the cluster's node is this machine (no kwok)
    authentication_config: Path | None = None  # e2e.identity: the single sign-on this API server trusts

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (JSON lines, AUDIT_POLICY): who wrote what, refusals included."""
        return self.directory / "audit" / "audit.log"

    @property
    def service_cidr(self) -> str:
        return f"10.{96 + self.index}.0.0/16"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def egress_socket(self) -> str:
        """The Unix socket of the egress proxy (a socket path must stay under 108 bytes)."""
        path = self.directory / "egress.sock"
        if len(str(path)) < 100:
            return str(path)
        import hashlib
        return f"/tmp/ray-gitops-e2e-{hashlib.sha256(str(path).encode()).hexdigest()[:12]}.sock"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "admin.kubeconfig"

    @property
    def node_kubeconfig(self) -> Path:
        return self.directory / "kubelet.kubeconfig"

    @property
    def proxy_kubeconfig(self) -> Path:
        return self.directory / "kube-proxy.kubeconfig"

    @property
    def ca_data(self) -> str:
        return base64.b64encode(self.ca.pair.cert_pem).decode()

    @property
    def argocd_credential(self) -> Path:
        """An ExecCredential with the token of ARGOCD_MANAGER: what Argo CD's exec provider prints."""
        return self.directory / "argocd-exec-credential.json"

    def prepare(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        certs = self.directory / "pki"
        self.ca = pki.CertificateAuthority(certs, f"e2e-{self.env}")
        # a real node's pods reach the API server at the `kubernetes` Service's IP, which kube-proxy sends to the
        # node's address: both are in the certificate
        real = (self.real_node.ip, self.real_node.api_service_ip) if self.real_node else ()
        self.serving = self.ca.issue("apiserver", "kube-apiserver", server=True,
                                     hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                                            "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
                                            *real))
        self.admin = self.ca.issue("admin", "e2e-admin", organization="system:masters")
        self.kubelet_client = self.ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                                            organization="system:masters")
        self.kwok_serving = self.ca.issue("kwok", "kwok", server=True, hosts=("127.0.0.1", "localhost"))
        # the aggregation layer (Kueue's visibility API is an APIService): the API server proxies to an extension
        # API server with a client certificate of its own CA, whose requests that server trusts by the
        # requestheader settings it reads from kube-system/extension-apiserver-authentication (as kubeadm sets up)
        self.front_proxy_ca = pki.CertificateAuthority(certs / "front-proxy", f"e2e-{self.env}-front-proxy")
        self.front_proxy_client = self.front_proxy_ca.issue("front-proxy-client", "front-proxy-client")
        self.sa = pki.service_account_keys(certs)
        self.argocd_token = secrets.token_hex(24)
        tokens = self.directory / "tokens.csv"
        tokens.write_text(f'{self.argocd_token},{ARGOCD_MANAGER},{ARGOCD_MANAGER},"system:masters"\n')
        tokens.chmod(0o600)
        self.argocd_credential.write_text(json.dumps({
            "apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
            "status": {"token": self.argocd_token}}))
        self.argocd_credential.chmod(0o600)
        write_kubeconfig(self.kubeconfig, {self.context: (self.server, self.ca.pair.cert, self.admin)})
        if self.real_node:
            # the node's own identities: the kubelet (the Node authorizer reads system:node:<name>), kube-proxy
            node = self.real_node.name
            kubelet = self.ca.issue(f"node-{node}", f"system:node:{node}", organization="system:nodes")
            proxy = self.ca.issue("kube-proxy", "system:kube-proxy")
            write_kubeconfig(self.node_kubeconfig, {self.context: (self.server, self.ca.pair.cert, kubelet)})
            write_kubeconfig(self.proxy_kubeconfig, {self.context: (self.server, self.ca.pair.cert, proxy)})
            return
        self.egress_config = self.directory / "egress-selector.yaml"
        self.egress_config.write_text(yaml.safe_dump({
            "apiVersion": "apiserver.k8s.io/v1beta1", "kind": "EgressSelectorConfiguration",
            "egressSelections": [{"name": "cluster", "connection": {
                "proxyProtocol": "HTTPConnect",
                "transport": {"uds": {"udsName": self.egress_socket}}}}]}))

    def start(self, sup: Supervisor, bins: dict, etcd_url: str, stages: Path) -> None:
        certs = self.directory / "pki"
        if self.real_node:
            # pods reach it through the `kubernetes` Service, whose endpoint is the advertised node address (kept
            # by the lease reconciler); it listens there and on loopback (0.0.0.0: one --bind-address)
            network = ["--bind-address=0.0.0.0", f"--advertise-address={self.real_node.ip}"]
        else:
            # no pod network: the API server's "cluster" traffic (webhooks, logs) goes through the egress proxy
            network = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
                       f"--egress-selector-config-file={self.egress_config}"]
        self.audit_log.parent.mkdir(parents=True, exist_ok=True)
        policy = self.directory / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
        audit = [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
                 "--audit-log-maxsize=100", "--audit-log-maxbackup=2"]
        if self.authentication_config:
            audit.append(f"--authentication-config={self.authentication_config}")
        sup.start(f"{self.env}-kube-apiserver", [
            bins["kube-apiserver"],
            f"--etcd-servers={etcd_url}", f"--etcd-prefix=/registry-{self.env}", *network,
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={self.serving.cert}", f"--tls-private-key-file={self.serving.key}",
            f"--client-ca-file={self.ca.pair.cert}", f"--token-auth-file={self.directory / 'tokens.csv'}",
            f"--service-account-key-file={self.sa.cert}", f"--service-account-signing-key-file={self.sa.key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--authorization-mode=Node,RBAC", f"--service-cluster-ip-range={self.service_cidr}",
            f"--cert-dir={certs}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={self.ca.pair.cert}",
            f"--kubelet-client-certificate={self.kubelet_client.cert}",
            f"--kubelet-client-key={self.kubelet_client.key}",
            f"--requestheader-client-ca-file={self.front_proxy_ca.pair.cert}",
            "--requestheader-allowed-names=front-proxy-client", "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.front_proxy_client.cert}",
            f"--proxy-client-key-file={self.front_proxy_client.key}",
            "--profiling=false", "--v=1", *audit,
        ])
        wait_until(lambda: self.ready(), 120, 0.5, f"the {self.env} API server to be ready")
        common = ["--kubeconfig", self.kubeconfig, "--leader-elect=false", "--secure-port=0"]
        # kwok's nodes are alive as long as kwok says so. With the default grace period (50 s) the node lifecycle
        # controller marks every pod of a kwok cluster not Ready once its API server was down longer (the
        # MultiKueue scenario stops a worker's), and no kwok kubelet reports them Ready again: the operators stay
        # stopped. The controller itself stays (it lifts the not-ready taint from registering nodes); a real node
        # keeps the default.
        grace = [] if self.real_node else ["--node-monitor-grace-period=1h"]
        sup.start(f"{self.env}-kube-controller-manager", [
            bins["kube-controller-manager"], *common,
            f"--service-account-private-key-file={self.sa.key}", f"--root-ca-file={self.ca.pair.cert}",
            "--use-service-account-credentials=false", "--controllers=*", f"--cluster-name={self.env}", *grace,
            "--v=1",
        ])
        sup.start(f"{self.env}-kube-scheduler", [bins["kube-scheduler"], *common, "--v=1"])
        if self.real_node:
            return
        # kwok serves pod logs from files its Logs objects name (e2e.pod_logs): its CRD first.
        kube.apply(self.kubeconfig, self.context, pod_logs.crd_text())
        kube.wait_established(self.kubeconfig, self.context, [pod_logs.CRD_NAME], timeout=120)
        sup.start(f"{self.env}-kwok", [
            bins["kwok"], "--kubeconfig", self.kubeconfig, "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={kwok_stages.NODE_ANNOTATION}=fake",
            "--node-ip=127.0.0.1", f"--node-port={self.kwok_port}",
            f"--server-address=127.0.0.1:{self.kwok_port}",
            f"--tls-cert-file={self.kwok_serving.cert}", f"--tls-private-key-file={self.kwok_serving.key}",
            f"--cidr=10.{244 - self.index}.0.1/16", "--node-lease-duration-seconds=40", "--config", stages, "--enable-crds=Logs",
        ])

    def ready(self) -> bool:
        import ssl
        import urllib.request
        context = ssl.create_default_context(cafile=str(self.ca.pair.cert))
        context.load_cert_chain(str(self.admin.cert), str(self.admin.key))
        with urllib.request.urlopen(f"{self.server}/readyz", context=context, timeout=2) as response:
            return response.status == 200


def start_etcd(sup: Supervisor, bins: dict, directory: Path) -> str:
    client, peer = free_port(), free_port()
    sup.start("etcd", [
        bins["etcd"], f"--data-dir={directory / 'etcd'}", "--name=e2e",
        f"--listen-client-urls=http://127.0.0.1:{client}", f"--advertise-client-urls=http://127.0.0.1:{client}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=e2e=http://127.0.0.1:{peer}", "--unsafe-no-fsync", "--log-level=warn",
        "--listen-metrics-urls=", "--quota-backend-bytes=4294967296",
    ])
    from .procs import port_open
    wait_until(lambda: port_open(client), 30, 0.2, "etcd")
    return f"http://127.0.0.1:{client}"


def write_kubeconfig(path: Path, contexts: dict) -> Path:
    """contexts: {name: (server, ca file, client KeyPair)}. The first one is the current context."""
    clusters, users, ctxs = [], [], []
    for name, (server, ca_file, client) in contexts.items():
        clusters.append({"name": name, "cluster": {"server": server, "certificate-authority": str(ca_file)}})
        users.append({"name": f"{name}-admin", "user": {"client-certificate": str(client.cert),
                                                        "client-key": str(client.key)}})
        ctxs.append({"name": name, "context": {"cluster": name, "user": f"{name}-admin"}})
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": clusters, "users": users,
                                    "contexts": ctxs, "current-context": next(iter(contexts))}))
    path.chmod(0o600)
    return path
