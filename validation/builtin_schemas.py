"""Strict JSON Schemas of built-in Kubernetes kinds, from the ``kubernetes-validate`` package.

kubernetes-validate 1.37.0 ships ``v1.25.0`` ... ``v1.37.0`` (one schema set per minor release, each also in a
``-strict`` flavour where every object rejects undeclared fields). We always use the ``-strict`` flavour.

Version rule: schemas are per minor release, so the patch level of the declared version is ignored
(``1.34.0`` and ``1.34.7`` -> ``1.34``). If the declared minor is shipped it is used. Otherwise the nearest shipped
minor is used and a note says so: the newest shipped one for a newer cluster, the oldest for an older one.
(``kubernetes-validate.validate`` itself refuses versions newer than its newest; we prefer to validate against the
nearest schemas and say so.)
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.resources
import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import jsonschema
from referencing import Registry, Resource

PACKAGE = "kubernetes_validate"
# Custom resources' top-level ``metadata`` is a bare ``type: object`` in their CRDs; the API server still validates
# it as ObjectMeta (e.g. label values must be strings), so it is checked against this definition too.
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_DEFS_REF_PREFIX = "/api/_definitions.json#/$defs/"
_INNER_REF_PREFIX = "#/$defs/"  # references between definitions inside _definitions.json
STANDALONE_REF_PREFIX = "#/definitions/"


def _schema_root():
    return importlib.resources.files(PACKAGE).joinpath("kubernetes-json-schema")


def package_version() -> str:
    try:
        return importlib.metadata.version("kubernetes-validate")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - installed without metadata
        return "unknown"


def parse_minor(version: str) -> tuple[int, int]:
    match = re.match(r"^v?(\d+)\.(\d+)", version.strip())
    if not match:
        raise ValueError(f"not a Kubernetes version: {version!r} (expected e.g. 1.34.0)")
    return int(match.group(1)), int(match.group(2))


@cache
def shipped_versions() -> tuple[tuple[int, int], ...]:
    """Minor versions for which kubernetes-validate ships strict schemas, ascending."""
    found = set()
    for entry in _schema_root().iterdir():
        match = re.match(r"^v(\d+)\.(\d+)\.\d+-local-strict$", entry.name)
        if match:
            found.add((int(match.group(1)), int(match.group(2))))
    return tuple(sorted(found))


@dataclass(frozen=True)
class VersionChoice:
    declared: str
    used: tuple[int, int]
    note: str | None

    @property
    def used_str(self) -> str:
        return f"{self.used[0]}.{self.used[1]}"


def select_version(declared: str) -> VersionChoice:
    wanted = parse_minor(declared)
    versions = shipped_versions()
    if not versions:
        raise RuntimeError("kubernetes-validate ships no schemas")
    if wanted in versions:
        return VersionChoice(declared, wanted, None)
    newest, oldest = versions[-1], versions[0]
    used = newest if wanted > newest else oldest if wanted < oldest else max(v for v in versions if v <= wanted)
    shipped = f"{oldest[0]}.{oldest[1]}..{newest[0]}.{newest[1]}"
    note = (f"Kubernetes {declared} is not among the built-in schemas kubernetes-validate {package_version()} ships "
            f"({shipped}); validating built-in kinds against the nearest, {used[0]}.{used[1]}")
    return VersionChoice(declared, used, note)


def schema_file_name(kind: str, api_version: str) -> str:
    """kubernetes-validate's file naming: ``rbac.authorization.k8s.io/v1`` Role -> ``role-rbac-v1.json``."""
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{api.lower()}.json"


def is_builtin_group(api_version: str) -> bool:
    """Whether an apiVersion belongs to Kubernetes itself (core, ``apps``, ``*.k8s.io``), not to a CRD."""
    if "/" not in api_version:
        return True
    group = api_version.split("/", 1)[0]
    return "." not in group or group.endswith(".k8s.io")


class BuiltinSchemas:
    """Validators for built-in kinds at one (selected) Kubernetes minor version."""

    def __init__(self, declared_version: str):
        self.choice = select_version(declared_version)
        self._dir = _schema_root().joinpath(f"v{self.choice.used_str}.0-local-strict")
        self._validators: dict[tuple[str, str], jsonschema.protocols.Validator | None] = {}

    @property
    def used_version(self) -> str:
        return self.choice.used_str

    def _definitions(self) -> dict:
        return _load_json(str(self._dir.joinpath("_definitions.json")))

    def schema(self, kind: str, api_version: str) -> dict | None:
        entry = self._dir.joinpath(schema_file_name(kind, api_version))
        if not entry.is_file():
            return None
        schema = _load_json(str(entry))
        # The file matches by name only; make sure it really is this apiVersion/kind.
        gvks = schema.get("x-kubernetes-group-version-kind") or []
        if gvks:
            group, _, version = api_version.rpartition("/")
            if not any(g.get("kind") == kind and g.get("group", "") == group and g.get("version") == version
                       for g in gvks):
                return None
        return schema

    def validator(self, kind: str, api_version: str):
        key = (kind, api_version)
        if key not in self._validators:
            schema = self.schema(kind, api_version)
            if schema is None:
                self._validators[key] = None
            else:
                self._validators[key] = jsonschema.Draft202012Validator(schema, registry=self._registry())
        return self._validators[key]

    def definition_validator(self, name: str):
        """A validator for one definition of ``_definitions.json`` (e.g. ``OBJECT_META``)."""
        key = ("#definition", name)
        if key not in self._validators:
            ref = {"$ref": self._definitions()["$id"] + "#/$defs/" + name}
            self._validators[key] = jsonschema.Draft202012Validator(ref, registry=self._registry())
        return self._validators[key]

    def _registry(self) -> Registry:
        return _registry_for(str(self._dir))

    def standalone_schema(self, kind: str, api_version: str) -> dict | None:
        """The schema with every definition it needs inlined under ``$defs`` (for kubeconform's file layout)."""
        schema = self.schema(kind, api_version)
        if schema is None:
            return None
        return self.make_standalone(schema)

    def make_standalone(self, schema: dict) -> dict:
        """A self-contained copy of ``schema`` for kubeconform: the definitions it references are inlined under
        ``definitions`` and referenced as ``#/definitions/<name>``; ``$schema``/``$id`` are dropped. The result only
        uses draft-4 keywords (as all kubernetes-validate schemas do), so any kubeconform version reads it alike."""
        definitions = self._definitions()["$defs"]
        needed: dict[str, Any] = {}
        pending = _refs(schema)
        while pending:
            name = pending.pop()
            if name in needed or name not in definitions:
                continue
            needed[name] = definitions[name]
            pending |= _refs(definitions[name])
        out = _rewrite_refs(copy.deepcopy(schema))
        out.pop("$id", None)
        out.pop("$schema", None)
        out["definitions"] = {**out.get("definitions", {}),
                              **{name: _rewrite_refs(copy.deepcopy(body)) for name, body in sorted(needed.items())}}
        return out


@cache
def _load_json(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


@cache
def _registry_for(directory: str) -> Registry:
    definitions = _load_json(directory + "/_definitions.json")
    return Resource.from_contents(definitions) @ Registry()


def _refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            for prefix in (_DEFS_REF_PREFIX, _INNER_REF_PREFIX, STANDALONE_REF_PREFIX):
                if ref.startswith(prefix):
                    found.add(ref[len(prefix):])
        for value in node.values():
            found |= _refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= _refs(value)
    return found


def _rewrite_refs(node: Any) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            for prefix in (_DEFS_REF_PREFIX, _INNER_REF_PREFIX):
                if ref.startswith(prefix):
                    node["$ref"] = STANDALONE_REF_PREFIX + ref[len(prefix):]
        for value in node.values():
            _rewrite_refs(value)
    elif isinstance(node, list):
        for value in node:
            _rewrite_refs(value)
    return node
