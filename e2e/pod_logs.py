"""What the e2e cluster's pods print: kwok serves a pod's logs (the API server's `pods/log`, as `kubectl logs`
and the kubernetes client read them) from files named by a `Logs` object of kwok's API, one per pod, in the pod's
namespace and with its name. kwok runs with `--enable-crds=Logs` and the CRD from the kwok module at the pinned
version (kustomize/crd/bases/kwok.x-k8s.io_logs.yaml); the files are in the container runtime's (CRI) log format,
which kwok reads and follows with the kubelet's own reader (k8s.io/cri-client/pkg/logs).

A scenario makes a pod print by appending lines (`write`); a follower sees them as they come. kwok keeps a followed
stream open while the pod exists (it cannot know the container ended), so a client follows until it stops on its own
evidence that the run ended, as a user's `kubectl logs -f` would be stopped.
"""
from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from .components import BY_NAME, module_dir

CRD_FILE = "kustomize/crd/bases/kwok.x-k8s.io_logs.yaml"
CRD_NAME = "logs.kwok.x-k8s.io"
API_VERSION = "kwok.x-k8s.io/v1alpha1"


def crd_text(kwok_dir: Path | None = None) -> str:
    return ((kwok_dir or module_dir(BY_NAME["kwok"])) / CRD_FILE).read_text()


def cri_line(text: str, stream: str = "stdout", when: datetime | None = None) -> str:
    """One full line in the CRI log format: `<RFC3339Nano time> <stream> F <text>`."""
    stamp = (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    return f"{stamp} {stream} F {text}\n"


def log_file(directory: Path, namespace: str, pod: str, container: str, previous: bool = False) -> Path:
    return directory / "pod-logs" / namespace / pod / f"{container}{'.previous' if previous else ''}.log"


def logs_object(namespace: str, pod: str, files: dict[str, tuple[Path, Path]]) -> dict:
    """kwok's Logs for a pod: {container: (current file, previous file)}."""
    return {"apiVersion": API_VERSION, "kind": "Logs", "metadata": {"name": pod, "namespace": namespace},
            "spec": {"logs": [{"containers": [container], "logsFile": str(current), "previousLogsFile": str(previous),
                               "follow": True}
                              for container, (current, previous) in sorted(files.items())]}}


def write(custom_api, directory: Path, namespace: str, pod: str, containers: list[str], lines: dict[str, list[str]],
          stream: str = "stdout") -> None:
    """Append `lines` ({container: [line]}) to the pod's log files, after making sure kwok knows the files of
    every container of the pod (a Logs object, created once)."""
    files = {c: (log_file(directory, namespace, pod, c), log_file(directory, namespace, pod, c, previous=True))
             for c in containers}
    for current, previous in files.values():
        current.parent.mkdir(parents=True, exist_ok=True)
        current.touch()
        previous.touch()
    body = logs_object(namespace, pod, files)
    try:
        custom_api.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "logs", body)
    except Exception as exc:  # noqa: BLE001 - it exists already: same files, nothing to change
        if getattr(exc, "status", None) != 409:
            raise
    for container, texts in lines.items():
        if container not in files:
            raise ValueError(f"pod {namespace}/{pod} has no container {container!r}; it has {', '.join(containers)}")
        with open(files[container][0], "a") as out:
            for text in texts:
                out.write(cri_line(text, stream))
