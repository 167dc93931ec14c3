"""Schema validation of every rendered file of one environment: ``validate_manifests`` -> ``Report``.

Each resource is classified first (same for both backends):

* a file that is not valid YAML, holds more or less than one resource, has duplicate keys, or has no
  apiVersion/kind -> invalid;
* a built-in kind of the environment's Kubernetes version -> validated against kubernetes-validate's strict schema;
* a kind served by a CRD under the schema location(s) -> validated against its converted ``openAPIV3Schema``;
* a kind no location serves whose group publishes its CRDs in a pinned Go module (Kueue's: ``module_crds``) ->
  the same, with the CRDs read from Go's module cache;
* anything else -> skipped, which FAILS unless its ``apiVersion/Kind`` is in ``skip_allowlist.ALLOWED_TO_SKIP``.
  When custom resources have no CRD because the schema location is missing or holds no CRDs,
  ``MissingSchemasError`` says how to get them.

Backends: ``kubeconform`` when it is on PATH (``backend="auto"``), otherwise in-process (jsonschema).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from . import kubeconform as kc
from .builtin_schemas import OBJECT_META, STANDALONE_REF_PREFIX, BuiltinSchemas, is_builtin_group, package_version
from .crd_schemas import CrdSchemaStore
from .manifests import Manifest, load_manifests
from .module_crds import ModuleCrdsUnavailable, crd_directory, source_for
from .report import INVALID, SKIPPED, VALID, Report, ResourceResult, SchemaIssue, display_path
from .schema_errors import describe_errors
from .schema_location import (
    Locations,
    MissingSchemasError,
    describe_locations,
    how_to_get_schemas,
    resolve_schema_locations,
)
from .skip_allowlist import ALLOWED_TO_SKIP, skip_key

BACKENDS = ("auto", "in-process", "kubeconform")

_BUILTIN, _CRD, _UNKNOWN, _BROKEN = "builtin", "crd", "unknown", "broken"


@dataclass
class _Classified:
    manifest: Manifest
    source: str
    schema: dict | None = None
    validator: object | None = None


def validate_manifests(apps_env_dir: str | os.PathLike[str], kube_version: str,
                       schema_location: Locations | None = None, *,
                       env_name: str | None = None,
                       allowed_skips: Mapping[str, str] | None = None,
                       backend: str = "auto",
                       kubeconform_binary: str | None = None) -> Report:
    """Validate every YAML file under ``apps_env_dir`` (one resource per file).

    ``kube_version``: the Kubernetes version the environment declares (e.g. ``"1.34.0"``).
    ``schema_location``: directory searched recursively for CRD YAML, or several (a list, or a string separated by
    ``os.pathsep``: searched in order, the first that serves a kind wins); ``None`` -> ``$RAY_GITOPS_SCHEMA_LOCATION``
    or ``<repo>/.cache/schemas``. Kinds none of them serves whose CRDs are in a pinned Go module (Kueue's) are read
    from Go's module cache. ``allowed_skips``: defaults to ``skip_allowlist.ALLOWED_TO_SKIP``.
    ``backend``: ``auto`` (kubeconform if on PATH), ``in-process`` or ``kubeconform``.
    Raises ``MissingSchemasError`` when custom resources are present and the schema location(s) hold no CRDs.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
    apps_env_dir = Path(apps_env_dir)
    locations = resolve_schema_locations(schema_location)
    allowed = ALLOWED_TO_SKIP if allowed_skips is None else allowed_skips
    builtins = BuiltinSchemas(kube_version)
    crds = CrdSchemaStore(locations)
    given_hold_crds = crds.has_crds

    classified = [_classify(m, builtins, crds) for m in load_manifests(apps_env_dir)]
    module_dirs, module_notes, unavailable = _module_crds(classified)
    if module_dirs:
        crds = CrdSchemaStore([*locations, *module_dirs])
        classified = [_classify(c.manifest, builtins, crds) if c.source == _UNKNOWN else c for c in classified]
    missing_crd_kinds = sorted({f"{c.manifest.api_version} {c.manifest.kind}" for c in classified
                                if c.source == _UNKNOWN and not is_builtin_group(c.manifest.api_version)
                                and skip_key(c.manifest.api_version, c.manifest.kind) not in allowed})
    if missing_crd_kinds and not given_hold_crds:
        raise MissingSchemasError(how_to_get_schemas(locations, missing_crd_kinds, unavailable.values()))

    binary = kubeconform_binary or (kc.find_kubeconform() if backend != "in-process" else None)
    if backend == "kubeconform" and not binary:
        raise kc.KubeconformError("backend 'kubeconform' requested but kubeconform is not on PATH")
    use_kubeconform = bool(binary) and backend != "in-process"

    report = Report(env=env_name or apps_env_dir.name,
                    backend="kubeconform" if use_kubeconform else "in-process",
                    kubernetes_version=kube_version,
                    builtin_schema_version=builtins.used_version,
                    schema_location=os.pathsep.join(str(p) for p in crds.locations))
    if builtins.choice.note:
        report.notes.append(builtins.choice.note)
    report.notes += module_notes

    to_validate = [c for c in classified if c.source in (_BUILTIN, _CRD)]
    checked: dict[int, ResourceResult] = {}
    if use_kubeconform and to_validate:
        checked = _validate_with_kubeconform(str(binary), kube_version, builtins, to_validate, report)
    else:
        for c in to_validate:
            checked[id(c)] = _validate_in_process(c, builtins)

    for c in classified:
        if id(c) in checked:
            report.results.append(checked[id(c)])
        else:
            report.results.append(_unvalidated_result(c, builtins, crds.locations, allowed, unavailable))
    return report


def _module_crds(classified: list[_Classified]) -> tuple[list[Path], list[str], dict[str, str]]:
    """For the kinds no location serves whose group's CRDs are in a pinned Go module (Kueue's): that module's CRD
    folder in Go's module cache. Returns the folders, a note for each, and {group: why it could not be had}."""
    dirs: list[Path] = []
    notes: list[str] = []
    unavailable: dict[str, str] = {}
    sources = {source_for(c.manifest.api_version) for c in classified if c.source == _UNKNOWN}
    for source in sorted((s for s in sources if s is not None), key=lambda s: s.group):
        try:
            directory = crd_directory(source)
        except ModuleCrdsUnavailable as exc:
            unavailable[source.group] = (f"{source.describe()} are read from Go's module cache when no schema "
                                         f"location serves them, but: {exc}. {source.how_to_get()}.")
            continue
        dirs.append(directory)
        notes.append(f"{source.describe()}, read from Go's module cache (no schema location serves them): "
                     f"{directory}")
    return dirs, notes, unavailable


def _classify(manifest: Manifest, builtins: BuiltinSchemas, crds: CrdSchemaStore) -> _Classified:
    if manifest.error is not None:
        return _Classified(manifest, _BROKEN)
    validator = builtins.validator(manifest.kind, manifest.api_version)
    if validator is not None:
        return _Classified(manifest, _BUILTIN, validator=validator)
    crd = crds.lookup(manifest.api_version, manifest.kind)
    if crd is not None:
        return _Classified(manifest, _CRD, schema=crd.schema, validator=_crd_validator(crd.schema))
    return _Classified(manifest, _UNKNOWN)


# id(schema) -> (schema, validator); the schema is kept so that its id stays unique for the process.
_CRD_VALIDATORS: dict[int, tuple[dict, jsonschema.Draft4Validator]] = {}
_INLINE_FLAGS = re.compile(r"\(\?([aiLmsux]+)\)")


def python_pattern(pattern: str) -> str:
    """A CRD's pattern (Go's RE2, as the API server reads it) as Python's re reads it: RE2 takes inline flags
    anywhere, `^(?i)[a-z]...` (Kueue v0.17.0's AdmissionCheck parameters.kind), Python only at the start, so flags
    after the start apply to the rest as a scoped group, `^(?i:[a-z]...)`."""
    match = _INLINE_FLAGS.search(pattern)
    if match is None or match.start() == 0:
        return pattern
    return f"{pattern[:match.start()]}(?{match.group(1)}:{pattern[match.end():]})"


def _go_pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not re.search(python_pattern(pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


# Draft 4: OpenAPI v3 schemas use its keyword semantics (e.g. boolean exclusiveMinimum); patterns are RE2's.
_CrdValidator = jsonschema.validators.extend(jsonschema.Draft4Validator, {"pattern": _go_pattern})


def _crd_validator(schema: dict) -> jsonschema.Draft4Validator:
    key = id(schema)
    if key not in _CRD_VALIDATORS:
        _CRD_VALIDATORS[key] = (schema, _CrdValidator(schema))
    return _CRD_VALIDATORS[key][1]


def _base_result(m: Manifest, status: str) -> ResourceResult:
    return ResourceResult(file=display_path(m.path), api_version=m.api_version, kind=m.kind, name=m.name,
                          status=status)


def _validate_in_process(c: _Classified, builtins: BuiltinSchemas) -> ResourceResult:
    doc = c.manifest.doc or {}
    errors = list(c.validator.iter_errors(doc))  # type: ignore[union-attr]
    if c.source == _CRD and isinstance(doc.get("metadata"), dict):
        for error in builtins.definition_validator(OBJECT_META).iter_errors(doc["metadata"]):
            error.path.appendleft("metadata")
            errors.append(error)
    result = _base_result(c.manifest, INVALID if errors else VALID)
    result.issues = describe_errors(errors)
    return result


def _unvalidated_result(c: _Classified, builtins: BuiltinSchemas, locations: list[Path],
                        allowed: Mapping[str, str], unavailable: Mapping[str, str]) -> ResourceResult:
    m = c.manifest
    if c.source == _BROKEN:
        result = _base_result(m, INVALID)
        result.issues = [SchemaIssue("(file)", m.error or "unreadable")]
        return result
    result = _base_result(m, SKIPPED)
    key = skip_key(m.api_version, m.kind)
    if key in allowed:
        result.allowed_skip_reason = allowed[key]
        return result
    where = (f"not a built-in kind of Kubernetes {builtins.used_version} (kubernetes-validate "
             f"{package_version()})")
    if not is_builtin_group(m.api_version):
        where += f" and no CRD under {describe_locations(locations)} serves it"
        source = source_for(m.api_version)
        if source is not None and source.group in unavailable:
            where += ". " + unavailable[source.group].rstrip(".")
    result.issues = [SchemaIssue(
        "apiVersion/kind",
        f"no schema for {m.api_version} {m.kind}: {where}. Fix the apiVersion/kind, add its CRD to the schema "
        f"location, or list {key!r} with a reason in validation/skip_allowlist.py")]
    return result


def crd_schema_with_object_meta(schema: dict, builtins: BuiltinSchemas) -> dict:
    """The converted CRD schema with its top-level ``metadata`` also checked as ObjectMeta (for kubeconform, which
    reads one self-contained file per kind; in-process validation checks metadata with a second validator)."""
    combined = dict(schema)
    properties = dict(combined.get("properties") or {})
    object_meta = {"$ref": STANDALONE_REF_PREFIX + OBJECT_META}
    original = properties.get("metadata")
    properties["metadata"] = {"allOf": [original, object_meta]} if original else object_meta
    combined["properties"] = properties
    return builtins.make_standalone(combined)


def _validate_with_kubeconform(binary: str, kube_version: str, builtins: BuiltinSchemas,
                               items: list[_Classified], report: Report) -> dict[int, ResourceResult]:
    schemas: dict[tuple[str, str], dict] = {}
    for c in items:
        key = (c.manifest.kind, c.manifest.api_version)
        if key in schemas:
            continue
        if c.source == _BUILTIN:
            schemas[key] = builtins.standalone_schema(*key)  # type: ignore[assignment]
        else:
            schemas[key] = crd_schema_with_object_meta(c.schema or {}, builtins)
    with tempfile.TemporaryDirectory(prefix="kubeconform-schemas-") as tmp:
        schema_dir = Path(tmp)
        kc.write_schemas(schema_dir, [(kind, api, schema) for (kind, api), schema in schemas.items()])
        files = [str(c.manifest.path.resolve()) for c in items]
        output = kc.run_kubeconform(binary, kube_version, schema_dir, files)
    results: dict[int, ResourceResult] = {}
    for c in items:
        found = kc.result_for(output.results, c.manifest.path.resolve())
        outcome = found.outcome if found else "valid"  # -summary without -verbose lists only non-valid ones
        if outcome in ("valid", "empty"):
            results[id(c)] = _base_result(c.manifest, VALID)
        elif outcome == "skipped":
            results[id(c)] = _base_result(c.manifest, SKIPPED)
            results[id(c)].issues = [SchemaIssue("apiVersion/kind", "kubeconform skipped it")]
        else:
            result = _base_result(c.manifest, INVALID)
            result.issues = kc.describe(found)  # type: ignore[arg-type]
            results[id(c)] = result
    total = sum(output.summary.get(k, 0) for k in ("valid", "invalid", "errors", "skipped"))
    if output.summary and total != len(items):
        report.notes.append(f"kubeconform reported {total} resources for {len(items)} files")
    return results
