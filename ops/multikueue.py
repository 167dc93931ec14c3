"""The kubeconfig Secrets a MultiKueue manager reaches its workers with (docs/multikueue.md), made out of git by
`make bootstrap` from the same cluster inventory the generator renders from (targets.fleet).

For each worker: the ServiceAccount the worker's platform app renders (its ClusterRole allows exactly what
MultiKueue does there), a token for it (TokenRequest, TOKEN_SECONDS), the worker's API server and CA as this
machine's kubeconfig has them, written as a kubeconfig (key `kubeconfig`, CA inline, token inline: Kueue refuses
file paths, exec plugins and skipped TLS checks) into the Secret <prefix>-<worker> in Kueue's namespace on the
manager. A Secret whose token still has RENEW_SECONDS left is kept; an older one is renewed.
"""
from __future__ import annotations

import base64
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from .targets import EXIT_TIMEOUT, Clients, OpsError, Target

TOKEN_SECONDS = 90 * 24 * 3600
RENEW_SECONDS = 30 * 24 * 3600
KEY = "kubeconfig"


@dataclass(frozen=True)
class Link:
    """One worker the manager must reach: where the Secret goes and whose token it holds."""
    manager: Target
    worker: Target
    secret: str
    namespace: str           # Kueue's namespace on the manager
    service_account: str     # in the worker's environment namespace


def links(targets: list[Target]) -> list[Link]:
    """The manager -> worker links of an environment's clusters (none when it places no jobs)."""
    from generator import placement, queueing
    members = {t.cluster: t for t in targets}
    out = []
    for t in targets:
        where = t.placement
        if where is None or where.role != placement.MANAGER:
            continue
        for w in where.workers:
            out.append(Link(t, members[w], where.kubeconfig_secret(w), queueing.KUEUE_NAMESPACE, where.secret_prefix))
    return out


def kubeconfig(server: str, ca_pem: bytes, token: str, cluster: str) -> str:
    """A self-contained kubeconfig for `cluster` (what Kueue accepts: CA and token inline)."""
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": cluster,
           "clusters": [{"name": cluster, "cluster": {"server": server,
                                                      "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
           "users": [{"name": "multikueue", "user": {"token": token}}],
           "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "multikueue"}}]}
    return yaml.safe_dump(doc, sort_keys=False)


def token_seconds_left(kubeconfig_text: str, now: float | None = None) -> float | None:
    """Seconds until the token in a kubeconfig expires (its JWT `exp`), or None when it cannot be read."""
    try:
        token = yaml.safe_load(kubeconfig_text)["users"][0]["user"]["token"]
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return float(claims["exp"]) - (time.time() if now is None else now)
    except (KeyError, IndexError, TypeError, ValueError, yaml.YAMLError):
        return None


def _endpoint(clients: Clients, context: str) -> tuple[str, bytes]:
    """The API server and CA (PEM) of a context, as this machine's kubeconfig has them."""
    conf = clients.api(context).configuration
    if not conf.ssl_ca_cert:
        raise OpsError(f"context {context!r} has no CA certificate in the kubeconfig; Kueue needs one to reach the "
                       "cluster (certificate-authority-data)")
    return conf.host, Path(conf.ssl_ca_cert).read_bytes()


def ensure(clients: Clients, link: Link) -> str | None:
    """Make or renew one kubeconfig Secret; returns what it did, or None when the Secret is current. Raises
    _NotYet when the worker's ServiceAccount or the manager's Kueue namespace does not exist yet (Argo CD has not
    synced them)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    manager = clients.core(link.manager.context)
    try:
        manager.read_namespace(link.namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        raise _NotYet(f"namespace {link.namespace} on {link.manager.cluster} (Kueue, synced by Argo CD)") from None
    try:
        have = manager.read_namespaced_secret(link.secret, link.namespace)
        text = base64.b64decode((have.data or {}).get(KEY, "")).decode()
        left = token_seconds_left(text)
        if left is not None and left > RENEW_SECONDS:
            return None
        action = "renewed"
    except ApiException as exc:
        if exc.status != 404:
            raise
        have, action = None, "created"
    worker = clients.core(link.worker.context)
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
        audiences=[], expiration_seconds=TOKEN_SECONDS))
    try:
        token = worker.create_namespaced_service_account_token(link.service_account, link.worker.namespace,
                                                               request).status.token
    except ApiException as exc:
        if exc.status != 404:
            raise
        raise _NotYet(f"ServiceAccount {link.worker.namespace}/{link.service_account} on {link.worker.cluster} "
                      "(its platform app, synced by Argo CD)") from None
    server, ca = _endpoint(clients, link.worker.context)
    body = client.V1Secret(metadata=client.V1ObjectMeta(
        name=link.secret, namespace=link.namespace,
        labels={"app.kubernetes.io/managed-by": "ray-gitops-bootstrap", "ray-gitops/environment": link.manager.env}),
        string_data={KEY: kubeconfig(server, ca, token, link.worker.cluster)}, type="Opaque")
    if have is None:
        manager.create_namespaced_secret(link.namespace, body)
    else:
        manager.replace_namespaced_secret(link.secret, link.namespace, body)
    return (f"{action} Secret {link.namespace}/{link.secret} on {link.manager.cluster}: {link.worker.cluster} at "
            f"{server} as {link.worker.namespace}/{link.service_account}, token for {TOKEN_SECONDS // 86400} days")


class _NotYet(Exception):
    pass


def ensure_all(clients: Clients, all_links: list[Link], timeout: float, out=sys.stdout, poll: float = 3.0) -> None:
    """Every link's Secret, waiting (up to `timeout`) for what Argo CD has yet to sync."""
    deadline = time.monotonic() + timeout
    pending = list(all_links)
    waiting_for: dict[str, str] = {}  # link's Secret -> what it waits for
    said: set[str] = set()
    while pending:
        for link in list(pending):
            try:
                done = ensure(clients, link)
            except _NotYet as exc:
                waiting_for[link.secret] = str(exc)
                if str(exc) not in said:  # each thing waited for said once (two workers wait for one namespace)
                    print(f"multikueue: waiting for {exc}", file=out, flush=True)
                    said.add(str(exc))
                continue
            waiting_for.pop(link.secret, None)
            print(f"multikueue: {done or f'Secret {link.namespace}/{link.secret} on {link.manager.cluster} is current'}",
                  file=out, flush=True)
            pending.remove(link)
        if pending and time.monotonic() > deadline:
            raise OpsError(f"after {timeout:.0f} s still waiting for {', '.join(sorted(set(waiting_for.values())))}",
                           EXIT_TIMEOUT)
        if pending:
            time.sleep(poll)
