"""The job spec: load (YAML or JSON), validate against ``schema/job-spec.schema.json``, fill in defaults.

Everything here runs before Ray is imported, so a bad spec is rejected in well under a second, naming the field.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from training.errors import SpecError
from training.job import Checkpoint, Data, Job, Model, Training, Workers, freeze

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


def normalize(spec: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Job:
    """A validated spec with every default filled in: the typed, immutable job the driver and every worker use."""
    environ = os.environ if environ is None else environ
    tc = spec.get("trainConfig", {}) or {}
    mode = spec["mode"]
    training = _training(tc, tc.get("framework") or "pytorch")
    job = Job(
        name=spec.get("name") or "",
        name_source="spec" if spec.get("name") else "derived",
        mode=mode,
        workers=_workers(spec.get("config", {}) or {}, tc.get("scalingConfig", {}) or {}),
        training=training,
        data=data_block(spec.get("data", {}) or {}),
        checkpoint=_checkpoint(spec.get("checkpoint", {}) or {}, environ),
    )
    if mode == "tune":
        from training.tune_spec import normalize_tune

        job = dataclasses.replace(job, tune=normalize_tune(spec.get("tuneConfig") or {}, job.training, job.workers))
    if not job.name:
        from training.identity import derived_name

        job = dataclasses.replace(job, name=derived_name(job))
    return job


def _workers(cfg: Mapping[str, Any], sc: Mapping[str, Any]) -> Workers:
    """How many workers and what each holds: ``trainConfig.scalingConfig`` over ``config``."""
    rpw = {**(cfg.get("resourcesPerWorker") or {}), **(sc.get("resourcesPerWorker") or {})}
    use_gpu = bool(sc.get("useGpu", cfg.get("useGpu", False))) or float(rpw.get("gpu", 0) or 0) > 0
    workers = sc.get("numWorkers", cfg.get("numWorkers", 1))
    elastic = isinstance(workers, dict)
    return Workers(
        count=int(workers["max"] if elastic else workers),
        min_count=int(workers["min"]) if elastic else None,
        use_gpu=use_gpu,
        cpu=float(rpw.get("cpu", 1)),
        gpu=float(rpw.get("gpu", 1 if use_gpu else 0)),
        placement_strategy=sc.get("placementStrategy", "PACK"),
        resource_wait_s=float(cfg.get("resourceWaitSeconds", 30)),
        health_check=freeze(cfg.get("healthCheck") or {}),
    )


def _training(tc: Mapping[str, Any], framework: str) -> Training:
    """What is trained and how: the framework's defaults under ``trainConfig``."""
    fdefaults = FRAMEWORK_DEFAULTS[framework]
    model = tc.get("model") or {}
    default = Model()
    timeout = tc.get("collectiveTimeoutSeconds")
    return Training(
        framework=framework,
        trainer_path=tc.get("trainerPath"),
        epochs=int(tc.get("epochs", fdefaults["epochs"])),
        batch_size=int(tc.get("batchSize", fdefaults["batchSize"])),
        lr=float(tc.get("lr", fdefaults["lr"])),
        seed=int(tc.get("seed", 42)),
        model=Model(
            filters=tuple(model.get("filters", default.filters)),
            dense=int(model.get("dense", default.dense)),
            conv_dropout=float(model.get("convDropout", default.conv_dropout)),
            dense_dropout=float(model.get("denseDropout", default.dense_dropout)),
        ),
        xgboost=freeze(tc.get("xgboost") or {}),
        params=freeze(tc.get("params") or {}),
        collective_timeout_s=int(timeout) if timeout else None,
    )


def data_block(data: Mapping[str, Any]) -> Data:
    """A spec's ``data`` block (validated) with its defaults, as the data loaders take it."""
    return Data(
        source=data.get("source", "digits"),
        path=(_abs_storage(data["path"]) if data.get("path") else None),
        validation_fraction=float(data.get("validationFraction", 0.2)),
        max_train_samples=data.get("maxTrainSamples"),
        max_val_samples=data.get("maxValSamples"),
        num_samples=int(data.get("numSamples", 2048)),
        verify_on_driver=bool(data.get("verifyOnDriver", True)),
    )


def _checkpoint(ck: Mapping[str, Any], environ: Mapping[str, str]) -> Checkpoint:
    """Where checkpoints go (the spec, else $TRAINING_STORAGE_PATH, else the default folder) and how many stay."""
    storage = ck.get("storagePath") or environ.get(STORAGE_ENV) or DEFAULT_STORAGE
    resume_from = ck.get("resumeFrom")
    return Checkpoint(
        storage_path=_abs_storage(storage),
        storage_source="spec" if ck.get("storagePath") else (STORAGE_ENV if environ.get(STORAGE_ENV) else "default"),
        every_epochs=int(ck.get("everyEpochs", 1)),
        keep_best=ck.get("keepBest"),
        metric=ck.get("metric", "val_accuracy"),
        metric_mode=ck.get("metricMode", "max"),
        max_failures=int(ck.get("maxFailures", 2)),
        resume_from=_abs_storage(resume_from) if resume_from else None,
    )


def load_job(path: str | os.PathLike, environ: Mapping[str, str] | None = None) -> Job:
    """Load, validate and normalize a spec file."""
    spec = load_spec_file(path)
    validate_spec(spec)
    return normalize(spec, environ)
