"""Finding every pod spec and container in a rendered resource, wherever the kind nests it.

A pod spec is any mapping with a ``containers`` list, found by walking the whole document, so every place is covered
without a per-kind table going stale: ``Pod.spec``, ``Deployment/Job/StatefulSet/... spec.template.spec``,
``CronJob spec.jobTemplate.spec.template.spec``, RayCluster ``headGroupSpec.template.spec`` and
``workerGroupSpecs[].template.spec``, RayJob ``rayClusterSpec...`` and ``submitterPodTemplate.spec``, RayService
``rayClusterConfig...``, PyTorchJob ``pytorchReplicaSpecs.<Master|Worker>.template.spec``.
Ray cluster specs (for Ray-specific settings) are mappings with a ``headGroupSpec``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Path = list  # list of str | int: a location in the document


@dataclass
class PodSpec:
    path: Path
    spec: dict


@dataclass
class Container:
    path: Path
    container: dict
    init: bool
    pod: dict  # the pod spec holding it (its volumes, its other containers)

    @property
    def name(self) -> str:
        return str(self.container.get("name") or "?")

    @property
    def label(self) -> str:
        return ("init container" if self.init else "container") + f" {self.name!r}"


def _walk(node: Any, path: Path) -> Iterator[tuple[Path, dict]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, path + [key])
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, path + [index])


def iter_mappings(doc: Any) -> Iterator[tuple[Path, dict]]:
    """Every mapping in the document with its path (the document itself first)."""
    yield from _walk(doc, [])


def iter_pod_specs(doc: Any) -> Iterator[PodSpec]:
    for path, node in iter_mappings(doc):
        if isinstance(node.get("containers"), list):
            yield PodSpec(path, node)


def iter_containers(doc: Any) -> Iterator[Container]:
    """Containers and init containers of every pod spec in the document."""
    for pod in iter_pod_specs(doc):
        for key, init in (("initContainers", True), ("containers", False)):
            for index, container in enumerate(pod.spec.get(key) or []):
                if isinstance(container, dict):
                    yield Container(pod.path + [key, index], container, init, pod.spec)


def iter_ray_cluster_specs(doc: Any) -> Iterator[tuple[Path, dict]]:
    """RayCluster specs: RayCluster ``spec``, RayJob ``spec.rayClusterSpec``, RayService ``spec.rayClusterConfig``."""
    for path, node in iter_mappings(doc):
        if isinstance(node.get("headGroupSpec"), dict):
            yield path, node


def iter_ray_group_specs(doc: Any) -> Iterator[tuple[Path, dict]]:
    """Head and worker group specs of every Ray cluster spec in the document."""
    for path, cluster in iter_ray_cluster_specs(doc):
        yield path + ["headGroupSpec"], cluster["headGroupSpec"]
        for index, group in enumerate(cluster.get("workerGroupSpecs") or []):
            if isinstance(group, dict):
                yield path + ["workerGroupSpecs", index], group
