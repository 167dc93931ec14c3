"""Checkpoint folders: what goes in them, how they are verified, and where the latest one of a run is.

A checkpoint is a folder that Ray Train persists under ``<storage>/<name>/epoch-NNNNNN``. Next to the framework's
own files (``model.pt``, a TensorFlow checkpoint, ``model.ubj``) it holds ``training_checkpoint.json``: the epoch,
the metric history of the whole lineage, and a SHA-256 of every file. A checkpoint whose manifest is missing or
whose files do not match is *corrupt*: the driver checks the one a run would resume from before starting workers,
and workers check again when they load it, so a damaged checkpoint is a clear error, never a silent restart.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from training.errors import CheckpointError
from training.runtime import storage

META_FILE = "training_checkpoint.json"
FORMAT_VERSION = 1
RAY_SNAPSHOT_FILE = "checkpoint_manager_snapshot.json"


def checkpoint_dir_name(epoch: int) -> str:
    return f"epoch-{epoch:06d}"


def _files(directory: str) -> list[str]:
    out = []
    for root, _, names in os.walk(directory):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), directory)
            if rel != META_FILE:
                out.append(rel.replace(os.sep, "/"))
    return sorted(out)


def write_manifest(directory: str, *, epoch: int, framework: str, history: list[dict], metrics: dict[str, Any],
                   extra: dict[str, Any] | None = None) -> dict:
    """Write ``training_checkpoint.json`` describing the files already in ``directory``."""
    meta = {
        "format": FORMAT_VERSION,
        "framework": framework,
        "epoch": int(epoch),
        "metrics": metrics,
        "history": history,
        "files": {rel: storage.sha256(os.path.join(directory, rel)) for rel in _files(directory)},
        "createdAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if extra:
        meta["extra"] = extra
    storage.write_bytes(os.path.join(directory, META_FILE), json.dumps(meta, indent=1, default=float).encode())
    return meta


def _check_meta(meta: Any, where: str) -> dict:
    if not isinstance(meta, dict) or not isinstance(meta.get("files"), dict) or not isinstance(meta.get("epoch"), int):
        raise CheckpointError(f"checkpoint {where} is corrupt: {META_FILE} lacks epoch/files")
    if meta.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {where} has format {meta.get('format')!r}, this package reads {FORMAT_VERSION}")
    return meta


def verify(path: str, framework: str | None = None) -> dict:
    """Verify a checkpoint folder, a local path or a storage URI (``file://`` too): its manifest is readable and of
    this format, every file it lists is there with its SHA-256, and it was written by ``framework`` (if given).
    Returns the manifest; raises ``CheckpointError`` naming the folder."""
    if path.startswith("file://"):
        path = path[len("file://"):]
    try:
        if not storage.is_dir(path):
            raise CheckpointError(f"checkpoint {path} does not exist")
        meta = json.loads(storage.read_bytes(storage.join(path, META_FILE)))
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} is corrupt or not from this package: {META_FILE} is missing") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {path} is corrupt: cannot read {META_FILE} ({exc})") from None
    meta = _check_meta(meta, path)
    for rel, digest in meta["files"].items():
        try:
            actual = storage.sha256(storage.join(path, rel))
        except OSError:
            raise CheckpointError(f"checkpoint {path} is corrupt: {rel} is missing") from None
        if actual != digest:
            raise CheckpointError(f"checkpoint {path} is corrupt: {rel} does not match its recorded SHA-256")
    if framework and meta.get("framework") not in (framework, None):
        raise CheckpointError(f"checkpoint {path} was written by framework {meta.get('framework')!r}, this run uses {framework!r}")
    return meta


def latest_in_run(run_path: str) -> str | None:
    """The checkpoint Ray Train would hand to ``get_checkpoint()`` when this run is started again, or None.

    Read from Ray Train's ``checkpoint_manager_snapshot.json`` in the run folder.
    """
    snap_path = storage.join(run_path, RAY_SNAPSHOT_FILE)
    try:
        if not storage.exists(snap_path):
            return None
        snap = json.loads(storage.read_bytes(snap_path))
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"the run folder {run_path} has an unreadable {RAY_SNAPSHOT_FILE} ({exc}); "
            "delete the run folder or use another name to start afresh"
        ) from None
    latest = snap.get("latest_checkpoint_result") if isinstance(snap, dict) else None
    if not latest:
        return None
    name = latest.get("checkpoint_dir_name")
    if not name:
        raise CheckpointError(f"the run folder {run_path} has a {RAY_SNAPSHOT_FILE} without a checkpoint folder name")
    return storage.join(run_path, name)


def checkpoint_to_resume(run_path: str, resume_from: str | None) -> str | None:
    """The checkpoint the first worker group of this run will load: the run's own latest, else ``resume_from``
    (``checkpoint.resumeFrom``)."""
    return latest_in_run(run_path) or resume_from
