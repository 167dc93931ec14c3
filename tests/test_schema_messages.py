"""The one JSON Schema error formatter (schema_messages) that the generator, validation and training share."""

from __future__ import annotations

import ast
from pathlib import Path

import jsonschema
import pytest

from schema_messages import error_field, explain, field_path, leaves

REPO = Path(__file__).resolve().parents[1]

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "workers": {"oneOf": [
            {"type": "integer", "minimum": 1},
            {"type": "object", "additionalProperties": False, "required": ["min", "max"],
             "properties": {"min": {"type": "integer", "minimum": 1}, "max": {"type": "integer"}}},
        ]},
        "image": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": "^[a-z]+$"}]},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def problems(instance) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    return sorted(f"{field_path(error_field(leaf))}: {explain(leaf)}"
                  for e in validator.iter_errors(instance) for leaf in leaves(e))


@pytest.mark.parametrize("instance, expected", [
    ({}, ["name: required field is missing"]),
    ({"name": "a", "extra": 1}, ["extra: unknown field (known here: image, labels, name, workers)"]),
    ({"name": 3}, ["name: expected string, got integer 3"]),
    # the alternative meant: an object with a bad minimum, not "not an integer"
    ({"name": "a", "workers": {"min": 0, "max": 2}}, ["workers.min: 0 is less than the minimum of 1"]),
    ({"name": "a", "workers": {"min": 1}}, ["workers.max: required field is missing"]),
    # every alternative failed on its type: the types expected, together
    ({"name": "a", "workers": "two"}, ['workers: expected integer or object, got string "two"']),
    # the null alternative (delete a key) is never the one meant
    ({"name": "a", "image": "UPPER"}, ["image: 'UPPER' does not match '^[a-z]+$'"]),
    ({"name": "a", "labels": {"app.kubernetes.io/name": 1}},
     ['labels["app.kubernetes.io/name"]: expected string, got integer 1']),
])
def test_each_error_names_its_field_and_what_is_wrong(instance, expected):
    assert problems(instance) == expected


def test_a_valid_document_has_no_problems():
    assert problems({"name": "a", "workers": {"min": 1, "max": 3}, "image": None}) == []


def test_field_path_root_and_odd_keys():
    assert field_path([]) == "(top level)" and field_path([], root="(root)") == "(root)"
    assert field_path(["spec", "workers", 0, "app.kubernetes.io/name"]) == 'spec.workers[0]["app.kubernetes.io/name"]'


@pytest.mark.parametrize("module", ["generator/schema_check.py", "validation/schema_errors.py", "training/job/load.py"])
def test_every_stage_formats_schema_errors_through_it(module):
    """No stage keeps a formatter of its own: each imports the shared walker, and none of the old private helpers
    is back."""
    tree = ast.parse((REPO / module).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "schema_messages"
                for a in n.names}
    assert "leaves" in imported
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert not defined & {"_leaves", "_best_errors", "_field_path", "_json_type", "_preview", "_unknown_fields"}
