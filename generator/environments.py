"""Environments: environments/base.yaml stacked with environments/<env>.yaml, templates resolved, checked.

Layering, lowest first: chart defaults < environments/base.yaml < environments/<env>.yaml < one of its `clusters`.
(The chart defaults are applied by helm itself; this module stacks the files.)

An environment on several clusters lists them under `clusters:`, keyed by name; each entry is a layer of its own
stacked on the environment, holding only what may differ between the clusters (the schema's consistency contract:
where the cluster is and how Argo CD reaches it, `target`, and its own `vars`: subnets, instance types, quotas).
`members(env)` gives one composed Environment per cluster; an environment without `clusters:` is its own single
member, rendered exactly as before.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from . import fleet_contract, placement, schema_check, templating
from .errors import RenderError, RenderErrors
from .layers import Layer, load_yaml, merge
from .placement import Placement

BASE = "base"
SCHEMA = Path(__file__).with_name("environment.schema.yaml")


CLUSTERS = "clusters"


@dataclass
class Environment:
    name: str
    layer: Layer  # the composed document, templates resolved
    files: tuple  # the files it was composed from, lowest layer first (repo-relative)
    cluster: str | None = None  # the member's key under `clusters:`; None: a single-cluster environment
    raw: Layer | None = None  # the composed document before templates (what the clusters are stacked on)
    # its part in where the environment's jobs run (generator/placement.py: MultiKueue's manager or worker)
    placement: Placement = field(default_factory=Placement)

    @property
    def app_prefix(self) -> str:
        """What this member's Argo CD Applications are named by: `<env>` on a single-cluster environment and on
        the cluster named like the environment (so making an environment a fleet renames nothing on the cluster it
        had), `<env>-<cluster>` on the others."""
        return self.name if self.cluster in (None, self.name) else f"{self.name}-{self.cluster}"

    @property
    def fleet(self) -> bool:
        return bool(self.doc.get(CLUSTERS)) if self.cluster is None else True

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
    """The environment as written (for a fleet: the shared layer, its `clusters` unresolved members)."""
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
    raw = Layer(copy.deepcopy(layer.data), dict(layer.origins))
    _checked(layer, name, f"environment {name!r}")
    return Environment(name, layer, tuple(files), raw=raw)


def _checked(layer: Layer, name: str, what: str) -> Layer:
    # the structure first (templates render against it), then everything once templates are rendered
    errors = schema_check.check(layer, schema_check.load_schema(SCHEMA), what, skip_templates=True)
    if errors:
        raise RenderErrors(errors)
    templating.resolve(layer, {"env": name})
    errors = schema_check.check(layer, schema_check.load_schema(SCHEMA), what)
    if errors:
        raise RenderErrors(errors)
    return layer


def members(env: Environment) -> list[Environment]:
    """One Environment per cluster of `env`, in the order of `clusters:` (the environment itself when it has none):
    the shared layer with the cluster's entry stacked on it, templates resolved against the result (so
    `{{ vars.fsxSubnetId }}` is each cluster's own). A cluster's Argo CD name and kubectl context default to its
    key."""
    clusters = env.raw.get(CLUSTERS) if env.raw is not None else None
    if not clusters:
        placement.plan(env, [env])
        return [env]
    # merge() copies what it stacks on: one shared layer serves every cluster
    shared = Layer({k: v for k, v in env.raw.data.items() if k != CLUSTERS},
                   {path: loc for path, loc in env.raw.origins.items() if path[:1] != (CLUSTERS,)})
    out = []
    for key in clusters:
        overlay = env.raw.sub(CLUSTERS, key)
        for name in ("clusterName", "context"):  # base.yaml's "{{ env }}" would name every cluster alike
            if name not in (overlay.data.get("target") or {}):
                overlay.data.setdefault("target", {})[name] = key
                overlay.origins[("target", name)] = env.raw.locate((CLUSTERS, key))
        layer = merge(shared, overlay)
        _checked(layer, env.name, f"environment {env.name!r}, cluster {key!r}")
        out.append(Environment(env.name, layer, env.files, cluster=key))
    fleet_contract.check(env, out)
    placement.plan(env, out)
    return out


def one_per_name(envs: list[Environment]) -> list[Environment]:
    """The first member of each environment (what its clusters share: access, notifications, sync)."""
    seen: dict = {}
    for env in envs:
        seen.setdefault(env.name, env)
    return list(seen.values())
