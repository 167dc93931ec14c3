"""The built image as an OCI archive: how a node without a registry gets it (`ctr -n k8s.io images import`, as
`minikube image load` does). Layers are zstd-compressed: the node's content store keeps the archive's blobs as they
are beside the unpacked layers, and this image is several GiB (zstd costs far less CPU than gzip).

Once written, the archive can stand for the image: `release` empties buildah's storage (twice the archive's size,
uncompressed), and `make image` then finds the image up to date through its archive until an input changes."""
from __future__ import annotations

import subprocess
from pathlib import Path

from . import builders, record
from .buildah import Buildah
from .errors import ImageError


def image_id(reference: str) -> str:
    buildah = Buildah(builders.DEFAULT_CACHE)
    info = buildah.inspect(reference)
    if info:
        return info["FromImageID"]
    if record.archived(builders.DEFAULT_CACHE, reference):  # buildah's storage was released
        return record.entry(builders.DEFAULT_CACHE, reference)["id"]
    raise ImageError(f"no image {reference} in {buildah.root}: run `make image` first")


def write(reference: str, output: Path | None = None) -> Path:
    if builders.docker_available():
        target = output or builders.DEFAULT_CACHE / f"{record.name(reference)}.docker.tar"
        proc = subprocess.run(["docker", "save", "-o", str(target), reference], capture_output=True, text=True)
        if proc.returncode != 0:
            raise ImageError(f"docker save failed:\n{proc.stderr.strip()}")
        return target
    ident = image_id(reference)
    target = output or record.archive_path(builders.DEFAULT_CACHE, reference, ident)
    if target.is_file():
        return target
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    Buildah(builders.DEFAULT_CACHE).run("push", "--compression-format", "zstd", reference,
                                        f"oci-archive:{partial}:{reference}")
    partial.rename(target)
    for stale in target.parent.glob(f"{record.name(reference)}-*.oci.tar"):  # the same name's earlier builds
        if stale != target:
            stale.unlink()
    return target


def release(reference: str) -> tuple[Path, int]:
    """Empty buildah's storage (every image and working container in it, the Debian base's too) once `reference`'s
    archive is written; returns the archive and the bytes freed. A later input change rebuilds from scratch."""
    if builders.docker_available():
        raise ImageError("the image is in Docker's storage, not buildah's: nothing of ours to release")
    archived = record.archived(builders.DEFAULT_CACHE, reference)
    if not archived:
        raise ImageError(f"{reference} has no archive under {builders.DEFAULT_CACHE} to stand for it: "
                         "run `python -m images archive` first")
    buildah = Buildah(builders.DEFAULT_CACHE)
    before = _bytes(buildah.root)
    for args in (("rm", "--all"), ("rmi", "--all", "--force")):
        proc = subprocess.run(buildah.argv(*args), env=buildah.env(), capture_output=True, text=True)
        if proc.returncode != 0:
            raise ImageError(f"buildah {' '.join(args)} failed:\n{proc.stderr.strip()}")
    return archived, before - _bytes(buildah.root)


def _bytes(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) \
        if path.is_dir() else 0
