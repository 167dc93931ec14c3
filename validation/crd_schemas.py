"""CRD ``openAPIV3Schema`` -> strict JSON Schema, the way kubeconform's openapi2jsonschema does for ``-strict``.

Conversion rules (each guards against a way a custom resource could slip through or be wrongly rejected):

* objects that declare ``properties`` get ``additionalProperties: false`` (unknown fields are rejected),
  unless they carry ``x-kubernetes-preserve-unknown-fields: true``;
* ``x-kubernetes-int-or-string: true`` (and the older ``format: int-or-string``) -> integer or string;
* ``x-kubernetes-embedded-resource: true`` objects also accept ``apiVersion``/``kind``/``metadata``;
* ``nullable: true`` -> ``null`` is accepted as well;
* the top level always accepts ``apiVersion``, ``kind`` and ``metadata`` and nothing undeclared.

Unlike openapi2jsonschema, ``additionalProperties: false`` is not added inside ``allOf``/``anyOf``/``oneOf``/``not``
branches (a branch restricts the main schema, it does not redeclare it), and the top level is strict as well
(openapi2jsonschema only does that with DENY_ROOT_ADDITIONAL_PROPERTIES).

CEL rules (``x-kubernetes-validations``) and list-map key uniqueness are not evaluated (kubeconform does not
either); the API server checks them at apply time.

CRD files are parsed lazily (only files that mention the requested kind) and cached per process.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .schema_location import find_crd_files

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class CrdSchema:
    group: str
    version: str
    kind: str
    source: Path  # the file it was read from
    openapi: dict = field(repr=False)  # the CRD's openAPIV3Schema, as written (shared by files of the same text)

    @property
    def schema(self) -> dict:
        """The strict JSON Schema (converted on first use, then cached per process: once for files of the same
        text)."""
        entry = _CONVERTED.get(id(self.openapi))
        if entry is None or entry[0] is not self.openapi:
            entry = _CONVERTED[id(self.openapi)] = (self.openapi, openapi_to_strict_jsonschema(self.openapi))
        return entry[1]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def kubeconform_filename(self) -> str:
        return kubeconform_filename(self.kind, self.api_version)


def kubeconform_filename(kind: str, api_version: str) -> str:
    """``{{ .ResourceKind }}{{ .KindSuffix }}.json`` as kubeconform expands it (and openapi2jsonschema writes it
    with ``FILENAME_FORMAT={kind}-{group}-{version}``): lowercase kind, first label of the group, version.

    ``RayCluster`` ``ray.io/v1`` -> ``raycluster-ray-v1.json``; ``Service`` ``v1`` -> ``service-v1.json``.
    """
    parts = api_version.split("/")
    group_prefix = parts[0].split(".")[0].lower()
    suffix = "-" + group_prefix
    if len(parts) > 1:
        suffix += "-" + parts[1].lower()
    return f"{kind.lower()}{suffix}.json"


# ---------------------------------------------------------------------------------------------------------------
# OpenAPI v3 (structural schema) -> strict JSON Schema
# ---------------------------------------------------------------------------------------------------------------

_SCHEMA_MAP_KEYS = ("properties", "patternProperties")
_SCHEMA_LIST_KEYS = ("allOf", "anyOf", "oneOf")
_EMBEDDED_FIELDS = {
    "apiVersion": {"type": "string"},
    "kind": {"type": "string"},
    "metadata": {"type": "object"},
}


def openapi_to_strict_jsonschema(openapi_schema: dict) -> dict:
    """Convert one ``openAPIV3Schema`` to a strict JSON Schema (draft 4 semantics); the input is not modified."""
    schema = _convert(openapi_schema, in_branch=False)
    props = schema.setdefault("properties", {})
    for name, embedded in _EMBEDDED_FIELDS.items():
        props.setdefault(name, dict(embedded))
    if not schema.get("x-kubernetes-preserve-unknown-fields"):
        schema.setdefault("additionalProperties", False)
    schema.setdefault("type", "object")
    return schema


def _convert(source: Any, in_branch: bool) -> Any:
    """A converted copy of one schema node (new dicts/lists for schema structure; leaves are shared)."""
    if not isinstance(source, dict):
        return source
    node = dict(source)
    if node.get("x-kubernetes-int-or-string") or node.get("format") == "int-or-string":
        node.pop("type", None)
        if node.get("format") == "int-or-string":
            node.pop("format")
        node.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("nullable") is True:
        node_type = node.get("type")
        if isinstance(node_type, str):
            node["type"] = [node_type, "null"]
        if isinstance(node.get("enum"), list) and None not in node["enum"]:
            node["enum"] = node["enum"] + [None]

    for key in _SCHEMA_MAP_KEYS:
        if isinstance(node.get(key), dict):
            node[key] = {name: _convert(sub, in_branch=False) for name, sub in node[key].items()}
    if node.get("x-kubernetes-embedded-resource"):
        props = node["properties"] = dict(node.get("properties") or {})
        for name, field in _EMBEDDED_FIELDS.items():
            props.setdefault(name, dict(field))
    for key in _SCHEMA_LIST_KEYS:
        if isinstance(node.get(key), list):
            node[key] = [_convert(sub, in_branch=True) for sub in node[key]]
    if isinstance(node.get("not"), dict):
        node["not"] = _convert(node["not"], in_branch=True)
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _convert(node["additionalProperties"], in_branch=False)
    items = node.get("items")
    if isinstance(items, dict):
        node["items"] = _convert(items, in_branch=False)
    elif isinstance(items, list):
        node["items"] = [_convert(sub, in_branch=False) for sub in items]

    if ("properties" in node and not in_branch and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        node["additionalProperties"] = False
    return node


# ---------------------------------------------------------------------------------------------------------------
# Reading CRDs from a schema location
# ---------------------------------------------------------------------------------------------------------------

# sha256 of a CRD file's text -> the CrdSchemas in it (their source: the first file read with that text). Per
# process: tests and repeated environments reuse parsed and converted schemas.
_FILE_CACHE: dict[str, list[CrdSchema]] = {}
# id(openAPIV3Schema) -> (it, its conversion); the schema is kept so that its id stays unique for the process.
_CONVERTED: dict[int, tuple[dict, dict]] = {}
_TEXT_CACHE: dict[tuple[str, int, int], str] = {}


def _file_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path.resolve()), st.st_mtime_ns, st.st_size)


def _crd_documents(data: Any) -> Iterator[dict]:
    if not isinstance(data, dict):
        return
    if data.get("kind") == "CustomResourceDefinition":
        yield data
    elif isinstance(data.get("items"), list):  # a List of CRDs
        for item in data["items"]:
            yield from _crd_documents(item)


def schemas_in_file(path: Path) -> list[CrdSchema]:
    """All served versions with a schema, of all CRDs in one YAML file (cached per process by content, so the
    same CRD read from two locations is parsed once)."""
    text = _file_text(path)
    key = hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()
    if key in _FILE_CACHE:  # the same text, maybe read from another file (location): named by this one
        return [crd if crd.source == path else replace(crd, source=path) for crd in _FILE_CACHE[key]]
    found: list[CrdSchema] = []
    try:
        documents = list(yaml.load_all(text, Loader=_LOADER))
    except yaml.YAMLError:
        documents = []  # not a CRD we can use; other files may still serve the kind
    for doc in documents:
        for crd in _crd_documents(doc):
            spec = crd.get("spec") or {}
            group = spec.get("group")
            kind = (spec.get("names") or {}).get("kind")
            if not group or not kind:
                continue
            for version in spec.get("versions") or []:
                if version.get("served") is False:
                    continue
                openapi = ((version.get("schema") or {}).get("openAPIV3Schema")
                           or ((spec.get("validation") or {}).get("openAPIV3Schema")))
                if not isinstance(openapi, dict):
                    continue
                found.append(CrdSchema(group=group, version=version["name"], kind=kind, source=path,
                                       openapi=openapi))
    _FILE_CACHE[key] = found
    return found


def _file_text(path: Path) -> str:
    key = _file_key(path)
    if key not in _TEXT_CACHE:
        _TEXT_CACHE[key] = path.read_text(encoding="utf-8", errors="replace")
    return _TEXT_CACHE[key]


def _pinned_first(path: Path) -> bool:
    """Sort key: files in a pinned release's folder (versions.yaml) before the others, so that a location holding
    several releases of one source (../shared/crds: training-operator-v1.9.0 and -v1.9.4) validates against the
    pinned one."""
    from .fetch_schemas import PINNED_FOLDERS
    return not any(part in PINNED_FOLDERS for part in path.parts)


class CrdSchemaStore:
    """The CRD schemas under one schema location or several, looked up by apiVersion and kind: the locations in
    their order (the first that serves a kind wins), the pinned releases first within each."""

    def __init__(self, locations: Path | Sequence[Path]):
        self.locations = [Path(locations)] if isinstance(locations, (str, os.PathLike)) else \
            [Path(p) for p in locations]
        # (index of its location, file), in search order
        self._files = [(i, path) for i, location in enumerate(self.locations) for path in find_crd_files(location)]
        self.files = [path for _, path in self._files]
        self._by_gvk: dict[tuple[str, str, str], CrdSchema | None] = {}

    @property
    def has_crds(self) -> bool:
        return any("CustomResourceDefinition" in _file_text(p) for p in self.files)

    def _candidates(self, kind: str) -> list[Path]:
        """Files that may define ``kind`` (a cheap text test, so that only those are parsed), in search order."""
        needles = [f"kind: {kind}\n", f"kind: {kind}\r\n", f"kind: '{kind}'", f'kind: "{kind}"', f'"kind":"{kind}"',
                   f'"kind": "{kind}"']
        found = [(index, p) for index, p in self._files
                 if "CustomResourceDefinition" in (text := _file_text(p)) and any(n in text for n in needles)]
        return [p for index, p in sorted(found, key=lambda item: (item[0], _pinned_first(item[1])))]

    def lookup(self, api_version: str, kind: str) -> CrdSchema | None:
        if "/" not in api_version:
            return None
        group, version = api_version.split("/", 1)
        key = (group, version, kind)
        if key not in self._by_gvk:
            self._by_gvk[key] = None
            for path in self._candidates(kind):
                for crd in schemas_in_file(path):
                    if (crd.group, crd.version, crd.kind) == key:
                        self._by_gvk[key] = crd
                        break
                if self._by_gvk[key] is not None:
                    break
        return self._by_gvk[key]
