"""Turning JSON Schema errors into ``<path in the document>: <message>`` lines a reviewer can act on."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from .report import SchemaIssue

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
               type(None): "null"}


def format_path(parts: Iterable[Any]) -> str:
    """``['spec', 'workers', 0, 'app.kubernetes.io/name']`` -> ``spec.workers[0]["app.kubernetes.io/name"]``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(str(part)):
            out += ("." if out else "") + str(part)
        else:
            out += f"[{json.dumps(str(part))}]"
    return out or "(root)"


def pointer_to_path(pointer: str) -> str:
    """JSON pointer (as kubeconform prints it, ``/spec/workers/0``) -> ``spec.workers[0]``."""
    parts: list[Any] = []
    for raw in pointer.strip().lstrip("/").split("/") if pointer.strip("/ ") else []:
        token = raw.replace("~1", "/").replace("~0", "~")
        parts.append(int(token) if token.isdigit() else token)
    return format_path(parts)


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _preview(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _expected_types(schema_type: Any) -> str:
    types = schema_type if isinstance(schema_type, list) else [schema_type]
    return " or ".join(str(t) for t in types)


def _unknown_fields(error: jsonschema.ValidationError) -> list[str]:
    instance, schema = error.instance, error.schema
    if not isinstance(instance, dict):
        return []
    declared = set((schema.get("properties") or {}).keys())
    patterns = [re.compile(p) for p in (schema.get("patternProperties") or {})]
    return [k for k in instance if k not in declared and not any(p.search(str(k)) for p in patterns)]


def _describe(error: jsonschema.ValidationError) -> list[SchemaIssue]:
    path = list(error.absolute_path)
    kind = error.validator
    if kind == "additionalProperties" and error.validator_value is False:
        extra = _unknown_fields(error)
        if extra:
            return [SchemaIssue(format_path(path + [k]), "unknown field (the schema does not declare it; "
                                                          "strict validation rejects it)") for k in extra]
    if kind == "required":
        match = re.match(r"^'(.+)' is a required property$", error.message)
        if match:
            return [SchemaIssue(format_path(path + [match.group(1)]), "required field is missing")]
    if kind == "type":
        return [SchemaIssue(format_path(path), f"expected {_expected_types(error.validator_value)}, "
                                               f"got {_json_type(error.instance)} {_preview(error.instance)}")]
    if kind in ("anyOf", "oneOf") and error.context:
        if all(sub.validator == "type" for sub in error.context):
            expected = []
            for sub in error.context:
                for t in (sub.validator_value if isinstance(sub.validator_value, list) else [sub.validator_value]):
                    if t not in expected:
                        expected.append(t)
            return [SchemaIssue(format_path(path), f"expected {' or '.join(expected)}, "
                                                   f"got {_json_type(error.instance)} {_preview(error.instance)}")]
        deepest = best_match(error.context)
        if deepest is not None:
            return _describe(deepest)
    return [SchemaIssue(format_path(path), error.message)]


def describe_errors(errors: Sequence[jsonschema.ValidationError]) -> list[SchemaIssue]:
    issues: list[SchemaIssue] = []
    for error in sorted(errors, key=lambda e: (format_path(e.absolute_path), e.message)):
        for issue in _describe(error):
            if issue not in issues:
                issues.append(issue)
    return issues
