"""Check a Layer against a JSON Schema and turn each violation into a located, readable error."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema
import yaml

from .errors import Location, RenderError, dotted
from .layers import Layer
from .templating import is_template


@functools.cache
def load_schema(path: Path) -> jsonschema.protocols.Validator:
    text = path.read_text()
    schema = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


def check(layer: Layer, validator, what: str, prefix=(), skip_required=False,
          skip_templates=False) -> list[RenderError]:
    """Every violation of `validator` in `layer`, each with file:line, the key path and what is expected.

    `prefix` is prepended to paths in messages when the layer's origins do not say better.
    `skip_required`: leave missing keys to a later check that sees the defaults (helm's own).
    `skip_templates`: leave template strings (not rendered yet) to the check after rendering.
    """
    errors = []
    for err in sorted(validator.iter_errors(layer.data), key=lambda e: list(map(str, e.absolute_path))):
        for leaf in _leaves(err):
            if skip_required and leaf.validator == "required":
                continue
            if skip_templates and is_template(leaf.instance):
                continue
            errors.append(_located(leaf, layer, what, prefix))
    unique = {str(e): e for e in errors}
    return list(unique.values())


def _leaves(err):
    """For oneOf/anyOf, the errors of the branch that was meant (not 'is not valid under any of the given schemas')."""
    if err.validator in ("oneOf", "anyOf") and err.context:
        branches = {}
        for sub in err.context:
            if sub.validator == "type" and sub.schema.get("type") == "null":
                continue  # the `null` alternative (delete a key) is never the one meant
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        if len(branches) == 1:
            for sub in next(iter(branches.values())):
                yield from _leaves(sub)
            return
        if branches:
            yield from _leaves(jsonschema.exceptions.best_match([e for b in branches.values() for e in b]))
            return
    yield err


def _located(err, layer: Layer, what: str, prefix) -> RenderError:
    path = tuple(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set(err.schema.get("properties", {}))
        extra = sorted(k for k in err.instance if k not in allowed)
        key = extra[0] if extra else None
        known = ", ".join(sorted(allowed)) or "none"
        location = layer.locate(path + (key,)) if key is not None else layer.locate(path)
        where = _where(location, path + ((key,) if key is not None else ()), prefix)
        return RenderError(f"{where}: unknown key {key!r} in {what} (known keys here: {known})", _file(location))
    if err.validator == "propertyNames":
        location = layer.locate(path)
        return RenderError(f"{_where(location, path, prefix)}: key {err.instance!r} is not allowed in {what}: "
                           f"{err.message}", _file(location))
    location = layer.locate(path)
    expected = _expected(err)
    return RenderError(f"{_where(location, path, prefix)}: {err.message} in {what}"
                       + (f" (expected: {expected})" if expected else ""), _file(location))


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
        t = schema.get("type")
        return " or ".join(t) if isinstance(t, list) else str(t)
    if err.validator == "enum":
        return "one of " + ", ".join(map(str, schema["enum"]))
    if err.validator == "pattern":
        return f"a value matching {schema['pattern']}"
    if "description" in schema:
        return schema["description"]
    return ""
