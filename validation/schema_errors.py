"""Turning JSON Schema errors into ``<path in the document>: <message>`` lines a reviewer can act on (through
:mod:`schema_messages`, the formatter the generator and training use too)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import jsonschema

from schema_messages import error_field, explain, field_path, leaves, unknown_keys

from .report import SchemaIssue


def format_path(parts: Iterable[Any]) -> str:
    """``['spec', 'workers', 0, 'app.kubernetes.io/name']`` -> ``spec.workers[0]["app.kubernetes.io/name"]``."""
    return field_path(parts, root="(root)")


def pointer_to_path(pointer: str) -> str:
    """JSON pointer (as kubeconform prints it, ``/spec/workers/0``) -> ``spec.workers[0]``."""
    parts: list[Any] = []
    for raw in pointer.strip().lstrip("/").split("/") if pointer.strip("/ ") else []:
        token = raw.replace("~1", "/").replace("~0", "~")
        parts.append(int(token) if token.isdigit() else token)
    return format_path(parts)


def _describe(error: jsonschema.ValidationError) -> list[SchemaIssue]:
    issues = []
    for leaf in leaves(error):
        extra = unknown_keys(leaf) if leaf.validator == "additionalProperties" and leaf.validator_value is False else []
        if extra:
            path = list(leaf.absolute_path)
            issues += [SchemaIssue(format_path(path + [k]), "unknown field (the schema does not declare it; strict "
                                                             "validation rejects it)") for k in extra]
        else:
            issues.append(SchemaIssue(format_path(error_field(leaf)), explain(leaf)))
    return issues


def describe_errors(errors: Sequence[jsonschema.ValidationError]) -> list[SchemaIssue]:
    issues: list[SchemaIssue] = []
    for error in sorted(errors, key=lambda e: (format_path(e.absolute_path), e.message)):
        for issue in _describe(error):
            if issue not in issues:
                issues.append(issue)
    return issues
