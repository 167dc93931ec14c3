"""The built image as an OCI archive: how a node without a registry gets it (`ctr -n k8s.io images import`, as
`minikube image load` does). Layers are zstd-compressed: the node's content store keeps the archive's blobs as they
are beside the unpacked layers, and this image is several GiB (zstd costs far less CPU than gzip)."""
from __future__ import annotations

import subprocess
from pathlib import Path

from . import builders
from .buildah import Buildah
from .errors import ImageError


def image_id(reference: str) -> str:
    buildah = Buildah(builders.DEFAULT_CACHE)
    info = buildah.inspect(reference)
    if not info:
        raise ImageError(f"no image {reference} in {buildah.root}: run `make image` first")
    return info["FromImageID"]


def write(reference: str, output: Path | None = None) -> Path:
    if builders.docker_available():
        target = output or builders.DEFAULT_CACHE / f"{_name(reference)}.docker.tar"
        proc = subprocess.run(["docker", "save", "-o", str(target), reference], capture_output=True, text=True)
        if proc.returncode != 0:
            raise ImageError(f"docker save failed:\n{proc.stderr.strip()}")
        return target
    ident = image_id(reference)[:12]
    target = output or builders.DEFAULT_CACHE / f"{_name(reference)}-{ident}.oci.tar"
    if target.is_file():
        return target
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    Buildah(builders.DEFAULT_CACHE).run("push", "--compression-format", "zstd", reference,
                                        f"oci-archive:{partial}:{reference}")
    partial.rename(target)
    for stale in target.parent.glob(f"{_name(reference)}-*.oci.tar"):  # the same name's earlier builds
        if stale != target:
            stale.unlink()
    return target


def _name(reference: str) -> str:
    return reference.replace("/", "_").replace(":", "_")
