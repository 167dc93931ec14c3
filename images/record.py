"""What .cache/images/sources.json keeps of each image built here, by reference: the id buildah gave it, the hash of
the inputs it was built from and its size. With it an image is known to be up to date, and its OCI archive found,
without asking buildah's storage, which may be released once the archive is written (CI does, for the disk)."""
from __future__ import annotations

import json
from pathlib import Path

FILE = "sources.json"


def load(cache: Path) -> dict:
    path = cache / FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def entry(cache: Path, reference: str) -> dict:
    return load(cache).get(reference) or {}


def save(cache: Path, reference: str, ident: str, source: str, size_bytes: int) -> None:
    known = load(cache)
    known[reference] = {"id": ident, "source": source, "size_bytes": size_bytes}
    cache.mkdir(parents=True, exist_ok=True)
    (cache / FILE).write_text(json.dumps(known, indent=2, sort_keys=True))


def name(reference: str) -> str:
    return reference.replace("/", "_").replace(":", "_")


def archive_path(cache: Path, reference: str, ident: str) -> Path:
    """Where the OCI archive of the image `ident` named `reference` is written."""
    return cache / f"{name(reference)}-{ident[:12]}.oci.tar"


def archived(cache: Path, reference: str) -> Path | None:
    """The archive of the image last built as `reference`, when it was written."""
    ident = entry(cache, reference).get("id")
    if not ident:
        return None
    path = archive_path(cache, reference, ident)
    return path if path.is_file() else None
