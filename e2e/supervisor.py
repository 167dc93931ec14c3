"""The e2e cluster's supervisor: a background process that brings everything up in order, keeps it running
(restarts what exits, as a kubelet would) and takes it all down on SIGTERM.

Order: etcd; per environment an API server (behind its egress proxy), controller-manager, scheduler, kwok and the
environment's fake nodes; the offline upstream sources and this repository on local remotes; Argo CD on the
management cluster (the environment Argo CD runs in: the one whose cluster is https://kubernetes.default.svc);
the operator pods' processes. Progress goes to supervisor.log and state.json.
"""
from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from pathlib import Path

import yaml

from generator import versions

from . import (
    argo,
    cluster_dns,
    components,
    controlplane,
    identity,
    kube,
    kwok_stages,
    node_images,
    nodes,
    real_node,
    remotes,
    state,
    storage,
    webhook,
    world,
)
from .egress import ConnectProxy, ServiceRoutes
from .operator_pods import OperatorPods
from .procs import Supervisor, free_port, rss_bytes
from .ray_jobs import RayJobAPI

ROOT = Path(__file__).resolve().parent.parent
IN_CLUSTER = "https://kubernetes.default.svc"


def upstream_dir() -> Path:
    return Path(os.environ.get("E2E_UPSTREAM_DIR", ROOT.parent / "shared" / "upstream"))


class Run:
    def __init__(self, run_dir: Path, source: Path):
        self.run_dir, self.source = run_dir, source
        self.sup = Supervisor(run_dir)
        self.log_file = run_dir / "supervisor.log"
        self.stopping = threading.Event()
        self.clusters: dict[str, controlplane.Cluster] = {}
        self.proxies: list[ConnectProxy] = []
        self.servers: list = []  # the Ray job API stand-ins
        self.loops: list = []  # the operator pods' kubelet and the storage stand-in, per cluster
        self.helm_repo: remotes.HelmRepo | None = None
        self.real_nodes: list[real_node.RealNode] = []
        self.bins: dict = {}
        self.peak_rss = 0
        self.environment_of: dict[str, str] = {}  # cluster key -> environment (environments())
        self.argocd: argo.ArgoCD | None = None
        self.sso: identity.SingleSignOn | None = None
        self.sso_urls: dict[str, str] = {}  # real URL -> the e2e's single sign-on / argocd-server (_world)

    def log(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {message}"
        with open(self.log_file, "a") as f:
            f.write(line + "\n")

    def step(self, message: str) -> None:
        self.log(f"[up] {message}")
        state.write(self.run_dir, progress=message)

    # ------------------------------------------------------------------------------------------------------------
    def environments(self) -> list[tuple[str, str, str]]:
        """(cluster key, kubeconfig context, rendered server) of every cluster of an environment that has e2e nodes
        (each cluster of an environment of several gets the environment's nodes, a control plane of its own)."""
        with_nodes = set(nodes.environments())
        out = []
        for key, (env, server) in world.cluster_servers(self.source).items():
            if env not in with_nodes:
                self.log(f"environment {env} has no fake nodes in e2e/nodes.yaml: no e2e cluster for it")
                continue
            self.environment_of[key] = env
            out.append((key, _context(self.source, key), server))
        # the management cluster (Argo CD's own) first
        return sorted(out, key=lambda e: (e[2] != IN_CLUSTER, e[0]))

    def up(self) -> None:
        self.step("building / finding the components")
        with open(self.log_file, "a") as out:
            bins = {k: str(v) for k, v in components.build(out=out).items()}
        self.bins = bins
        envs = self.environments()
        if not envs:
            raise RuntimeError("no environment has an e2e cluster (e2e/nodes.yaml)")
        real = [key for key, _context, _server in envs if nodes.real(self.environment_of[key])]
        if len(real) > 1:  # one kube-proxy and one NetworkPolicy enforcer own this host's iptables
            raise RuntimeError(f"e2e/nodes.yaml gives {', '.join(real)} a real node: this machine can be the node "
                               "of one environment; give the others kwok pools")
        self.step("starting the single sign-on (slapd, Dex) the API servers and Argo CD trust")
        self.argocd = argo.ArgoCD(self.run_dir / "argocd", self.run_dir / "kubeconfig", "")
        self.sso = self._single_sign_on(bins)
        self.step("starting etcd")
        etcd_url = controlplane.start_etcd(self.sup, bins, self.run_dir)
        stages = kwok_stages.write(self.run_dir / "kwok-stages.yaml")
        # the second cluster of an environment of several: no scenario drives its jobs, they end by themselves
        auto = kwok_stages.write(self.run_dir / "kwok-stages-auto-finish.yaml", auto_finish_jobs=True)
        for index, (env, context, _server) in enumerate(envs):
            own = stages if self.environment_of[env] == env else auto
            self.clusters[env] = self._start_cluster(index, env, context, bins, etcd_url, own)
        kubeconfig = controlplane.write_kubeconfig(
            self.run_dir / "kubeconfig",
            {c.context: (c.server, c.ca.pair.cert, c.admin) for c in self.clusters.values()})
        management = self.clusters[envs[0][0]]

        self.step("serving the upstream sources and this repository from local remotes")
        self.helm_repo = remotes.HelmRepo(self.run_dir / "helm-repo", free_port())
        self.helm_repo.directory.mkdir(parents=True, exist_ok=True)
        self.helm_repo.start()
        self.receiver = webhook.Receiver(self.run_dir / "notifications.jsonl")
        self.receiver.start()
        self.servers.append(self.receiver)
        the_world = self._world(bins, envs)
        published = publish(self.source, self.run_dir / "git", the_world)
        the_world.save(self.run_dir / "world.json")
        self.log("world map:\n  " + "\n  ".join(the_world.changes))

        self.step(f"installing Argo CD {versions.pinned().argocd} (CRDs, config) and starting its controllers "
                  "and its API server")
        argocd = self.argocd
        argocd.kubeconfig, argocd.context = management.kubeconfig, management.context
        argocd.install(upstream_dir() / f"argo-cd-{versions.pinned().argocd}" / "manifests" / "install.yaml")
        if self.sso:  # Argo CD's registration with the single sign-on: its client secret, out of git
            argocd.set_secret({"oidc.clientSecret": self.sso.argocd_secret})
        argocd.start(self.sup, bins)

        self._start_kubelets(bins)
        state.write(self.run_dir, status="ready", progress="ready", kubeconfig=str(kubeconfig),
                    management=management.env,
                    clusters={env: {"context": c.context, "server": c.server, "kubeconfig": str(c.kubeconfig),
                                    "environment": self.environment_of[env],
                                    "ca": str(c.ca.pair.cert), "audit_log": str(c.audit_log),
                                    **({"real_node": {"name": c.real_node.name, "ip": c.real_node.ip,
                                                      "containerd": str(c.real_node.containerd_socket)}}
                                       if c.real_node else {})}
                              for env, c in self.clusters.items()},
                    argocd={"namespace": argo.NAMESPACE, "context": management.context,
                            "app_resync_seconds": argo.APP_RESYNC_SECONDS, "server": argocd.server_url},
                    identity=str(self.sso.record_file) if self.sso else None,
                    git=published, world=the_world.changes, world_file=str(self.run_dir / "world.json"),
                    logs=str(self.run_dir / "logs"), notifications=str(self.receiver.record),
                    components=components.describe())
        self.log("[up] ready")

    def _start_cluster(self, index: int, env: str, context: str, bins: dict, etcd_url: str,
                       stages) -> controlplane.Cluster:
        """One environment's control plane with its nodes: a real one (this machine), or kwok's fake nodes with an
        egress proxy and a Ray job API stand-in."""
        cluster = controlplane.Cluster(env, context, self.run_dir / env, index)
        cluster.authentication_config = self.sso.authn_config if self.sso else None
        real = nodes.real(self.environment_of[env])
        if real:
            return self._start_real_cluster(cluster, real, bins, etcd_url, stages)
        self.step(f"starting the {env} control plane (kube-apiserver, controller-manager, scheduler, kwok)")
        routes = ServiceRoutes(lambda c=cluster: _list_services(c))
        cluster.directory.mkdir(parents=True, exist_ok=True)
        proxy = ConnectProxy(env, cluster.egress_port, cluster.egress_socket, routes.resolve, self.log)
        proxy.start()
        self.proxies.append(proxy)
        cluster.routes = routes
        cluster.prepare()
        cluster.start(self.sup, bins, etcd_url, stages)
        kube.apply(cluster.kubeconfig, context, yaml.safe_dump_all(nodes.manifests(self.environment_of[env])))
        ray_api = RayJobAPI(env, kube.api_client(cluster.kubeconfig, context), self.log)
        ray_api.start()
        routes.fallback = ray_api.route
        self.servers.append(ray_api)
        return cluster

    def _start_real_cluster(self, cluster: controlplane.Cluster, real: dict, bins: dict, etcd_url: str,
                            stages) -> controlplane.Cluster:
        """A control plane whose node is this machine: containerd, the kubelet, kube-proxy, kube-router's firewall
        and CoreDNS, with the images the environment runs imported."""
        env = cluster.env
        node = real_node.RealNode(real["name"], cluster.index, cluster.directory / "node", cluster.service_cidr,
                                  labels=real.get("labels") or {})
        cluster.real_node = node
        self.real_nodes.append(node)
        # what `python -m e2e down` needs to undo the host's changes should this process die
        state.write(self.run_dir, real_nodes=[n.record() for n in self.real_nodes])
        self.step(f"starting the {env} control plane (kube-apiserver, controller-manager, scheduler)")
        cluster.prepare()
        node.prepare_host()
        state.write(self.run_dir, real_nodes=[n.record() for n in self.real_nodes])
        cluster.start(self.sup, bins, etcd_url, stages)
        self.step(f"starting the {env} node {node.name}: containerd, images, kubelet, kube-proxy, kube-router")
        started = time.monotonic()
        node.start_containerd(self.sup)
        images_dir = self.run_dir / "node-images"
        archives = node_images.base_archives(images_dir, bins)
        reference = _training_image(self.source, env)
        from images import archive
        training_archive = archive.write(reference)
        archives.append(training_archive)
        for path in archives:
            load = time.monotonic()
            node.import_image(path)
            self.log(f"node {node.name}: imported {path.name} in {time.monotonic() - load:.1f} s")
        state.write(self.run_dir, image_import_seconds=round(time.monotonic() - load, 1))
        # the training image's layers, unpacked, are not needed a second time as blobs (several GiB of disk)
        dropped = node.discard_unpacked_layers(training_archive)
        self.log(f"node {node.name}: dropped the {dropped} unpacked layer blobs of {training_archive.name}")
        node.start_kubelet(self.sup, bins, cluster.ca, cluster.node_kubeconfig)
        node.start_kube_proxy(self.sup, bins, cluster.proxy_kubeconfig)
        node.wait_ready(cluster.kubeconfig, cluster.context)
        node.start_network_policy(self.sup, bins, cluster.kubeconfig)  # it looks its node up at start
        kube.apply(cluster.kubeconfig, cluster.context, yaml.safe_dump_all(cluster_dns.manifests(node.dns_ip)))
        self.log(f"node {node.name}: Ready in {time.monotonic() - started:.0f} s (images {', '.join(a.name for a in archives)})")
        return cluster

    def _start_kubelets(self, bins: dict) -> None:
        self.step("starting the operator pods' kubelet (kwok clusters), the image loader (real nodes) and the "
                  "storage provisioner stand-in")
        for env, cluster in self.clusters.items():
            api = kube.api_client(cluster.kubeconfig, cluster.context)
            if cluster.real_node:
                self.loops.append(node_images.ImageLoader(
                    cluster.real_node, api, bins, self.run_dir / "node-images", self.log,
                    on_ran=lambda count, env=env: state.write(self.run_dir, **{f"real_pods_{env}": count})))
            else:
                self.loops.append(OperatorPods(env, api, cluster.apiserver_port, cluster.ca.pair.cert,
                                               cluster.directory, self.sup, bins, cluster.routes, self.log,
                                               cluster.egress_port))
            self.loops.append(storage.Provisioner(env, api, self.log))
        for loop in self.loops:
            loop.start()

    def _single_sign_on(self, bins: dict) -> identity.SingleSignOn | None:
        """slapd and Dex with a person for each group the rendered RBAC names, or None when the environments name
        no single sign-on."""
        argocd_cm = world.argocd_configmap(self.source, world.ARGOCD_CM)
        oidc = identity.oidc_config(argocd_cm)
        people = identity.people(world.argocd_configmap(self.source, "argocd-rbac-cm"))
        if not oidc.get("issuer") or not people:
            self.log("no single sign-on in argocd-cm (or no groups in argocd-rbac-cm): no Dex")
            return None
        sso = identity.SingleSignOn(self.run_dir / "sso", oidc["clientID"], self.argocd.server_url)
        sso.prepare(people)
        sso.start(self.sup, bins["dex"])
        # what the world map points at them: the issuer argocd-cm names, and Argo CD's own url
        self.sso_urls = {oidc["issuer"]: sso.issuer}
        url = (argocd_cm.get("data") or {}).get("url")
        if url:
            self.sso_urls[url] = self.argocd.server_url
        self.log(f"single sign-on: Dex at {sso.issuer}, people {', '.join(p.username for p in people)}")
        return sso

    def _world(self, bins: dict, envs) -> world.World:
        the_world = world.World()
        if self.sso:
            the_world.urls.update(self.sso_urls)
            the_world.sso_ca = self.sso.tls_ca_pem()
        repo_url, _revision = world.repo_url(self.source)
        the_world.urls[repo_url] = f"file://{self.run_dir / 'git' / 'ray-gitops.git'}"
        for service, url in world.webhook_urls(self.source).items():
            the_world.urls[url] = self.receiver.url(service)
        sources = world.referenced_sources(self.source)
        the_world.urls.update(remotes.build_sources(sources, self.run_dir / "git" / "upstream", self.helm_repo,
                                                    upstream_dir(), bins["helm"]))
        for env, _context, server in envs:
            if server != IN_CLUSTER:
                cluster = self.clusters[env]
                the_world.endpoints[server] = world.Endpoint(cluster.server, cluster.ca.pair.cert_pem,
                                                             cluster.argocd_credential)
        return the_world

    def watch(self) -> None:
        while not self.stopping.wait(1):
            for note in self.sup.check():
                self.log(note)
            self.peak_rss = max(self.peak_rss, rss_bytes([os.getpid(), *self.sup.pids()]))
            if int(time.time()) % 10 == 0:
                state.write(self.run_dir, peak_rss_bytes=self.peak_rss)

    def down(self) -> None:
        for loop in self.loops:
            loop.stop()
        self.sup.stop_all()
        for node in self.real_nodes:
            node.stop(self.bins, self.log)
        if self.real_nodes:
            state.write(self.run_dir, real_nodes=[])
        for proxy in self.proxies:
            proxy.stop()
        for server in self.servers:
            server.stop()
        if self.helm_repo:
            self.helm_repo.stop()
        state.write(self.run_dir, status="stopped", peak_rss_bytes=self.peak_rss)
        self.log("[down] every process stopped")


def _member(source: Path, key: str):
    """The composed environment of a cluster key (world.cluster_servers): an environment, or one of its clusters."""
    from generator import environments
    for name in environments.names(source):
        for member in environments.members(environments.load(source, name)):
            if member.app_prefix == key:
                return member
    raise KeyError(f"no environment or cluster of one renders the cluster {key!r}")


def _context(source: Path, key: str) -> str:
    return _member(source, key).doc["target"].get("context") or key


def _training_image(source: Path, key: str) -> str:
    """The image the environment's Ray clusters run (cluster.image), as the committed apps/ name it."""
    image = _member(source, key).doc["cluster"]["image"]
    return f"{image['repository']}:{image['tag']}"


def _list_services(cluster: controlplane.Cluster) -> list:
    from kubernetes import client
    if not hasattr(cluster, "_core"):
        cluster._core = client.CoreV1Api(kube.api_client(cluster.kubeconfig, cluster.context))
    return cluster._core.list_service_for_all_namespaces().items


def publish(source: Path, git_dir: Path, the_world: world.World) -> dict:
    """This repository's working tree, with the world map applied to argocd/, as branch main of a local remote;
    the checkout stays at git/work for scenarios that change it."""
    bare = git_dir / "ray-gitops.git"
    remotes.init_remote(bare)
    work = git_dir / "work"
    remotes.copy_checkout(source, work)
    changed = the_world.rewrite_argocd(work)
    head = remotes.git("rev-parse", "--short", "HEAD", cwd=source, check=False) or "unknown"
    dirty = " with uncommitted changes" if remotes.git("status", "--porcelain", cwd=source, check=False) else ""
    sha = remotes.push_tree(work, bare, message=f"e2e: ray-gitops at {head}{dirty}; world map on "
                                                f"{', '.join(changed) or 'nothing'}")
    remotes.install_push_webhook(bare, ROOT, git_dir.parent / "push-webhook.log")
    remotes.git("remote", "add", "origin", f"file://{bare}", cwd=work)
    # a user's clone has an identity: `make retry` commits in it
    remotes.git("config", "user.name", remotes.GIT_ENV["GIT_AUTHOR_NAME"], cwd=work)
    remotes.git("config", "user.email", remotes.GIT_ENV["GIT_AUTHOR_EMAIL"], cwd=work)
    remotes.git("fetch", "-q", "origin", cwd=work)
    remotes.git("branch", "-q", "--set-upstream-to=origin/main", "main", cwd=work)
    return {"remote": f"file://{bare}", "work": str(work), "commit": sha, "rewritten": changed}


def main(run_dir: Path, source: Path) -> int:
    run = Run(run_dir, source)
    state.write(run_dir, status="starting", pid=os.getpid(), started=time.time(), source=str(source))
    signal.signal(signal.SIGTERM, lambda *_: run.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: run.stopping.set())
    try:
        run.up()
    except Exception as exc:  # noqa: BLE001 - reported to the waiting `up` through the state file
        run.log("[up] FAILED: " + "".join(traceback.format_exception(exc)))
        state.write(run_dir, status="failed", message=f"{type(exc).__name__}: {exc}")
        run.down()
        state.write(run_dir, status="failed")
        return 1
    run.watch()
    run.down()
    return 0
