"""Before training: the checkpoint storage is writable, and every Ray node sees what the driver writes there.

Ray Train (V2) writes a marker under the run folder from its controller and looks for it again only when a worker
persists a checkpoint: a storage path that one pod alone sees (a folder in the driver's container, an emptyDir, a
ReadWriteOnce claim) fails after the first epochs have been trained, with Ray's generic message. This check does the
same before any worker starts: the driver writes a marker holding a random token at
``<storage>/.storage-check-<token>``, a zero-CPU task pinned to every other alive node reads it back, and the driver
removes it. A node that does not see it (or cannot read the
store at all: an object store's endpoint or credentials missing in that pod) stops the run with a message naming
the path, the node and the fix. Nodes that join later (an autoscaler, elastic workers) are not checked.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from training.errors import CheckpointError
from training.runtime import storage

MARKER_PREFIX = ".storage-check-"
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class NodeView:
    """What one node saw at the marker's path."""

    address: str
    seen: bool
    detail: str = ""


def read_marker(path: str, token: str) -> tuple[bool, str]:
    """On a node: whether the marker at ``path`` holds ``token`` (and, when not, what was there instead)."""
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        return False, "no such file"
    except Exception as exc:  # noqa: BLE001 - whatever the filesystem says is the evidence
        return False, f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    if data.decode("utf-8", errors="replace") != token:
        return False, "a file with another token (a different file system at the same path)"
    return True, ""


def _fix(storage_path: str) -> str:
    if storage.is_uri(storage_path) and not storage_path.startswith("file://"):
        return ("every Ray pod needs the same endpoint and credentials for the store (AWS_ENDPOINT_URL_S3, AWS_REGION, "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY: the charts' cluster.checkpoints with store s3 set them on "
                "every Ray container)")
    return ("set checkpoint.storagePath (or TRAINING_STORAGE_PATH) to storage every pod shares: an s3:// or gs:// URI "
            "(the charts' cluster.checkpoints with store: s3, e.g. the platform chart's objectStore), or a "
            "ReadWriteMany volume mounted at the same path in every pod (store: volume with a ReadWriteMany claim)")


def write_marker(storage_path: str) -> tuple[str, str]:
    """The driver's marker: (its path, its token). A storage the driver cannot write to is a checkpoint error."""
    token = secrets.token_hex(16)
    path = storage.join(storage_path, f"{MARKER_PREFIX}{int(time.time())}-{token[:12]}")
    try:
        storage.write_bytes(path, token.encode())
    except Exception as exc:  # noqa: BLE001 - pyarrow raises OSError subclasses and others; all mean the same here
        hint = (" (the bucket must exist: the platform chart's objectStore makes its bucket at start)"
                if "bucket" in str(exc).lower() else "")
        raise CheckpointError(f"cannot write to the checkpoint storage {storage_path}: {type(exc).__name__}: "
                              f"{str(exc).strip()[:300]}{hint}", field="checkpoint.storagePath") from None
    return path, token


def remove_marker(path: str) -> None:
    try:
        fs, p = storage.filesystem(path)
        fs.delete_file(p)
    except Exception:  # noqa: BLE001 - a leftover marker is harmless
        pass


def other_nodes() -> list[tuple[str, str]]:
    """(node id, address) of every alive Ray node but the driver's."""
    import ray

    mine = ray.get_runtime_context().get_node_id()
    return [(n["NodeID"], str(n.get("NodeManagerAddress") or n["NodeID"][:12])) for n in ray.nodes()
            if n.get("Alive") and n.get("NodeID") != mine]


def views_from_nodes(path: str, token: str, nodes: list[tuple[str, str]], timeout_s: float) -> list[NodeView]:
    """Read the marker from a zero-CPU task pinned to each node; a node that does not answer in time has not seen it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(read_marker)
    refs = {address: task.options(num_cpus=0, max_retries=0,
                                  scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
            .remote(path, token) for node_id, address in nodes}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    views = []
    for address, ref in refs.items():
        if ref not in ready:
            ray.cancel(ref, force=True)
            views.append(NodeView(address, False, f"no answer within {timeout_s:.0f} s"))
            continue
        try:
            seen, detail = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - a task that could not run on the node
            seen, detail = False, f"the check could not run there: {type(exc).__name__}: {str(exc).strip()[:200]}"
        views.append(NodeView(address, seen, detail))
    return views


def check_shared(storage_path: str, timeout_s: float = TIMEOUT_S) -> int:
    """Raise ``CheckpointError`` unless the driver can write to ``storage_path`` and every other alive Ray node reads
    back what it wrote; the number of other nodes checked."""
    path, token = write_marker(storage_path)
    try:
        nodes = other_nodes()
        if not nodes:
            return 0
        missing = [v for v in views_from_nodes(path, token, nodes, timeout_s) if not v.seen]
    finally:
        remove_marker(path)
    if missing:
        which = "; ".join(f"node {v.address}: {v.detail}" for v in missing)
        raise CheckpointError(
            f"the checkpoint storage {storage_path} is not shared by every Ray node: the driver wrote {path}, and "
            f"{len(missing)} of {len(nodes)} other node(s) do not see it ({which}). Ray Train would fail when a "
            f"worker on such a node saves its first checkpoint; {_fix(storage_path)}",
            field="checkpoint.storagePath")
    return len(nodes)
