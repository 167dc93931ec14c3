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

from training.job import Job, thaw

HASH_LENGTH = 10


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
