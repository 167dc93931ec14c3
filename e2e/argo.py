"""Argo CD v3.5.1 on the e2e management cluster: its CRDs, ConfigMaps and Secrets from the pinned install.yaml,
the `default` AppProject (argocd-server creates it on a real install, before it serves), the controllers as
processes (application-controller, repo-server, applicationset-controller, notifications) with Debian's
redis-server for their cache, and the API server (argocd-server, plain HTTP on loopback) that people log in to
through the single sign-on (e2e.identity): what they may do there is the committed argocd-rbac-cm.

The controllers run with the management cluster's admin credentials; `ARGOCD_FAKE_IN_CLUSTER=true` makes the
in-cluster destination (https://kubernetes.default.svc) that cluster, as it is for an Argo CD installed in it.
The repo-server runs the helm and kustomize that Argo CD v3.5.1 ships (built by e2e.components), and git, in a
private mount namespace with the directories its Deployment mounts (/app/config/..., /helm-working-dir) as
empty directories of the run, its /tmp a directory of the run (TMPDIR), and the Deployment's HELM_* environment.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import kube
from .procs import Supervisor, free_port, in_mount_namespace, port_open, wait_until

NAMESPACE = "argocd"
INSTALL_KINDS = {"CustomResourceDefinition", "ConfigMap", "Secret"}

# The repo-server Deployment's volumes (install.yaml): all empty here (no known hosts, TLS certs or GPG keys). Its
# /tmp emptyDir is a directory of the run given as TMPDIR, not a mount over /tmp: that would hide a clone that lives
# under /tmp (this repository's own binaries with it).
REPO_SERVER_MOUNTS = ("/app/config/ssh", "/app/config/tls", "/app/config/gpg/source", "/app/config/gpg/keys",
                      "/app/config/reposerver/tls", "/app/config/reposerver/mtls", "/helm-working-dir")

# The controllers' timing: --app-resync 120 s (+ up to 60 s jitter) -> 20 s (no jitter). A sync that waits for
# health (the root's sync waves, an operator app's own waves) resumes when Argo CD reconciles the app, so the
# period paces a bootstrap. 60 s was tried (docs/e2e.md, "Where its time goes"): at rest it took 41% less CPU, but
# over a whole run the application-controller and the four kube-apiservers used about the same CPU per minute
# (their load is the scenarios' changes, not the period) and the run was no faster. A scenario that needs
# reconciles asks for them (Harness.reconcile, gitops.request_reconcile) rather than waiting for periods. And
# --persist-resource-health: Argo CD 3 keeps
# each resource's health (what our Lua returned, with its message) only in its cache unless asked to write it
# into the Application's status, where the scenarios read it; it changes nothing else. Everything else is Argo
# CD's default.
APP_RESYNC_SECONDS = 20

DEFAULT_PROJECT = {
    "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
    "metadata": {"name": "default", "namespace": NAMESPACE},
    "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
             "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]},
}


def install_manifests(install_yaml: Path) -> tuple[str, str]:
    """The part of Argo CD's install.yaml the controllers need: (the CRDs, then the namespace with the ConfigMaps,
    Secrets and the default project). No Deployments: the controllers run as processes."""
    docs = [d for d in yaml.safe_load_all(install_yaml.read_text()) if d and d.get("kind") in INSTALL_KINDS]
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    config = [d for d in docs if d["kind"] != "CustomResourceDefinition"]
    for doc in config:
        doc["metadata"]["namespace"] = NAMESPACE
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    return yaml.safe_dump_all(crds), yaml.safe_dump_all([namespace, *config, DEFAULT_PROJECT])


@dataclass
class ArgoCD:
    directory: Path
    kubeconfig: Path
    context: str
    redis_port: int = field(default_factory=free_port)
    repo_port: int = field(default_factory=free_port)
    server_port: int = field(default_factory=free_port)

    @property
    def server_url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def set_secret(self, values: dict[str, str]) -> None:
        """Keys of argocd-secret (what an admin sets out of git: the single sign-on's client secret)."""
        import json
        kube.kubectl(self.kubeconfig, self.context, "-n", NAMESPACE, "patch", "secret", "argocd-secret", "--type",
                     "merge", "-p", json.dumps({"stringData": values}))

    def env(self, tools_bin: Path) -> dict:
        home = self.directory / "home"
        tmp = self.directory / "tmp"
        for d in (home, tmp):
            d.mkdir(parents=True, exist_ok=True)
        path = os.pathsep.join([str(tools_bin), os.environ.get("PATH", "/usr/bin:/bin")])
        return {"PATH": path, "HOME": str(home), "TMPDIR": str(tmp), "KUBECONFIG": str(self.kubeconfig),
                "ARGOCD_FAKE_IN_CLUSTER": "true", "ARGOCD_GIT_ATTEMPTS_COUNT": "3", "LANG": "C.UTF-8"}

    def install(self, install_yaml: Path) -> None:
        crds, config = install_manifests(install_yaml)
        kube.apply(self.kubeconfig, self.context, crds)
        kube.wait_established(self.kubeconfig, self.context, ["applications.argoproj.io",
                                                              "applicationsets.argoproj.io", "appprojects.argoproj.io"])
        kube.apply(self.kubeconfig, self.context, config)

    def start(self, sup: Supervisor, bins: dict) -> None:
        redis = shutil.which("redis-server")
        if not redis:
            raise RuntimeError("redis-server not found: install Debian's redis-server (apt-get install redis-server)")
        sup.start("argocd-redis", [redis, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--protected-mode", "no"])
        wait_until(lambda: port_open(self.redis_port), 20, 0.2, "redis-server")
        # PATH: helm and kustomize (tools), the image's wrapper scripts (beside the argocd binary), git, gpg
        env = self.env(Path(bins["helm"]).parent)
        env["PATH"] = f"{Path(bins['argocd']).parent}{os.pathsep}{env['PATH']}"
        redis_addr = f"127.0.0.1:{self.redis_port}"
        repo_addr = f"127.0.0.1:{self.repo_port}"
        common = ["--loglevel", "info", "--logformat", "text"]
        binds = []
        for mount in REPO_SERVER_MOUNTS:
            host = self.directory / "repo-server" / mount.strip("/").replace("/", "_")
            host.mkdir(parents=True, exist_ok=True)
            host.chmod(0o700)
            binds.append((str(host), mount))
        repo_tmp = self.directory / "repo-server" / "tmp"
        repo_tmp.mkdir(parents=True, exist_ok=True)
        repo_tmp.chmod(0o700)
        repo_env = {**env, "TMPDIR": str(repo_tmp), "HELM_CACHE_HOME": "/helm-working-dir",
                    "HELM_CONFIG_HOME": "/helm-working-dir", "HELM_DATA_HOME": "/helm-working-dir"}
        sup.start("argocd-repo-server", in_mount_namespace([
            bins["argocd-repo-server"], "--address", "127.0.0.1", "--port", str(self.repo_port),
            "--metrics-address", "127.0.0.1", "--metrics-port", str(free_port()), "--redis", redis_addr,
            "--disable-tls", "--client-ca-path=", *common], binds), env=repo_env, cwd=self.directory)
        wait_until(lambda: port_open(self.repo_port), 60, 0.5, "argocd-repo-server")
        sup.start("argocd-application-controller", [
            bins["argocd-application-controller"], "--namespace", NAMESPACE, "--repo-server", repo_addr,
            "--repo-server-plaintext", "--redis", redis_addr, "--metrics-port", free_port(),
            "--app-resync", APP_RESYNC_SECONDS, "--app-resync-jitter", 0, "--persist-resource-health", *common],
            env=env, cwd=self.directory)
        sup.start("argocd-applicationset-controller", [
            bins["argocd-applicationset-controller"], "--namespace", NAMESPACE, "--argocd-repo-server", repo_addr,
            "--repo-server-plaintext", "--metrics-addr", f"127.0.0.1:{free_port()}",
            "--probe-addr", f"127.0.0.1:{free_port()}", "--webhook-addr", f"127.0.0.1:{free_port()}",
            "--enable-leader-election=false", *common], env=env, cwd=self.directory)
        sup.start("argocd-notifications", [
            bins["argocd-notifications"], "--namespace", NAMESPACE, "--argocd-repo-server", repo_addr,
            "--argocd-repo-server-plaintext", "--metrics-port", free_port(), *common], env=env, cwd=self.directory)
        # the API server: no UI assets (an empty directory), no Dex of its own (the single sign-on is external)
        assets = self.directory / "server-assets"
        assets.mkdir(parents=True, exist_ok=True)
        sup.start("argocd-server", [
            bins["argocd-server"], "--namespace", NAMESPACE, "--insecure", "--address", "127.0.0.1",
            "--port", self.server_port, "--metrics-address", "127.0.0.1", "--metrics-port", free_port(),
            "--repo-server", repo_addr, "--repo-server-plaintext", "--redis", redis_addr,
            "--staticassets", assets, *common], env=env, cwd=self.directory)
        wait_until(lambda: port_open(self.server_port), 60, 0.5, "argocd-server")
