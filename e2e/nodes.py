"""The nodes of each environment's e2e cluster, from e2e/nodes.yaml: kwok-managed Node objects for the node
shapes no machine here has (`pools`), and the real node this machine is (`real`: e2e.real_node)."""
from __future__ import annotations

from pathlib import Path

import yaml

from .kwok_stages import NODE_ANNOTATION

NODES_FILE = Path(__file__).with_name("nodes.yaml")


def environments(path: Path = NODES_FILE) -> list[str]:
    return sorted(yaml.safe_load(path.read_text()) or {})


def real(env: str, path: Path = NODES_FILE) -> dict | None:
    """The environment's real node ({name, labels}), or None when all its nodes are kwok's."""
    return ((yaml.safe_load(path.read_text()) or {}).get(env) or {}).get("real")


def manifests(env: str, path: Path = NODES_FILE) -> list[dict]:
    spec = (yaml.safe_load(path.read_text()) or {}).get(env)
    if spec is None:
        raise KeyError(f"{path.name} defines no nodes for environment {env!r}")
    nodes = []
    for pool in spec.get("pools", []):
        names = pool.get("names") or [f"{pool['name']}-{i}" for i in range(pool["count"])]
        for name in names:
            labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                      "type": "kwok", **pool.get("labels", {})}
            nodes.append({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "annotations": {NODE_ANNOTATION: "fake"}, "labels": labels},
                "spec": {"taints": pool.get("taints", [])},
                "status": {"capacity": pool["capacity"], "allocatable": pool.get("allocatable", pool["capacity"])},
            })
    return nodes
