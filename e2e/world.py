"""The e2e world map: what differs between the world the repository is written for and the e2e cluster.

The e2e cluster runs the committed manifests unchanged except for the places where the real world is out of
reach offline, and it rewrites only those, in the copy it pushes to its local git remote:

- repository URLs: this repository and the upstream sources Argo CD fetches (KubeRay, the training-operator)
  become local git remotes (file://) and a local Helm repository (http://127.0.0.1);
- a remote cluster's endpoint: its `server` becomes the local API server, a `caData` the rendered Secret carries
  becomes that server's CA (a Secret without one stays without), and `awsAuthConfig` (Argo CD runs
  `argocd-k8s-auth aws` to get a token) becomes `execProviderConfig` running `cat` on a file holding the token:
  the same kind of credential, obtained the same way, with no secret in git;
- a notifications webhook's url (in argocd-notifications-cm) becomes the e2e receiver (e2e.webhook);
- the single sign-on (argocd-cm's oidc.config): its issuer becomes the e2e's Dex (e2e.identity), with Dex's CA as
  its `rootCA`, and Argo CD's `url` the e2e argocd-server.

Everything else (apps/, the ApplicationSets' templates, sync policies, health checks) is what is committed.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

CLUSTER_SECRET_LABEL = "argocd.argoproj.io/secret-type"
NOTIFICATIONS_CM = "argocd-notifications-cm"
ARGOCD_CM = "argocd-cm"


@dataclass(frozen=True)
class Endpoint:
    server: str
    ca_pem: bytes
    credential_file: Path


@dataclass
class World:
    urls: dict[str, str] = field(default_factory=dict)          # real URL -> e2e URL
    endpoints: dict[str, Endpoint] = field(default_factory=dict)  # real server -> e2e endpoint
    changes: list[str] = field(default_factory=list)
    sso_ca: str = ""                                              # the e2e issuer's CA (PEM)

    def _string(self, value: str, where: str) -> str:
        if value in self.urls:
            self.changes.append(f"{where}: {value} -> {self.urls[value]}")
            return self.urls[value]
        if value in self.endpoints:
            self.changes.append(f"{where}: {value} -> {self.endpoints[value].server}")
            return self.endpoints[value].server
        return value

    def _walk(self, node, where: str):
        if isinstance(node, dict):
            return {k: self._walk(v, f"{where}.{k}") for k, v in node.items()}
        if isinstance(node, list):
            return [self._walk(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if isinstance(node, str):
            return self._string(node, where)
        return node

    def _cluster_secret(self, doc: dict, where: str) -> dict:
        data = doc.get("stringData") or {}
        endpoint = self.endpoints.get(data.get("server", ""))
        if endpoint is None:
            return doc
        config = json.loads(data.get("config") or "{}")
        if "awsAuthConfig" in config:
            config.pop("awsAuthConfig")
            config["execProviderConfig"] = {"command": "cat", "args": [str(endpoint.credential_file)],
                                            "apiVersion": "client.authentication.k8s.io/v1beta1"}
            self.changes.append(f"{where}: awsAuthConfig -> execProviderConfig (cat {endpoint.credential_file})")
        tls = config.get("tlsClientConfig") or {}
        if tls.get("caData"):
            tls["caData"] = base64.b64encode(endpoint.ca_pem).decode()
            self.changes.append(f"{where}: tlsClientConfig.caData -> the e2e API server's CA")
        data["config"] = json.dumps(config, sort_keys=True)
        return doc

    def _notifications(self, doc: dict, where: str) -> dict:
        """A webhook service's url (inside the service's YAML text) -> the e2e receiver."""
        for key, text in sorted((doc.get("data") or {}).items()):
            if not key.startswith("service.webhook."):
                continue
            service = yaml.safe_load(text) or {}
            if service.get("url") in self.urls:
                self.changes.append(f"{where}: {key} url {service['url']} -> {self.urls[service['url']]}")
                service["url"] = self.urls[service["url"]]
                doc["data"][key] = yaml.safe_dump(service, sort_keys=True)
        return doc

    def _sso(self, doc: dict, where: str) -> dict:
        """oidc.config's issuer (inside its YAML text) -> the e2e issuer, trusted through its CA."""
        text = (doc.get("data") or {}).get("oidc.config")
        if not text:
            return doc
        config = yaml.safe_load(text) or {}
        if config.get("issuer") in self.urls:
            self.changes.append(f"{where}: oidc.config issuer {config['issuer']} -> {self.urls[config['issuer']]}")
            config["issuer"] = self.urls[config["issuer"]]
            if self.sso_ca:
                config["rootCA"] = self.sso_ca
                self.changes.append(f"{where}: oidc.config rootCA -> the e2e issuer's CA")
            doc["data"]["oidc.config"] = yaml.safe_dump(config, sort_keys=True)
        return doc

    def rewrite_doc(self, doc: dict, where: str) -> dict:
        labels = (doc.get("metadata") or {}).get("labels") or {}
        name = (doc.get("metadata") or {}).get("name")
        if doc.get("kind") == "Secret" and labels.get(CLUSTER_SECRET_LABEL) == "cluster":
            doc = self._cluster_secret(doc, where)
        if doc.get("kind") == "ConfigMap" and name == NOTIFICATIONS_CM:
            doc = self._notifications(doc, where)
        if doc.get("kind") == "ConfigMap" and name == ARGOCD_CM:
            doc = self._sso(doc, where)
        return self._walk(doc, where)

    def rewrite_file(self, path: Path, display: str) -> bool:
        text = path.read_text()
        header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
        before = len(self.changes)
        new_docs = [self.rewrite_doc(d, display) for d in docs]
        if len(self.changes) == before:
            return False
        path.write_text(header + yaml.safe_dump_all(new_docs, sort_keys=True))
        return True

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({
            "urls": self.urls, "sso_ca": self.sso_ca,
            "endpoints": {real: {"server": e.server, "ca_pem": e.ca_pem.decode(),
                                 "credential_file": str(e.credential_file)} for real, e in self.endpoints.items()}},
            indent=2, sort_keys=True))

    @classmethod
    def load(cls, path: Path) -> World:
        data = json.loads(path.read_text())
        return cls(urls=data["urls"], sso_ca=data.get("sso_ca", ""), endpoints={
            real: Endpoint(e["server"], e["ca_pem"].encode(), Path(e["credential_file"]))
            for real, e in data["endpoints"].items()})

    def rewrite_argocd(self, repo: Path) -> list[str]:
        """Rewrite the Argo CD layer of a checkout in place; returns the changed files (repo-relative)."""
        changed = []
        argocd = repo / "argocd"
        for path in sorted([argocd / "root.yaml", *(argocd / "managed").glob("*.yaml")]):
            if path.is_file() and self.rewrite_file(path, str(path.relative_to(repo))):
                changed.append(str(path.relative_to(repo)))
        return changed


def referenced_sources(repo: Path) -> list[dict]:
    """The upstream sources the rendered Argo CD layer makes Argo CD fetch: [{repoURL, targetRevision, path,
    chart}] from the Applications under argocd/managed (and the list elements of ApplicationSets), deduplicated;
    this repository itself is not among them."""
    own, _revision = repo_url(repo)
    candidates = []
    for path in sorted((repo / "argocd" / "managed").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            spec = doc.get("spec") or {}
            if doc.get("kind") == "Application":
                candidates += [spec["source"]] if "source" in spec else list(spec.get("sources") or [])
            elif doc.get("kind") == "ApplicationSet":
                for gen in _list_generators(spec.get("generators", [])):
                    candidates += gen.get("elements", [])
    seen, out = set(), []
    for source in candidates:
        key = (source.get("repoURL"), source.get("targetRevision"), source.get("path") or "",
               source.get("chart") or "")
        if key[0] and key[0] != own and "{{" not in key[0] and key not in seen:
            seen.add(key)
            out.append({"repoURL": key[0], "targetRevision": key[1], "path": key[2], "chart": key[3]})
    return out


def _list_generators(generators: list) -> list:
    found = []
    for gen in generators:
        if "list" in gen:
            found.append(gen["list"])
        for nested in ("matrix", "merge"):
            if nested in gen:
                found += _list_generators(gen[nested].get("generators", []))
    return found


def repo_url(repo: Path) -> tuple[str, str]:
    """(repoURL, targetRevision) of this repository, as the root Application names it."""
    root = yaml.safe_load((repo / "argocd" / "root.yaml").read_text())
    source = root["spec"]["source"]
    return source["repoURL"], source.get("targetRevision", "HEAD")


def cluster_servers(repo: Path) -> dict[str, tuple[str, str]]:
    """{cluster key: (environment, server)} from the rendered cluster Secrets. The key is the environment's name on
    a single-cluster environment; on one of several clusters, the prefix of that cluster's Application names (the
    environment's name on its cluster keyed like it, `<env>-<cluster>` on the others)."""
    out = {}
    for path in sorted((repo / "argocd" / "managed").glob("secret-cluster-*.yaml")):
        doc = yaml.safe_load(path.read_text())
        labels = doc["metadata"].get("labels") or {}
        env = labels.get("ray-gitops/environment")
        if env:
            out[labels.get("ray-gitops/app-prefix", env)] = (env, doc["stringData"]["server"])
    return out


def webhook_urls(repo: Path) -> dict[str, str]:
    """{service name: url} of the notifications webhooks the rendered Argo CD layer configures."""
    path = repo / "argocd" / "managed" / f"configmap-{NOTIFICATIONS_CM}.yaml"
    if not path.is_file():
        return {}
    data = (yaml.safe_load(path.read_text()) or {}).get("data") or {}
    return {key.split(".", 2)[2]: (yaml.safe_load(text) or {}).get("url", "")
            for key, text in data.items() if key.startswith("service.webhook.")}


def argocd_configmap(repo: Path, name: str) -> dict:
    """A ConfigMap of the rendered Argo CD layer (argocd/managed/configmap-<name>.yaml), {} when there is none."""
    path = repo / "argocd" / "managed" / f"configmap-{name}.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
