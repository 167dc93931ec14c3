"""Single-layer OCI image archives for the real node's own images (the pod sandbox, CoreDNS, the operators, the
object store): a static binary and a few files, written as an OCI image layout in a tar that `ctr images import`
reads, named with `io.containerd.image.name` as the manifests reference them. Deterministic: the same files give
the same digest (fixed mtimes and owners)."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"


@dataclass(frozen=True)
class File:
    path: str            # inside the image, absolute
    source: Path | None  # a host file; None with data
    mode: int = 0o755
    data: bytes = b""


@dataclass(frozen=True)
class Image:
    reference: str                      # registry/repository:tag
    files: tuple[File, ...]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    env: tuple[str, ...] = ("PATH=/usr/local/bin:/usr/bin:/bin",)
    directories: tuple[str, ...] = ("tmp",)  # empty directories (mode 1777 for tmp)
    labels: dict = field(default_factory=dict)


def _layer(image: Image) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = set(image.directories)
        for f in image.files:
            parts = f.path.strip("/").split("/")[:-1]
            dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
        for d in sorted(dirs):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755, 0
            tar.addfile(info)
        for f in sorted(image.files, key=lambda f: f.path):
            data = f.source.read_bytes() if f.source else f.data
            info = tarfile.TarInfo(f.path.strip("/"))
            info.size, info.mode, info.mtime = len(data), f.mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest.split(':')[1]}")
    info.size, info.mtime = len(data), 0
    tar.addfile(info, io.BytesIO(data))
    return digest


def write(image: Image, target: Path) -> Path:
    layer = _layer(image)
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": list(image.entrypoint) or None, "Cmd": list(image.cmd) or None,
                         "Env": list(image.env), "User": image.user or None, "Labels": image.labels or None,
                         "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}}
    config = {k: ({ck: cv for ck, cv in v.items() if cv is not None} if isinstance(v, dict) else v)
              for k, v in config.items()}
    config_bytes = json.dumps(config, sort_keys=True).encode()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w") as tar:
        layer_digest = _blob(tar, layer)
        config_digest = _blob(tar, config_bytes)
        manifest = json.dumps({"schemaVersion": 2, "mediaType": MEDIA_MANIFEST,
                               "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest,
                                          "size": len(config_bytes)},
                               "layers": [{"mediaType": MEDIA_LAYER, "digest": layer_digest, "size": len(layer)}]},
                              sort_keys=True).encode()
        manifest_digest = _blob(tar, manifest)
        tag = image.reference.rsplit(":", 1)[1] if ":" in image.reference.rsplit("/", 1)[-1] else "latest"
        index = json.dumps({"schemaVersion": 2, "manifests": [{
            "mediaType": MEDIA_MANIFEST, "digest": manifest_digest, "size": len(manifest),
            "annotations": {"io.containerd.image.name": image.reference, "org.opencontainers.image.ref.name": tag},
            "platform": {"architecture": "amd64", "os": "linux"}}]}, sort_keys=True).encode()
        for name, data in (("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'), ("index.json", index)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return target


def layer_digests(archive: Path) -> list[str]:
    """The digests of the layers every manifest of an OCI archive names (following nested indexes), in order, once
    each: what a node's content store holds beside the snapshots it unpacked them into."""
    with tarfile.open(archive) as tar:
        def blob(digest: str) -> dict:
            member = tar.extractfile(f"blobs/{digest.replace(':', '/', 1)}")
            if member is None:
                raise ValueError(f"{archive}: no blob {digest}")
            return json.load(member)

        index_file = tar.extractfile("index.json")
        if index_file is None:
            raise ValueError(f"{archive}: no index.json (not an OCI archive)")
        pending, layers = list(json.load(index_file).get("manifests", [])), []
        while pending:
            descriptor = pending.pop(0)
            document = blob(descriptor["digest"])
            if "manifests" in document:  # an image index
                pending.extend(document["manifests"])
            for layer in document.get("layers", []):
                if layer["digest"] not in layers:
                    layers.append(layer["digest"])
        return layers
