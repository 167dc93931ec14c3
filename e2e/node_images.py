"""The images a real node runs, imported into its containerd under the names the manifests use (no registry exists
here; a user's minikube gets them by `minikube image load`):

- the pod sandbox (registry.k8s.io/pause, from e2e/node/pause.c and the machine's C compiler) and CoreDNS (its
  binary from e2e.components), loaded at start;
- the training image `make image` built, under the reference the environment renders (cluster.image);
- the operators' images (KubeRay, the training-operator) as Argo CD's manifests name them, and the checkpoint
  object store's (the Versity S3 gateway): the binary e2e.components built from its module, at the path the
  Deployment's `command` runs. A loader watches the cluster's Deployments and pods and imports such an image when
  one asks for it, as a registry would serve it. Any other image is not there: the kubelet reports ErrImagePull,
  as a cluster does for an image that does not exist.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import threading
from pathlib import Path

from . import oci
from .operator_pods import OPERATORS
from .real_node import SANDBOX_IMAGE, RealNode

PAUSE_SOURCE = Path(__file__).with_name("node") / "pause.c"
COREDNS_IMAGE = "registry.k8s.io/coredns/coredns:v1.12.1"
OPERATOR_COMMAND = "/manager"


def pause_binary(directory: Path) -> Path:
    target = directory / "pause"
    if target.is_file():
        return target
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("the real node's pod sandbox (e2e/node/pause.c) needs a C compiler: apt-get install gcc")
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([cc, "-Os", "-static", "-o", str(target), str(PAUSE_SOURCE)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {PAUSE_SOURCE} failed: {proc.stderr.strip()}")
    return target


def base_archives(directory: Path, bins: dict) -> list[Path]:
    """The sandbox and CoreDNS images, as OCI archives."""
    pause = oci.Image(SANDBOX_IMAGE, (oci.File("/pause", pause_binary(directory)),), entrypoint=("/pause",),
                      user="65535:65535")
    coredns = oci.Image(COREDNS_IMAGE, (oci.File("/coredns", Path(bins["coredns"])),), entrypoint=("/coredns",),
                        user="65532:65532")
    return [oci.write(pause, directory / "pause.oci.tar"), oci.write(coredns, directory / "coredns.oci.tar")]


def _operator_files(binary: str, bins: dict) -> tuple[oci.File, ...]:
    launcher = bins.get(f"{binary}-launcher")
    if launcher:  # /manager runs the operator at /<binary> (e2e/components/kuberay/launcher)
        return (oci.File(OPERATOR_COMMAND, Path(launcher)), oci.File(f"/{binary}", Path(bins[binary])))
    return (oci.File(OPERATOR_COMMAND, Path(bins[binary])),)


def busybox_binary() -> Path:
    """Debian's busybox-static (`make setup-e2e` installs it)."""
    found = shutil.which("busybox")
    if not found:
        raise RuntimeError("busybox is not installed: `make setup-e2e` installs Debian's busybox-static, whose tools "
                           "the object store's image carries")
    return Path(found)


def _versitygw_files(bins: dict) -> tuple[oci.File, ...]:
    """Upstream's image is Alpine with the binary in /usr/local/bin: the shell tools its init container may use
    (mkdir) come from Debian's busybox-static here."""
    busybox = busybox_binary()
    tools = tuple(oci.File(f"/bin/{tool}", busybox) for tool in ("sh", "mkdir", "ls", "cat"))
    return (oci.File("/usr/local/bin/versitygw", Path(bins["versitygw"])), *tools)


# image pattern -> the files of the image built from our binaries (the operators Argo CD installs; the checkpoint
# object store charts/platform renders). Their entrypoints are the manifests' commands.
SERVED = [
    *((op.pattern, OPERATOR_COMMAND, lambda bins, b=op.binary: _operator_files(b, bins)) for op in OPERATORS),
    (re.compile(r"(^|/)versity/versitygw:"), "/usr/local/bin/versitygw", _versitygw_files),
]


def served_archive(reference: str, bins: dict, directory: Path) -> Path | None:
    """The image a served reference names, as an OCI archive; None for an image this node cannot serve."""
    for pattern, entrypoint, files in SERVED:
        if pattern.search(reference):
            image = oci.Image(reference, files(bins), entrypoint=(entrypoint,), user="65532:65532")
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", reference)
            return oci.write(image, directory / f"{name}.oci.tar")
    return None


class ImageLoader:
    """Imports a served image the moment a Deployment or pod of the cluster asks for it; counts the pods whose
    containers the node started (`ran`, reported through on_ran: the e2e's summary line)."""

    def __init__(self, node: RealNode, api, bins: dict, directory: Path, log, on_ran=None):
        self.node, self.api, self.bins, self.directory, self.log = node, api, bins, directory, log
        self.stopping = threading.Event()
        self.loaded: set[str] = set()
        self.ran: set[str] = set()
        self.on_ran = on_ran
        self.thread = threading.Thread(target=self._run, name=f"image-loader-{node.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()

    def _run(self) -> None:
        from kubernetes import client
        core, apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)
        while not self.stopping.wait(1):
            try:
                # a Deployment's images before its pods exist (a registry serves them before the kubelet asks)
                specs = [d.spec.template.spec for d in apps.list_deployment_for_all_namespaces().items]
                pods = core.list_pod_for_all_namespaces().items
                specs += [p.spec for p in pods]
                wanted = {c.image for s in specs for c in [*(s.init_containers or []), *s.containers]}
                self._count(pods)
                missing = wanted - self.loaded
                if missing:
                    present = self.node.images()
                    for reference in sorted(missing):
                        self._load(reference, present)
            except Exception as exc:  # noqa: BLE001 - logged, tried again in a second
                self.log(f"image loader: {type(exc).__name__}: {exc}")

    def _count(self, pods) -> None:
        started = {p.metadata.uid for p in pods if p.spec.node_name == self.node.name and any(
            (cs.container_id or "").startswith("containerd://") for cs in p.status.container_statuses or [])}
        if started - self.ran:
            self.ran |= started
            if self.on_ran:
                self.on_ran(len(self.ran))

    def _load(self, reference: str, present: set[str]) -> None:
        if _normalized(reference) in present:
            self.loaded.add(reference)
            return
        archive = served_archive(_normalized(reference), self.bins, self.directory)
        if archive is None:
            self.loaded.add(reference)  # not ours to serve: the kubelet reports it cannot pull it
            return
        self.node.import_image(archive)
        self.loaded.add(reference)
        self.log(f"image loader: imported {reference} (built from its module)")


def _normalized(reference: str) -> str:
    """containerd's name for an image reference: docker.io/library/ for bare names, :latest when untagged."""
    name = reference.split("@", 1)[0]
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name
