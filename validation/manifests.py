"""Reading rendered manifests: ``apps/<env>/<app>/<kind>-<name>.yaml``, exactly one resource per file.

Duplicate mapping keys are an error (PyYAML would silently keep the last one; kubeconform ``-strict`` and the API
server's strict field validation reject them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

MANIFEST_SUFFIXES = (".yaml", ".yml")
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKeyError(yaml.YAMLError):
    pass


class StrictLoader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """Safe loader that rejects duplicate keys in a mapping."""

    def construct_mapping(self, node, deep=False):  # noqa: D401 - PyYAML API
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue
                if key in seen:
                    line = key_node.start_mark.line + 1
                    raise DuplicateKeyError(f"line {line}: duplicate key {key!r} "
                                            f"(first at line {seen[key]})")
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)



def load_yaml_documents(text: str) -> list[Any]:
    """All non-empty YAML documents of a text (raises ``yaml.YAMLError``)."""
    return [doc for doc in yaml.load_all(text, Loader=StrictLoader) if doc is not None]


@dataclass
class Manifest:
    """One rendered file. ``doc`` is set when the file holds exactly one resource, ``error`` otherwise."""

    path: Path
    doc: dict | None = None
    error: str | None = None

    @property
    def kind(self) -> str:
        return str((self.doc or {}).get("kind") or "")

    @property
    def api_version(self) -> str:
        return str((self.doc or {}).get("apiVersion") or "")

    @property
    def name(self) -> str:
        metadata = (self.doc or {}).get("metadata")
        return str(metadata.get("name") or "") if isinstance(metadata, dict) else ""


def find_manifest_files(apps_dir: Path) -> list[Path]:
    apps_dir = Path(apps_dir)
    if not apps_dir.is_dir():
        raise FileNotFoundError(f"apps directory not found: {apps_dir}")
    return sorted(p for p in apps_dir.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)


def load_manifest(path: Path) -> Manifest:
    try:
        docs = load_yaml_documents(Path(path).read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        return Manifest(path, error=f"not valid YAML: {_one_line(exc)}")
    if len(docs) != 1:
        return Manifest(path, error=f"holds {len(docs)} YAML documents; each file must hold exactly one resource")
    doc = docs[0]
    if not isinstance(doc, dict):
        return Manifest(path, error=f"is a {type(doc).__name__}, not a Kubernetes resource (a mapping)")
    missing = [key for key in ("apiVersion", "kind") if not isinstance(doc.get(key), str) or not doc.get(key)]
    if missing:
        return Manifest(path, doc=doc, error="resource has no " + " and no ".join(missing))
    return Manifest(path, doc=doc)


def load_manifests(apps_dir: Path) -> list[Manifest]:
    return [load_manifest(p) for p in find_manifest_files(apps_dir)]


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
