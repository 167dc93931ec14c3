"""The shipped result schema keeps seed 000's output schema intact, and error results validate against it."""

from __future__ import annotations

import json

from tests.training.support import SEED_000_OUTPUT_SCHEMA, assert_valid_result
from training.errors import DataError
from training.frameworks.user import load_function
from training.job import RESULT_SCHEMA
from training.result import error_result


def test_result_schema_extends_the_seed_without_changing_it():
    shipped = json.loads(RESULT_SCHEMA.read_text())
    assert shipped["required"] == SEED_000_OUTPUT_SCHEMA["required"]
    for key, seed_prop in SEED_000_OUTPUT_SCHEMA["properties"].items():
        prop = shipped["properties"][key]
        assert prop["type"] == seed_prop["type"]
        assert prop.get("enum") == seed_prop.get("enum")
        for sub, seed_sub in seed_prop.get("properties", {}).items():
            assert prop["properties"][sub]["type"] == seed_sub["type"]


def test_error_result_is_valid():
    result = error_result(DataError("data.path /x does not exist"), name="n", mode="train")
    assert_valid_result(result)
    assert result["error"] == {"type": "data", "message": "data.path /x does not exist"}
    result = error_result(RuntimeError("boom"))
    assert_valid_result(result)
    assert result["error"]["type"] == "internal" and "boom" in result["error"]["message"]


def test_load_function_module_form():
    assert load_function("os.path:basename")("/a/b") == "b"
