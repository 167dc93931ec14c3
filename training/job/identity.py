"""A run's identity when its spec has no ``name``: derived from what the spec trains.

Two specs that train the same thing get the same name, so re-submitting a spec resumes its own run; two specs that
train different things never share a run folder, checkpoints or a Tune experiment. What counts is what changes the
trained model (or the search): the mode, framework and trainer, the data, the model and its hyperparameters, the
number of workers (the effective batch), and in mode tune the search itself. Operational fields do not: the storage
path, resources per worker, waits, retries, checkpoint cadence and health checks. Neither do ``trainConfig.epochs``
in mode train: raising them continues the same run, as it does for a named run.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from training.errors import SpecError
from training.job.parts import Job, thaw

HASH_LENGTH = 10
IDENTITY_FILE = "identity.json"  # in the run folder: what the run trains, written when it starts


def identity_fields(job: Job) -> dict[str, Any]:
    """The normalized fields that name a run (see the module's docstring)."""
    t, d = job.training, job.data
    fields: dict[str, Any] = {
        "mode": job.mode,
        "framework": t.framework,
        "trainerPath": t.trainer_path,
        "numWorkers": [job.workers.min_count, job.workers.count],
        "batchSize": t.batch_size,
        "lr": t.lr,
        "seed": t.seed,
        "model": t.model.as_spec() if t.builtin_model else None,
        "xgboost": thaw(t.xgboost),
        "params": thaw(t.params),
        "data": {"source": d.source, "path": d.path, "validationFraction": d.validation_fraction,
                 "maxTrainSamples": d.max_train_samples, "maxValSamples": d.max_val_samples,
                 "numSamples": d.num_samples},
    }
    if job.mode == "tune":
        fields["epochs"] = t.epochs
        fields["tune"] = job.tune.identity()
    return fields


def derived_name(job: Job) -> str:
    """``<mode>-<framework>-<10 hex digits>``; ``cluster`` for mode cluster (it keeps no run folder of its own)."""
    if job.mode == "cluster":
        return "cluster"
    text = json.dumps(identity_fields(job), sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]
    return f"{job.mode}-{job.training.framework}-{digest}"


def _normalized(job: Job) -> dict[str, Any]:
    return json.loads(json.dumps(identity_fields(job), sort_keys=True, default=str))


def record(job: Job) -> None:
    """Keep what the run trains beside its checkpoints (once: the run's first start writes it)."""
    from training.runtime import storage

    path = storage.join(job.run_path, IDENTITY_FILE)
    if not storage.exists(path):
        storage.write_bytes(path, json.dumps(_normalized(job), indent=2, sort_keys=True).encode())


def check_same_run(job: Job) -> None:
    """Refuse to continue a run that was trained with other settings: a named job whose learning rate, batch,
    model or data changed would otherwise resume the old weights under the new settings (or, finished, train
    nothing more and report the old metrics). The same spec again (make retry, more epochs) continues."""
    from training.runtime import storage

    path = storage.join(job.run_path, IDENTITY_FILE)
    if not storage.exists(path):
        return
    stored = json.loads(storage.read_bytes(path))
    current = _normalized(job)
    changed = sorted(k for k in set(stored) | set(current) if stored.get(k) != current.get(k))
    if not changed:
        return
    shown = "; ".join(f"{k}: {json.dumps(stored.get(k))} -> {json.dumps(current.get(k))}" for k in changed)
    raise SpecError(
        f"run {job.name!r} at {job.run_path} was trained with other settings ({shown}): continuing it would resume "
        f"its weights under the new ones", field="name",
        details="to start fresh, give the job spec a new name (or remove the run folder); to continue those "
                "weights on purpose, give it a new name and set checkpoint.resumeFrom to the old run's checkpoint")
