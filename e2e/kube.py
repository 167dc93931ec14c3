"""Talking to the e2e clusters: kubectl (as a user would, e.g. for server-side apply) and the kubernetes client."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class KubectlError(Exception):
    pass


def kubectl_binary() -> str:
    local = ROOT / ".tools" / "bin" / "kubectl"
    if local.is_file():
        return str(local)
    found = shutil.which("kubectl")
    if not found:
        raise KubectlError("kubectl not found: run scripts/setup.sh (it installs kubectl into .tools/bin)")
    return found


def kubectl(kubeconfig: Path, context: str, *args: str, stdin: str | None = None, check: bool = True,
            timeout: float = 120) -> str:
    cmd = [kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--context={context}", *args]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    if check and proc.returncode != 0:
        raise KubectlError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def apply(kubeconfig: Path, context: str, text: str, *, manager: str = "e2e", namespace: str | None = None) -> str:
    args = ["apply", "--server-side", "--force-conflicts", f"--field-manager={manager}", "-f", "-"]
    if namespace:
        args[1:1] = ["-n", namespace]
    return kubectl(kubeconfig, context, *args, stdin=text)


def api_client(kubeconfig: Path, context: str):
    from kubernetes import config
    return config.new_client_from_config(config_file=str(kubeconfig), context=context)


def wait_established(kubeconfig: Path, context: str, crds: list[str], timeout: float = 60) -> None:
    """Wait until these CustomResourceDefinitions are Established (kubectl wait fails on a CRD whose status is
    still empty, right after it is created)."""
    from .procs import wait_until

    def established():
        import json
        out = kubectl(kubeconfig, context, "get", *[f"crd/{c}" for c in crds], "-o", "json", check=False)
        try:
            doc = json.loads(out or "{}")
        except ValueError:
            return False
        items = doc.get("items", [doc]) if doc.get("kind") == "List" else [doc]  # one name: the object itself
        ready = {i.get("metadata", {}).get("name") for i in items
                 if any(c.get("type") == "Established" and c.get("status") == "True"
                        for c in (i.get("status") or {}).get("conditions") or [])}
        return ready >= set(crds)
    wait_until(established, timeout, 0.5, f"CRDs {', '.join(crds)} to be established")
