"""Where the CRD schemas come from: one directory, or several, each searched recursively for CRD YAML files.

Precedence: the ``--schema-location`` flag, then the ``RAY_GITOPS_SCHEMA_LOCATION`` environment variable, then
``.cache/schemas`` in the repository (filled by ``make schemas``). The flag and the variable take a list separated by
``os.pathsep``, like PATH (``DIR1:DIR2``): the directories are searched in that order and the first one that serves a
kind wins. The CRDs are read in place; nothing is ever copied into the repository. Kinds whose CRDs ship in a pinned
Go module (Kueue's) are also read from Go's module cache when no location serves them (``module_crds``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

SCHEMA_LOCATION_ENV = "RAY_GITOPS_SCHEMA_LOCATION"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SCHEMA_LOCATION = REPO_ROOT / ".cache" / "schemas"
CRD_SUFFIXES = (".yaml", ".yml")

Locations = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


class MissingSchemasError(RuntimeError):
    """Custom resources need CRD schemas but the schema location holds none."""


def split_locations(value: Locations | None) -> list[Path]:
    """The directories ``value`` names: a string is split on ``os.pathsep`` (empty entries ignored), a path is one
    directory, a list is each of its entries so split."""
    if value is None:
        return []
    if isinstance(value, str):
        return [Path(part.strip()).expanduser() for part in value.split(os.pathsep) if part.strip()]
    if isinstance(value, os.PathLike):
        return [Path(value).expanduser()]
    return [path for entry in value for path in split_locations(entry)]


def resolve_schema_locations(flag: Locations | None = None, environ: Mapping[str, str] | None = None) -> list[Path]:
    """The schema directories to search, in order: flag > environment variable > repository default."""
    locations = split_locations(flag) if flag else []
    if not locations:
        locations = split_locations((os.environ if environ is None else environ).get(SCHEMA_LOCATION_ENV, ""))
    return locations or [DEFAULT_SCHEMA_LOCATION]


def find_crd_files(location: Path) -> list[Path]:
    """Every YAML file under ``location`` (recursively, sorted); empty when it does not exist."""
    if not location.is_dir():
        return []
    return sorted(p for p in location.rglob("*") if p.suffix in CRD_SUFFIXES and p.is_file())


def describe_locations(locations: Path | Sequence[Path]) -> str:
    """``/a`` for one directory, ``/a or /b`` for two, ``/a, /b or /c`` for three."""
    names = [str(p) for p in ([locations] if isinstance(locations, os.PathLike) else locations)]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _state(location: Path) -> str:
    return "does not exist" if not location.exists() else "contains no CRD YAML files"


def how_to_get_schemas(locations: Path | Sequence[Path], missing: Iterable[str] = (),
                       unavailable: Iterable[str] = ()) -> str:
    """The message shown when custom resources cannot be validated for lack of CRDs. ``unavailable``: why CRDs that
    come from a Go module (``module_crds``) could not be read."""
    locations = [locations] if isinstance(locations, os.PathLike) else list(locations)
    if len(locations) == 1:
        lines = [f"No CRD schemas: schema location {locations[0]} {_state(locations[0])}."]
    else:
        lines = ["No CRD schemas: none of the schema locations holds any: "
                 + ", ".join(f"{p} ({_state(p)})" for p in locations) + "."]
    kinds = sorted(set(missing))
    if kinds:
        lines.append("Custom resources that need them: " + ", ".join(kinds) + ".")
    lines += list(unavailable)
    from generator import versions

    from .module_crds import SOURCES
    pinned = versions.pinned()
    lines += [
        "Get schemas in one of these ways:",
        "  - with network access: `make schemas` (python -m validation fetch-schemas) downloads the pinned",
        f"    upstream CRDs (KubeRay v{pinned.kuberay}, Argo CD {pinned.argocd}, Kubeflow training-operator "
        f"{pinned.training_operator}, Kueue {pinned.kueue}) into .cache/schemas;",
        f"  - offline: point {SCHEMA_LOCATION_ENV}=DIR or --schema-location DIR at a directory of CRD YAML files,",
        f"    e.g. {SCHEMA_LOCATION_ENV}=../shared/crds (searched recursively, read in place), or at several:",
        f"    DIR1{os.pathsep}DIR2 (searched in that order, the first that serves a kind wins);",
    ]
    lines += [f"  - {source.describe()} are read from Go's module cache when no location serves them: "
              f"that needs Go (`go mod download` fetches the module through the module proxy the first time)."
              for source in SOURCES]
    return "\n".join(lines)
