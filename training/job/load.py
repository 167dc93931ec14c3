"""A spec's text: read (YAML or JSON) and held against ``schema/job-spec.schema.json``, then the checks the schema
cannot say (:mod:`training.job.checks`). Everything here runs before Ray is imported, so a bad spec is rejected in
well under a second, naming the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from training.errors import SpecError

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schema"
JOB_SPEC_SCHEMA = SCHEMA_DIR / "job-spec.schema.json"
RESULT_SCHEMA = SCHEMA_DIR / "result.schema.json"

#: Environment variable with the default storage path (the RayJob chart sets it to the checkpoint PVC mount).
STORAGE_ENV = "TRAINING_STORAGE_PATH"
DEFAULT_STORAGE = "results/training"
#: Where the error result of a spec too broken to name its run goes (under the storage path).
INVALID_SPEC_NAME = "invalid-spec"
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"  # also in schema/job-spec.schema.json


def load_schema(path: Path = JOB_SPEC_SCHEMA) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def load_spec_file(path: str | os.PathLike) -> dict:
    """Read a YAML or JSON spec file into a dict (``SpecError`` if it is missing or not a mapping)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {p}") from None
    except OSError as exc:
        raise SpecError(f"cannot read spec file {p}: {exc.strerror or exc}") from None
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # yaml.YAMLError / json.JSONDecodeError
        raise SpecError(f"spec file {p} is not valid {'JSON' if p.suffix.lower() == '.json' else 'YAML'}: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"spec file {p} must contain a mapping at the top level, got {type(data).__name__}")
    return data


def validate_spec(spec: Mapping[str, Any]) -> None:
    """Raise ``SpecError`` naming the first offending field (all problems are listed in ``details``)."""
    import jsonschema

    from schema_messages import error_field, explain, field_path, leaves

    validator = jsonschema.Draft202012Validator(load_schema())
    found = {(field_path(error_field(leaf)), explain(leaf)) for e in validator.iter_errors(spec) for leaf in leaves(e)}
    if found:
        problems = sorted(found)
        lines = [f"{where}: {what}" for where, what in problems]
        raise SpecError(
            f"invalid job spec: {lines[0]}" + (f" (and {len(lines) - 1} more problem(s))" if len(lines) > 1 else ""),
            field=problems[0][0],
            details="\n".join(lines),
        )
    from training.job.checks import semantic_checks

    semantic_checks(spec)
