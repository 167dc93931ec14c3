"""Environments: environments/base.yaml stacked with environments/<env>.yaml, templates resolved, checked.

Layering, lowest first: chart defaults < environments/base.yaml < environments/<env>.yaml.
(The chart defaults are applied by helm itself; this module stacks the two files.)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import schema_check, templating
from .errors import RenderError, RenderErrors
from .layers import Layer, load_yaml, merge

BASE = "base"
SCHEMA = Path(__file__).with_name("environment.schema.yaml")


@dataclass
class Environment:
    name: str
    layer: Layer  # the composed document, templates resolved
    files: tuple  # the files it was composed from, lowest layer first (repo-relative)

    @property
    def doc(self) -> dict:
        return self.layer.data

    @property
    def namespace(self) -> str:
        return self.doc["target"]["namespace"]

    @property
    def kubernetes_version(self) -> str:
        return self.doc["kubernetesVersion"]


def names(root: Path) -> list[str]:
    env_dir = root / "environments"
    return sorted(p.stem for p in env_dir.glob("*.yaml") if p.stem != BASE) if env_dir.is_dir() else []


def load(root: Path, name: str) -> Environment:
    known = names(root)
    if name not in known:
        raise RenderError(f"unknown environment {name!r}; known environments: {', '.join(known) or 'none'} "
                          f"(each is a file environments/<name>.yaml)")
    files = []
    layer = Layer({}, {})
    for stem in (BASE, name):
        path = root / "environments" / f"{stem}.yaml"
        if stem == BASE and not path.exists():
            continue
        display = f"environments/{stem}.yaml"
        files.append(display)
        layer = merge(layer, load_yaml(path, display))
    # the structure first (templates render against it), then everything once templates are rendered
    errors = schema_check.check(layer, schema_check.load_schema(SCHEMA), f"environment {name!r}",
                                skip_templates=True)
    if errors:
        raise RenderErrors(errors)
    templating.resolve(layer, {"env": name})
    errors = schema_check.check(layer, schema_check.load_schema(SCHEMA), f"environment {name!r}")
    if errors:
        raise RenderErrors(errors)
    return Environment(name, layer, tuple(files))
