"""The GitOps loop on the e2e cluster, from a user's side: bootstrap Argo CD from argocd/root.yaml, change the
repository and push (then refresh, as Argo CD's git webhook would), read what Argo CD reports."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from . import kube, remotes, world

ROOT = Path(__file__).resolve().parent.parent
ARGOCD_NS = "argocd"


def management(current: dict) -> tuple[Path, str]:
    env = current["management"]
    cluster = current["clusters"][env]
    return Path(cluster["kubeconfig"]), cluster["context"]


def work_dir(current: dict) -> Path:
    return Path(current["git"]["work"])


def bootstrap(current: dict) -> str:
    """`kubectl apply -n argocd -f argocd/root.yaml`, the README's bootstrap step 3, with the published file."""
    kubeconfig, context = management(current)
    return kube.apply(kubeconfig, context, (work_dir(current) / "argocd" / "root.yaml").read_text(),
                      manager="kubectl", namespace=ARGOCD_NS)


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
    kubeconfig, context = management(current)
    for appset in applicationsets(current):
        kube.kubectl(kubeconfig, context, "-n", ARGOCD_NS, "annotate", "--overwrite", "applicationset",
                     appset["metadata"]["name"], "argocd.argoproj.io/application-set-refresh=true")
    for app in applications(current):
        kube.kubectl(kubeconfig, context, "-n", ARGOCD_NS, "annotate", "--overwrite", "application",
                     app["metadata"]["name"], "argocd.argoproj.io/refresh=normal")


def make_in_work(current: dict, *args: str) -> str:
    """Run a generator command in the published checkout (e.g. bump-image), as a user does in their clone."""
    proc = subprocess.run([sys.executable, "-m", "generator", *args], cwd=work_dir(current), capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"python -m generator {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def push(current: dict, message: str, the_world: world.World | None = None) -> str:
    """Commit the checkout and push it to the local remote; the world map is applied again first (a render in
    the checkout writes the real URLs back into argocd/). Returns the new commit."""
    work = work_dir(current)
    if the_world is not None:
        the_world.rewrite_argocd(work)
    sha = remotes.commit_all(work, message)
    remotes.git("push", "-q", "origin", "HEAD:main", cwd=work)
    refresh(current)
    return sha
