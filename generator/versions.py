"""The pinned upstream versions, from versions.yaml at the repository root (the one source of truth)."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from .manifests import load as read_yaml

VERSIONS_FILE = Path(__file__).resolve().parent.parent / "versions.yaml"


@dataclass(frozen=True)
class Versions:
    kubernetes: str
    ray: str
    python: str
    debian: str
    kuberay: str
    argocd: str
    training_operator: str
    kueue: str

    @property
    def python_tag(self) -> str:
        """rayproject/ray's tag part for this Python: "py311"."""
        return "py" + self.python.replace(".", "")

    @property
    def kubernetes_minor(self) -> str:
        return ".".join(self.kubernetes.lstrip("v").split(".")[:2])


@functools.cache
def pinned(path: Path = VERSIONS_FILE) -> Versions:
    data = read_yaml(Path(path).read_text()) or {}
    keys = {"kubernetes": "kubernetes", "ray": "ray", "python": "python", "debian": "debian", "kuberay": "kuberay",
            "argocd": "argocd", "trainingOperator": "training_operator", "kueue": "kueue"}
    missing = sorted(set(keys) - set(data))
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    return Versions(**{field: str(data[key]) for key, field in keys.items()})
