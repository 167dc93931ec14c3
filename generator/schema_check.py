"""Check a Layer against a JSON Schema and turn each violation into a located, readable error."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema

from schema_messages import expected_types, explain, leaves

from .errors import Location, RenderError, ValueFault, dotted
from .layers import Layer
from .manifests import load as read_yaml
from .templating import is_template


@functools.cache
def load_schema(path: Path) -> jsonschema.protocols.Validator:
    text = path.read_text()
    schema = json.loads(text) if path.suffix == ".json" else read_yaml(text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


def check(layer: Layer, validator, what: str, prefix=(), skip_required=False,
          skip_templates=False, app: str | None = None, chart: str | None = None) -> list[RenderError]:
    """Every violation of `validator` in `layer`, each with file:line, the key path and what is expected.

    `prefix` is prepended to paths in messages when the layer's origins do not say better.
    `skip_required`: leave missing keys to a later check that sees the defaults (helm's own).
    `skip_templates`: leave template strings (not rendered yet) to the check after rendering.
    `app`, `chart`: whose values these are (the errors carry them, see ValueFault).
    """
    errors = []
    for err in sorted(validator.iter_errors(layer.data), key=lambda e: list(map(str, e.absolute_path))):
        for leaf in leaves(err):
            if skip_required and leaf.validator == "required":
                continue
            if skip_templates and is_template(leaf.instance):
                continue
            errors.append(_located(leaf, layer, what, prefix, app, chart))
    unique = {str(e): e for e in errors}
    return list(unique.values())


def _located(err, layer: Layer, what: str, prefix, app, chart) -> RenderError:
    path = tuple(err.absolute_path)
    apps = ((app, chart),) if app else ()
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set(err.schema.get("properties", {}))
        extra = sorted(k for k in err.instance if k not in allowed)
        key = extra[0] if extra else None
        known = ", ".join(sorted(allowed)) or "none"
        location = layer.locate(path + (key,)) if key is not None else layer.locate(path)
        where = _where(location, path + ((key,) if key is not None else ()), prefix)
        fault = ValueFault(where, f"unknown key {key!r}", f" (known keys here: {known})", apps)
    elif err.validator == "propertyNames":
        location = layer.locate(path)
        fault = ValueFault(_where(location, path, prefix), f"key {err.instance!r} is not allowed", f": {err.message}",
                           apps)
    else:
        location = layer.locate(path)
        if err.validator in ("oneOf", "anyOf"):  # a leaf only when every alternative's type was wrong
            message, expected = explain(err), ""
        else:
            message, expected = err.message, _expected(err)
        fault = ValueFault(_where(location, path, prefix), message, f" (expected: {expected})" if expected else "",
                           apps)
    return RenderError(fault.message(what), _file(location), fault)


def _where(location, path, prefix) -> str:
    """The key path as written in the file it came from, else as seen by the chart."""
    if location is not None and location.path:
        return dotted(location.path)
    return dotted(tuple(prefix) + tuple(path)) or "(top level)"


def _file(location):
    return None if location is None else Location(location.file, location.line)


def _expected(err) -> str:
    schema = err.schema
    if err.validator == "type":
        return " or ".join(expected_types(err))
    if err.validator == "enum":
        return "one of " + ", ".join(map(str, schema["enum"]))
    if err.validator == "pattern":
        return f"a value matching {schema['pattern']}"
    if "description" in schema:
        return schema["description"]
    return ""
