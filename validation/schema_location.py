"""Where the CRD schemas come from: a directory searched recursively for CRD YAML files.

Precedence: the ``--schema-location`` flag, then the ``RAY_GITOPS_SCHEMA_LOCATION`` environment
variable, then ``.cache/schemas`` in the repository (filled by ``make schemas``). The CRDs are read in
place; nothing is ever copied into the repository.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

SCHEMA_LOCATION_ENV = "RAY_GITOPS_SCHEMA_LOCATION"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SCHEMA_LOCATION = REPO_ROOT / ".cache" / "schemas"
CRD_SUFFIXES = (".yaml", ".yml")


class MissingSchemasError(RuntimeError):
    """Custom resources need CRD schemas but the schema location holds none."""


def resolve_schema_location(flag: str | os.PathLike[str] | None = None,
                            environ: Mapping[str, str] | None = None) -> Path:
    """The schema directory to use: flag > environment variable > repository default."""
    if flag:
        return Path(flag).expanduser()
    value = (os.environ if environ is None else environ).get(SCHEMA_LOCATION_ENV, "").strip()
    if value:
        return Path(value).expanduser()
    return DEFAULT_SCHEMA_LOCATION


def find_crd_files(location: Path) -> list[Path]:
    """Every YAML file under ``location`` (recursively, sorted); empty when it does not exist."""
    if not location.is_dir():
        return []
    return sorted(p for p in location.rglob("*") if p.suffix in CRD_SUFFIXES and p.is_file())


def how_to_get_schemas(location: Path, missing: Iterable[str] = ()) -> str:
    """The message shown when custom resources cannot be validated for lack of CRDs."""
    state = "does not exist" if not location.exists() else "contains no CRD YAML files"
    kinds = sorted(set(missing))
    lines = [
        f"No CRD schemas: schema location {location} {state}.",
    ]
    if kinds:
        lines.append("Custom resources that need them: " + ", ".join(kinds) + ".")
    from generator import versions
    pinned = versions.pinned()
    lines += [
        "Get schemas in one of these ways:",
        "  - with network access: `make schemas` (python -m validation fetch-schemas) downloads the pinned",
        f"    upstream CRDs (KubeRay v{pinned.kuberay}, Argo CD {pinned.argocd}, Kubeflow training-operator "
        f"{pinned.training_operator}) into .cache/schemas;",
        f"  - offline: point {SCHEMA_LOCATION_ENV}=DIR or --schema-location DIR at a directory of CRD YAML files,",
        f"    e.g. {SCHEMA_LOCATION_ENV}=../shared/crds (searched recursively, read in place).",
    ]
    return "\n".join(lines)
