"""The GitOps loop on the e2e cluster, from a user's side: bootstrap Argo CD from argocd/root.yaml, change the
repository and push (then refresh, as Argo CD's git webhook would), read what Argo CD reports."""
from __future__ import annotations

import json
from pathlib import Path

from ops.bootstrap import NOTIFICATIONS_SECRET, notifications_keys, referenced_secrets

from . import kube, remotes, world

ARGOCD_NS = "argocd"


def management(current: dict) -> tuple[Path, str]:
    env = current["management"]
    cluster = current["clusters"][env]
    return Path(cluster["kubeconfig"]), cluster["context"]


def work_dir(current: dict) -> Path:
    return Path(current["git"]["work"])


def create_prerequisite_secrets(current: dict) -> list[str]:
    """What a user does before bootstrapping (out of git): the Secrets the workloads reference, here with random
    values, in each environment's namespace on its cluster, and the notifications credentials in Argo CD's
    argocd-notifications-secret (which Argo CD's install creates empty). Returns what it created."""
    import secrets as token
    created = []
    for key, cluster in current["clusters"].items():
        env = cluster.get("environment", key)  # one of an environment's clusters: its apps are the environment's
        kubeconfig, context = Path(cluster["kubeconfig"]), cluster["context"]
        for (namespace, name), keys in sorted(referenced_secrets(work_dir(current) / "apps" / env).items()):
            kube.kubectl(kubeconfig, context, "create", "namespace", namespace, check=False)
            data = [f"--from-literal={key}={token.token_hex(16)}" for key in sorted(keys)]
            out = kube.kubectl(kubeconfig, context, "-n", namespace, "create", "secret", "generic", name, *data,
                               check=False)
            if out:
                created.append(f"{key}: {namespace}/{name} ({', '.join(sorted(keys))})")
    kubeconfig, context = management(current)
    for env in sorted({c.get("environment", key) for key, c in current["clusters"].items()}):
        keys = notifications_keys(work_dir(current) / "argocd", env)
        if keys:
            patch = json.dumps({"stringData": {key: token.token_hex(16) for key in keys}})
            kube.kubectl(kubeconfig, context, "-n", ARGOCD_NS, "patch", "secret", NOTIFICATIONS_SECRET, "--type",
                         "merge", "-p", patch)
            created.append(f"{env}: {ARGOCD_NS}/{NOTIFICATIONS_SECRET} ({', '.join(keys)})")
    return created


def bootstrap(current: dict) -> str:
    """The README's bootstrap: the out-of-git Secrets first, then `kubectl apply -n argocd -f argocd/root.yaml`
    with the published file."""
    created = create_prerequisite_secrets(current)
    kubeconfig, context = management(current)
    out = kube.apply(kubeconfig, context, (work_dir(current) / "argocd" / "root.yaml").read_text(),
                     manager="kubectl", namespace=ARGOCD_NS)
    return "".join(f"secret created: {c}\n" for c in created) + out


def applications(current: dict) -> list[dict]:
    kubeconfig, context = management(current)
    out = kube.kubectl(kubeconfig, context, "-n", ARGOCD_NS, "get", "applications", "-o", "json")
    return json.loads(out)["items"]


def applicationsets(current: dict) -> list[dict]:
    kubeconfig, context = management(current)
    out = kube.kubectl(kubeconfig, context, "-n", ARGOCD_NS, "get", "applicationsets", "-o", "json")
    return json.loads(out)["items"]


def app_state(app: dict) -> tuple[str, str]:
    status = app.get("status") or {}
    return ((status.get("sync") or {}).get("status", "Unknown"), (status.get("health") or {}).get("status", "Unknown"))


def application_rows(current: dict) -> list[str]:
    rows = []
    for app in sorted(applications(current), key=lambda a: a["metadata"]["name"]):
        sync, health = app_state(app)
        op = ((app.get("status") or {}).get("operationState") or {}).get("phase", "")
        rows.append(f"{app['metadata']['name']:<36} {sync:<10} {health:<12} {op}")
    return rows


def refresh(current: dict) -> None:
    """What Argo CD's git webhook does on a push: regenerate the ApplicationSets, refresh the Applications."""
    _annotate(current, "applicationsets", "argocd.argoproj.io/application-set-refresh=true")
    request_reconcile(current)


def request_reconcile(current: dict, names: list[str] | None = None) -> None:
    """Ask Argo CD to reconcile Applications now (all, or `names`), as its UI's and CLI's refresh does: the
    `argocd.argoproj.io/refresh: normal` annotation, which the application-controller takes off again. The
    reconcile it starts is the periodic resync's (compare with the latest revision, then auto-sync and self-heal
    decide), only not waiting for the period."""
    _annotate(current, "applications", "argocd.argoproj.io/refresh=normal", names)


def _annotate(current: dict, kind: str, annotation: str, names: list[str] | None = None) -> None:
    """One `kubectl annotate` of `names` (else `--all`) of a kind in Argo CD's namespace; for `--all`, an object
    deleted between kubectl's list and its patch (an ApplicationSet pruning an Application) is no error, the rest
    are annotated on a second pass."""
    kubeconfig, context = management(current)
    for attempt in (1, 2):
        try:
            kube.kubectl(kubeconfig, context, "-n", ARGOCD_NS, "annotate", "--overwrite", kind,
                         *(names or ["--all"]), annotation)
            return
        except kube.KubectlError as exc:
            if names or "NotFound" not in str(exc) or attempt == 2:
                raise


def push(current: dict, message: str, the_world: world.World | None = None) -> str:
    """Commit the checkout and push it to the local remote; the world map is applied again first (a render in
    the checkout writes the real URLs back into argocd/). Returns the new commit."""
    work = work_dir(current)
    if the_world is not None:
        the_world.rewrite_argocd(work)
    sha = remotes.commit_all(work, message)
    remotes.git("push", "-q", "origin", "HEAD:main", cwd=work)  # the remote's hook refreshes Argo CD
    return sha
