"""What the policy rules need to know about an environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class EnvFacts:
    """Facts about one environment, from ``environments/<env>.yaml``.

    ``gpu_nodes``: the environment has nodes with ``nvidia.com/gpu`` (``capabilities.gpu``).
    ``dashboard_exposure_allowed``: the environment opted in to exposing the Ray dashboard outside the cluster
    (``exposeDashboard``).
    ``efa_nodes``: the environment has EFA-capable nodes (``capabilities.efa``); ``None`` = unknown, in which case
    the ``efa-only-on-efa-env`` rule is not applied.
    ``origins``: where each key of the composed environment was set, ``{("cluster", "checkpoints"):
    "environments/eks.yaml:73"}`` (empty when the facts come from a lone file): a rule names the input line to change.
    """

    name: str
    kubernetes_version: str
    gpu_nodes: bool
    dashboard_exposure_allowed: bool = False
    efa_nodes: bool | None = None
    origins: Mapping[tuple, str] = field(default_factory=dict, compare=False, repr=False)

    def where(self, *candidates: tuple) -> str | None:
        """``<file>:<line>: <key>`` of the first candidate key the environment's files set; when none is set, the
        last candidate at the line of its nearest enclosing key that is (where it would be added); ``None`` when
        the locations are unknown."""
        for path in candidates:
            if path in self.origins:
                return f"{self.origins[path]}: {'.'.join(map(str, path))}"
        last = candidates[-1] if candidates else ()
        for n in range(len(last) - 1, 0, -1):
            if last[:n] in self.origins:
                return f"{self.origins[last[:n]]}: {'.'.join(map(str, last))}"
        return None

    @classmethod
    def from_environment_file(cls, path: str | Path, name: str | None = None) -> EnvFacts:
        """Read ``kubernetesVersion``, ``capabilities: {gpu, efa}`` and ``exposeDashboard`` from ONE environment file
        (layered environments: compose them first and use ``from_mapping``).

        Missing keys mean "no" (no GPU nodes, no EFA, dashboard not exposed), so a new environment starts locked down.
        """
        path = Path(path)
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping at the top")
        return cls.from_mapping(data, name or str(data.get("name") or path.stem))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], name: str, origins: Mapping[tuple, str] | None = None) -> EnvFacts:
        """The facts of an already composed environment (e.g. ``base.yaml`` overlaid with ``<env>.yaml``), with
        where its keys were set when the caller knows (``origins``)."""
        capabilities = data.get("capabilities") or {}
        if not isinstance(capabilities, dict):
            raise ValueError(f"environment {name}: capabilities must be a mapping")
        return cls(
            name=name,
            kubernetes_version=str(data.get("kubernetesVersion") or ""),
            gpu_nodes=capabilities.get("gpu") is True,
            dashboard_exposure_allowed=data.get("exposeDashboard") is True,
            efa_nodes=capabilities.get("efa") is True,
            origins=dict(origins or {}),
        )
