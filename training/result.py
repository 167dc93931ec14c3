"""The result JSON (the original trainer's output schema plus optional extensions): build, validate, write."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from training.errors import TrainingJobError
from training.job.load import RESULT_SCHEMA, load_schema
from training.runtime import storage

RESULT_FILE = "result.json"


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become strings, numpy scalars become Python numbers, unknown objects their str()."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if isinstance(value, float) or type(value).__module__ == "numpy":
        if not math.isfinite(f):
            return str(f)
        return int(f) if type(value).__name__.startswith(("int", "uint")) else f
    return str(value)


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
    return _clean(out)


def validate_result(result: dict) -> None:
    """Raise ``jsonschema.ValidationError`` if ``result`` does not match ``schema/result.schema.json``."""
    import jsonschema

    jsonschema.Draft202012Validator(load_schema(RESULT_SCHEMA)).validate(result)


def default_result_path(run_path: str) -> str:
    """Where a run's result goes: in its run folder."""
    return storage.join(run_path, RESULT_FILE)


def write_result(result: dict, path: str) -> str:
    """Write to a local path or a storage URI; returns where it went."""
    text = json.dumps(_clean(result), indent=2, sort_keys=False) + "\n"
    if storage.is_uri(path):
        storage.write_bytes(path, text.encode())
        return path
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return path


def clean(result: dict) -> dict:
    return _clean(result)
