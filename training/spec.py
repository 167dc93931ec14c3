"""The job spec: load (YAML or JSON), validate against ``schema/job-spec.schema.json``, fill in defaults.

Everything here runs before Ray is imported, so a bad spec is rejected in well under a second, naming the field.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from training.errors import SpecError

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
JOB_SPEC_SCHEMA = SCHEMA_DIR / "job-spec.schema.json"
RESULT_SCHEMA = SCHEMA_DIR / "result.schema.json"

#: Environment variable with the default storage path (the RayJob chart sets it to the checkpoint PVC mount).
STORAGE_ENV = "TRAINING_STORAGE_PATH"
DEFAULT_STORAGE = "results/training"
#: Where the error result of a spec too broken to name its run goes (under the storage path).
INVALID_SPEC_NAME = "invalid-spec"
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"  # also in schema/job-spec.schema.json

FRAMEWORK_DEFAULTS = {
    "pytorch": {"epochs": 5, "batchSize": 64, "lr": 1e-3},
    "tensorflow": {"epochs": 5, "batchSize": 64, "lr": 1e-3},
    "xgboost": {"epochs": 50, "batchSize": 64, "lr": 0.3},
}


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


def _field_path(error) -> str:
    """JSON-path-like name of the field an error is about (``trainConfig.framework``, ``config.numWorkers``)."""
    parts = list(error.absolute_path)
    # "required" errors point at the parent; name the missing child instead.
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        parts.append(missing)
    elif error.validator == "additionalProperties":
        extra = error.message.split("'")[1] if "'" in error.message else ""
        parts.append(extra)
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _best_errors(errors):
    """Flatten if/then, anyOf and oneOf wrappers down to the errors that say what is wrong. Of the alternatives'
    errors, a wrong type only counts when every alternative's is one (``{min: 0}`` is a bad minimum, not "not an
    integer")."""
    out = []
    for err in errors:
        if err.context:
            inner = _best_errors(err.context)
            if err.validator in ("oneOf", "anyOf") and any(e.validator != "type" for e in inner):
                inner = [e for e in inner if e.validator != "type"]
            out.extend(inner)
        else:
            out.append(err)
    return out


def validate_spec(spec: Mapping[str, Any]) -> None:
    """Raise ``SpecError`` naming the first offending field (all problems are listed in ``details``)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(_best_errors(validator.iter_errors(spec)), key=lambda e: (_field_path(e), e.message))
    if errors:
        lines = [f"{_field_path(e)}: {e.message}" for e in errors]
        first = errors[0]
        raise SpecError(
            f"invalid job spec: {lines[0]}" + (f" (and {len(lines) - 1} more problem(s))" if len(lines) > 1 else ""),
            field=_field_path(first),
            details="\n".join(lines),
        )
    _semantic_checks(spec)


def _semantic_checks(spec: Mapping[str, Any]) -> None:
    """What the schema cannot say well."""
    cfg = spec.get("config", {})
    tc = spec.get("trainConfig", {})
    sc = tc.get("scalingConfig", {})
    use_gpu = sc.get("useGpu", cfg.get("useGpu", False))
    gpu = sc.get("resourcesPerWorker", {}).get("gpu", cfg.get("resourcesPerWorker", {}).get("gpu"))
    if use_gpu and gpu == 0:
        where = "trainConfig.scalingConfig" if "useGpu" in sc else "config"
        raise SpecError(f"{where}.resourcesPerWorker.gpu is 0 but {where}.useGpu is true", field=f"{where}.resourcesPerWorker.gpu")
    data = spec.get("data", {})
    if data.get("path") and data.get("source", "digits") != "cifar10":
        raise SpecError("data.path is only read for data.source: cifar10", field="data.path")
    workers = sc.get("numWorkers", cfg.get("numWorkers"))
    if isinstance(workers, dict):
        where = "trainConfig.scalingConfig.numWorkers" if "numWorkers" in sc else "config.numWorkers"
        if workers["min"] > workers["max"]:
            raise SpecError(f"{where}: min {workers['min']} is above max {workers['max']}", field=where)
        if spec.get("mode") != "train":
            raise SpecError(f"{where}: an elastic {{min, max}} is for mode train (a Tune trial's workers are fixed)",
                            field=where)
    if tc.get("collectiveTimeoutSeconds") and tc.get("framework", "pytorch") != "pytorch":
        raise SpecError("trainConfig.collectiveTimeoutSeconds is the PyTorch process group's timeout: framework "
                        f"{tc.get('framework')!r} has none", field="trainConfig.collectiveTimeoutSeconds")
    ck = spec.get("checkpoint", {})
    if ck.get("keepBest") and ck.get("metric") == "":
        raise SpecError("checkpoint.metric must name a metric", field="checkpoint.metric")
    if spec.get("mode") == "tune":
        from training.tune_spec import semantic_checks

        semantic_checks(spec)


def _abs_storage(path: str, base: Path | None = None) -> str:
    """Local paths become absolute; URIs (s3://, gs://, file://...) stay as they are."""
    if "://" in path:
        return path
    p = Path(os.path.expanduser(path))
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    return str(p.resolve())


def normalize(spec: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict:
    """A validated spec with every default filled in: the plain dict that the driver and every worker use."""
    environ = os.environ if environ is None else environ
    spec = copy.deepcopy(dict(spec))
    cfg = spec.get("config", {}) or {}
    tc = spec.get("trainConfig", {}) or {}
    sc = tc.get("scalingConfig", {}) or {}
    data = spec.get("data", {}) or {}
    ck = spec.get("checkpoint", {}) or {}
    framework = tc.get("framework") or ("pytorch" if spec["mode"] == "tune" else None)
    fdefaults = FRAMEWORK_DEFAULTS.get(framework or "pytorch")

    rpw = {**(cfg.get("resourcesPerWorker") or {}), **(sc.get("resourcesPerWorker") or {})}
    use_gpu = bool(sc.get("useGpu", cfg.get("useGpu", False))) or float(rpw.get("gpu", 0) or 0) > 0
    gpu = float(rpw.get("gpu", 1 if use_gpu else 0))

    storage = ck.get("storagePath") or environ.get(STORAGE_ENV) or DEFAULT_STORAGE
    storage_source = "spec" if ck.get("storagePath") else (STORAGE_ENV if environ.get(STORAGE_ENV) else "default")
    resume_from = ck.get("resumeFrom")
    workers = sc.get("numWorkers", cfg.get("numWorkers", 1))
    elastic = isinstance(workers, dict)

    job = {
        "name": spec.get("name"),
        "nameSource": "spec" if spec.get("name") else "derived",
        "mode": spec["mode"],
        "numWorkers": int(workers["max"] if elastic else workers),
        "minWorkers": int(workers["min"]) if elastic else None,
        "healthCheck": dict(cfg.get("healthCheck") or {}),
        "collectiveTimeoutSeconds": tc.get("collectiveTimeoutSeconds"),
        "useGpu": use_gpu,
        "cpuPerWorker": float(rpw.get("cpu", 1)),
        "gpuPerWorker": gpu,
        "placementStrategy": sc.get("placementStrategy", "PACK"),
        "resourceWaitSeconds": float(cfg.get("resourceWaitSeconds", 30)),
        "framework": framework,
        "trainerPath": tc.get("trainerPath"),
        "epochs": int(tc.get("epochs", fdefaults["epochs"])),
        "batchSize": int(tc.get("batchSize", fdefaults["batchSize"])),
        "lr": float(tc.get("lr", fdefaults["lr"])),
        "seed": int(tc.get("seed", 42)),
        "model": {
            "filters": list((tc.get("model") or {}).get("filters", [64, 128, 256])),
            "dense": int((tc.get("model") or {}).get("dense", 512)),
            "convDropout": float((tc.get("model") or {}).get("convDropout", 0.25)),
            "denseDropout": float((tc.get("model") or {}).get("denseDropout", 0.5)),
        },
        "xgboost": dict(tc.get("xgboost") or {}),
        "params": dict(tc.get("params") or {}),
        "data": {
            "source": data.get("source", "digits"),
            "path": (_abs_storage(data["path"]) if data.get("path") else None),
            "validationFraction": float(data.get("validationFraction", 0.2)),
            "maxTrainSamples": data.get("maxTrainSamples"),
            "maxValSamples": data.get("maxValSamples"),
            "numSamples": int(data.get("numSamples", 2048)),
            "verifyOnDriver": bool(data.get("verifyOnDriver", True)),
        },
        "checkpoint": {
            "storagePath": _abs_storage(storage),
            "storageSource": storage_source,
            "everyEpochs": int(ck.get("everyEpochs", 1)),
            "keepBest": ck.get("keepBest"),
            "metric": ck.get("metric", "val_accuracy"),
            "metricMode": ck.get("metricMode", "max"),
            "maxFailures": int(ck.get("maxFailures", 2)),
            "resumeFrom": _abs_storage(resume_from) if resume_from else None,
        },
        "tuneConfig": spec.get("tuneConfig"),
        "spec": spec,
    }
    if job["mode"] == "tune":
        from training.tune_spec import normalize_tune

        job["tune"] = normalize_tune(spec, job)
    if not job["name"]:
        from training.identity import derived_name

        job["name"] = derived_name(job)
    return job


def load_job(path: str | os.PathLike, environ: Mapping[str, str] | None = None) -> dict:
    """Load, validate and normalize a spec file."""
    spec = load_spec_file(path)
    validate_spec(spec)
    return normalize(spec, environ)


def run_path(job: Mapping[str, Any]) -> str:
    """``<storage>/<name>``: Ray Train's run folder, where checkpoints and result.json go."""
    storage = job["checkpoint"]["storagePath"]
    return storage.rstrip("/") + "/" + job["name"]


def hyperparameters(job: Mapping[str, Any]) -> dict:
    """What ``results.bestConfig`` reports: the knobs that shaped this run."""
    out = {
        "framework": job["framework"],
        "numWorkers": job["numWorkers"],
        "epochs": job["epochs"],
        "batchSize": job["batchSize"],
        "lr": job["lr"],
        "seed": job["seed"],
        "dataSource": job["data"]["source"],
    }
    if job["framework"] == "xgboost":
        out["xgboost"] = job["xgboost"]
    elif not job["trainerPath"]:
        out["model"] = job["model"]
    if job["trainerPath"]:
        out["trainerPath"] = job["trainerPath"]
        out["params"] = job["params"]
    return out
