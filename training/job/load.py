"""A spec's text: read (YAML or JSON), the command line's overrides applied, and held against
``schema/job-spec.schema.json``. Everything in training/job/ runs before Ray is imported, so a bad spec is rejected in
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


def check_schema(spec: Mapping[str, Any]) -> None:
    """Raise ``SpecError`` naming the first field the schema refuses (all problems are listed in ``details``)."""
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


def apply_overrides(spec: dict[str, Any], sets: list[str] | None = None, num_samples: int | None = None) -> list[str]:
    """``--set a.b=value`` (value parsed as YAML) and ``--num-samples N`` on a raw spec, before validation.
    Returns what was changed, for the log and the result."""
    import yaml

    changed = []
    for item in sets or []:
        if "=" not in item:
            raise SpecError(f"--set {item!r} must look like path.to.field=value", field="--set")
        path, raw = item.split("=", 1)
        path = path.strip()
        if not path or any(not p for p in path.split(".")):
            raise SpecError(f"--set {item!r}: empty field name", field="--set")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise SpecError(f"--set {item!r}: the value is not valid YAML ({exc})", field="--set") from None
        node = spec
        *parents, leaf = path.split(".")
        for p in parents:
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise SpecError(f"--set {item!r}: {p} is not a mapping in the spec", field="--set")
            node = nxt
        node[leaf] = value
        changed.append(f"{path}={value!r}")
    if num_samples is not None:
        if num_samples < 1:
            raise SpecError("--num-samples must be at least 1", field="tuneConfig.numSamples")
        tc = spec.get("tuneConfig")
        if not isinstance(tc, dict):
            raise SpecError("--num-samples needs a tuneConfig in the spec (mode: tune)", field="tuneConfig.numSamples")
        tc["numSamples"] = int(num_samples)
        changed.append(f"tuneConfig.numSamples={num_samples}")
    return changed
