"""JSON Schema errors as people read them: the one formatter the generator (environment values), validation
(rendered manifests) and training (job specs) share.

``jsonschema`` reports a value that matches none of a ``oneOf``/``anyOf`` as "is not valid under any of the given
schemas"; :func:`leaves` goes down to the errors of the alternative that was meant. :func:`field_path` names the
field (``spec.workers[0]["app.kubernetes.io/name"]``), :func:`error_field` the field an error is about (the
missing or unknown key itself, not its parent), :func:`explain` says what is wrong in one line.

A leaf package: it imports only ``jsonschema``, and every stage may use it (the training image ships it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from jsonschema.exceptions import ValidationError, best_match

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
               type(None): "null"}

__all__ = ["leaves", "field_path", "error_field", "unknown_keys", "explain", "json_type", "preview", "expected_types"]


def leaves(error: ValidationError) -> Iterator[ValidationError]:
    """The errors that say what is wrong. For ``oneOf``/``anyOf``: the errors of the alternative that was meant --
    the only one left once ``null`` alternatives (which delete a key) are set aside, else the best match among the
    alternatives' errors, where a wrong type only counts when every alternative's error is one (``{min: 0}`` for
    "an integer or {min, max}" is a bad minimum, not "not an integer"). When every alternative failed on its type
    the error itself is the leaf: :func:`explain` then lists the types expected."""
    if error.validator not in ("oneOf", "anyOf") or not error.context:
        yield error
        return
    subs = [s for s in error.context if not (s.validator == "type" and s.schema.get("type") == "null")]
    if not subs:
        yield error
        return
    branches: dict[Any, list[ValidationError]] = {}
    for sub in subs:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    if len(branches) == 1:
        for sub in next(iter(branches.values())):
            yield from leaves(sub)
        return
    meant = [s for s in subs if s.validator != "type"]
    if not meant:
        yield error
        return
    yield from leaves(best_match(meant))


def field_path(parts: Iterable[Any], root: str = "(top level)") -> str:
    """``['spec', 'workers', 0, 'app.kubernetes.io/name']`` -> ``spec.workers[0]["app.kubernetes.io/name"]``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(str(part)):
            out += ("." if out else "") + str(part)
        else:
            out += f"[{json.dumps(str(part))}]"
    return out or root


def unknown_keys(error: ValidationError) -> list[str]:
    """For an ``additionalProperties: false`` error: the keys the schema does not declare, in the document's order."""
    instance, schema = error.instance, error.schema
    if not isinstance(instance, dict):
        return []
    declared = set((schema.get("properties") or {}).keys())
    patterns = [re.compile(p) for p in (schema.get("patternProperties") or {})]
    return [k for k in instance if k not in declared and not any(p.search(str(k)) for p in patterns)]


def error_field(error: ValidationError) -> list[Any]:
    """The path of the field an error is about: for a missing required key or an unknown key, that key's own path
    (jsonschema reports both at the parent)."""
    parts = list(error.absolute_path)
    if error.validator == "required":
        match = re.match(r"^'(.+)' is a required property$", error.message)
        if match:
            return parts + [match.group(1)]
    if error.validator == "additionalProperties" and error.validator_value is False:
        extra = unknown_keys(error)
        if extra:
            return parts + [extra[0]]
    return parts


def json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def preview(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def expected_types(error: ValidationError) -> list[str]:
    """The JSON types a ``type`` error, or a ``oneOf``/``anyOf`` whose alternatives all failed on their type,
    expected (in the schema's order, without repeats)."""
    found: list[str] = []
    subs = error.context if error.validator in ("oneOf", "anyOf") and error.context else [error]
    for sub in subs:
        if sub.validator != "type":
            continue
        for t in sub.validator_value if isinstance(sub.validator_value, list) else [sub.validator_value]:
            if t not in found:
                found.append(t)
    return found


def explain(error: ValidationError) -> str:
    """One line on what is wrong with the field :func:`error_field` names."""
    if error.validator == "required" and error.validator_value:
        return "required field is missing"
    if error.validator == "additionalProperties" and error.validator_value is False and unknown_keys(error):
        known = sorted((error.schema.get("properties") or {}).keys())
        return "unknown field" + (f" (known here: {', '.join(known)})" if known else " (the schema does not declare it)")
    types = expected_types(error) if error.validator in ("type", "oneOf", "anyOf") else []
    if types:
        return f"expected {' or '.join(types)}, got {json_type(error.instance)} {preview(error.instance)}"
    return error.message
