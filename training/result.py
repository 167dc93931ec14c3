"""The result JSON (the original trainer's output schema plus optional extensions): build, validate, write."""

from __future__ import annotations

import json
from typing import Any

from training.errors import TrainingJobError
from training.job.load import RESULT_SCHEMA, load_schema
from training.runtime import storage

RESULT_FILE = "result.json"


def error_result(err: BaseException, *, name: str | None = None, mode: str | None = None,
                 cluster: dict | None = None, training_time: float = 0.0, timings: dict | None = None) -> dict:
    if isinstance(err, TrainingJobError):
        error = err.to_dict()
    else:
        error = {"type": "internal", "message": f"{type(err).__name__}: {err}"}
    out: dict[str, Any] = {
        "status": "error",
        "results": {},
        "trainingTime": round(float(training_time), 3),
        "error": error,
    }
    if name:
        out["name"] = name
    if mode:
        out["mode"] = mode
    if cluster:
        out["clusterStatus"] = cluster
    if timings:
        out["timings"] = timings
    return storage.json_safe(out)


def validate_result(result: dict) -> None:
    """Raise ``jsonschema.ValidationError`` if ``result`` does not match ``schema/result.schema.json``."""
    import jsonschema

    jsonschema.Draft202012Validator(load_schema(RESULT_SCHEMA)).validate(result)


def default_result_path(run_path: str) -> str:
    """Where a run's result goes: in its run folder."""
    return storage.join(run_path, RESULT_FILE)


def write_result(result: dict, path: str) -> str:
    """Write to a local path or a storage URI; returns where it went."""
    storage.write_bytes(path, (json.dumps(storage.json_safe(result), indent=2, sort_keys=False) + "\n").encode())
    return path


def clean(result: dict) -> dict:
    """The result as JSON can hold it."""
    return storage.json_safe(result)
